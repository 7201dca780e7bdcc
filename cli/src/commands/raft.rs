//! `raft ...`: the gateways' raft group (status, membership, leadership,
//! snapshots) through `openshell.cluster.v1.ClusterAdmin`.

use proto::cluster::{ClusterStatus, MembershipReply, Node};
use serde_json::{json, Value};

use super::{each, emit, table};
use crate::{CliError, Gateway, Output, RaftCommand};

fn raft_json(s: &ClusterStatus) -> Value {
    // Unknown progress is null, never 0 (0 would read as caught up).
    let known = |n: &proto::cluster::NodeStatus, v: u64| {
        if n.progress_known {
            json!(v)
        } else {
            Value::Null
        }
    };
    let node = |n: &proto::cluster::NodeStatus| {
        json!({"id": n.id, "addr": n.addr, "voter": n.voter,
               "matched_index": known(n, n.matched_index), "lag": known(n, n.lag),
               "last_ack_ms": n.last_ack_ms})
    };
    json!({
        "cluster_id": s.cluster_id,
        "leader": if s.leader_id == 0 { Value::Null } else { json!(s.leader_id) },
        "leader_addr": s.leader_addr,
        "term": s.term,
        "commit_index": s.commit_index,
        "applied_index": s.applied_index,
        "last_log_index": s.last_log_index,
        "snapshot_index": s.snapshot_index,
        "answered_by": s.node_id,
        "voters": s.nodes.iter().filter(|n| n.voter).map(|n| json!({"id": n.id, "addr": n.addr})).collect::<Vec<_>>(),
        "learners": s.nodes.iter().filter(|n| !n.voter).map(|n| json!({"id": n.id, "addr": n.addr})).collect::<Vec<_>>(),
        "nodes": s.nodes.iter().map(node).collect::<Vec<_>>(),
        // Voters a half-done membership change leads to; null when none.
        "unfinished_change_to_voters": if s.unfinished_change_to_voters.is_empty() {
            Value::Null
        } else {
            json!(s.unfinished_change_to_voters)
        },
    })
}

fn membership_json(r: &MembershipReply) -> Value {
    let nodes = |list: &[Node]| {
        list.iter()
            .map(|n| json!({"id": n.id, "addr": n.addr}))
            .collect::<Vec<_>>()
    };
    json!({"log_index": r.log_index, "voters": nodes(&r.voters), "learners": nodes(&r.learners),
           "learner_matched": r.learner_matched, "leader_last_index": r.leader_last_index})
}

fn membership_table(r: &MembershipReply) -> String {
    let ids = |list: &[Node]| {
        list.iter()
            .map(|n| n.id.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        "voters: {}\nlearners: {}\n",
        ids(&r.voters),
        ids(&r.learners)
    )
}

/// `raft status` as text: leader, term, indexes, then one row per node.
fn status_table(s: &ClusterStatus) -> String {
    let leader = if s.leader_id == 0 {
        "none".to_string()
    } else {
        format!("{} ({})", s.leader_id, s.leader_addr)
    };
    let mut head = format!(
        "leader: {leader}\nterm: {}\ncommit index: {}\napplied index: {}\n",
        s.term, s.commit_index, s.applied_index
    );
    if !s.unfinished_change_to_voters.is_empty() {
        let to = s
            .unfinished_change_to_voters
            .iter()
            .map(u64::to_string)
            .collect::<Vec<_>>()
            .join(",");
        head += &format!(
            "membership change unfinished: voters -> {to} (completes once a majority is up; \
             re-run it to finish it after a leader change)\n"
        );
    }
    head += "\n";
    let rows = s
        .nodes
        .iter()
        .map(|n| {
            let known = |v: u64| {
                if n.progress_known {
                    v.to_string()
                } else {
                    "unknown".to_string()
                }
            };
            vec![
                n.id.to_string(),
                n.addr.clone(),
                if n.voter { "voter" } else { "learner" }.to_string(),
                known(n.matched_index),
                known(n.lag),
                n.last_ack_ms
                    .map_or("-".to_string(), |ms| format!("{ms} ms ago")),
            ]
        })
        .collect();
    head + &table(
        &["ID", "ADDRESS", "ROLE", "MATCHED", "LAG", "LAST ACK"],
        rows,
    )
}

/// `raft ...`
pub async fn raft(gw: &Gateway, output: Output, command: RaftCommand) -> Result<(), CliError> {
    let client = gw.client();
    match command {
        RaftCommand::Status { watch, interval } => {
            let fetch = || async {
                let s = gw.ask(client.cluster_status(false)).await?;
                let each = each::statuses(gw).await?;
                let mut json = raft_json(&s);
                json["gateways"] = each::statuses_json(&each);
                let text = status_table(&s) + "\n" + &each::statuses_table(&each);
                Ok::<_, CliError>((json, text))
            };
            return super::watch::once_or_watch("raft status", output, watch, interval, fetch)
                .await;
        }
        RaftCommand::Check => return super::check::check(gw, output).await,
        RaftCommand::AddLearner { id, addr, no_wait } => {
            let r = gw
                .ask(client.add_learner(Node { id, addr }, !no_wait))
                .await?;
            emit(output, membership_json(&r), || membership_table(&r));
        }
        RaftCommand::Promote { id, force } => {
            let r = gw.ask(client.promote(id, force)).await?;
            emit(output, membership_json(&r), || membership_table(&r));
        }
        RaftCommand::Remove { id } => {
            let r = gw.ask(client.remove(id)).await?;
            emit(output, membership_json(&r), || membership_table(&r));
        }
        RaftCommand::TransferLeader { id } => {
            let r = gw.ask(client.transfer_leader(id.unwrap_or(0))).await?;
            emit(
                output,
                json!({"leader": r.leader_id, "term": r.term}),
                || format!("leader is now {} (term {})\n", r.leader_id, r.term),
            );
        }
        RaftCommand::Snapshot => {
            let r = gw.ask(client.trigger_snapshot()).await?;
            emit(output, json!({"snapshot_index": r.snapshot_index}), || {
                format!("snapshot at index {}\n", r.snapshot_index)
            });
        }
    }
    Ok(())
}
