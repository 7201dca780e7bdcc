//! The scale run's pool members: scripted supervisors (tokio tasks speaking
//! the real `SupervisorHost.Attach` stream with their own member credential,
//! through `testkit::member`), member `i` attached first to gateway
//! `i mod n`. Each sends `HostStatus` every status interval, acknowledges
//! every unacknowledged term it is streamed at once (standing in for the
//! grant handshake with a runtime), and re-attaches to the next gateway,
//! under the same incarnation, when its stream breaks (a gateway restart);
//! a failed attach backs off as `openshell-supervisor`'s does
//! ([`retry_after`]). Member `i` dials from source address `i mod n` of the
//! plan's ([`MemberPlan::sources`]).
//!
//! Member 0 attaches alone first and holds the sandboxes created before
//! the others attach ([`ScaleMembers::open`]): the member the takeover
//! kills, with as many sandboxes as asked, whatever the pool's size.
//!
//! What every member was last shown is kept in a shared [`Board`]: sandbox
//! -> (member, term, acknowledged, when that was first seen). The takeover
//! measurement reads it: when did the last of a killed member's sandboxes
//! show up acknowledged on its new owner's stream. [`ScaleMembers::kill`]
//! drops a member's task and stream at once, as `kill -9` of its process
//! would (no `HostLeave`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use proto::supervisor_host::{gateway_message, AssignmentSnapshot, SupervisorMessage};
use testkit::member::{
    acknowledge_new_terms, attach_secure, hello_with_credential, host_status, Acked, Attached,
    Pings,
};
use tokio::sync::mpsc;

use jepsen::security::MemberSecurity;

/// Added to a member's process id when it starts again as a new process
/// (above any member index, so two members never share one).
const NEW_PROCESS: u64 = 1_000_000;

/// The member id of member `i` (0-based).
pub fn member_id(i: usize) -> String {
    format!("sc{i:03}")
}

/// One sandbox as the stream of its owner last showed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shown {
    /// The member whose stream showed it.
    pub member: String,
    /// Ownership term.
    pub term: u64,
    /// Whether the term was shown acknowledged.
    pub acknowledged: bool,
    /// When this (member, term) was first shown acknowledged.
    pub acknowledged_at: Option<Instant>,
}

