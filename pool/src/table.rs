//! The sandbox and launch tables with the indexes that keep the leader's
//! passes proportional to what changed (issue 30), never serialized: a
//! snapshot decodes the records and the indexes are rebuilt as they are
//! inserted, like the hash ring.
//!
//! Reads go through `Deref` to the `BTreeMap` by id (id order is the order
//! every replica iterates). Writes go through [`SandboxTable::insert`],
//! [`SandboxTable::remove`] and [`SandboxTable::get_mut`], whose guard
//! refiles the record when it is dropped, so no applier can change a
//! sandbox without its index entries following.
//!
//! | index | holds | serves |
//! | --- | --- | --- |
//! | owned | live (charged) sandboxes by owner `(member, incarnation)` | takeovers, orphan failures and deletes of dead owners; drains |
//! | recovering | sandboxes with a recovery in progress | recovery deadlines; moves in flight |
//! | ended | `(ended tick, id)` of deleted and failed records | retention |
//! | by owner | every record (live or ended) by owner `(member, incarnation)` | a newly attached stream's full view; retention of departed members |
//!
//! [`SandboxTable::check_index`] rebuilds every index from the records and
//! compares (the invariant check runs it on every decoded snapshot, and the
//! tests and the simulation after every command).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Deref, DerefMut};

use crate::records::{LaunchOutcome, Phase, Sandbox};

/// Where one sandbox record is filed.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Filing {
    owned: Option<(String, u64)>,
    recovering: bool,
    ended: Option<u64>,
    owner: (String, u64),
}

impl Filing {
    fn of(s: &Sandbox) -> Filing {
        Filing {
            owned: s
                .phase
                .is_charged()
                .then(|| (s.owner.member.clone(), s.owner.incarnation)),
            recovering: s.recovery.is_some(),
            ended: if matches!(s.phase, Phase::Deleted | Phase::Failed) {
                s.ended_tick
            } else {
                None
            },
            owner: (s.owner.member.clone(), s.owner.incarnation),
        }
    }
}

/// The derived indexes of [`SandboxTable`] (see the module doc).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct SandboxIndex {
    owned: BTreeMap<(String, u64), BTreeSet<String>>,
    recovering: BTreeSet<String>,
    ended: BTreeSet<(u64, String)>,
    by_owner: BTreeMap<(String, u64), BTreeSet<String>>,
}

impl SandboxIndex {
    fn file(&mut self, id: &str, f: &Filing) {
        if let Some(key) = &f.owned {
            self.owned
                .entry(key.clone())
                .or_default()
                .insert(id.to_string());
        }
        if f.recovering {
            self.recovering.insert(id.to_string());
        }
        if let Some(t) = f.ended {
            self.ended.insert((t, id.to_string()));
        }
        self.by_owner
            .entry(f.owner.clone())
            .or_default()
            .insert(id.to_string());
    }

    fn unfile(&mut self, id: &str, f: &Filing) {
        if let Some(key) = &f.owned {
            if let Some(ids) = self.owned.get_mut(key) {
                ids.remove(id);
                if ids.is_empty() {
                    self.owned.remove(key);
                }
            }
        }
        if f.recovering {
            self.recovering.remove(id);
        }
        if let Some(t) = f.ended {
            self.ended.remove(&(t, id.to_string()));
        }
        if let Some(ids) = self.by_owner.get_mut(&f.owner) {
            ids.remove(id);
            if ids.is_empty() {
                self.by_owner.remove(&f.owner);
            }
        }
    }
}

/// Sandboxes by id, with their derived indexes.
#[derive(Clone, Debug, Default)]
pub struct SandboxTable {
    by_id: BTreeMap<String, Sandbox>,
    index: SandboxIndex,
}

impl Deref for SandboxTable {
    type Target = BTreeMap<String, Sandbox>;
    fn deref(&self) -> &Self::Target {
        &self.by_id
    }
}

/// A sandbox record borrowed for change: refiled in the indexes when
/// dropped.
pub(crate) struct SandboxMut<'a> {
    sandbox: &'a mut Sandbox,
    index: &'a mut SandboxIndex,
    before: Filing,
}

impl Deref for SandboxMut<'_> {
    type Target = Sandbox;
    fn deref(&self) -> &Sandbox {
        self.sandbox
    }
}

impl DerefMut for SandboxMut<'_> {
    fn deref_mut(&mut self) -> &mut Sandbox {
        self.sandbox
    }
}

impl Drop for SandboxMut<'_> {
    fn drop(&mut self) {
        let after = Filing::of(self.sandbox);
        if after != self.before {
            let id = self.sandbox.id.as_str();
            self.index.unfile(id, &self.before);
            self.index.file(id, &after);
        }
    }
}

impl From<BTreeMap<String, Sandbox>> for SandboxTable {
    /// Files decoded records (a snapshot's) in fresh indexes.
    fn from(by_id: BTreeMap<String, Sandbox>) -> SandboxTable {
        let mut index = SandboxIndex::default();
        for (id, s) in &by_id {
            index.file(id, &Filing::of(s));
        }
        SandboxTable { by_id, index }
    }
}

