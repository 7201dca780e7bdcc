//! The register workload: clients read, write and compare-and-set a few
//! registers (objects of the simulated store) through seeded nodes, and
//! every operation goes into a history that the Jepsen harness's own
//! linearizability checker (WGL, `jepsen::checker::linear`) judges at the
//! end.
//!
//! Outcomes follow Jepsen: `ok` took effect, `fail` certainly did not (a
//! rejected compare-and-set, a failed read), anything else of a write is
//! unknown (`info`: it may take effect at any later point, or never) and
//! the client goes on as a new process. All clients run on one simulated
//! host, so the order in which they record is real time: the history's
//! event numbers serve as the checker's timestamps.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jepsen::checker::linear::{check_key, Op, Options, RegOp, Verdict};
use rand::rngs::StdRng;
use rand::Rng;

use crate::node::{host, Answer, Call, Slot, Unanswered};
use crate::trace::Trace;

/// How long a client waits for one operation before calling it unknown.
pub const OP_TIMEOUT: Duration = Duration::from_secs(2);

/// The search budget per register. The histories here are small (tens to
/// hundreds of operations per register); a search that runs out is a
/// failure to look at, not a pass.
const MAX_STEPS: u64 = 5_000_000;

#[derive(Default)]
struct Inner {
    /// The next event number (invokes and completions share it).
    next: u64,
    /// The next process number.
    processes: u64,
    /// Completed and unknown operations, per register.
    ops: BTreeMap<String, Vec<Op>>,
    /// Operations that completed `ok`.
    ok: usize,
}

/// The run's history. Cloning shares it.
#[derive(Clone, Default)]
pub struct History(Arc<Mutex<Inner>>);

impl History {
    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A fresh process number.
    pub fn process(&self) -> u64 {
        let mut inner = self.inner();
        inner.processes += 1;
        inner.processes
    }

    /// Numbers an invoke.
    pub fn invoke(&self) -> u64 {
        let mut inner = self.inner();
        inner.next += 1;
        inner.next
    }

    /// Records an operation invoked at `invoked`: `Some(op)` completed
    /// `ok` now, `None` in `outcome` means unknown.
    fn complete(&self, key: &str, process: u64, invoked: u64, op: RegOp, ok: bool) {
        let mut inner = self.inner();
        inner.next += 1;
        let now = inner.next;
        if ok {
            inner.ok += 1;
        }
        inner.ops.entry(key.to_string()).or_default().push(Op {
            invoke_index: invoked,
            complete_index: ok.then_some(now),
            process,
            op,
            call: invoked,
            ret: ok.then_some(now),
        });
    }

    /// Operations that completed `ok`.
    pub fn ok(&self) -> usize {
        self.inner().ok
    }

    /// Every register's history is linearizable.
    ///
    /// # Errors
    /// The first register that is not (or whose search ran out), with the
    /// operation the search got stuck at and the ones concurrent with it.
    pub fn check(&self) -> Result<usize, String> {
        let ops = self.inner().ops.clone();
        let mut checked = 0;
        for (key, ops) in &ops {
            let result = check_key(
                key,
                ops,
                Options {
                    max_steps: MAX_STEPS,
                },
            );
            match result.verdict {
                Verdict::Valid => checked += ops.len(),
                Verdict::Invalid => {
                    let prefix = &result.best_prefix;
                    let tail = &prefix[prefix.len().saturating_sub(10)..];
                    return Err(format!(
                        "register {key} is not linearizable ({} ops): stuck at {:?} \
                         after a prefix of {} ops ending {tail:?} (value {:?}); numbers are \
                         the history's event numbers (`#N` in the trace)",
                        ops.len(),
                        result.offending,
                        prefix.len(),
                        result.best_state
                    ));
                }
                Verdict::Unknown => {
                    return Err(format!(
                        "register {key}: the linearizability search ran out after {} steps \
                         ({} ops)",
                        result.steps,
                        ops.len()
                    ))
                }
            }
        }
        Ok(checked)
    }
}

/// The register a key names.
pub fn key(k: usize) -> String {
    format!("r{k}")
}

fn decode(payload: &[u8]) -> Option<i64> {
    std::str::from_utf8(payload).ok()?.parse().ok()
}

