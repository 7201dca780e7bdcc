//! Paginated pool reads (issue 16 §2), through a real gateway process.
//!
//! - given: one gateway (no sandbox driver) and a scripted member of
//!   capacity 600
//! - when: 520 sandboxes are created (just over one default page), then listed with `ListSandboxes`
//!   page by page (default page size, then 7 per page for a stretch)
//! - then: the pages together are exactly the set of created sandboxes, in
//!   id order, none twice; a page holds at most 500 (the default);
//!   `GetSupervisorPoolStatus` pages members, operations and sandboxes
//!   together, with whole counts on every page; a page token that the
//!   gateway did not produce is INVALID_ARGUMENT naming `page_token`;
//!   `page_size` 5001 is INVALID_ARGUMENT naming `page_size`; 5000 is served

use std::collections::BTreeSet;
use std::time::Duration;

use proto::pool_admin::{
    CreateSandboxRequest, GetSupervisorPoolStatusRequest, ListSandboxesRequest,
};
use testkit::gateway::*;
use testkit::member::ScriptedMember;
use testkit::supervisor::pool_admin;
use testkit::TestResult;

/// Sandboxes created.
const SANDBOXES: usize = 520;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandboxes_list_over_pages_as_the_whole_set() -> TestResult {
    // No sandbox driver: the records are what is listed, no runtime starts.
    // A long heartbeat TTL: the member stays eligible on a loaded machine.
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("gateway.toml");
    std::fs::write(
        &config,
        "[openshell.gateway.supervisor_pool]\nheartbeat_ttl_ms = 60000\n",
    )?;
    let config = config.display().to_string();
    let cluster = Cluster::start(1, &["--sandbox-driver", "none", "--config", &config]);
    cluster.wait_leader("a leader").await;
    let node = cluster.get(1);
    let _member = ScriptedMember::start(
        "m-1",
        1,
        600,
        vec![node.addr.clone()],
        Duration::from_millis(10),
    );
    eventually("the member is in the pool", || async {
        let status = pool_admin(node)
            .await?
            .get_supervisor_pool_status(GetSupervisorPoolStatusRequest::default())
            .await?
            .into_inner();
        if status.member_count == 1 && status.members.iter().all(|m| m.eligible) {
            Ok(())
        } else {
            Err("no member yet".into())
        }
    })
    .await;

    eprintln!("--- step: create {SANDBOXES} sandboxes (8 at a time)");
    let ids: Vec<String> = (0..SANDBOXES).map(|i| format!("sb-{i:05}")).collect();
    for batch in ids.chunks(8) {
        let mut calls = Vec::new();
        for id in batch {
            let mut client = pool_admin(node).await?;
            let id = id.clone();
            calls.push(tokio::spawn(async move {
                // A member overdue for a moment under load has no slot and
                // the launch is refused (a tombstone of its launch id):
                // retry under a new launch id.
                let mut tries = 0;
                loop {
                    let created = client
                        .create_sandbox(CreateSandboxRequest {
                            sandbox_id: id.clone(),
                            launch_id: format!("{id}-{tries}"),
                            material_ref: "demo".into(),
                            request_id: String::new(),
                        })
                        .await;
                    tries += 1;
                    match created {
                        Err(s) if tries < 300 && s.code() == tonic::Code::ResourceExhausted => {
                            tokio::time::sleep(Duration::from_millis(200)).await
                        }
                        other => return other,
                    }
                }
            }));
        }
        for call in calls {
            call.await??;
        }
    }

    eprintln!("--- step: list every page (default size)");
    let mut client = pool_admin(node).await?;
    let mut listed = Vec::new();
    let mut token = String::new();
    let mut pages = 0;
    loop {
        let page = client
            .list_sandboxes(ListSandboxesRequest {
                page_token: token.clone(),
                ..Default::default()
            })
            .await?
            .into_inner();
        pages += 1;
        assert!(page.sandboxes.len() <= 500, "{}", page.sandboxes.len());
        listed.extend(page.sandboxes.into_iter().map(|s| s.id));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(pages, 2, "520 sandboxes in pages of 500");
    assert_eq!(listed, ids, "the pages, in order, are the whole set");

    eprintln!("--- step: small pages walk the same order");
    let mut token = String::new();
    let mut small = Vec::new();
    for _ in 0..5 {
        let page = client
            .list_sandboxes(ListSandboxesRequest {
                page_size: 7,
                page_token: token.clone(),
                ..Default::default()
            })
            .await?
            .into_inner();
        assert_eq!(page.sandboxes.len(), 7);
        small.extend(page.sandboxes.into_iter().map(|s| s.id));
        token = page.next_page_token;
    }
    assert_eq!(small, ids[..35].to_vec());

    eprintln!("--- step: the status pages members, operations and sandboxes");
    let mut token = String::new();
    let mut members = BTreeSet::new();
    let mut sandboxes = Vec::new();
    let mut status_pages = 0;
    loop {
        let page = client
            .get_supervisor_pool_status(GetSupervisorPoolStatusRequest {
                stale: false,
                page_size: 200,
                page_token: token.clone(),
            })
            .await?
            .into_inner();
        status_pages += 1;
        assert_eq!(page.member_count, 1, "counts are whole on every page");
        assert_eq!(page.sandbox_count, SANDBOXES as u64);
        let records = page.members.len() + page.operations.len() + page.sandboxes.len();
        assert!(records <= 200, "{records}");
        members.extend(page.members.into_iter().map(|m| m.id));
        sandboxes.extend(page.sandboxes.into_iter().map(|s| s.id));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(status_pages, 3, "1 member + 520 sandboxes in pages of 200");
    assert_eq!(members, BTreeSet::from(["m-1".to_string()]));
    assert_eq!(sandboxes, ids);

    eprintln!("--- step: bad tokens and sizes are refused");
    for bad in ["garbage", "v1.zz", "v2.6162"] {
        let refused = client
            .list_sandboxes(ListSandboxesRequest {
                page_token: bad.into(),
                ..Default::default()
            })
            .await
            .expect_err("a foreign token is refused");
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
        assert!(refused.message().contains("page_token"), "{refused:?}");
        let refused = client
            .get_supervisor_pool_status(GetSupervisorPoolStatusRequest {
                page_token: bad.into(),
                ..Default::default()
            })
            .await
            .expect_err("a foreign token is refused");
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
        assert!(refused.message().contains("page_token"), "{refused:?}");
    }
    let refused = client
        .list_sandboxes(ListSandboxesRequest {
            page_size: 5001,
            ..Default::default()
        })
        .await
        .expect_err("page_size 5001 is refused");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("page_size"), "{refused:?}");
    let refused = client
        .get_supervisor_pool_status(GetSupervisorPoolStatusRequest {
            page_size: 5001,
            ..Default::default()
        })
        .await
        .expect_err("page_size 5001 is refused");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    let whole = client
        .list_sandboxes(ListSandboxesRequest {
            page_size: 5000,
            ..Default::default()
        })
        .await?
        .into_inner();
    assert_eq!(whole.sandboxes.len(), SANDBOXES);
    assert!(whole.next_page_token.is_empty());
    Ok(())
}