/// What every member's stream last showed, by sandbox id.
#[derive(Debug, Default)]
pub struct Board {
    /// sandbox -> its latest showing.
    sandboxes: Mutex<BTreeMap<String, Shown>>,
    /// member -> the sandboxes its last snapshot listed.
    held: Mutex<BTreeMap<String, BTreeSet<String>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Board {
    /// Records `member`'s snapshot.
    fn record(&self, member: &str, snapshot: &AssignmentSnapshot) {
        let now = Instant::now();
        let listed: BTreeSet<String> = snapshot
            .assignments
            .iter()
            .map(|a| a.sandbox_id.clone())
            .collect();
        {
            let mut sandboxes = lock(&self.sandboxes);
            for a in &snapshot.assignments {
                let entry = sandboxes.entry(a.sandbox_id.clone());
                let shown = entry.or_insert_with(|| Shown {
                    member: member.to_string(),
                    term: a.term,
                    acknowledged: false,
                    acknowledged_at: None,
                });
                if shown.member != member || shown.term != a.term {
                    *shown = Shown {
                        member: member.to_string(),
                        term: a.term,
                        acknowledged: false,
                        acknowledged_at: None,
                    };
                }
                if a.acknowledged && !shown.acknowledged {
                    shown.acknowledged = true;
                    shown.acknowledged_at = Some(now);
                }
            }
        }
        lock(&self.held).insert(member.to_string(), listed);
    }

    /// The sandboxes `member`'s last snapshot listed.
    pub fn held_by(&self, member: &str) -> BTreeSet<String> {
        lock(&self.held).get(member).cloned().unwrap_or_default()
    }

    /// How many sandboxes are shown acknowledged on some stream.
    pub fn acknowledged(&self) -> usize {
        lock(&self.sandboxes)
            .values()
            .filter(|s| s.acknowledged)
            .count()
    }

    /// The latest showing of `sandbox`.
    pub fn shown(&self, sandbox: &str) -> Option<Shown> {
        lock(&self.sandboxes).get(sandbox).cloned()
    }
}

/// The members' settings.
#[derive(Clone, Debug)]
pub struct MemberPlan {
    /// Members.
    pub members: usize,
    /// Slots per member.
    pub capacity: u32,
    /// Gateways (`ip:port` of their client ports).
    pub gateways: Vec<String>,
    /// TLS and credentials (`None`: plaintext, no credential).
    pub security: Option<MemberSecurity>,
    /// Slots of member 0, which attaches alone first (the heavy member:
    /// every sandbox created before the others attach is placed on it).
    pub first_capacity: u32,
    /// Whether the members ping as supervisors do (the default) or not
    /// at all (`--member-pings off`: what a gateway spends on statuses
    /// alone).
    pub pings: Pings,
    /// The local addresses the members connect from, member `i` from
    /// `sources[i % len]` (empty: the system's choice, the harness's one
    /// address).
    pub sources: Vec<std::net::IpAddr>,
}

/// The running members.
pub struct ScaleMembers {
    /// What their streams showed.
    pub board: Arc<Board>,
    /// Streams open now.
    pub attached: Arc<AtomicU64>,
    /// Re-attaches after a broken stream.
    pub reattached: Arc<AtomicU64>,
    tasks: Vec<Option<tokio::task::JoinHandle<()>>>,
    /// Opens the attach of every member but member 0.
    open: tokio::sync::watch::Sender<bool>,
}

impl ScaleMembers {
    /// Starts one task per member; only member 0 attaches until
    /// [`ScaleMembers::open`].
    pub fn start(plan: MemberPlan) -> ScaleMembers {
        let board = Arc::new(Board::default());
        let attached = Arc::new(AtomicU64::new(0));
        let reattached = Arc::new(AtomicU64::new(0));
        let (open, opened) = tokio::sync::watch::channel(false);
        let plan = Arc::new(plan);
        let tasks = (0..plan.members)
            .map(|i| {
                let member = Member {
                    plan: plan.clone(),
                    board: board.clone(),
                    attached: attached.clone(),
                    reattached: reattached.clone(),
                    index: i,
                    id: member_id(i),
                };
                let mut opened = opened.clone();
                Some(tokio::spawn(async move {
                    if i > 0 && opened.wait_for(|open| *open).await.is_err() {
                        return;
                    }
                    member.run().await;
                }))
            })
            .collect();
        ScaleMembers {
            board,
            attached,
            reattached,
            tasks,
            open,
        }
    }

    /// Lets every member attach.
    pub fn open(&self) {
        self.open.send_replace(true);
    }

    /// Streams open now.
    pub fn attached(&self) -> usize {
        self.attached.load(Ordering::Relaxed) as usize
    }

