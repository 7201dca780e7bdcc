//! `Exec`: runs one command for the active supervisor with captured output
//! and a timeout.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::workload::{isolated_command, kill_group};

/// Output cap per stream; the rest is read and dropped.
pub const OUTPUT_CAP: usize = 1 << 20;
/// Timeout when the request gives none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest timeout a request may ask for (longer ones are clamped).
pub const MAX_TIMEOUT: Duration = Duration::from_secs(60);
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
}

/// Why a command produced no [`ExecOutput`].
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The argv is empty.
    #[error("argv is empty")]
    EmptyArgv,
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
pub fn effective_timeout(timeout_ms: u64) -> Duration {
    if timeout_ms == 0 {
        DEFAULT_TIMEOUT
    } else {
        Duration::from_millis(timeout_ms).min(MAX_TIMEOUT)
    }
}

async fn read_capped(mut pipe: impl AsyncRead + Unpin) -> Vec<u8> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match pipe.read(&mut chunk).await {
            Ok(0) | Err(_) => return out,
            Ok(n) => {
                let room = OUTPUT_CAP.saturating_sub(out.len());
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
            None => Vec::new(),
        };
        let err = match stderr {
            Some(t) => t.await.unwrap_or_default(),
            None => Vec::new(),
        };
        (out, err)
    };
    tokio::pin!(collect);
    let (stdout, stderr) = match tokio::time::timeout_at(deadline, &mut collect).await {
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
                stderr: b"err\n".to_vec()
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
        assert_eq!(effective_timeout(0), DEFAULT_TIMEOUT);
        assert_eq!(effective_timeout(600_000), MAX_TIMEOUT);
        assert_eq!(effective_timeout(5), Duration::from_millis(5));
    }
}
