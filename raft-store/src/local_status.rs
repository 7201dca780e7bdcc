//! The local status of a stopped node, read from its data directory without
//! changing it (`openshell-pool local-status`): who it is, how far its log
//! goes, what it knows committed, its snapshot, its membership and its vote.
//!
//! Read-only: a directory another process holds is refused
//! ([`crate::db::refuse_if_in_use`]); the database is read from a scratch copy
//! made outside the data directory (opening sled may repair files in place),
//! and the snapshot file is only read.

use std::path::{Path, PathBuf};

use openraft::EntryPayload;

use crate::codec;
use crate::db::{self, Identity, IDENTITY_KEY};
use crate::error::{Error, Result};
use crate::types::typ::{Entry, LogId, StoredMembership, Vote};
use crate::types::NodeId;

/// What a data directory holds, as of when its node stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalStatus {
    /// The data directory.
    pub path: PathBuf,
    /// The node id of its identity record.
    pub node_id: NodeId,
    /// The cluster id of its identity record.
    pub cluster_id: String,
    /// The last log index it holds (the snapshot's when the log is purged).
    pub last_log_index: u64,
    /// The term of that entry.
    pub last_log_term: u64,
    /// The last index it knew committed (None: never recorded).
    pub committed_index: Option<u64>,
    /// The index its snapshot holds the state of (applied and saved; the
    /// entries after it up to `committed_index` are re-applied at start).
    pub snapshot_index: Option<u64>,
    /// The last index purged from the log.
    pub purged_index: Option<u64>,
    /// The vote: term, the node voted for, and whether a quorum granted it.
    pub vote: Option<(u64, Option<NodeId>, bool)>,
    /// The log index of the membership below (from the log or the snapshot).
    pub membership_index: Option<u64>,
    /// Voters, with their addresses.
    pub voters: Vec<(NodeId, String)>,
    /// Learners, with their addresses.
    pub learners: Vec<(NodeId, String)>,
}