/// How an operation ended.
#[derive(Clone, Copy, Debug)]
pub enum Ended {
    /// Took effect: the op as completed (a read with the value it read).
    Ok(RegOp),
    /// Certainly did not take effect.
    Fail,
    /// May take effect at any later point, or never.
    Unknown,
}

/// Where an operation goes: the node of its first attempt, then the nodes
/// a write whose outcome is unknown is retried through (with the same
/// request id), and the run's shared parts.
pub struct Route<'a> {
    /// The run's history.
    pub history: &'a History,
    /// The run's trace.
    pub trace: &'a Trace,
    /// The nodes (node `i + 1` at index `i`).
    pub slots: &'a [Slot],
    /// The first attempt's node, then the retries' (at least one).
    pub via: Vec<u64>,
}

/// How many times a client retries a write whose outcome is unknown (with
/// the same request id, through seeded nodes).
const RETRIES: usize = 3;

/// Pause before a retry of a write whose outcome is unknown.
const RETRY_PAUSE: Duration = Duration::from_millis(250);

impl Route<'_> {
    async fn call(&self, via: u64, call: Call) -> Result<Answer, Unanswered> {
        let slot = usize::try_from(via.saturating_sub(1))
            .ok()
            .and_then(|i| self.slots.get(i))
            .ok_or(Unanswered::Down)?;
        slot.call(call, OP_TIMEOUT).await
    }

    /// A put with `request_id`, retried along the route while its outcome
    /// is unknown: Ok(version) applied; Err(true) maybe applied (every
    /// attempt unknown or some unknown and the rest undelivered);
    /// Err(false) certainly not applied. A retry of a put that did apply
    /// is answered with its first outcome (the request table): if that
    /// ever failed, this would record `fail` for a write that took effect
    /// and the history would show it.
    async fn put(
        &self,
        key: &str,
        value: i64,
        version: Option<u64>,
        request_id: &str,
        notes: &mut Vec<String>,
    ) -> Result<u64, bool> {
        let mut maybe = false;
        for (attempt, via) in self.via.iter().enumerate() {
            if attempt > 0 {
                tokio::time::sleep(RETRY_PAUSE).await;
            }
            let call = Call::Put {
                id: key.into(),
                payload: value.to_string().into_bytes(),
                version,
                request_id: request_id.into(),
            };
            let answer = self.call(*via, call).await;
            notes.push(format!("{}: {}", host(*via), said(&answer)));
            match answer {
                Ok(Answer::Put(version)) => return Ok(version),
                Ok(Answer::Rejected(_)) => return Err(false),
                Err(Unanswered::Down) => {}
                _ => maybe = true,
            }
        }
        Err(maybe)
    }

    /// One operation, recorded in the history and the trace.
    pub async fn operate(&self, process: u64, key: &str, op: RegOp) -> Ended {
        let invoked = self.history.invoke();
        let request_id = format!("op-{invoked}");
        let first = self.via.first().copied().unwrap_or(1);
        let mut notes = Vec::new();
        let ended = match op {
            RegOp::Read(_) => self.read(first, key, &mut notes).await,
            RegOp::Write(v) => match self.put(key, v, None, &request_id, &mut notes).await {
                Ok(_) => Ended::Ok(op),
                Err(true) => Ended::Unknown,
                Err(false) => Ended::Fail,
            },
            RegOp::Cas(expected, new) => match self.call(first, Call::Get { id: key.into() }).await
            {
                Ok(Answer::Get(Some((payload, version)))) if decode(&payload) == Some(expected) => {
                    match self
                        .put(key, new, Some(version), &request_id, &mut notes)
                        .await
                    {
                        Ok(_) => Ended::Ok(op),
                        Err(true) => Ended::Unknown,
                        Err(false) => Ended::Fail,
                    }
                }
                // The read of a compare-and-set wrote nothing.
                answer => {
                    notes.push(format!("{}: read {}", host(first), said(&answer)));
                    Ended::Fail
                }
            },
        };
        let (shown, verdict) = match ended {
            Ended::Ok(done) => (done, "ok"),
            Ended::Fail => (op, "fail"),
            Ended::Unknown => (op, "info"),
        };
        self.trace.record(
            format!(
                "client p{process} #{invoked} {shown:?} {key} {verdict} [{}]",
                notes.join("; ")
            ),
            &[],
        );
        match ended {
            Ended::Ok(done) => self.history.complete(key, process, invoked, done, true),
            Ended::Unknown => self.history.complete(key, process, invoked, op, false),
            Ended::Fail => {}
        }
        ended
    }

    async fn read(&self, via: u64, key: &str, notes: &mut Vec<String>) -> Ended {
        match self.call(via, Call::Get { id: key.into() }).await {
            Ok(Answer::Get(found)) => {
                notes.push(format!("{}: read", host(via)));
                Ended::Ok(RegOp::Read(found.as_ref().and_then(|(p, _)| decode(p))))
            }
            other => {
                notes.push(format!("{}: {}", host(via), said(&other)));
                Ended::Fail
            }
        }
    }
}

