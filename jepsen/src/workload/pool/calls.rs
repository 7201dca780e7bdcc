//! The pool workload's calls to the gateways: one [`Call`] per `f`
//! (`launch`, `delete`, `get`, `status`, `drain`, `cancel`), each recorded
//! as an invoke and its completion ([`Shared::op`]), and the client loop
//! that draws them.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use proto::pool_admin::pool_admin_client::PoolAdminClient;
use proto::pool_admin::{
    start_supervisor_pool_operation_request, CancelSupervisorPoolOperationRequest,
    CreateSandboxRequest, DeleteSandboxRequest, GetSandboxRequest, GetSupervisorPoolStatusRequest,
    StartSupervisorPoolOperationRequest, SupervisorPoolOperation,
};
use proto::pool_types::MemberState;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

use super::{lock, short, Shared};
use crate::history::{EventSpec, OpType, Process};
use crate::ops::pool::{Absent, Drain, Launch, SandboxRef, SandboxView, StatusRead};
use crate::ops::to_value;
use crate::security::Authed;

/// One call and its invoke value.
#[derive(Clone, Debug)]
pub(super) enum Call {
    /// `PoolAdmin.CreateSandbox`.
    Launch(Launch),
    /// `PoolAdmin.DeleteSandbox`.
    Delete(SandboxRef),
    /// `PoolAdmin.GetSandbox`, linearizable.
    Get(SandboxRef),
    /// `PoolAdmin.GetSupervisorPoolStatus`, linearizable.
    Status,
    /// `StartSupervisorPoolOperation`: drain a member.
    Drain(Drain),
    /// `CancelSupervisorPoolOperation` of that drain.
    Cancel(Drain),
}

impl Call {
    /// Its `f`.
    pub(super) fn f(&self) -> &'static str {
        match self {
            Call::Launch(_) => "launch",
            Call::Delete(_) => "delete",
            Call::Get(_) => "get",
            Call::Status => "status",
            Call::Drain(_) => "drain",
            Call::Cancel(_) => "cancel",
        }
    }

    /// Its `key`: the sandbox, or the drained member.
    fn key(&self) -> Option<String> {
        match self {
            Call::Launch(l) => Some(l.sandbox.clone()),
            Call::Delete(r) | Call::Get(r) => Some(r.sandbox.clone()),
            Call::Status => None,
            Call::Drain(d) | Call::Cancel(d) => Some(d.member.clone()),
        }
    }

    /// Its invoke value.
    fn value(&self) -> Value {
        match self {
            Call::Launch(l) => to_value(l),
            Call::Delete(r) | Call::Get(r) => to_value(r),
            Call::Status => Value::Null,
            Call::Drain(d) | Call::Cancel(d) => to_value(d),
        }
    }
}

/// How one op completed.
pub(super) struct Done {
    /// The process number to use next (a fresh one after `info`).
    pub(super) next: u64,
    /// The `ok` value.
    pub(super) ok: Option<Value>,
    /// The `fail` error.
    pub(super) fail: Option<String>,
    /// Index of the completion event.
    pub(super) index: u64,
}

enum Outcome {
    Ok(Value),
    Fail(Value, String),
    Info(String),
}

/// How a call that changes state ended: `ok` with its view; a certain
/// failure (`fail`, nothing applied) for the `certain` codes; otherwise
/// unknown (`info`: it may have been applied).
fn write_outcome(
    result: Result<Value, tonic::Status>,
    value: &Value,
    certain: &[tonic::Code],
) -> Outcome {
    match result {
        Ok(v) => Outcome::Ok(v),
        Err(s) if certain.contains(&s.code()) => Outcome::Fail(value.clone(), short(&s)),
        Err(s) => Outcome::Info(short(&s)),
    }
}

/// The view of a pool operation (`drain` / `cancel` results).
fn operation_value(o: &SupervisorPoolOperation) -> Value {
    to_value(&Drain {
        op: o.id.clone(),
        member: o.member.clone(),
        phase: Some(o.phase.clone()),
    })
}

