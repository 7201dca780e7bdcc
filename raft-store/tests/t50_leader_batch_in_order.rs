//! A leader's batch of proposals (the coordinator's takeovers of a dead
//! member) shares log entries, applies in the order given, and is fenced
//! by the term as a whole.
//!
//! - given: a one-node store on a fresh data directory (real sled files),
//!   leading its term
//! - when: 40 puts of one object, with one oversized command among them,
//!   are proposed at once as the leader of that term
//! - then: the oversized command fails alone; the 40 puts apply in the
//!   order given (their resource versions rise with their position) in far
//!   fewer entries than puts; proposed for a term the node does not lead,
//!   nothing is proposed and the object is unchanged

mod common;

use prost::Message;
use raft_store::objects::{
    object_command, object_result, Object, ObjectCommand, ObjectResult, PutRequest,
};
use raft_store::Leading;

const PUTS: usize = 40;

fn put(payload: &str) -> Vec<u8> {
    ObjectCommand {
        op: Some(object_command::Op::Put(PutRequest {
            object: Some(Object {
                id: "o".into(),
                r#type: "register".into(),
                payload: payload.as_bytes().to_vec(),
                ..Default::default()
            }),
            precondition: None,
            request_id: String::new(),
        })),
    }
    .encode_to_vec()
}

/// The resource version a put's response names.
fn version(response: &[u8]) -> Result<u64, Box<dyn std::error::Error>> {
    match ObjectResult::decode(response)?.result {
        Some(object_result::Result::Put(object)) => Ok(object.resource_version),
        other => Err(format!("a put was not applied: {other:?}").into()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaders_batch_shares_entries_in_order_and_is_fenced_by_its_term(
) -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let node = common::one_voter(dir.path(), "batch-test").await?;
    let term = node.status().term;

    eprintln!("--- step: {PUTS} puts and one oversized command, as the leader of term {term}");
    let mut commands: Vec<Vec<u8>> = (0..PUTS).map(|i| put(&i.to_string())).collect();
    commands.insert(
        PUTS / 2,
        vec![0u8; raft_store::batcher::MAX_COMMAND_BYTES + 1],
    );
    let outcomes = node.propose_all_as_leader(term, commands).await?;
    assert_eq!(outcomes.len(), PUTS + 1, "one outcome per command");
    let mut versions = Vec::new();
    let mut entries = std::collections::BTreeSet::new();
    for (position, outcome) in outcomes.iter().enumerate() {
        if position == PUTS / 2 {
            assert!(
                matches!(outcome, Err(Leading::Failed(_))),
                "the oversized command must fail alone: {outcome:?}"
            );
            continue;
        }
        let applied = outcome
            .as_ref()
            .map_err(|e| format!("put {position} failed: {e}"))?;
        versions.push(version(&applied.response)?);
        entries.insert(applied.log_index);
    }
    eprintln!("--- step: {PUTS} puts applied in {} entries", entries.len());
    assert!(
        versions.windows(2).all(|pair| pair[0] < pair[1]),
        "the puts did not apply in the order given: {versions:?}"
    );
    assert!(
        entries.len() <= 4,
        "{PUTS} puts proposed together took {} entries: they were not batched",
        entries.len()
    );

    eprintln!("--- step: the same proposals for a term this node does not lead");
    let last = versions.last().copied().ok_or("no put applied")?;
    let refused = node
        .propose_all_as_leader(term + 1, vec![put("late")])
        .await;
    assert!(
        matches!(refused, Err(Leading::NotLeading { .. })),
        "a batch for another term was not refused as a whole: {refused:?}"
    );
    let after = node.propose_all_as_leader(term, vec![put("after")]).await?;
    let applied = after
        .into_iter()
        .next()
        .ok_or("no outcome")?
        .map_err(|e| format!("{e}"))?;
    assert_eq!(
        version(&applied.response)?,
        last + 1,
        "the refused batch wrote something: the store's revision moved past the last put"
    );
    node.shutdown().await;
    Ok(())
}
