//! The objects the Kubernetes driver creates for one runtime, built from
//! the template and the launch spec without any I/O: the TLS Secret
//! `<name>-tls` and the Pod `<name>`. Public so that tests can check every
//! object against the Kubernetes schemas.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, EnvVar, Pod, PodSpec, Secret,
    SecretVolumeSource, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::ByteString;

use super::template::{PodTemplate, RUNTIME_CONTAINER, SANDBOX_ID_ENV};
use super::{
    ANNOTATION_CA, ANNOTATION_SANDBOX_ID, LABEL_GENERATION, LABEL_MANAGED_BY, LABEL_NAME,
    LABEL_RUNTIME, MANAGED_BY, RUNTIME_APP, TLS_MOUNT_PATH, TLS_VOLUME, TMP_VOLUME,
};
use crate::identity::Identity;
use crate::{LaunchSpec, RUNTIME_PORT};

/// The name of runtime `name`'s TLS Secret.
pub fn secret_name(name: &str) -> String {
    format!("{name}-tls")
}

/// The labels of every object of runtime `spec` (selectable by `list`).
pub fn labels(spec: &LaunchSpec) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_NAME.to_string(), RUNTIME_APP.to_string()),
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
        (LABEL_RUNTIME.to_string(), spec.name()),
        (LABEL_GENERATION.to_string(), spec.generation.to_string()),
    ])
}

/// The Secret `<name>-tls` (type `kubernetes.io/tls`) holding the runtime's
/// certificate, key and CA certificate.
pub fn tls_secret(spec: &LaunchSpec, identity: &Identity) -> Secret {
    let bytes = |s: &str| ByteString(s.as_bytes().to_vec());
    Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(&spec.name())),
            labels: Some(labels(spec)),
            annotations: Some(BTreeMap::from([(
                ANNOTATION_SANDBOX_ID.to_string(),
                spec.sandbox_id.clone(),
            )])),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".to_string()),
        data: Some(BTreeMap::from([
            ("tls.crt".to_string(), bytes(&identity.cert_pem)),
            ("tls.key".to_string(), bytes(identity.key_pem.expose())),
            ("ca.crt".to_string(), bytes(&identity.ca_pem)),
        ])),
        ..Secret::default()
    }
}

/// The runtime's command-line arguments (after the image's entrypoint).
pub fn runtime_args(spec: &LaunchSpec) -> Vec<String> {
    let mut args = vec![
        "--sandbox-id".to_string(),
        spec.sandbox_id.clone(),
        "--generation".to_string(),
        spec.generation.to_string(),
    ];
    // Checked by `ensure` before anything is created.
    if let Ok(trust) = spec.trust_args("kubernetes") {
        args.extend(trust);
    }
    args.extend([
        "--listen".to_string(),
        format!("0.0.0.0:{RUNTIME_PORT}"),
        "--tls-cert-file".to_string(),
        format!("{TLS_MOUNT_PATH}/tls.crt"),
        "--tls-key-file".to_string(),
        format!("{TLS_MOUNT_PATH}/tls.key"),
        "--recovery-deadline-ms".to_string(),
        spec.recovery_deadline_ms.to_string(),
    ]);
    if !spec.workload.is_empty() {
        args.push("--".to_string());
        args.extend(spec.workload.iter().cloned());
    }
    args
}

/// The Pod of runtime `spec`: the template plus what the driver owns
/// (name, labels, the sandbox-id and CA annotations, `restartPolicy: Never`,
/// no service account token unless the template asks for one, the
/// `runtime` container's args, port, environment, TLS mount and, where the
/// template does not say, a restrictive security context).
pub fn pod(template: &PodTemplate, spec: &LaunchSpec, ca_pem: &str) -> Pod {
    let name = spec.name();
    let mut labels_all = template.metadata.labels.clone().unwrap_or_default();
    labels_all.extend(labels(spec));
    let mut annotations = template.metadata.annotations.clone().unwrap_or_default();
    annotations.insert(ANNOTATION_SANDBOX_ID.to_string(), spec.sandbox_id.clone());
    annotations.insert(ANNOTATION_CA.to_string(), ca_pem.to_string());
    let mut pod_spec: PodSpec = template.spec.clone();
    pod_spec.restart_policy = Some("Never".to_string());
    pod_spec
        .automount_service_account_token
        .get_or_insert(false);
    pod_spec.volumes.get_or_insert_with(Vec::new).push(Volume {
        name: TLS_VOLUME.to_string(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret_name(&name)),
            default_mode: Some(0o400),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    });
    let container = runtime_container(template.container().clone(), spec);
    let tmp_mounted = container
        .volume_mounts
        .iter()
        .flatten()
        .any(|m| m.mount_path == "/tmp");
    if container
        .security_context
        .as_ref()
        .and_then(|sc| sc.read_only_root_filesystem)
        == Some(true)
        && !tmp_mounted
    {
        // A read-only root file system still needs a writable /tmp (the
        // demo workload publishes its address there).
        pod_spec.volumes.get_or_insert_with(Vec::new).push(Volume {
            name: TMP_VOLUME.to_string(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Volume::default()
        });
        pod_spec.containers = vec![with_mount(container, TMP_VOLUME, "/tmp", false)];
    } else {
        pod_spec.containers = vec![container];
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            labels: Some(labels_all),
            annotations: Some(annotations),
            ..template.metadata.clone()
        },
        spec: Some(pod_spec),
        status: None,
    }
}

fn with_mount(mut c: Container, volume: &str, path: &str, read_only: bool) -> Container {
    c.volume_mounts
        .get_or_insert_with(Vec::new)
        .push(VolumeMount {
            name: volume.to_string(),
            mount_path: path.to_string(),
            read_only: Some(read_only),
            ..VolumeMount::default()
        });
    c
}

fn runtime_container(mut c: Container, spec: &LaunchSpec) -> Container {
    debug_assert_eq!(c.name, RUNTIME_CONTAINER);
    c.args = Some(runtime_args(spec));
    c.ports = Some(vec![ContainerPort {
        name: Some("runtime".to_string()),
        container_port: i32::from(RUNTIME_PORT),
        protocol: Some("TCP".to_string()),
        ..ContainerPort::default()
    }]);
    c.env.get_or_insert_with(Vec::new).push(EnvVar {
        name: SANDBOX_ID_ENV.to_string(),
        value: Some(spec.sandbox_id.clone()),
        value_from: None,
    });
    let mut c = with_mount(c, TLS_VOLUME, TLS_MOUNT_PATH, true);
    let sc = c
        .security_context
        .get_or_insert_with(SecurityContext::default);
    sc.run_as_non_root.get_or_insert(true);
    sc.allow_privilege_escalation.get_or_insert(false);
    sc.read_only_root_filesystem.get_or_insert(true);
    c
}
