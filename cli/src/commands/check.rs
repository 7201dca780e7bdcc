//! `raft check`: every gateway's state digest at one applied index, the
//! way `etcdctl endpoint hashkv` compares members.
//!
//! Each endpoint of `--endpoints` is asked on its own (no failover) for the
//! digest of its applied state. When they all answer at the same applied
//! index, that is the comparison. Otherwise (the log moves on, a replica
//! is behind) each is asked for the digest right after it applies an
//! index none has applied yet: the gateways take it inside their apply
//! loops, so the digests describe the same log prefix. A gateway that
//! applied past that index before the question reached it refuses it; the
//! next round aims further ahead (1, then 4, then 16 entries past the most
//! advanced), so a cluster that applies faster than a question travels is
//! still caught. A few rounds at most; a gateway that never gets there is
//! reported as not compared.
//!
//! Exit codes: 0 every member compared and equal; 7 two replicas differ at
//! the same index (the loud one); 3 a member was not compared (not in
//! `--endpoints`, unreachable, or behind).

use std::collections::BTreeMap;
use std::time::Duration;

use proto::cluster::StateDigestReply;
use serde_json::{json, Value};

use super::{each, emit, table};
use crate::{CliError, Gateway, Output};

/// Rounds of "now, then ahead of the most advanced" before giving up.
const ROUNDS: usize = 3;
/// How far past the most advanced gateway the first round aims; each
/// round after aims this many times further.
const LEAD_GROWTH: u64 = 4;
/// How long a gateway waits for the next index.
const WAIT: Duration = Duration::from_secs(5);
/// One call's bound: the wait plus a margin for the answer.
const CALL: Duration = Duration::from_secs(10);

/// One endpoint's digest.
type Answer = each::Answer<StateDigestReply>;

/// `raft check`
pub async fn check(gw: &Gateway, output: Output) -> Result<(), CliError> {
    let clients = each::clients(gw, CALL)?;
    let ask = |at: u64| each::ask(gw, &clients, move |c| c.state_digest(at, WAIT));
    let answered = |answers: &[Answer]| answers.iter().filter(|a| a.reply.is_ok()).count();
    let mut answers = Vec::new();
    let mut lead = 1;
    for _ in 0..ROUNDS {
        answers = ask(0).await;
        if at_one_index(&answers).is_some() {
            break;
        }
        let reachable = answered(&answers);
        let next = answers
            .iter()
            .filter_map(|a| a.reply.as_ref().ok())
            .map(|r| r.applied_index)
            .max()
            .map_or(0, |i| i + lead);
        if next == 0 {
            break;
        }
        // Every gateway that answered now must answer at `next` (one that
        // applied past it meanwhile says so: go round again, further ahead).
        answers = ask(next).await;
        lead *= LEAD_GROWTH;
        if answered(&answers) >= reachable && at_one_index(&answers).is_some() {
            break;
        }
    }
    // Members the endpoints did not cover: from any gateway's membership.
    let members = gw
        .client()
        .cluster_status(false)
        .await
        .map(|s| s.nodes)
        .unwrap_or_default();
    let verdict = Verdict::of(&answers, &members);
    emit(output, verdict.json(&answers), || verdict.table(&answers));
    verdict.outcome()
}

/// The applied index every endpoint that answered answered at, when they
/// agree on it (one that failed is not asked again: it is reported).
fn at_one_index(answers: &[Answer]) -> Option<u64> {
    let mut indexes = answers
        .iter()
        .filter_map(|a| a.reply.as_ref().ok().map(|r| r.applied_index));
    let first = indexes.next()?;
    indexes.all(|i| i == first).then_some(first)
}

/// What the answers show.
struct Verdict {
    /// Applied index -> crc32 -> node ids, for answers at an index two or
    /// more gateways share.
    compared: BTreeMap<u64, BTreeMap<u32, Vec<u64>>>,
    /// Members of the group no endpoint answered for: (id, peer address).
    unchecked: Vec<(u64, String)>,
    /// Endpoints that failed or answered alone at their index.
    failed: Vec<String>,
}

