//! Scenario: a script consumes `openshell-pool -o json` (docs/cli-json.md
//! is the contract).
//!
//! - given: one gateway, a member, a sandbox and a rebalance operation
//! - then: `raft status`, `pool status` and `sandbox list` print documents
//!   in which every key the page lists is present with its type (in every
//!   array element), and every key printed is one the page lists
//! - then: `raft status --watch -o json` prints one such document per line
//!   until stopped; `--interval` without `--watch` is a usage error (rc 2)

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::cli::*;
use common::*;
use serde_json::Value;
use testkit::member::ScriptedMember;

/// The contract of one command: path (`a`, `a[].b`, `[].b`) to type.
type Contract = BTreeMap<String, String>;

/// docs/cli-json.md's tables, by command (the `## \`cmd\`` headings).
fn contracts() -> BTreeMap<String, Contract> {
    let page = std::fs::read_to_string(bins::workspace_root().join("docs/cli-json.md"))
        .unwrap_or_else(|e| panic!("docs/cli-json.md: {e}"));
    let mut all: BTreeMap<String, Contract> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in page.lines() {
        if let Some(heading) = line.strip_prefix("## `") {
            current = heading.strip_suffix('`').map(str::to_string);
            continue;
        }
        let (Some(command), Some(row)) = (&current, line.strip_prefix("| `")) else {
            continue;
        };
        let mut cells = row.split(" | ");
        let (Some(path), Some(kind)) = (cells.next(), cells.next()) else {
            continue;
        };
        let path = path.trim_end_matches('`');
        all.entry(command.clone())
            .or_default()
            .insert(path.to_string(), kind.trim().to_string());
    }
    all
}

/// Whether `value` has the documented type `kind`.
fn has_type(value: &Value, kind: &str) -> bool {
    kind.split(" or ").any(|k| match k {
        "string" => value.is_string(),
        "integer" => value.is_u64(),
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        other => panic!("docs/cli-json.md: unknown type {other:?}"),
    })
}

/// Checks `object` (at `prefix`, e.g. `nodes[].`) against `contract`:
/// documented keys present and typed, printed keys documented; recurses
/// into documented arrays of objects.
fn check(what: &str, object: &Value, prefix: &str, contract: &Contract, sandbox: &Contract) {
    let Some(map) = object.as_object() else {
        panic!("{what}: {prefix}: not an object: {object}");
    };
    for (path, kind) in contract {
        let Some(key) = path.strip_prefix(prefix) else {
            continue;
        };
        if key.contains('.') || key.contains("[]") {
            continue;
        }
        let value = map
            .get(key)
            .unwrap_or_else(|| panic!("{what}: {path} documented but missing in {object}"));
        assert!(
            has_type(value, kind),
            "{what}: {path} is not {kind}: {value}"
        );
    }
    for (key, value) in map {
        let path = format!("{prefix}{key}");
        assert!(
            contract.contains_key(&path),
            "{what}: {path} printed but not in docs/cli-json.md"
        );
        let Some(elements) = value.as_array() else {
            continue;
        };
        let inner = format!("{path}[].");
        let (element_contract, element_prefix) = if what == "pool status" && key == "sandboxes" {
            (sandbox, "[].")
        } else if contract.keys().any(|p| p.starts_with(&inner)) {
            (contract, inner.as_str())
        } else {
            continue;
        };
        for element in elements {
            check(what, element, element_prefix, element_contract, sandbox);
        }
    }
}

/// Runs `command -o json` and checks it against its contract.
fn checked(addr: &str, command: &str, contracts: &BTreeMap<String, Contract>) -> Value {
    let mut args: Vec<&str> = command.split_whitespace().collect();
    args.extend(["-o", "json"]);
    let (code, out, err) = pool(addr, &args);
    assert_eq!(code, 0, "{command}: {err}");
    let document: Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{command}: not JSON ({e}): {out}"));
    let sandbox = &contracts["sandbox list"];
    let contract = &contracts[command];
    match &document {
        Value::Array(items) => {
            for item in items {
                check(command, item, "[].", contract, sandbox);
            }
        }
        _ => check(command, &document, "", contract, sandbox),
    }
    document
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_json_document_follows_the_documented_contract() -> TestResult {
    let contracts = contracts();
    for command in ["raft status", "raft check", "pool status", "sandbox list"] {
        assert!(
            contracts.contains_key(command),
            "docs/cli-json.md has no {command} table"
        );
    }
    let cluster = Cluster::start(1, &[]);
    cluster.wait_leader("bootstrap").await;
    let addr = cluster.get(1).addr.clone();
    let _member = ScriptedMember::start("m1", 1, 4, vec![addr.clone()], Duration::ZERO);

    eprintln!("--- step: a sandbox and an operation, so every array has elements");
    let (code, _, err) = pool(&addr, &["sandbox", "create", "--id", "j1"]);
    assert_eq!(code, 0, "sandbox create: {err}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let document = checked(&addr, "pool status", &contracts);
        let filled = ["members", "sandboxes"]
            .iter()
            .all(|k| document[k].as_array().is_some_and(|a| !a.is_empty()));
        if filled {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no member or sandbox: {document}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (code, _, err) = pool(&addr, &["pool", "rebalance"]);
    assert_eq!(code, 0, "pool rebalance: {err}");

    eprintln!("--- step: each command's document against its table");
    let pool_doc = checked(&addr, "pool status", &contracts);
    assert!(
        pool_doc["operations"]
            .as_array()
            .is_some_and(|a| !a.is_empty()),
        "the rebalance is listed: {pool_doc}"
    );
    let raft_doc = checked(&addr, "raft status", &contracts);
    assert!(raft_doc["nodes"].as_array().is_some_and(|a| !a.is_empty()));
    assert!(raft_doc["gateways"]
        .as_array()
        .is_some_and(|a| a.len() == 1));
    let check_doc = checked(&addr, "raft check", &contracts);
    assert_eq!(check_doc["consistent"], true, "{check_doc}");
    let list = checked(&addr, "sandbox list", &contracts);
    assert!(list.as_array().is_some_and(|a| !a.is_empty()), "{list}");

    eprintln!("--- step: --watch -o json prints one document per line");
    let mut child = std::process::Command::new(bins::workspace_bin("openshell-pool"))
        .args([
            "--endpoints",
            &addr,
            "--insecure",
            "raft",
            "status",
            "--watch",
        ])
        .args(["--interval", "250", "-o", "json"])
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    child.kill()?;
    let out = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<&str> = stdout.lines().collect();
    assert!(lines.len() >= 2, "watch printed {} documents", lines.len());
    for line in lines {
        let document: Value = serde_json::from_str(line)?;
        check(
            "raft status",
            &document,
            "",
            &contracts["raft status"],
            &contracts["sandbox list"],
        );
    }

    eprintln!("--- step: --interval without --watch is a usage error");
    let (code, _, err) = pool(&addr, &["raft", "status", "--interval", "500"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--watch"), "{err}");
    Ok(())
}
