//! The register workload: read / write / cas clients over registers.
//!
//! Registers `r<k>`, each an object of type `jepsen-register` whose payload
//! is the register's integer value as text. Clients pick a random node per
//! operation:
//!
//! * `read`: `Get` without `stale` (linearizable, read-index). `NOT_FOUND` is
//!   an `ok` read of `null`; any error is a `fail` (a read changes nothing).
//! * `write v`: `Put` with an unconditional precondition. Values are unique
//!   across the run.
//! * `cas [e n]`, as [`CasMode`] says:
//!   - [`CasMode::ReadThenPut`] (the default): a linearizable `Get`; if the
//!     value is not `e`, `fail`; otherwise `Put` with `match_resource_version`
//!     of that read, so the put applies only if nothing wrote the register
//!     since.
//!   - [`CasMode::OwnVersion`], what real clients do: each client remembers,
//!     per key, the (value, `resource_version`) its own last successful read,
//!     write or cas returned (a write's version is
//!     `PutResponse.object.resource_version`), and `cas [e n]` is one `Put`
//!     with `match_resource_version` = that version and `e` = that value, with
//!     no read first. A client that remembers nothing of a key reads or
//!     writes it; a failed cas, or any op of unknown outcome, makes it forget
//!     the key. If two writes were ever given one version, a cas on the
//!     version of the first can overwrite the second unseen (a lost update):
//!     run it with many clients on few keys and short delays, so the leader
//!     batches writes of one key into one raft entry.
//!
//!   `FAILED_PRECONDITION` / `NOT_FOUND` from the put are certain failures.
//!
//! A write or cas whose outcome is unknown (`UNKNOWN`, a timeout,
//! `UNAVAILABLE` after the request may have been sent) is `info`, and the
//! client continues under a new process number (HISTORY.md). `UNAVAILABLE`
//! that says the write was not applied (no leader) or that the connection
//! was refused is a certain `fail`.
//!
//! Clients fail over ([`Failover`], on by default): each attempt through
//! one gateway has a short deadline (`--attempt-timeout-ms`, 1.5 s), and a
//! gateway whose attempt timed out, refused the connection or had no
//! leader is avoided for a while (`--avoid-ms`, 2 s) when the client picks
//! the node of its next op. An op whose attempt certainly had no effect (a
//! failed read; a put refused with "was not applied" or never connected)
//! is tried again through another gateway within the client timeout; one
//! whose outcome is unknown is `info` and is never sent again. The
//! completion event's `node` names the gateway that decided the outcome.
//! `--attempt-timeout-ms 0` turns failover off: one attempt per op through
//! the node it picked, within the client timeout.
//!
//! Every `ok` read (of a present register), write and cas records the
//! object's `resource_version` it read or was given as the event's extra key
//! `resource_version` (`value` keeps HISTORY.md's shape), which the
//! `one-version-per-write` checker ([`crate::checker::versions`]) reads.
//!
//! Each key takes at most `ops_per_key` operations and is then retired for a
//! fresh one, which keeps every key's history small enough for the WGL search.
//!
//! Beside the clients, [`watchers`] watch the registers (`ObjectStore.Watch`
//! through `openshell_client`'s resuming watcher: the whole type, `r0`, the
//! `r1` prefix) from before the first op to after the final heal, into
//! `<run>/watch-<n>.jsonl`, for the `watch-events` checker
//! ([`crate::checker::watch`]).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proto::objects::{precondition, GetRequest, Object, Precondition, PutRequest};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::checker::lost_writes::AcknowledgedWrites;
use crate::checker::versions::OneVersionPerWrite;
use crate::checker::watch::WatchEvents;
use crate::checker::{Checker, Linearizable};
use crate::cluster::{Cluster, OBJECT_TYPE};
use crate::history::{EventSpec, OpType, Process, Recorder};

mod failover;
pub mod watchers;

use failover::Avoid;
pub use failover::Failover;
use watchers::Watchers;

