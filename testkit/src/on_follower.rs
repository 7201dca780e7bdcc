//! The start both heartbeat-silence scenarios share (`t122`, `t127`): a
//! scripted member attached to a follower, owning one acknowledged sandbox.

use std::time::Duration;

use proto::pool_admin::CreateSandboxRequest;
use proto::pool_types::SandboxPhase;

use crate::gateway::{eventually, Cluster, Gateway};
use crate::member::ScriptedMember;
use crate::supervisor::{listed_sandbox, pool_admin};
use crate::TestResult;

/// Member `m-a` attached to follower `follower` (its list: the follower,
/// then the leader), owning sandbox `s-a`, which it acknowledged.
pub struct MemberOnFollower {
    /// The leader when the scenario started.
    pub leader: u64,
    /// The gateway `m-a` attached to.
    pub follower: u64,
    /// `m-a`'s gateway list: the follower's address, then the leader's.
    pub gateways: Vec<String>,
    /// The member (no keep-alive pings; statuses every 10 ms).
    pub member: ScriptedMember,
}

impl MemberOnFollower {
    /// Starts `m-a` on a follower of `cluster`, launches `s-a` with
    /// `material` (its request id derived from it), and waits until `m-a`
    /// acknowledged it.
    ///
    /// # Errors
    /// No follower, or the launch refused.
    pub async fn start(cluster: &Cluster, material: &str) -> TestResult<Self> {
        let leader = cluster.wait_leader("a leader").await;
        let follower = (1..=3).find(|id| *id != leader).ok_or("no follower")?;
        let gateways = vec![
            cluster.get(follower).addr.clone(),
            cluster.get(leader).addr.clone(),
        ];
        eprintln!("--- step: m-a attaches to follower {follower}, then s-a is launched");
        let member =
            ScriptedMember::start("m-a", 1, 4, gateways.clone(), Duration::from_millis(10));
        member.wait_attached().await;
        pool_admin(cluster.get(leader))
            .await?
            .create_sandbox(CreateSandboxRequest {
                sandbox_id: "s-a".into(),
                launch_id: "launch-s-a".into(),
                material_ref: material.into(),
                request_id: format!("{material}-launch-s-a"),
            })
            .await?;
        eventually("s-a acknowledged by m-a", || async {
            match owned_sandbox(cluster.get(leader)).await? {
                (owner, _, _, SandboxPhase::Assigned, true) if owner == "m-a" => Ok(()),
                other => Err(format!("s-a is {other:?}").into()),
            }
        })
        .await;
        Ok(MemberOnFollower {
            leader,
            follower,
            gateways,
            member,
        })
    }

    /// The incarnation `m-a` was last given.
    pub fn incarnation(&self) -> u64 {
        self.member
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .incarnation
    }

    /// What must not change while `m-a` lives: `s-a` as the leader lists
    /// it (owner, owner incarnation, term, phase, acknowledged) and the
    /// incarnation `m-a` was last given. Taken before a fault and compared
    /// after it ([`MemberOnFollower::assert_kept`]).
    ///
    /// # Errors
    /// `s-a` not listed by the leader.
    pub async fn kept(&self, cluster: &Cluster) -> TestResult<Kept> {
        Ok(Kept {
            sandbox: owned_sandbox(cluster.get(self.leader)).await?,
            incarnation: self.incarnation(),
        })
    }

    /// Panics unless `s-a` and `m-a`'s incarnation are what `before` took:
    /// nothing expired, nothing was taken over.
    ///
    /// # Errors
    /// `s-a` not listed by the leader.
    pub async fn assert_kept(&self, cluster: &Cluster, before: &Kept) -> TestResult {
        let after = self.kept(cluster).await?;
        assert_eq!(
            after.sandbox, before.sandbox,
            "s-a changed owner or term: {:?} -> {:?}",
            before.sandbox, after.sandbox
        );
        assert_eq!(
            after.incarnation, before.incarnation,
            "m-a was given a new incarnation"
        );
        Ok(())
    }

    /// The gateways `m-a` attached to, in order.
    pub fn attached_to(&self) -> Vec<String> {
        self.member
            .seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .attached_to
            .clone()
    }
}

/// What [`MemberOnFollower::kept`] took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept {
    /// `s-a` as the leader listed it ([`owned_sandbox`]).
    pub sandbox: (String, u64, u64, SandboxPhase, bool),
    /// `m-a`'s incarnation.
    pub incarnation: u64,
}

/// `s-a` as `node` lists it: (owner, owner incarnation, term, phase,
/// acknowledged).
///
/// # Errors
/// `s-a` not listed, or an unknown phase.
pub async fn owned_sandbox(node: &Gateway) -> TestResult<(String, u64, u64, SandboxPhase, bool)> {
    let s = listed_sandbox(node, "s-a").await?;
    let phase = SandboxPhase::try_from(s.phase)?;
    Ok((s.owner, s.owner_incarnation, s.term, phase, s.acknowledged))
}
