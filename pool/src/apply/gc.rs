//! Garbage collection, run by every applied `Tick` (issue 16): removes the
//! records that finished at least `retention_ticks` ago, at most
//! [`GC_BATCH`] per tick, in a fixed order so every replica removes the
//! same records at the same log position:
//!
//! 1. launch outcomes (`launches`, by launch id): refused tombstones
//!    `retention` after the refusal, admitted records `retention` after
//!    their generation ended;
//! 2. deleted and failed sandbox records (by sandbox id), once every due
//!    launch record is gone (the admitted record of the removed generation
//!    goes with it, so no launch ever names a missing sandbox, I5);
//! 3. finished operations (by id): failed, cancelled, a succeeded
//!    rebalance, a succeeded drain once its member is no longer draining;
//! 4. departed members (leaving or expired, by id) that own no slot and
//!    that no sandbox record or operation names (I4 never acts on
//!    absence: an owner's member record outlives the owner's sandboxes).
//!
//! A later table is visited only while budget remains, so a record is never
//! removed while an older due record of an earlier table waits. Launches
//! and sandboxes are read from their indexes of finished records
//! (`crate::table`: only the due ones, then in id order, the order a scan
//! of the table would take them), and whether a sandbox record names a
//! member from the table's count per member; operations and members are
//! scanned (a handful, and one record per supervisor).
//!
//! What a removal means: a heartbeat, report or join of a removed member is
//! treated as that of an unknown member (as before it ever joined); a
//! launch id whose record was removed may be admitted again (so the
//! retention must exceed every client's retry horizon); a sandbox id whose
//! record was removed starts its next generation above
//! [`PoolState::generation_floor`], so a generation number, and the grants
//! naming it, is never reused.

use std::collections::BTreeSet;

// The parent's imports (commands, state) and shared checks.
use super::*;

impl LaunchOutcome {
    /// The tick from which the record counts as finished: the refusal, or
    /// the end of the admitted generation (None while it is live).
    pub fn ended_tick(&self) -> Option<u64> {
        match self {
            LaunchOutcome::Admitted { ended_tick, .. } => *ended_tick,
            LaunchOutcome::Refused { tick, .. } => Some(*tick),
        }
    }
}

impl PoolState {
    /// True if a record finished at `tick` is due for collection now.
    fn gc_due(&self, tick: u64) -> bool {
        self.now_tick.saturating_sub(tick) >= self.config.retention_ticks
    }

    /// The latest finish tick due for collection now (None: nothing can be
    /// due yet); the same test as [`Self::gc_due`] for ticks not after now,
    /// read from the tables' indexes of finished records.
    fn gc_cutoff(&self) -> Option<u64> {
        self.now_tick.checked_sub(self.config.retention_ticks)
    }

    /// One tick's garbage collection (see the module doc).
    pub(super) fn collect_garbage(&mut self) -> Collected {
        let mut done = Collected::default();
        let launches: Vec<String> = match self.gc_cutoff() {
            None => Vec::new(),
            Some(cutoff) => self
                .launches
                .ended_by(cutoff)
                .into_iter()
                .take(GC_BATCH)
                .map(str::to_string)
                .collect(),
        };
        for id in &launches {
            self.launches.remove(id);
        }
        done.launches = launches;
        if done.len() < GC_BATCH {
            self.collect_sandboxes(&mut done);
        }
        if done.len() < GC_BATCH {
            self.collect_operations(&mut done);
        }
        if done.len() < GC_BATCH {
            self.collect_members(&mut done);
        }
        done
    }

    fn collect_sandboxes(&mut self, done: &mut Collected) {
        let Some(cutoff) = self.gc_cutoff() else {
            return;
        };
        let due: Vec<(String, String)> = self
            .sandboxes
            .ended_by(cutoff)
            .into_iter()
            .filter_map(|id| self.sandboxes.get(id))
            .map(|s| (s.id.clone(), s.launch_id.clone()))
            .collect();
        for (id, launch_id) in due {
            // The generation's own launch record normally went in step 1
            // (it ended at the same tick); if not, it goes with the record.
            let own_launch = match (self.sandboxes.get(&id), self.launches.get(&launch_id)) {
                (
                    Some(s),
                    Some(LaunchOutcome::Admitted {
                        sandbox,
                        generation,
                        ..
                    }),
                ) => *sandbox == id && *generation == s.generation,
                _ => false,
            };
            let cost = 1 + usize::from(own_launch);
            if done.len() + cost > GC_BATCH {
                return;
            }
            if own_launch {
                self.launches.remove(&launch_id);
                done.launches.push(launch_id);
            }
            if let Some(s) = self.sandboxes.remove(&id) {
                self.generation_floor = self.generation_floor.max(s.generation);
            }
            done.sandboxes.push(id);
        }
    }

    fn collect_operations(&mut self, done: &mut Collected) {
        let due: Vec<String> = self
            .operations
            .values()
            .filter(|o| {
                let finished = match (&o.phase, &o.kind) {
                    (OperationPhase::Failed | OperationPhase::Cancelled, _) => true,
                    (OperationPhase::Succeeded, OperationKind::RebalancePool) => true,
                    // A succeeded drain holds its member out of service
                    // (I6) until cancelled or the member is gone.
                    (OperationPhase::Succeeded, OperationKind::DrainMember { member }) => self
                        .members
                        .get(member)
                        .is_none_or(|m| m.state != MemberState::Draining),
                    (OperationPhase::Queued | OperationPhase::Running, _) => false,
                };
                finished && o.finished_tick.is_some_and(|t| self.gc_due(t))
            })
            .take(GC_BATCH - done.len())
            .map(|o| o.id.clone())
            .collect();
        for id in &due {
            self.operations.remove(id);
        }
        done.operations = due;
    }

    fn collect_members(&mut self, done: &mut Collected) {
        let departed = |m: &Member| {
            matches!(m.state, MemberState::Leaving | MemberState::Expired)
                && m.charged == 0
                && m.down_since_tick.is_some_and(|t| self.gc_due(t))
        };
        if !self.members.values().any(departed) {
            return;
        }
        let mut named: BTreeSet<&str> = BTreeSet::new();
        for o in self.operations.values() {
            if let OperationKind::DrainMember { member } = &o.kind {
                named.insert(member);
            }
        }
        let due: Vec<String> = self
            .members
            .values()
            .filter(|m| {
                departed(m) && !named.contains(m.id.as_str()) && !self.sandboxes.names_member(&m.id)
            })
            .take(GC_BATCH - done.len())
            .map(|m| m.id.clone())
            .collect();
        for id in &due {
            self.members.remove(id);
            self.ring.remove(id);
        }
        done.members = due;
    }
}
