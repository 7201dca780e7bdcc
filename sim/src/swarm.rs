//! Swarm testing: each seed picks the shape of its run (how many nodes,
//! clients and keys, the network's latencies) and which faults are on and
//! how often, so that rare combinations get explored across seeds instead
//! of every seed spreading thin over all of them. [`nemesis`] then draws
//! the faults of the run from the seed, within what the swarm turned on.

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::Rng;

use crate::autopilot::StatefulSet;
use crate::node::{Admin, Answer, Call, Slot};
use crate::trace::Trace;

/// A fault the nemesis asks the driver (`harness`) for.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Kill the node's process; its disk keeps the synced writes and a
    /// seeded prefix of the rest (a power cut of that machine: the same
    /// model, since nothing but the disk outlives the process here).
    Crash(u64),
    /// Start the node's process again over its disk.
    Restart(u64),
    /// Hold every message between the two groups (a partition that TCP
    /// survives: held segments arrive after the release).
    Hold(Vec<u64>, Vec<u64>),
    /// Deliver what was held between the two groups.
    Release(Vec<u64>, Vec<u64>),
    /// Drop every segment between the two groups. turmoil's TCP does not
    /// retransmit, so every connection between them is wedged for good,
    /// as behind a middlebox that forgot it: only keepalives and deadlines
    /// find out.
    Drop(Vec<u64>, Vec<u64>),
    /// Stop dropping between the two groups (wedged connections stay so).
    Repair(Vec<u64>, Vec<u64>),
    /// Kill pool member `index`'s supervisor process.
    CrashMember(usize),
    /// Start pool member `index`'s supervisor again (a new process).
    RestartMember(usize),
    /// Drop every segment from the first group to the second only (the
    /// other direction still delivers): connections carrying data that
    /// way are wedged, as by an asymmetric route or a one-way firewall.
    DropOneWay(Vec<u64>, Vec<u64>),
    /// Stop dropping from the first group to the second.
    RepairOneWay(Vec<u64>, Vec<u64>),
    /// The node's disk is full: its log's writes and syncs fail.
    DiskFull(u64),
    /// Space is freed on the node's disk.
    DiskFreed(u64),
}

/// Asks the driver for `fault` (carried out between two steps), and
/// records the request.
pub fn ask(faults: &Faults, trace: &Trace, fault: Fault) {
    trace.record(format!("nemesis asks {fault:?}"), &[]);
    faults
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push_back(fault);
}

/// The queue between the nemesis (inside the simulation) and the driver.
pub type Faults = Arc<Mutex<VecDeque<Fault>>>;

