//! What generic gRPC tools expect of a server: the standard health service
//! (`grpc.health.v1.Health`) and server reflection (`grpc.reflection.v1`,
//! and `v1alpha` for older clients), shared by the gateway and the sandbox
//! runtime.
//!
//! Reflection advertises exactly the services a server mounts (the names it
//! is given), with their descriptors from [`crate::FILE_DESCRIPTOR_SET`]
//! and tonic-health's: `grpcurl -cacert ca.pem HOST:PORT list` lists them
//! and `grpcurl ... describe`/calls work without the `.proto` files.

use tonic_reflection::server::v1::{ServerReflection as ReflectionV1, ServerReflectionServer};
use tonic_reflection::server::v1alpha::{
    ServerReflection as ReflectionV1Alpha, ServerReflectionServer as ServerReflectionServerV1Alpha,
};

pub use tonic_health::server::{health_reporter, HealthReporter};
pub use tonic_health::ServingStatus;

/// The health service's own name, as clients and reflection see it.
pub const HEALTH_SERVICE: &str = "grpc.health.v1.Health";
/// The reflection services' names.
pub const REFLECTION_SERVICES: [&str; 2] = [
    "grpc.reflection.v1.ServerReflection",
    "grpc.reflection.v1alpha.ServerReflection",
];

/// The health service answering from `reporter`'s statuses.
pub fn health_service(
    reporter: HealthReporter,
) -> tonic_health::pb::health_server::HealthServer<tonic_health::server::HealthService> {
    tonic_health::pb::health_server::HealthServer::new(
        tonic_health::server::HealthService::from_health_reporter(reporter),
    )
}

/// Why the reflection services could not be built: a descriptor set does
/// not decode (a build defect, never input).
#[derive(Debug, thiserror::Error)]
#[error("gRPC reflection: {0}")]
pub struct ReflectionError(#[from] tonic_reflection::server::Error);

/// The reflection services (v1 and v1alpha) advertising `services` (fully
/// qualified names, e.g. `openshell.objects.v1.ObjectStore`), the health
/// service and themselves.
///
/// # Errors
/// [`ReflectionError`] if an embedded descriptor set does not decode.
#[allow(clippy::type_complexity)]
pub fn reflection(
    services: &[&str],
) -> Result<
    (
        ServerReflectionServer<impl ReflectionV1>,
        ServerReflectionServerV1Alpha<impl ReflectionV1Alpha>,
    ),
    ReflectionError,
> {
    let builder = || {
        // Both reflection versions' descriptors in both services: each
        // lists the other, so each must describe it.
        let mut b = tonic_reflection::server::Builder::configure()
            .include_reflection_service(false)
            .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(
                tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
            )
            .register_encoded_file_descriptor_set(crate::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .with_service_name(HEALTH_SERVICE);
        for name in services.iter().chain(REFLECTION_SERVICES.iter()) {
            b = b.with_service_name(*name);
        }
        b
    };
    Ok((builder().build_v1()?, builder().build_v1alpha()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_embedded_descriptor_sets_decode() {
        assert!(reflection(&["openshell.objects.v1.ObjectStore"]).is_ok());
    }
}