    /// Drops member `i`'s task and stream at once (no `HostLeave`).
    pub fn kill(&mut self, i: usize) {
        if let Some(task) = self.tasks.get_mut(i).and_then(Option::take) {
            task.abort();
        }
    }
}

impl Drop for ScaleMembers {
    fn drop(&mut self) {
        for t in self.tasks.iter().flatten() {
            t.abort();
        }
    }
}

/// One member's task.
struct Member {
    plan: Arc<MemberPlan>,
    board: Arc<Board>,
    attached: Arc<AtomicU64>,
    reattached: Arc<AtomicU64>,
    index: usize,
    id: String,
}

/// Decrements the attached count when a session ends, however it ends
/// (the task may be aborted mid-session).
struct AttachedGuard(Arc<AtomicU64>);

impl Drop for AttachedGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The pause before the next attach after `failures` failed ones in a row:
/// `openshell-supervisor`'s backoff (`supervisor::agent`: 100 ms doubled
/// per failure up to 2 s, ±50 % jitter), so that a crowd of members sent
/// away or refused spreads its retries as a deployment's supervisors do
/// instead of retrying ten times a second each.
fn retry_after(failures: u32) -> Duration {
    use rand::Rng;
    let base = Duration::from_millis(100)
        .saturating_mul(1u32 << failures.min(5))
        .min(Duration::from_secs(2));
    base.mul_f64(rand::thread_rng().gen_range(0.5..1.5))
}

impl Member {
    async fn run(self) {
        let gateways = &self.plan.gateways;
        let mut next = self.index;
        // A retired incarnation's process never joins again: the member
        // starts as a new process (as a supervisor restarted after its
        // expiry would).
        let mut process_id = self.index as u64 + 1;
        let mut known = 0u64;
        let mut joined = false;
        let mut failures: u32 = 0;
        loop {
            let gateway = &gateways[next % gateways.len().max(1)];
            next += 1;
            match self.attach(gateway, process_id, known).await {
                Ok(attached) => {
                    failures = 0;
                    known = attached.incarnation;
                    if joined {
                        self.reattached.fetch_add(1, Ordering::Relaxed);
                    }
                    joined = true;
                    self.attached.fetch_add(1, Ordering::Relaxed);
                    let _guard = AttachedGuard(self.attached.clone());
                    if self.session(attached).await {
                        // Retired or superseded: a new process would start.
                        known = 0;
                        process_id += NEW_PROCESS;
                    }
                }
                Err(status) => {
                    failures = failures.saturating_add(1);
                    if proto::attach::refusal_of(&status).is_some() {
                        known = 0;
                        process_id += NEW_PROCESS;
                    }
                }
            }
            tokio::time::sleep(retry_after(failures)).await;
        }
    }

    async fn attach(
        &self,
        gateway: &str,
        process_id: u64,
        known: u64,
    ) -> Result<Attached, tonic::Status> {
        let security = self.plan.security.as_ref();
        let credential = security.map_or("", |s| s.credential_of(&self.id));
        let capacity = if self.index == 0 {
            self.plan.first_capacity
        } else {
            self.plan.capacity
        };
        let hello = hello_with_credential(
            &self.id,
            process_id,
            known,
            capacity,
            format!("10.0.0.1:{}", 20000 + self.index),
            credential,
        );
        let tls = security.map(|s| s.tls.clone());
        let attach = attach_secure(
            gateway,
            Duration::from_secs(2),
            tls,
            (!self.plan.sources.is_empty())
                .then(|| self.plan.sources[self.index % self.plan.sources.len()]),
            // A gateway's cost per supervisor includes answering its pings.
            self.plan.pings,
            hello,
            1024,
        );
        match tokio::time::timeout(Duration::from_secs(10), attach).await {
            Ok(r) => r,
            Err(_) => Err(tonic::Status::deadline_exceeded("attach timed out")),
        }
    }

    /// One open stream; true when it ended because the incarnation no
    /// longer counts.
    async fn session(&self, attached: Attached) -> bool {
        let Attached {
            tx,
            mut inbound,
            status_interval,
            ..
        } = attached;
        let stop = Arc::new(AtomicBool::new(false));
        // Aborted when the session ends or the member is killed (its task
        // aborted): a killed member must fall silent at once.
        let _pinger = AbortOnDrop(spawn_status(
            tx.clone(),
            // As a supervisor does: at the interval its gateway asked for.
            status_interval,
            stop.clone(),
        ));
        let mut acked = Acked::new();
        let retired = loop {
            let message = match inbound.message().await {
                Ok(Some(m)) => m.message,
                Ok(None) => break false,
                Err(status) => break proto::attach::refusal_of(&status).is_some(),
            };
            match message {
                Some(gateway_message::Message::Snapshot(s)) => {
                    self.board.record(&self.id, &s);
                    acknowledge_new_terms(&mut acked, &s, &tx);
                }
                Some(gateway_message::Message::Leaving(_)) => break false,
                _ => {}
            }
        };
        stop.store(true, Ordering::Relaxed);
        retired
    }
}

/// Aborts its task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sends `HostStatus` every `interval` until `stop` or the stream closes.
fn spawn_status(
    tx: mpsc::Sender<SupervisorMessage>,
    interval: Duration,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while !stop.load(Ordering::Relaxed) {
            if tx.send(host_status()).await.is_err() {
                return;
            }
            tokio::time::sleep(interval).await;
        }
    })
}