/// What one seed turned on.
#[derive(Clone, Debug)]
pub struct Swarm {
    /// Voters (3 or 5).
    pub nodes: u64,
    /// Concurrent register clients.
    pub clients: usize,
    /// Registers they share (fewer keys, more contention).
    pub keys: usize,
    /// Clients keep to one node (as a client keeps its connection to one
    /// gateway), going back to it as soon as it is up again, and pick
    /// another node only now and then; otherwise each operation goes
    /// through any node.
    pub sticky: bool,
    /// The share of reads among the clients' operations, in percent (the
    /// rest half writes, half compare-and-sets).
    pub reads: u32,
    /// How long the clients and the nemesis run.
    pub duration: Duration,
    /// Fastest message.
    pub min_latency: Duration,
    /// Slowest message.
    pub max_latency: Duration,
    /// The gap between two faults, drawn from this range.
    pub fault_gap: (Duration, Duration),
    /// Crash a node (its unsynced writes cut at a seeded point) and
    /// restart it later.
    pub crash: bool,
    /// Crash whichever node leads at that moment.
    pub crash_leader: bool,
    /// Restart a crashed node at once (within an election timeout): the
    /// window where a node restarting as leader would do harm.
    pub quick_restart: bool,
    /// Power cut of every machine at once, then each restarted, one by
    /// one.
    pub power_cut: bool,
    /// Cut one node off from the others.
    pub isolate: bool,
    /// Membership changes: one spare host beyond the voters; the nemesis
    /// swaps it in (add learner, promote) and a seeded voter out (remove,
    /// or demote then remove), leader included.
    pub membership: bool,
    /// Leadership transfers to a seeded voter.
    pub transfer: bool,
    /// This node's disk syncs slowly (10-100 ms per fsync): its followers
    /// hold entries it has not synced yet, for longer.
    pub slow_disk: Option<u64>,
    /// Split the nodes into two groups.
    pub split: bool,
    /// Wedge the connections between a node and the others (segments
    /// dropped, never retransmitted), then repair the links.
    pub wedge: bool,
    /// Pool members (supervisors, each on a host of its own), each
    /// admitted two sandboxes at the start; none in a third of the seeds
    /// (the group then carries only the clients' writes and the leader's
    /// ticks, as before the pool was simulated: with the pool's heartbeat
    /// batches in every seed, the restart-as-leader proof failed 1 seed in
    /// 1,000 instead of 3 in 400; with none in a third, 6 in 1,000).
    pub members: usize,
    /// Pause a member's statuses now and then, for less than its heartbeat
    /// TTL (a GC pause, a stalled process): a live member that must not be
    /// taken over.
    pub member_pauses: bool,
    /// Kill a member's supervisor now and then and start it again 0.5-3 s
    /// later: a new process, which joins as a new incarnation (its
    /// sandboxes are taken over, by it or another member).
    pub member_crashes: bool,
    /// The gateways run their launchers over one shared simulated runtime
    /// API ([`crate::driver`]) whose calls take up to this long (and whose
    /// runtimes take up to this long to start); None: no launcher. Drawn
    /// only when there are members.
    pub driver_latency: Option<Duration>,
    /// With launchers: the runtime nemesis kills a serving runtime now and
    /// then ([`crate::driver::nemesis`]).
    pub runtime_deaths: bool,
    /// Drop one direction only between a node and the others, then repair
    /// it ([`Swarm::pick_later_faults`]).
    pub one_way: bool,
    /// Fill a node's disk: its raft stops on the failed write (a storage
    /// error is fatal), and, as Kubernetes restarts a gateway whose
    /// `/healthz` fails, it is killed, space is freed and it is started
    /// again ([`Swarm::pick_later_faults`]).
    pub disk_full: bool,
    /// The gateways run the voter autopilot over their StatefulSet
    /// ([`crate::autopilot`]); the nemesis scales it between the voters
    /// and one more (the spare host), in place of its own membership
    /// changes ([`Swarm::pick_later_faults`]).
    pub autopilot: bool,
}

impl Swarm {
    /// Draws a swarm from the seed's generator.
    pub fn pick(rng: &mut StdRng) -> Swarm {
        let nodes = if rng.gen_bool(0.25) { 5 } else { 3 };
        let min_latency = Duration::from_micros(rng.gen_range(100..500));
        let slowest = if rng.gen_bool(0.2) { 60 } else { 10 };
        let max_latency = Duration::from_millis(rng.gen_range(1..slowest));
        let gap_min = rng.gen_range(100..1_000);
        let mut swarm = Swarm {
            nodes,
            clients: rng.gen_range(2..=5),
            keys: rng.gen_range(1..=3),
            sticky: rng.gen_bool(0.5),
            reads: [20, 40, 80][rng.gen_range(0..3)],
            duration: Duration::from_millis(rng.gen_range(5_000..15_000)),
            min_latency,
            max_latency,
            fault_gap: (
                Duration::from_millis(gap_min),
                Duration::from_millis(gap_min + rng.gen_range(200..3_000)),
            ),
            crash: rng.gen_bool(0.5),
            crash_leader: rng.gen_bool(0.5),
            quick_restart: rng.gen_bool(0.5),
            power_cut: rng.gen_bool(0.2),
            isolate: rng.gen_bool(0.5),
            split: rng.gen_bool(0.4),
            wedge: rng.gen_bool(0.25),
            slow_disk: rng.gen_bool(0.3).then(|| rng.gen_range(1..=nodes)),
            membership: rng.gen_bool(0.3),
            transfer: rng.gen_bool(0.3),
            members: [0, 2, 3][rng.gen_range(0..3)],
            member_pauses: rng.gen_bool(0.5),
            member_crashes: rng.gen_bool(0.4),
            driver_latency: None,
            runtime_deaths: false,
            one_way: false,
            disk_full: false,
            autopilot: false,
        };
        if !swarm.any_fault() {
            swarm.crash = true;
        }
        swarm
    }

