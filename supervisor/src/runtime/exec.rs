//! `Exec`: runs one command for the active supervisor with captured output
//! and a timeout. The bounds are `proto::exec`'s, the same at every hop: a
//! timeout above the cap is refused (never shortened), and output past the
//! cap is cut with a flag saying so.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::workload::{isolated_command, kill_group};

/// Output cap per stream; the rest is read and dropped (and flagged).
pub const OUTPUT_CAP: usize = proto::exec::OUTPUT_CAP;
/// Timeout when the request gives none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(proto::exec::DEFAULT_TIMEOUT_MS);
/// Longest timeout a request may ask for (longer ones are refused).
pub const MAX_TIMEOUT: Duration = Duration::from_millis(proto::exec::MAX_TIMEOUT_MS);
/// The argv[0] that runs `<current exe> demo-read`.
pub const DEMO_READ: &str = "demo-read";

/// A finished command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOutput {
    /// Exit code, or 128 + signal number when killed by a signal.
    pub exit_code: i32,
    /// Up to [`OUTPUT_CAP`] bytes of stdout.
    pub stdout: Vec<u8>,
    /// Up to [`OUTPUT_CAP`] bytes of stderr.
    pub stderr: Vec<u8>,
    /// stdout held more than [`OUTPUT_CAP`] bytes; the rest was dropped.
    pub stdout_truncated: bool,
    /// stderr held more than [`OUTPUT_CAP`] bytes; the rest was dropped.
    pub stderr_truncated: bool,
}

/// Why a command produced no [`ExecOutput`].
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The argv is empty.
    #[error("argv is empty")]
    EmptyArgv,
    /// The requested timeout is above [`MAX_TIMEOUT`].
    #[error("{0}")]
    TimeoutAboveCap(String),
    /// The program could not be started.
    #[error("cannot start {program:?}: {error}")]
    Spawn {
        /// argv[0].
        program: String,
        /// The OS error.
        error: std::io::Error,
    },
    /// The command ran past its timeout and was killed.
    #[error("command {program:?} did not finish within {timeout:?}; killed")]
    Timeout {
        /// argv[0].
        program: String,
        /// The effective timeout.
        timeout: Duration,
    },
    /// Waiting for the command failed.
    #[error("waiting for {program:?}: {error}")]
    Wait {
        /// argv[0].
        program: String,
        /// The OS error.
        error: std::io::Error,
    },
}

/// The effective timeout for a requested `timeout_ms` (0 = default).
///
/// # Errors
/// [`ExecError::TimeoutAboveCap`] above [`MAX_TIMEOUT`], naming the cap.
pub fn effective_timeout(timeout_ms: u64) -> Result<Duration, ExecError> {
    proto::exec::check_timeout_ms(timeout_ms)
        .map(Duration::from_millis)
        .map_err(ExecError::TimeoutAboveCap)
}

/// Reads a pipe to its end, keeping [`OUTPUT_CAP`] bytes; `true` when more
/// came (and was dropped).
async fn read_capped(mut pipe: impl AsyncRead + Unpin) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut truncated = false;
    let mut chunk = [0u8; 8192];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return (out, truncated),
            Ok(n) => {
                let room = OUTPUT_CAP.saturating_sub(out.len());
                truncated |= n > room;
                out.extend_from_slice(&chunk[..n.min(room)]);
            }
        }
    }
}

fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(-1)
}

