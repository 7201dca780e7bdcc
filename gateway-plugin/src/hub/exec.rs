//! Exec over a supervisor's own stream. Gateways never dial supervisors: an
//! exec for a member whose stream is attached here goes out on that stream
//! as an `ExecCall` and comes back as `ExecResult` messages of the same
//! call id ([`Hub::exec_on_stream`], [`Hub::exec_result`]).
//!
//! Each attached stream keeps a table of its pending calls
//! ([`PendingExec`], in [`super::streams::Attached`]). The table lives and
//! dies with the stream's registration: when the stream ends, is superseded
//! or the gateway moves its supervisors away, the table is dropped and every
//! call still waiting fails at once with `UNAVAILABLE` ("supervisor
//! detached"). A call whose caller gives up is removed from the table.

use std::time::Duration;

use proto::supervisor_host::{gateway_message, ExecCall, ExecResult, GatewayMessage};
use tokio::sync::oneshot;
use tonic::Status;

use super::Hub;

/// How much longer than the exec's own timeout a gateway waits for the
/// supervisor's answer (the runtime kills the command at the timeout; this
/// covers the hops and the output's transfer).
pub const EXEC_ANSWER_MARGIN: Duration = Duration::from_secs(5);
/// How long queueing an `ExecCall` on a stream whose buffer is full may take.
const EXEC_SEND_TIMEOUT: Duration = Duration::from_secs(2);
/// Calls one stream may have pending at once (the supervisor runs at most
/// 16 and refuses the rest itself; this bounds the table).
pub const MAX_PENDING_PER_STREAM: usize = 64;

/// What an exec produced.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ExecOutcome {
    /// The command's exit code.
    pub exit_code: i32,
    /// Its stdout, at most [`proto::exec::OUTPUT_CAP`] bytes.
    pub stdout: Vec<u8>,
    /// Its stderr, at most [`proto::exec::OUTPUT_CAP`] bytes.
    pub stderr: Vec<u8>,
    /// stdout was cut at the cap.
    pub stdout_truncated: bool,
    /// stderr was cut at the cap.
    pub stderr_truncated: bool,
}

/// What the one exec waiting on a call id is told.
type Reply = oneshot::Sender<Result<ExecOutcome, Status>>;

/// A call sent on a stream, waiting for its `ExecResult` messages.
pub(super) struct PendingExec {
    /// Completed (or dropped with the stream: the waiter sees "detached").
    reply: Reply,
    /// The output received so far.
    so_far: ExecOutcome,
}

/// Appends `piece` to `buffer` up to the output cap; returns whether
/// anything had to be dropped.
fn append_capped(buffer: &mut Vec<u8>, piece: &[u8]) -> bool {
    let room = proto::exec::OUTPUT_CAP.saturating_sub(buffer.len());
    buffer.extend_from_slice(&piece[..piece.len().min(room)]);
    piece.len() > room
}

/// Removes a pending call from its stream's table when the waiting exec
/// ends for any reason (answered, timed out, or its caller went away).
struct PendingGuard<'a> {
    hub: &'a Hub,
    member: &'a str,
    stream_id: u64,
    call_id: u64,
}

impl Drop for PendingGuard<'_> {
    fn drop(&mut self) {
        if let Some(a) = self
            .hub
            .streams
            .lock()
            .get_mut(self.member)
            .filter(|a| a.stream_id == self.stream_id)
        {
            a.execs.remove(&self.call_id);
        }
    }
}

