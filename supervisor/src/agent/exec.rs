//! Exec over the supervisor's own stream: an `ExecCall` a gateway sends on
//! the attached stream runs in the sandbox's runtime through this
//! supervisor's session, only for the term the gateway names, and its
//! answer goes back on the same stream as `ExecResult` messages (the output
//! in pieces of at most [`proto::exec::STREAM_CHUNK`] bytes, then the
//! outcome). Gateways never dial supervisors: this process opens no inbound
//! gRPC port, and only the gateway that accepted its authenticated stream
//! can ask it anything.
//!
//! Each call runs in its own task, so the stream reader and the heartbeats
//! never wait for a command; at most [`MAX_CONCURRENT_EXECS`] run at once,
//! and a call beyond that is refused at once with `RESOURCE_EXHAUSTED`.

use std::sync::Arc;

use proto::sandbox_runtime::{ExecRequest, ExecResponse};
use proto::supervisor_host::{supervisor_message, ExecCall, ExecResult, SupervisorMessage};
use tokio::sync::{mpsc, Semaphore};
use tonic::Status;
use tracing::Instrument;

use super::Agent;

/// Execs one supervisor runs at once; the next is refused with
/// `RESOURCE_EXHAUSTED` (each holds a runtime call and up to 2 MiB of
/// output).
pub const MAX_CONCURRENT_EXECS: usize = 16;

/// The slots of [`MAX_CONCURRENT_EXECS`].
pub fn slots() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(MAX_CONCURRENT_EXECS))
}

/// Starts `call` (received on the stream whose sender is `tx`) in its own
/// task; its answer goes to `tx`. Returns at once.
pub fn spawn(agent: &Arc<Agent>, tx: mpsc::Sender<SupervisorMessage>, call: ExecCall) {
    let span = tracing::info_span!("exec", sandbox = %call.sandbox_id, call_id = call.call_id);
    let permit = agent.exec_slots.clone().try_acquire_owned();
    let agent = agent.clone();
    tokio::spawn(
        async move {
            let call_id = call.call_id;
            let outcome = match permit {
                Ok(_permit) => run(&agent, call).await,
                Err(_) => Err(Status::resource_exhausted(format!(
                    "supervisor {} already runs {MAX_CONCURRENT_EXECS} execs; retry later",
                    agent.config.member_id
                ))),
            };
            if let Err(status) = &outcome {
                tracing::info!(%status, "exec failed");
            }
            for message in answer(call_id, outcome) {
                let message = SupervisorMessage {
                    message: Some(supervisor_message::Message::ExecResult(message)),
                };
                // The stream ended: the gateway fails the call itself.
                if tx.send(message).await.is_err() {
                    return;
                }
            }
        }
        .instrument(span),
    );
}

/// Runs `call` in the sandbox's runtime.
async fn run(agent: &Agent, call: ExecCall) -> Result<ExecResponse, Status> {
    if call.argv.is_empty() {
        return Err(Status::invalid_argument("argv is empty"));
    }
    // Refused here too (not only by the runtime): a timeout is never
    // shortened silently at any hop.
    proto::exec::check_timeout_ms(call.timeout_ms).map_err(Status::invalid_argument)?;
    let (runtime, token, term) = {
        let sessions = Agent::lock(&agent.sessions);
        let session = sessions.get(&call.sandbox_id).ok_or_else(|| {
            Status::failed_precondition(format!("no session for sandbox {}", call.sandbox_id))
        })?;
        (session.runtime.clone(), session.token.clone(), session.term)
    };
    if term != call.term {
        return Err(Status::failed_precondition(format!(
            "this supervisor holds term {term} of sandbox {}, the gateway asked for term {}",
            call.sandbox_id, call.term
        )));
    }
    let mut runtime = super::session::runtime_client(agent, &runtime).await?;
    let reply = runtime
        .exec(ExecRequest {
            session_token: token,
            argv: call.argv,
            timeout_ms: call.timeout_ms,
        })
        .await?
        .into_inner();
    Ok(reply)
}

