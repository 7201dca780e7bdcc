//! I4 (a takeover only when the owner's own record is expired, leaving,
//! draining or superseded, at that position): see the module doc of
//! [`super`].

use std::collections::BTreeMap;

use super::observe::{Obs, Parsed, StatusObs};
use super::{by_generation, v, Violation};

pub(super) fn check_i4(p: &Parsed<'_>, final_status: Option<u64>) -> Vec<Violation> {
    let mut out = Vec::new();
    let drains = &p.drains;
    let mut statuses: Vec<&StatusObs> = p.statuses.iter().collect();
    statuses.sort_by_key(|r| r.t_inv);
    let _ = final_status;
    for ((sb, g), list) in by_generation(&p.obs) {
        // Every owner (X, i, t) seen.
        let mut owners: BTreeMap<(u64, String, u64), Vec<&Obs>> = BTreeMap::new();
        for o in &list {
            owners
                .entry((o.term, o.member.clone(), o.incarnation))
                .or_default()
                .push(o);
        }
        for ((t, x, i), seen) in &owners {
            // The first completed observation of a later term with another owner.
            let Some(new) = list
                .iter()
                .filter(|o| o.term > *t && (o.member.as_str(), o.incarnation) != (x.as_str(), *i))
                .min_by_key(|o| o.t_done)
            else {
                continue;
            };
            // The change happened after every linearizable read of (x, i, t).
            let lower = seen
                .iter()
                .filter(|o| o.linear)
                .map(|o| o.t_inv)
                .max()
                .unwrap_or(0);
            let excused = drains
                .get(x)
                .is_some_and(|ws| ws.iter().any(|(a, b)| *a <= new.t_done && *b >= lower));
            if excused {
                continue;
            }
            let witness = statuses.iter().find(|r| {
                (r.t_inv >= new.t_done || r.i_done == new.i_done)
                    && r.read.members.iter().any(|m| {
                        m.id == *x
                            && m.incarnation == *i
                            && (m.state == "active" || m.state == "draining")
                    })
            });
            let Some(r) = witness else {
                continue;
            };
            // The last sighting of the old owner before the change was seen.
            let old = seen
                .iter()
                .filter(|o| o.t_done <= new.t_done)
                .max_by_key(|o| o.t_done)
                .or_else(|| seen.first())
                .map(|o| o.i_done)
                .unwrap_or(0);
            let mut events = vec![old, new.i_done, r.i_inv, r.i_done];
            // The last fault on x before the change, for the reader.
            if let Some(n) = p.nemesis.iter().rfind(|e| {
                e.time <= new.t_done
                    && e.f.ends_with("-supervisor")
                    && e.text.split_whitespace().next() == Some(x.as_str())
            }) {
                events.push(n.index);
            }
            out.push(v(
                format!(
                    "{sb} gen {g}: owner {x}#{i} (term {t}, event {old}) was replaced by {}#{} at term {} (event {}), yet status event {} still reads {x} at incarnation {i} alive (not expired, leaving or superseded) and no drain of {x} overlaps",
                    new.member, new.incarnation, new.term, new.i_done, r.i_done
                ),
                events,
            ));
        }
    }
    out
}
