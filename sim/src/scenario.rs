//! The scenario every seed runs: bootstrap the nodes, then the seed's
//! swarm (register clients and the nemesis at once), then heal, and check:
//!
//! 1. liveness after healing: a write through every node is acknowledged
//!    within [`PHASE_BOUND`] of simulated time;
//! 2. no acknowledged write lost and no stale read: every node reads every
//!    register linearizably, and the whole history (the clients' operations
//!    and these reads) is linearizable per register (WGL);
//! 3. every replica reaches the same state at the same applied index
//!    (state digests);
//! 4. every member is ready as its `/readyz` decides (caught up with the
//!    commit index it found at start-up and with the leader's);
//! 5. (first of all, with the autopilot) the members become the voters
//!    `1..=replicas` of the StatefulSet as last scaled.
//!
//! The scenario runs as turmoil's client host; it asks the driver
//! (`harness`) for crashes and partitions through a queue emptied between
//! simulation steps, so a fault lands at a step the seed decides.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use jepsen::checker::linear::RegOp;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use pool::Phase;
use tokio::sync::watch;

use crate::autopilot::StatefulSet;
use crate::driver::SimDriver;
use crate::members;
use crate::node::{self, Answer, Call, Slot};
use crate::register::{self, Ended, History};
use crate::swarm::{self, Faults, Swarm};
use crate::trace::Trace;

/// How long a bootstrap or status call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a phase may take before the run fails as not live.
pub const PHASE_BOUND: Duration = Duration::from_secs(20);

/// The client side of a run.
pub struct Scenario {
    swarm: Swarm,
    slots: Vec<Slot>,
    faults: Faults,
    rng: StdRng,
    trace: Trace,
    history: History,
    agreed: Agreed,
    /// The switch that pauses each pool member's statuses.
    pauses: Vec<watch::Sender<bool>>,
    /// The runtime API the gateways' launchers share, if they run.
    driver: Option<SimDriver>,
    /// The gateways' StatefulSet, with the autopilot.
    statefulset: Option<StatefulSet>,
}

/// What the end checks agreed on: the members and their common state.
#[derive(Clone, Debug)]
pub struct Agreement {
    /// The members a leader named after healing.
    pub members: Vec<u64>,
    /// The applied index every member reached.
    pub applied_index: u64,
    /// The crc32 of the state's snapshot encoding there.
    pub crc32: u32,
    /// Its length.
    pub bytes: u64,
}

/// Where the scenario leaves its [`Agreement`] for the harness.
pub type Agreed = Arc<Mutex<Option<Agreement>>>;

type Checked<T> = Result<T, String>;

impl Scenario {
    /// A scenario over the nodes reached through `slots` (node `i + 1` at
    /// index `i`).
    pub fn new(swarm: Swarm, slots: Vec<Slot>, faults: Faults, rng: StdRng, trace: Trace) -> Self {
        Scenario {
            swarm,
            slots,
            faults,
            rng,
            trace,
            history: History::default(),
            agreed: Agreed::default(),
            pauses: Vec::new(),
            driver: None,
            statefulset: None,
        }
    }

    /// The generations whose runtime the nemesis killed (none without
    /// launchers).
    fn killed(&self) -> std::collections::BTreeSet<(String, u64)> {
        self.driver
            .as_ref()
            .map(|d| d.killed().lock().unwrap_or_else(|p| p.into_inner()).clone())
            .unwrap_or_default()
    }

    /// With the gateways' launchers driving `driver`.
    #[must_use]
    pub fn with_driver(mut self, driver: Option<SimDriver>) -> Self {
        self.driver = driver;
        self
    }

    /// With the gateways' autopilot reading `statefulset`, which the
    /// nemesis scales.
    #[must_use]
    pub fn with_statefulset(mut self, statefulset: Option<StatefulSet>) -> Self {
        self.statefulset = statefulset;
        self
    }

    /// With pool members paused through `pauses` (one per member).
    #[must_use]
    pub fn with_members(mut self, pauses: Vec<watch::Sender<bool>>) -> Self {
        self.pauses = pauses;
        self
    }

    /// Where the end checks leave what the members agreed on.
    pub fn agreed(&self) -> Agreed {
        self.agreed.clone()
    }

    /// How many operations completed `ok` so far (read after the run).
    pub fn acked(&self) -> impl Fn() -> usize {
        let history = self.history.clone();
        move || history.ok()
    }

