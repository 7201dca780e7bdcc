//! The commands other than `dev`: each calls one or two RPCs and prints a
//! table or a JSON document.

use std::time::Duration;

use proto::cluster::cluster_admin_client::ClusterAdminClient;
use proto::cluster::{
    AddLearnerRequest, BackupRequest, ClusterStatus, Member, MembershipReply, PromoteRequest,
    RemoveRequest, StatusRequest, TransferLeaderRequest, TriggerSnapshotRequest,
};
use proto::pool_admin::pool_admin_client::PoolAdminClient;
use proto::pool_admin::{
    start_supervisor_pool_operation_request, CancelSupervisorPoolOperationRequest,
    CreateSandboxRequest, DeleteSandboxRequest, ExecSandboxRequest, GetSandboxRequest,
    GetSupervisorPoolStatusRequest, ListSandboxesRequest, Sandbox,
    StartSupervisorPoolOperationRequest, SupervisorPoolOperation, SupervisorPoolStatus,
};
use serde_json::{json, Value};

use super::{BackupCommand, CliError, Gateway, Output, PoolCommand, RaftCommand, SandboxCommand};

/// Prints `value` as JSON, or `table` as text.
fn emit(output: Output, value: Value, table: impl FnOnce() -> String) {
    match output {
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string())
        ),
        Output::Table => print!("{}", table()),
    }
}

/// Formats rows as aligned columns.
fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.len());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let mut out = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = widths.get(i).copied().unwrap_or(0)))
            .collect::<Vec<_>>()
            .join("  ");
        out.truncate(out.trim_end().len());
        out + "\n"
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    for row in rows {
        out += &line(row);
    }
    out
}

fn raft_json(s: &ClusterStatus) -> Value {
    let node = |n: &proto::cluster::NodeStatus| json!({"id": n.id, "addr": n.addr, "voter": n.voter, "matched_index": n.matched_index, "lag": n.lag});
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
    })
}

fn membership_json(r: &MembershipReply) -> Value {
    let members = |list: &[Member]| {
        list.iter()
            .map(|m| json!({"id": m.id, "addr": m.addr}))
            .collect::<Vec<_>>()
    };
    json!({"log_index": r.log_index, "voters": members(&r.voters), "learners": members(&r.learners),
           "learner_matched": r.learner_matched, "leader_last_index": r.leader_last_index})
}