/// Runs `argv` in its own process group with `env` added, capturing output.
/// argv[0] [`DEMO_READ`] runs `<exe> demo-read`.
///
/// # Errors
/// See [`ExecError`].
pub async fn run(
    argv: &[String],
    env: &[(&str, String)],
    timeout: Duration,
    exe: &Path,
) -> Result<ExecOutput, ExecError> {
    let (program, args) = argv.split_first().ok_or(ExecError::EmptyArgv)?;
    let mut cmd = if program == DEMO_READ {
        isolated_command(exe, argv)
    } else {
        isolated_command(Path::new(program), args)
    };
    cmd.envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let mut child = cmd.spawn().map_err(|error| ExecError::Spawn {
        program: program.clone(),
        error,
    })?;
    let pid = child.id();
    let stdout = child.stdout.take().map(|p| tokio::spawn(read_capped(p)));
    let stderr = child.stderr.take().map(|p| tokio::spawn(read_capped(p)));
    let deadline = tokio::time::Instant::now() + timeout;
    let status = match tokio::time::timeout_at(deadline, child.wait()).await {
        Ok(status) => status.map_err(|error| ExecError::Wait {
            program: program.clone(),
            error,
        })?,
        Err(_) => {
            if let Some(pid) = pid {
                kill_group(pid, libc::SIGKILL);
            }
            let _ = child.kill().await;
            for reader in [stdout, stderr].into_iter().flatten() {
                reader.abort();
            }
            return Err(ExecError::Timeout {
                program: program.clone(),
                timeout,
            });
        }
    };
    // Background processes of the command may still hold the pipes open:
    // give them until the deadline, then kill the group.
    let collect = async {
        let out = match stdout {
            Some(t) => t.await.unwrap_or_default(),
            None => (Vec::new(), false),
        };
        let err = match stderr {
            Some(t) => t.await.unwrap_or_default(),
            None => (Vec::new(), false),
        };
        (out, err)
    };
    tokio::pin!(collect);
    let ((stdout, stdout_truncated), (stderr, stderr_truncated)) =
        match tokio::time::timeout_at(deadline, &mut collect).await {
            Ok(v) => v,
            Err(_) => {
                if let Some(pid) = pid {
                    kill_group(pid, libc::SIGKILL);
                }
                collect.await
            }
        };
    Ok(ExecOutput {
        exit_code: exit_code(status),
        stdout,
        stderr,
        stdout_truncated,
        stderr_truncated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[tokio::test]
    async fn captures_output_exit_code_and_env() {
        let out = run(
            &argv(&["sh", "-c", "echo out $X; echo err >&2; exit 3"]),
            &[("X", "42".into())],
            Duration::from_secs(5),
            Path::new("/nonexistent"),
        )
        .await;
        let out = out.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            out,
            ExecOutput {
                exit_code: 3,
                stdout: b"out 42\n".to_vec(),
                stderr: b"err\n".to_vec(),
                stdout_truncated: false,
                stderr_truncated: false,
            }
        );
    }

    #[tokio::test]
    async fn caps_output_and_times_out() {
        let out = run(
            &argv(&["sh", "-c", "head -c 2000000 /dev/zero"]),
            &[],
            Duration::from_secs(10),
            Path::new("/"),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out.stdout.len(), OUTPUT_CAP);
        assert!(out.stdout_truncated && !out.stderr_truncated);
        let started = std::time::Instant::now();
        let err = run(
            &argv(&["sleep", "5"]),
            &[],
            Duration::from_millis(200),
            Path::new("/"),
        )
        .await;
        assert!(matches!(err, Err(ExecError::Timeout { .. })), "{err:?}");
        assert!(started.elapsed() < Duration::from_secs(3));
        assert!(matches!(
            run(&[], &[], DEFAULT_TIMEOUT, Path::new("/")).await,
            Err(ExecError::EmptyArgv)
        ));
        assert!(matches!(
            run(
                &argv(&["/nonexistent/program"]),
                &[],
                DEFAULT_TIMEOUT,
                Path::new("/")
            )
            .await,
            Err(ExecError::Spawn { .. })
        ));
        assert_eq!(effective_timeout(0).ok(), Some(DEFAULT_TIMEOUT));
        assert!(matches!(
            effective_timeout(600_000),
            Err(ExecError::TimeoutAboveCap(_))
        ));
        assert_eq!(effective_timeout(60_000).ok(), Some(MAX_TIMEOUT));
        assert_eq!(effective_timeout(5).ok(), Some(Duration::from_millis(5)));
    }
}