    /// Draws whether the gateways run their launchers, from a generator of
    /// its own (`launcher`): a seed without them runs the schedule it ran
    /// before the launcher was simulated.
    pub fn pick_launcher(&mut self, launcher: &mut StdRng) {
        if self.members > 0 && launcher.gen_bool(0.6) {
            self.driver_latency = Some(Duration::from_millis(
                [20, 300, 3_000][launcher.gen_range(0..3)],
            ));
            self.runtime_deaths = launcher.gen_bool(0.4);
        }
    }

    /// Draws the faults simulated after the launcher (one-way drops, a
    /// full disk, the autopilot scaled) from a generator of their own
    /// (`later`): a seed with none of them runs the schedule it ran before
    /// they were simulated.
    pub fn pick_later_faults(&mut self, later: &mut StdRng) {
        self.one_way = later.gen_bool(0.25);
        self.disk_full = later.gen_bool(0.2);
        self.autopilot = later.gen_bool(0.25);
    }

    fn any_fault(&self) -> bool {
        self.crash
            || self.crash_leader
            || self.power_cut
            || self.isolate
            || self.split
            || self.wedge
            || self.membership
            || self.transfer
    }

    /// Every host that runs a node: the voters, and the spare.
    pub fn hosts(&self) -> u64 {
        self.nodes + u64::from(self.membership || self.autopilot)
    }

    fn kinds(&self) -> Vec<Kind> {
        let mut kinds = Vec::new();
        for (on, kind) in [
            (self.crash, Kind::Crash),
            (self.crash_leader, Kind::CrashLeader),
            (self.power_cut, Kind::PowerCut),
            (self.isolate, Kind::Isolate),
            (self.split, Kind::Split),
            (self.wedge, Kind::Wedge),
            (self.membership && !self.autopilot, Kind::Membership),
            (self.autopilot, Kind::Scale),
            (self.transfer, Kind::Transfer),
            (self.one_way, Kind::OneWay),
            (self.disk_full, Kind::DiskFull),
        ] {
            if on {
                kinds.push(kind);
            }
        }
        kinds
    }
}

impl fmt::Display for Swarm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "nodes {} clients {}{} reads {}% keys {} for {:?} latency {:?}..{:?} fault gap {:?}..{:?} faults {:?}{}{} members {}{}{}{}",
            self.nodes,
            self.clients,
            if self.sticky { " sticky" } else { "" },
            self.reads,
            self.keys,
            self.duration,
            self.min_latency,
            self.max_latency,
            self.fault_gap.0,
            self.fault_gap.1,
            self.kinds(),
            if self.quick_restart { " quick-restart" } else { "" },
            match self.slow_disk {
                Some(id) => format!(" slow-disk n{id}"),
                None => String::new(),
            },
            self.members,
            if self.member_pauses { " pausing" } else { "" },
            if self.member_crashes { " crashing" } else { "" },
            match self.driver_latency {
                Some(max) => format!(
                    " launcher (driver calls up to {max:?}){}",
                    if self.runtime_deaths { " runtime-deaths" } else { "" }
                ),
                None => String::new(),
            },
        )
    }
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Crash,
    CrashLeader,
    PowerCut,
    Isolate,
    Split,
    Wedge,
    Membership,
    Transfer,
    OneWay,
    DiskFull,
    Scale,
}