/// The `ExecResult` messages of one call: the output (each cut at
/// [`proto::exec::OUTPUT_CAP`], as the runtime already does) in pieces of at
/// most [`proto::exec::STREAM_CHUNK`] bytes, the last message with the
/// outcome; or one message with the failure.
fn answer(call_id: u64, outcome: Result<ExecResponse, Status>) -> Vec<ExecResult> {
    let reply = match outcome {
        Ok(reply) => reply,
        Err(status) => {
            return vec![ExecResult {
                call_id,
                failure: Some(proto::exec::failure(&status)),
                ..Default::default()
            }]
        }
    };
    let cap = proto::exec::OUTPUT_CAP;
    let stdout_cut = reply.stdout.len() > cap;
    let stderr_cut = reply.stderr.len() > cap;
    let stdout = &reply.stdout[..reply.stdout.len().min(cap)];
    let stderr = &reply.stderr[..reply.stderr.len().min(cap)];
    let chunk = proto::exec::STREAM_CHUNK;
    let mut messages = Vec::new();
    let (mut out, mut err) = (stdout, stderr);
    loop {
        let take_out = out.len().min(chunk);
        let take_err = err.len().min(chunk - take_out);
        let (piece_out, rest_out) = out.split_at(take_out);
        let (piece_err, rest_err) = err.split_at(take_err);
        (out, err) = (rest_out, rest_err);
        let last = out.is_empty() && err.is_empty();
        messages.push(ExecResult {
            call_id,
            stdout: piece_out.to_vec(),
            stderr: piece_err.to_vec(),
            partial: !last,
            ..Default::default()
        });
        if last {
            break;
        }
    }
    if let Some(final_message) = messages.last_mut() {
        final_message.exit_code = reply.exit_code;
        final_message.stdout_truncated = reply.stdout_truncated || stdout_cut;
        final_message.stderr_truncated = reply.stderr_truncated || stderr_cut;
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;

    fn joined(messages: &[ExecResult]) -> (Vec<u8>, Vec<u8>) {
        let mut out = Vec::new();
        let mut err = Vec::new();
        for m in messages {
            out.extend_from_slice(&m.stdout);
            err.extend_from_slice(&m.stderr);
        }
        (out, err)
    }

    #[test]
    fn output_travels_in_bounded_pieces_and_the_last_carries_the_outcome() {
        let stdout: Vec<u8> = (0..proto::exec::OUTPUT_CAP).map(|i| i as u8).collect();
        let stderr = vec![7u8; 300_000];
        let reply = ExecResponse {
            exit_code: 3,
            stdout: stdout.clone(),
            stderr: stderr.clone(),
            stdout_truncated: true,
            stderr_truncated: false,
        };
        let messages = answer(9, Ok(reply));
        assert!(messages.len() > 1);
        for m in &messages {
            assert_eq!(m.call_id, 9);
            assert!(m.stdout.len() + m.stderr.len() <= proto::exec::STREAM_CHUNK);
            assert!(m.failure.is_none());
        }
        let (last, pieces) = messages.split_last().expect("messages");
        assert!(pieces.iter().all(|m| m.partial && m.exit_code == 0));
        assert!(!last.partial);
        assert_eq!(last.exit_code, 3);
        assert!(last.stdout_truncated && !last.stderr_truncated);
        assert_eq!(joined(&messages), (stdout, stderr));
    }

    #[test]
    fn empty_output_is_one_message_and_a_failure_keeps_its_code() {
        let messages = answer(1, Ok(ExecResponse::default()));
        assert_eq!(messages.len(), 1);
        assert!(!messages[0].partial);
        let messages = answer(2, Err(Status::failed_precondition("term 3, asked 2")));
        assert_eq!(messages.len(), 1);
        let failure = messages[0].failure.as_ref().expect("failure");
        assert_eq!(
            proto::exec::failure_status(failure).code(),
            tonic::Code::FailedPrecondition
        );
    }

    fn agent() -> Agent {
        crate::agent::test_agent()
    }

    fn call(term: u64, timeout_ms: u64) -> ExecCall {
        ExecCall {
            call_id: 1,
            sandbox_id: "sb-1".into(),
            term,
            argv: vec!["true".into()],
            timeout_ms,
        }
    }

    /// The supervisor's own hop refuses a timeout above the cap (it used to
    /// be `SupervisorControl.Exec`, which `t65_exec_bounds` called; that
    /// port is gone, so the hop is checked here).
    #[tokio::test]
    async fn a_timeout_above_the_cap_is_refused_and_an_unknown_sandbox_is_a_precondition() {
        let agent = agent();
        let refused = run(&agent, call(1, 120_000)).await.expect_err("120 s");
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused}");
        assert!(refused.message().contains("60000"), "{refused}");
        let refused = run(&agent, call(1, 1_000)).await.expect_err("no session");
        assert_eq!(refused.code(), tonic::Code::FailedPrecondition, "{refused}");
    }

    #[test]
    fn oversized_output_is_cut_at_the_cap_and_flagged() {
        let reply = ExecResponse {
            stdout: vec![1u8; proto::exec::OUTPUT_CAP + 10],
            ..Default::default()
        };
        let messages = answer(4, Ok(reply));
        let (out, _) = joined(&messages);
        assert_eq!(out.len(), proto::exec::OUTPUT_CAP);
        assert!(messages.last().is_some_and(|m| m.stdout_truncated));
    }
}
