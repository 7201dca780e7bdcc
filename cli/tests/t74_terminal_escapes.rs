//! No terminal escape reaches an operator's screen (issue 32, item 4): the
//! CLI's human-readable output escapes every control character a gateway
//! sends, so a field can neither drive the terminal nor forge a row.
//!
//! - given: one gateway whose pool holds a member with ESC, CR, LF and NUL
//!   in its uid and address, a sandbox whose failure holds an OSC title
//!   sequence, CR and LF, and an operation whose id holds ESC, CR and LF.
//!   The API now refuses such fields (t113), so they are written the way
//!   state from before that check is reached: pool commands forwarded to
//!   the leader over the raft transport, past the API (an `--insecure`
//!   gateway serves it on its one port)
//! - when: `pool status`, `sandbox list`, `raft status`, `pool status
//!   --watch` (piped), `pool status -o json`, an error that echoes a
//!   hostile operation id, and a flag value clap refuses
//! - then: no output holds a control character other than its own line
//!   ends (nor a bidi override); the hostile fields are shown escaped
//!   (`\u{1b}[2J`, `\r\n`), each member, sandbox and operation is one row,
//!   and no line starts with the forged text; `-o json` still carries the
//!   exact strings (a JSON parser reads them back unchanged)

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command as Process, Stdio};

use common::cli::{pool, pool_bin};
use prost::Message;
use proto::gateway::{log_command, LogCommand};
use proto::pool_admin::CreateSandboxRequest;
use proto::raft::raft_transport_client::RaftTransportClient;
use proto::raft::ForwardRequest;
use testkit::gateway::{Cluster, Gateway};
use testkit::supervisor::pool_admin;
use testkit::TestResult;

const UID: &str = "uid\u{1b}[31m\0red";
const ADDRESS: &str = "10.0.0.9:1\r\nFORGED  active  9  0  1  x\u{1b}[2J";
const FAILURE: &str = "LaunchFailed: \u{1b}]0;pwned\u{7}\r\nFORGED\u{202e}desrever";
const OPERATION: &str = "op\u{1b}[2J\r\nFORGED";

/// Proposes `command` through the leader's raft transport, past the API.
async fn forward(node: &Gateway, command: pool::Command) -> TestResult {
    let channel = testkit::gateway::test_channel(&node.addr, 2000).await?;
    let entry = LogCommand {
        command: Some(log_command::Command::Pool(command.encode_to_vec())),
        ..LogCommand::default()
    };
    RaftTransportClient::new(channel)
        .forward(ForwardRequest {
            command: entry.encode_to_vec(),
            cluster_id: "test".into(),
            target_node_id: 0,
        })
        .await?;
    Ok(())
}

/// Asserts `text` (what `what` printed) holds no character a terminal acts
/// on but line ends.
fn assert_inert(what: &str, text: &str) {
    if let Some(c) = text
        .chars()
        .find(|c| *c != '\n' && proto::text::is_unsafe(*c))
    {
        panic!("{what} printed the raw character {c:?}:\n{text}");
    }
    assert!(
        !text.lines().any(|l| l.starts_with("FORGED")),
        "{what} printed a forged row:\n{text}"
    );
}