impl Hub {
    /// Runs `argv` in `sandbox` (held by `member` at `term`) on `member`'s
    /// stream, if that stream is attached to this gateway; `None` if it is
    /// not. Waits at most the exec's timeout plus [`EXEC_ANSWER_MARGIN`].
    ///
    /// # Errors
    /// The supervisor's own failure with its code (e.g. `FAILED_PRECONDITION`
    /// for another term); `UNAVAILABLE` when the stream ends before the
    /// answer; `DEADLINE_EXCEEDED` when no answer came in time;
    /// `RESOURCE_EXHAUSTED` when the stream has too many calls pending;
    /// `INVALID_ARGUMENT` for a timeout above the cap.
    pub async fn exec_on_stream(
        &self,
        member: &str,
        sandbox: &str,
        term: u64,
        argv: Vec<String>,
        timeout_ms: u64,
    ) -> Option<Result<ExecOutcome, Status>> {
        let effective = match proto::exec::check_timeout_ms(timeout_ms) {
            Ok(ms) => ms,
            Err(e) => return Some(Err(Status::invalid_argument(e))),
        };
        let call_id = self.streams.next_call_id();
        let (reply, answer) = oneshot::channel();
        let (tx, stream_id) = {
            let mut streams = self.streams.lock();
            let a = streams.get_mut(member)?;
            if a.execs.len() >= MAX_PENDING_PER_STREAM {
                return Some(Err(Status::resource_exhausted(format!(
                    "supervisor {member} has {MAX_PENDING_PER_STREAM} execs pending on this gateway; retry later"
                ))));
            }
            a.execs.insert(
                call_id,
                PendingExec {
                    reply,
                    so_far: ExecOutcome::default(),
                },
            );
            (a.tx.clone(), a.stream_id)
        };
        let _guard = PendingGuard {
            hub: self,
            member,
            stream_id,
            call_id,
        };
        let call = GatewayMessage {
            message: Some(gateway_message::Message::Exec(ExecCall {
                call_id,
                sandbox_id: sandbox.to_string(),
                term,
                argv,
                timeout_ms,
            })),
        };
        let detached = || {
            Status::unavailable(format!(
                "supervisor {member} detached before the exec finished; retry"
            ))
        };
        match tokio::time::timeout(EXEC_SEND_TIMEOUT, tx.send(Ok(call))).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => return Some(Err(detached())),
            Err(_) => {
                return Some(Err(Status::unavailable(format!(
                    "the stream of supervisor {member} is not draining; retry"
                ))))
            }
        }
        let wait = Duration::from_millis(effective) + EXEC_ANSWER_MARGIN;
        Some(match tokio::time::timeout(wait, answer).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(detached()),
            Err(_) => Err(Status::deadline_exceeded(format!(
                "supervisor {member} did not answer the exec within {} ms",
                wait.as_millis()
            ))),
        })
    }

    /// An `ExecResult` arrived on `member`'s stream `stream_id`: its output
    /// is added to the pending call (up to the cap), and the last message
    /// completes it. A result for no pending call (its caller gave up) is
    /// dropped.
    pub fn exec_result(&self, member: &str, stream_id: u64, result: ExecResult) {
        let mut streams = self.streams.lock();
        let Some(a) = streams.get_mut(member).filter(|a| a.stream_id == stream_id) else {
            return;
        };
        let Some(pending) = a.execs.get_mut(&result.call_id) else {
            tracing::debug!(
                member,
                call_id = result.call_id,
                "exec result for no pending call"
            );
            return;
        };
        let so_far = &mut pending.so_far;
        so_far.stdout_truncated |= append_capped(&mut so_far.stdout, &result.stdout);
        so_far.stderr_truncated |= append_capped(&mut so_far.stderr, &result.stderr);
        if result.partial {
            return;
        }
        let Some(pending) = a.execs.remove(&result.call_id) else {
            return;
        };
        let outcome = match &result.failure {
            Some(failure) => Err(proto::exec::failure_status(failure)),
            None => Ok(ExecOutcome {
                exit_code: result.exit_code,
                stdout_truncated: pending.so_far.stdout_truncated || result.stdout_truncated,
                stderr_truncated: pending.so_far.stderr_truncated || result.stderr_truncated,
                ..pending.so_far
            }),
        };
        let _ = pending.reply.send(outcome);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_beyond_the_cap_is_dropped_and_flagged() {
        let mut buffer = vec![0u8; proto::exec::OUTPUT_CAP - 3];
        assert!(!append_capped(&mut buffer, b"ab"));
        assert!(append_capped(&mut buffer, b"cd"));
        assert_eq!(buffer.len(), proto::exec::OUTPUT_CAP);
        assert!(append_capped(&mut buffer, b"e"));
        assert_eq!(buffer.len(), proto::exec::OUTPUT_CAP);
    }
}
