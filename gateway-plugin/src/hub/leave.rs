//! A supervisor that stops asks, on its own authenticated stream, to be
//! drained and then to leave the pool (docs/operations.md, "Stopping a
//! supervisor"):
//!
//! - `HostStatus.stopping`: [`Hub::request_stop_drain`] starts a drain
//!   operation for exactly the stream's member (`StartDrain`, the same
//!   command as the admin `pool drain`), audit-logged with the member as the
//!   caller. Idempotent: one proposal in flight per stream, none once a
//!   drain of the member runs; refused ones (no other eligible member yet,
//!   no leader) are retried after [`STOP_DRAIN_RETRY`].
//! - `HostLeave`: [`Hub::leave`] proposes `Leave` for the stream's member
//!   and incarnation, cancels the drain operation the stop started (so that
//!   a later process of the same member id joins in service, not drained),
//!   and answers `HostLeft`. A leave that was never heard (every gateway
//!   stopping at once) leaves the stop drain open: the next join of the
//!   member id closes it ([`Hub::close_stale_stop_drains`]).

use std::time::{Duration, Instant};

use pool::{Command, Effect, Outcome, Reason};
use proto::supervisor_host::{gateway_message, GatewayMessage, HostLeft};

use super::Hub;
use crate::audit::Record;

/// How long after a refused stop drain the next `HostStatus.stopping`
/// proposes it again (a replacement member may have joined since).
pub const STOP_DRAIN_RETRY: Duration = Duration::from_secs(2);

/// Most moves a stop drain runs at once: the drain must finish within the
/// supervisor's drain timeout (25 s by default), so it moves as many as the
/// pool allows ([`pool::MAX_PARALLEL_LIMIT`]).
pub const STOP_DRAIN_PARALLEL: u32 = pool::MAX_PARALLEL_LIMIT;

/// Where a stream's request to be drained is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) enum StopDrain {
    /// Not asked for (or not yet).
    #[default]
    Idle,
    /// A `StartDrain` proposal is in flight.
    Proposing,
    /// Refused or failed: asked again from this instant on.
    RetryAt(Instant),
    /// A drain of the member runs (or ran): nothing more to do.
    Started,
}

/// The id of the drain operation that the stop of `member`'s `incarnation`
/// starts: one per incarnation, so a repeat is `OperationExists`, and
/// [`Hub::leave`] finds it. Cut to the pool's id length.
pub fn stop_drain_id(member: &str, incarnation: u64) -> String {
    let mut id = format!("stop-{incarnation}-{member}");
    id.truncate(pool::ids::MAX_ID_LEN);
    id
}

impl Hub {
    /// `HostStatus.stopping` arrived on `member`'s stream `stream_id` (of
    /// `incarnation`): starts the stop drain unless it runs, is being
    /// proposed, or waits for its retry.
    pub fn request_stop_drain(
        self: &std::sync::Arc<Self>,
        member: &str,
        incarnation: u64,
        stream_id: u64,
    ) {
        {
            let mut streams = self.streams.lock();
            let Some(a) = streams.get_mut(member).filter(|a| a.stream_id == stream_id) else {
                return;
            };
            match a.stop_drain {
                StopDrain::Proposing | StopDrain::Started => return,
                StopDrain::RetryAt(at) if Instant::now() < at => return,
                StopDrain::Idle | StopDrain::RetryAt(_) => a.stop_drain = StopDrain::Proposing,
            }
        }
        let hub = self.clone();
        let member = member.to_string();
        tokio::spawn(async move {
            let next = hub.start_stop_drain(&member, incarnation).await;
            if let Some(a) = hub
                .streams
                .lock()
                .get_mut(&member)
                .filter(|a| a.stream_id == stream_id)
            {
                a.stop_drain = next;
            }
        });
    }

    /// Proposes the stop drain of `member`; returns where it is then.
    async fn start_stop_drain(&self, member: &str, incarnation: u64) -> StopDrain {
        let operation = stop_drain_id(member, incarnation);
        let record = Record::member(
            "pool.drain",
            member,
            &[("operation_id", &operation), ("member_id", member)],
        );
        let command = Command::StartDrain(pool::StartDrain {
            operation_id: operation.clone(),
            member: member.to_string(),
            max_parallel: STOP_DRAIN_PARALLEL,
        });
        let retry = StopDrain::RetryAt(Instant::now() + STOP_DRAIN_RETRY);
        match self.propose(&command).await {
            Ok(Outcome::Applied(effect)) => {
                tracing::info!(member, %operation, ?effect, "the supervisor is stopping: drain started");
                record.ok();
                match effect {
                    Effect::OperationFailed => retry,
                    _ => StopDrain::Started,
                }
            }
            // Asked already (this stream or the previous one of this
            // incarnation), or a drain of the member runs: idempotent.
            Ok(Outcome::Rejected(Reason::OperationExists(_) | Reason::OperationInProgress)) => {
                record.ok();
                StopDrain::Started
            }
            Ok(Outcome::Rejected(reason)) => {
                tracing::warn!(member, %operation, %reason, "the supervisor is stopping, but its drain was refused; retrying");
                let _ = record.finish::<()>(Err(crate::status::pool_rejection(&reason)));
                retry
            }
            Err(status) => {
                tracing::warn!(member, %operation, %status, "the supervisor is stopping; its drain could not be proposed; retrying");
                let _ = record.finish::<()>(Err(status));
                retry
            }
        }
    }