    /// Runs the scenario and its checks.
    ///
    /// # Errors
    /// The first check that failed, in words.
    pub async fn run(mut self) -> Checked<()> {
        let voters: Vec<(u64, String)> = (1..=self.swarm.nodes)
            .map(|id| (id, node::addr(id)))
            .collect();
        self.until("bootstrap", |s| {
            let call = Call::Init(voters.clone());
            async move { matches!(s.call(1, call).await, Some(Answer::Done)).then_some(()) }
        })
        .await?;
        let leader = self.agreed_leader().await?;
        self.log(format!("leader n{leader}"));
        self.launch_sandboxes().await?;

        self.swarm_phase().await;
        self.log("healed".into());
        // The autopilot may still be changing the membership: the checks
        // below go through the members it settles on.
        self.autopilot_converges().await?;
        let members = self
            .until("a leader naming the members", |s| async move {
                swarm::members(&s.slots).await.map(|(_, _, all)| all)
            })
            .await?;
        self.log(format!("members {members:?}"));
        self.writes_resume(&members).await?;
        self.pool_settles(&members).await?;
        self.final_reads(&members).await?;
        let checked = self.history.check()?;
        self.log(format!("history of {checked} operations is linearizable"));
        self.same_state(&members).await?;
        self.every_member_ready(&members).await
    }

    /// With the autopilot: the members become exactly the voters
    /// `1..=replicas` of the StatefulSet as the nemesis last scaled it (no
    /// learner left over).
    async fn autopilot_converges(&self) -> Checked<()> {
        let Some(set) = &self.statefulset else {
            return Ok(());
        };
        let wanted: Vec<u64> = (1..=set.replicas()).collect();
        let wanted = &wanted;
        self.until(
            &format!("the autopilot's membership: voters {wanted:?}"),
            |s| async move {
                let (_, mut voters, all) = swarm::members(&s.slots).await?;
                voters.sort_unstable();
                (voters == *wanted && all.len() == wanted.len()).then_some(())
            },
        )
        .await?;
        self.log(format!("the autopilot's voters are {wanted:?}"));
        Ok(())
    }

    /// The clients and the nemesis, for the swarm's duration; returns when
    /// all are done (the nemesis has healed everything by then).
    async fn swarm_phase(&mut self) {
        let end = tokio::time::Instant::now() + self.swarm.duration;
        let clients = register::Clients {
            history: self.history.clone(),
            trace: self.trace.clone(),
            slots: self.slots.clone(),
            keys: self.swarm.keys,
            sticky: self.swarm.sticky,
            reads: self.swarm.reads,
            values: Arc::new(Mutex::new(0)),
            end,
        };
        let mut tasks = Vec::new();
        for _ in 0..self.swarm.clients {
            let rng = StdRng::seed_from_u64(self.rng.gen());
            tasks.push(tokio::spawn(register::client(clients.clone(), rng)));
        }
        if self.swarm.member_pauses || self.swarm.member_crashes {
            tasks.push(tokio::spawn(members::nemesis(
                self.swarm.clone(),
                self.pauses.clone(),
                self.faults.clone(),
                StdRng::seed_from_u64(self.rng.gen()),
                end,
                self.trace.clone(),
            )));
        }
        tasks.push(tokio::spawn(swarm::nemesis(
            self.swarm.clone(),
            StdRng::seed_from_u64(self.rng.gen()),
            self.faults.clone(),
            self.slots.clone(),
            self.trace.clone(),
            self.statefulset.clone(),
        )));
        if let (true, Some(driver)) = (self.swarm.runtime_deaths, &self.driver) {
            tasks.push(tokio::spawn(crate::driver::nemesis(
                driver.clone(),
                StdRng::seed_from_u64(self.rng.gen()),
                end,
            )));
        }
        for task in tasks {
            // A client or the nemesis that panicked fails the run below
            // (its operations are missing, or the run is not healed).
            let _ = task.await;
        }
    }

    /// The sandboxes of the run, two per pool member.
    fn sandboxes(&self) -> Vec<String> {
        (1..=2 * self.swarm.members)
            .map(|k| format!("s{k}"))
            .collect()
    }

    /// Admits every sandbox, each through a node of its own, until
    /// admitted (members join as the cluster comes up): an attempt whose
    /// outcome is unknown is retried with its launch id, a refused one (a
    /// spent launch id) with the next.
    async fn launch_sandboxes(&self) -> Checked<()> {
        for (k, sandbox) in self.sandboxes().into_iter().enumerate() {
            let via = 1 + (k as u64 % self.swarm.nodes);
            let attempt = std::cell::Cell::new(0u32);
            self.until(&format!("launch {sandbox} via n{via}"), |s| {
                let call = Call::Launch {
                    sandbox: sandbox.clone(),
                    launch_id: format!("launch-{sandbox}-{}", attempt.get()),
                };
                let attempt = &attempt;
                async move {
                    match s.call(via, call).await {
                        Some(Answer::Launched) => Some(()),
                        Some(Answer::Rejected(_)) => {
                            attempt.set(attempt.get() + 1);
                            None
                        }
                        _ => None,
                    }
                }
            })
            .await?;
        }
        self.log(format!("launched {} sandboxes", self.sandboxes().len()));
        Ok(())
    }

