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
//!   of 20 execs at once 16 run and the rest are refused
//!   (`RESOURCE_EXHAUSTED`) while the member stays attached and active;
//!   the exec in flight when the supervisor stops fails `UNAVAILABLE` at
//!   once instead of hanging
//!
//! On a secure cluster (third case: TLS, a peer port with mutual TLS), an
//! exec through B is relayed to A over A's peer port and returns the
//! command's output.
//!
//! With bearer tokens configured (second case): the relay checks the
//! operator's token again, so an exec through B works only because B
//! forwards it; a viewer token is refused at B, and a relay call without a
//! token or with a viewer token is refused by the relay itself.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use proto::gateway::peer_relay_client::PeerRelayClient;
use proto::gateway::ExecOnStreamRequest;
use proto::pool_admin::pool_admin_client::PoolAdminClient;
use proto::pool_admin::{
    CreateSandboxRequest, ExecSandboxRequest, ExecSandboxResponse, GetSandboxRequest,
};
use proto::pool_types::SandboxPhase;
use testkit::gateway::{eventually, test_channel, Cluster, Gateway};
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
    // The stop below is the process going away (the exec on its stream must
    // fail at once), not a drain: the only member has nowhere to drain to
    // and would wait out its drain timeout (t41 covers the drain).
    supervisor.env.push((
        "OPENSHELL_SUPERVISOR_NO_DRAIN_ON_STOP".into(),
        "true".into(),
    ));
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

    eprintln!("--- step: 20 execs at once: 16 run, the rest are refused; s1 stays attached");
    let incarnation = member(&pool_status(&cluster).await?, "s1")
        .map(|m| m.incarnation)
        .ok_or("no member s1")?;
    let calls: Vec<_> = (0..20)
        .map(|_| {
            let addr = a.addr.clone();
            tokio::spawn(async move {
                let channel = test_channel(&addr, 2_000)
                    .await
                    .map_err(|e| e.to_string())?;
                let reply = PoolAdminClient::new(channel)
                    .exec_sandbox(ExecSandboxRequest {
                        sandbox_id: "sb-1".into(),
                        argv: vec!["sleep".into(), "5".into()],
                        timeout_ms: 12_000,
                    })
                    .await;
                Ok::<_, String>(reply.map(|r| r.into_inner().exit_code))
            })
        })
        .collect();
    let (mut ran, mut refused) = (0, 0);
    for call in calls {
        match call.await?? {
            Ok(0) => ran += 1,
            Err(status) if status.code() == Code::ResourceExhausted => refused += 1,
            other => return Err(format!("unexpected exec outcome: {other:?}").into()),
        }
    }
    eprintln!("{ran} ran, {refused} refused");
    assert!(
        ran >= 16 && refused >= 1 && ran + refused == 20,
        "{ran} ran, {refused} refused"
    );
    let after = pool_status(&cluster).await?;
    let s1 = member(&after, "s1").ok_or("no member s1")?;
    assert_eq!(
        (s1.state(), s1.incarnation),
        (proto::pool_types::MemberState::Active, incarnation),
        "s1 expired or re-joined while its execs ran"
    );

    eprintln!("--- step: the supervisor stops while an exec runs through B");
    let b_addr = b.addr.clone();
    let in_flight = tokio::spawn(async move {
        let channel = test_channel(&b_addr, 500)
            .await
            .map_err(|e| e.to_string())?;
        let started = Instant::now();
        let result = PoolAdminClient::new(channel)
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

/// `message` with `authorization: Bearer <token>`.
fn bearer<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Ok(value) = format!("Bearer {token}").parse() {
        request.metadata_mut().insert("authorization", value);
    }
    request
}

fn exec_request(argv: &[&str]) -> ExecSandboxRequest {
    ExecSandboxRequest {
        sandbox_id: "sb-1".into(),
        argv: argv.iter().map(|a| a.to_string()).collect(),
        timeout_ms: 10_000,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_checks_the_forwarded_operator_token() -> TestResult {
    let mut flags = timing(FAST_TIMING);
    flags.extend(["--admin-token", "adm-t34", "--viewer-token", "view-t34"]);
    // Not `three_gateways`: its leader wait reads the status without a
    // token. The create below retries until a leader admits it.
    let cluster = Cluster::start(3, &flags);
    let _cleanup = KillUnder(cluster.root.path().to_path_buf());
    let (a, b) = (cluster.get(1), cluster.get(2));
    let mut supervisor = Supervisor::new("s1", vec![a.addr.clone()], cluster.root.path());
    supervisor.start();
    let _logs = LogsOnFailure(std::slice::from_ref(&supervisor));

    eprintln!("--- step: a sandbox runs on s1 (attached to A)");
    // Ready: a gateway accepted the stream, so the member joined (a launch
    // admitted before that would be refused for good).
    eventually("s1 ready", || async {
        match supervisor.readyz().await {
            (200, _) => Ok(()),
            (code, body) => Err(format!("/readyz {code}: {body}").into()),
        }
    })
    .await;
    eventually("create sb-1 through A", || async {
        let create = CreateSandboxRequest {
            sandbox_id: "sb-1".into(),
            launch_id: String::new(),
            material_ref: "demo".into(),
            request_id: String::new(),
        };
        let mut admin_a = PoolAdminClient::new(test_channel(&a.addr, 500).await?);
        Ok(admin_a.create_sandbox(bearer(create, "adm-t34")).await?)
    })
    .await;
    eventually("sb-1 running", || async {
        let get = GetSandboxRequest {
            sandbox_id: "sb-1".into(),
            stale: false,
        };
        let mut admin_a = PoolAdminClient::new(test_channel(&a.addr, 500).await?);
        let sb = admin_a
            .get_sandbox(bearer(get, "adm-t34"))
            .await?
            .into_inner();
        if sb.phase() == SandboxPhase::Assigned && sb.acknowledged && sb.pid != 0 {
            Ok(())
        } else {
            Err(format!("not running yet: {sb:?}").into())
        }
    })
    .await;

    eprintln!("--- step: exec through B with the admin token (relayed with it)");
    let mut admin_b = PoolAdminClient::new(test_channel(&b.addr, 500).await?);
    let reply = admin_b
        .exec_sandbox(bearer(exec_request(&["printf", "via-b"]), "adm-t34"))
        .await?
        .into_inner();
    assert_eq!(
        (reply.exit_code, reply.stdout.as_slice()),
        (0, &b"via-b"[..])
    );

    eprintln!("--- step: a viewer token is refused at B");
    let refused = admin_b
        .exec_sandbox(bearer(exec_request(&["true"]), "view-t34"))
        .await
        .err()
        .ok_or("a viewer ran exec")?;
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused}");

    eprintln!("--- step: the relay itself refuses a call without a token or with a viewer one");
    let mut relay_a = PeerRelayClient::new(test_channel(&a.addr, 500).await?);
    let relayed = || ExecOnStreamRequest {
        member_id: "s1".into(),
        sandbox_id: "sb-1".into(),
        term: 1,
        argv: vec!["true".into()],
        timeout_ms: 5_000,
    };
    let refused = relay_a
        .exec_on_stream(relayed())
        .await
        .err()
        .ok_or("the relay ran an exec without a token")?;
    assert_eq!(refused.code(), Code::Unauthenticated, "{refused}");
    let refused = relay_a
        .exec_on_stream(bearer(relayed(), "view-t34"))
        .await
        .err()
        .ok_or("the relay ran an exec for a viewer")?;
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_secure_cluster_the_relay_goes_over_the_peer_port() -> TestResult {
    let cluster = Cluster::start_secure(3, &timing(FAST_TIMING));
    let _cleanup = KillUnder(cluster.root.path().to_path_buf());
    cluster.wait_leader("bootstrap").await;
    let material = cluster.material.as_ref().ok_or("no TLS material")?;
    let (a, b) = (cluster.get(1), cluster.get(2));
    let mut supervisor = Supervisor::new("s1", vec![a.addr.clone()], cluster.root.path());
    supervisor.env.push((
        "OPENSHELL_TLS_CA_FILE".into(),
        material.ca.cert.display().to_string(),
    ));
    supervisor.start();
    let _logs = LogsOnFailure(std::slice::from_ref(&supervisor));

    eprintln!("--- step: a sandbox runs on s1 (attached to A over TLS)");
    eventually("s1 ready", || async {
        match supervisor.readyz().await {
            (200, _) => Ok(()),
            (code, body) => Err(format!("/readyz {code}: {body}").into()),
        }
    })
    .await;
    eventually("create sb-1 through A", || async {
        let create = CreateSandboxRequest {
            sandbox_id: "sb-1".into(),
            launch_id: String::new(),
            material_ref: "demo".into(),
            request_id: String::new(),
        };
        let mut admin_a = PoolAdminClient::new(a.channel().await?);
        Ok(admin_a.create_sandbox(a.request(create)).await?)
    })
    .await;
    eventually("sb-1 running", || async {
        let get = GetSandboxRequest {
            sandbox_id: "sb-1".into(),
            stale: false,
        };
        let mut admin_a = PoolAdminClient::new(a.channel().await?);
        let sb = admin_a.get_sandbox(a.request(get)).await?.into_inner();
        if sb.phase() == SandboxPhase::Assigned && sb.acknowledged && sb.pid != 0 {
            Ok(())
        } else {
            Err(format!("not running yet: {sb:?}").into())
        }
    })
    .await;

    eprintln!("--- step: exec through B, relayed to A's peer port (mutual TLS)");
    let mut admin_b = PoolAdminClient::new(b.channel().await?);
    let reply = admin_b
        .exec_sandbox(b.request(exec_request(&["printf", "secure-b"])))
        .await?
        .into_inner();
    assert_eq!(
        (reply.exit_code, reply.stdout.as_slice()),
        (0, &b"secure-b"[..])
    );
    assert!(
        b.log()
            .contains("exec relayed to the gateway holding the stream"),
        "B did not relay"
    );
    Ok(())
}