/// Register workload settings.
#[derive(Clone, Debug)]
pub struct RegisterOptions {
    /// Concurrent clients.
    pub concurrency: usize,
    /// Registers written at once.
    pub keys: usize,
    /// Operations per register before it is retired.
    pub ops_per_key: u64,
    /// Pause between one client's operations, ms (uniform).
    pub delay_ms: (u64, u64),
    /// Which version a `cas` compares against.
    pub cas_mode: CasMode,
    /// How a client leaves a gateway that does not answer.
    pub failover: Failover,
}

/// Which `resource_version` a `cas [e n]` puts with
/// (`match_resource_version`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CasMode {
    /// Read the register first (linearizable `Get`); `fail` unless it holds
    /// `e`, else put matching the version that read returned
    /// (`read-then-put`).
    #[default]
    ReadThenPut,
    /// One put matching the (value, version) the client's own last
    /// successful read, write or cas of the key returned, no read first
    /// (`own-version`): what real clients do.
    OwnVersion,
}

impl CasMode {
    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            CasMode::ReadThenPut => "read-then-put",
            CasMode::OwnVersion => "own-version",
        }
    }
}

impl std::fmt::Display for CasMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for CasMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "read-then-put" => Ok(CasMode::ReadThenPut),
            "own-version" => Ok(CasMode::OwnVersion),
            other => Err(format!(
                "unknown cas mode {other:?} (read-then-put, own-version)"
            )),
        }
    }
}

/// One client's memory of its own last successful op per key
/// ([`CasMode::OwnVersion`]): key -> (value, resource_version).
type OwnVersions = HashMap<String, (i64, u64)>;

/// The op a client is about to issue.
#[derive(Clone, Copy, Debug)]
enum Planned {
    Read,
    Write(i64),
    /// `version`: `None` reads first ([`CasMode::ReadThenPut`]); `Some`
    /// puts matching it at once ([`CasMode::OwnVersion`]).
    Cas {
        expected: i64,
        new: i64,
        version: Option<u64>,
    },
}

impl Planned {
    /// `f` and invoke `value` in the history.
    fn describe(self) -> (&'static str, Value) {
        match self {
            Planned::Read => ("read", Value::Null),
            Planned::Write(v) => ("write", json!(v)),
            Planned::Cas { expected, new, .. } => ("cas", json!([expected, new])),
        }
    }

    /// Updates the client's own memory of `key` after `outcome`.
    fn remember(self, own: &mut OwnVersions, key: &str, outcome: &Outcome) {
        let learned = match (outcome, self) {
            (Outcome::Ok(value, Some(version)), Planned::Read) => {
                value.as_i64().map(|v| (v, *version))
            }
            (Outcome::Ok(_, Some(version)), Planned::Write(v)) => Some((v, *version)),
            (Outcome::Ok(_, Some(version)), Planned::Cas { new, .. }) => Some((new, *version)),
            // A certain failure of a read or write: what it knew still holds.
            (Outcome::Fail(_), Planned::Read | Planned::Write(_)) => return,
            // An absent register, a refused cas (the version is stale) or an
            // unknown outcome: nothing certain to remember.
            (Outcome::Ok(_, None) | Outcome::Fail(_) | Outcome::Info(_), _) => None,
        };
        match learned {
            Some(known) => {
                own.insert(key.to_string(), known);
            }
            None => {
                own.remove(key);
            }
        }
    }
}