fn sandbox_value(s: &proto::pool_admin::Sandbox) -> Value {
    to_value(&SandboxView::from(s))
}

impl Shared {
    fn spec(
        &self,
        kind: OpType,
        process: u64,
        call: &Call,
        value: Value,
        node: usize,
    ) -> EventSpec {
        EventSpec {
            kind,
            process: Process::Client(process),
            f: call.f().to_string(),
            key: call.key(),
            value,
            node: Some(format!("n{node}")),
            error: None,
        }
    }

    /// Runs one op: invoke, call, complete.
    pub(super) async fn op(&self, process: u64, call: &Call, node: usize) -> Done {
        let value = call.value();
        self.history
            .record(self.spec(OpType::Invoke, process, call, value.clone(), node));
        let (kind, recorded, next, ok, fail) = match self.call(call, &value, node).await {
            Outcome::Ok(v) => (OpType::Ok, v.clone(), process, Some(v), None),
            Outcome::Fail(v, err) => (OpType::Fail, v, process, None, Some(err)),
            Outcome::Info(err) => {
                let next = self.processes.fresh();
                let mut spec = self.spec(OpType::Info, process, call, value, node);
                spec.error = Some(err);
                let e = self.history.record(spec);
                return Done {
                    next,
                    ok: None,
                    fail: None,
                    index: e.index,
                };
            }
        };
        let mut spec = self.spec(kind, process, call, recorded, node);
        spec.error = fail.clone();
        let e = self.history.record(spec);
        Done {
            next,
            ok,
            fail,
            index: e.index,
        }
    }

    /// One linearizable status read. The status is paginated: the largest
    /// page (5000 records) holds every member, operation and sandbox of a
    /// run, so the read stays one read at one log position.
    async fn status(&self, pool: &mut PoolAdminClient<Authed>, value: &Value) -> Outcome {
        match pool
            .get_supervisor_pool_status(GetSupervisorPoolStatusRequest {
                stale: false,
                page_size: 5000,
                ..Default::default()
            })
            .await
        {
            Ok(r) => {
                let r = r.into_inner();
                let mut expired = lock(&self.expired);
                expired.clear();
                for m in r
                    .members
                    .iter()
                    .filter(|m| m.state() == MemberState::Expired)
                {
                    expired.insert(m.id.clone(), m.incarnation);
                }
                Outcome::Ok(to_value(&StatusRead::from(&r)))
            }
            Err(s) => Outcome::Fail(value.clone(), short(&s)),
        }
    }

