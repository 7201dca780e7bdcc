//! `pool status --watch` and `sandbox list --watch`: the pool followed
//! through `PoolAdmin.WatchPool` (no polling).
//!
//! The watch's first changes carry the whole pool; the CLI keeps it and
//! applies every later change, and redraws (as [`super::watch::show`]:
//! a cleared terminal, `--- <unix ms>` tables when piped, NDJSON with `-o
//! json`) when something changed, at most every `--interval`. So an
//! operator sees a takeover, an expiry or a drain as it is applied. When
//! the stream breaks (the gateway stopped or died, or went silent for
//! [`SILENCE`]: paused), the CLI says so on
//! stderr and watches again through the next gateway; the new stream's
//! first changes replace the pool it kept. Ctrl-C ends it with exit code 0.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::time::Duration;

use proto::pool_admin::{
    PoolChange, PoolMember, Sandbox, SupervisorPoolOperation, SupervisorPoolStatus,
};
use serde_json::Value;

use super::watch::{check_interval, show};
use crate::{CliError, Gateway, Output};

/// The redraw interval without `--interval`.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(250);
/// How long the stream may stay silent before the gateway counts as lost
/// (a paused gateway keeps its connection open): two of the gateway's
/// 5 s progress intervals and 5 s.
pub const SILENCE: Duration = Duration::from_secs(15);

/// The pool as the watch showed it.
#[derive(Default)]
struct Pool {
    header: SupervisorPoolStatus,
    members: BTreeMap<String, PoolMember>,
    sandboxes: BTreeMap<String, Sandbox>,
    operations: BTreeMap<String, SupervisorPoolOperation>,
}

impl Pool {
    /// Applies `change`; whether it changed a record.
    fn apply(&mut self, change: PoolChange) -> bool {
        if let Some(header) = change.status {
            self.header = header;
        }
        self.header.applied_index = change.applied_index;
        let mut changed = false;
        for m in change.members {
            self.members.insert(m.id.clone(), m);
            changed = true;
        }
        for s in change.sandboxes {
            self.sandboxes.insert(s.id.clone(), s);
            changed = true;
        }
        for o in change.operations {
            self.operations.insert(o.id.clone(), o);
            changed = true;
        }
        for id in change.removed_members {
            changed |= self.members.remove(&id).is_some();
        }
        for id in change.removed_sandboxes {
            changed |= self.sandboxes.remove(&id).is_some();
        }
        for id in change.removed_operations {
            changed |= self.operations.remove(&id).is_some();
        }
        changed
    }

    /// The pool status this watch shows now (every page in one).
    fn status(&self) -> SupervisorPoolStatus {
        SupervisorPoolStatus {
            members: self.members.values().cloned().collect(),
            sandboxes: self.sandboxes.values().cloned().collect(),
            operations: self.operations.values().cloned().collect(),
            next_page_token: String::new(),
            ..self.header.clone()
        }
    }
}

/// Follows the pool until Ctrl-C, printing `render`'s document and table
/// (`title` names the command) on every change. The caller renders, so this
/// module needs none of the commands that use it.
///
/// # Errors
/// `--interval` below [`super::watch::MIN_INTERVAL`]; no gateway opened the first watch.
pub async fn follow(
    gw: &Gateway,
    output: Output,
    title: &str,
    interval_ms: Option<u64>,
    render: impl Fn(&SupervisorPoolStatus) -> (Value, String),
) -> Result<(), CliError> {
    let interval = interval_ms.map_or(DEFAULT_INTERVAL, Duration::from_millis);
    check_interval(interval)?;
    let terminal = std::io::stdout().is_terminal();
    let client = gw.client();
    let mut pool: Option<Pool> = None;
    loop {
        let opened = tokio::select! {
            opened = gw.ask(client.watch_pool(Duration::ZERO)) => opened,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let (endpoint, mut stream) = match opened {
            Ok(opened) => (opened.endpoint, opened.value),
            Err(e) if pool.is_none() => return Err(e),
            Err(e) => {
                eprintln!(
                    "{title}: {} (retrying)",
                    proto::text::escaped(&e.to_string())
                );
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        // The whole pool of this stream, until its last initial change.
        let mut building = Some(Pool::default());
        let mut dirty = false;
        let mut next_draw = tokio::time::Instant::now();
        let mut heard = tokio::time::Instant::now();
        let broke = loop {
            tokio::select! {
                () = tokio::time::sleep_until(heard + SILENCE) => {
                    break format!("nothing heard for {} s", SILENCE.as_secs());
                }
                message = stream.message() => match message {
                    Ok(Some(change)) => {
                        heard = tokio::time::Instant::now();
                        match building.as_mut() {
                        Some(whole) if change.initial => {
                            let complete = change.initial_complete;
                            whole.apply(change);
                            if complete {
                                pool = building.take();
                                dirty = true;
                            }
                        }
                        _ => {
                            if let Some(p) = pool.as_mut() {
                                dirty |= p.apply(change);
                            }
                        }
                        }
                    }
                    Ok(None) => break "the stream ended".to_string(),
                    Err(status) => break format!("{:?}: {}", status.code(), status.message()),
                },
                () = tokio::time::sleep_until(next_draw), if dirty => {
                    dirty = false;
                    next_draw = tokio::time::Instant::now() + interval;
                    if let Some(p) = pool.as_ref() {
                        let (document, table) = render(&p.status());
                        let heading = format!(
                            "{title} (following changes, applied index {}; Ctrl-C stops)",
                            p.header.applied_index
                        );
                        // The reader went away (`| head`): the watch is over.
                        if show(output, terminal, &heading, &document, &table).is_err() {
                            return Ok(());
                        }
                    }
                }
                _ = tokio::signal::ctrl_c() => return Ok(()),
            }
        };
        eprintln!(
            "{title}: the watch through {endpoint} broke ({}); watching again",
            proto::text::escaped(&broke)
        );
        client.avoid(&endpoint);
    }
}
