//! The journal of what applied pool commands changed ([`ChangeLog`]), so a
//! push plan (`crate::visibility`) can cost what changed instead of a scan
//! of every sandbox, and a gateway can tell when no plan can have changed
//! at all ([`ChangeLog::plans_unchanged_since`]).
//!
//! Pure like the rest of the crate: no clock, no I/O, `BTreeMap`/`BTreeSet`
//! only. Not part of the state or its snapshot.

use std::collections::{BTreeMap, BTreeSet};

use crate::command::Command;
use crate::outcome::{Effect, Outcome};
use crate::state::PoolState;

/// What changed in the sandboxes since an applied index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Changes {
    /// Not known (no journal yet, or it does not reach back that far):
    /// every view is computed in full.
    Unknown,
    /// Every sandbox touched by the entries applied after `index`.
    Since {
        /// The applied index the set starts after.
        index: u64,
        /// Sandbox ids (a superset is fine: an untouched sandbox re-read
        /// gives the same view).
        sandboxes: BTreeSet<String>,
    },
    /// Every sandbox touched by the entries applied after `index`, filed
    /// under each member incarnation that owned it just before or just
    /// after a command touched it ([`ChangeLog::since_by_owner`]): a viewer
    /// not listed here owns and was shown nothing that changed, so a plan
    /// re-reads only the listed viewers' sandboxes (cost: what changed, not
    /// all sandboxes times all viewers).
    ByOwner {
        /// The applied index the sets start after.
        index: u64,
        /// (member, incarnation) -> sandbox ids it owned before or after a
        /// command touched them.
        owners: BTreeMap<(String, u64), BTreeSet<String>>,
    },
}

impl Changes {
    /// The applied index the changes start after (None: unknown).
    pub(crate) fn index(&self) -> Option<u64> {
        match self {
            Changes::Unknown => None,
            Changes::Since { index, .. } | Changes::ByOwner { index, .. } => Some(*index),
        }
    }
}

/// Which sandboxes an applied command may have changed, as far as views go.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Touch {
    /// No sandbox (time without garbage collected, heartbeats, member
    /// records, reports, config).
    Nothing,
    /// This one sandbox.
    Sandbox(String),
    /// These sandboxes (the records a tick's garbage collection removed:
    /// a released view shrinks when they go).
    Sandboxes(Vec<String>),
    /// Any sandbox (operations start, end and move members in and out of
    /// service).
    Unknown,
    /// This one sandbox, with every (member, incarnation) that owned it
    /// just before or just after the command ([`ChangeLog::apply`]).
    Owned {
        /// Sandbox id.
        sandbox: String,
        /// Its owners before and after (one when the owner did not change,
        /// none when there was no record either side).
        owners: Vec<(String, u64)>,
    },
}

/// The (member, incarnation) that owns `sandbox` now, if it has a record.
fn owner_of(state: &PoolState, sandbox: &str) -> Option<(String, u64)> {
    state
        .sandbox(sandbox)
        .map(|s| (s.owner.member.clone(), s.owner.incarnation))
}

/// The sandbox `command` names, for the commands that touch exactly the
/// sandbox they name.
fn named_sandbox(command: &Command) -> Option<&str> {
    match command {
        Command::Launch(c) => Some(&c.sandbox),
        Command::Takeover(c) => Some(&c.sandbox),
        Command::Acknowledge(c) => Some(&c.sandbox),
        Command::Stop(c) => Some(&c.sandbox),
        Command::Delete(c) => Some(&c.sandbox),
        Command::FailRecovery(c) => Some(&c.sandbox),
        Command::Move(c) => Some(&c.sandbox),
        Command::RecordRuntime(c) => Some(&c.sandbox),
        Command::FailLaunch(c) => Some(&c.sandbox),
        _ => None,
    }
}

