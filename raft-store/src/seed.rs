//! Offline tools on a stopped node's data directory: seed a new one-voter
//! cluster from a backup, and force a surviving node into a one-voter
//! cluster when quorum is lost for good.
//!
//! Both end the same way: a snapshot file holding the state as of a log id,
//! with a membership of this node alone, and the log purged up to that id,
//! so the node starts, elects itself, and continues the log after it. Other
//! gateways are then added back as learners and promoted.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use openraft::storage::{RaftLogReader, RaftLogStorage};
use openraft::{BasicNode, CommittedLeaderId, EntryPayload, Membership, StoredMembership};

use crate::db::DataDir;
use crate::error::{Error, Result};
use crate::log_store::LogStore;
use crate::state_machine::StateMachine;
use crate::state_machine::{SnapshotDir, StateMachineStore};
use crate::types::typ::{LogId, SnapshotMeta};
use crate::types::NodeId;

/// What a seed or recovery produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Seeded {
    /// The log index the state reflects; the log continues after it.
    pub last_index: u64,
    /// Its term.
    pub last_term: u64,
    /// Log entries applied on top of the snapshot (recovery only).
    pub entries_applied: u64,
}

fn single_voter(node_id: NodeId, addr: &str, last: LogId) -> StoredMembership<NodeId, BasicNode> {
    let nodes = BTreeMap::from([(node_id, BasicNode::new(addr))]);
    StoredMembership::new(
        Some(last),
        Membership::new(vec![BTreeSet::from([node_id])], nodes),
    )
}

/// A small runtime for the offline tools (they run before any node starts).
fn offline_runtime(path: &Path) -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })
}

fn io_error(e: impl std::fmt::Display, path: &Path) -> Error {
    Error::DataDir {
        path: path.to_path_buf(),
        problem: e.to_string(),
    }
}

/// Refuses a node id or address the new membership could not use, before
/// anything is written: node id 0 is reserved, and the address must be
/// `host:port` (other gateways dial it).
fn check_target(data_dir: &Path, node_id: NodeId, addr: &str) -> Result<()> {
    let problem = if node_id == 0 {
        "node id 0 is reserved: pass --node-id 1 or higher".to_string()
    } else {
        match addr.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => return Ok(()),
            _ => format!(
                "advertise address {addr:?} is not host:port (e.g. gw-1.gw.openshell.svc:7001): \
                 the other gateways dial it"
            ),
        }
    };
    Err(Error::DataDir {
        path: data_dir.to_path_buf(),
        problem: format!("{problem}; nothing was written"),
    })
}

/// Writes the snapshot, then purges the log behind it and records it as
/// committed, durably.
fn install(
    dir: &DataDir,
    node_id: NodeId,
    addr: &str,
    last: LogId,
    state: &[u8],
    id: &str,
) -> Result<()> {
    let snapshots = SnapshotDir::open(dir.path.join("snapshots"))?;
    let meta = SnapshotMeta {
        last_log_id: Some(last),
        last_membership: single_voter(node_id, addr, last),
        snapshot_id: format!("{id}-{}-{}", last.leader_id.term, last.index),
    };
    snapshots.store(&meta, state)?;
    let mut log = LogStore::new(dir).map_err(|e| io_error(e, &dir.path))?;
    let runtime = offline_runtime(&dir.path)?;
    runtime.block_on(async {
        log.purge(last).await.map_err(|e| io_error(e, &dir.path))?;
        log.save_committed(Some(last))
            .await
            .map_err(|e| io_error(e, &dir.path))?;
        dir.watermark.appended(last.index);
        dir.durability.sync().await.map_err(|source| Error::Io {
            path: dir.path.clone(),
            source,
        })
    })
}