impl Verdict {
    fn of(answers: &[Answer], members: &[proto::cluster::NodeStatus]) -> Verdict {
        let mut by_index: BTreeMap<u64, BTreeMap<u32, Vec<u64>>> = BTreeMap::new();
        for r in answers.iter().filter_map(|a| a.reply.as_ref().ok()) {
            let nodes = by_index
                .entry(r.applied_index)
                .or_default()
                .entry(r.crc32)
                .or_default();
            if !nodes.contains(&r.node_id) {
                nodes.push(r.node_id);
            }
        }
        let answered: Vec<u64> = answers
            .iter()
            .filter_map(|a| a.reply.as_ref().ok().map(|r| r.node_id))
            .collect();
        // An index counts when two or more gateways answered at it, or
        // when only one gateway answered at all (a group of one has
        // nothing to compare it with; unchecked members still fail it).
        let alone = answered.len() == 1;
        let compared: BTreeMap<_, _> = by_index
            .into_iter()
            .filter(|(_, crcs)| alone || crcs.values().map(Vec::len).sum::<usize>() >= 2)
            .collect();
        let in_comparison = |node: u64| {
            compared
                .values()
                .any(|crcs| crcs.values().any(|nodes| nodes.contains(&node)))
        };
        let failed = answers
            .iter()
            .filter(|a| match &a.reply {
                Ok(r) => !in_comparison(r.node_id),
                Err(_) => true,
            })
            .map(|a| a.endpoint.clone())
            .collect();
        let unchecked = members
            .iter()
            .filter(|m| !answered.contains(&m.id))
            .map(|m| (m.id, m.addr.clone()))
            .collect();
        Verdict {
            compared,
            unchecked,
            failed,
        }
    }

    /// Indexes where two replicas hold different states.
    fn mismatches(&self) -> Vec<u64> {
        self.compared
            .iter()
            .filter(|(_, crcs)| crcs.len() > 1)
            .map(|(index, _)| *index)
            .collect()
    }

    fn json(&self, answers: &[Answer]) -> Value {
        let gateways: Vec<Value> = answers
            .iter()
            .map(|a| match &a.reply {
                Ok(r) => json!({"endpoint": a.endpoint, "node_id": r.node_id,
                    "applied_index": r.applied_index, "crc32": r.crc32, "bytes": r.bytes,
                    "error": null}),
                Err(e) => json!({"endpoint": a.endpoint, "node_id": null, "applied_index": null,
                    "crc32": null, "bytes": null, "error": e}),
            })
            .collect();
        json!({
            "consistent": self.mismatches().is_empty(),
            "complete": self.unchecked.is_empty() && self.failed.is_empty(),
            "compared_at": self.compared.keys().collect::<Vec<_>>(),
            "mismatched_at": self.mismatches(),
            "gateways": gateways,
            "unchecked_members": self.unchecked.iter()
                .map(|(id, addr)| json!({"id": id, "addr": addr})).collect::<Vec<_>>(),
        })
    }

    fn table(&self, answers: &[Answer]) -> String {
        let differs = self.mismatches();
        let rows = answers
            .iter()
            .map(|a| match &a.reply {
                Ok(r) => {
                    let result = if differs.contains(&r.applied_index) {
                        "DIFFERS"
                    } else if self.compared.contains_key(&r.applied_index) {
                        "ok"
                    } else {
                        "not compared"
                    };
                    vec![
                        a.endpoint.clone(),
                        r.node_id.to_string(),
                        r.applied_index.to_string(),
                        format!("{:08x}", r.crc32),
                        r.bytes.to_string(),
                        result.to_string(),
                    ]
                }
                Err(e) => vec![
                    a.endpoint.clone(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    e.clone(),
                ],
            })
            .collect();
        let mut text = table(
            &[
                "ENDPOINT",
                "NODE",
                "APPLIED INDEX",
                "CRC32",
                "BYTES",
                "RESULT",
            ],
            rows,
        );
        for (id, addr) in &self.unchecked {
            text += &format!(
                "member {id} (peer address {addr}) not compared: its gateway did not answer, or \
                 its client address is not in --endpoints\n"
            );
        }
        text
    }

    fn outcome(&self) -> Result<(), CliError> {
        let differs = self.mismatches();
        if !differs.is_empty() {
            let detail: Vec<String> = differs
                .iter()
                .map(|index| {
                    let crcs = &self.compared[index];
                    let groups: Vec<String> = crcs
                        .iter()
                        .map(|(crc, nodes)| format!("{crc:08x} on nodes {nodes:?}"))
                        .collect();
                    format!("at applied index {index}: {}", groups.join(" vs "))
                })
                .collect();
            return Err(CliError::ReplicasDiffer(format!(
                "REPLICAS DIFFER {}: stop writing to the odd one out and rebuild it from the others \
                 (docs/operations.md, \"Replica check\")",
                detail.join("; ")
            )));
        }
        if !self.unchecked.is_empty() || !self.failed.is_empty() {
            let mut missing: Vec<String> = self
                .unchecked
                .iter()
                .map(|(id, addr)| format!("member {id} (peer address {addr})"))
                .collect();
            missing.extend(self.failed.iter().map(|e| format!("gateway {e}")));
            return Err(CliError::Unavailable(format!(
                "not every replica was compared: {} (no mismatch among those that were)",
                missing.join(", ")
            )));
        }
        Ok(())
    }
}
