//! Cells: one client, several gateway groups (docs/design/0005-cells.md).
//!
//! - given: three single-gateway groups, each its own cluster: `eu-1` and
//!   `eu-2` plaintext with a scripted member of 50 slots each, `eu-3` TLS
//!   with a token and no member (no free slot); a cell map listing them
//!   (`eu-1` first: the default), with their cluster ids
//! - when: 24 sandboxes are created without naming a cell
//! - then: each lands in `eu-1` or `eu-2` (both take some, `eu-3` none),
//!   its answer names the cell, and each cell's own list holds exactly the
//!   ids placed there; the fan-out list labels every answer, `eu-3`'s
//!   (asked over TLS with its token) empty
//! - when: a caller-named sandbox is created, then created again with the
//!   same request (a retry from another process)
//! - then: the retry lands in the same cell and is replayed: one sandbox
//! - then: `<cell>/<id>` and a bare id of the default cell read and delete
//!   the right records; an unknown cell and a malformed id are refused by
//!   name
//! - when: a map names `eu-2` with `eu-1`'s endpoints
//! - then: a create there fails `WrongCluster` and `eu-1` holds nothing
//!   new
//! - when: `eu-2`'s gateway is killed (`kill -9`)
//! - then: the fan-out list still answers for `eu-1` and reports `eu-2`;
//!   a caller-named create is refused (it cannot tell whether `eu-2` holds
//!   it) unless the cell is named; a drawn id lands in `eu-1`

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use openshell_client::cells::CellAnswer;
use openshell_client::{CellError, CellMap, Cells, Client, CreateSandboxRequest};
use proto::pool_types::SandboxPhase;
use testkit::gateway::{eventually, Cluster, Gateway};
use testkit::member::{long_ttl_config, ScriptedMember};
use testkit::TestResult;

fn plain_cell(name: &str, cluster_id: &str, addr: &str) -> String {
    format!("[[cell]]\nname = \"{name}\"\ncluster_id = \"{cluster_id}\"\nendpoints = [\"{addr}\"]\ninsecure = true\n\n")
}

async fn cluster_id(client: &Client) -> TestResult<String> {
    Ok(client.cluster_status(true).await?.cluster_id)
}

fn cells_of(dir: &Path, name: &str, text: &str) -> TestResult<Cells> {
    let path = dir.join(name);
    std::fs::write(&path, text)?;
    let map = CellMap::load(&path)?;
    Ok(Cells::new(&map, &path, |b| {
        b.deadline(Duration::from_secs(10)).max_rounds(2)
    })?)
}

fn create(sandbox_id: &str, request_id: &str) -> CreateSandboxRequest {
    CreateSandboxRequest {
        sandbox_id: sandbox_id.into(),
        request_id: request_id.into(),
        material_ref: "demo".into(),
        ..CreateSandboxRequest::default()
    }
}

