//! The in-process raft reference as a [`BenchSystem`]: three
//! `RaftNode<Objects>` in this process on loopback gRPC
//! (`raft_store::bench::InProcCluster`, the raft part of raft-store's
//! `commit_latency` bench), written through the leader's `RaftNode::write`
//! with the same compare-and-set object put the gateways get over gRPC. The
//! issue's "end-to-end >= 0.6x the in-process raft bench" ratio compares the
//! gateways with this.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use prost::Message;
use raft_store::bench::InProcCluster;
use raft_store::objects::{
    object_command, object_result, precondition, Object, ObjectCommand, ObjectResult, Objects,
    Precondition, PutRequest,
};
use raft_store::RaftNode;

use super::{
    run_levels, value, BenchArgs, BenchSystem, LevelResult, Versions, WriteError, UNKNOWN,
};

/// Object type every bench key is stored under (here and in the gateways).
pub const OBJECT_TYPE: &str = "bench";

/// The object id of `key`.
pub fn object_id(key: usize) -> String {
    format!("k{key:05}")
}

/// An object put of `key` with a 256-byte value under `precondition`.
pub fn put_request(key: usize, kind: precondition::Kind) -> PutRequest {
    let id = object_id(key);
    PutRequest {
        object: Some(Object {
            name: id.clone(),
            id,
            r#type: OBJECT_TYPE.into(),
            payload: value(key),
            ..Default::default()
        }),
        precondition: Some(Precondition { kind: Some(kind) }),
        request_id: String::new(),
    }
}

/// Writes through the in-process leader.
pub struct InProcSystem {
    leader: RaftNode<Objects>,
    versions: Versions,
}

impl InProcSystem {
    async fn put(&self, key: usize, kind: precondition::Kind) -> Result<u64, WriteError> {
        let command = ObjectCommand {
            op: Some(object_command::Op::Put(put_request(key, kind))),
        }
        .encode_to_vec();
        let applied = self
            .leader
            .write(command)
            .await
            .map_err(|e| WriteError::Failed(e.to_string()))?;
        let result = ObjectResult::decode(&applied.response[..])
            .map_err(|e| WriteError::Failed(format!("undecodable result: {e}")))?;
        match result.result {
            Some(object_result::Result::Put(o)) => Ok(o.resource_version),
            Some(object_result::Result::Rejected(r)) => Err(WriteError::Conflict(format!(
                "rejected {:?}, current version {}",
                r.reason, r.current_resource_version
            ))),
            other => Err(WriteError::Failed(format!("unexpected result {other:?}"))),
        }
    }
}

impl BenchSystem for InProcSystem {
    type Client = ();

    fn name(&self) -> &'static str {
        "inproc"
    }

    async fn connect(&self, _client: usize) -> anyhow::Result<()> {
        Ok(())
    }

    async fn write(&self, _client: &mut (), key: usize) -> Result<(), WriteError> {
        let mut expected = self.versions.get(key);
        if expected == UNKNOWN {
            let id = object_id(key);
            expected = self
                .leader
                .read_local(|sm, _| sm.get(OBJECT_TYPE, &id).map(|o| o.resource_version))
                .ok_or_else(|| WriteError::Failed(format!("{id} missing")))?;
        }
        match self
            .put(key, precondition::Kind::MatchResourceVersion(expected))
            .await
        {
            Ok(v) => {
                self.versions.set(key, v);
                Ok(())
            }
            Err(e) => {
                self.versions.set(key, UNKNOWN);
                Err(e)
            }
        }
    }
}

/// Starts the group in `dir`, preloads the keys, runs every level, stops.
///
/// # Errors
/// When the group cannot start or the preload fails.
pub async fn measure(args: &BenchArgs, dir: &Path) -> anyhow::Result<Vec<LevelResult>> {
    let cluster = InProcCluster::start(dir).await?;
    let leader = cluster.leader().context("in-process raft: no leader")?;
    let system = Arc::new(InProcSystem {
        leader,
        versions: Versions::new(args.keys),
    });
    let preload = preload(&system, args.keys).await;
    let levels = match preload {
        Ok(()) => run_levels(system, args).await,
        Err(e) => Err(e),
    };
    cluster.stop().await;
    levels
}

/// Creates every key (64 at a time), recording its version.
async fn preload(system: &Arc<InProcSystem>, keys: usize) -> anyhow::Result<()> {
    let create = |system: Arc<InProcSystem>, (): (), key| async move {
        let version = system
            .put(key, precondition::Kind::MustCreate(true))
            .await?;
        Ok(((), version))
    };
    super::preload(system, &[()], keys, |s| &s.versions, create).await
}