/// What `command` (with `outcome`) may have changed in the sandboxes'
/// views. Member-level facts (draining, retirement) are re-read for every
/// viewer on every plan, so member commands touch nothing here. One arm per
/// command, no wildcard: a new command must say what it touches.
fn touched_by(command: &Command, outcome: &Outcome) -> Touch {
    if outcome.is_rejected() {
        // A rejected command changes nothing.
        return Touch::Nothing;
    }
    match command {
        Command::Tick(_) => match outcome {
            Outcome::Applied(Effect::Ticked { collected, .. })
                if !collected.sandboxes.is_empty() =>
            {
                Touch::Sandboxes(collected.sandboxes.clone())
            }
            _ => Touch::Nothing,
        },
        Command::Configure(_)
        | Command::LeaderChanged(_)
        | Command::Join(_)
        | Command::Heartbeat(_)
        | Command::Leave(_)
        | Command::Expire(_)
        | Command::Report(_) => Touch::Nothing,
        Command::Launch(c) => Touch::Sandbox(c.sandbox.clone()),
        Command::Takeover(c) => Touch::Sandbox(c.sandbox.clone()),
        Command::Acknowledge(c) => Touch::Sandbox(c.sandbox.clone()),
        Command::Stop(c) => Touch::Sandbox(c.sandbox.clone()),
        Command::Delete(c) => Touch::Sandbox(c.sandbox.clone()),
        Command::FailRecovery(c) => Touch::Sandbox(c.sandbox.clone()),
        Command::Move(c) => Touch::Sandbox(c.sandbox.clone()),
        Command::RecordRuntime(c) => Touch::Sandbox(c.sandbox.clone()),
        Command::FailLaunch(c) => Touch::Sandbox(c.sandbox.clone()),
        Command::StartDrain(_)
        | Command::StartRebalance(_)
        | Command::CompleteOperation(_)
        | Command::FailOperation(_)
        | Command::CancelOperation(_) => Touch::Unknown,
    }
}

/// Whether `command` (with `outcome`) leaves every push plan as it was:
/// a rejected command, a heartbeat batch (it moves no member's state or
/// incarnation), a report (not part of a view), a tick that removed no
/// record. Everything else may change a view or retire an incarnation
/// (member commands change what `visibility::retirement` and draining read). One arm
/// per command, no wildcard.
fn changes_no_plan(command: &Command, outcome: &Outcome) -> bool {
    if outcome.is_rejected() {
        return true;
    }
    match command {
        Command::Heartbeat(_) | Command::Report(_) => true,
        Command::Tick(_) => match outcome {
            Outcome::Applied(Effect::Ticked { collected, .. }) => collected.is_empty(),
            _ => false,
        },
        Command::Configure(_)
        | Command::LeaderChanged(_)
        | Command::Join(_)
        | Command::Leave(_)
        | Command::Expire(_)
        | Command::Launch(_)
        | Command::Takeover(_)
        | Command::Acknowledge(_)
        | Command::Stop(_)
        | Command::Delete(_)
        | Command::FailRecovery(_)
        | Command::Move(_)
        | Command::RecordRuntime(_)
        | Command::FailLaunch(_)
        | Command::StartDrain(_)
        | Command::StartRebalance(_)
        | Command::CompleteOperation(_)
        | Command::FailOperation(_)
        | Command::CancelOperation(_) => false,
    }
}

/// How many touching entries the journal keeps; older ones are forgotten
/// (a viewer last shown before them is computed in full).
pub(crate) const KEEP: usize = 4096;

/// The journal of applied commands that touched sandboxes, by log index.
/// Deterministic (the same entries give the same journal) but not part of
/// the state or its snapshot: after a restore it starts empty and knows
/// changes only from the first entry it records.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChangeLog {
    /// What the touching commands of each log index touched, in apply order
    /// (one entry can carry several commands; entries that touched nothing
    /// are not kept).
    entries: BTreeMap<u64, Vec<Touch>>,
    /// Every touching entry after this index is in `entries` (None: no
    /// entry recorded yet).
    complete_after: Option<u64>,
    /// The last index with a command that may change a push plan (a view,
    /// or whether an incarnation still counts): see [`changes_no_plan`].
    last_plan_change: Option<u64>,
}

impl ChangeLog {
    /// An empty journal that knows nothing yet.
    pub fn new() -> ChangeLog {
        ChangeLog::default()
    }

    /// Records the command applied at `index` with its outcome. Indexes
    /// never decrease; every command of one log entry (a batch) applies at
    /// the entry's index, so the touches of one index add up (a later
    /// command never hides an earlier one's). Entries that are not pool
    /// commands need no record (they change no sandbox).
    pub fn record(&mut self, index: u64, command: &Command, outcome: &Outcome) {
        self.note_plan_change(index, command, outcome);
        self.keep(index, touched_by(command, outcome));
    }

    fn note_plan_change(&mut self, index: u64, command: &Command, outcome: &Outcome) {
        if !changes_no_plan(command, outcome) {
            self.last_plan_change = Some(index);
        }
    }

