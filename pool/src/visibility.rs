//! What each supervisor incarnation may see: the assignment view a gateway
//! streams to one attached member incarnation, which attached incarnations
//! no longer count, whether a view must be pushed at all, and the journal of
//! what applied commands changed, so a push can cost what changed instead of
//! a scan of every sandbox.
//!
//! Pure like the rest of the crate: no clock, no I/O, `BTreeMap`/`BTreeSet`
//! only. The gateway's hub drives it; its duties, in order:
//!
//! 1. **Record.** After every applied pool command, call
//!    [`ChangeLog::record`] with the command's log index, the command and its
//!    outcome (the gateway keeps the journal next to the state it applies).
//! 2. **Plan.** Describe each attached stream as a [`Viewer`] (member,
//!    incarnation, what it was last shown), read the state at its applied
//!    index, and call [`plan_pushes`] with [`ChangeLog::since`] the oldest
//!    index a viewer's view is known at. Viewers outside the known changes
//!    (never shown anything, or shown before the journal begins) get a full
//!    scan; one scan serves all of them.
//! 3. **Deliver.** Re-read the stream registry and send a [`Push`] only where
//!    [`Push::deliverable_to`] says so: the stream of the incarnation the
//!    view was computed for, never a view older than one already sent, never
//!    a view equal to the one last sent. Sign grants from [`Push::claims`]:
//!    they name the planned incarnation. Record the sent view as shown at
//!    the plan's index.
//! 4. **Confirm.** For each [`Plan::unchanged`] viewer whose shown view is
//!    still the one planned from, record that the same view holds at the
//!    plan's index (so the next plan can start from there).
//! 5. **Close.** Close the stream of every [`Plan::retired`] incarnation
//!    (again only if the registry still holds that incarnation).

use std::collections::{BTreeMap, BTreeSet};

pub use crate::journal::{ChangeLog, Changes};
use crate::state::{MemberState, Phase, PoolState, Runtime, Sandbox};

/// One sandbox as its owner incarnation is shown it (the gateway signs a
/// grant for it when it sends the view).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxView {
    /// Sandbox id.
    pub sandbox: String,
    /// Generation.
    pub generation: u64,
    /// Phase.
    pub phase: Phase,
    /// Ownership term.
    pub term: u64,
    /// Credential epoch.
    pub credential_epoch: u64,
    /// Whether the owner acknowledged the term.
    pub acknowledged: bool,
    /// Launch material; empty once the sandbox holds no slot (a released
    /// sandbox carries no launch material).
    pub material_ref: String,
    /// The generation's runtime endpoint, once recorded (the owner dials
    /// it; a released sandbox keeps it so the owner can stop the workload).
    pub runtime: Option<Runtime>,
}

impl SandboxView {
    /// The view of `s` for its owner.
    pub fn of(s: &Sandbox) -> SandboxView {
        SandboxView {
            sandbox: s.id.clone(),
            generation: s.generation,
            phase: s.phase,
            term: s.owner.term,
            credential_epoch: s.owner.credential_epoch,
            acknowledged: s.owner.acknowledged,
            material_ref: if s.phase.is_charged() {
                s.material_ref.clone()
            } else {
                String::new()
            },
            runtime: s.runtime.clone(),
        }
    }
}

/// Everything one member incarnation is shown (before grants are signed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IncarnationView {
    /// Live (slot-holding) sandboxes it owns, by sandbox id.
    pub assignments: BTreeMap<String, SandboxView>,
    /// Deleted or failed sandboxes it owned last, by sandbox id: it stops
    /// their workloads.
    pub released: BTreeMap<String, SandboxView>,
    /// Whether its member is draining.
    pub draining: bool,
}

impl IncarnationView {
    /// Files `s` where its phase puts it (or nowhere: stopping sandboxes
    /// are neither live assignments nor released).
    fn insert(&mut self, s: &Sandbox) {
        if s.phase.is_charged() {
            self.assignments.insert(s.id.clone(), SandboxView::of(s));
        } else if matches!(s.phase, Phase::Deleted | Phase::Failed) {
            self.released.insert(s.id.clone(), SandboxView::of(s));
        }
    }
}

/// One attached stream, as the planner needs to know it.
#[derive(Clone, Copy, Debug)]
pub struct Viewer<'a> {
    /// Member id.
    pub member: &'a str,
    /// The incarnation the stream was attached for.
    pub incarnation: u64,
    /// What it was last shown, if anything.
    pub shown: Option<&'a IncarnationView>,
    /// The applied index at which `shown` is known to be the incarnation's
    /// view (it was sent then, or confirmed unchanged then).
    pub shown_at: u64,
    /// Log index of the last snapshot sent on it (0: none): no older
    /// snapshot may follow.
    pub sent_index: u64,
}

/// Why an attached incarnation no longer counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Retirement {
    /// A newer incarnation of the member joined.
    Superseded,
    /// The incarnation expired or left; it must re-join as a new one.
    Retired,
}

