//! The soak's churning pool members: `slots` scripted supervisors (tokio
//! tasks speaking the real `SupervisorHost.Attach` stream over TLS with
//! their own member credential, through `testkit::member`), each living a
//! few minutes under one member id, then leaving and coming back under the
//! next id of its slot (`m<slot>-g<generation>`, as a Deployment's
//! replacement pod comes back under a new name). So departed member records
//! pile up in the pool state unless retention removes them.
//!
//! A member sends `HostStatus` every status interval, acknowledges every
//! unacknowledged term it is streamed (standing in for the grant handshake
//! with a runtime) and re-attaches to another gateway, under the same
//! incarnation, when its stream breaks. At the end of its life it departs
//! one of three ways, drawn per generation:
//!
//! - **drain**: `HostStatus { stopping: true }` (the gateway starts a drain
//!   operation for it), then `HostLeave` once it owns nothing or
//!   [`DRAIN_LIMIT`] passed: finished operations and `leaving` members;
//! - **leave**: `HostLeave` at once (its sandboxes are taken over);
//! - **crash**: the stream is dropped; the member expires after the
//!   heartbeat TTL and its sandboxes are taken over: `expired` members.
//!
//! No history is kept (a soak creates 100,000 sandboxes): only the
//! [`MemberCounters`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proto::supervisor_host::{
    gateway_message, supervisor_message, HostLeave, HostStatus, SupervisorMessage,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use testkit::member::{
    acknowledge_new_terms, attach_secure, hello_with_credential, Acked, Attached, Pings,
};
use tokio::sync::mpsc;

use jepsen::security::MemberSecurity;

/// Longest a draining member waits to own nothing before it leaves anyway.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(30);
/// Longest a leaving member waits for `HostLeft`.
const LEFT_LIMIT: Duration = Duration::from_secs(10);

/// The member id of `slot`'s `generation` (both 0-based).
pub fn member_id(slot: usize, generation: usize) -> String {
    format!("m{:02}-g{generation}", slot + 1)
}

/// Every member id a soak of `slots` slots and `generations` generations
/// per slot may use (each gets a credential before the gateways start).
pub fn member_ids(slots: usize, generations: usize) -> Vec<String> {
    (0..slots)
        .flat_map(|s| (0..generations).map(move |g| member_id(s, g)))
        .collect()
}

/// What the members did, for the samples.
#[derive(Debug, Default)]
pub struct MemberCounters {
    /// Streams open now (members attached).
    pub attached: AtomicU64,
    /// Generations that joined (first accepted hello of a member id).
    pub joined: AtomicU64,
    /// Re-attaches after a broken stream.
    pub reattached: AtomicU64,
    /// Departures by drain, then `HostLeave`.
    pub drained: AtomicU64,
    /// Departures by `HostLeave` alone.
    pub left: AtomicU64,
    /// Departures by dropping the stream (expiry).
    pub crashed: AtomicU64,
    /// `HostLeft` answers received.
    pub left_confirmed: AtomicU64,
    /// Term acks sent.
    pub acks: AtomicU64,
    /// Attach attempts refused or failed.
    pub attach_failures: AtomicU64,
}

/// How a generation departs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Departure {
    Drain,
    Leave,
    Crash,
}

/// The members' settings.
#[derive(Clone, Debug)]
pub struct MemberPlan {
    /// Member slots (members alive at once).
    pub slots: usize,
    /// Ids per slot (credentials generated); a slot that used them all
    /// starts over at generation 0.
    pub generations: usize,
    /// Slots per member.
    pub capacity: u32,
    /// How long one generation lives (min, max).
    pub life: (Duration, Duration),
    /// `HostStatus` interval.
    pub status_interval: Duration,
    /// Gateways (`ip:port` of their client ports).
    pub gateways: Vec<String>,
    /// TLS and credentials (`None`: plaintext, no credential).
    pub security: Option<MemberSecurity>,
}