fn ids(sandboxes: &[openshell_client::Sandbox]) -> BTreeSet<String> {
    sandboxes.iter().map(|s| s.id.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_spread_over_cells_and_each_id_names_its_cell() -> TestResult {
    let dir = tempfile::tempdir()?;
    let config = long_ttl_config(dir.path())?;
    let args = ["--sandbox-driver", "none", "--config", config.as_str()];
    let plain_group = |cluster_id: &str| -> TestResult<Cluster> {
        let root = tempfile::tempdir()?;
        let mut node = Gateway::new(1, root.path(), args.iter().map(|a| a.to_string()).collect());
        node.cluster_id = cluster_id.into();
        Ok(Cluster::bootstrap(root, vec![node]))
    };
    let eu1 = plain_group("group-eu-1")?;
    let mut eu2 = plain_group("group-eu-2")?;
    let eu3 = {
        let (root, material, mut nodes) = Cluster::secure_nodes(1, &args);
        for node in &mut nodes {
            node.cluster_id = "group-eu-3".into();
        }
        Cluster::bootstrap_secure(root, material, nodes)
    };
    for (cluster, name) in [(&eu1, "eu-1"), (&eu2, "eu-2"), (&eu3, "eu-3")] {
        cluster.wait_leader(name).await;
    }
    let (a1, a2) = (eu1.get(1).addr.clone(), eu2.get(1).addr.clone());
    let _m1 = ScriptedMember::start("m-1", 1, 50, vec![a1.clone()], Duration::from_millis(10));
    let _m2 = ScriptedMember::start("m-2", 1, 50, vec![a2.clone()], Duration::from_millis(10));
    let plain = |addr: &str| Client::builder().endpoints([addr]).insecure().build();
    let (c1, c2) = (plain(&a1)?, plain(&a2)?);
    for client in [&c1, &c2] {
        eventually("the member is eligible", || async {
            let h = client.headroom().await?;
            (h.free_slots == 50)
                .then_some(())
                .ok_or("no free slots yet".into())
        })
        .await;
    }
    let material = eu3.material.as_ref().ok_or("eu-3 is secure")?;
    let eu3_id = {
        let secure = Client::builder()
            .endpoints([eu3.get(1).addr.clone()])
            .ca_file(material.ca.cert.clone())
            .token(material.admin_token.clone())
            .build()?;
        cluster_id(&secure).await?
    };
    let (id1, id2) = (cluster_id(&c1).await?, cluster_id(&c2).await?);
    let map = format!(
        "{}{}[[cell]]\nname = \"eu-3\"\ncluster_id = \"{eu3_id}\"\nendpoints = [\"{}\"]\nca_file = \"{}\"\ntoken_file = \"{}\"\n",
        plain_cell("eu-1", &id1, &a1),
        plain_cell("eu-2", &id2, &a2),
        eu3.get(1).addr,
        material.ca.cert.display(),
        material.admin_token_file.display(),
    );
    let cells = cells_of(dir.path(), "cells.toml", &map)?;

    eprintln!("--- step: 24 sandboxes without a cell named");
    let mut placed: [BTreeSet<String>; 2] = Default::default();
    for _ in 0..24 {
        let (cell, written) = cells.create_sandbox(create("", ""), None).await?;
        let at = match cell.name() {
            "eu-1" => 0,
            "eu-2" => 1,
            other => return Err(format!("placed in {other}, which has no free slot").into()),
        };
        assert!(
            written.value.id.starts_with("sb-"),
            "a drawn id: {}",
            written.value.id
        );
        placed[at].insert(written.value.id);
    }
    assert!(
        !placed[0].is_empty() && !placed[1].is_empty(),
        "both cells with slots take some: {placed:?}"
    );
    assert_eq!(
        ids(&c1.list_sandboxes().await?),
        placed[0],
        "eu-1 holds what was placed there"
    );
    assert_eq!(
        ids(&c2.list_sandboxes().await?),
        placed[1],
        "eu-2 holds what was placed there"
    );
    let listed = cells.list_sandboxes().await;
    let names: Vec<&str> = listed.iter().map(|a| a.cell.as_str()).collect();
    assert_eq!(names, ["eu-1", "eu-2", "eu-3"]);
    for (answer, want) in listed
        .iter()
        .zip([&placed[0], &placed[1], &BTreeSet::new()])
    {
        let got = answer
            .answer
            .as_ref()
            .map_err(|e| format!("{}: {e}", answer.cell))?;
        assert_eq!(&ids(got), want, "{}", answer.cell);
    }

    eprintln!("--- step: a caller-named launch, then its retry from another process");
    let (first, written) = cells
        .create_sandbox(create("job-7", "req-job-7"), None)
        .await?;
    let first = first.name().to_string();
    assert!(!written.replayed);
    let again = cells_of(dir.path(), "cells-again.toml", &map)?;
    let (second, replay) = again
        .create_sandbox(create("job-7", "req-job-7"), None)
        .await?;
    assert_eq!(
        second.name(),
        first,
        "the retry goes where the first attempt landed"
    );
    assert!(replay.replayed, "and is answered with the first outcome");
    let holders = cells
        .list_sandboxes()
        .await
        .into_iter()
        .filter(|a| a.answer.as_ref().is_ok_and(|s| ids(s).contains("job-7")))
        .count();
    assert_eq!(holders, 1, "one sandbox job-7 in all cells");

    eprintln!("--- step: ids with and without their cell");
    let in_eu2 = placed[1].first().ok_or("eu-2 holds one")?.clone();
    let got = cells.get_sandbox(&format!("eu-2/{in_eu2}")).await?;
    assert_eq!(got.map(|s| s.id), Some(in_eu2.clone()));
    assert!(
        cells.get_sandbox(&in_eu2).await?.is_none(),
        "a bare id is the default cell's (eu-1)"
    );
    let in_eu1 = placed[0].first().ok_or("eu-1 holds one")?.clone();
    assert!(cells.get_sandbox(&in_eu1).await?.is_some());
    let deleted = cells.delete_sandbox(&format!("eu-2/{in_eu2}")).await?;
    assert_eq!(deleted.value.id, in_eu2);
    let phase = |s: Option<openshell_client::Sandbox>| s.map(|s| s.phase);
    let stopping = [SandboxPhase::Stopping as i32, SandboxPhase::Deleted as i32];
    assert!(
        phase(c2.get_sandbox(&in_eu2).await?).is_none_or(|p| stopping.contains(&p)),
        "deleted in eu-2"
    );
    assert!(
        phase(c1.get_sandbox(&in_eu1).await?).is_some_and(|p| !stopping.contains(&p)),
        "eu-1's untouched"
    );
    assert!(matches!(
        cells.get_sandbox("eu-9/x").await,
        Err(CellError::UnknownCell { .. })
    ));
    assert!(matches!(
        cells.get_sandbox("a/b/c").await,
        Err(CellError::InvalidId(_))
    ));

    eprintln!("--- step: a map that points eu-2 at eu-1's gateways");
    let wrong = cells_of(
        dir.path(),
        "wrong.toml",
        &format!(
            "{}{}",
            plain_cell("eu-1", &id2, &a1),
            plain_cell("eu-2", &id1, &a2)
        ),
    )?;
    let before = c1.list_sandboxes().await?.len();
    let refused = wrong.create_sandbox(create("", ""), Some("eu-1")).await;
    assert!(
        matches!(&refused, Err(CellError::WrongCluster { cell, .. }) if cell == "eu-1"),
        "{refused:?}"
    );
    assert_eq!(
        c1.list_sandboxes().await?.len(),
        before,
        "nothing written into the wrong group"
    );

    eprintln!("--- step: eu-2's gateway killed");
    eu2.node(1).kill9();
    let listed = cells.list_sandboxes().await;
    let by_cell = |name: &str| listed.iter().find(|a| a.cell == name);
    assert!(matches!(
        by_cell("eu-1"),
        Some(CellAnswer { answer: Ok(_), .. })
    ));
    assert!(matches!(
        by_cell("eu-2"),
        Some(CellAnswer {
            answer: Err(CellError::Call { .. }),
            ..
        })
    ));
    let refused = cells
        .create_sandbox(create("job-8", "req-job-8"), None)
        .await;
    assert!(
        matches!(&refused, Err(CellError::LookupIncomplete { cell, .. }) if cell == "eu-2"),
        "{refused:?}"
    );
    let (named, _) = cells
        .create_sandbox(create("job-8", "req-job-8"), Some("eu-1"))
        .await?;
    assert_eq!(named.name(), "eu-1");
    let (drawn, _) = cells.create_sandbox(create("", ""), None).await?;
    assert_eq!(
        drawn.name(),
        "eu-1",
        "the one admitting cell with slots that answers"
    );
    Ok(())
}