/// What a node's answer says, in a few words.
fn said(answer: &Result<Answer, Unanswered>) -> String {
    match answer {
        Ok(Answer::Put(version)) => format!("put at version {version}"),
        Ok(Answer::Get(found)) => format!("found {found:?}"),
        Ok(Answer::Failed(e)) => e.clone(),
        Ok(Answer::Rejected(why)) => why.clone(),
        Ok(other) => format!("{other:?}"),
        Err(Unanswered::Down) => "node down".into(),
        Err(Unanswered::NoAnswer) => "no answer".into(),
    }
}

/// What the clients of a run share.
#[derive(Clone)]
pub struct Clients {
    /// The run's history.
    pub history: History,
    /// The run's trace.
    pub trace: Trace,
    /// The nodes (node `i + 1` at index `i`).
    pub slots: Vec<Slot>,
    /// How many registers.
    pub keys: usize,
    /// Whether each client keeps to one node (see `Swarm::sticky`).
    pub sticky: bool,
    /// The share of reads among the operations, in percent.
    pub reads: u32,
    /// The last value written: each write and compare-and-set writes a
    /// new one.
    pub values: Arc<Mutex<i64>>,
    /// When the clients stop.
    pub end: tokio::time::Instant,
}

/// One client: until `end`, a seeded operation on a seeded register
/// through a seeded node, then a seeded pause.
pub async fn client(clients: Clients, mut rng: StdRng) {
    let Clients {
        history,
        trace,
        slots,
        keys,
        sticky,
        reads,
        values,
        end,
    } = clients;
    let mut process = history.process();
    // The last value this client saw in each register: what its
    // compare-and-sets expect, so that some of them succeed.
    let mut seen: BTreeMap<String, i64> = BTreeMap::new();
    let mut home = rng.gen_range(0..slots.len());
    while tokio::time::Instant::now() < end {
        if !sticky || rng.gen_bool(0.05) {
            home = rng.gen_range(0..slots.len());
        }
        let via = home;
        let k = key(rng.gen_range(0..keys));
        let fresh = || {
            let mut v = values.lock().unwrap_or_else(|p| p.into_inner());
            *v += 1;
            *v
        };
        let op = if rng.gen_range(0..100) < reads {
            RegOp::Read(None)
        } else if rng.gen_bool(0.5) {
            RegOp::Write(fresh())
        } else {
            let expected = seen.get(&k).copied().unwrap_or(1);
            RegOp::Cas(expected, fresh())
        };
        let id = u64::try_from(via).unwrap_or(0) + 1;
        let mut route = Route {
            history: &history,
            trace: &trace,
            slots: &slots,
            via: vec![id],
        };
        for _ in 0..RETRIES {
            route
                .via
                .push(rng.gen_range(1..=u64::try_from(slots.len()).unwrap_or(1)));
        }
        let pause = match route.operate(process, &k, op).await {
            Ended::Ok(RegOp::Read(Some(v)) | RegOp::Write(v) | RegOp::Cas(_, v)) => {
                seen.insert(k, v);
                rng.gen_range(0..200)
            }
            Ended::Ok(RegOp::Read(None)) => rng.gen_range(0..200),
            Ended::Fail => rng.gen_range(0..100),
            // As a real client would: back off before trying again.
            Ended::Unknown => {
                process = history.process();
                rng.gen_range(200..1_000)
            }
        };
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}
