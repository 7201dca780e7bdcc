//! Gateways never dial supervisors: exec travels on the supervisor's own
//! stream (issue 13).
//!
//! - given: three gateways (A, B, C), one supervisor attached to A only,
//!   a running demo sandbox
//! - when: exec runs through B (which relays to A over
//!   `PeerRelay.ExecOnStream`) and through A (which holds the stream);
//!   the relay is asked with a wrong term; the supervisor is stopped while
//!   an exec runs
//! - then: both execs return the command's exit code, stdout and stderr
//!   (1 MiB of output arrives whole, cut and flagged); the supervisor
//!   process listens on no TCP port but its HTTP one; a wrong term is
//!   `FAILED_PRECONDITION`, a gateway without the stream says `NOT_FOUND`;
//!   the exec in flight when the supervisor stops fails `UNAVAILABLE` at
//!   once instead of hanging

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use proto::gateway::peer_relay_client::PeerRelayClient;
use proto::gateway::ExecOnStreamRequest;
use proto::pool_admin::{ExecSandboxRequest, ExecSandboxResponse};
use testkit::gateway::{test_channel, Gateway};
use testkit::supervisor::*;
use testkit::TestResult;
use tonic::Code;

/// The TCP ports process `pid` listens on: the LISTEN entries of
/// /proc/<pid>/net/tcp{,6} whose socket inode is one of its open fds.
fn listening_ports(pid: u32) -> TestResult<BTreeSet<u16>> {
    let mut inodes = BTreeSet::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        let target = std::fs::read_link(fd?.path())?;
        let target = target.to_string_lossy();
        if let Some(inode) = target
            .strip_prefix("socket:[")
            .and_then(|t| t.strip_suffix(']'))
        {
            inodes.insert(inode.to_string());
        }
    }
    let mut ports = BTreeSet::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}"))?;
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local_address, state (0A = LISTEN), ..., inode (10th field).
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            if *state != "0A" || !inodes.contains(*inode) {
                continue;
            }
            if let Some(port) = local.rsplit(':').next() {
                ports.insert(u16::from_str_radix(port, 16)?);
            }
        }
    }
    Ok(ports)
}

async fn exec(
    gateway: &Gateway,
    argv: &[&str],
    timeout_ms: u64,
) -> Result<ExecSandboxResponse, tonic::Status> {
    let mut client = pool_admin(gateway)
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    client
        .exec_sandbox(ExecSandboxRequest {
            sandbox_id: "sb-1".into(),
            argv: argv.iter().map(|a| a.to_string()).collect(),
            timeout_ms,
        })
        .await
        .map(tonic::Response::into_inner)
}

/// `PeerRelay.ExecOnStream` of `true` on `gateway`: the exec's status code
/// (its `failure`, or OK), or the call's own error code.
async fn relay(gateway: &Gateway, term: u64) -> TestResult<Result<i32, Code>> {
    let channel = test_channel(&gateway.addr, 500).await?;
    let reply = PeerRelayClient::new(channel)
        .exec_on_stream(ExecOnStreamRequest {
            member_id: "s1".into(),
            sandbox_id: "sb-1".into(),
            term,
            argv: vec!["true".into()],
            timeout_ms: 5_000,
        })
        .await;
    Ok(reply
        .map(|r| {
            r.into_inner()
                .failure
                .map(|f| f.code)
                .unwrap_or(Code::Ok as i32)
        })
        .map_err(|status| status.code()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_travels_on_the_supervisor_stream_through_any_gateway() -> TestResult {
    let (cluster, gateways, _cleanup) = three_gateways(&timing(FAST_TIMING)).await;
    let mut supervisor = Supervisor::new("s1", vec![gateways[0].clone()], cluster.root.path());
    supervisor.start();
    let _logs = LogsOnFailure(std::slice::from_ref(&supervisor));
    wait_member(&cluster, "s1", "active").await;
    let sandbox = running_sandbox(&cluster, "sb-1").await;
    let (a, b) = (cluster.get(1), cluster.get(2));

    eprintln!("--- step: exec through B (the stream is attached to A)");
    let script = "printf out-b; printf err-b >&2; exit 3";
    let reply = exec(b, &["sh", "-c", script], 10_000).await?;
    assert_eq!(reply.exit_code, 3, "{reply:?}");
    assert_eq!(reply.stdout, b"out-b", "{reply:?}");
    assert_eq!(reply.stderr, b"err-b", "{reply:?}");
    assert_eq!(reply.executed_by, "s1");
    assert_eq!(reply.term, sandbox.term);

    eprintln!("--- step: exec through A (which holds the stream)");
    let reply = exec(a, &["sh", "-c", "printf out-a"], 10_000).await?;
    assert_eq!(
        (reply.exit_code, reply.stdout.as_slice()),
        (0, &b"out-a"[..])
    );

    eprintln!("--- step: 1.5 MB of stdout through B arrives cut at 1 MiB and flagged");
    let big = "head -c 1500000 /dev/zero; printf tail >&2";
    let reply = exec(b, &["sh", "-c", big], 10_000).await?;
    assert_eq!(reply.stdout.len(), proto::exec::OUTPUT_CAP);
    assert!(reply.stdout_truncated && !reply.stderr_truncated, "flags");
    assert_eq!(reply.stderr, b"tail");

    eprintln!("--- step: the supervisor listens on its HTTP port only");
    let pid = supervisor.pid().ok_or("supervisor not running")?;
    let http_port: u16 = supervisor
        .http
        .rsplit(':')
        .next()
        .ok_or("http address")?
        .parse()?;
    let ports = listening_ports(pid)?;
    assert_eq!(
        ports,
        BTreeSet::from([http_port]),
        "the supervisor listens on more than its HTTP port"
    );

    eprintln!("--- step: a wrong term is FAILED_PRECONDITION; B has no stream: NOT_FOUND");
    let wrong = relay(a, sandbox.term + 1).await?;
    assert_eq!(wrong, Ok(Code::FailedPrecondition as i32), "{wrong:?}");
    let right = relay(a, sandbox.term).await?;
    assert_eq!(right, Ok(Code::Ok as i32), "{right:?}");
    let elsewhere = relay(b, sandbox.term).await?;
    assert_eq!(elsewhere, Err(Code::NotFound), "{elsewhere:?}");

    eprintln!("--- step: the supervisor stops while an exec runs through B");
    let b_addr = b.addr.clone();
    let in_flight = tokio::spawn(async move {
        let channel = test_channel(&b_addr, 500)
            .await
            .map_err(|e| e.to_string())?;
        let started = Instant::now();
        let result = proto::pool_admin::pool_admin_client::PoolAdminClient::new(channel)
            .exec_sandbox(ExecSandboxRequest {
                sandbox_id: "sb-1".into(),
                argv: vec!["sleep".into(), "30".into()],
                timeout_ms: 40_000,
            })
            .await;
        Ok::<_, String>((result.map(|r| r.into_inner().exit_code), started.elapsed()))
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!in_flight.is_finished(), "the sleep finished early");
    supervisor.signal("-TERM");
    let (result, took) = tokio::time::timeout(Duration::from_secs(20), in_flight)
        .await
        .map_err(|_| "the exec hung after the supervisor stopped")???;
    let status = result
        .err()
        .ok_or("the exec succeeded without its supervisor")?;
    assert_eq!(status.code(), Code::Unavailable, "{status}");
    assert!(
        took < Duration::from_secs(12),
        "the exec failed only after {took:?}"
    );
    eprintln!("exec in flight failed {took:?} after it started: {status}");
    Ok(())
}
