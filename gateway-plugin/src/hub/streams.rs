//! The registry of attached supervisor streams: one current stream per
//! member (a newer stream supersedes the older one), the incarnation it was
//! attached for, when its last `HostStatus` arrived, and what it was last
//! shown. [`Hub::attach`], [`Hub::detach`], [`Hub::is_current`] and
//! [`Hub::touch`] are the service's view of it; [`Hub::begin_leaving`] and
//! [`Hub::move_supervisors`] are the stopping gateway's (no new stream, then
//! every attached supervisor is told `GatewayLeaving` and its stream ends).
//! Each registration also holds the stream's pending exec calls
//! ([`super::exec`]): they fail when it goes.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use pool::visibility::{IncarnationView, Viewer};
use proto::attach::refusal_status;
use proto::supervisor_host::{gateway_message, AttachRefusal, GatewayLeaving, GatewayMessage};
use tokio::sync::{mpsc, watch};
use tonic::Status;

use super::exec::PendingExec;
use super::Hub;

/// The sending half of one supervisor stream.
pub(super) type StreamTx = mpsc::Sender<Result<GatewayMessage, Status>>;

/// One attached supervisor stream.
pub(super) struct Attached {
    /// Unique per gateway process; tells a stream from its successor.
    pub(super) stream_id: u64,
    /// The member incarnation the stream was attached for.
    pub(super) incarnation: u64,
    /// When its last `HostStatus` arrived (this gateway's monotonic clock;
    /// never leaves it).
    pub(super) last_status: Instant,
    /// When the last heartbeat batch that named this incarnation and was
    /// written had been sampled (this gateway's monotonic clock): a member
    /// written at the previous tick is left out of this one
    /// ([`super::heartbeats`], "every other tick").
    pub(super) beat_written: Option<Instant>,
    /// When it attached (this gateway's monotonic clock).
    pub(super) attached_at: Instant,
    /// It attached with the incarnation it already had: it came from
    /// another gateway (sent away, or its stream broke).
    pub(super) reattached: bool,
    /// Where its messages go.
    pub(super) tx: StreamTx,
    /// Last view sent (without grants and log index), to send only changes.
    pub(super) shown: Option<Arc<IncarnationView>>,
    /// The applied index at which `shown` is known to be its view (sent
    /// then or confirmed unchanged then): the next push starts from there.
    pub(super) shown_at: u64,
    /// Log index of the last snapshot sent: an older one is never sent after
    /// it (two passes can run at once: one per applied batch, one per attach).
    pub(super) sent_log_index: u64,
    /// call id -> the exec waiting for its answer on this stream. Dropped
    /// with the registration, which fails every waiting exec (UNAVAILABLE).
    pub(super) execs: BTreeMap<u64, PendingExec>,
    /// Where the stream's request to drain its member on stop is
    /// ([`super::leave`]).
    pub(super) stop_drain: super::leave::StopDrain,
}

impl Attached {
    /// The stream as `pool::visibility` sees it.
    pub(super) fn viewer<'a>(&'a self, member: &'a str) -> Viewer<'a> {
        Viewer {
            member,
            incarnation: self.incarnation,
            shown: self.shown.as_deref(),
            shown_at: self.shown_at,
            sent_index: self.sent_log_index,
        }
    }
}

/// member id -> its current stream.
pub(super) struct Streams {
    /// A std lock: held for map operations only, never across an await.
    map: Mutex<BTreeMap<String, Attached>>,
    /// The next stream id.
    next_stream_id: AtomicU64,
    /// The next exec call id (unique per gateway process, so per stream).
    next_call_id: AtomicU64,
    /// The gateway is stopping: no new stream is registered. Written and
    /// read under the `map` lock where it matters (registration against
    /// [`Hub::move_supervisors`]), so no stream slips in after the move; a
    /// watch so that stream tasks can wait for the move
    /// ([`Hub::stop_phase`]).
    phase: watch::Sender<StopPhase>,
}

impl Default for Streams {
    fn default() -> Self {
        Streams {
            map: Mutex::new(BTreeMap::new()),
            next_stream_id: AtomicU64::new(1),
            next_call_id: AtomicU64::new(1),
            phase: watch::Sender::new(StopPhase::Serving),
        }
    }
}

/// Where a gateway's stop is, as its supervisor streams see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopPhase {
    /// Not stopping.
    Serving,
    /// New streams are refused; attached ones are served as before.
    Refusing,
    /// Attached streams were told `GatewayLeaving` and unregistered.
    Moved,
}

/// How long a stopping gateway waits to queue `GatewayLeaving` on a stream
/// whose buffer is full; the stream ends either way.
const LEAVING_SEND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

impl Streams {
    /// The map. A poisoned lock is recovered: the map holds no invariant a
    /// panic could break halfway (each operation is one insert or remove).
    pub(super) fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Attached>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A fresh exec call id.
    pub(super) fn next_call_id(&self) -> u64 {
        self.next_call_id.fetch_add(1, Ordering::Relaxed)
    }
}

