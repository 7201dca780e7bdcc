//! Seeds: real encodings of what each target decodes, made by the
//! project's own encoders (`fuzz-seeds` writes them as the corpus the
//! fuzzer starts from; the replay test runs them too).
//!
//! Every seed starts with the selector byte of the decoder it is meant for
//! (see each target's module doc), except for targets without a selector
//! (`forward_command`, `backup_file`, `page_token`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};

use gateway_plugin::state::GatewayState;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{BasicNode, CommittedLeaderId, EntryPayload, Membership};
use proto::objects::{object_command, precondition, DeleteRequest, Object, ObjectCommand};
use proto::objects::{Precondition, PutRequest};
use raft_store::codec;
use raft_store::types::typ::{Entry, LogId, RaftError, SnapshotMeta, StoredMembership, Vote};
use raft_store::types::Command;
use raft_store::StateMachine;

/// One seed: the target it belongs to, a file name, the bytes.
pub struct Seed {
    /// Target name ([`crate::targets::TARGETS`]).
    pub target: &'static str,
    /// File name inside `corpus/<target>/`.
    pub name: String,
    /// The input.
    pub bytes: Vec<u8>,
}

/// Every seed of every target.
pub fn all() -> Vec<Seed> {
    let mut seeds = Vec::new();
    raft_rpc(&mut seeds);
    state(&mut seeds);
    grant(&mut seeds);
    config(&mut seeds);
    seeds
}

/// The log commands the seed state applies: pool membership, launches, a
/// report, a drain, a runtime record, a stop and a delete, and object
/// puts and a delete.
pub fn commands() -> Vec<Vec<u8>> {
    use pool::Command as C;
    let join = |m: &str, pid: u64| {
        C::Join(pool::Join {
            member: m.into(),
            uid: format!("uid-{m}"),
            address: format!("10.0.0.{pid}:7000"),
            capacity: 4,
            process_id: pid,
            ..pool::Join::default()
        })
    };
    let launch = |n: u32| {
        C::Launch(pool::Launch {
            launch_id: format!("launch-{n}"),
            sandbox: format!("sb-{n}"),
            material_ref: format!("material/{n}"),
        })
    };
    let pool = [
        C::LeaderChanged(pool::LeaderChanged { raft_term: 1 }),
        C::Configure(pool::Configure {
            heartbeat_ttl_ticks: 8,
            recovery_deadline_ticks: 240,
            operation_deadline_ticks: 2400,
            ..pool::Configure::default()
        }),
        join("m1", 11),
        join("m2", 12),
        C::Tick(pool::Tick {
            raft_term: 0,
            expected_now_tick: 0,
        }),
        C::Heartbeat(pool::Heartbeat {
            beats: vec![pool::Beat {
                member: "m1".into(),
                incarnation: 1,
            }],
        }),
        launch(1),
        launch(2),
        C::Report(pool::Report {
            sandbox: "sb-1".into(),
            generation: 1,
            member: "m1".into(),
            incarnation: 1,
            term: 1,
            status: "ready".into(),
        }),
        C::RecordRuntime(pool::RecordRuntime {
            raft_term: 0,
            sandbox: "sb-1".into(),
            generation: 1,
            name: "rt-1".into(),
            address: "127.0.0.1:7300".into(),
            ca_pem: String::new(),
            driver_scope: "process:0123456789abcdef0123456789abcdef".into(),
        }),
        C::StartDrain(pool::StartDrain {
            operation_id: "op-1".into(),
            member: "m2".into(),
            max_parallel: 1,
        }),
        C::Stop(pool::Stop {
            sandbox: "sb-2".into(),
            generation: 1,
        }),
        C::Delete(pool::Delete {
            raft_term: 0,
            sandbox: "sb-2".into(),
            generation: 1,
        }),
        C::Tick(pool::Tick {
            raft_term: 0,
            expected_now_tick: 1,
        }),
    ];
    let mut out: Vec<Vec<u8>> = pool.iter().map(GatewayState::pool_command).collect();
    for (id, scope) in [("a", "team-a"), ("b", ""), ("c", "team-a")] {
        out.push(GatewayState::object_command(put(id, scope)));
    }
    out.push(GatewayState::object_command(ObjectCommand {
        op: Some(object_command::Op::Delete(DeleteRequest {
            r#type: "sandbox".into(),
            id: "b".into(),
            precondition: Some(Precondition {
                kind: Some(precondition::Kind::Unconditional(true)),
            }),
            request_id: String::new(),
        })),
    }));
    out
}

fn put(id: &str, scope: &str) -> ObjectCommand {
    ObjectCommand {
        op: Some(object_command::Op::Put(PutRequest {
            object: Some(Object {
                id: id.into(),
                r#type: "sandbox".into(),
                name: format!("name-{id}"),
                scope: scope.into(),
                version: "v1".into(),
                status: "{\"phase\":\"ready\"}".into(),
                payload: vec![1, 2, 3],
                resource_version: 0,
            }),
            precondition: Some(Precondition {
                kind: Some(precondition::Kind::MustCreate(true)),
            }),
            request_id: String::new(),
        })),
    }
}

