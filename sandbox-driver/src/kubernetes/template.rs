//! The Pod template of the Kubernetes driver: a YAML (or JSON) file with the
//! `metadata` and `spec` of the runtime Pods, checked once at load so that a
//! template error is reported with its file and field when the gateway
//! starts, not as a failed launch later.
//!
//! The template chooses everything about where and how the runtime runs
//! (image, resources, nodeSelector, tolerations, affinity, service account,
//! extra labels and annotations); the driver owns what makes a Pod one
//! sandbox generation's runtime, and a template that sets any of it is
//! refused: the Pod's name, namespace, `generateName`, ownerReferences, the
//! `openshell.io/*` and the driver's `app.kubernetes.io/*` labels and
//! annotations, `restartPolicy` other than `Never`, the `runtime`
//! container's `args`, `ports`, the `OPENSHELL_SANDBOX_ID` variable and the
//! TLS volume (`runtime-tls`, mounted at [`TLS_MOUNT_PATH`]).

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{
    LABEL_GENERATION, LABEL_MANAGED_BY, LABEL_NAME, LABEL_RUNTIME, TLS_MOUNT_PATH, TLS_VOLUME,
    TMP_VOLUME,
};

/// The name the template's one container must have.
pub const RUNTIME_CONTAINER: &str = "runtime";

/// The environment variable the driver sets to the sandbox id.
pub const SANDBOX_ID_ENV: &str = "OPENSHELL_SANDBOX_ID";

/// Why a template was refused.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// The file could not be read.
    #[error("Pod template {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not YAML of a Pod template.
    #[error("Pod template {path}: not a Pod template: {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A field is missing, unknown or owned by the driver.
    #[error("Pod template {path}: {field}: {message}")]
    Field {
        /// The file.
        path: PathBuf,
        /// The field's path, e.g. `spec.containers[0].args`.
        field: String,
        /// What is wrong with it.
        message: String,
    },
}

/// A checked Pod template: the `metadata` and `spec` every runtime Pod
/// starts from.
#[derive(Clone, Debug, PartialEq)]
pub struct PodTemplate {
    /// Labels and annotations added to every runtime Pod.
    pub metadata: ObjectMeta,
    /// The Pod spec, with exactly one container, `runtime`.
    pub spec: PodSpec,
}

impl PodTemplate {
    /// Reads and checks the template in file `path` (YAML; JSON is YAML).
    ///
    /// # Errors
    /// [`TemplateError`], naming the file and, for a bad field, the field.
    pub fn load(path: &Path) -> Result<Self, TemplateError> {
        let text = std::fs::read_to_string(path).map_err(|source| TemplateError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Checks the template `text`, as read from `origin` (named in errors).
    ///
    /// # Errors
    /// [`TemplateError`].
    pub fn parse(text: &str, origin: &Path) -> Result<Self, TemplateError> {
        let parse = |message: String| TemplateError::Parse {
            path: origin.to_path_buf(),
            message,
        };
        let field = |field: &str, message: &str| TemplateError::Field {
            path: origin.to_path_buf(),
            field: field.to_string(),
            message: message.to_string(),
        };
        let yaml: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(text).map_err(|e| parse(e.to_string()))?;
        let json: serde_json::Value =
            serde_json::to_value(&yaml).map_err(|e| parse(e.to_string()))?;
        let serde_json::Value::Object(top) = &json else {
            return Err(parse(
                "expected a mapping with `metadata` and `spec`".into(),
            ));
        };
        for (key, value) in top {
            match (key.as_str(), value.as_str()) {
                ("metadata" | "spec", _)
                | ("apiVersion", Some("v1"))
                | ("kind", Some("Pod" | "PodTemplate")) => {}
                ("apiVersion" | "kind", _) => {
                    return Err(field(key, "must be `v1` / `Pod` when present"))
                }
                _ => {
                    return Err(field(
                        key,
                        "unknown field (expected apiVersion, kind, metadata, spec)",
                    ))
                }
            }
        }
        let mut body = json.clone();
        if let Some(map) = body.as_object_mut() {
            map.remove("apiVersion");
            map.remove("kind");
        }
        let parsed: PodTemplateSpec =
            serde_json::from_value(body.clone()).map_err(|e| parse(e.to_string()))?;
        // k8s-openapi ignores fields it does not know: a typo
        // (`nodeSelecter`) would silently do nothing. Whatever did not
        // survive the round trip is unknown.
        let back = serde_json::to_value(&parsed).map_err(|e| parse(e.to_string()))?;
        if let Some(unknown) = first_dropped(&body, &back, String::new()) {
            return Err(field(&unknown, "unknown field"));
        }
        let template = Self {
            metadata: parsed.metadata.unwrap_or_default(),
            spec: parsed.spec.ok_or_else(|| {
                field(
                    "spec",
                    "missing (a Pod spec with one container named `runtime`)",
                )
            })?,
        };
        template.check().map_err(|(f, m)| field(&f, &m))?;
        Ok(template)
    }

    /// The template's `runtime` container.
    pub fn container(&self) -> &Container {
        // `check` kept exactly one container, named `runtime`.
        &self.spec.containers[0]
    }

    /// The driver-owned fields the template must leave alone.
    fn check(&self) -> Result<(), (String, String)> {
        let owned = |f: &str| {
            Err((
                f.to_string(),
                "owned by the driver; remove it from the template".to_string(),
            ))
        };
        let meta = &self.metadata;
        if meta.name.is_some() {
            return owned("metadata.name");
        }
        if meta.generate_name.is_some() {
            return owned("metadata.generateName");
        }
        if meta.namespace.is_some() {
            return owned("metadata.namespace");
        }
        if meta.owner_references.is_some() {
            return owned("metadata.ownerReferences");
        }
        for (kind, map) in [("labels", &meta.labels), ("annotations", &meta.annotations)] {
            for key in map.iter().flat_map(|m| m.keys()) {
                if key.starts_with("openshell.io/")
                    || [
                        LABEL_NAME,
                        LABEL_MANAGED_BY,
                        LABEL_RUNTIME,
                        LABEL_GENERATION,
                    ]
                    .contains(&key.as_str())
                {
                    return owned(&format!("metadata.{kind}.{key}"));
                }
            }
        }
        let spec = &self.spec;
        match spec.restart_policy.as_deref() {
            None | Some("Never") => {}
            Some(_) => {
                return Err((
                    "spec.restartPolicy".into(),
                    "must be `Never` or absent: a runtime that exits is a lost runtime, never restarted".into(),
                ))
            }
        }
        if spec.containers.len() != 1 || spec.containers[0].name != RUNTIME_CONTAINER {
            let names: Vec<&str> = spec.containers.iter().map(|c| c.name.as_str()).collect();
            return Err((
                "spec.containers".into(),
                format!(
                    "must be exactly one container named `{RUNTIME_CONTAINER}` (found {names:?})"
                ),
            ));
        }
        if let Some(v) = spec
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == TLS_VOLUME || v.name == TMP_VOLUME)
        {
            return owned(&format!("spec.volumes[name={}]", v.name));
        }
        let c = &spec.containers[0];
        if c.image.as_deref().is_none_or(str::is_empty) {
            return Err(("spec.containers[0].image".into(), "missing".into()));
        }
        if c.args.is_some() {
            return owned("spec.containers[0].args");
        }
        if c.ports.is_some() {
            return owned("spec.containers[0].ports");
        }
        if c.env.iter().flatten().any(|e| e.name == SANDBOX_ID_ENV) {
            return owned(&format!("spec.containers[0].env[name={SANDBOX_ID_ENV}]"));
        }
        if c.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == TLS_VOLUME || m.mount_path == TLS_MOUNT_PATH)
        {
            return owned(&format!(
                "spec.containers[0].volumeMounts[{TLS_MOUNT_PATH}]"
            ));
        }
        Ok(())
    }
}

