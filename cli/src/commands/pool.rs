//! `pool ...`: status, drain, rebalance and cancel through
//! `openshell.pool_admin.v1.PoolAdmin`.

use std::time::Duration;

use proto::pool_admin::pool_admin_client::PoolAdminClient;
use proto::pool_admin::{
    start_supervisor_pool_operation_request, CancelSupervisorPoolOperationRequest,
    GetSupervisorPoolStatusRequest, StartSupervisorPoolOperationRequest, SupervisorPoolOperation,
    SupervisorPoolStatus,
};
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

fn pool_json(s: &SupervisorPoolStatus) -> Value {
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

/// The whole pool status: every page, followed to the last
/// (`next_page_token` empty). The header (tick, applied index) is the first
/// page's; each page is its own linearizable read.
async fn pool_status(gw: &Gateway) -> Result<SupervisorPoolStatus, CliError> {
    let mut whole: Option<SupervisorPoolStatus> = None;
    let mut token = String::new();
    loop {
        let page_token = token.clone();
        let page = gw
            .call(|c| {
                let page_token = page_token.clone();
                async move {
                    PoolAdminClient::new(c)
                        .get_supervisor_pool_status(GetSupervisorPoolStatusRequest {
                            stale: false,
                            page_size: 0,
                            page_token,
                        })
                        .await
                }
            })
            .await?
            .into_inner();
        token = page.next_page_token.clone();
        match whole.as_mut() {
            None => whole = Some(page),
            Some(w) => {
                w.members.extend(page.members);
                w.operations.extend(page.operations);
                w.sandboxes.extend(page.sandboxes);
            }
        }
        if token.is_empty() {
            break;
        }
    }
    let mut whole = whole.unwrap_or_default();
    whole.next_page_token.clear();
    Ok(whole)
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

    fn show(&mut self, op: &SupervisorPoolOperation) {
        match self {
            Progress::Bar(bar) => {
                bar.set_prefix(format!("{} {}", op.kind, op.id));
                bar.set_length(op.moves_planned.into());
                bar.set_position(op.moves_done.into());
                bar.set_message(op.phase.clone());
            }
            Progress::Lines(last) => {
                let line = format!(
                    "{} {}: {} moves {}/{}",
                    op.kind, op.id, op.phase, op.moves_done, op.moves_planned
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
            bar.finish_with_message(op.phase.clone());
        }
    }
}

/// `pool status` as text: members, sandboxes, operations.
fn status_table(s: &SupervisorPoolStatus) -> String {
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
    let start = |kind: start_supervisor_pool_operation_request::Kind, max_parallel: u32| {
        gw.call(move |c| {
            let kind = kind.clone();
            async move {
                PoolAdminClient::new(c)
                    .start_supervisor_pool_operation(StartSupervisorPoolOperationRequest {
                        operation_id: String::new(),
                        kind: Some(kind),
                        max_parallel,
                    })
                    .await
            }
        })
    };
    let op = match command {
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
            let op = start(
                start_supervisor_pool_operation_request::Kind::DrainMember(member),
                max_parallel,
            )
            .await?
            .into_inner();
            (op, wait)
        }
        PoolCommand::Rebalance { max_parallel, wait } => {
            let op = start(
                start_supervisor_pool_operation_request::Kind::Rebalance(true),
                max_parallel,
            )
            .await?
            .into_inner();
            (op, wait)
        }
        PoolCommand::Cancel { operation } => {
            let op = gw
                .call(|c| {
                    let operation_id = operation.clone();
                    async move {
                        PoolAdminClient::new(c)
                            .cancel_supervisor_pool_operation(
                                CancelSupervisorPoolOperationRequest { operation_id },
                            )
                            .await
                    }
                })
                .await?
                .into_inner();
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