/// The gateway state after [`commands`], applied at log indexes 1, 2, ...
/// (only commands that validate).
pub fn gateway_state() -> GatewayState {
    let mut state = GatewayState::default();
    for (i, command) in commands().iter().enumerate() {
        if GatewayState::validate(command).is_ok() {
            state.apply(i as u64 + 1, command);
        }
    }
    state
}

fn push(
    seeds: &mut Vec<Seed>,
    target: &'static str,
    name: &str,
    selector: Option<u8>,
    bytes: &[u8],
) {
    let mut input = selector.map(|s| vec![s]).unwrap_or_default();
    input.extend_from_slice(bytes);
    seeds.push(Seed {
        target,
        name: name.to_string(),
        bytes: input,
    });
}

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn membership() -> Membership<u64, BasicNode> {
    let nodes: BTreeMap<u64, BasicNode> = (1..=3)
        .map(|id| (id, BasicNode::new(format!("127.0.0.1:{}", 7100 + id))))
        .collect();
    Membership::new(vec![BTreeSet::from([1, 2, 3])], nodes)
}

fn snapshot_meta() -> SnapshotMeta {
    SnapshotMeta {
        last_log_id: Some(log_id(2, 17)),
        last_membership: StoredMembership::new(Some(log_id(1, 1)), membership()),
        snapshot_id: "2-17-1".into(),
    }
}

fn raft_rpc(seeds: &mut Vec<Seed>) {
    let vote = Vote::new_committed(2, 1);
    let entries: Vec<Entry> = vec![
        Entry {
            log_id: log_id(2, 16),
            payload: EntryPayload::Blank,
        },
        Entry {
            log_id: log_id(2, 17),
            payload: EntryPayload::Normal(Command(commands().into_iter().take(3).collect())),
        },
        Entry {
            log_id: log_id(2, 18),
            payload: EntryPayload::Membership(membership()),
        },
    ];
    let append = AppendEntriesRequest::<raft_store::TypeConfig> {
        vote,
        prev_log_id: Some(log_id(1, 15)),
        entries: entries.clone(),
        leader_commit: Some(log_id(2, 16)),
    };
    let r = "raft_rpc";
    push(seeds, r, "append_entries", Some(0), &codec::encode(&append));
    let vote_request = VoteRequest::new(Vote::new(3, 2), Some(log_id(2, 18)));
    push(seeds, r, "vote", Some(1), &codec::encode(&vote_request));
    let install = InstallSnapshotRequest::<raft_store::TypeConfig> {
        vote,
        meta: snapshot_meta(),
        offset: 0,
        data: gateway_state().snapshot(),
        done: true,
    };
    push(
        seeds,
        r,
        "install_snapshot",
        Some(2),
        &codec::encode(&install),
    );
    let ok: Result<AppendEntriesResponse<u64>, RaftError> = Ok(AppendEntriesResponse::Success);
    push(seeds, r, "append_reply", Some(3), &codec::encode(&ok));
    let conflict: Result<AppendEntriesResponse<u64>, RaftError> =
        Ok(AppendEntriesResponse::HigherVote(Vote::new(4, 3)));
    push(
        seeds,
        r,
        "append_reply_higher",
        Some(3),
        &codec::encode(&conflict),
    );
    let voted: Result<VoteResponse<u64>, RaftError> = Ok(VoteResponse::new(
        Vote::new(3, 2),
        Some(log_id(2, 18)),
        true,
    ));
    push(seeds, r, "vote_reply", Some(4), &codec::encode(&voted));
    let installed: Result<
        InstallSnapshotResponse<u64>,
        RaftError<openraft::error::InstallSnapshotError>,
    > = Ok(InstallSnapshotResponse { vote });
    push(
        seeds,
        r,
        "install_reply",
        Some(5),
        &codec::encode(&installed),
    );
    for (i, entry) in entries.iter().enumerate() {
        push(
            seeds,
            r,
            &format!("entry_{i}"),
            Some(6),
            &codec::encode(entry),
        );
    }
    push(seeds, r, "stored_vote", Some(7), &codec::encode(&vote));
    push(seeds, r, "log_id", Some(8), &codec::encode(&log_id(2, 17)));
}

/// A snapshot file as raft-store writes it (format in
/// `raft_store::state_machine`), without its trailing crc32.
fn snapshot_file_body(data: &[u8]) -> Vec<u8> {
    let meta = codec::encode(&snapshot_meta());
    let mut out = b"OSSNAP01".to_vec();
    out.extend_from_slice(&(meta.len() as u32).to_le_bytes());
    out.extend_from_slice(&meta);
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(data);
    out
}