/// The nemesis: until `duration` has passed, waits a seeded gap, applies a
/// seeded fault of a kind the swarm turned on, waits a seeded while and
/// undoes it; at the end everything is healed and every node runs.
pub async fn nemesis(
    swarm: Swarm,
    mut rng: StdRng,
    faults: Faults,
    slots: Vec<Slot>,
    trace: Trace,
    statefulset: Option<StatefulSet>,
) {
    let ask = |fault: Fault| ask(&faults, &trace, fault);
    let kinds = swarm.kinds();
    let all: Vec<u64> = (1..=swarm.hosts()).collect();
    let end = tokio::time::Instant::now() + swarm.duration;
    while tokio::time::Instant::now() < end {
        let gap = rng.gen_range(swarm.fault_gap.0..=swarm.fault_gap.1);
        tokio::time::sleep(gap).await;
        let kind = kinds[rng.gen_range(0..kinds.len())];
        // A quick restart comes back within the election timeout (150-300
        // ms): before the others elect another leader.
        let lasting = Duration::from_millis(if swarm.quick_restart && rng.gen_bool(0.5) {
            rng.gen_range(0..150)
        } else {
            rng.gen_range(100..3_000)
        });
        match kind {
            Kind::Crash | Kind::CrashLeader => {
                let victim = match kind {
                    Kind::CrashLeader => leader(&slots).await,
                    _ => None,
                }
                .unwrap_or_else(|| all[rng.gen_range(0..all.len())]);
                ask(Fault::Crash(victim));
                tokio::time::sleep(lasting).await;
                ask(Fault::Restart(victim));
            }
            Kind::PowerCut => {
                let leader = leader(&slots).await;
                for id in &all {
                    ask(Fault::Crash(*id));
                }
                tokio::time::sleep(lasting).await;
                // Machines come back one by one, in a seeded order, as
                // they do after a power cut.
                let mut order = all.clone();
                // Half the time the leader comes back first: alone, with
                // its log and its vote, before any follower can answer it.
                if let Some(first) = leader.filter(|_| rng.gen_bool(0.5)) {
                    order.retain(|id| *id != first);
                    ask(Fault::Restart(first));
                    let gap = rng.gen_range(0..1_000);
                    tokio::time::sleep(Duration::from_millis(gap)).await;
                }
                while !order.is_empty() {
                    let id = order.remove(rng.gen_range(0..order.len()));
                    ask(Fault::Restart(id));
                    let gap = rng.gen_range(0..1_000);
                    tokio::time::sleep(Duration::from_millis(gap)).await;
                }
            }
            Kind::Isolate | Kind::Split | Kind::Wedge => {
                let size = match kind {
                    Kind::Split => rng.gen_range(1..=all.len() / 2),
                    _ => 1,
                };
                let mut rest = all.clone();
                let mut cut = Vec::new();
                for _ in 0..size {
                    cut.push(rest.remove(rng.gen_range(0..rest.len())));
                }
                if matches!(kind, Kind::Wedge) {
                    ask(Fault::Drop(cut.clone(), rest.clone()));
                    tokio::time::sleep(lasting).await;
                    ask(Fault::Repair(cut, rest));
                } else {
                    ask(Fault::Hold(cut.clone(), rest.clone()));
                    tokio::time::sleep(lasting).await;
                    ask(Fault::Release(cut, rest));
                }
            }
            Kind::OneWay => one_way(&all, &mut rng, lasting, &ask).await,
            Kind::DiskFull => disk_full(&all, &mut rng, lasting, &ask).await,
            Kind::Membership => swap_member(&slots, &mut rng, &trace).await,
            Kind::Scale => {
                if let Some(set) = &statefulset {
                    scale(set, swarm.nodes, &trace);
                }
            }
            Kind::Transfer => {
                if let Some((leader, voters)) = membership(&slots).await {
                    let to = voters[rng.gen_range(0..voters.len())];
                    admin(&slots, leader, Admin::Transfer(to), &trace).await;
                }
            }
        }
    }
    trace.record("nemesis done", &[]);
}

/// One node's segments dropped one way (to the others, or from them) for
/// `lasting`, then the links repaired.
async fn one_way(all: &[u64], rng: &mut StdRng, lasting: Duration, ask: impl Fn(Fault)) {
    let mut rest = all.to_vec();
    let node = vec![rest.remove(rng.gen_range(0..rest.len()))];
    let (from, to) = if rng.gen_bool(0.5) {
        (node, rest)
    } else {
        (rest, node)
    };
    ask(Fault::DropOneWay(from.clone(), to.clone()));
    tokio::time::sleep(lasting).await;
    ask(Fault::RepairOneWay(from, to));
}

/// A node's disk full for `lasting`: its raft stops at the first refused
/// write, its `/healthz` fails, and it is killed, given space and started
/// again (as Kubernetes restarts the pod once an operator freed space).
async fn disk_full(all: &[u64], rng: &mut StdRng, lasting: Duration, ask: impl Fn(Fault)) {
    let victim = all[rng.gen_range(0..all.len())];
    ask(Fault::DiskFull(victim));
    tokio::time::sleep(lasting).await;
    ask(Fault::Crash(victim));
    ask(Fault::DiskFreed(victim));
    let gap = rng.gen_range(0..1_000);
    tokio::time::sleep(Duration::from_millis(gap)).await;
    ask(Fault::Restart(victim));
}