/// The first `--watch` round of `pool status` (piped: a `--- <ms>` line,
/// then the tables), read until the operations table's row, then stopped.
fn watch_once(endpoints: &str) -> TestResult<String> {
    let mut child = Process::new(pool_bin())
        .args(["--insecure", "--endpoints", endpoints])
        .args(["pool", "status", "--watch", "--interval", "250"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut seen = String::new();
    let mut in_operations = false;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        seen.push_str(&line);
        seen.push('\n');
        if in_operations && line.starts_with("op") {
            break;
        }
        in_operations |= line.starts_with("OPERATION");
    }
    let _ = child.kill();
    let _ = child.wait();
    Ok(seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_fields_are_escaped_in_every_text_output() -> TestResult {
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        "[openshell.gateway.supervisor_pool]\nheartbeat_ttl_ms = 60000\n",
    )?;
    let config = config.display().to_string();
    let cluster = Cluster::start(1, &["--sandbox-driver", "none", "--config", &config]);
    cluster.wait_leader("bootstrap").await;
    let node = cluster.get(1);
    let endpoints = node.addr.clone();

    eprintln!("--- step: hostile fields written past the API");
    forward(
        node,
        pool::Command::Join(pool::Join {
            member: "m-evil".into(),
            uid: UID.into(),
            address: ADDRESS.into(),
            capacity: 4,
            process_id: 1,
            ..pool::Join::default()
        }),
    )
    .await?;
    let created = pool_admin(node)
        .await?
        .create_sandbox(CreateSandboxRequest {
            sandbox_id: "sb-1".into(),
            material_ref: "demo".into(),
            ..CreateSandboxRequest::default()
        })
        .await?
        .into_inner();
    forward(
        node,
        pool::Command::FailLaunch(pool::FailLaunch {
            sandbox: "sb-1".into(),
            generation: created.generation,
            reason: FAILURE.into(),
            // Unfenced, as an entry written before fencing (pool::fence).
            raft_term: 0,
        }),
    )
    .await?;
    forward(
        node,
        pool::Command::StartRebalance(pool::StartRebalance {
            operation_id: OPERATION.into(),
            max_parallel: 1,
        }),
    )
    .await?;

    eprintln!("--- step: the tables show the fields escaped, one row each");
    let (code, status, err) = pool(&endpoints, &["pool", "status"]);
    assert_eq!(code, 0, "{err}");
    eprintln!("{status}");
    assert_inert("pool status", &status);
    assert!(
        status.contains("10.0.0.9:1\\r\\nFORGED"),
        "the address is shown, escaped:\n{status}"
    );
    assert!(status.contains("op\\u{1b}[2J\\r\\nFORGED"), "{status}");
    assert!(status.contains("\\u{1b}]0;pwned\\u{7}"), "{status}");
    assert_eq!(
        status.lines().filter(|l| l.starts_with("m-evil")).count(),
        1,
        "one member row:\n{status}"
    );
    let (code, list, err) = pool(&endpoints, &["sandbox", "list"]);
    assert_eq!(code, 0, "{err}");
    assert_inert("sandbox list", &list);
    assert!(list.contains("\\u{202e}desrever"), "{list}");
    assert_eq!(list.lines().count(), 2, "a header and one row:\n{list}");
    let (code, raft, err) = pool(&endpoints, &["raft", "status"]);
    assert_eq!(code, 0, "{err}");
    assert_inert("raft status", &raft);

    eprintln!("--- step: -o json carries the exact strings");
    let (code, out, err) = pool(&endpoints, &["-o", "json", "pool", "status"]);
    assert_eq!(code, 0, "{err}");
    assert_inert("pool status -o json", &out);
    let doc: serde_json::Value = serde_json::from_str(&out)?;
    assert_eq!(doc["members"][0]["address"], ADDRESS);
    assert_eq!(doc["members"][0]["uid"], UID);
    assert_eq!(doc["sandboxes"][0]["failure"], FAILURE);
    assert_eq!(doc["operations"][0]["id"], OPERATION);

    eprintln!("--- step: a --watch round (piped)");
    let watched = watch_once(&endpoints)?;
    assert!(watched.contains("OPERATION"), "{watched}");
    assert_inert("pool status --watch", &watched);

    eprintln!("--- step: errors that echo what was typed or stored");
    let (code, _, err) = pool(&endpoints, &["pool", "cancel", OPERATION]);
    assert_ne!(code, 0, "cancelling a hostile id: {err}");
    assert_inert("pool cancel", &err);
    assert_eq!(err.lines().count(), 1, "one line:\n{err}");
    let (code, _, err) = pool(
        &endpoints,
        &["raft", "add-learner", "9\rFORGED\u{1b}[2J", "127.0.0.1:1"],
    );
    assert_eq!(code, 2, "clap refuses the id: {err}");
    assert_inert("raft add-learner", &err);
    // clap drops escape sequences itself, but not a CR.
    assert!(
        err.contains("9\\rFORGED"),
        "the value is shown escaped: {err}"
    );
    Ok(())
}