/// Shared state of the register clients.
struct Shared {
    cluster: Arc<Cluster>,
    history: Recorder,
    next_process: AtomicU64,
    next_value: AtomicU64,
    /// Per key slot: (key number, ops issued). A std mutex: held only to
    /// pick a key.
    slots: Mutex<Vec<(u64, u64)>>,
    /// Last value seen per key, for cas expectations.
    seen: Mutex<BTreeMap<String, i64>>,
    /// Every key used.
    used: Mutex<BTreeSet<String>>,
    options: RegisterOptions,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// Outcome of one client call.
enum Outcome {
    /// The completion value and the `resource_version` read or written.
    Ok(Value, Option<u64>),
    Fail(String),
    Info(String),
}

/// True when the status says the request certainly had no effect.
fn certainly_not_applied(status: &tonic::Status) -> bool {
    let text = format!("{status:?}").to_ascii_lowercase();
    match status.code() {
        tonic::Code::InvalidArgument
        | tonic::Code::FailedPrecondition
        | tonic::Code::NotFound
        | tonic::Code::AlreadyExists => true,
        tonic::Code::Unavailable => {
            text.contains("was not applied")
                || text.contains("connection refused")
                || text.contains("tcp connect error")
                || text.contains("dns error")
        }
        _ => false,
    }
}

fn short(status: &tonic::Status) -> String {
    let mut m = format!("{:?}: {}", status.code(), status.message());
    m.truncate(200);
    m
}

fn payload_value(o: &Object) -> Option<i64> {
    std::str::from_utf8(&o.payload).ok()?.trim().parse().ok()
}

impl Shared {
    fn pick_key(&self, rng: &mut StdRng) -> String {
        let mut slots = lock(&self.slots);
        let n = slots.len();
        let i = rng.gen_range(0..n);
        let slot = &mut slots[i];
        if slot.1 >= self.options.ops_per_key {
            slot.0 += n as u64;
            slot.1 = 0;
        }
        slot.1 += 1;
        let key = format!("r{}", slot.0);
        lock(&self.used).insert(key.clone());
        key
    }

    async fn get(&self, node: usize, key: &str) -> Result<(Option<i64>, u64), tonic::Status> {
        let node = self
            .cluster
            .node(node)
            .map_err(|e| tonic::Status::internal(e.to_string()))?;
        match node
            .objects()
            .get(GetRequest {
                r#type: OBJECT_TYPE.into(),
                id: key.into(),
                stale: false,
            })
            .await
        {
            Ok(r) => {
                let o = r.into_inner().object.unwrap_or_default();
                match payload_value(&o) {
                    Some(v) => Ok((Some(v), o.resource_version)),
                    None => Err(tonic::Status::data_loss(format!(
                        "register {key} holds a non-integer payload {:?}",
                        String::from_utf8_lossy(&o.payload)
                    ))),
                }
            }
            Err(s) if s.code() == tonic::Code::NotFound => Ok((None, 0)),
            Err(s) => Err(s),
        }
    }

    async fn put(
        &self,
        node: usize,
        key: &str,
        value: i64,
        pre: precondition::Kind,
    ) -> Result<Option<u64>, tonic::Status> {
        let node = self
            .cluster
            .node(node)
            .map_err(|e| tonic::Status::internal(e.to_string()))?;
        node.objects()
            .put(PutRequest {
                object: Some(Object {
                    id: key.into(),
                    r#type: OBJECT_TYPE.into(),
                    name: key.into(),
                    scope: "jepsen".into(),
                    payload: value.to_string().into_bytes(),
                    ..Default::default()
                }),
                precondition: Some(Precondition { kind: Some(pre) }),
                request_id: String::new(),
            })
            .await
            .map(|r| r.into_inner().object.map(|o| o.resource_version))
    }

    async fn read(&self, node: usize, key: &str) -> Outcome {
        match self.get(node, key).await {
            Ok((v, version)) => {
                if let Some(v) = v {
                    lock(&self.seen).insert(key.to_string(), v);
                }
                Outcome::Ok(json!(v), v.map(|_| version))
            }
            Err(s) => Outcome::Fail(short(&s)),
        }
    }

    async fn write(&self, node: usize, key: &str, v: i64) -> Outcome {
        match self
            .put(node, key, v, precondition::Kind::Unconditional(true))
            .await
        {
            Ok(version) => {
                lock(&self.seen).insert(key.to_string(), v);
                Outcome::Ok(json!(v), version)
            }
            Err(s) if certainly_not_applied(&s) => Outcome::Fail(short(&s)),
            Err(s) => Outcome::Info(short(&s)),
        }
    }

