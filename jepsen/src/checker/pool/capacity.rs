//! I5 (capacity; a refused launch leaves nothing) and I6 (one operation at
//! a time): see the module doc of [`super`].

use super::observe::Parsed;
use super::{v, Violation};

pub(super) fn check_i5(p: &Parsed<'_>, final_status: Option<u64>) -> Vec<Violation> {
    let mut out = Vec::new();
    for r in &p.statuses {
        for m in &r.read.members {
            if m.used > m.capacity {
                out.push(v(
                    format!(
                        "member {}#{} uses {} of {} slots (status event {})",
                        m.id, m.incarnation, m.used, m.capacity, r.i_done
                    ),
                    vec![r.i_done],
                ));
            }
        }
    }
    let refused = &p.refused;
    for o in &p.obs {
        if let Some(at) = refused.get(&o.sandbox) {
            out.push(v(
                format!(
                    "{}: its launch was refused (event {at}) but event {} shows it ({} owned by {}#{})",
                    o.sandbox, o.i_done, o.phase, o.member, o.incarnation
                ),
                vec![*at, o.i_done],
            ));
        }
    }
    let _ = final_status;
    out
}

pub(super) fn check_i6(p: &Parsed<'_>) -> Vec<Violation> {
    p.statuses
        .iter()
        .filter_map(|r| {
            let running: Vec<&str> = r
                .read
                .operations
                .iter()
                .filter(|o| o.phase == "running")
                .map(|o| o.id.as_str())
                .collect();
            (running.len() > 1).then(|| {
                v(
                    format!(
                        "status event {} shows {} operations running: {:?}",
                        r.i_done,
                        running.len(),
                        running
                    ),
                    vec![r.i_done],
                )
            })
        })
        .collect()
}
