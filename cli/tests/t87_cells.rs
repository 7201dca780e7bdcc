//! `openshell-pool --cells FILE`: one CLI over several gateway groups
//! (docs/design/0005-cells.md).
//!
//! - given: two single-gateway groups `eu-1` and `eu-2` (their own cluster
//!   ids), a scripted member of 10 slots on each, and a cell map listing
//!   them (`eu-1` first: the default)
//! - when: `sandbox create --id job-1` names no cell; `--cell eu-2 sandbox
//!   create --id job-2` names one
//! - then: each answer is `<cell>/<id>` with its `cell`; `job-2` is in
//!   `eu-2`; `sandbox get eu-2/job-2` and `--cell eu-2 sandbox get job-2`
//!   read it, a bare `job-2` is the default cell's and not found (exit 5);
//!   `sandbox list` holds both, each labelled
//! - then: `pool status` without `--cell` is a usage error naming the cells
//!   (exit 2); with `--cell eu-2` it is that group's; `--cell` without
//!   `--cells` is a usage error; a map with an unknown field is refused
//!   naming the file and the field (exit 1); a map naming `eu-2` with
//!   `eu-1`'s cluster id is refused before any call (exit 1)
//! - when: `eu-2`'s gateway is killed (`kill -9`)
//! - then: `sandbox list` prints `eu-1`'s rows and exits 3 naming `eu-2`

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::cli::pool_bin;
use common::*;
use serde_json::Value;
use testkit::member::{long_ttl_config, ScriptedMember};

/// Runs `openshell-pool ARGS` with no CLI variable from the environment;
/// returns (exit code, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(pool_bin());
    for var in [
        "OPENSHELL_TOKEN",
        "OPENSHELL_TOKEN_FILE",
        "OPENSHELL_CA_FILE",
        "OPENSHELL_ENDPOINTS",
        "OPENSHELL_CELLS",
        "OPENSHELL_CELL",
    ] {
        cmd.env_remove(var);
    }
    let out = cmd
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run openshell-pool: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `openshell-pool --cells MAP -o json ARGS`, which must succeed.
fn json(map: &Path, args: &[&str]) -> Value {
    let map = map.display().to_string();
    let mut all = vec!["--cells", map.as_str(), "-o", "json"];
    all.extend_from_slice(args);
    let (code, out, err) = run(&all);
    assert_eq!(code, 0, "openshell-pool {all:?}: {err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{all:?}: not JSON ({e}): {out}"))
}

fn group(cluster_id: &str, config: &str) -> Cluster {
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let args = ["--sandbox-driver", "none", "--config", config];
    let mut node = Gateway::new(1, root.path(), args.iter().map(|a| a.to_string()).collect());
    node.cluster_id = cluster_id.into();
    Cluster::bootstrap(root, vec![node])
}