    /// `cas [e n]` of [`CasMode::OwnVersion`]: one put matching `version`,
    /// the version the client's own last op of `key` returned with `e`. (The
    /// read-then-put mode ends with the same put, on the version it read.)
    async fn cas_own_version(
        &self,
        node: usize,
        key: &str,
        expected: i64,
        new: i64,
        version: u64,
    ) -> Outcome {
        match self
            .put(
                node,
                key,
                new,
                precondition::Kind::MatchResourceVersion(version),
            )
            .await
        {
            Ok(written) => {
                lock(&self.seen).insert(key.to_string(), new);
                Outcome::Ok(json!([expected, new]), written)
            }
            Err(s) if certainly_not_applied(&s) => Outcome::Fail(short(&s)),
            Err(s) => Outcome::Info(short(&s)),
        }
    }

    fn fresh_value(&self) -> i64 {
        self.next_value.fetch_add(1, Ordering::Relaxed) as i64
    }

    /// The next op on `key`: 40% reads, 30% writes, 30% cas on the last
    /// value any client saw ([`CasMode::ReadThenPut`]); or, on what this
    /// client itself last saw ([`CasMode::OwnVersion`]), write and cas heavy:
    /// 15% reads, 25% writes, 60% cas (30% reads, 70% writes while it
    /// remembers nothing of the key).
    fn plan(&self, key: &str, own: &OwnVersions, rng: &mut StdRng) -> Planned {
        let roll: f64 = rng.gen();
        match self.options.cas_mode {
            CasMode::ReadThenPut => match lock(&self.seen).get(key).copied() {
                _ if roll < 0.4 => Planned::Read,
                Some(expected) if roll >= 0.7 => Planned::Cas {
                    expected,
                    new: self.fresh_value(),
                    version: None,
                },
                _ => Planned::Write(self.fresh_value()),
            },
            CasMode::OwnVersion => match own.get(key).copied() {
                None if roll < 0.3 => Planned::Read,
                None => Planned::Write(self.fresh_value()),
                Some(_) if roll < 0.15 => Planned::Read,
                Some(_) if roll < 0.4 => Planned::Write(self.fresh_value()),
                Some((expected, version)) => Planned::Cas {
                    expected,
                    new: self.fresh_value(),
                    version: Some(version),
                },
            },
        }
    }

