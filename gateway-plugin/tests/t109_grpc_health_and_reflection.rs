//! Scenario: generic gRPC tools find their way around a gateway.
//!
//! - given: a secure three-gateway cluster (TLS, tokens)
//! - then: server reflection, asked with a token, lists exactly the client
//!   port's services (with health and reflection) and gives each one's
//!   descriptor, methods included; without a token it is refused
//! - then: `grpc.health.v1.Health/Check` needs no token and answers
//!   SERVING for the gateway and each service while it is ready, NOT_FOUND
//!   for a service it does not serve
//! - when: the other two gateways are killed, so the survivor has no leader
//! - then: it turns NOT_SERVING for the object store, the pool and the
//!   supervisors' stream (and as a whole), while ClusterAdmin, through
//!   which an operator diagnoses it, stays SERVING

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use prost::Message;
use testkit::gateway::{Cluster, Gateway};
use testkit::TestResult;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::{ServerReflectionRequest, ServerReflectionResponse};

/// The services a gateway's client port serves.
const CLIENT_SERVICES: [&str; 7] = [
    "grpc.health.v1.Health",
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
    "openshell.cluster.v1.ClusterAdmin",
    "openshell.objects.v1.ObjectStore",
    "openshell.pool_admin.v1.PoolAdmin",
    "openshell.supervisor_host.v1.SupervisorHost",
];

/// One reflection request, answered (`token`: send the gateway's token).
async fn reflect(
    node: &Gateway,
    request: MessageRequest,
    token: bool,
) -> Result<ServerReflectionResponse, tonic::Status> {
    let message = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(request),
    };
    let outbound = tokio_stream::iter([message]);
    let call = if token {
        node.request(outbound)
    } else {
        tonic::Request::new(outbound)
    };
    let channel = node
        .channel()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut answers = ServerReflectionClient::new(channel)
        .server_reflection_info(call)
        .await?
        .into_inner();
    answers
        .message()
        .await?
        .ok_or_else(|| tonic::Status::internal("no reflection answer"))
}

/// The health of `service` at `node`, asked without a token.
async fn check(node: &Gateway, service: &str) -> Result<ServingStatus, tonic::Status> {
    let channel = node
        .channel()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let answer = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await?;
    Ok(answer.into_inner().status())
}

/// Waits up to `within` for `service` at `node` to report `want`.
async fn wait_status(node: &Gateway, service: &str, want: ServingStatus, within: Duration) {
    let deadline = Instant::now() + within;
    let mut last = None;
    while Instant::now() < deadline {
        match check(node, service).await {
            Ok(status) if status == want => return,
            other => last = Some(other),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{service:?} did not turn {want:?} within {within:?}; last answer {last:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_tools_list_the_services_and_health_follows_readiness() -> TestResult {
    let mut cluster = Cluster::start_secure(3, &[]);
    let leader = cluster.wait_leader("bootstrap").await;
    let survivor = (1..=3).find(|id| *id != leader).ok_or("a follower")?;

    eprintln!("--- step: reflection lists the client port's services, given a token");
    let node = cluster.get(survivor);
    let listed = reflect(node, MessageRequest::ListServices(String::new()), true).await?;
    let Some(MessageResponse::ListServicesResponse(list)) = listed.message_response else {
        return Err(format!("not a service list: {listed:?}").into());
    };
    let names: BTreeSet<&str> = list.service.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        CLIENT_SERVICES.into_iter().collect(),
        "listed services"
    );

    eprintln!("--- step: each service's descriptor names its methods");
    for service in CLIENT_SERVICES {
        let answer = reflect(
            node,
            MessageRequest::FileContainingSymbol(service.into()),
            true,
        )
        .await?;
        let Some(MessageResponse::FileDescriptorResponse(files)) = answer.message_response else {
            return Err(format!("{service}: no descriptor: {answer:?}").into());
        };
        let (package, name) = service.rsplit_once('.').ok_or("qualified name")?;
        let described = files.file_descriptor_proto.iter().any(|bytes| {
            prost_types::FileDescriptorProto::decode(bytes.as_slice()).is_ok_and(|file| {
                file.package() == package
                    && file
                        .service
                        .iter()
                        .any(|s| s.name() == name && !s.method.is_empty())
            })
        });
        assert!(described, "{service}: no descriptor with its methods");
    }

    eprintln!("--- step: without a token, reflection is refused");
    let refused = reflect(node, MessageRequest::ListServices(String::new()), false)
        .await
        .expect_err("reflection without a token");
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused}");

    eprintln!("--- step: health answers without a token: everything SERVING once ready");
    for service in [
        "",
        CLIENT_SERVICES[3],
        CLIENT_SERVICES[4],
        CLIENT_SERVICES[5],
        CLIENT_SERVICES[6],
    ] {
        wait_status(
            node,
            service,
            ServingStatus::Serving,
            Duration::from_secs(30),
        )
        .await;
    }
    let unknown = check(node, "no.such.Service")
        .await
        .expect_err("unknown service");
    assert_eq!(unknown.code(), tonic::Code::NotFound, "{unknown}");

    eprintln!("--- step: the other two gateways are killed: the survivor has no leader");
    for id in (1..=3).filter(|id| *id != survivor) {
        cluster.node(id).kill9();
    }
    let node = cluster.get(survivor);
    // Not ready once without a leader for UNREADY_AFTER (5 s).
    let within = Duration::from_secs(30);
    for service in [
        "",
        CLIENT_SERVICES[4],
        CLIENT_SERVICES[5],
        CLIENT_SERVICES[6],
    ] {
        wait_status(node, service, ServingStatus::NotServing, within).await;
    }
    assert_eq!(
        check(node, CLIENT_SERVICES[3]).await?,
        ServingStatus::Serving,
        "ClusterAdmin stays SERVING on a live gateway"
    );
    Ok(())
}
