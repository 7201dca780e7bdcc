//! `pool ...`: status, drain, rebalance and cancel through
//! `openshell.pool_admin.v1.PoolAdmin`.

use std::time::Duration;

use openshell_client::admin::OperationKind;
use proto::pool_admin::{SupervisorPoolOperation, SupervisorPoolStatus};
use proto::pool_types::MemberState;
use serde_json::{json, Value};

use super::sandbox::{sandbox_json, sandbox_rows};
use super::{emit, table};
use crate::{CliError, Gateway, Output, PoolCommand};

fn operation_json(o: &SupervisorPoolOperation) -> Value {
    json!({"id": o.id, "kind": o.kind, "member": o.member, "phase": o.phase, "message": o.message,
           "attempts": o.attempts, "moves_planned": o.moves_planned, "moves_done": o.moves_done,
           "max_parallel": o.max_parallel, "deadline_tick": o.deadline_tick})
}

pub(crate) fn pool_json(s: &SupervisorPoolStatus) -> Value {
    json!({
        "now_tick": s.now_tick,
        "applied_index": s.applied_index,
        "members": s.members.iter().map(|m| json!({"id": m.id, "uid": m.uid, "incarnation": m.incarnation,
            "address": m.address, "state": MemberState::name_of(m.state), "capacity": m.capacity, "used": m.used,
            "ticks_since_heartbeat": m.ticks_since_heartbeat, "eligible": m.eligible})).collect::<Vec<_>>(),
        "sandboxes": s.sandboxes.iter().map(sandbox_json).collect::<Vec<_>>(),
        "operations": s.operations.iter().map(operation_json).collect::<Vec<_>>(),
    })
}

/// The whole pool status: every page, followed to the last (merged by
/// `openshell-client`). The header (tick, applied index) is the first
/// page's; each page is its own linearizable read.
async fn pool_status(gw: &Gateway) -> Result<SupervisorPoolStatus, CliError> {
    gw.ask(gw.client().pool_status()).await
}

/// Polls an operation until it ends, showing its progress on stderr: a
/// progress bar (moves done of planned) when stderr is a terminal, else one
/// line per change.
async fn wait_operation(gw: &Gateway, id: &str) -> Result<SupervisorPoolOperation, CliError> {
    let mut progress = Progress::new();
    loop {
        let status = pool_status(gw).await?;
        let op = status
            .operations
            .iter()
            .find(|o| o.id == id)
            .cloned()
            .ok_or_else(|| CliError::NotFound(format!("operation {id} disappeared")))?;
        progress.show(&op);
        match op.phase.as_str() {
            "succeeded" => {
                progress.finish(&op);
                return Ok(op);
            }
            "failed" | "cancelled" => {
                progress.finish(&op);
                return Err(CliError::Refused(format!(
                    "operation {} {}: {}",
                    op.id, op.phase, op.message
                )));
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// How `--wait` shows an operation's progress.
enum Progress {
    /// stderr is a terminal: a bar of moves done out of planned.
    Bar(indicatif::ProgressBar),
    /// stderr is piped: the last line printed.
    Lines(String),
}

impl Progress {
    fn new() -> Self {
        if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            let bar = indicatif::ProgressBar::new(0);
            let style = indicatif::ProgressStyle::with_template(
                "{prefix} [{bar:30}] {pos}/{len} moves {msg} ({elapsed})",
            )
            .map(|s| s.progress_chars("=> "))
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(200));
            Progress::Bar(bar)
        } else {
            Progress::Lines(String::new())
        }
    }

    /// Shows `op`'s progress; its words come from a gateway, so they are
    /// escaped ([`proto::text::escaped`]) before they reach the terminal.
    fn show(&mut self, op: &SupervisorPoolOperation) {
        use proto::text::escaped;
        match self {
            Progress::Bar(bar) => {
                bar.set_prefix(format!("{} {}", escaped(&op.kind), escaped(&op.id)));
                bar.set_length(op.moves_planned.into());
                bar.set_position(op.moves_done.into());
                bar.set_message(escaped(&op.phase).into_owned());
            }
            Progress::Lines(last) => {
                let line = format!(
                    "{} {}: {} moves {}/{}",
                    escaped(&op.kind),
                    escaped(&op.id),
                    escaped(&op.phase),
                    op.moves_done,
                    op.moves_planned
                );
                if line != *last {
                    eprintln!("{line}");
                    *last = line;
                }
            }
        }
    }

    fn finish(&mut self, op: &SupervisorPoolOperation) {
        if let Progress::Bar(bar) = self {
            bar.finish_with_message(proto::text::escaped(&op.phase).into_owned());
        }
    }
}

/// `pool status` as text: members, sandboxes, operations.
pub(crate) fn status_table(s: &SupervisorPoolStatus) -> String {
    let members = table(
        &[
            "MEMBER",
            "STATE",
            "CAPACITY",
            "USED",
            "INCARNATION",
            "ADDRESS",
        ],
        s.members
            .iter()
            .map(|m| {
                vec![
                    m.id.clone(),
                    MemberState::name_of(m.state).to_string(),
                    m.capacity.to_string(),
                    m.used.to_string(),
                    m.incarnation.to_string(),
                    m.address.clone(),
                ]
            })
            .collect(),
    );
    let ops = table(
        &["OPERATION", "KIND", "MEMBER", "PHASE", "MOVES", "MESSAGE"],
        s.operations
            .iter()
            .map(|o| {
                vec![
                    o.id.clone(),
                    o.kind.clone(),
                    o.member.clone(),
                    o.phase.clone(),
                    format!("{}/{}", o.moves_done, o.moves_planned),
                    o.message.clone(),
                ]
            })
            .collect(),
    );
    format!("{members}\n{}\n{ops}", sandbox_rows(&s.sandboxes))
}

/// `pool ...`
pub async fn pool(gw: &Gateway, output: Output, command: PoolCommand) -> Result<(), CliError> {
    let client = gw.client();
    // One request id on every attempt: a retry never starts a second
    // operation.
    let start = |kind: OperationKind, max_parallel: u32| async move {
        gw.ask(client.start_operation(kind, max_parallel))
            .await
            .map(|written| written.value)
    };
    let op = match command {
        PoolCommand::Status {
            watch: true,
            interval,
        } => {
            return super::follow::follow(gw, output, "pool status", interval, |s| {
                (pool_json(s), status_table(s))
            })
            .await;
        }
        PoolCommand::Status { watch, interval } => {
            let fetch = || async {
                let s = pool_status(gw).await?;
                Ok::<_, CliError>((pool_json(&s), status_table(&s)))
            };
            return super::watch::once_or_watch("pool status", output, watch, interval, fetch)
                .await;
        }
        PoolCommand::Drain {
            member,
            max_parallel,
            wait,
        } => {
            let op = start(OperationKind::DrainMember(member), max_parallel).await?;
            (op, wait)
        }
        PoolCommand::Rebalance { max_parallel, wait } => {
            let op = start(OperationKind::Rebalance(true), max_parallel).await?;
            (op, wait)
        }
        PoolCommand::Cancel { operation } => {
            let op = gw.ask(client.cancel_operation(&operation)).await?;
            (op, false)
        }
    };
    let (op, wait) = op;
    let op = if wait {
        wait_operation(gw, &op.id).await?
    } else {
        op
    };
    emit(output, operation_json(&op), || {
        format!(
            "{} {} ({}): {} moves {}/{}\n",
            op.kind, op.id, op.member, op.phase, op.moves_done, op.moves_planned
        )
    });
    Ok(())
}