    /// One client: issues ops until `stop`, switching process after `info`.
    async fn client(self: Arc<Self>, worker: usize, seed: u64, stop: Arc<AtomicBool>) {
        let mut rng =
            StdRng::seed_from_u64(seed ^ (worker as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let mut process = worker as u64;
        let mut own = OwnVersions::new();
        let mut avoid = Avoid(HashMap::new());
        let n = self.cluster.nodes.len();
        while !stop.load(Ordering::Relaxed) {
            let key = self.pick_key(&mut rng);
            let node = avoid.pick(&mut rng, n, None);
            let planned = self.plan(&key, &own, &mut rng);
            let (f, value) = planned.describe();
            let spec = |kind, value: Value, error: Option<String>, node: usize| EventSpec {
                kind,
                process: Process::Client(process),
                f: f.to_string(),
                key: Some(key.clone()),
                value,
                node: Some(format!("n{node}")),
                error,
            };
            self.history
                .record(spec(OpType::Invoke, value.clone(), None, node));
            let (outcome, node) = self
                .execute(node, &key, planned, &mut avoid, &mut rng)
                .await;
            planned.remember(&mut own, &key, &outcome);
            match outcome {
                Outcome::Ok(v, version) => {
                    self.history
                        .record_with_version(spec(OpType::Ok, v, None, node), version);
                }
                Outcome::Fail(e) => {
                    self.history
                        .record(spec(OpType::Fail, value, Some(e), node));
                }
                Outcome::Info(e) => {
                    self.history
                        .record(spec(OpType::Info, value, Some(e), node));
                    process = self.next_process.fetch_add(1, Ordering::Relaxed);
                }
            }
            let (lo, hi) = self.options.delay_ms;
            let pause = if hi > lo { rng.gen_range(lo..hi) } else { lo };
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }
}

/// A running register workload.
pub struct RegisterRunning {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Until the final reads take them.
    watchers: Option<Watchers>,
}

/// Starts the watchers ([`watchers::scopes`]), waits until they are open,
/// then starts `options.concurrency` register clients.
pub async fn start(
    options: &RegisterOptions,
    cluster: Arc<Cluster>,
    history: Recorder,
    seed: u64,
) -> RegisterRunning {
    let keys = options.keys.max(1);
    let shared = Arc::new(Shared {
        cluster,
        history,
        next_process: AtomicU64::new(options.concurrency as u64),
        next_value: AtomicU64::new(1),
        slots: Mutex::new((0..keys as u64).map(|k| (k, 0)).collect()),
        seen: Mutex::new(BTreeMap::new()),
        used: Mutex::new(BTreeSet::new()),
        options: options.clone(),
    });
    let watchers = Watchers::start(&shared.cluster, watchers::scopes()).await;
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = (0..options.concurrency)
        .map(|w| tokio::spawn(shared.clone().client(w, seed, stop.clone())))
        .collect();
    RegisterRunning {
        shared,
        stop,
        tasks,
        watchers: Some(watchers),
    }
}

/// The highest `resource_version` an acknowledged write or cas of
/// `history` was given.
fn highest_acknowledged(history: &[crate::history::Event]) -> u64 {
    history
        .iter()
        .filter(|e| e.kind == OpType::Ok && matches!(e.f.as_str(), "write" | "cas"))
        .filter_map(|e| e.resource_version)
        .max()
        .unwrap_or(0)
}

impl RegisterRunning {
    /// Stops the clients and waits for their last operations.
    pub async fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
    }

    /// After healing: one linearizable read per key, retried (each attempt
    /// its own op) until it succeeds or `within` passes; then the watchers
    /// read until they are current past the highest acknowledged write
    /// ([`watchers::CATCH_UP`] at most). Returns the workload's checkers,
    /// which know the final reads and the watchers' records.
    pub async fn final_reads(&mut self, within: Duration) -> Vec<Box<dyn Checker>> {
        let s = &self.shared;
        let keys: Vec<String> = lock(&s.used).iter().cloned().collect();
        let mut final_reads = BTreeMap::new();
        let deadline = Instant::now() + within;
        let n = s.cluster.nodes.len();
        let process = s.next_process.fetch_add(1, Ordering::Relaxed);
        for (i, key) in keys.iter().enumerate() {
            let mut attempt = 0usize;
            loop {
                let node = 1 + (i + attempt) % n;
                let spec = |kind, value: Value, error: Option<String>| EventSpec {
                    kind,
                    process: Process::Client(process),
                    f: "read".into(),
                    key: Some(key.clone()),
                    value,
                    node: Some(format!("n{node}")),
                    error,
                };
                s.history.record(spec(OpType::Invoke, Value::Null, None));
                match s.get(node, key).await {
                    Ok((v, version)) => {
                        let e = s.history.record_with_version(
                            spec(OpType::Ok, json!(v), None),
                            v.map(|_| version),
                        );
                        final_reads.insert(key.clone(), e.index);
                        break;
                    }
                    Err(st) => {
                        s.history
                            .record(spec(OpType::Fail, Value::Null, Some(short(&st))));
                    }
                }
                attempt += 1;
                if Instant::now() > deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        let target = highest_acknowledged(&s.history.snapshot());
        let logs = match self.watchers.take() {
            Some(w) => w.finish(target, watchers::CATCH_UP).await,
            None => Vec::new(),
        };
        vec![
            Box::new(Linearizable {
                options: crate::checker::linear::Options::default(),
            }),
            Box::new(AcknowledgedWrites { final_reads }),
            Box::new(OneVersionPerWrite),
            Box::new(WatchEvents { logs }),
        ]
    }
}