fn cell(name: &str, cluster_id: &str, addr: &str) -> String {
    format!("[[cell]]\nname = \"{name}\"\ncluster_id = \"{cluster_id}\"\nendpoints = [\"{addr}\"]\ninsecure = true\n\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_cli_places_reads_and_lists_across_cells() -> TestResult {
    let dir = tempfile::tempdir()?;
    let config = long_ttl_config(dir.path())?;
    let eu1 = group("group-eu-1", &config);
    let mut eu2 = group("group-eu-2", &config);
    eu1.wait_leader("eu-1").await;
    eu2.wait_leader("eu-2").await;
    let (a1, a2) = (eu1.get(1).addr.clone(), eu2.get(1).addr.clone());
    let _m1 = ScriptedMember::start("m-1", 1, 10, vec![a1.clone()], Duration::from_millis(10));
    let _m2 = ScriptedMember::start("m-2", 1, 10, vec![a2.clone()], Duration::from_millis(10));
    let map = dir.path().join("cells.toml");
    std::fs::write(
        &map,
        format!(
            "{}{}",
            cell("eu-1", "group-eu-1", &a1),
            cell("eu-2", "group-eu-2", &a2)
        ),
    )?;
    let map_arg = map.display().to_string();
    for name in ["eu-1", "eu-2"] {
        eventually("the cell's member is eligible", || async {
            let status = json(&map, &["--cell", name, "pool", "status"]);
            let eligible = status["members"]
                .as_array()
                .is_some_and(|m| m.iter().any(|m| m["eligible"] == true));
            eligible
                .then_some(())
                .ok_or("no eligible member yet".into())
        })
        .await;
    }

    eprintln!("--- step: a sandbox placed, and one in a named cell");
    let job1 = json(&map, &["sandbox", "create", "--id", "job-1"]);
    let job1_cell = job1["cell"].as_str().ok_or("a cell")?.to_string();
    assert!(["eu-1", "eu-2"].contains(&job1_cell.as_str()), "{job1}");
    assert_eq!(job1["id"], format!("{job1_cell}/job-1"));
    let job2 = json(
        &map,
        &["--cell", "eu-2", "sandbox", "create", "--id", "job-2"],
    );
    assert_eq!(
        (job2["cell"].as_str(), job2["id"].as_str()),
        (Some("eu-2"), Some("eu-2/job-2"))
    );

    eprintln!("--- step: ids with and without their cell");
    assert_eq!(
        json(&map, &["sandbox", "get", "eu-2/job-2"])["id"],
        "eu-2/job-2"
    );
    assert_eq!(
        json(&map, &["--cell", "eu-2", "sandbox", "get", "job-2"])["id"],
        "eu-2/job-2"
    );
    let (code, _, err) = run(&["--cells", &map_arg, "sandbox", "get", "job-2"]);
    assert_eq!(code, 5, "a bare id is the default cell's (eu-1): {err}");
    assert!(err.contains("job-2"), "{err}");
    let list = json(&map, &["sandbox", "list"]);
    let mut listed: Vec<(String, String)> = list
        .as_array()
        .ok_or("an array")?
        .iter()
        .map(|s| {
            (
                s["cell"].as_str().unwrap_or("").into(),
                s["id"].as_str().unwrap_or("").into(),
            )
        })
        .collect();
    listed.sort();
    let mut want = vec![
        (job1_cell.clone(), format!("{job1_cell}/job-1")),
        ("eu-2".to_string(), "eu-2/job-2".to_string()),
    ];
    want.sort();
    assert_eq!(listed, want);

    eprintln!("--- step: single-group commands and bad maps");
    let (code, _, err) = run(&["--cells", &map_arg, "pool", "status"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--cell") && err.contains("eu-1, eu-2"),
        "{err}"
    );
    let status = json(&map, &["--cell", "eu-2", "pool", "status"]);
    assert_eq!(
        status["members"][0]["id"], "m-2",
        "eu-2's own pool: {status}"
    );
    let (code, _, err) = run(&["--insecure", "--cell", "eu-2", "sandbox", "list"]);
    assert_eq!(code, 2, "--cell without --cells: {err}");
    assert!(err.contains("--cells"), "{err}");
    let typo = dir.path().join("typo.toml");
    std::fs::write(
        &typo,
        format!("{}admit = true\n", cell("eu-1", "group-eu-1", &a1)),
    )?;
    let (code, _, err) = run(&["--cells", &typo.display().to_string(), "sandbox", "list"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("typo.toml") && err.contains("admit"), "{err}");
    let wrong = dir.path().join("wrong.toml");
    std::fs::write(
        &wrong,
        format!(
            "{}{}",
            cell("eu-1", "group-eu-2", &a1),
            cell("eu-2", "group-eu-1", &a2)
        ),
    )?;
    let (code, _, err) = run(&[
        "--cells",
        &wrong.display().to_string(),
        "--cell",
        "eu-2",
        "raft",
        "status",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("cell eu-2") && err.contains("group-eu-2"),
        "{err}"
    );

    eprintln!("--- step: eu-2's gateway killed");
    eu2.node(1).kill9();
    let (code, out, err) = run(&["--cells", &map_arg, "sandbox", "list"]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(err.contains("cell eu-2"), "{err}");
    if job1_cell == "eu-1" {
        assert!(out.contains("eu-1/job-1"), "eu-1's rows are printed: {out}");
    }
    Ok(())
}