fn membership_table(r: &MembershipReply) -> String {
    let ids = |list: &[Member]| {
        list.iter()
            .map(|m| m.id.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    format!(
        "voters: {}\nlearners: {}\n",
        ids(&r.voters),
        ids(&r.learners)
    )
}

/// `raft ...`
pub async fn raft(gw: &Gateway, output: Output, command: RaftCommand) -> Result<(), CliError> {
    match command {
        RaftCommand::Status => {
            let s = gw
                .call(|c| async move {
                    ClusterAdminClient::new(c)
                        .status(StatusRequest { local: false })
                        .await
                })
                .await?
                .into_inner();
            emit(output, raft_json(&s), || {
                let leader = if s.leader_id == 0 {
                    "none".to_string()
                } else {
                    format!("{} ({})", s.leader_id, s.leader_addr)
                };
                let head = format!(
                    "leader: {leader}\nterm: {}\ncommit index: {}\napplied index: {}\n\n",
                    s.term, s.commit_index, s.applied_index
                );
                let rows = s
                    .nodes
                    .iter()
                    .map(|n| {
                        vec![
                            n.id.to_string(),
                            n.addr.clone(),
                            if n.voter { "voter" } else { "learner" }.to_string(),
                            n.matched_index.to_string(),
                            n.lag.to_string(),
                        ]
                    })
                    .collect();
                head + &table(&["ID", "ADDRESS", "ROLE", "MATCHED", "LAG"], rows)
            });
        }
        RaftCommand::AddLearner { id, addr, no_wait } => {
            let r = gw
                .call(|c| {
                    let member = Some(Member {
                        id,
                        addr: addr.clone(),
                    });
                    async move {
                        ClusterAdminClient::new(c)
                            .add_learner(AddLearnerRequest {
                                member,
                                blocking: !no_wait,
                            })
                            .await
                    }
                })
                .await?
                .into_inner();
            emit(output, membership_json(&r), || membership_table(&r));
        }
        RaftCommand::Promote { id } => {
            let r = gw
                .call(|c| async move {
                    ClusterAdminClient::new(c)
                        .promote(PromoteRequest { id })
                        .await
                })
                .await?
                .into_inner();
            emit(output, membership_json(&r), || membership_table(&r));
        }
        RaftCommand::Remove { id } => {
            let r = gw
                .call(|c| async move {
                    ClusterAdminClient::new(c)
                        .remove(RemoveRequest { id })
                        .await
                })
                .await?
                .into_inner();
            emit(output, membership_json(&r), || membership_table(&r));
        }
        RaftCommand::TransferLeader { id } => {
            let to = id.unwrap_or(0);
            let r = gw
                .call(|c| async move {
                    ClusterAdminClient::new(c)
                        .transfer_leader(TransferLeaderRequest { to })
                        .await
                })
                .await?
                .into_inner();
            emit(
                output,
                json!({"leader": r.leader_id, "term": r.term}),
                || format!("leader is now {} (term {})\n", r.leader_id, r.term),
            );
        }
        RaftCommand::Snapshot => {
            let r = gw
                .call(|c| async move {
                    ClusterAdminClient::new(c)
                        .trigger_snapshot(TriggerSnapshotRequest {})
                        .await
                })
                .await?
                .into_inner();
            emit(output, json!({"snapshot_index": r.snapshot_index}), || {
                format!("snapshot at index {}\n", r.snapshot_index)
            });
        }
    }
    Ok(())
}

fn sandbox_json(s: &Sandbox) -> Value {
    json!({
        "id": s.id, "generation": s.generation, "phase": s.phase, "owner": s.owner,
        "owner_incarnation": s.owner_incarnation, "term": s.term, "epoch": s.epoch,
        "acknowledged": s.acknowledged, "observed_status": s.observed_status,
        "pid": if s.pid == 0 { Value::Null } else { json!(s.pid) },
        "started_at": if s.started_at_unix_ms == 0 { Value::Null } else { json!(s.started_at_unix_ms) },
        "failure": s.failure, "launch_id": s.launch_id,
    })
}

fn sandbox_rows(list: &[Sandbox]) -> String {
    let rows = list
        .iter()
        .map(|s| {
            vec![
                s.id.clone(),
                s.phase.clone(),
                s.owner.clone(),
                s.term.to_string(),
                s.epoch.to_string(),
                if s.pid == 0 {
                    "-".into()
                } else {
                    s.pid.to_string()
                },
                if s.failure.is_empty() {
                    String::new()
                } else {
                    s.failure.clone()
                },
            ]
        })
        .collect();
    table(
        &["ID", "PHASE", "OWNER", "TERM", "EPOCH", "PID", "FAILURE"],
        rows,
    )
}

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
            "address": m.address, "state": m.state, "capacity": m.capacity, "used": m.used,
            "ticks_since_heartbeat": m.ticks_since_heartbeat, "eligible": m.eligible})).collect::<Vec<_>>(),
        "sandboxes": s.sandboxes.iter().map(sandbox_json).collect::<Vec<_>>(),
        "operations": s.operations.iter().map(operation_json).collect::<Vec<_>>(),
    })
}

async fn pool_status(gw: &Gateway) -> Result<SupervisorPoolStatus, CliError> {
    Ok(gw
        .call(|c| async move {
            PoolAdminClient::new(c)
                .get_supervisor_pool_status(GetSupervisorPoolStatusRequest { stale: false })
                .await
        })
        .await?
        .into_inner())
}

