//! A snapshot file whose length fields claim more than the file holds is
//! refused with an error, never a panic or an allocation of the claimed
//! size, even when its checksum matches (found by fuzzing: `fuzz/`,
//! target `snapshot_file`; a data length near `u64::MAX` overflowed the
//! offset arithmetic, a panic in debug builds).
//!
//! - given: a well-formed snapshot file whose meta or data length field is
//!   replaced (4 GiB, `u64::MAX`, `u64::MAX - 7`, `u32::MAX`) and whose
//!   crc32 is recomputed;
//! - when: `decode_snapshot_file` reads it;
//! - then: it fails naming a truncated file, and the intact file decodes.

use raft_store::codec;
use raft_store::state_machine::decode_snapshot_file;
use raft_store::types::typ::SnapshotMeta;

fn file(meta_len: Option<u32>, data_len: Option<u64>, data: &[u8]) -> Vec<u8> {
    let meta = codec::encode(&SnapshotMeta::default());
    let mut out = b"OSSNAP01".to_vec();
    out.extend_from_slice(&meta_len.unwrap_or(meta.len() as u32).to_le_bytes());
    out.extend_from_slice(&meta);
    out.extend_from_slice(&data_len.unwrap_or(data.len() as u64).to_le_bytes());
    out.extend_from_slice(data);
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

#[test]
fn length_fields_past_the_file_are_refused_without_panic() {
    let data = b"state bytes";
    let (_, decoded) = decode_snapshot_file(&file(None, None, data))
        .unwrap_or_else(|e| panic!("the intact file is refused: {e}"));
    assert_eq!(decoded, data);
    for (meta_len, data_len) in [
        (None, Some(4 * 1024 * 1024 * 1024)),
        (None, Some(u64::MAX)),
        (None, Some(u64::MAX - 7)),
        (Some(u32::MAX), None),
    ] {
        match decode_snapshot_file(&file(meta_len, data_len, data)) {
            Ok(_) => panic!("meta length {meta_len:?}, data length {data_len:?}: accepted"),
            Err(problem) => assert!(
                problem.contains("truncated") || problem.contains("overflows"),
                "meta length {meta_len:?}, data length {data_len:?}: {problem}"
            ),
        }
    }
}