/// The running members; [`Members::stop`] ends them.
pub struct Members {
    /// What they did.
    pub counters: Arc<MemberCounters>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Members {
    /// Starts one task per slot; slot `i`'s first life is shortened to a
    /// random part of it, so departures spread over time from the start.
    pub fn start(plan: MemberPlan, seed: u64) -> Members {
        let counters = Arc::new(MemberCounters::default());
        let stop = Arc::new(AtomicBool::new(false));
        let plan = Arc::new(plan);
        let tasks = (0..plan.slots)
            .map(|slot| {
                let slot_seed = seed ^ (slot as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let ctx = Slot {
                    plan: plan.clone(),
                    counters: counters.clone(),
                    stop: stop.clone(),
                    slot,
                };
                tokio::spawn(ctx.run(StdRng::seed_from_u64(slot_seed)))
            })
            .collect();
        Members {
            counters,
            stop,
            tasks,
        }
    }

    /// Stops every member (streams dropped).
    pub async fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks.drain(..) {
            t.abort();
            let _ = t.await;
        }
        self.counters.attached.store(0, Ordering::Relaxed);
    }
}

impl Drop for Members {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// One slot's task.
struct Slot {
    plan: Arc<MemberPlan>,
    counters: Arc<MemberCounters>,
    stop: Arc<AtomicBool>,
    slot: usize,
}

/// How one attach ended.
enum SessionEnd {
    /// The member departed (left, drained and left, or crashed).
    Departed,
    /// The stream broke: re-attach under the same incarnation.
    Broken,
    /// The incarnation is retired (expired while cut off): start a new one.
    Retired,
}

/// Where a session is in the member's life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Serving,
    Draining,
    AwaitingLeft,
}

/// The member a generation runs as.
struct Life {
    member: String,
    process_id: u64,
    known: u64,
    until: Instant,
    departure: Departure,
    /// The departure was counted (a re-attach after it does not count it
    /// again).
    counted: bool,
}

impl Slot {
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    async fn run(self, mut rng: StdRng) {
        let generations = self.plan.generations.max(1);
        let mut generation = 0usize;
        let mut first = true;
        while !self.stopped() {
            let (lo, hi) = self.plan.life;
            let mut life_for = if hi > lo { rng.gen_range(lo..hi) } else { lo };
            if first {
                life_for = life_for.mul_f64(rng.gen_range(0.2..1.0));
                first = false;
            }
            let roll: f64 = rng.gen();
            let departure = if roll < 0.3 {
                Departure::Drain
            } else if roll < 0.8 {
                Departure::Leave
            } else {
                Departure::Crash
            };
            let mut life = Life {
                member: member_id(self.slot, generation % generations),
                process_id: rng.gen_range(1..u64::MAX),
                known: 0,
                until: Instant::now() + life_for,
                departure,
                counted: false,
            };
            generation += 1;
            self.live(&mut life, &mut rng).await;
            let pause = Duration::from_millis(rng.gen_range(500..3000));
            tokio::time::sleep(pause).await;
        }
    }

    /// One generation: attach (re-attach after a broken stream) until it
    /// departed.
    async fn live(&self, life: &mut Life, rng: &mut StdRng) {
        let gateways = &self.plan.gateways;
        let mut next = rng.gen_range(0..gateways.len().max(1));
        let mut joined = false;
        while !self.stopped() {
            if life.departure == Departure::Crash && Instant::now() >= life.until && joined {
                return;
            }
            let gateway = &gateways[next % gateways.len()];
            next += 1;
            let attached = match self.attach(gateway, life).await {
                Ok(a) => a,
                Err(status) => {
                    self.counters
                        .attach_failures
                        .fetch_add(1, Ordering::Relaxed);
                    if proto::attach::refusal_of(&status).is_some() {
                        // Retired or superseded: continue as a new process.
                        life.process_id = rng.gen_range(1..u64::MAX);
                        life.known = 0;
                    }
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    continue;
                }
            };
            life.known = attached.incarnation;
            let counter = if joined {
                &self.counters.reattached
            } else {
                &self.counters.joined
            };
            counter.fetch_add(1, Ordering::Relaxed);
            joined = true;
            self.counters.attached.fetch_add(1, Ordering::Relaxed);
            let end = self.session(attached, life).await;
            self.counters.attached.fetch_sub(1, Ordering::Relaxed);
            if life.counted {
                // Its departure began: a stream that ends now ends it (the
                // gateway closes a leaving incarnation's stream as retired,
                // often before `HostLeft` is read; a draining member whose
                // stream broke just goes, and expires).
                return;
            }
            match end {
                SessionEnd::Departed => return,
                SessionEnd::Broken => tokio::time::sleep(Duration::from_millis(200)).await,
                SessionEnd::Retired => {
                    life.process_id = rng.gen_range(1..u64::MAX);
                    life.known = 0;
                }
            }
        }
    }

    async fn attach(&self, gateway: &str, life: &Life) -> Result<Attached, tonic::Status> {
        let security = self.plan.security.as_ref();
        let credential = security.map_or("", |s| s.credential_of(&life.member));
        let hello = hello_with_credential(
            &life.member,
            life.process_id,
            life.known,
            self.plan.capacity,
            format!("10.0.0.1:{}", 20000 + life.process_id % 10000),
            credential,
        );
        let tls = security.map(|s| s.tls.clone());
        let attach = attach_secure(
            gateway,
            Duration::from_secs(2),
            tls,
            None,
            Pings::Off,
            hello,
            1024,
        );
        match tokio::time::timeout(Duration::from_secs(10), attach).await {
            Ok(r) => r,
            Err(_) => Err(tonic::Status::deadline_exceeded("attach timed out")),
        }
    }

