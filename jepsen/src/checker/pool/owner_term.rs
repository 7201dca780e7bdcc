//! I1 (one owner per term; terms increase with owner changes) and I2
//! (epochs increase with every takeover; no older epoch after a newer one):
//! see the module doc of [`super`].

use std::collections::BTreeMap;

use super::observe::{Obs, Parsed};
use super::{by_generation, v, Violation};

pub(super) fn check_i1(p: &Parsed<'_>) -> Vec<Violation> {
    let mut out = Vec::new();
    for ((sb, g), list) in by_generation(&p.obs) {
        // One owner per term.
        let mut owners: BTreeMap<u64, (&str, u64, u64)> = BTreeMap::new();
        for o in &list {
            match owners.get(&o.term) {
                None => {
                    owners.insert(o.term, (&o.member, o.incarnation, o.i_done));
                }
                Some((m, i, at)) if (*m, *i) != (o.member.as_str(), o.incarnation) => {
                    out.push(v(
                        format!(
                            "{sb} gen {g} term {}: two owners {m}#{i} (event {at}) and {}#{} (event {})",
                            o.term, o.member, o.incarnation, o.i_done
                        ),
                        vec![*at, o.i_done],
                    ));
                }
                Some(_) => {}
            }
        }
        // Terms never decrease along the log.
        let mut logged: Vec<&&Obs> = list.iter().filter(|o| o.log_index.is_some()).collect();
        logged.sort_by_key(|o| (o.log_index, o.term));
        let mut best: Option<&Obs> = None;
        for o in logged {
            if let Some(b) = best {
                if b.term > o.term && b.log_index < o.log_index {
                    out.push(v(
                        format!(
                            "{sb} gen {g}: term {} at log index {:?} (event {}) after term {} at log index {:?} (event {})",
                            o.term, o.log_index, o.i_done, b.term, b.log_index, b.i_done
                        ),
                        vec![b.i_done, o.i_done],
                    ));
                    continue;
                }
            }
            if best.is_none_or(|b| o.term > b.term) {
                best = Some(o);
            }
        }
        // Linearizable reads never go back in real time.
        let mut done_sorted: Vec<&&Obs> = list.iter().filter(|o| o.linear).collect();
        done_sorted.sort_by_key(|o| o.t_done);
        let mut inv_sorted = done_sorted.clone();
        inv_sorted.sort_by_key(|o| o.t_inv);
        let mut j = 0;
        let mut best: Option<&Obs> = None;
        for o in inv_sorted {
            while j < done_sorted.len() && done_sorted[j].t_done < o.t_inv {
                if best.is_none_or(|b| done_sorted[j].term > b.term) {
                    best = Some(done_sorted[j]);
                }
                j += 1;
            }
            if let Some(b) = best {
                if b.term > o.term {
                    out.push(v(
                        format!(
                            "{sb} gen {g}: read (event {}) shows term {} after a read that completed earlier (event {}) showed term {}",
                            o.i_done, o.term, b.i_done, b.term
                        ),
                        vec![b.i_done, o.i_inv, o.i_done],
                    ));
                }
            }
        }
    }
    out
}

pub(super) fn check_i2(p: &Parsed<'_>) -> Vec<Violation> {
    let mut out = Vec::new();
    let groups = by_generation(&p.obs);
    for ((sb, g), list) in &groups {
        let mut epochs: BTreeMap<u64, (u64, u64)> = BTreeMap::new();
        for o in list {
            match epochs.get(&o.term) {
                None => {
                    epochs.insert(o.term, (o.credential_epoch, o.i_done));
                }
                Some((e, at)) if *e != o.credential_epoch => out.push(v(
                    format!(
                        "{sb} gen {g} term {}: epochs {e} (event {at}) and {} (event {})",
                        o.term, o.credential_epoch, o.i_done
                    ),
                    vec![*at, o.i_done],
                )),
                Some(_) => {}
            }
        }
        let mut prev: Option<(u64, u64, u64)> = None;
        for (term, (epoch, at)) in &epochs {
            if let Some((pt, pe, pat)) = prev {
                if *epoch <= pe {
                    out.push(v(
                        format!(
                            "{sb} gen {g}: term {term} has epoch {epoch} (event {at}), not above term {pt}'s epoch {pe} (event {pat})"
                        ),
                        vec![pat, *at],
                    ));
                }
            }
            prev = Some((*term, *epoch, *at));
        }
    }
    // Acks confirmed at a log position after a newer term was read.
    for c in &p.acks_confirmed {
        let (sb, g, t, l) = (&c.ack.sandbox, c.ack.generation, c.ack.term, c.log_index);
        if let Some(list) = groups.get(&(sb.clone(), g)) {
            if let Some(newer) = list
                .iter()
                .find(|o| o.term > t && o.log_index.is_some_and(|x| x < l))
            {
                out.push(v(
                    format!(
                        "{sb} gen {g}: ack of term {t} confirmed at log index {l} (event {}) but term {} was already read at log index {:?} (event {})",
                        c.i_done, newer.term, newer.log_index, newer.i_done
                    ),
                    vec![c.i_inv, c.i_done, newer.i_done],
                ));
            }
        }
    }
    out
}
