//! The pool history decoded once for every invariant: invokes paired with
//! their completions, and every value the checks read decoded into the
//! typed structs of [`crate::ops::pool`]. A value missing a field the checks
//! rely on is a [`ValueError`] naming the event, never a `""` or `0`.

use std::collections::{BTreeMap, HashMap};

use crate::history::{Event, OpType, Process};
use crate::ops::pool::{
    Ack, Drain, GetResult, Grant, Launch, Report, SandboxOf, SandboxView, StatusRead,
};
use crate::ops::{decode, ValueError};

/// One sandbox generation's owner as one event saw it.
#[derive(Clone, Debug)]
pub struct Obs {
    /// Sandbox id.
    pub sandbox: String,
    /// Generation.
    pub generation: u64,
    /// Ownership term.
    pub term: u64,
    /// Credential epoch.
    pub credential_epoch: u64,
    /// Owner member.
    pub member: String,
    /// Owner incarnation.
    pub incarnation: u64,
    /// Term acknowledged.
    pub acknowledged: bool,
    /// Phase.
    pub phase: String,
    /// Fenced observed status (linearizable views only).
    pub observed: Option<String>,
    /// Raft log position of the state (grants, status reads).
    pub log_index: Option<u64>,
    /// From a linearizable read.
    pub linear: bool,
    /// Invoke event index / time.
    pub i_inv: u64,
    /// Completion event index.
    pub i_done: u64,
    /// Invoke time.
    pub t_inv: u64,
    /// Completion time.
    pub t_done: u64,
}

/// One `status` ok.
#[derive(Clone, Debug)]
pub(super) struct StatusObs {
    pub(super) i_inv: u64,
    pub(super) i_done: u64,
    pub(super) t_inv: u64,
    pub(super) read: StatusRead,
}

/// A completed op: its invoke and completion.
pub(super) struct Op<'a> {
    pub(super) inv: &'a Event,
    pub(super) done: &'a Event,
}

/// A nemesis event (its value is text).
pub(super) struct NemesisEvent {
    pub(super) index: u64,
    pub(super) time: u64,
    pub(super) f: String,
    pub(super) text: String,
}

/// An `ack` confirmed `ok` at a log position.
pub(super) struct AckConfirmed {
    pub(super) ack: Ack,
    pub(super) log_index: u64,
    pub(super) i_inv: u64,
    pub(super) i_done: u64,
}

/// An `ok` launch or delete: (sandbox, invoke index, completion index,
/// completion time).
pub(super) struct Acknowledged {
    pub(super) sandbox: String,
    pub(super) i_inv: u64,
    pub(super) i_done: u64,
    pub(super) t_done: u64,
}

/// `(sandbox, generation, term, member, incarnation)` of an ack.
pub(super) type AckKey = (String, u64, u64, String, u64);

/// Everything decoded from the history.
pub(super) struct Parsed<'a> {
    pub(super) ops: Vec<Op<'a>>,
    pub(super) obs: Vec<Obs>,
    pub(super) statuses: Vec<StatusObs>,
    pub(super) nemesis: Vec<NemesisEvent>,
    /// `ack` ops completed `ok`.
    pub(super) acks_confirmed: Vec<AckConfirmed>,
    /// Report status text -> its `report` invoke index.
    pub(super) reports: HashMap<String, u64>,
    /// The first `ack` invoke of each owner's term.
    pub(super) acks_sent: HashMap<AckKey, u64>,
    /// Drain windows per member: (from invoke time, to cancel-ok time or
    /// `u64::MAX`).
    pub(super) drains: BTreeMap<String, Vec<(u64, u64)>>,
    /// Sandboxes whose launch was refused for capacity -> the `fail` index.
    pub(super) refused: BTreeMap<String, u64>,
    /// `ok` launches.
    pub(super) launched: Vec<Acknowledged>,
    /// `ok` deletes.
    pub(super) deleted: Vec<Acknowledged>,
}

fn view_obs(v: SandboxView, op: &Op<'_>, log_index: Option<u64>) -> Obs {
    Obs {
        sandbox: v.sandbox,
        generation: v.generation,
        term: v.term,
        credential_epoch: v.credential_epoch,
        member: v.owner,
        incarnation: v.incarnation,
        acknowledged: v.acknowledged,
        phase: v.phase,
        observed: Some(v.observed),
        log_index,
        linear: true,
        i_inv: op.inv.index,
        i_done: op.done.index,
        t_inv: op.inv.time,
        t_done: op.done.time,
    }
}

fn grant_obs(g: Grant, op: &Op<'_>) -> Obs {
    Obs {
        sandbox: g.sandbox,
        generation: g.generation,
        term: g.term,
        credential_epoch: g.credential_epoch,
        member: g.member,
        incarnation: g.incarnation,
        acknowledged: g.acknowledged,
        phase: g.phase,
        observed: None,
        log_index: Some(g.log_index),
        linear: false,
        i_inv: op.inv.index,
        i_done: op.done.index,
        t_inv: op.inv.time,
        t_done: op.done.time,
    }
}

/// Every observation of a sandbox generation's owner in the history (see
/// the module doc).
///
/// # Errors
/// An event whose value lacks a field the observations are built from.
pub fn observations(history: &[Event]) -> Result<Vec<Obs>, ValueError> {
    Ok(parse(history)?.obs)
}

