//! The pool-fault loop: pauses, kills and drains pool members
//! (`pause-supervisor` / `resume-supervisor`, `kill-supervisor` /
//! `restart-supervisor`, `drain` / `cancel`), and restarts of members that
//! expired (scripted) or exited by themselves (process).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::calls::Call;
use super::member::PoolMember;
use super::{lock, Shared};
use crate::ops::pool::Drain;

fn between(rng: &mut StdRng, (lo, hi): (u64, u64)) -> Duration {
    Duration::from_millis(if hi > lo { rng.gen_range(lo..hi) } else { lo })
}

impl Shared {
    /// Sleeps up to `d`, returning early (false) when the run stops.
    async fn hold(&self, d: Duration) -> bool {
        let until = Instant::now() + d;
        while Instant::now() < until {
            if self.stop.load(Ordering::Relaxed) {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50).min(until - Instant::now())).await;
        }
        true
    }

    /// Restarts supervisors the last status read showed expired at their
    /// current incarnation (what a process supervisor would do).
    fn restart_expired(&self, rng: &mut StdRng) {
        let expired = lock(&self.expired).clone();
        for s in self.supervisors.iter().filter_map(|m| match m {
            PoolMember::Scripted(s) => Some(s),
            PoolMember::Process(_) => None,
        }) {
            if s.is_alive() && !s.is_paused() && expired.get(s.member()) == Some(&s.incarnation()) {
                self.history.nemesis(
                    "restart-supervisor",
                    format!(
                        "{} (incarnation {} read expired)",
                        s.member(),
                        s.incarnation()
                    ),
                );
                s.restart(rng.gen());
                lock(&self.expired).remove(s.member());
            }
        }
    }

    /// Process members that exited on their own (a defect: they are
    /// meant to run until killed) are recorded and restarted.
    fn restart_exited(&self, rng: &mut StdRng) {
        for m in &self.supervisors {
            let PoolMember::Process(p) = m else {
                continue;
            };
            if p.is_alive() || p.pid().is_none() {
                continue;
            }
            let what = format!(
                "{} ({}) exited by itself; see {}.log",
                p.member(),
                m.describe(),
                p.member()
            );
            self.history.nemesis("supervisor-exited", what.clone());
            lock(&self.exits).push(what);
            if let Err(e) = m.restart(rng.gen()) {
                tracing::warn!(member = p.member(), error = %e, "restart failed");
            }
        }
    }

    /// The pool-fault loop: pauses, kills and drains supervisors.
    pub(super) async fn faults(self: Arc<Self>, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x5EED_F00D);
        let mut operator = self.processes.fresh();
        let mut op_n = 0u64;
        let kinds: Vec<String> = self.options.faults.clone();
        while !self.stop.load(Ordering::Relaxed) {
            if !self
                .hold(between(&mut rng, self.options.fault_every_ms))
                .await
            {
                break;
            }
            self.restart_expired(&mut rng);
            self.restart_exited(&mut rng);
            if kinds.is_empty() || self.supervisors.is_empty() {
                continue;
            }
            let kind = kinds[rng.gen_range(0..kinds.len())].clone();
            let s = &self.supervisors[rng.gen_range(0..self.supervisors.len())];
            if !s.is_alive() {
                continue;
            }
            match kind.as_str() {
                "pause" => self.pause(s, &mut rng).await,
                "kill" => self.kill(s, &mut rng).await,
                "drain" => {
                    op_n += 1;
                    operator = self.drain(s, &mut rng, operator, op_n).await;
                }
                _ => {}
            }
        }
    }

    /// `pause-supervisor`, a hold shorter than the TTL, `resume-supervisor`.
    async fn pause(&self, s: &PoolMember, rng: &mut StdRng) {
        let d = between(rng, self.options.pause_ms);
        self.history.nemesis(
            "pause-supervisor",
            format!("{} {} for {} ms", s.member(), s.describe(), d.as_millis()),
        );
        s.pause();
        self.hold(d).await;
        s.resume();
        self.history.nemesis(
            "resume-supervisor",
            format!("{} {}", s.member(), s.describe()),
        );
    }

    /// `kill-supervisor`, down for a while, `restart-supervisor`.
    async fn kill(&self, s: &PoolMember, rng: &mut StdRng) {
        let d = between(rng, self.options.down_ms);
        self.history.nemesis(
            "kill-supervisor",
            format!(
                "{} {} down for {} ms",
                s.member(),
                s.describe(),
                d.as_millis()
            ),
        );
        s.kill();
        self.hold(d).await;
        if let Err(e) = s.restart(rng.gen()) {
            tracing::warn!(member = s.member(), error = %e, "restart failed");
        }
        self.history.nemesis(
            "restart-supervisor",
            format!("{} {}", s.member(), s.describe()),
        );
    }

    /// `drain` of `s` by the operator (process `operator`), held a while,
    /// then `cancel` until it is certainly cancelled (or certainly not
    /// there), so the member returns to service. Returns the operator's
    /// next process number.
    async fn drain(&self, s: &PoolMember, rng: &mut StdRng, operator: u64, op_n: u64) -> u64 {
        let node = rng.gen_range(1..=self.cluster.nodes.len());
        let drain = Drain {
            op: format!("drain-{op_n}"),
            member: s.member().to_string(),
            phase: None,
        };
        let done = self.op(operator, &Call::Drain(drain.clone()), node).await;
        let d = between(rng, self.options.drain_ms);
        self.hold(d).await;
        let mut p = done.next;
        for attempt in 0..10 {
            let node = 1 + (node + attempt) % self.cluster.nodes.len();
            let done = self.op(p, &Call::Cancel(drain.clone()), node).await;
            p = done.next;
            let certain_fail = done
                .fail
                .as_deref()
                .is_some_and(|m| m.starts_with("FailedPrecondition") || m.starts_with("NotFound"));
            if done.ok.is_some() || certain_fail {
                break;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        p
    }
}