    /// After healing, every sandbox is owned by an active member that
    /// acknowledged it, and none failed: no member died in this run, so a
    /// failed sandbox is a healthy one the control plane failed. With the
    /// launchers on, each also has its runtime recorded, and the runtime
    /// API holds exactly that one runtime for it, serving ([`runtimes_match`]):
    /// none deleted under a live sandbox, none started twice.
    async fn pool_settles(&self, members: &[u64]) -> Checked<()> {
        let expected = self.sandboxes().len();
        let last = std::cell::RefCell::new(String::new());
        let settled = self
            .until("every sandbox owned and acknowledged", |s| {
                let last = &last;
                async move {
                    let Some(Answer::Pool(sandboxes)) = s.call(members[0], Call::Pool).await else {
                        return None;
                    };
                    let killed = s.killed();
                    if let Some(failed) = sandboxes.iter().find(|v| {
                        v.phase == Phase::Failed && !killed.contains(&(v.id.clone(), v.generation))
                    }) {
                        return Some(Err(format!("healthy sandbox failed: {failed:?}")));
                    }
                    // A sandbox whose runtime the nemesis killed ends failed
                    // (or, killed before its runtime was recorded, runs a
                    // new one); every other one assigned.
                    let (failed, live): (Vec<_>, Vec<_>) = sandboxes
                        .iter()
                        .cloned()
                        .partition(|v| v.phase == Phase::Failed);
                    let settled = sandboxes.len() == expected
                        && live
                            .iter()
                            .all(|v| v.phase == Phase::Assigned && v.owner_active);
                    let runtimes = match &s.driver {
                        Some(driver) => runtimes_match(&live, &failed, &driver.runtimes()),
                        None => Ok(()),
                    };
                    *last.borrow_mut() = match &runtimes {
                        Ok(()) => format!("{sandboxes:?}"),
                        Err(e) => format!("{sandboxes:?}; runtimes: {e}"),
                    };
                    let settled = settled && runtimes.is_ok();
                    settled.then_some(Ok(failed.len()))
                }
            })
            .await;
        let failed = match settled {
            Ok(result) => result?,
            Err(e) => return Err(format!("{e}; last seen: {}", last.borrow())),
        };
        self.log(match failed {
            0 => format!("{expected} sandboxes owned and acknowledged"),
            _ => format!(
                "{} sandboxes owned and acknowledged, {failed} failed: the nemesis killed their runtime",
                expected - failed
            ),
        });
        Ok(())
    }

    /// After healing, a write through every member is acknowledged.
    async fn writes_resume(&self, members: &[u64]) -> Checked<()> {
        for &id in members {
            let process = self.history.process();
            self.until(
                &format!("a write through n{id} after healing"),
                |s| async move {
                    let op = RegOp::Write(-i64::try_from(id).unwrap_or(0));
                    match s.route(id).operate(process, &register::key(0), op).await {
                        Ended::Ok(_) => Some(()),
                        _ => None,
                    }
                },
            )
            .await?;
        }
        Ok(())
    }

    /// Every member reads every register; the reads join the history.
    async fn final_reads(&self, members: &[u64]) -> Checked<()> {
        for &id in members {
            for k in 0..self.swarm.keys {
                let key = register::key(k);
                let process = self.history.process();
                self.until(&format!("read {key} via n{id}"), |s| {
                    let key = key.clone();
                    async move {
                        match s.route(id).operate(process, &key, RegOp::Read(None)).await {
                            Ended::Ok(_) => Some(()),
                            _ => None,
                        }
                    }
                })
                .await?;
            }
        }
        Ok(())
    }

    /// All members reach the same applied index with the same state.
    async fn same_state(&self, members: &[u64]) -> Checked<()> {
        let digest = self
            .until("equal states", |s| async move {
                let mut digests = Vec::new();
                for &id in members {
                    match s.call(id, Call::Digest).await {
                        Some(Answer::Digest(index, crc, len)) => digests.push((index, crc, len)),
                        _ => return None,
                    }
                }
                let first = digests[0];
                digests.iter().all(|d| *d == first).then_some(first)
            })
            .await?;
        self.log(format!(
            "every member applied index {} with state crc {:08x} ({} bytes)",
            digest.0, digest.1, digest.2
        ));
        *self.agreed.lock().unwrap_or_else(|p| p.into_inner()) = Some(Agreement {
            members: members.to_vec(),
            applied_index: digest.0,
            crc32: digest.1,
            bytes: digest.2,
        });
        Ok(())
    }