/// Pairs every client invoke with its completion; collects nemesis events.
fn pair(history: &[Event]) -> Result<(Vec<Op<'_>>, Vec<NemesisEvent>), ValueError> {
    let mut pending: HashMap<u64, &Event> = HashMap::new();
    let mut ops = Vec::new();
    let mut nemesis = Vec::new();
    for e in history {
        match e.process {
            Process::Nemesis => nemesis.push(NemesisEvent {
                index: e.index,
                time: e.time,
                f: e.f.clone(),
                text: decode(e)?,
            }),
            Process::Client(p) => {
                if e.kind == OpType::Invoke {
                    pending.insert(p, e);
                } else if let Some(inv) = pending.remove(&p) {
                    ops.push(Op { inv, done: e });
                }
            }
        }
    }
    Ok((ops, nemesis))
}

pub(super) fn parse(history: &[Event]) -> Result<Parsed<'_>, ValueError> {
    let (ops, nemesis) = pair(history)?;
    let mut p = Parsed {
        ops: Vec::new(),
        obs: Vec::new(),
        statuses: Vec::new(),
        nemesis,
        acks_confirmed: Vec::new(),
        reports: HashMap::new(),
        acks_sent: HashMap::new(),
        drains: BTreeMap::new(),
        refused: BTreeMap::new(),
        launched: Vec::new(),
        deleted: Vec::new(),
    };
    let mut drains: BTreeMap<String, (String, u64, Option<u64>)> = BTreeMap::new();
    for op in &ops {
        invoked(&mut p, &mut drains, op)?;
        match op.done.kind {
            OpType::Ok => completed_ok(&mut p, op)?,
            OpType::Fail if op.done.f == "launch" => {
                let launch: Launch = decode(op.done)?;
                if launch.refused == Some(true) {
                    let of: SandboxOf = decode(op.inv)?;
                    p.refused.insert(of.sandbox, op.done.index);
                }
            }
            _ => {}
        }
    }
    // Drains never certainly cancelled still count, to the end.
    for (_, (member, from, to)) in drains {
        p.drains
            .entry(member)
            .or_default()
            .push((from, to.unwrap_or(u64::MAX)));
    }
    p.ops = ops;
    Ok(p)
}

/// What an op's invoke tells the checks, whatever its completion: reports
/// and acks sent (I3), drain windows (I4).
fn invoked(
    p: &mut Parsed<'_>,
    drains: &mut BTreeMap<String, (String, u64, Option<u64>)>,
    op: &Op<'_>,
) -> Result<(), ValueError> {
    match op.inv.f.as_str() {
        "report" => {
            let r: Report = decode(op.inv)?;
            p.reports.insert(r.status, op.inv.index);
        }
        "ack" => {
            let a: Ack = decode(op.inv)?;
            p.acks_sent
                .entry((a.sandbox, a.generation, a.term, a.member, a.incarnation))
                .or_insert(op.inv.index);
        }
        "drain" => {
            let d: Drain = decode(op.inv)?;
            drains.entry(d.op).or_insert((d.member, op.inv.time, None));
        }
        "cancel" if op.done.kind == OpType::Ok => {
            let d: Drain = decode(op.inv)?;
            if let Some(w) = drains.get_mut(&d.op) {
                w.2 = Some(w.2.map_or(op.done.time, |t| t.min(op.done.time)));
            }
        }
        _ => {}
    }
    Ok(())
}

/// What an `ok` completion tells the checks: observations, status reads,
/// confirmed acks, acknowledged launches and deletes.
fn completed_ok(p: &mut Parsed<'_>, op: &Op<'_>) -> Result<(), ValueError> {
    let acknowledged = |sandbox: String| Acknowledged {
        sandbox,
        i_inv: op.inv.index,
        i_done: op.done.index,
        t_done: op.done.time,
    };
    match op.done.f.as_str() {
        "grant" => p.obs.push(grant_obs(decode(op.done)?, op)),
        "launch" => {
            p.obs.push(view_obs(decode(op.done)?, op, None));
            let of: SandboxOf = decode(op.inv)?;
            p.launched.push(acknowledged(of.sandbox));
        }
        "delete" => {
            p.obs.push(view_obs(decode(op.done)?, op, None));
            let of: SandboxOf = decode(op.inv)?;
            p.deleted.push(acknowledged(of.sandbox));
        }
        "get" => {
            if let GetResult::View(v) = GetResult::decode(op.done)? {
                p.obs.push(view_obs(v, op, None));
            }
        }
        "status" => {
            let read: StatusRead = decode(op.done)?;
            for sb in &read.sandboxes {
                p.obs
                    .push(view_obs(sb.clone(), op, Some(read.applied_index)));
            }
            p.statuses.push(StatusObs {
                i_inv: op.inv.index,
                i_done: op.done.index,
                t_inv: op.inv.time,
                read,
            });
        }
        "ack" => {
            let ack: Ack = decode(op.done)?;
            let log_index = ack
                .log_index
                .ok_or_else(|| ValueError::missing(op.done, "log_index"))?;
            p.acks_confirmed.push(AckConfirmed {
                ack,
                log_index,
                i_inv: op.inv.index,
                i_done: op.done.index,
            });
        }
        _ => {}
    }
    Ok(())
}

/// The final state's sandboxes (id -> phase), from the final `status` read.
///
/// # Errors
/// When that event is not a status read.
pub(super) fn final_sandboxes(
    history: &[Event],
    final_status: Option<u64>,
) -> Result<Option<BTreeMap<String, String>>, ValueError> {
    let Some(e) = final_status
        .and_then(|i| usize::try_from(i).ok())
        .and_then(|i| history.get(i))
    else {
        return Ok(None);
    };
    let read: StatusRead = decode(e)?;
    Ok(Some(
        read.sandboxes
            .into_iter()
            .map(|sb| (sb.sandbox, sb.phase))
            .collect(),
    ))
}