    async fn call(&self, call: &Call, value: &Value, node: usize) -> Outcome {
        let Ok(n) = self.cluster.node(node) else {
            return Outcome::Fail(value.clone(), format!("no node {node}"));
        };
        let mut pool = n.pool();
        match call {
            Call::Launch(launch) => {
                match pool
                    .create_sandbox(CreateSandboxRequest {
                        sandbox_id: launch.sandbox.clone(),
                        launch_id: launch.launch_id.clone(),
                        material_ref: format!("material-{}", launch.sandbox),
                        request_id: String::new(),
                    })
                    .await
                {
                    Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                        let refused = Launch {
                            refused: Some(true),
                            ..launch.clone()
                        };
                        Outcome::Fail(to_value(&refused), short(&s))
                    }
                    r => write_outcome(
                        r.map(|r| sandbox_value(&r.into_inner())),
                        value,
                        &[tonic::Code::AlreadyExists, tonic::Code::InvalidArgument],
                    ),
                }
            }
            Call::Delete(r) => write_outcome(
                pool.delete_sandbox(DeleteSandboxRequest {
                    sandbox_id: r.sandbox.clone(),
                    request_id: String::new(),
                })
                .await
                .map(|r| sandbox_value(&r.into_inner())),
                value,
                &[tonic::Code::NotFound, tonic::Code::FailedPrecondition],
            ),
            Call::Get(r) => match pool
                .get_sandbox(GetSandboxRequest {
                    sandbox_id: r.sandbox.clone(),
                    stale: false,
                })
                .await
            {
                Ok(reply) => Outcome::Ok(sandbox_value(&reply.into_inner())),
                Err(s) if s.code() == tonic::Code::NotFound => Outcome::Ok(to_value(&Absent {
                    sandbox: r.sandbox.clone(),
                    absent: true,
                })),
                // A read changes nothing: every error is a certain failure.
                Err(s) => Outcome::Fail(value.clone(), short(&s)),
            },
            Call::Status => self.status(&mut pool, value).await,
            Call::Drain(d) => write_outcome(
                pool.start_supervisor_pool_operation(StartSupervisorPoolOperationRequest {
                    operation_id: d.op.clone(),
                    kind: Some(start_supervisor_pool_operation_request::Kind::DrainMember(
                        d.member.clone(),
                    )),
                    max_parallel: 2,
                    // One attempt per call: nothing to deduplicate.
                    request_id: String::new(),
                })
                .await
                .map(|r| operation_value(&r.into_inner())),
                value,
                &[
                    tonic::Code::FailedPrecondition,
                    tonic::Code::InvalidArgument,
                    tonic::Code::NotFound,
                    tonic::Code::AlreadyExists,
                ],
            ),
            Call::Cancel(d) => write_outcome(
                pool.cancel_supervisor_pool_operation(CancelSupervisorPoolOperationRequest {
                    operation_id: d.op.clone(),
                })
                .await
                .map(|r| operation_value(&r.into_inner())),
                value,
                &[tonic::Code::FailedPrecondition, tonic::Code::NotFound],
            ),
        }
    }

    /// The next client call, drawn from `rng`.
    fn draw(&self, rng: &mut StdRng) -> Call {
        let roll: f64 = rng.gen();
        let live: Vec<String> = lock(&self.live).iter().cloned().collect();
        let pick_live = |rng: &mut StdRng| -> Option<String> {
            (!live.is_empty()).then(|| live[rng.gen_range(0..live.len())].clone())
        };
        if roll < 0.22 || live.is_empty() {
            let k = self.next_sandbox.fetch_add(1, Ordering::Relaxed);
            let sandbox = format!("sb{k}");
            lock(&self.used).insert(sandbox.clone());
            Call::Launch(Launch {
                sandbox,
                launch_id: format!("launch-{k}"),
                refused: None,
            })
        } else if roll < 0.42 {
            let sandbox = pick_live(rng).unwrap_or_default();
            Call::Delete(SandboxRef { sandbox })
        } else if roll < 0.75 {
            // Mostly live sandboxes, sometimes any id ever used.
            let sandbox = if rng.gen_bool(0.8) {
                pick_live(rng).unwrap_or_default()
            } else {
                let used: Vec<String> = lock(&self.used).iter().cloned().collect();
                used[rng.gen_range(0..used.len())].clone()
            };
            Call::Get(SandboxRef { sandbox })
        } else {
            Call::Status
        }
    }

    /// One client: draws and runs calls until the run stops.
    pub(super) async fn client(self: Arc<Self>, worker: usize, seed: u64) {
        let mut rng =
            StdRng::seed_from_u64(seed ^ (worker as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut process = self.processes.fresh();
        let n = self.cluster.nodes.len();
        while !self.stop.load(Ordering::Relaxed) {
            let node = rng.gen_range(1..=n);
            let call = self.draw(&mut rng);
            let done = self.op(process, &call, node).await;
            process = done.next;
            if done.ok.is_some() {
                match &call {
                    Call::Launch(l) => {
                        lock(&self.live).insert(l.sandbox.clone());
                    }
                    Call::Delete(r) => {
                        lock(&self.live).remove(&r.sandbox);
                    }
                    _ => {}
                }
            }
            let (lo, hi) = self.options.delay_ms;
            let pause = if hi > lo { rng.gen_range(lo..hi) } else { lo };
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }
}