impl SandboxTable {
    /// Inserts (or replaces) the record of `id`.
    pub(crate) fn insert(&mut self, id: String, s: Sandbox) -> Option<Sandbox> {
        let filing = Filing::of(&s);
        let old = self.by_id.insert(id.clone(), s);
        // The old record's entries go first: the new one may share them
        // (the next generation under the same owner).
        if let Some(old) = &old {
            self.index.unfile(&id, &Filing::of(old));
        }
        self.index.file(&id, &filing);
        old
    }

    /// Removes the record of `id`.
    pub(crate) fn remove(&mut self, id: &str) -> Option<Sandbox> {
        let old = self.by_id.remove(id)?;
        self.index.unfile(id, &Filing::of(&old));
        Some(old)
    }

    /// The record of `id`, for change (refiled when the guard drops).
    pub(crate) fn get_mut(&mut self, id: &str) -> Option<SandboxMut<'_>> {
        let sandbox = self.by_id.get_mut(id)?;
        let before = Filing::of(sandbox);
        Some(SandboxMut {
            sandbox,
            index: &mut self.index,
            before,
        })
    }

    /// The live (charged) sandboxes of one owner incarnation, in id order.
    pub fn owned_by(&self, member: &str, incarnation: u64) -> impl Iterator<Item = &Sandbox> {
        self.index
            .owned
            .get(&(member.to_string(), incarnation))
            .into_iter()
            .flatten()
            .filter_map(|id| self.by_id.get(id))
    }

    /// The live (charged) sandboxes of every incarnation of `member`, in id
    /// order.
    pub fn owned_by_member(&self, member: &str) -> BTreeMap<&str, &Sandbox> {
        let from = (member.to_string(), 0);
        let to = (member.to_string(), u64::MAX);
        self.index
            .owned
            .range(from..=to)
            .flat_map(|(_, ids)| ids)
            .filter_map(|id| self.by_id.get_key_value(id))
            .map(|(id, s)| (id.as_str(), s))
            .collect()
    }

    /// The owner incarnations that hold live sandboxes, with how many.
    pub fn owners(&self) -> impl Iterator<Item = (&str, u64, usize)> {
        self.index
            .owned
            .iter()
            .map(|((m, i), ids)| (m.as_str(), *i, ids.len()))
    }

    /// The sandboxes with a recovery in progress, in id order.
    pub fn recovering(&self) -> impl Iterator<Item = &Sandbox> {
        self.index
            .recovering
            .iter()
            .filter_map(|id| self.by_id.get(id))
    }

    /// Deleted and failed records that ended at or before `tick`, in id
    /// order.
    pub fn ended_by(&self, tick: u64) -> BTreeSet<&str> {
        ended_by(&self.index.ended, tick)
    }

    /// Whether any record (live or ended) names `member` as its owner.
    pub fn names_member(&self, member: &str) -> bool {
        let from = (member.to_string(), 0);
        let to = (member.to_string(), u64::MAX);
        self.index.by_owner.range(from..=to).next().is_some()
    }

    /// Every record (live or ended) whose owner is `member`'s
    /// `incarnation`, in id order: what that incarnation's stream may be
    /// shown (`crate::visibility`).
    pub fn records_of(&self, member: &str, incarnation: u64) -> impl Iterator<Item = &Sandbox> {
        self.index
            .by_owner
            .get(&(member.to_string(), incarnation))
            .into_iter()
            .flatten()
            .filter_map(|id| self.by_id.get(id))
    }

    /// Rebuilds the indexes from the records and compares them with the
    /// kept ones: `Err` names the first that differs.
    pub fn check_index(&self) -> Result<(), String> {
        let mut rebuilt = SandboxIndex::default();
        for (id, s) in &self.by_id {
            if *id != s.id {
                return Err(format!("sandbox record {id} is filed under id {}", s.id));
            }
            rebuilt.file(id, &Filing::of(s));
        }
        let kept = &self.index;
        if rebuilt.owned != kept.owned {
            return Err("the index of live sandboxes by owner differs from the records".into());
        }
        if rebuilt.recovering != kept.recovering {
            return Err("the index of recovering sandboxes differs from the records".into());
        }
        if rebuilt.ended != kept.ended {
            return Err("the index of ended sandboxes differs from the records".into());
        }
        if rebuilt.by_owner != kept.by_owner {
            return Err("the index of records by owner differs from the records".into());
        }
        Ok(())
    }
}

/// Launch outcomes by launch id, with the finished ones indexed by the tick
/// they finished (retention reads only those due).
#[derive(Clone, Debug, Default)]
pub struct LaunchTable {
    by_id: BTreeMap<String, LaunchOutcome>,
    ended: BTreeSet<(u64, String)>,
}

impl Deref for LaunchTable {
    type Target = BTreeMap<String, LaunchOutcome>;
    fn deref(&self) -> &Self::Target {
        &self.by_id
    }
}