/// An attached incarnation whose stream must be closed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Retired {
    /// Member id.
    pub member: String,
    /// The incarnation that no longer counts.
    pub incarnation: u64,
    /// Why.
    pub why: Retirement,
}

/// A view to send to one incarnation's stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Push {
    /// Member id.
    pub member: String,
    /// The incarnation the view was computed for.
    pub incarnation: u64,
    /// The applied index it was computed at.
    pub index: u64,
    /// The view.
    pub view: IncarnationView,
}

/// The fields of one grant the gateway signs for a pushed sandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantClaims {
    /// Sandbox id.
    pub sandbox: String,
    /// Generation.
    pub generation: u64,
    /// The member the grant names.
    pub member: String,
    /// The incarnation the grant names: always the one the view was
    /// computed for.
    pub incarnation: u64,
    /// Ownership term.
    pub term: u64,
    /// Credential epoch.
    pub credential_epoch: u64,
    /// Applied index of the snapshot.
    pub log_index: u64,
    /// True for a released sandbox (stop it), false for a live one.
    pub release: bool,
}

impl Push {
    /// Whether this push may go to the stream described by `stream` (the
    /// registry's entry for `self.member`, read again after planning): only
    /// the stream of the incarnation the view was computed for, never after
    /// a newer snapshot, never a repeat of the view last sent.
    pub fn deliverable_to(&self, stream: &Viewer<'_>) -> bool {
        stream.member == self.member
            && stream.incarnation == self.incarnation
            && self.index >= stream.sent_index
            && stream.shown != Some(&self.view)
    }

    /// The grant claims of one sandbox of this push's view (`release` for
    /// a released one): they name this push's member incarnation.
    pub fn claims(&self, s: &SandboxView, release: bool) -> GrantClaims {
        GrantClaims {
            sandbox: s.sandbox.clone(),
            generation: s.generation,
            member: self.member.clone(),
            incarnation: self.incarnation,
            term: s.term,
            credential_epoch: s.credential_epoch,
            log_index: self.index,
            release,
        }
    }

    /// The grants of the live assignments, then of the released sandboxes,
    /// in sandbox id order.
    pub fn grants(&self) -> (Vec<GrantClaims>, Vec<GrantClaims>) {
        let claims = |views: &BTreeMap<String, SandboxView>, release| {
            views.values().map(|s| self.claims(s, release)).collect()
        };
        (
            claims(&self.view.assignments, false),
            claims(&self.view.released, true),
        )
    }
}

/// The result of [`plan_pushes`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// The applied index the plan was computed at.
    pub index: u64,
    /// Views that changed, one per viewer at most.
    pub pushes: Vec<Push>,
    /// Viewers (member, incarnation) whose view is unchanged at `index`.
    pub unchanged: Vec<(String, u64)>,
    /// Attached incarnations that no longer count.
    pub retired: Vec<Retired>,
}

/// Why `incarnation` of `member` no longer counts, if it does not.
pub fn retirement(state: &PoolState, member: &str, incarnation: u64) -> Option<Retirement> {
    let m = state.member(member)?;
    if m.incarnation > incarnation {
        Some(Retirement::Superseded)
    } else if m.incarnation == incarnation
        && matches!(m.state, MemberState::Expired | MemberState::Leaving)
    {
        Some(Retirement::Retired)
    } else {
        None
    }
}

fn draining(state: &PoolState, member: &str) -> bool {
    state
        .member(member)
        .map(|m| m.state == MemberState::Draining)
        .unwrap_or(false)
}

/// The view of every `(member, incarnation)` in `who`, from the records
/// each owns (`crate::table`'s index by owner: a newly attached stream
/// costs what it owns, never a pass over the pool).
pub fn full_views<'a>(
    state: &'a PoolState,
    who: &BTreeSet<(&'a str, u64)>,
) -> BTreeMap<(&'a str, u64), IncarnationView> {
    full_views_counted(state, who, &mut 0)
}

