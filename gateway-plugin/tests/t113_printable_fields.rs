//! Fields a person reads are printable (issue 32, item 4): a supervisor's
//! `member_uid` and `advertise_address` and an operation id holding ESC,
//! CR, NUL or a newline are refused at the API, naming the field, before
//! anything is proposed.
//!
//! - given: one gateway (no tokens, no sandbox driver)
//! - when: supervisors say hello with ESC, CR, LF, NUL, a space or 257
//!   bytes in `member_uid` or `advertise_address`
//! - then: each stream is refused with `INVALID_ARGUMENT` naming
//!   `HostHello.<field>`, and no such member is in the pool; a hello with
//!   printable fields attaches
//! - when: `StartSupervisorPoolOperation` and
//!   `CancelSupervisorPoolOperation` name an operation id with ESC, CR, LF
//!   or NUL, or one of 1,024 bytes (the limits table: identifiers,
//!   1..=128)
//! - then: each is refused with `INVALID_ARGUMENT` naming `operation_id`,
//!   and the pool holds no operation; an operation with a well-formed id
//!   starts

use std::time::Duration;

use proto::pool_admin::{
    start_supervisor_pool_operation_request, CancelSupervisorPoolOperationRequest,
    GetSupervisorPoolStatusRequest, StartSupervisorPoolOperationRequest,
};
use proto::supervisor_host::supervisor_message;
use testkit::gateway::{eventually, Cluster};
use testkit::member::{attach, hello};
use testkit::supervisor::pool_admin;
use testkit::TestResult;
use tonic::Code;

/// A hello of member `member` with `uid` and `address`.
fn hello_with(member: &str, uid: &str, address: &str) -> proto::supervisor_host::SupervisorMessage {
    let mut message = hello(member, 1, 0, 4, address.to_string());
    if let Some(supervisor_message::Message::Hello(h)) = message.message.as_mut() {
        h.member_uid = uid.to_string();
    }
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_characters_in_hello_fields_and_operation_ids_are_refused() -> TestResult {
    let cluster = Cluster::start(1, &["--sandbox-driver", "none"]);
    cluster.wait_leader("bootstrap").await;
    let node = cluster.get(1);
    let long = "a".repeat(257);
    let hostile = [
        "x\u{1b}[2J",
        "x\r",
        "x\nFORGED row",
        "x\0y",
        "x y",
        long.as_str(),
    ];

    eprintln!("--- step: hellos with hostile member_uid or advertise_address");
    for (n, bad) in hostile.iter().enumerate() {
        for (field, uid, address) in [
            ("HostHello.member_uid", *bad, "127.0.0.1:7000"),
            ("HostHello.advertise_address", "uid-ok", *bad),
        ] {
            let member = format!("m-bad-{n}");
            let refused = attach(
                &node.addr,
                Duration::from_secs(5),
                hello_with(&member, uid, address),
                4,
            )
            .await
            .err()
            .unwrap_or_else(|| panic!("a hello with {field} = {bad:?} attached"));
            assert_eq!(
                refused.code(),
                Code::InvalidArgument,
                "{field} {bad:?}: {refused:?}"
            );
            assert!(
                refused.message().contains(field),
                "{field} {bad:?}: {:?} does not name the field",
                refused.message()
            );
            assert!(
                !refused.message().chars().any(proto::text::is_unsafe),
                "the refusal echoes a control character: {:?}",
                refused.message()
            );
        }
    }
    eprintln!("--- step: a printable hello attaches");
    let _ok = eventually("a clean hello", || async {
        Ok(attach(
            &node.addr,
            Duration::from_secs(5),
            hello_with("m-ok", "uid-ok", "127.0.0.1:7000"),
            4,
        )
        .await?)
    })
    .await;

    eprintln!("--- step: hostile operation ids to start and cancel");
    let mut pool = pool_admin(node).await?;
    // Over the identifier rule of start and the 1,024-byte bound of cancel.
    let long_op = "o".repeat(1025);
    for bad in [
        "op\u{1b}[2J",
        "op\r",
        "op\nFORGED",
        "op\0",
        long_op.as_str(),
    ] {
        let start = StartSupervisorPoolOperationRequest {
            request_id: String::new(),
            operation_id: bad.to_string(),
            kind: Some(start_supervisor_pool_operation_request::Kind::Rebalance(
                true,
            )),
            max_parallel: 1,
        };
        let refused = pool
            .start_supervisor_pool_operation(start)
            .await
            .err()
            .unwrap_or_else(|| panic!("operation id {bad:?} started"));
        assert_eq!(
            refused.code(),
            Code::InvalidArgument,
            "start {bad:?}: {refused:?}"
        );
        assert!(
            refused.message().contains("operation_id"),
            "start {bad:?}: {refused:?}"
        );
        let cancel = CancelSupervisorPoolOperationRequest {
            operation_id: bad.to_string(),
        };
        let refused = pool
            .cancel_supervisor_pool_operation(cancel)
            .await
            .err()
            .unwrap_or_else(|| panic!("operation id {bad:?} cancelled"));
        assert_eq!(
            refused.code(),
            Code::InvalidArgument,
            "cancel {bad:?}: {refused:?}"
        );
        assert!(
            refused.message().contains("operation_id"),
            "cancel {bad:?}: {refused:?}"
        );
    }

    eprintln!("--- step: the pool holds the printable member and no operation");
    let status = pool
        .get_supervisor_pool_status(GetSupervisorPoolStatusRequest::default())
        .await?
        .into_inner();
    let members: Vec<&str> = status.members.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(members, ["m-ok"], "only the printable hello joined");
    assert!(status.operations.is_empty(), "{:?}", status.operations);

    eprintln!("--- step: a well-formed operation id starts");
    let started = pool
        .start_supervisor_pool_operation(StartSupervisorPoolOperationRequest {
            request_id: String::new(),
            operation_id: "op-ok".into(),
            kind: Some(start_supervisor_pool_operation_request::Kind::Rebalance(
                true,
            )),
            max_parallel: 1,
        })
        .await?
        .into_inner();
    assert_eq!(started.id, "op-ok");
    Ok(())
}