/// `member`'s stream if it is still the one of `incarnation`. A snapshot or
/// a refusal computed for one incarnation must never reach the stream of
/// another: the stream map is read again after the state, and a newer
/// incarnation of the member may have attached in between (its grants would
/// name it for sandboxes the state gives to the old incarnation).
pub(super) fn stream_of<'a>(
    streams: &'a mut BTreeMap<String, Attached>,
    member: &str,
    incarnation: u64,
) -> Option<&'a mut Attached> {
    streams
        .get_mut(member)
        .filter(|a| a.incarnation == incarnation)
}

impl Hub {
    /// Registers a stream of `member` (`reattached`: with the incarnation
    /// it already had); a stream already attached for the member (an older
    /// one) is closed with ABORTED. Returns the stream id.
    ///
    /// # Errors
    /// [`Hub::leaving_status`] once the gateway is stopping.
    pub fn attach(
        &self,
        member: &str,
        incarnation: u64,
        reattached: bool,
        tx: StreamTx,
    ) -> Result<u64, Status> {
        let stream_id = self.streams.next_stream_id.fetch_add(1, Ordering::Relaxed);
        let old = {
            let mut streams = self.streams.lock();
            if *self.streams.phase.borrow() != StopPhase::Serving {
                return Err(self.leaving_status());
            }
            streams.insert(
                member.to_string(),
                Attached {
                    stream_id,
                    incarnation,
                    last_status: Instant::now(),
                    beat_written: None,
                    attached_at: Instant::now(),
                    reattached,
                    tx,
                    shown: None,
                    shown_at: 0,
                    sent_log_index: 0,
                    execs: BTreeMap::new(),
                    stop_drain: Default::default(),
                },
            )
        };
        if let Some(old) = old {
            tracing::info!(
                member,
                old_stream = old.stream_id,
                stream_id,
                "newer stream supersedes the older one"
            );
            let _ = old.tx.try_send(Err(Status::aborted(
                "superseded by a newer stream of this member",
            )));
        }
        self.push_snapshots();
        Ok(stream_id)
    }

    /// Whether the gateway is stopping (no new stream is accepted).
    pub fn is_leaving(&self) -> bool {
        *self.streams.phase.borrow() != StopPhase::Serving
    }

    /// Where the gateway's stop is, as a watch (stream tasks wait for
    /// [`StopPhase::Moved`]).
    pub fn stop_phase(&self) -> watch::Receiver<StopPhase> {
        self.streams.phase.subscribe()
    }

    /// What a stopping gateway answers a new stream: UNAVAILABLE with the
    /// typed refusal `GATEWAY_LEAVING`, which tells the supervisor to attach
    /// to another gateway at once (it says nothing of the incarnation).
    pub fn leaving_status(&self) -> Status {
        refusal_status(
            tonic::Code::Unavailable,
            format!(
                "gateway {} is shutting down; attach to another gateway",
                self.node.id()
            ),
            AttachRefusal::GatewayLeaving,
        )
    }

    /// The first step of a stop: new streams are refused from now on
    /// ([`Hub::leaving_status`]); attached ones keep being served.
    pub fn begin_leaving(&self) {
        let _streams = self.streams.lock();
        self.streams.phase.send_if_modified(|phase| {
            let serving = *phase == StopPhase::Serving;
            if serving {
                *phase = StopPhase::Refusing;
            }
            serving
        });
    }

    /// The second step of a stop: every attached stream is unregistered, sent
    /// `GatewayLeaving` as its last message and ended (OK status), so its
    /// supervisor attaches to another gateway at once with the incarnation
    /// it has; new streams are refused. Nothing here touches the pool: no
    /// member or incarnation is retired. Returns how many streams were told.
    pub fn move_supervisors(&self) -> usize {
        let moved: Vec<(String, Attached)> = {
            let mut streams = self.streams.lock();
            self.streams.phase.send_replace(StopPhase::Moved);
            std::mem::take(&mut *streams).into_iter().collect()
        };
        tell_to_move(
            moved,
            &format!("gateway {} is shutting down", self.node.id()),
        )
    }

    /// Unregisters every attached stream and sends each `GatewayLeaving`
    /// (`reason`) as its last message, as [`Hub::move_supervisors`] does,
    /// but keeps accepting new streams: for a gateway that cannot commit
    /// its supervisors' heartbeats ([`super::heartbeats`]), so that they
    /// attach where theirs can be written before their TTL runs out.
    /// Returns how many streams were told.
    pub fn send_supervisors_away(&self, reason: &str) -> usize {
        let moved: Vec<(String, Attached)> = std::mem::take(&mut *self.streams.lock())
            .into_iter()
            .collect();
        tell_to_move(moved, reason)
    }