    /// `HostLeave` arrived on `member`'s stream `stream_id` (of
    /// `incarnation`): proposes `Leave`, cancels the stop drain, and answers
    /// `HostLeft` once the incarnation is out of the pool (left now, or
    /// retired already). On a failure (no leader) nothing is answered: the
    /// supervisor asks again.
    pub async fn leave(&self, member: &str, incarnation: u64, stream_id: u64) {
        let record = Record::member("pool.leave", member, &[("member_id", member)]);
        let command = Command::Leave(pool::Leave {
            member: member.to_string(),
            incarnation,
        });
        match self.propose(&command).await {
            Ok(Outcome::Applied(_) | Outcome::Rejected(Reason::IncarnationRetired)) => {
                record.ok();
            }
            Ok(Outcome::Rejected(reason)) => {
                tracing::warn!(member, incarnation, %reason, "supervisor leave refused");
                let _ = record.finish::<()>(Err(crate::status::pool_rejection(&reason)));
                return;
            }
            Err(status) => {
                tracing::warn!(member, incarnation, %status, "supervisor leave not applied");
                let _ = record.finish::<()>(Err(status));
                return;
            }
        }
        tracing::info!(member, incarnation, "the supervisor left the pool");
        self.cancel_stop_drain(member, incarnation).await;
        let tx = self
            .streams
            .lock()
            .get(member)
            .filter(|a| a.stream_id == stream_id)
            .map(|a| a.tx.clone());
        if let Some(tx) = tx {
            let left = GatewayMessage {
                message: Some(gateway_message::Message::Left(HostLeft {})),
            };
            let _ = tx.send(Ok(left)).await;
        }
    }

    /// Cancels the drain the stop of `member`'s `incarnation` started, if
    /// it has not ended otherwise: a succeeded drain would otherwise hold
    /// the member id out of service when a new process of it joins (the
    /// member is `leaving` now, which cancelling does not change).
    async fn cancel_stop_drain(&self, member: &str, incarnation: u64) {
        let operation = stop_drain_id(member, incarnation);
        if self.open_stop_drains(member).contains(&operation) {
            self.cancel_operation(member, operation).await;
        }
    }

    /// A new incarnation of `member` joined: cancels the stop drains of its
    /// earlier incarnations still open (their process stopped without its
    /// leave being heard, e.g. with every gateway stopping too), which
    /// would otherwise hold the member out of service. Its own stop drain,
    /// if any, is left alone.
    pub async fn close_stale_stop_drains(&self, member: &str, incarnation: u64) {
        let own = stop_drain_id(member, incarnation);
        for operation in self.open_stop_drains(member) {
            if operation != own {
                self.cancel_operation(member, operation).await;
            }
        }
    }

    /// The ids of the stop drains of `member` (any incarnation) that are
    /// queued, running or succeeded (a succeeded drain holds the member).
    fn open_stop_drains(&self, member: &str) -> Vec<String> {
        self.node.read_local(|state, _| {
            state
                .pool
                .operations()
                .values()
                .filter(|o| {
                    o.id.starts_with("stop-")
                        && matches!(&o.kind, pool::OperationKind::DrainMember { member: m } if m == member)
                        && matches!(
                            o.phase,
                            pool::OperationPhase::Queued
                                | pool::OperationPhase::Running
                                | pool::OperationPhase::Succeeded
                        )
                })
                .map(|o| o.id.clone())
                .collect()
        })
    }

    /// Cancels the stop drain `operation` of `member` (logged).
    async fn cancel_operation(&self, member: &str, operation: String) {
        let command = Command::CancelOperation(pool::CancelOperation {
            operation_id: operation.clone(),
        });
        match self.propose(&command).await {
            Ok(outcome) => {
                tracing::info!(member, %operation, ?outcome, "stop drain closed (its member left or re-joined)")
            }
            Err(status) => {
                tracing::warn!(member, %operation, %status, "stop drain not closed (cancel it with `pool cancel`)")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stop_drain_id_is_a_valid_pool_id() {
        assert_eq!(stop_drain_id("sup-a", 3), "stop-3-sup-a");
        let long = "m".repeat(128);
        let id = stop_drain_id(&long, u64::MAX);
        assert_eq!(id.len(), pool::ids::MAX_ID_LEN);
        assert!(pool::ids::check_id("operation_id", &id).is_ok());
    }
}
