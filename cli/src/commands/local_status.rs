//! `local-status --data-dir D`: what a stopped gateway's data directory
//! holds, read offline through `raft_store::local_status` (read-only; a
//! directory a running process holds is refused). The runbook uses it to
//! pick the survivor to recover from.

use std::path::Path;

use serde_json::{json, Value};

use super::{emit, table};
use crate::{CliError, Output};

/// `local-status --data-dir D`
pub fn local_status(output: Output, data_dir: &Path) -> Result<(), CliError> {
    let s = raft_store::local_status::read(data_dir).map_err(|e| CliError::Local(e.to_string()))?;
    let nodes = |list: &[(u64, String)]| -> Value {
        Value::Array(
            list.iter()
                .map(|(id, addr)| json!({"id": id, "addr": addr}))
                .collect(),
        )
    };
    let vote = s.vote.map(|(term, voted_for, committed)| {
        json!({"term": term, "voted_for": voted_for, "committed": committed})
    });
    let value = json!({
        "data_dir": s.path.display().to_string(), "node_id": s.node_id, "cluster_id": s.cluster_id,
        "last_log_index": s.last_log_index, "last_log_term": s.last_log_term,
        "committed_index": s.committed_index, "snapshot_index": s.snapshot_index,
        "purged_index": s.purged_index, "vote": vote, "membership_index": s.membership_index,
        "voters": nodes(&s.voters), "learners": nodes(&s.learners),
    });
    emit(output, value, || {
        let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
        let list = |l: &[(u64, String)]| {
            l.iter()
                .map(|(id, addr)| format!("{id}={addr}"))
                .collect::<Vec<_>>()
                .join(",")
        };
        let vote = s
            .vote
            .map(|(term, voted_for, committed)| {
                format!(
                    "term {term}, for {}{}",
                    opt(voted_for),
                    if committed { " (granted)" } else { "" }
                )
            })
            .unwrap_or_else(|| "-".into());
        let rows = vec![
            vec!["data dir".into(), s.path.display().to_string()],
            vec!["node id".into(), s.node_id.to_string()],
            vec!["cluster id".into(), s.cluster_id.clone()],
            vec![
                "last log".into(),
                format!("index {} (term {})", s.last_log_index, s.last_log_term),
            ],
            vec!["committed".into(), opt(s.committed_index)],
            vec!["snapshot".into(), opt(s.snapshot_index)],
            vec!["purged".into(), opt(s.purged_index)],
            vec!["vote".into(), vote],
            vec!["membership at".into(), opt(s.membership_index)],
            vec!["voters".into(), list(&s.voters)],
            vec!["learners".into(), list(&s.learners)],
        ];
        table(&["FIELD", "VALUE"], rows)
    });
    Ok(())
}
