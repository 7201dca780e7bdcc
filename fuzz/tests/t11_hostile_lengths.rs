//! Length fields that claim far more than the input holds are refused
//! with a typed error before anything is allocated for them (the allocator
//! cap aborts the test otherwise), and the seeds the corpus starts from are
//! real encodings the decoders accept (a seed that no longer decodes would
//! leave the fuzzer starting from noise).

use gateway_plugin::state::GatewayState;
use raft_store::codec;
use raft_store::state_machine::decode_snapshot_file;
use raft_store::StateMachine;

#[global_allocator]
static ALLOC: fuzz::CappedAlloc = fuzz::CappedAlloc;

const FOUR_GIB: u64 = 4 * 1024 * 1024 * 1024;

fn seed(target: &str, name: &str) -> Vec<u8> {
    fuzz::seeds::all()
        .into_iter()
        .find(|s| s.target == target && s.name == name)
        .unwrap_or_else(|| panic!("no seed {target}/{name}"))
        .bytes
}

/// A snapshot file body with its length fields replaced, and the crc32 a
/// writer would append.
fn snapshot_file(meta_len: Option<u32>, data_len: u64) -> Vec<u8> {
    // seed-current_snap_crc_fixed: selector, then the body without crc.
    let body = seed("snapshot_file", "current_snap_crc_fixed")[1..].to_vec();
    let real_meta_len = u32::from_le_bytes([body[8], body[9], body[10], body[11]]) as usize;
    let mut out = body[..8].to_vec();
    out.extend_from_slice(&meta_len.unwrap_or(real_meta_len as u32).to_le_bytes());
    out.extend_from_slice(&body[12..12 + real_meta_len]);
    out.extend_from_slice(&data_len.to_le_bytes());
    out.extend_from_slice(&body[12 + real_meta_len + 8..]);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

#[test]
fn snapshot_file_length_fields_past_the_file_are_refused() {
    for (meta_len, data_len) in [
        (None, FOUR_GIB),
        (None, u64::MAX),
        (None, u64::MAX - 7),
        (Some(u32::MAX), 0),
    ] {
        let file = snapshot_file(meta_len, data_len);
        match decode_snapshot_file(&file) {
            Ok(_) => panic!("meta length {meta_len:?}, data length {data_len}: accepted"),
            Err(problem) => assert!(
                problem.contains("truncated") || problem.contains("overflows"),
                "meta length {meta_len:?}, data length {data_len}: {problem}"
            ),
        }
    }
    let intact = snapshot_file(None, {
        let body = seed("snapshot_file", "current_snap_crc_fixed");
        let meta_len = u32::from_le_bytes([body[9], body[10], body[11], body[12]]) as usize;
        (body.len() - 1 - 12 - meta_len - 8) as u64
    });
    if let Err(e) = decode_snapshot_file(&intact) {
        panic!("the rebuilt intact file is refused: {e}");
    }
}

#[test]
fn raft_rpc_sequences_claiming_four_gib_are_refused() {
    // InstallSnapshotRequest: vote, meta, offset, then `data` (u64 length
    // + bytes), then done. Replace the data length with 4 GiB.
    let seed = seed("raft_rpc", "install_snapshot");
    let request: openraft::raft::InstallSnapshotRequest<raft_store::TypeConfig> =
        codec::decode(&seed[1..], "seed").unwrap_or_else(|e| panic!("{e}"));
    let data_len = request.data.len() as u64;
    let bytes = &seed[1..];
    let at = bytes
        .windows(8)
        .position(|w| w == data_len.to_le_bytes())
        .unwrap_or_else(|| panic!("no data length in the seed"));
    let mut hostile = bytes.to_vec();
    hostile[at..at + 8].copy_from_slice(&FOUR_GIB.to_le_bytes());
    let decoded: Result<openraft::raft::InstallSnapshotRequest<raft_store::TypeConfig>, _> =
        codec::decode(&hostile, "hostile");
    assert!(
        decoded.is_err(),
        "a 4 GiB data field in a short message decoded"
    );

    // A log entry batch (`Command`): a sequence of byte strings whose count
    // and lengths claim 4 GiB.
    let mut batch = FOUR_GIB.to_le_bytes().to_vec();
    batch.extend_from_slice(&FOUR_GIB.to_le_bytes());
    batch.extend_from_slice(b"short");
    assert!(codec::decode::<raft_store::types::Command>(&batch, "hostile").is_err());
}

#[test]
fn a_backup_header_claiming_four_gib_is_refused() {
    let seed = seed("backup_file", "backup");
    let text = String::from_utf8_lossy(&seed).into_owned();
    let start = text
        .find("\"bytes\":")
        .unwrap_or_else(|| panic!("no bytes field"))
        + 8;
    let end = start
        + text[start..]
            .find(',')
            .unwrap_or_else(|| panic!("no comma"));
    let hostile = format!("{}{FOUR_GIB}{}", &text[..start], &text[end..]);
    let path = fuzz::targets::scratch_file("t11-backup", hostile.as_bytes());
    let read = proto::backup::read(&path);
    let _ = std::fs::remove_file(&path);
    match read {
        Ok(_) => panic!("a backup claiming 4 GiB of state was read"),
        Err(e) => assert!(e.problem.contains("truncated"), "{e}"),
    }
}

#[test]
fn the_seeds_are_encodings_the_decoders_accept() {
    let snap = seed("snapshot_file", "current_snap");
    let (_, data) = decode_snapshot_file(&snap[1..]).unwrap_or_else(|e| panic!("{e}"));
    GatewayState::restore(&data).unwrap_or_else(|e| panic!("{e}"));
    GatewayState::restore(&seed("state_restore", "gateway")[1..]).unwrap_or_else(|e| panic!("{e}"));
    pool::PoolState::decode_snapshot(&seed("state_restore", "pool")[1..])
        .unwrap_or_else(|e| panic!("{e}"));
    for command in fuzz::seeds::commands() {
        GatewayState::validate(&command).unwrap_or_else(|e| panic!("{e}"));
    }
    let state = fuzz::seeds::gateway_state();
    assert!(state.objects.len() >= 2, "the seed state holds objects");
    assert!(
        state.pool.encode_snapshot().len() > 100,
        "the seed state holds pool records"
    );
    let path = fuzz::targets::scratch_file("t11-backup-ok", &seed("backup_file", "backup"));
    let read = proto::backup::read(&path);
    let _ = std::fs::remove_file(&path);
    read.unwrap_or_else(|e| panic!("{e}"));
    let path =
        fuzz::targets::scratch_file("t11-gateway.toml", fuzz::seeds::GATEWAY_TOML.as_bytes());
    let section = gateway_plugin::config::read_file(&path);
    let _ = std::fs::remove_file(&path);
    section.unwrap_or_else(|e| panic!("{e}"));
    let settings = String::from_utf8_lossy(&seed("config", "supervisor")[1..]).into_owned();
    fuzz::targets::config::supervisor_settings(&settings)
        .validate()
        .unwrap_or_else(|e| panic!("{e}"));
}