fn state(seeds: &mut Vec<Seed>) {
    let state = gateway_state();
    let data = state.snapshot();
    let body = snapshot_file_body(&data);
    let mut file = body.clone();
    file.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    push(seeds, "snapshot_file", "current_snap", Some(0), &file);
    push(
        seeds,
        "snapshot_file",
        "current_snap_crc_fixed",
        Some(1),
        &body,
    );
    push(
        seeds,
        "snapshot_file",
        "empty_state",
        Some(1),
        &snapshot_file_body(&[]),
    );

    push(seeds, "state_restore", "gateway", Some(0), &data);
    push(
        seeds,
        "state_restore",
        "gateway_empty",
        Some(0),
        &GatewayState::default().snapshot(),
    );
    push(
        seeds,
        "state_restore",
        "pool",
        Some(1),
        &state.pool.encode_snapshot(),
    );
    push(
        seeds,
        "state_restore",
        "objects",
        Some(2),
        &state.objects.snapshot(),
    );

    for (i, command) in commands().iter().enumerate() {
        push(
            seeds,
            "forward_command",
            &format!("command_{i:02}"),
            None,
            command,
        );
    }

    let header = proto::backup::BackupHeader::for_state("openshell".into(), 2, 17, 1, &data);
    // One directory per call: tests build seeds in parallel threads.
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "openshell-fuzz-seeds-{}-{}",
        std::process::id(),
        CALLS.fetch_add(1, Ordering::Relaxed)
    ));
    let backup = dir.join("backup");
    let written = std::fs::create_dir_all(&dir)
        .map_err(|e| e.to_string())
        .and_then(|()| proto::backup::write(&backup, &header, &data).map_err(|e| e.to_string()))
        .and_then(|()| std::fs::read(&backup).map_err(|e| e.to_string()));
    let _ = std::fs::remove_dir_all(&dir);
    match written {
        Ok(bytes) => push(seeds, "backup_file", "backup", None, &bytes),
        Err(e) => panic!("seeds: cannot write a backup: {e}"),
    }

    let objects = &state.objects;
    let first = objects
        .list("sandbox", "", 1, "")
        .ok()
        .and_then(|p| p.next_page_token);
    push(seeds, "page_token", "empty", None, b"");
    if let Some(token) = first {
        push(seeds, "page_token", "next", None, token.as_bytes());
    }
    push(seeds, "page_token", "bad_hex", None, b"v1.zz");
}

fn grant(seeds: &mut Vec<Seed>) {
    use prost::Message;
    let grant = proto::sandbox_runtime::Grant {
        sandbox_id: "sb-1".into(),
        generation: 1,
        member_id: "m1".into(),
        incarnation: 1,
        term: 2,
        credential_epoch: 2,
        log_index: 17,
        release: false,
    };
    let signed = crate::targets::grant::signer().sign(&grant);
    push(seeds, "grant", "signed", Some(0), &signed.encode_to_vec());
    push(seeds, "grant", "body", Some(1), &grant.encode_to_vec());
    let keys = format!(
        "# trusted grant keys\n{}\n\n{}\n",
        crate::targets::grant::signer().public_key_hex(),
        proto::grant::GrantSigner::insecure_development_key("openshell").public_key_hex()
    );
    push(seeds, "grant", "keys_file", Some(2), keys.as_bytes());
}

/// The complete example of docs/configuration.md, with every section.
pub const GATEWAY_TOML: &str = r#"[openshell.gateway]
node_id = 1
listen_addr = "127.0.0.1:7001"
peer_listen_addr = "127.0.0.1:7101"
advertise_addr = "127.0.0.1:7101"
data_dir = "/tmp/openshell-fuzz-gateway"
cluster_id = "openshell-prod"
initial_voters = ["1=127.0.0.1:7101", "2=127.0.0.2:7101", "3=127.0.0.3:7101"]
http_listen_addr = "127.0.0.1:9001"
insecure = true

[openshell.gateway.raft]
heartbeat_interval_ms = 50
election_timeout_min_ms = 150
election_timeout_max_ms = 300
snapshot_after_logs = 5000
logs_to_keep = 1000
snapshot_chunk_bytes = 1048576
write_timeout_ms = 5000
max_snapshot_bytes = 1073741824

[openshell.gateway.supervisor_pool]
tick_interval_ms = 250
heartbeat_ttl_ms = 2000
recovery_deadline_ms = 60000
operation_deadline_ms = 600000
status_interval_ms = 250

[openshell.gateway.auth]
admin_tokens = ["admin-token"]
viewer_tokens = ["viewer-token"]

[openshell.gateway.sandbox_driver]
kind = "process"
process_netns = "off"
"#;

fn config(seeds: &mut Vec<Seed>) {
    push(seeds, "config", "gateway", Some(0), GATEWAY_TOML.as_bytes());
    push(
        seeds,
        "config",
        "gateway_minimal",
        Some(0),
        b"[openshell.gateway]\nnode_id = 2\n",
    );
    let supervisor = "127.0.0.1:7001,127.0.0.2:7001\nm1\nuid-m1\n10.0.0.7\n\n127.0.0.1:9101\n16\ntoken\n25000\ni\n";
    push(
        seeds,
        "config",
        "supervisor",
        Some(1),
        supervisor.as_bytes(),
    );
}