    /// One open stream: statuses, acks, and the departure when its time
    /// comes.
    async fn session(&self, attached: Attached, life: &mut Life) -> SessionEnd {
        let Attached {
            tx, mut inbound, ..
        } = attached;
        let stopping = Arc::new(AtomicBool::new(false));
        let pinger = spawn_status(tx.clone(), self.plan.status_interval, stopping.clone());
        let mut acked = Acked::new();
        let mut phase = Phase::Serving;
        let mut phase_end = life.until;
        let end = loop {
            let wake = tokio::time::sleep_until(phase_end.into());
            let message = tokio::select! {
                m = inbound.message() => m,
                () = wake => {
                    match self.next_phase(phase, life, &tx, &stopping) {
                        Some((p, until)) => { phase = p; phase_end = until; continue; }
                        None => break SessionEnd::Departed,
                    }
                }
            };
            let message = match message {
                Ok(Some(m)) => m.message,
                Ok(None) if phase == Phase::AwaitingLeft => break SessionEnd::Departed,
                Ok(None) => break SessionEnd::Broken,
                Err(status) => break ended_by(&status),
            };
            match message {
                Some(gateway_message::Message::Snapshot(s)) => {
                    let held = s.assignments.len();
                    let sent = acknowledge_new_terms(&mut acked, &s, &tx);
                    self.counters.acks.fetch_add(sent as u64, Ordering::Relaxed);
                    if phase == Phase::Draining && held == 0 {
                        phase_end = Instant::now();
                    }
                }
                Some(gateway_message::Message::Left(_)) => {
                    self.counters.left_confirmed.fetch_add(1, Ordering::Relaxed);
                    break SessionEnd::Departed;
                }
                Some(gateway_message::Message::Leaving(_)) => break SessionEnd::Broken,
                _ => {}
            }
        };
        pinger.abort();
        end
    }

    /// The phase after `phase`'s deadline (`None`: the session ends now,
    /// departed).
    fn next_phase(
        &self,
        phase: Phase,
        life: &mut Life,
        tx: &mpsc::Sender<SupervisorMessage>,
        stopping: &AtomicBool,
    ) -> Option<(Phase, Instant)> {
        let now = Instant::now();
        let first = !std::mem::replace(&mut life.counted, true);
        let count = |c: &AtomicU64| {
            if first {
                c.fetch_add(1, Ordering::Relaxed);
            }
        };
        match (phase, life.departure) {
            (Phase::Serving, Departure::Crash) => {
                count(&self.counters.crashed);
                None
            }
            (Phase::Serving, Departure::Drain) => {
                stopping.store(true, Ordering::Relaxed);
                count(&self.counters.drained);
                Some((Phase::Draining, now + DRAIN_LIMIT))
            }
            (Phase::Serving, Departure::Leave) | (Phase::Draining, _) => {
                if phase == Phase::Serving {
                    count(&self.counters.left);
                }
                let leave = SupervisorMessage {
                    message: Some(supervisor_message::Message::Leave(HostLeave {})),
                };
                let _ = tx.try_send(leave);
                Some((Phase::AwaitingLeft, now + LEFT_LIMIT))
            }
            (Phase::AwaitingLeft, _) => None,
        }
    }
}

/// How a stream that ended with `status` continues.
fn ended_by(status: &tonic::Status) -> SessionEnd {
    match proto::attach::refusal_of(status) {
        Some(proto::supervisor_host::AttachRefusal::IncarnationRetired)
        | Some(proto::supervisor_host::AttachRefusal::IncarnationSuperseded) => SessionEnd::Retired,
        _ => SessionEnd::Broken,
    }
}

/// Sends `HostStatus` (with `stopping` as it reads) every `interval` until
/// the stream closes; abort the handle to stop sooner.
fn spawn_status(
    tx: mpsc::Sender<SupervisorMessage>,
    interval: Duration,
    stopping: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let status = HostStatus {
                stopping: stopping.load(Ordering::Relaxed),
                ..HostStatus::default()
            };
            let message = SupervisorMessage {
                message: Some(supervisor_message::Message::Status(status)),
            };
            if tx.send(message).await.is_err() {
                return;
            }
            tokio::time::sleep(interval).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_ids_are_valid_and_distinct() {
        let ids = member_ids(50, 3);
        assert_eq!(ids.len(), 150);
        assert_eq!(
            ids.iter().collect::<std::collections::BTreeSet<_>>().len(),
            150
        );
        for id in &ids {
            assert_eq!(proto::ids::id_rule(id), None, "{id}");
        }
        assert_eq!(member_id(0, 0), "m01-g0");
    }
}
