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

/// The status `raft status` heads its output with: the group as the
/// leader sees it. `asked` is the first gateway's answer (forwarded to the
/// leader it knows); when that gateway knows no leader or is no longer a
/// member (a gateway removed from the group answers, alone, with its own
/// rising campaign term and no leader), the leader's own answer among
/// `each` takes its place, else the first member's that names a leader;
/// `asked` when no gateway does (a group without a leader shows as one).
fn headline<'a>(
    asked: &'a ClusterStatus,
    each: &'a [each::Answer<ClusterStatus>],
) -> &'a ClusterStatus {
    let member = |s: &ClusterStatus| s.nodes.iter().any(|n| n.id == s.node_id);
    if asked.leader_id != 0 && member(asked) {
        return asked;
    }
    let answers: Vec<&ClusterStatus> = each.iter().filter_map(|a| a.reply.as_ref().ok()).collect();
    answers
        .iter()
        .find(|s| s.leader_id != 0 && s.leader_id == s.node_id && member(s))
        .or_else(|| answers.iter().find(|s| s.leader_id != 0 && member(s)))
        .copied()
        .unwrap_or(asked)
}

/// `raft ...`
pub async fn raft(gw: &Gateway, output: Output, command: RaftCommand) -> Result<(), CliError> {
    let client = gw.client();
    match command {
        RaftCommand::Status { watch, interval } => {
            let fetch = || async {
                let asked = gw.ask(client.cluster_status(false)).await?;
                let each = each::statuses(gw).await?;
                let s = headline(&asked, &each);
                let mut json = raft_json(s);
                json["gateways"] = each::statuses_json(&each);
                let text = status_table(s) + "\n" + &each::statuses_table(&each);
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

#[cfg(test)]
mod tests {
    use proto::cluster::{ClusterStatus, NodeStatus};

    use super::{each, headline};

    fn status(node_id: u64, leader_id: u64, term: u64, members: &[u64]) -> ClusterStatus {
        ClusterStatus {
            node_id,
            leader_id,
            term,
            nodes: members
                .iter()
                .map(|&id| NodeStatus {
                    id,
                    voter: true,
                    ..NodeStatus::default()
                })
                .collect(),
            ..ClusterStatus::default()
        }
    }

    fn answer(s: ClusterStatus) -> each::Answer<ClusterStatus> {
        each::Answer {
            endpoint: format!("gw{}", s.node_id),
            reply: Ok(s),
        }
    }

    /// A removed gateway asked first (no leader, its own campaign term,
    /// not in its membership) does not head the output: the leader does.
    #[test]
    fn a_removed_gateway_does_not_head_raft_status() {
        let removed = status(3, 0, 40, &[1, 2, 3]);
        let removed_alone = status(3, 0, 40, &[1, 2]);
        let each = vec![
            answer(removed_alone.clone()),
            answer(status(1, 2, 7, &[1, 2])),
            answer(status(2, 2, 7, &[1, 2])),
        ];
        assert_eq!(
            headline(&removed_alone, &each).node_id,
            2,
            "the leader's own view"
        );
        // Knows no leader though still listed: a member naming one heads.
        let leaderless = vec![answer(removed.clone()), answer(status(1, 2, 7, &[1, 2, 3]))];
        assert_eq!(headline(&removed, &leaderless).node_id, 1);
        // A healthy first answer stays.
        let healthy = status(1, 2, 7, &[1, 2]);
        assert_eq!(headline(&healthy, &each).node_id, 1);
        // Nobody knows a leader: the group shows as leaderless.
        let none = vec![answer(removed_alone.clone())];
        assert_eq!(headline(&removed_alone, &none).leader_id, 0);
    }
}