/// [`full_views`], adding the sandboxes it read to `examined`.
fn full_views_counted<'a>(
    state: &'a PoolState,
    who: &BTreeSet<(&'a str, u64)>,
    examined: &mut u64,
) -> BTreeMap<(&'a str, u64), IncarnationView> {
    let mut views: BTreeMap<(&'a str, u64), IncarnationView> = who
        .iter()
        .map(|&(member, incarnation)| {
            let view = IncarnationView {
                draining: draining(state, member),
                ..IncarnationView::default()
            };
            ((member, incarnation), view)
        })
        .collect();
    for (&(member, incarnation), view) in views.iter_mut() {
        for s in state.sandbox_table().records_of(member, incarnation) {
            *examined += 1;
            view.insert(s);
        }
    }
    views
}

/// `shown` brought to the current state by re-reading only `touched`, or
/// None when nothing in it can have changed (no copy is made then).
fn updated_view(
    state: &PoolState,
    member: &str,
    incarnation: u64,
    shown: &IncarnationView,
    touched: &BTreeSet<String>,
    examined_total: &mut u64,
) -> Option<IncarnationView> {
    let draining = draining(state, member);
    // Every sandbox record read from the state counts as examined.
    let examined = std::cell::Cell::new(*examined_total);
    let owned = |id: &String| {
        examined.set(examined.get() + 1);
        state
            .sandbox(id)
            .is_some_and(|s| s.owner.member == member && s.owner.incarnation == incarnation)
    };
    let relevant: Vec<&String> = touched
        .iter()
        .filter(|id| {
            shown.assignments.contains_key(*id) || shown.released.contains_key(*id) || owned(id)
        })
        .collect();
    let view = (!relevant.is_empty() || draining != shown.draining).then(|| {
        let mut view = shown.clone();
        view.draining = draining;
        for id in relevant {
            view.assignments.remove(id);
            view.released.remove(id);
            if let Some(s) = state.sandbox(id).filter(|_| owned(id)) {
                view.insert(s);
            }
        }
        view
    });
    *examined_total = examined.get();
    view
}

/// Decides, for every attached viewer, what it may see at applied `index`:
/// a changed view to push, no push (unchanged, or older than what it was
/// already sent), or its stream closed (its incarnation no longer counts).
/// `changes` are the sandboxes touched since `changes`' index; a viewer
/// whose shown view is older than that, or who was shown nothing, is
/// computed in full (one scan for all of them).
pub fn plan_pushes(
    state: &PoolState,
    index: u64,
    viewers: &[Viewer<'_>],
    changes: &Changes,
) -> Plan {
    plan_pushes_counted(state, index, viewers, changes).0
}

/// [`plan_pushes`], and how many sandbox records it read from the state
/// (every sandbox of a full scan, every sandbox looked up by id): the work
/// a push pass costs, which the gateway exports as a metric.
pub fn plan_pushes_counted(
    state: &PoolState,
    index: u64,
    viewers: &[Viewer<'_>],
    changes: &Changes,
) -> (Plan, u64) {
    let mut plan = Plan {
        index,
        ..Plan::default()
    };
    let mut examined = 0u64;
    let mut live = Vec::new();
    for v in viewers {
        match retirement(state, v.member, v.incarnation) {
            Some(why) => plan.retired.push(Retired {
                member: v.member.to_string(),
                incarnation: v.incarnation,
                why,
            }),
            None => live.push(v),
        }
    }
    let incremental = |v: &Viewer<'_>| match (changes.index(), v.shown) {
        (Some(since), Some(_)) => v.shown_at >= since,
        _ => false,
    };
    let full: BTreeSet<(&str, u64)> = live
        .iter()
        .filter(|v| !incremental(v))
        .map(|v| (v.member, v.incarnation))
        .collect();
    let mut full = full_views_counted(state, &full, &mut examined);
    let nothing = BTreeSet::new();
    for v in live {
        // None: the incarnation still sees exactly what it was shown.
        let view = match (changes, v.shown) {
            (Changes::Since { sandboxes, .. }, Some(shown)) if incremental(v) => updated_view(
                state,
                v.member,
                v.incarnation,
                shown,
                sandboxes,
                &mut examined,
            ),
            (Changes::ByOwner { owners, .. }, Some(shown)) if incremental(v) => {
                // Only the sandboxes this incarnation owned before or after
                // a change can differ in its view.
                let mine = owners
                    .get(&(v.member.to_string(), v.incarnation))
                    .unwrap_or(&nothing);
                updated_view(state, v.member, v.incarnation, shown, mine, &mut examined)
            }
            _ => match full.remove(&(v.member, v.incarnation)) {
                Some(view) => Some(view),
                None => continue,
            },
        };
        if index < v.sent_index {
            continue;
        }
        match view {
            Some(view) if v.shown != Some(&view) => plan.pushes.push(Push {
                member: v.member.to_string(),
                incarnation: v.incarnation,
                index,
                view,
            }),
            _ => plan.unchanged.push((v.member.to_string(), v.incarnation)),
        }
    }
    (plan, examined)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::{
        Acknowledge, Beat, Command, Delete, Expire, Heartbeat, Join, Launch, Tick,
    };
    use crate::journal::KEEP;
    use crate::outcome::Outcome;

    /// A pool with members a (incarnation 1) and b (incarnation 1), and the
    /// log index of its last entry, each command recorded in `log`.
    struct Pool {
        state: PoolState,
        index: u64,
        log: ChangeLog,
        /// Commands go through [`ChangeLog::apply`] (owners journaled), as
        /// the gateway applies them, instead of `apply` + `record`.
        owned: bool,
    }

    impl Pool {
        fn new() -> Pool {
            Pool::with_owners(false)
        }

        fn with_owners(owned: bool) -> Pool {
            let mut pool = Pool {
                state: PoolState::new(),
                index: 0,
                log: ChangeLog::new(),
                owned,
            };
            pool.join("a", 1);
            pool.join("b", 1);
            pool
        }

        fn apply(&mut self, command: Command) -> Outcome {
            self.index += 1;
            self.apply_in_last_entry(command)
        }

        /// Applies `command` in the entry applied last (at its index), as
        /// one more command of a batch.
        fn apply_in_last_entry(&mut self, command: Command) -> Outcome {
            if self.owned {
                return self.log.apply(&mut self.state, self.index, &command);
            }
            let outcome = self.state.apply(self.index, &command);
            self.log.record(self.index, &command, &outcome);
            outcome
        }

        /// The journal since `index`, as the pool records it.
        fn changes_since(&self, index: u64) -> Changes {
            if self.owned {
                self.log.since_by_owner(index)
            } else {
                self.log.since(index)
            }
        }

        fn join(&mut self, member: &str, incarnation: u64) {
            let outcome = self.apply(Command::Join(Join {
                member: member.into(),
                uid: format!("{member}-uid"),
                incarnation,
                address: format!("{member}:1"),
                capacity: 8,
                ..Join::default()
            }));
            assert!(!outcome.is_rejected(), "{outcome:?}");
        }

        fn launch(&mut self, sandbox: &str) -> (String, u64) {
            match self.apply(Command::Launch(Launch {
                launch_id: sandbox.into(),
                sandbox: sandbox.into(),
                material_ref: format!("obj/{sandbox}"),
            })) {
                Outcome::Applied(crate::Effect::Admitted { assignment, .. }) => {
                    (assignment.member, assignment.incarnation)
                }
                other => panic!("launch of {sandbox}: {other:?}"),
            }
        }

        /// Plans for `viewers` from the full state (no journal).
        fn plan_full(&self, viewers: &[Viewer<'_>]) -> Plan {
            plan_pushes(&self.state, self.index, viewers, &Changes::Unknown)
        }
    }

    /// A view sent at an applied index.
    struct Shown {
        view: IncarnationView,
        index: u64,
    }

    fn viewer<'a>(member: &'a str, incarnation: u64, shown: Option<&'a Shown>) -> Viewer<'a> {
        Viewer {
            member,
            incarnation,
            shown: shown.map(|s| &s.view),
            shown_at: shown.map(|s| s.index).unwrap_or(0),
            sent_index: shown.map(|s| s.index).unwrap_or(0),
        }
    }

    fn shown(plan: &Plan, member: &str) -> Shown {
        let push = plan
            .pushes
            .iter()
            .find(|p| p.member == member)
            .unwrap_or_else(|| panic!("no push for {member}: {plan:?}"));
        Shown {
            view: push.view.clone(),
            index: plan.index,
        }
    }

    /// Given a deleted sandbox in its owner's released list, when a tick's
    /// garbage collection removes the record, then the owner's next view
    /// (planned from the journal, and in full) no longer lists it.
    #[test]
    fn released_views_shrink_when_garbage_collection_removes_deleted_sandboxes() {
        let mut pool = Pool::new();
        let configured = pool.apply(Command::Configure(crate::command::Configure {
            raft_term: 0,
            heartbeat_ttl_ticks: 100,
            recovery_deadline_ticks: 100,
            operation_deadline_ticks: 100,
            retention_ticks: 3,
        }));
        assert!(!configured.is_rejected(), "{configured:?}");
        let (member, incarnation) = pool.launch("s1");
        let (_, _) = pool.launch("s2");
        pool.apply(Command::Delete(Delete {
            raft_term: 0,
            sandbox: "s1".into(),
            generation: 1,
        }));
        let before = shown(
            &pool.plan_full(&[viewer(&member, incarnation, None)]),
            &member,
        );
        assert!(before.view.released.contains_key("s1"), "{:?}", before.view);
        for _ in 0..3 {
            let now = pool.state.now_tick();
            pool.apply(Command::Tick(Tick {
                raft_term: 0,
                expected_now_tick: now,
            }));
        }
        assert!(pool.state.sandbox("s1").is_none(), "collected");
        let changes = pool.log.since(before.index);
        assert!(
            matches!(&changes, Changes::Since { sandboxes, .. } if sandboxes.contains("s1")),
            "{changes:?}"
        );
        let plan = plan_pushes(
            &pool.state,
            pool.index,
            &[viewer(&member, incarnation, Some(&before))],
            &changes,
        );
        let after = shown(&plan, &member);
        assert!(after.view.released.is_empty(), "{:?}", after.view);
        let full = shown(
            &pool.plan_full(&[viewer(&member, incarnation, None)]),
            &member,
        );
        assert_eq!(full.view, after.view);
    }

    #[test]
    fn each_incarnation_sees_only_the_sandboxes_it_owns() {
        let mut pool = Pool::new();
        let owners: Vec<(String, (String, u64))> = ["s1", "s2", "s3", "s4"]
            .iter()
            .map(|s| (s.to_string(), pool.launch(s)))
            .collect();
        let plan = pool.plan_full(&[viewer("a", 1, None), viewer("b", 1, None)]);
        assert!(plan.retired.is_empty() && plan.unchanged.is_empty());
        assert_eq!(plan.pushes.len(), 2);
        for push in &plan.pushes {
            let mine: Vec<&String> = owners
                .iter()
                .filter(|(_, (m, i))| *m == push.member && *i == push.incarnation)
                .map(|(s, _)| s)
                .collect();
            let seen: Vec<&String> = push.view.assignments.keys().collect();
            assert_eq!(seen, mine, "{}", push.member);
            assert!(push.view.released.is_empty());
            assert!(!push.view.draining);
            assert_eq!(push.index, pool.index);
            let (live, released) = push.grants();
            assert!(released.is_empty());
            assert!(live
                .iter()
                .all(|g| g.member == push.member && g.incarnation == 1 && !g.release));
        }
        // An incarnation that owns nothing (a newer one attached early)
        // is shown an empty view, never the old incarnation's sandboxes.
        pool.join("a", 2);
        let plan = pool.plan_full(&[viewer("a", 2, None)]);
        assert_eq!(plan.pushes.len(), 1);
        assert!(plan.pushes[0].view.assignments.is_empty());
    }

    #[test]
    fn a_retired_incarnation_sees_nothing() {
        let mut pool = Pool::new();
        pool.launch("s1");
        pool.launch("s2");
        // a is superseded by incarnation 2; b expires.
        pool.join("a", 2);
        for _ in 0..20 {
            let now = pool.state.now_tick();
            pool.apply(Command::Tick(Tick {
                raft_term: 0,
                expected_now_tick: now,
            }));
        }
        let last = pool.state.member("b").map(|m| m.last_heartbeat_tick);
        let outcome = pool.apply(Command::Expire(Expire {
            raft_term: 0,
            member: "b".into(),
            incarnation: 1,
            last_heartbeat_tick: last.unwrap_or(0),
        }));
        assert!(!outcome.is_rejected(), "{outcome:?}");
        let plan = pool.plan_full(&[viewer("a", 1, None), viewer("b", 1, None)]);
        assert!(plan.pushes.is_empty(), "{plan:?}");
        assert_eq!(
            plan.retired,
            vec![
                Retired {
                    member: "a".into(),
                    incarnation: 1,
                    why: Retirement::Superseded
                },
                Retired {
                    member: "b".into(),
                    incarnation: 1,
                    why: Retirement::Retired
                },
            ]
        );
    }

    #[test]
    fn an_unchanged_view_yields_no_push() {
        let mut pool = Pool::new();
        pool.launch("s1");
        let first = pool.plan_full(&[viewer("a", 1, None), viewer("b", 1, None)]);
        let (a, b) = (shown(&first, "a"), shown(&first, "b"));
        // Heartbeats and ticks change no view.
        pool.apply(Command::Heartbeat(Heartbeat {
            beats: vec![Beat {
                member: "a".into(),
                incarnation: 1,
            }],
        }));
        pool.apply(Command::Tick(Tick {
            raft_term: 0,
            expected_now_tick: pool.state.now_tick(),
        }));
        let viewers = [viewer("a", 1, Some(&a)), viewer("b", 1, Some(&b))];
        for changes in [Changes::Unknown, pool.log.since(first.index)] {
            let plan = plan_pushes(&pool.state, pool.index, &viewers, &changes);
            assert!(plan.pushes.is_empty(), "{changes:?}: {plan:?}");
            assert_eq!(plan.unchanged.len(), 2);
        }
        assert_eq!(
            pool.log.since(first.index),
            Changes::Since {
                index: first.index,
                sandboxes: BTreeSet::new()
            }
        );
        // So a gateway may skip the pass.
        assert!(pool.log.plans_unchanged_since(first.index));
    }

    #[test]
    fn a_launch_a_join_or_an_expiry_means_a_pass_after_them() {
        assert!(
            !ChangeLog::new().plans_unchanged_since(0),
            "a journal that recorded nothing knows nothing"
        );
        let mut pool = Pool::new();
        let at = pool.index;
        assert!(pool.log.plans_unchanged_since(at));
        pool.launch("s1");
        assert!(!pool.log.plans_unchanged_since(at));
        let at = pool.index;
        pool.join("c", 1);
        assert!(!pool.log.plans_unchanged_since(at));
        let at = pool.index;
        let last = pool.state.member("b").map_or(0, |m| m.last_heartbeat_tick);
        for _ in 0..20 {
            let now = pool.state.now_tick();
            pool.apply(Command::Tick(Tick {
                raft_term: 0,
                expected_now_tick: now,
            }));
        }
        assert!(
            pool.log.plans_unchanged_since(at),
            "ticks that remove nothing"
        );
        pool.apply(Command::Expire(Expire {
            raft_term: 0,
            member: "b".into(),
            incarnation: 1,
            last_heartbeat_tick: last,
        }));
        assert!(!pool.log.plans_unchanged_since(at));
    }

    #[test]
    fn a_view_older_than_the_last_sent_is_not_pushed() {
        let mut pool = Pool::new();
        pool.launch("s1");
        let stale = Viewer {
            sent_index: pool.index + 1,
            ..viewer("a", 1, None)
        };
        assert!(pool.plan_full(&[stale]).pushes.is_empty());
    }

    #[test]
    fn a_push_is_deliverable_only_to_its_incarnation_once() {
        let mut pool = Pool::new();
        pool.launch("s1");
        let plan = pool.plan_full(&[viewer("a", 1, None)]);
        let push = &plan.pushes[0];
        assert!(push.deliverable_to(&viewer("a", 1, None)));
        assert!(!push.deliverable_to(&viewer("a", 2, None)));
        assert!(!push.deliverable_to(&viewer("b", 1, None)));
        let sent = shown(&plan, "a");
        assert!(!push.deliverable_to(&viewer("a", 1, Some(&sent))));
        let newer = Viewer {
            sent_index: plan.index + 1,
            ..viewer("a", 1, None)
        };
        assert!(!push.deliverable_to(&newer));
    }

    /// Following the journal gives exactly the views of a full scan.
    #[test]
    fn following_the_journal_matches_a_full_scan() {
        let mut pool = Pool::new();
        let (member, _) = pool.launch("s1");
        pool.launch("s2");
        pool.launch("s3");
        let viewers = [viewer("a", 1, None), viewer("b", 1, None)];
        let first = pool.plan_full(&viewers);
        let mut shown_a = shown(&first, "a");
        let mut shown_b = shown(&first, "b");
        let outcome = pool.apply(Command::Acknowledge(Acknowledge {
            sandbox: "s1".into(),
            generation: 1,
            member: member.clone(),
            incarnation: 1,
            term: 1,
        }));
        assert!(!outcome.is_rejected(), "{outcome:?}");
        pool.apply(Command::Delete(Delete {
            raft_term: 0,
            sandbox: "s2".into(),
            generation: 1,
        }));
        pool.launch("s4");
        let changes = pool.log.since(first.index);
        let Changes::Since { sandboxes, .. } = &changes else {
            panic!("journal lost: {changes:?}");
        };
        assert_eq!(
            sandboxes.iter().map(String::as_str).collect::<Vec<_>>(),
            ["s1", "s2", "s4"]
        );
        let viewers = [
            viewer("a", 1, Some(&shown_a)),
            viewer("b", 1, Some(&shown_b)),
        ];
        let followed = plan_pushes(&pool.state, pool.index, &viewers, &changes);
        let full = plan_pushes(&pool.state, pool.index, &viewers, &Changes::Unknown);
        assert_eq!(followed, full);
        for push in &followed.pushes {
            let s = Shown {
                view: push.view.clone(),
                index: followed.index,
            };
            if push.member == "a" {
                shown_a = s;
            } else {
                shown_b = s;
            }
        }
        let released: Vec<&String> = shown_a
            .view
            .released
            .keys()
            .chain(shown_b.view.released.keys())
            .collect();
        assert_eq!(released, ["s2"]);
    }

    #[test]
    fn the_journal_knows_only_what_it_recorded() {
        let mut log = ChangeLog::new();
        assert_eq!(log.since(0), Changes::Unknown);
        let launch = Command::Launch(Launch {
            launch_id: "l".into(),
            sandbox: "s".into(),
            material_ref: String::new(),
        });
        let applied = Outcome::Applied(crate::Effect::Stopping);
        log.record(10, &launch, &applied);
        assert_eq!(log.since(8), Changes::Unknown);
        assert_eq!(
            log.since(9),
            Changes::Since {
                index: 9,
                sandboxes: BTreeSet::from(["s".to_string()])
            }
        );
        let rejected = Outcome::Rejected(crate::Reason::Deleted);
        log.record(11, &launch, &rejected);
        assert_eq!(
            log.since(10),
            Changes::Since {
                index: 10,
                sandboxes: BTreeSet::new()
            }
        );
        let drain = Command::StartDrain(crate::StartDrain {
            operation_id: "op".into(),
            member: "a".into(),
            max_parallel: 1,
        });
        log.record(12, &drain, &applied);
        assert_eq!(log.since(10), Changes::Unknown);
        assert!(matches!(log.since(12), Changes::Since { .. }));
        for i in 0..(KEEP as u64 + 1) {
            log.record(13 + i, &launch, &applied);
        }
        assert_eq!(log.since(12), Changes::Unknown);
        assert!(matches!(log.since(14), Changes::Since { .. }));
    }

    /// A tiny deterministic generator (no rand in pool).
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self, n: u64) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (self.0 >> 33) % n
        }
    }

    /// A random command over three members and six sandboxes (many are
    /// rejected; those must change nothing either).
    fn random_command(rng: &mut Lcg, state: &PoolState) -> Command {
        let member = ["a", "b", "c"][rng.next(3) as usize].to_string();
        let sandbox = format!("s{}", rng.next(6));
        let incarnation = state.member(&member).map(|m| m.incarnation).unwrap_or(1);
        let s = state.sandbox(&sandbox);
        let generation = s.map(|s| s.generation).unwrap_or(1);
        match rng.next(10) {
            0 => Command::Join(Join {
                member: member.clone(),
                uid: "u".into(),
                incarnation: incarnation + rng.next(2),
                address: "x:1".into(),
                capacity: 8,
                // 0: a legacy join; else a process of the log-ordered rule.
                process_id: rng.next(3),
                known_incarnation: incarnation * rng.next(2),
            }),
            1 => Command::Launch(Launch {
                launch_id: format!("{sandbox}-{}", rng.next(1000)),
                sandbox,
                material_ref: "obj".into(),
            }),
            2 => Command::Acknowledge(Acknowledge {
                sandbox,
                generation,
                member: s.map(|s| s.owner.member.clone()).unwrap_or(member),
                incarnation: s.map(|s| s.owner.incarnation).unwrap_or(1),
                term: s.map(|s| s.owner.term).unwrap_or(1),
            }),
            3 => Command::Expire(Expire {
                raft_term: 0,
                member: member.clone(),
                incarnation,
                last_heartbeat_tick: state
                    .member(&member)
                    .map(|m| m.last_heartbeat_tick)
                    .unwrap_or(0),
            }),
            4 => Command::Takeover(crate::Takeover {
                raft_term: 0,
                sandbox,
                generation,
                expected_owner: s.map(|s| s.owner.member.clone()).unwrap_or(member),
                expected_incarnation: s.map(|s| s.owner.incarnation).unwrap_or(1),
                expected_term: s.map(|s| s.owner.term).unwrap_or(1),
            }),
            5 => Command::Delete(Delete {
                raft_term: 0,
                sandbox,
                generation,
            }),
            6 => Command::Stop(crate::Stop {
                sandbox,
                generation,
            }),
            7 => Command::StartDrain(crate::StartDrain {
                operation_id: format!("op{}", rng.next(1000)),
                member,
                max_parallel: 1,
            }),
            8 => Command::CancelOperation(crate::CancelOperation {
                operation_id: state
                    .operations()
                    .keys()
                    .next()
                    .cloned()
                    .unwrap_or_default(),
            }),
            _ => Command::Tick(Tick {
                raft_term: 0,
                expected_now_tick: state.now_tick(),
            }),
        }
    }

    /// Following the journal from what each stream was shown gives exactly
    /// the plans of a full scan, after every step of random histories, for
    /// streams of current and superseded incarnations (the dumb model:
    /// `Changes::Unknown`).
    #[test]
    fn following_the_journal_matches_a_full_scan_on_random_histories() {
        check_random_histories(1, false);
    }

    /// The same following the journal by owner (`since_by_owner`, the
    /// gateway's way): only the viewers a change concerns are re-read.
    #[test]
    fn following_the_journal_by_owner_matches_a_full_scan_on_random_histories() {
        check_random_histories(1, true);
        check_random_histories(4, true);
    }

    /// Given 10,000 sandboxes over 100 viewers each shown its view, when one
    /// entry launches one more sandbox, then a plan by owner reads a
    /// handful of sandbox records (O(changed)), where a plan by touched
    /// sandbox reads one per viewer and a full scan reads all of them; all
    /// three plan the same pushes.
    #[test]
    fn a_plan_by_owner_examines_what_changed_not_every_sandbox_or_viewer() {
        let mut pool = Pool::with_owners(true);
        let members: Vec<String> = (0..100).map(|i| format!("m{i:03}")).collect();
        for m in &members {
            let outcome = pool.apply(Command::Join(Join {
                member: m.clone(),
                uid: format!("{m}-uid"),
                incarnation: 1,
                address: format!("{m}:1"),
                capacity: 200,
                ..Join::default()
            }));
            assert!(!outcome.is_rejected(), "{outcome:?}");
        }
        for i in 0..10_000 {
            pool.launch(&format!("s{i:05}"));
        }
        assert_eq!(pool.state.sandbox_table().check_index(), Ok(()));
        let owned_by_viewers: u64 = members
            .iter()
            .map(|m| pool.state.sandbox_table().records_of(m, 1).count() as u64)
            .sum();
        let who: Vec<(String, u64)> = members.iter().map(|m| (m.clone(), 1)).collect();
        let viewers: Vec<Viewer<'_>> = who.iter().map(|(m, i)| viewer(m, *i, None)).collect();
        let (first, examined) =
            plan_pushes_counted(&pool.state, pool.index, &viewers, &Changes::Unknown);
        assert!(owned_by_viewers > 9_000, "{owned_by_viewers}");
        assert_eq!(
            examined, owned_by_viewers,
            "the new viewers read what they own, once"
        );
        let shown: Vec<Shown> = members.iter().map(|m| shown(&first, m)).collect();
        pool.launch("s-new");
        let viewers: Vec<Viewer<'_>> = members
            .iter()
            .zip(&shown)
            .map(|(m, s)| viewer(m, 1, Some(s)))
            .collect();
        let count =
            |changes: &Changes| plan_pushes_counted(&pool.state, pool.index, &viewers, changes);
        let (by_owner, examined_by_owner) = count(&pool.log.since_by_owner(first.index));
        let (by_sandbox, examined_by_sandbox) = count(&pool.log.since(first.index));
        let (full, examined_full) = count(&Changes::Unknown);
        assert_eq!(by_owner, full);
        assert_eq!(by_sandbox, full);
        assert_eq!(by_owner.pushes.len(), 1, "{by_owner:?}");
        assert!(examined_by_owner <= 4, "by owner: {examined_by_owner}");
        assert!(
            examined_by_sandbox >= 100,
            "by sandbox: {examined_by_sandbox}"
        );
        assert_eq!(
            examined_full,
            owned_by_viewers + 1,
            "a plan without a journal reads what every viewer owns"
        );
        let one = [viewer(&members[0], 1, None)];
        let (_, examined_one) =
            plan_pushes_counted(&pool.state, pool.index, &one, &Changes::Unknown);
        let owned = pool
            .state
            .sandbox_table()
            .records_of(&members[0], 1)
            .count() as u64;
        assert!(owned > 0 && owned < 1_000, "{owned}");
        assert_eq!(
            examined_one, owned,
            "one newly attached viewer reads only the records it owns"
        );
    }

    /// The same with several commands per log entry, as the leader's write
    /// batcher makes them (every command of an entry applies at the entry's
    /// index): t31 saw a sandbox launched in the same entry as another
    /// sandbox's acknowledgement never reach its owner's stream.
    #[test]
    fn following_the_journal_matches_a_full_scan_with_batched_entries() {
        check_random_histories(4, false);
    }

    /// Two sandboxes touched by commands of one log entry are both known
    /// to have changed since the entry before it.
    #[test]
    fn every_command_of_one_entry_is_journaled() {
        let mut log = ChangeLog::new();
        let applied = Outcome::Applied(crate::Effect::Stopping);
        let launch = |sandbox: &str| {
            Command::Launch(Launch {
                launch_id: sandbox.into(),
                sandbox: sandbox.into(),
                material_ref: String::new(),
            })
        };
        log.record(10, &launch("q3"), &applied);
        log.record(10, &launch("q2"), &applied);
        assert_eq!(
            log.since(9),
            Changes::Since {
                index: 9,
                sandboxes: BTreeSet::from(["q2".to_string(), "q3".to_string()])
            }
        );
        let drain = Command::StartDrain(crate::StartDrain {
            operation_id: "op".into(),
            member: "a".into(),
            max_parallel: 1,
        });
        log.record(11, &drain, &applied);
        log.record(11, &launch("q4"), &applied);
        assert_eq!(log.since(10), Changes::Unknown);
    }

    /// Random histories of `max_batch` commands at most per log entry,
    /// planned every few entries, incremental against full.
    fn check_random_histories(max_batch: u64, owned: bool) {
        for seed in 0..40 {
            let mut rng = Lcg(seed);
            let mut pool = Pool::with_owners(owned);
            pool.join("c", 1);
            let mut shown: BTreeMap<(String, u64), Shown> = BTreeMap::new();
            let mut last_plan: Option<Plan> = None;
            for step in 0..150 {
                let command = random_command(&mut rng, &pool.state);
                pool.apply(command);
                if max_batch > 1 {
                    for _ in 0..rng.next(max_batch) {
                        let command = random_command(&mut rng, &pool.state);
                        pool.apply_in_last_entry(command);
                    }
                }
                if rng.next(3) != 0 {
                    continue;
                }
                let mut who: Vec<(String, u64)> = pool
                    .state
                    .members()
                    .values()
                    .flat_map(|m| {
                        [
                            (m.id.clone(), m.incarnation),
                            (m.id.clone(), m.incarnation.saturating_sub(1).max(1)),
                        ]
                    })
                    .collect();
                who.dedup();
                let viewers: Vec<Viewer<'_>> = who
                    .iter()
                    .map(|(m, i)| viewer(m, *i, shown.get(&(m.clone(), *i))))
                    .collect();
                let since = viewers
                    .iter()
                    .filter(|v| v.shown.is_some())
                    .map(|v| v.shown_at)
                    .min();
                let changes = since
                    .map(|i| pool.changes_since(i))
                    .unwrap_or(Changes::Unknown);
                let followed = plan_pushes(&pool.state, pool.index, &viewers, &changes);
                let full = plan_pushes(&pool.state, pool.index, &viewers, &Changes::Unknown);
                assert_eq!(
                    followed, full,
                    "seed {seed} step {step} changes {changes:?}"
                );
                // A pass the journal says it may skip would push nothing
                // and retire exactly what the last one did.
                if let Some(last) = &last_plan {
                    if pool.log.plans_unchanged_since(last.index) {
                        assert!(
                            followed.pushes.is_empty() && followed.retired == last.retired,
                            "seed {seed} step {step}: skippable after {} but {followed:?}",
                            last.index
                        );
                    }
                }
                last_plan = Some(followed.clone());
                for push in followed.pushes {
                    shown.insert(
                        (push.member, push.incarnation),
                        Shown {
                            view: push.view,
                            index: followed.index,
                        },
                    );
                }
                for key in followed.unchanged {
                    if let Some(s) = shown.get_mut(&key) {
                        s.index = followed.index;
                    }
                }
            }
        }
    }
}
