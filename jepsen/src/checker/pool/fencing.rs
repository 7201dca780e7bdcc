//! I3 (reports count only from the current owner after it acknowledged):
//! see the module doc of [`super`].

use super::observe::Parsed;
use super::{v, Violation};

/// Parses `r:<member>:<incarnation>:<term>:<seq>`.
fn parse_report(s: &str) -> Option<(String, u64, u64)> {
    let mut it = s.strip_prefix("r:")?.split(':');
    let member = it.next()?.to_string();
    let inc = it.next()?.parse().ok()?;
    let term = it.next()?.parse().ok()?;
    Some((member, inc, term))
}

pub(super) fn check_i3(p: &Parsed<'_>) -> Vec<Violation> {
    let mut out = Vec::new();
    let (reports, acks) = (&p.reports, &p.acks_sent);
    for o in p.obs.iter().filter(|o| o.linear) {
        let Some(observed) = o.observed.as_deref() else {
            continue;
        };
        let terminal = o.phase == "deleted" || o.phase == "failed";
        if !o.acknowledged && !terminal && observed != "pending" {
            out.push(v(
                format!(
                    "{} gen {} term {} unacknowledged but reads observed status {observed:?} (event {})",
                    o.sandbox, o.generation, o.term, o.i_done
                ),
                vec![o.i_done],
            ));
            continue;
        }
        let Some((m, inc, term)) = parse_report(observed) else {
            continue;
        };
        if (m.as_str(), inc, term) != (o.member.as_str(), o.incarnation, o.term) {
            out.push(v(
                format!(
                    "{} gen {}: report {observed:?} counted while the owner is {}#{} at term {} (event {})",
                    o.sandbox, o.generation, o.member, o.incarnation, o.term, o.i_done
                ),
                vec![o.i_done],
            ));
            continue;
        }
        match (
            reports.get(observed),
            acks.get(&(o.sandbox.clone(), o.generation, term, m.clone(), inc)),
        ) {
            (None, _) => out.push(v(
                format!(
                    "{} gen {}: observed status {observed:?} was never reported (event {})",
                    o.sandbox, o.generation, o.i_done
                ),
                vec![o.i_done],
            )),
            (Some(r), None) => out.push(v(
                format!(
                    "{} gen {}: report {observed:?} (event {r}) counted but {m}#{inc} never acknowledged term {term} (event {})",
                    o.sandbox, o.generation, o.i_done
                ),
                vec![*r, o.i_done],
            )),
            (Some(r), Some(a)) if a > r => out.push(v(
                format!(
                    "{} gen {}: report {observed:?} (event {r}) was sent before the ack of term {term} (event {a}) yet counted (event {})",
                    o.sandbox, o.generation, o.i_done
                ),
                vec![*a, *r, o.i_done],
            )),
            _ => {}
        }
    }
    out
}