impl From<BTreeMap<String, LaunchOutcome>> for LaunchTable {
    /// Files decoded records (a snapshot's) in a fresh index.
    fn from(by_id: BTreeMap<String, LaunchOutcome>) -> LaunchTable {
        let ended = by_id
            .iter()
            .filter_map(|(id, l)| l.ended_tick().map(|t| (t, id.clone())))
            .collect();
        LaunchTable { by_id, ended }
    }
}

impl LaunchTable {
    /// Inserts (or replaces) the outcome of `id`.
    pub(crate) fn insert(&mut self, id: String, l: LaunchOutcome) -> Option<LaunchOutcome> {
        let ended = l.ended_tick();
        let old = self.by_id.insert(id.clone(), l);
        if let Some(t) = old.as_ref().and_then(LaunchOutcome::ended_tick) {
            self.ended.remove(&(t, id.clone()));
        }
        if let Some(t) = ended {
            self.ended.insert((t, id));
        }
        old
    }

    /// Removes the outcome of `id`.
    pub(crate) fn remove(&mut self, id: &str) -> Option<LaunchOutcome> {
        let old = self.by_id.remove(id)?;
        if let Some(t) = old.ended_tick() {
            self.ended.remove(&(t, id.to_string()));
        }
        Some(old)
    }

    /// Marks the admitted record `id` of (`sandbox`, `generation`) ended at
    /// `tick`, if it is that generation's and not yet ended.
    pub(crate) fn mark_ended(&mut self, id: &str, sandbox_id: &str, generation: u64, tick: u64) {
        if let Some(LaunchOutcome::Admitted {
            sandbox,
            generation: g,
            ended_tick,
        }) = self.by_id.get_mut(id)
        {
            if sandbox == sandbox_id && *g == generation && ended_tick.is_none() {
                *ended_tick = Some(tick);
                self.ended.insert((tick, id.to_string()));
            }
        }
    }

    /// Finished outcomes that ended at or before `tick`, in id order.
    pub fn ended_by(&self, tick: u64) -> BTreeSet<&str> {
        ended_by(&self.ended, tick)
    }

    /// Rebuilds the index from the records and compares.
    pub fn check_index(&self) -> Result<(), String> {
        let rebuilt: BTreeSet<(u64, String)> = self
            .by_id
            .iter()
            .filter_map(|(id, l)| l.ended_tick().map(|t| (t, id.clone())))
            .collect();
        if rebuilt != self.ended {
            return Err("the index of finished launch outcomes differs from the records".into());
        }
        Ok(())
    }
}

/// The ids filed in `ended` (by end tick, then id) that ended at or before
/// `tick`, in id order: reads the due entries only (they come first).
fn ended_by(ended: &BTreeSet<(u64, String)>, tick: u64) -> BTreeSet<&str> {
    ended
        .iter()
        .take_while(|(t, _)| *t <= tick)
        .map(|(_, id)| id.as_str())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::Owner;

    fn sandbox(id: &str, generation: u64, phase: Phase, ended_tick: Option<u64>) -> Sandbox {
        Sandbox {
            id: id.to_string(),
            generation,
            phase,
            owner: Owner {
                member: "m".to_string(),
                incarnation: 1,
                term: 1,
                credential_epoch: 1,
                acknowledged: false,
            },
            recovery: None,
            last_report: None,
            launch_id: format!("launch-{id}-{generation}"),
            material_ref: String::new(),
            failure: None,
            runtime: None,
            ended_tick,
        }
    }

    /// The next generation of a sandbox under the same owner replaces the
    /// record: its index entries are the new record's, none lost (the old
    /// record's entries are removed before the new ones are filed).
    #[test]
    fn a_next_generation_under_the_same_owner_stays_filed() {
        let mut table = SandboxTable::default();
        table.insert("s".into(), sandbox("s", 1, Phase::Deleted, Some(5)));
        assert_eq!(table.ended_by(10).len(), 1);
        table.insert("s".into(), sandbox("s", 2, Phase::Admitting, None));
        assert_eq!(table.check_index(), Ok(()));
        assert_eq!(table.records_of("m", 1).count(), 1);
        assert_eq!(table.owned_by("m", 1).count(), 1);
        assert!(table.ended_by(10).is_empty());
        assert!(table.names_member("m"));
        table.remove("s");
        assert_eq!(table.check_index(), Ok(()));
        assert!(!table.names_member("m"));
        assert_eq!(table.owners().count(), 0);
    }

    /// A change through the guard refiles the record when the guard drops.
    #[test]
    fn a_change_through_the_guard_is_refiled() {
        let mut table = SandboxTable::default();
        table.insert("s".into(), sandbox("s", 1, Phase::Assigned, None));
        if let Some(mut s) = table.get_mut("s") {
            s.owner.member = "n".to_string();
            s.phase = Phase::Failed;
            s.ended_tick = Some(7);
        }
        assert_eq!(table.check_index(), Ok(()));
        assert_eq!(table.owned_by("m", 1).count(), 0);
        assert_eq!(table.owned_by("n", 1).count(), 0, "failed: not live");
        assert_eq!(table.records_of("n", 1).count(), 1);
        assert_eq!(table.ended_by(6).len(), 0);
        assert_eq!(table.ended_by(7).len(), 1);
    }
}