    /// Tells the supervisors attached here to attach elsewhere (their
    /// heartbeats are not being written here), except those that came from
    /// another gateway less than `settled` ago; returns how many were told.
    /// A re-attached stream came because its previous gateway could not
    /// serve it: sending it on again at once turns one slow or electing
    /// group into every supervisor circling every gateway, each move a TLS
    /// handshake, a join and a full view on the next (the scale run's
    /// election storm at 2,000 supervisors, docs/benchmarks.md "Scale").
    /// If this gateway is really cut off, a later check moves them.
    pub fn send_settled_supervisors_away(&self, reason: &str, settled: Duration) -> usize {
        let moved: Vec<(String, Attached)> = {
            let mut streams = self.streams.lock();
            let leaving: Vec<String> = streams
                .iter()
                .filter(|(_, a)| !a.reattached || a.attached_at.elapsed() >= settled)
                .map(|(member, _)| member.clone())
                .collect();
            leaving
                .into_iter()
                .filter_map(|member| streams.remove(&member).map(|a| (member, a)))
                .collect()
        };
        tell_to_move(moved, reason)
    }

    /// Unregisters a stream (if it is still the member's current one).
    pub fn detach(&self, member: &str, stream_id: u64) {
        let mut streams = self.streams.lock();
        if streams.get(member).map(|a| a.stream_id) == Some(stream_id) {
            streams.remove(member);
        }
    }

    /// Whether `stream_id` is still `member`'s current stream.
    pub fn is_current(&self, member: &str, stream_id: u64) -> bool {
        self.streams.lock().get(member).map(|a| a.stream_id) == Some(stream_id)
    }

    /// A `HostStatus` arrived on the stream: recorded if `stream_id` is
    /// still `member`'s current stream; returns whether it is (what
    /// [`Hub::is_current`] tells, in the same lookup).
    pub fn touch(&self, member: &str, stream_id: u64) -> bool {
        match self
            .streams
            .lock()
            .get_mut(member)
            .filter(|a| a.stream_id == stream_id)
        {
            Some(a) => {
                a.last_status = Instant::now();
                true
            }
            None => false,
        }
    }

    /// A command of the stream was not applied (no leader, or its outcome
    /// is unknown): forget what the stream was shown, so the next push pass
    /// sends its whole view again, even if unchanged. A supervisor acks
    /// what a snapshot shows unacknowledged, so a lost `TermAck` is sent
    /// again instead of leaving the sandbox unacknowledged until its view
    /// happens to change.
    pub fn forget_shown(&self, member: &str, stream_id: u64) {
        if let Some(a) = self
            .streams
            .lock()
            .get_mut(member)
            .filter(|a| a.stream_id == stream_id)
        {
            a.shown = None;
            a.shown_at = 0;
            // Even if nothing applied next can change a plan.
            self.push_again
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Number of attached streams.
    pub fn attached(&self) -> usize {
        self.streams.lock().len()
    }
}

/// Sends each of `moved` (already unregistered) `GatewayLeaving` with
/// `reason` as its last message; returns how many.
fn tell_to_move(moved: Vec<(String, Attached)>, reason: &str) -> usize {
    let count = moved.len();
    for (member, attached) in moved {
        tracing::info!(
            member,
            stream_id = attached.stream_id,
            reason,
            "telling the supervisor to move"
        );
        let message = GatewayMessage {
            message: Some(gateway_message::Message::Leaving(GatewayLeaving {
                reason: reason.to_string(),
            })),
        };
        // The sender is dropped after the message is queued: the stream
        // then ends once the supervisor has read it.
        tokio::spawn(async move {
            let _ = tokio::time::timeout(LEAVING_SEND_TIMEOUT, attached.tx.send(Ok(message))).await;
        });
    }
    count
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attached(incarnation: u64) -> Attached {
        let (tx, _rx) = mpsc::channel(1);
        Attached {
            stream_id: 1,
            incarnation,
            last_status: Instant::now(),
            beat_written: None,
            attached_at: Instant::now(),
            reattached: false,
            tx,
            shown: None,
            shown_at: 0,
            sent_log_index: 0,
            execs: BTreeMap::new(),
            stop_drain: Default::default(),
        }
    }

    /// A snapshot computed for s1 incarnation 4 while incarnation 5
    /// attached (the jepsen pool smoke saw incarnation 5 receive term-1
    /// grants of sandboxes the state gave to incarnation 4): not delivered.
    #[test]
    fn a_view_reaches_only_the_stream_of_its_incarnation() {
        let mut streams = BTreeMap::from([("s1".to_string(), attached(5))]);
        assert!(stream_of(&mut streams, "s1", 4).is_none());
        assert!(stream_of(&mut streams, "s2", 5).is_none());
        assert_eq!(
            stream_of(&mut streams, "s1", 5).map(|a| a.incarnation),
            Some(5)
        );
    }
}
