//! Assignment snapshot pushing: after every applied batch that may change a
//! plan (and on every attach) each attached stream whose view changed gets an
//! `AssignmentSnapshot`, each assignment carrying a grant signed for that
//! member incarnation. The cost of a pass is what changed: the journal
//! (`pool::visibility::ChangeLog`) names the member incarnations whose
//! sandboxes changed, and only their views are re-read; a newly attached
//! stream gets its full view, read from the records its incarnation owns
//! (`pool::table`'s index by owner), never a scan of the pool. The sandbox records each pass read
//! are counted in `openshell_pool_push_sandboxes_examined_total`. What each incarnation may see, when a view is pushed
//! at all and which streams are closed is decided by the pure
//! `pool::visibility`; this module reads the state, delivers and records.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use pool::visibility::{self, Changes, IncarnationView, Plan, Push, Retired};
use prost::Message;
use proto::attach::refusal_status;
use tonic::Code;

use super::streams::{stream_of, Attached};
use super::Hub;
use crate::convert::to_proto;

/// What one attached stream had been shown when a plan was made.
struct Planned {
    /// The member.
    member: String,
    /// The incarnation its stream was attached for.
    incarnation: u64,
    /// The view it had been shown (compared by pointer on confirmation).
    shown: Option<Arc<IncarnationView>>,
    /// The index `shown` was known at.
    shown_at: u64,
    /// The index of the last snapshot sent.
    sent_index: u64,
}

impl Hub {
    /// Sends each attached member its assignment snapshot if it changed,
    /// each assignment carrying a grant signed for that member incarnation;
    /// closes the streams of incarnations that no longer count.
    pub fn push_snapshots(&self) -> u64 {
        let planned: Vec<Planned> = self
            .streams
            .lock()
            .iter()
            .map(|(member, a)| Planned {
                member: member.clone(),
                incarnation: a.incarnation,
                shown: a.shown.clone(),
                shown_at: a.shown_at,
                sent_index: a.sent_log_index,
            })
            .collect();
        let viewers: Vec<visibility::Viewer<'_>> = planned
            .iter()
            .map(|p| visibility::Viewer {
                member: &p.member,
                incarnation: p.incarnation,
                shown: p.shown.as_deref(),
                shown_at: p.shown_at,
                sent_index: p.sent_index,
            })
            .collect();
        let (plan, examined) = self.node.read_local(|state, index| {
            // The journal from the oldest view a stream is known to hold
            // that the journal still reaches: every stream that holds one
            // is brought up to date by re-reading only the sandboxes that
            // changed under its own incarnation since; the others (never
            // shown anything, or shown before the journal begins) by reading
            // the records their incarnations own. A lagging stream costs its
            // own records, not everyone's.
            let known = state.pool_changes.known_after();
            let since = viewers
                .iter()
                .filter(|v| v.shown.is_some())
                .map(|v| v.shown_at)
                .filter(|at| known.is_some_and(|k| *at >= k))
                .min();
            let changes = match since {
                Some(since) => state.pool_changes.since_by_owner(since),
                None => Changes::Unknown,
            };
            visibility::plan_pushes_counted(&state.pool, index, &viewers, &changes)
        });
        self.metrics
            .pool
            .attached_supervisors
            .set(viewers.len() as i64);
        self.metrics.pool.push_passes.inc();
        self.metrics.pool.push_sandboxes_examined.inc_by(examined);
        let index = plan.index;
        self.deliver(plan, &planned);
        index
    }

