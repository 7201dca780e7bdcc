//! I7 (acknowledged launches and deletes survive) and I8 (delete wins):
//! see the module doc of [`super`].

use std::collections::BTreeMap;

use super::observe::Parsed;
use super::{v, Violation};

pub(super) fn check_i7(p: &Parsed<'_>, fin: &BTreeMap<String, String>) -> Vec<Violation> {
    let mut out = Vec::new();
    // In history order, launches and deletes together.
    let mut writes: Vec<(bool, &super::observe::Acknowledged)> = p
        .launched
        .iter()
        .map(|w| (true, w))
        .chain(p.deleted.iter().map(|w| (false, w)))
        .collect();
    writes.sort_by_key(|(_, w)| w.i_done);
    for (launch, w) in writes {
        let sb = &w.sandbox;
        if launch && !fin.contains_key(sb) {
            out.push(v(
                format!(
                    "{sb}: launch acknowledged (event {}) but absent from the final state",
                    w.i_done
                ),
                vec![w.i_inv, w.i_done],
            ));
        } else if !launch && fin.get(sb).map(String::as_str) != Some("deleted") {
            out.push(v(
                format!(
                    "{sb}: delete acknowledged (event {}) but the final state has it {:?}",
                    w.i_done,
                    fin.get(sb)
                ),
                vec![w.i_inv, w.i_done],
            ));
        }
    }
    out
}

pub(super) fn check_i8(p: &Parsed<'_>, fin: Option<&BTreeMap<String, String>>) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut deleted: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for w in &p.deleted {
        let e = deleted
            .entry(w.sandbox.clone())
            .or_insert((w.t_done, w.i_done));
        if w.t_done < e.0 {
            *e = (w.t_done, w.i_done);
        }
    }
    for o in p.obs.iter().filter(|o| o.linear) {
        if let Some((t, at)) = deleted.get(&o.sandbox) {
            if o.t_inv > *t && o.phase != "deleted" {
                out.push(v(
                    format!(
                        "{}: deleted (event {at}) but a later read (event {}) shows it {} owned by {}#{}",
                        o.sandbox, o.i_done, o.phase, o.member, o.incarnation
                    ),
                    vec![*at, o.i_inv, o.i_done],
                ));
            }
        }
    }
    if let Some(fin) = fin {
        for (sb, (_, at)) in &deleted {
            if let Some(phase) = fin.get(sb).filter(|ph| ph.as_str() != "deleted") {
                out.push(v(
                    format!("{sb}: deleted (event {at}) but the final state has it {phase}"),
                    vec![*at],
                ));
            }
        }
    }
    out
}
