//! The bounds of `ExecSandbox` (`openshell-pool sandbox exec`), shared by
//! every hop so they agree: the CLI, the gateway's `PoolAdmin.ExecSandbox`
//! (and `PeerRelay.ExecOnStream`), the supervisor's handling of an `ExecCall`
//! on its stream and the runtime's `Exec` each refuse a timeout above
//! [`MAX_TIMEOUT_MS`] (never shorten it silently), and output beyond
//! [`OUTPUT_CAP`] per stream is cut with a `*_truncated` flag in every
//! response. On the supervisor stream the output travels in pieces of at
//! most [`STREAM_CHUNK`] bytes, so that no message of the stream comes near
//! its size limit; [`failure`] and [`failure_status`] carry a typed failure
//! (a gRPC code) across it.

use crate::supervisor_host::ExecFailure;

/// Longest timeout a request may ask for, ms.
pub const MAX_TIMEOUT_MS: u64 = 60_000;
/// Timeout of a request that gives none (`timeout_ms = 0`), ms.
pub const DEFAULT_TIMEOUT_MS: u64 = 10_000;
/// Bytes of stdout and of stderr kept; the rest is read and dropped, and
/// the response says so.
pub const OUTPUT_CAP: usize = 1 << 20;
/// Largest piece of output (stdout and stderr together) one `ExecResult`
/// message of the supervisor stream carries.
pub const STREAM_CHUNK: usize = 256 * 1024;

/// A failed exec as it crosses the supervisor stream or the peer relay:
/// the status code number and its message.
pub fn failure(status: &tonic::Status) -> ExecFailure {
    ExecFailure {
        code: status.code() as i32,
        message: status.message().to_string(),
    }
}

/// The status a received [`ExecFailure`] stands for (an unknown code number
/// reads as `UNKNOWN`).
pub fn failure_status(failure: &ExecFailure) -> tonic::Status {
    tonic::Status::new(tonic::Code::from(failure.code), failure.message.clone())
}

/// Checks a requested `timeout_ms` and returns the effective one in ms
/// (0 means [`DEFAULT_TIMEOUT_MS`]).
///
/// # Errors
/// A message naming the field, the CLI flag and the cap when `timeout_ms`
/// is above [`MAX_TIMEOUT_MS`].
pub fn check_timeout_ms(timeout_ms: u64) -> Result<u64, String> {
    match timeout_ms {
        0 => Ok(DEFAULT_TIMEOUT_MS),
        ms if ms <= MAX_TIMEOUT_MS => Ok(ms),
        ms => Err(format!(
            "timeout_ms {ms} is above the cap of {MAX_TIMEOUT_MS} ms (`openshell-pool sandbox exec --timeout-ms`); \
             ask for at most {MAX_TIMEOUT_MS}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_is_the_default_and_the_cap_is_refused_above() {
        assert_eq!(check_timeout_ms(0), Ok(DEFAULT_TIMEOUT_MS));
        assert_eq!(check_timeout_ms(5), Ok(5));
        assert_eq!(check_timeout_ms(MAX_TIMEOUT_MS), Ok(MAX_TIMEOUT_MS));
        let e = check_timeout_ms(MAX_TIMEOUT_MS + 1).unwrap_err();
        assert!(e.contains("60000") && e.contains("--timeout-ms"), "{e}");
    }

    #[test]
    fn a_failure_keeps_its_code_across_the_wire() {
        let status = tonic::Status::failed_precondition("term 3, asked for 2");
        let back = failure_status(&failure(&status));
        assert_eq!(back.code(), tonic::Code::FailedPrecondition);
        assert_eq!(back.message(), "term 3, asked for 2");
        let odd = ExecFailure {
            code: 99,
            message: "?".into(),
        };
        assert_eq!(failure_status(&odd).code(), tonic::Code::Unknown);
    }
}