/// Scales the gateways' StatefulSet between the voters the swarm started
/// with (`nodes`) and one more (the spare host), as `kubectl scale` would.
fn scale(set: &StatefulSet, nodes: u64, trace: &Trace) {
    let to = if set.replicas() == nodes {
        nodes + 1
    } else {
        nodes
    };
    set.scale(to);
    trace.record(format!("nemesis scales the gateways to {to}"), &[]);
}

/// How long a membership change or transfer may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Asks the leader for a membership change or transfer, and records what
/// it answered.
async fn admin(slots: &[Slot], leader: u64, what: Admin, trace: &Trace) -> bool {
    let Some(slot) = usize::try_from(leader - 1).ok().and_then(|i| slots.get(i)) else {
        return false;
    };
    let answer = slot.call(Call::Admin(what.clone()), ADMIN_TIMEOUT).await;
    let done = matches!(answer, Ok(Answer::Done));
    trace.record(
        format!(
            "nemesis {what:?} via n{leader}: {}",
            match &answer {
                Ok(Answer::Done) => "done".to_string(),
                Ok(Answer::Failed(e)) => e.clone(),
                other => format!("{other:?}"),
            }
        ),
        &[],
    );
    done
}

/// The leader and the voters it names, if a node answers at once.
pub async fn membership(slots: &[Slot]) -> Option<(u64, Vec<u64>)> {
    members(slots)
        .await
        .map(|(leader, voters, _)| (leader, voters))
}

/// The leader, the voters and every member (voters and learners) it
/// names, if a node answers at once.
pub async fn members(slots: &[Slot]) -> Option<(u64, Vec<u64>, Vec<u64>)> {
    let leader = leader(slots).await?;
    let slot = slots.get(usize::try_from(leader - 1).ok()?)?;
    match slot.call(Call::Status, Duration::from_millis(100)).await {
        Ok(Answer::Status(status)) if status.leader.as_ref().map(|l| l.0) == Some(leader) => {
            let voters: Vec<u64> = status
                .nodes
                .iter()
                .filter(|n| n.voter)
                .map(|n| n.id)
                .collect();
            let all: Vec<u64> = status.nodes.iter().map(|n| n.id).collect();
            (!voters.is_empty()).then_some((leader, voters, all))
        }
        _ => None,
    }
}

/// Swaps the host that is not a voter in, and a seeded voter out (it may
/// be the leader): add learner, promote, then remove (or demote, then
/// remove). A step that fails ends the swap where it is; the next one
/// starts from the membership as it is then.
async fn swap_member(slots: &[Slot], rng: &mut StdRng, trace: &Trace) {
    let Some((leader, voters)) = membership(slots).await else {
        return;
    };
    let hosts = u64::try_from(slots.len()).unwrap_or(0);
    if let Some(out) = (1..=hosts).find(|id| !voters.contains(id)) {
        if !admin(slots, leader, Admin::AddLearner(out), trace).await
            || !admin(slots, leader, Admin::Promote(out), trace).await
        {
            return;
        }
    }
    let Some((leader, voters)) = membership(slots).await else {
        return;
    };
    // Never below the voters the swarm started with.
    if u64::try_from(voters.len()).unwrap_or(0) < hosts {
        return;
    }
    let victim = voters[rng.gen_range(0..voters.len())];
    if rng.gen_bool(0.5) && !admin(slots, leader, Admin::Demote(victim), trace).await {
        return;
    }
    let Some((leader, _)) = membership(slots).await else {
        return;
    };
    admin(slots, leader, Admin::Remove(victim), trace).await;
}

/// The node that claims to lead the highest term among those that answer
/// at once (a removed or cut-off node may still name an old leader).
async fn leader(slots: &[Slot]) -> Option<u64> {
    let mut best: Option<(u64, u64)> = None;
    for slot in slots {
        if let Ok(Answer::Status(status)) =
            slot.call(Call::Status, Duration::from_millis(100)).await
        {
            let leads = status.leader.as_ref().map(|l| l.0) == Some(status.node_id);
            if leads && best.is_none_or(|(term, _)| status.term > term) {
                best = Some((status.term, status.node_id));
            }
        }
    }
    best.map(|(_, id)| id)
}
