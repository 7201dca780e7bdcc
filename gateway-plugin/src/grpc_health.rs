//! The standard gRPC health service (`grpc.health.v1.Health`) and server
//! reflection on the client port, for load balancers, service meshes,
//! Kubernetes' `grpc` probes and `grpcurl`.
//!
//! The serving statuses follow [`Health`]'s verdict (the one `/readyz`
//! answers), re-read every [`FOLLOW_EVERY`]:
//!
//! | service | SERVING while |
//! |---------|---------------|
//! | `""` (the gateway as a whole) | ready |
//! | `openshell.objects.v1.ObjectStore`, `openshell.pool_admin.v1.PoolAdmin`, `openshell.supervisor_host.v1.SupervisorHost` | ready: caught up with a leader, not stopping |
//! | `openshell.cluster.v1.ClusterAdmin` | live and not stopping (an operator diagnoses a gateway that is not ready through it) |
//!
//! Otherwise NOT_SERVING; an unknown service name gets `NOT_FOUND`. The
//! health service needs no token (probes carry none) and says nothing but
//! these statuses; reflection needs a token of any role, as every other
//! read does.

use std::time::Duration;

use proto::cluster::cluster_admin_server::ClusterAdminServer;
use proto::discovery::{HealthReporter, ServingStatus};
use proto::objects::object_store_server::ObjectStoreServer;
use proto::pool_admin::pool_admin_server::PoolAdminServer;
use proto::supervisor_host::supervisor_host_server::SupervisorHostServer;
use tonic::server::NamedService;

use crate::cluster_admin_service::ClusterAdminService;
use crate::health::{Health, Verdict};
use crate::object_store_service::ObjectStoreService;
use crate::pool_admin_service::PoolAdminService;
use crate::supervisor_host_service::SupervisorHostService;

/// How often the statuses are re-read from the verdict.
pub const FOLLOW_EVERY: Duration = Duration::from_millis(250);

/// The client port's services, by their gRPC names.
pub const CLUSTER_ADMIN: &str = <ClusterAdminServer<ClusterAdminService> as NamedService>::NAME;
/// The object store.
pub const OBJECT_STORE: &str = <ObjectStoreServer<ObjectStoreService> as NamedService>::NAME;
/// The pool's admin API.
pub const POOL_ADMIN: &str = <PoolAdminServer<PoolAdminService> as NamedService>::NAME;
/// The supervisors' stream.
pub const SUPERVISOR_HOST: &str =
    <SupervisorHostServer<SupervisorHostService> as NamedService>::NAME;

/// Every service of the client port (what reflection advertises besides
/// health and itself).
pub const CLIENT_SERVICES: [&str; 4] = [CLUSTER_ADMIN, OBJECT_STORE, POOL_ADMIN, SUPERVISOR_HOST];

/// The serving status of each name for `verdict` (`stopping`: the gateway
/// was told to stop): the table of the module doc. Pure, so the mapping is
/// unit-tested.
pub fn statuses(verdict: &Verdict, stopping: bool) -> [(&'static str, ServingStatus); 5] {
    let serving = |yes: bool| {
        if yes {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        }
    };
    let ready = serving(verdict.ready && !stopping);
    let admin = serving(verdict.fatal.is_none() && !stopping);
    [
        ("", ready),
        (OBJECT_STORE, ready),
        (POOL_ADMIN, ready),
        (SUPERVISOR_HOST, ready),
        (CLUSTER_ADMIN, admin),
    ]
}

/// Keeps `reporter`'s statuses equal to [`statuses`] of `health`'s verdict
/// until aborted. Starts NOT_SERVING everywhere (nothing is known yet).
pub async fn follow(health: Health, reporter: HealthReporter) {
    let mut shown: Option<[(&'static str, ServingStatus); 5]> = None;
    let mut every = tokio::time::interval(FOLLOW_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let now = statuses(&health.verdict(), health.is_leaving());
        if shown != Some(now) {
            for (name, status) in now {
                reporter.set_service_status(name, status).await;
            }
            tracing::debug!(?now, "gRPC health statuses");
            shown = Some(now);
        }
        every.tick().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(fatal: Option<&str>, ready: bool, reason: &str) -> Verdict {
        Verdict {
            fatal: fatal.map(str::to_string),
            ready,
            reason: reason.into(),
        }
    }

    fn status_of(verdict: &Verdict, name: &str) -> ServingStatus {
        statuses(verdict, false)
            .into_iter()
            .find(|(n, _)| *n == name)
            .map(|(_, s)| s)
            .unwrap_or(ServingStatus::Unknown)
    }

    #[test]
    fn a_ready_gateway_serves_everything() {
        let v = verdict(None, true, "ready");
        for (name, status) in statuses(&v, false) {
            assert_eq!(status, ServingStatus::Serving, "{name:?}");
        }
    }

    #[test]
    fn a_gateway_not_caught_up_serves_admin_only() {
        let v = verdict(None, false, "not ready: 5000 entries behind the leader");
        assert_eq!(status_of(&v, OBJECT_STORE), ServingStatus::NotServing);
        assert_eq!(status_of(&v, POOL_ADMIN), ServingStatus::NotServing);
        assert_eq!(status_of(&v, SUPERVISOR_HOST), ServingStatus::NotServing);
        assert_eq!(status_of(&v, ""), ServingStatus::NotServing);
        assert_eq!(status_of(&v, CLUSTER_ADMIN), ServingStatus::Serving);
    }

    #[test]
    fn a_stopping_or_dead_gateway_serves_nothing() {
        // A stop turns the verdict not ready too; even a stale ready one
        // serves nothing once stopping.
        let stopping = verdict(None, true, "ready");
        let dead = verdict(
            Some("disk full"),
            false,
            "not live: raft stopped: disk full",
        );
        for (v, leaving) in [(stopping, true), (dead, false)] {
            for (name, status) in statuses(&v, leaving) {
                assert_eq!(status, ServingStatus::NotServing, "{name:?} in {v:?}");
            }
        }
    }

    #[test]
    fn the_names_are_the_protos_fully_qualified_ones() {
        assert_eq!(OBJECT_STORE, "openshell.objects.v1.ObjectStore");
        assert_eq!(CLUSTER_ADMIN, "openshell.cluster.v1.ClusterAdmin");
        assert_eq!(POOL_ADMIN, "openshell.pool_admin.v1.PoolAdmin");
        assert_eq!(
            SUPERVISOR_HOST,
            "openshell.supervisor_host.v1.SupervisorHost"
        );
    }
}