    /// Every member is ready as its `/readyz` would say: it knows the
    /// leader, applied what was committed when it started and is caught up
    /// with the leader's commit index.
    async fn every_member_ready(&self, members: &[u64]) -> Checked<()> {
        for &id in members {
            let why = Mutex::new(String::from("no answer"));
            let why = &why;
            self.until(&format!("n{id} ready"), |s| async move {
                match s.call(id, Call::Ready).await {
                    Some(Answer::Ready(verdict)) if verdict.ready => Some(()),
                    Some(Answer::Ready(verdict)) => {
                        *why.lock().unwrap_or_else(|p| p.into_inner()) = verdict.reason;
                        None
                    }
                    _ => None,
                }
            })
            .await
            .map_err(|e| {
                let why = why.lock().unwrap_or_else(|p| p.into_inner());
                format!("{e} (its last verdict: {why})")
            })?;
        }
        self.log("every member is ready".into());
        Ok(())
    }

    fn log(&self, what: String) {
        self.trace.record(format!("client {what}"), &[]);
    }

    /// Operations through node `id` alone.
    fn route(&self, id: u64) -> register::Route<'_> {
        register::Route {
            history: &self.history,
            trace: &self.trace,
            slots: &self.slots,
            via: vec![id],
        }
    }

    fn slot(&self, id: u64) -> Option<&Slot> {
        self.slots.get(usize::try_from(id.checked_sub(1)?).ok()?)
    }

    async fn call(&self, id: u64, call: Call) -> Option<Answer> {
        self.slot(id)?.call(call, CALL_TIMEOUT).await.ok()
    }

    /// Retries `attempt` every 50 ms until it gives a value, within
    /// [`PHASE_BOUND`] of simulated time.
    async fn until<'a, T, F, Fut>(&'a self, what: &str, mut attempt: F) -> Checked<T>
    where
        F: FnMut(&'a Self) -> Fut,
        Fut: std::future::Future<Output = Option<T>>,
    {
        let deadline = tokio::time::Instant::now() + PHASE_BOUND;
        loop {
            if let Some(value) = attempt(self).await {
                return Ok(value);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "not live: {what} did not happen within {PHASE_BOUND:?}"
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The leader every node names, once they all name the same one.
    async fn agreed_leader(&self) -> Checked<u64> {
        self.until("agreed leader", |s| async move {
            let mut leaders = Vec::new();
            for id in 1..=s.swarm.nodes {
                match s.call(id, Call::Status).await {
                    Some(Answer::Status(status)) => leaders.push(status.leader.map(|l| l.0)),
                    _ => return None,
                }
            }
            let first = leaders.first().copied().flatten()?;
            leaders.iter().all(|l| *l == Some(first)).then_some(first)
        })
        .await
    }
}

/// Whether the runtime API holds, for each live sandbox, exactly the
/// runtime its record names (its sandbox and generation), serving, and for
/// each failed one none (the launcher deletes it); the mismatch in words.
pub fn runtimes_match(
    live: &[node::SandboxView],
    failed: &[node::SandboxView],
    listed: &[sandbox_driver::Observed],
) -> Result<(), String> {
    if let Some(left) = listed
        .iter()
        .find(|o| failed.iter().any(|v| v.id == o.sandbox_id))
    {
        return Err(format!(
            "{} ({:?}) of a failed sandbox is not deleted",
            left.name, left.state
        ));
    }
    for v in live {
        let expected = sandbox_driver::runtime_name(&v.id, v.generation);
        if v.runtime.as_deref() != Some(expected.as_str()) {
            return Err(format!(
                "{} gen {}: runtime recorded {:?}",
                v.id, v.generation, v.runtime
            ));
        }
        let theirs: Vec<&sandbox_driver::Observed> =
            listed.iter().filter(|o| o.sandbox_id == v.id).collect();
        match theirs.as_slice() {
            [one]
                if one.name == expected
                    && matches!(one.state, sandbox_driver::RuntimeState::Running(_)) => {}
            _ => {
                return Err(format!(
                    "{} gen {}: the runtime API holds {:?}",
                    v.id,
                    v.generation,
                    theirs
                        .iter()
                        .map(|o| (&o.name, &o.state))
                        .collect::<Vec<_>>()
                ))
            }
        }
    }
    Ok(())
}
