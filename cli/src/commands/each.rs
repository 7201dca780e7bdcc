//! Asking every gateway of `--endpoints` on its own, at once (no failover:
//! each answers for itself), for `raft status`'s per-gateway rows and
//! `raft check`.

use std::future::Future;
use std::time::Duration;

use openshell_client::Client;
use proto::cluster::ClusterStatus;
use serde_json::{json, Value};

use super::table;
use crate::{CliError, Gateway};

/// One endpoint's answer, or the error it failed with, in the user's words.
pub(crate) struct Answer<T> {
    pub endpoint: String,
    pub reply: Result<T, String>,
}

/// The clients of each distinct endpoint, each call bounded by `timeout`.
///
/// # Errors
/// As [`Gateway::client_of`].
pub(crate) fn clients(gw: &Gateway, timeout: Duration) -> Result<Vec<(String, Client)>, CliError> {
    let mut endpoints: Vec<String> = Vec::new();
    for e in gw.endpoints() {
        if !endpoints.contains(e) {
            endpoints.push(e.clone());
        }
    }
    endpoints
        .into_iter()
        .map(|e| gw.client_of(&e, timeout).map(|c| (e, c)))
        .collect()
}

/// Runs `call` on every client at once; one answer per endpoint, in order.
pub(crate) async fn ask<'a, T, F, Fut>(
    gw: &Gateway,
    clients: &'a [(String, Client)],
    call: F,
) -> Vec<Answer<T>>
where
    F: Fn(&'a Client) -> Fut,
    Fut: Future<Output = openshell_client::Result<T>>,
{
    let asks = clients.iter().map(|(endpoint, client)| {
        let reply = call(client);
        async move {
            Answer {
                endpoint: endpoint.clone(),
                reply: reply.await.map_err(|e| gw.explain(e).to_string()),
            }
        }
    });
    futures::future::join_all(asks).await
}

/// How long `raft status` waits for each gateway's own row.
const STATUS_CALL: Duration = Duration::from_secs(3);

/// Each gateway's own status (`etcdctl endpoint status`).
///
/// # Errors
/// A client that cannot be set up.
pub(crate) async fn statuses(gw: &Gateway) -> Result<Vec<Answer<ClusterStatus>>, CliError> {
    let clients = clients(gw, STATUS_CALL)?;
    Ok(ask(gw, &clients, |c| c.cluster_status(true)).await)
}

/// The per-gateway rows as JSON: what each gateway says of itself.
pub(crate) fn statuses_json(answers: &[Answer<ClusterStatus>]) -> Value {
    Value::Array(
        answers
            .iter()
            .map(|a| match &a.reply {
                Ok(s) => json!({
                    "endpoint": a.endpoint, "node_id": s.node_id, "version": s.version,
                    "data_size_bytes": s.data_size_bytes,
                    "is_leader": s.leader_id != 0 && s.leader_id == s.node_id,
                    "is_learner": s.state == "learner", "state": s.state, "term": s.term,
                    "commit_index": s.commit_index, "applied_index": s.applied_index,
                    "errors": s.errors,
                }),
                Err(e) => json!({
                    "endpoint": a.endpoint, "node_id": null, "version": null,
                    "data_size_bytes": null, "is_leader": null, "is_learner": null,
                    "state": null, "term": null, "commit_index": null, "applied_index": null,
                    "errors": [e],
                }),
            })
            .collect(),
    )
}

/// The per-gateway rows as a table.
pub(crate) fn statuses_table(answers: &[Answer<ClusterStatus>]) -> String {
    let rows = answers
        .iter()
        .map(|a| match &a.reply {
            Ok(s) => vec![
                a.endpoint.clone(),
                s.node_id.to_string(),
                s.version.clone(),
                size(s.data_size_bytes),
                yes_no(s.leader_id != 0 && s.leader_id == s.node_id),
                yes_no(s.state == "learner"),
                s.term.to_string(),
                s.commit_index.to_string(),
                s.applied_index.to_string(),
                s.errors.join("; "),
            ],
            Err(e) => {
                let mut row = vec![a.endpoint.clone()];
                row.extend(std::iter::repeat_n("-".to_string(), 8));
                row.push(e.clone());
                row
            }
        })
        .collect();
    table(
        &[
            "ENDPOINT",
            "NODE",
            "VERSION",
            "DATA SIZE",
            "LEADER",
            "LEARNER",
            "TERM",
            "COMMIT",
            "APPLIED",
            "ERRORS",
        ],
        rows,
    )
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_string()
}

/// Bytes in the largest binary unit that keeps a whole number before the
/// point (`1.2 MiB`).
fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::size;

    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(size(512), "512 B");
        assert_eq!(size(1536), "1.5 KiB");
        assert_eq!(size(3 * 1024 * 1024), "3.0 MiB");
    }
}
