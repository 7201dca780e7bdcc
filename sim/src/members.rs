//! The pool's members in the simulation: supervisors speaking the real
//! `SupervisorHost.Attach` protocol (testkit's hello, status and term-ack
//! messages; the supervisor's client settings, keepalive pings included)
//! to the gateways' real `SupervisorHostService`, over the simulated
//! network, each on a host of its own. A member attaches to one gateway,
//! sends its status every 250 ms (held while the nemesis pauses it),
//! acknowledges every assignment term it is shown, and attaches to the next
//! gateway when its stream breaks.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proto::client::{ClientConfig, Role};
use proto::supervisor_host::{gateway_message, AttachRefusal};
use rand::rngs::StdRng;
use rand::Rng;
use testkit::member::{self, AcksSent};
use tokio::sync::watch;

use crate::net;
use crate::node;
use crate::swarm::{self, Fault, Faults, Swarm};
use crate::trace::Trace;

/// Sandbox slots per member.
const CAPACITY: u32 = 8;

/// The host name of member `index` (from 1).
pub fn host(index: usize) -> String {
    format!("m{index}")
}

/// What one member runs on.
#[derive(Clone)]
pub struct MemberParts {
    /// From 1; also its process id.
    pub index: usize,
    /// The node ids of the gateways it may attach to, in the order it
    /// tries them (starting at its own index).
    pub gateways: Vec<u64>,
    /// True while its statuses are held.
    pub paused: watch::Receiver<bool>,
    /// The next process id (each process, and each renewal of a retired
    /// incarnation, takes one): kept across the host's restarts.
    pub process_ids: Arc<AtomicU64>,
    /// The run's trace.
    pub trace: Trace,
    /// The gateways launch runtimes: an assignment is acknowledged only
    /// once it names its runtime.
    pub needs_runtime: bool,
}

/// The software of one member host: attaches, serves its stream, and
/// attaches again elsewhere when the stream breaks, forever.
///
/// # Errors
/// None: it runs until the simulation ends.
pub async fn run(parts: MemberParts) -> turmoil::Result {
    let name = host(parts.index);
    let dialer = net::dialer(parts.trace.clone());
    let config = ClientConfig::for_role(Role::SupervisorToGateway);
    // As the supervisor: the process id and the incarnation the pool
    // granted it, both renewed when the pool retires the incarnation.
    let mut process = Process {
        id: parts.process_ids.fetch_add(1, Ordering::Relaxed),
        known: 0,
        ids: parts.process_ids.clone(),
    };
    parts
        .trace
        .record(format!("{name} start as process {}", process.id), &[]);
    let mut next = parts.index;
    loop {
        let id = parts.gateways[next % parts.gateways.len()];
        next += 1;
        let hello = member::hello(
            &name,
            process.id,
            process.known,
            CAPACITY,
            format!("{name}:1"),
        );
        match member::attach_via(&node::addr(id), &config, Some(&dialer), hello, 64).await {
            Ok(attached) => {
                process.known = attached.incarnation;
                parts.trace.record(
                    format!("{name} attached to n{id} as incarnation {}", process.known),
                    &[],
                );
                let ended = serve(attached, parts.paused.clone(), parts.needs_runtime).await;
                parts.trace.record(
                    format!("{name} stream to n{id} ended: {:?}", ended.code()),
                    &[],
                );
                process.after(&ended);
            }
            Err(status) => {
                parts.trace.record(
                    format!("{name} attach to n{id} refused: {:?}", status.code()),
                    &[],
                );
                process.after(&status);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Who a member's hellos say it is.
struct Process {
    /// Its process id (never 0).
    id: u64,
    /// The incarnation the pool last granted it (0: none yet).
    known: u64,
    /// Where the next process id comes from.
    ids: Arc<AtomicU64>,
}

impl Process {
    /// After a refusal or a broken stream: as the supervisor does, a
    /// member whose incarnation the pool retired (it expired or left)
    /// continues as a restarted process would, with a new process id and
    /// no incarnation, so its next hello joins as a new incarnation.
    fn after(&mut self, status: &tonic::Status) {
        if proto::attach::refusal_of(status) == Some(AttachRefusal::IncarnationRetired) {
            self.id = self.ids.fetch_add(1, Ordering::Relaxed);
            self.known = 0;
        }
    }
}

/// Serves one attached stream until it breaks: statuses from a pinger,
/// and an ack for every term a snapshot shows owed.
async fn serve(
    attached: member::Attached,
    paused: watch::Receiver<bool>,
    needs_runtime: bool,
) -> tonic::Status {
    let member::Attached {
        tx,
        mut inbound,
        status_interval,
        ..
    } = attached;
    // At the interval the gateway asked for, as a supervisor does.
    let pinger = member::spawn_pinger(tx.clone(), status_interval, paused.clone());
    let mut acks_sent = AcksSent::new();
    // The last snapshot shown: its owed acks are resent on a timer too (a
    // snapshot comes only when something changed, and one that came while
    // the member was paused must still be acknowledged).
    let mut shown = None;
    let mut resend = tokio::time::interval(member::ACK_RESEND_AFTER);
    let ended = loop {
        tokio::select! {
            message = inbound.message() => match message {
                Ok(Some(message)) => {
                    if let Some(gateway_message::Message::Snapshot(snapshot)) = message.message {
                        shown = Some(snapshot);
                    }
                }
                Ok(None) => break tonic::Status::ok("stream ended"),
                Err(status) => break status,
            },
            _ = resend.tick() => {}
        }
        // A paused process acknowledges nothing either.
        if let (Some(snapshot), false) = (&shown, *paused.borrow()) {
            let mut snapshot = snapshot.clone();
            if needs_runtime {
                // As the supervisor does: an assignment is activated (and
                // then acknowledged) only once it carries the runtime the
                // leader's launcher recorded.
                snapshot.assignments.retain(|a| a.runtime.is_some());
            }
            for a in member::acks_due(&mut acks_sent, snapshot, Instant::now()) {
                let _ = tx.try_send(member::term_ack(&a));
            }
        }
    };
    pinger.abort();
    ended
}

/// The members' nemesis, until `end`: every 1 to 4 s, one member is
/// paused for 0.3 to 1.9 s (its heartbeat TTL is 2 s) or, if the swarm
/// crashes members, killed and started again 0.5 to 3 s later.
pub async fn nemesis(
    swarm: Swarm,
    pauses: Vec<watch::Sender<bool>>,
    faults: Faults,
    mut rng: StdRng,
    end: tokio::time::Instant,
    trace: Trace,
) {
    loop {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(1_000..4_000))).await;
        if tokio::time::Instant::now() >= end || pauses.is_empty() {
            return;
        }
        let which = rng.gen_range(0..pauses.len());
        let crash = match (swarm.member_pauses, swarm.member_crashes) {
            (true, true) => rng.gen_bool(0.5),
            (false, true) => true,
            _ => false,
        };
        if crash {
            swarm::ask(&faults, &trace, Fault::CrashMember(which + 1));
            tokio::time::sleep(Duration::from_millis(rng.gen_range(500..3_000))).await;
            swarm::ask(&faults, &trace, Fault::RestartMember(which + 1));
            continue;
        }
        let length = Duration::from_millis(rng.gen_range(300..1_900));
        trace.record(format!("fault pause {} {length:?}", host(which + 1)), &[]);
        let _ = pauses[which].send(true);
        tokio::time::sleep(length).await;
        let _ = pauses[which].send(false);
        trace.record(format!("fault resume {}", host(which + 1)), &[]);
    }
}