    /// Whether no command applied after `index` can change a push plan made
    /// at `index`: a pass would push nothing and retire no stream (its only
    /// effect would be to note the unchanged views as current). False when
    /// the journal does not reach back to `index` (after a restore).
    pub fn plans_unchanged_since(&self, index: u64) -> bool {
        self.touches_after(index).is_some()
            && self.last_plan_change.is_none_or(|last| last <= index)
    }

    /// The touches of the entries applied after `index`, in order; None
    /// when the journal does not reach back to `index`.
    fn touches_after(&self, index: u64) -> Option<impl Iterator<Item = &Touch>> {
        match self.complete_after {
            Some(start) if index >= start => Some(
                self.entries
                    .range(index.saturating_add(1)..)
                    .flat_map(|(_, t)| t),
            ),
            _ => None,
        }
    }

    /// Files `touch` under `index` and forgets the oldest entries beyond
    /// [`KEEP`].
    fn keep(&mut self, index: u64, touch: Touch) {
        if self.complete_after.is_none() {
            self.complete_after = Some(index.saturating_sub(1));
        }
        match touch {
            Touch::Nothing => {}
            touch => self.entries.entry(index).or_default().push(touch),
        }
        while self.entries.len() > KEEP {
            if let Some((forgotten, _)) = self.entries.pop_first() {
                self.complete_after = Some(forgotten);
            }
        }
    }

    /// Applies `command` at `index` to `state` and records it, with the
    /// owner incarnations its sandbox had just before and just after (so
    /// [`ChangeLog::since_by_owner`] can name the viewers a change
    /// concerns). Returns the outcome: exactly `state.apply(index, command)`.
    pub fn apply(&mut self, state: &mut PoolState, index: u64, command: &Command) -> Outcome {
        let before = named_sandbox(command).and_then(|id| owner_of(state, id));
        let outcome = state.apply(index, command);
        self.note_plan_change(index, command, &outcome);
        let touch = match touched_by(command, &outcome) {
            Touch::Sandbox(sandbox) => {
                let mut owners: Vec<(String, u64)> = before.into_iter().collect();
                if let Some(after) = owner_of(state, &sandbox) {
                    if !owners.contains(&after) {
                        owners.push(after);
                    }
                }
                Touch::Owned { sandbox, owners }
            }
            other => other,
        };
        self.keep(index, touch);
        outcome
    }

    /// The first applied index the journal may not know: changes are known
    /// only after it (None: nothing recorded yet).
    pub fn known_after(&self) -> Option<u64> {
        self.complete_after
    }

    /// [`ChangeLog::since`] with every touched sandbox filed under the
    /// owner incarnations it had before and after each command
    /// ([`Changes::ByOwner`]); the plain [`Changes::Since`] when an entry
    /// since was recorded without its owners (a garbage-collecting tick,
    /// or [`ChangeLog::record`]), [`Changes::Unknown`] as `since` says.
    pub fn since_by_owner(&self, index: u64) -> Changes {
        let Some(touches) = self.touches_after(index) else {
            return Changes::Unknown;
        };
        let mut owners: BTreeMap<(String, u64), BTreeSet<String>> = BTreeMap::new();
        for touch in touches {
            match touch {
                Touch::Nothing => {}
                Touch::Owned { sandbox, owners: o } => {
                    for key in o {
                        owners
                            .entry(key.clone())
                            .or_default()
                            .insert(sandbox.clone());
                    }
                }
                Touch::Sandbox(_) | Touch::Sandboxes(_) | Touch::Unknown => {
                    return self.since(index)
                }
            }
        }
        Changes::ByOwner { index, owners }
    }

    /// The sandboxes touched after `index`, or [`Changes::Unknown`] when the
    /// journal does not reach back to `index` or an entry since touched
    /// sandboxes it cannot name.
    pub fn since(&self, index: u64) -> Changes {
        let Some(touches) = self.touches_after(index) else {
            return Changes::Unknown;
        };
        let mut sandboxes = BTreeSet::new();
        for touch in touches {
            match touch {
                Touch::Nothing => {}
                Touch::Sandbox(id) | Touch::Owned { sandbox: id, .. } => {
                    sandboxes.insert(id.clone());
                }
                Touch::Sandboxes(ids) => sandboxes.extend(ids.iter().cloned()),
                Touch::Unknown => return Changes::Unknown,
            }
        }
        Changes::Since { index, sandboxes }
    }
}