/// Creates the data directory of a new one-voter cluster whose state is
/// `state` (a state-machine snapshot encoding) as of log index `index` in
/// term `term`. The directory must be absent or empty.
///
/// # Errors
/// [`Error::DataDir`] when the node id is 0, the address is not host:port,
/// the directory is not empty, the state does not decode as `SM` or
/// records a log index above `index`;
/// [`Error::InUse`] when another process holds the directory.
pub fn seed_single_voter<SM: StateMachine>(
    data_dir: &Path,
    cluster_id: &str,
    node_id: NodeId,
    addr: &str,
    state: &[u8],
    term: u64,
    index: u64,
) -> Result<Seeded> {
    check_target(data_dir, node_id, addr)?;
    crate::db::refuse_if_in_use(data_dir)?;
    if std::fs::read_dir(data_dir)
        .map(|mut d| d.next().is_some())
        .unwrap_or(false)
    {
        return Err(Error::DataDir {
            path: data_dir.to_path_buf(),
            problem: "is not empty; restore seeds a new data directory and never overwrites one"
                .into(),
        });
    }
    let machine = SM::restore(state).map_err(|problem| Error::DataDir {
        path: data_dir.to_path_buf(),
        problem: format!("the backup's state does not decode ({problem}); nothing was written"),
    })?;
    let recorded = machine.highest_recorded_index();
    if recorded > index {
        return Err(Error::DataDir {
            path: data_dir.to_path_buf(),
            problem: format!(
                "the backup's header says index {index}, but its state records log index {recorded}: \
                 the header does not belong to this state; nothing was written"
            ),
        });
    }
    let dir = DataDir::open(data_dir, cluster_id, node_id, 8 * 1024 * 1024)?;
    let last = LogId::new(CommittedLeaderId::new(term, node_id), index);
    // Terms never go back: the first election after a restore runs at a term
    // above the backup's last entry.
    let mut log = LogStore::new(&dir).map_err(|e| io_error(e, &dir.path))?;
    let runtime = offline_runtime(&dir.path)?;
    runtime
        .block_on(log.save_vote(&openraft::Vote::new(term, node_id)))
        .map_err(|e| io_error(e, &dir.path))?;
    drop(runtime);
    install(&dir, node_id, addr, last, state, "restore")?;
    Ok(Seeded {
        last_index: index,
        last_term: term,
        entries_applied: 0,
    })
}

/// Turns a stopped node's data directory into a one-voter cluster holding
/// every entry in its log: the snapshot plus all entries after it are
/// applied, written as a new snapshot whose membership is this node alone.
///
/// # Errors
/// [`Error::DataDir`] when the node id is 0, the address is not host:port,
/// the directory is missing, damaged or foreign (it is verified as at
/// start-up first); [`Error::InUse`] when another process holds it.
pub fn recover_single_voter<SM: StateMachine>(
    data_dir: &Path,
    cluster_id: &str,
    node_id: NodeId,
    addr: &str,
) -> Result<Seeded> {
    check_target(data_dir, node_id, addr)?;
    crate::db::refuse_if_in_use(data_dir)?;
    // Recovery works on an existing node's data: refuse anything else before
    // creating a file (opening the snapshots would create `snapshots/`).
    if !data_dir.join("raft").join("db").is_file() {
        return Err(Error::DataDir {
            path: data_dir.to_path_buf(),
            problem:
                "is missing or holds no raft/db: recover needs the data directory of a surviving \
                      node (check --data-dir); nothing was created"
                    .into(),
        });
    }
    let sm = StateMachineStore::<SM>::open(data_dir)?;
    let dir = DataDir::open(data_dir, cluster_id, node_id, 8 * 1024 * 1024)?;
    let (mut machine, snapshot_last) = sm.read(|a| (a.machine.clone(), a.last_applied));
    let mut log = LogStore::new(&dir).map_err(|e| io_error(e, &dir.path))?;
    let runtime = offline_runtime(&dir.path)?;
    let entries = runtime.block_on(async {
        let start = snapshot_last.map(|l| l.index + 1).unwrap_or(0);
        log.try_get_log_entries(start..)
            .await
            .map_err(|e| io_error(e, &dir.path))
    })?;
    let mut last = snapshot_last;
    let mut applied = 0u64;
    for entry in &entries {
        if let EntryPayload::Normal(batch) = &entry.payload {
            for command in &batch.0 {
                machine.apply(entry.log_id.index, command);
                applied += 1;
            }
        }
        last = Some(entry.log_id);
    }
    let Some(last) = last else {
        return Err(Error::DataDir {
            path: data_dir.to_path_buf(),
            problem: "holds no log entries and no snapshot: there is nothing to recover".into(),
        });
    };
    drop(runtime);
    install(&dir, node_id, addr, last, &machine.snapshot(), "recover")?;
    Ok(Seeded {
        last_index: last.index,
        last_term: last.leader_id.term,
        entries_applied: applied,
    })
}