/// Reads the local status of the data directory at `path`.
///
/// # Errors
/// [`Error::InUse`] when a running process holds it; [`Error::DataDir`]
/// when it is not a data directory or a record does not decode.
pub fn read(path: &Path) -> Result<LocalStatus> {
    db::refuse_if_in_use(path)?;
    let raft_dir = path.join("raft");
    if !raft_dir.join("db").is_file() {
        return Err(Error::DataDir {
            path: path.to_path_buf(),
            problem: "is missing or holds no raft/db: not an openshell-gateway data directory"
                .into(),
        });
    }
    let copy = std::env::temp_dir().join(format!(
        "openshell-local-status-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    ));
    let outcome = db::copy_dir(&raft_dir, &copy)
        .map_err(|source| Error::Io {
            path: copy.clone(),
            source,
        })
        .and_then(|()| read_copy(path, &copy));
    let _ = std::fs::remove_dir_all(&copy);
    outcome
}

/// Reads the records from the scratch copy `copy` of `path`'s database.
fn read_copy(path: &Path, copy: &Path) -> Result<LocalStatus> {
    let raft_dir = path.join("raft");
    let db = db::open_sled(copy, 16 * 1024 * 1024).map_err(|e| match e {
        Error::DataDir { problem, .. } => Error::DataDir {
            path: raft_dir.clone(),
            problem,
        },
        other => other,
    })?;
    let sled_err = |source| Error::Sled {
        path: raft_dir.clone(),
        source,
    };
    let damaged = |e: codec::DecodeError| Error::DataDir {
        path: raft_dir.clone(),
        problem: e.to_string(),
    };
    let meta = db.open_tree("meta").map_err(sled_err)?;
    let log = db.open_tree("log").map_err(sled_err)?;
    let record = |key: &[u8]| meta.get(key).map_err(sled_err);
    let identity: Identity = match record(IDENTITY_KEY)? {
        Some(bytes) => codec::decode(&bytes, "identity record").map_err(damaged)?,
        None => {
            return Err(Error::DataDir {
                path: raft_dir.clone(),
                problem: "has no identity record".into(),
            })
        }
    };
    let vote: Option<Vote> = match record(b"vote")? {
        Some(bytes) => Some(codec::decode(&bytes, "vote").map_err(damaged)?),
        None => None,
    };
    let committed: Option<LogId> = match record(b"committed")? {
        Some(bytes) => codec::decode::<Option<LogId>>(&bytes, "committed").map_err(damaged)?,
        None => None,
    };
    let purged: Option<LogId> = match record(b"last_purged")? {
        Some(bytes) => Some(codec::decode(&bytes, "last purged log id").map_err(damaged)?),
        None => None,
    };
    // The newest entry, and the newest membership entry (openraft uses the
    // last one in the log, committed or not). Entries at or below the purge
    // point are not part of the log: the purger thread may not have removed
    // them yet (crate::purger).
    let mut last: Option<LogId> = None;
    let mut log_membership: Option<StoredMembership> = None;
    let after_purged = purged.map_or(0, |p| p.index.saturating_add(1));
    for item in log.range(after_purged.to_be_bytes()..).rev() {
        let (_, bytes) = item.map_err(sled_err)?;
        let entry: Entry = codec::decode(&bytes, "log entry").map_err(damaged)?;
        last.get_or_insert(entry.log_id);
        if let EntryPayload::Membership(m) = entry.payload {
            log_membership = Some(StoredMembership::new(Some(entry.log_id), m));
            break;
        }
    }
    let snapshot = read_snapshot(path)?;
    let snapshot_last = snapshot.as_ref().and_then(|(last, _)| *last);
    let membership = match (log_membership, snapshot.map(|(_, m)| m)) {
        (Some(l), Some(s)) if s.log_id() > l.log_id() => Some(s),
        (Some(l), _) => Some(l),
        (None, s) => s,
    };
    let newest = [last, purged, snapshot_last].into_iter().flatten().max();
    let members = |ids: Vec<NodeId>, m: &StoredMembership| -> Vec<(NodeId, String)> {
        ids.into_iter()
            .map(|id| {
                let addr = m.membership().get_node(&id).map(|n| n.addr.clone());
                (id, addr.unwrap_or_default())
            })
            .collect()
    };
    let (voters, learners) = match &membership {
        Some(m) => (
            members(m.membership().voter_ids().collect(), m),
            members(m.membership().learner_ids().collect(), m),
        ),
        None => (Vec::new(), Vec::new()),
    };
    Ok(LocalStatus {
        path: path.to_path_buf(),
        node_id: identity.node_id,
        cluster_id: identity.cluster_id,
        last_log_index: newest.map(|l| l.index).unwrap_or(0),
        last_log_term: newest.map(|l| l.leader_id.term).unwrap_or(0),
        committed_index: committed.map(|c| c.index),
        snapshot_index: snapshot_last.map(|l| l.index),
        purged_index: purged.map(|p| p.index),
        vote: vote.map(|v| {
            (
                v.leader_id().get_term(),
                v.leader_id().voted_for(),
                v.is_committed(),
            )
        }),
        membership_index: membership
            .as_ref()
            .and_then(|m| m.log_id().map(|l| l.index)),
        voters,
        learners,
    })
}

/// The last log id and membership of the snapshot file, read without
/// opening the snapshot directory (which would remove temporary files).
fn read_snapshot(path: &Path) -> Result<Option<(Option<LogId>, StoredMembership)>> {
    let file = path.join("snapshots").join("current.snap");
    let bytes = match std::fs::read(&file) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(Error::Io { path: file, source }),
    };
    let (meta, _) =
        crate::state_machine::decode_snapshot_file(&bytes).map_err(|problem| Error::DataDir {
            path: file,
            problem,
        })?;
    Ok(Some((meta.last_log_id, meta.last_membership)))
}