/// Polls an operation until it ends, printing progress on stderr.
async fn wait_operation(gw: &Gateway, id: &str) -> Result<SupervisorPoolOperation, CliError> {
    let mut last = String::new();
    loop {
        let status = pool_status(gw).await?;
        let op = status
            .operations
            .iter()
            .find(|o| o.id == id)
            .cloned()
            .ok_or_else(|| CliError::NotFound(format!("operation {id} disappeared")))?;
        let progress = format!(
            "{} {}: {} moves {}/{}",
            op.kind, op.id, op.phase, op.moves_done, op.moves_planned
        );
        if progress != last {
            eprintln!("{progress}");
            last = progress;
        }
        match op.phase.as_str() {
            "succeeded" => return Ok(op),
            "failed" | "cancelled" => {
                return Err(CliError::Refused(format!(
                    "operation {} {}: {}",
                    op.id, op.phase, op.message
                )))
            }
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
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
        PoolCommand::Status => {
            let s = pool_status(gw).await?;
            emit(output, pool_json(&s), || {
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
                                m.state.clone(),
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
            });
            return Ok(());
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

/// `sandbox ...`
pub async fn sandbox(
    gw: &Gateway,
    output: Output,
    command: SandboxCommand,
) -> Result<(), CliError> {
    match command {
        SandboxCommand::Create { id, command } => {
            let material_ref = if command.is_empty() {
                "demo".to_string()
            } else {
                serde_json::to_string(&command).map_err(|e| CliError::Local(e.to_string()))?
            };
            let s = gw
                .call(|c| {
                    let request = CreateSandboxRequest {
                        sandbox_id: id.clone().unwrap_or_default(),
                        launch_id: String::new(),
                        material_ref: material_ref.clone(),
                    };
                    async move { PoolAdminClient::new(c).create_sandbox(request).await }
                })
                .await?
                .into_inner();
            emit(output, sandbox_json(&s), || {
                sandbox_rows(std::slice::from_ref(&s))
            });
        }
        SandboxCommand::Delete { id } => {
            let s = gw
                .call(|c| {
                    let sandbox_id = id.clone();
                    async move {
                        PoolAdminClient::new(c)
                            .delete_sandbox(DeleteSandboxRequest { sandbox_id })
                            .await
                    }
                })
                .await?
                .into_inner();
            emit(output, sandbox_json(&s), || {
                sandbox_rows(std::slice::from_ref(&s))
            });
        }
        SandboxCommand::Get { id } => {
            let s = gw
                .call(|c| {
                    let sandbox_id = id.clone();
                    async move {
                        PoolAdminClient::new(c)
                            .get_sandbox(GetSandboxRequest {
                                sandbox_id,
                                stale: false,
                            })
                            .await
                    }
                })
                .await?
                .into_inner();
            emit(output, sandbox_json(&s), || {
                sandbox_rows(std::slice::from_ref(&s))
            });
        }
        SandboxCommand::List => {
            let list = gw
                .call(|c| async move {
                    PoolAdminClient::new(c)
                        .list_sandboxes(ListSandboxesRequest { stale: false })
                        .await
                })
                .await?
                .into_inner()
                .sandboxes;
            emit(
                output,
                Value::Array(list.iter().map(sandbox_json).collect()),
                || sandbox_rows(&list),
            );
        }
        SandboxCommand::Exec {
            id,
            command,
            timeout_ms,
        } => {
            let r = gw
                .call(|c| {
                    let request = ExecSandboxRequest {
                        sandbox_id: id.clone(),
                        argv: command.clone(),
                        timeout_ms,
                    };
                    async move { PoolAdminClient::new(c).exec_sandbox(request).await }
                })
                .await?
                .into_inner();
            match output {
                Output::Json => emit(
                    output,
                    json!({"exit_code": r.exit_code, "stdout": String::from_utf8_lossy(&r.stdout),
                           "stderr": String::from_utf8_lossy(&r.stderr), "executed_by": r.executed_by, "term": r.term}),
                    String::new,
                ),
                Output::Table => {
                    use std::io::Write;
                    let _ = std::io::stdout().write_all(&r.stdout);
                    let _ = std::io::stderr().write_all(&r.stderr);
                }
            }
            if r.exit_code != 0 {
                return Err(CliError::ExitStatus(r.exit_code));
            }
        }
    }
    Ok(())
}

/// `backup ...`
pub async fn backup(gw: &Gateway, output: Output, command: BackupCommand) -> Result<(), CliError> {
    let BackupCommand::Save { file } = command;
    let r = gw
        .call(|c| async move {
            ClusterAdminClient::new(c)
                .max_decoding_message_size(64 * 1024 * 1024)
                .backup(BackupRequest {})
                .await
        })
        .await?
        .into_inner();
    let header = crate::backup::BackupHeader {
        cluster_id: r.cluster_id.clone(),
        term: r.term,
        index: r.index,
        bytes: r.state.len() as u64,
        crc32: crc32fast::hash(&r.state),
        taken_by_node: r.taken_by_node,
    };
    crate::backup::write(&file, &header, &r.state).map_err(|e| CliError::Local(e.to_string()))?;
    emit(
        output,
        json!({"file": file.display().to_string(), "cluster_id": header.cluster_id, "index": header.index,
               "term": header.term, "bytes": header.bytes}),
        || {
            format!(
                "saved {} (log index {}, {} bytes)\n",
                file.display(),
                header.index,
                header.bytes
            )
        },
    );
    Ok(())
}