    /// Carries out `plan` on the streams still attached for the planned
    /// incarnations.
    fn deliver(&self, plan: Plan, planned: &[Planned]) {
        let mut streams = self.streams.lock();
        for retired in plan.retired {
            close_retired(&mut streams, retired);
        }
        for push in plan.pushes {
            let Some(a) = stream_of(&mut streams, &push.member, push.incarnation) else {
                continue;
            };
            let member = push.member.clone();
            self.send(&member, a, push);
        }
        // An unchanged view holds at the plan's index too. If another pass
        // showed the stream a different view meanwhile, the unchanged view
        // (the current one at the plan's index) is sent under the same
        // delivery rule as any push.
        let base: BTreeMap<(&str, u64), &Option<Arc<IncarnationView>>> = planned
            .iter()
            .map(|p| ((p.member.as_str(), p.incarnation), &p.shown))
            .collect();
        for (member, incarnation) in plan.unchanged {
            let Some(a) = stream_of(&mut streams, &member, incarnation) else {
                continue;
            };
            let Some(Some(before)) = base.get(&(member.as_str(), incarnation)) else {
                continue;
            };
            if a.shown.as_ref().is_some_and(|now| Arc::ptr_eq(before, now)) {
                a.shown_at = a.shown_at.max(plan.index);
                continue;
            }
            let push = Push {
                member: member.clone(),
                incarnation,
                index: plan.index,
                view: IncarnationView::clone(before),
            };
            self.send(&member, a, push);
        }
    }

    /// Sends `push` on `a` (the stream of `member`) if the delivery rule
    /// allows it, and records it as shown.
    fn send(&self, member: &str, a: &mut Attached, push: Push) {
        if !push.deliverable_to(&a.viewer(member)) {
            return;
        }
        let grants = std::cell::Cell::new(0u64);
        let message = to_proto::snapshot(&push, |claims| {
            grants.set(grants.get() + 1);
            self.signer.sign(&to_proto::grant(claims)).encode_to_vec()
        });
        if a.tx.try_send(Ok(message)).is_ok() {
            self.metrics.pool.grants_issued.inc_by(grants.get());
            a.shown = Some(Arc::new(push.view));
            a.shown_at = push.index;
            a.sent_log_index = push.index;
        } else {
            // Not shown: the next applied batch must plan again.
            self.push_again.store(true, Ordering::SeqCst);
        }
    }

    /// Pushes snapshots whenever this node applies new entries, unless
    /// nothing applied since its last pass can change a plan (heartbeat
    /// batches, reports, ticks that removed nothing:
    /// `ChangeLog::plans_unchanged_since`) and that pass sent everything it
    /// planned. A quiet pool then costs no pass per heartbeat batch; a
    /// stream that attaches gets its pass from the attach itself.
    pub async fn run_snapshot_pusher(self: Arc<Self>) {
        let mut metrics = self.node.raft().metrics();
        let mut last_applied = None;
        let mut planned_at: Option<u64> = None;
        loop {
            if metrics.changed().await.is_err() {
                return;
            }
            let applied = metrics.borrow().last_applied;
            if applied == last_applied {
                continue;
            }
            last_applied = applied;
            let unchanged = planned_at.is_some_and(|at| {
                self.node
                    .read_local(|state, _| state.pool_changes.plans_unchanged_since(at))
            });
            if unchanged && !self.push_again.swap(false, Ordering::SeqCst) {
                self.metrics.pool.push_passes_skipped.inc();
                continue;
            }
            self.push_again.store(false, Ordering::SeqCst);
            planned_at = Some(self.push_snapshots());
        }
    }
}

/// Closes the stream of an incarnation that no longer counts (retired or
/// superseded), if the registry still holds that incarnation, so the
/// supervisor finds out instead of talking on a dead stream.
fn close_retired(streams: &mut BTreeMap<String, Attached>, retired: Retired) {
    if stream_of(streams, &retired.member, retired.incarnation).is_none() {
        return;
    }
    let (refusal, message) = to_proto::retirement(retired.why);
    let status = refusal_status(Code::FailedPrecondition, message, refusal);
    if let Some(a) = streams.remove(&retired.member) {
        tracing::info!(
            member = %retired.member,
            incarnation = retired.incarnation,
            stream_id = a.stream_id,
            reason = status.message(),
            "closing the stream of an incarnation that no longer counts"
        );
        let _ = a.tx.try_send(Err(status));
    }
}