/// The path of the first key of `original` (non-null) that `back` lacks.
fn first_dropped(
    original: &serde_json::Value,
    back: &serde_json::Value,
    at: String,
) -> Option<String> {
    use serde_json::Value;
    match (original, back) {
        (Value::Object(a), Value::Object(b)) => a.iter().find_map(|(k, v)| {
            let path = if at.is_empty() {
                k.clone()
            } else {
                format!("{at}.{k}")
            };
            match b.get(k) {
                None if !v.is_null() => Some(path),
                None => None,
                Some(w) => first_dropped(v, w, path),
            }
        }),
        (Value::Array(a), Value::Array(b)) => a
            .iter()
            .zip(b)
            .enumerate()
            .find_map(|(i, (v, w))| first_dropped(v, w, format!("{at}[{i}]"))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<PodTemplate, TemplateError> {
        PodTemplate::parse(text, Path::new("/etc/t.yaml"))
    }

    const GOOD: &str = "
apiVersion: v1
kind: Pod
metadata:
  labels: {team: a}
spec:
  nodeSelector: {pool: sandboxes}
  containers:
  - name: runtime
    image: example/runtime:1
    resources:
      limits: {cpu: '1', memory: 256Mi}
";

    #[test]
    fn a_good_template_loads() {
        let t = parse(GOOD).unwrap();
        assert_eq!(t.container().image.as_deref(), Some("example/runtime:1"));
        assert_eq!(t.metadata.labels.unwrap()["team"], "a");
    }

    #[test]
    fn numeric_quantities_load() {
        let t = parse(&GOOD.replace("cpu: '1'", "cpu: 1")).unwrap();
        let limits = t.container().resources.clone().unwrap().limits.unwrap();
        assert_eq!(limits["cpu"].0, "1");
    }

    #[test]
    fn errors_name_the_file_and_the_field() {
        for (text, field) in [
            (
                GOOD.replace("name: runtime", "name: main"),
                "spec.containers",
            ),
            (
                GOOD.replace("labels: {team: a}", "name: x"),
                "metadata.name",
            ),
            (
                GOOD.replace("nodeSelector", "nodeSelecter"),
                "spec.nodeSelecter",
            ),
            (
                GOOD.replace("image: example/runtime:1", "image: x\n    args: [a]"),
                "spec.containers[0].args",
            ),
            (
                GOOD.replace("  nodeSelector", "  restartPolicy: Always\n  nodeSelector"),
                "spec.restartPolicy",
            ),
            (
                GOOD.replace("team: a", "openshell.io/runtime: a"),
                "metadata.labels.openshell.io/runtime",
            ),
        ] {
            let e = parse(&text).unwrap_err().to_string();
            assert!(
                e.contains("/etc/t.yaml") && e.contains(field),
                "{field}: {e}"
            );
        }
        assert!(parse("spec: [")
            .unwrap_err()
            .to_string()
            .contains("/etc/t.yaml"));
        assert!(parse("metadata: {}")
            .unwrap_err()
            .to_string()
            .contains("spec"));
    }
}
