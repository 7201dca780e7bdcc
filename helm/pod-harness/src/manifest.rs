//! The rendered chart, as typed Kubernetes objects (k8s-openapi): what the
//! harness runs (StatefulSets, Deployments), what it serves from (Services,
//! ConfigMaps, Secrets) and what it only checks (the rest).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use serde_json::Value;

/// The objects of one rendered release.
#[derive(Debug, Default, Clone)]
pub struct Manifests {
    /// By name.
    pub statefulsets: BTreeMap<String, StatefulSet>,
    /// By name.
    pub deployments: BTreeMap<String, Deployment>,
    /// By name.
    pub services: BTreeMap<String, Service>,
    /// By name.
    pub configmaps: BTreeMap<String, ConfigMap>,
    /// By name.
    pub secrets: BTreeMap<String, Secret>,
    /// Every other object, untyped (`kind/name`).
    pub others: BTreeMap<String, Value>,
}

impl Manifests {
    /// Parses a multi-document YAML stream (`---` separated), as `helm
    /// template` prints it, or a JSON array of objects.
    ///
    /// # Errors
    /// When a document does not parse or an object of a kind the harness
    /// runs does not match its schema.
    pub fn parse(text: &str) -> anyhow::Result<Manifests> {
        let mut docs = Vec::new();
        if text.trim_start().starts_with('[') {
            let all: Vec<Value> = serde_json::from_str(text).context("a JSON array of objects")?;
            docs.extend(all);
        } else if text.trim_start().starts_with('{') {
            // render.py's answer: {"objects": [...], ...}
            let all: Value = serde_json::from_str(text).context("a JSON object")?;
            docs.extend(all["objects"].as_array().cloned().unwrap_or_default());
        } else {
            for doc in serde_yaml_ng::Deserializer::from_str(text) {
                let v: Value = serde::Deserialize::deserialize(doc).context("a YAML document")?;
                if !v.is_null() {
                    docs.push(v);
                }
            }
        }
        let mut m = Manifests::default();
        for doc in docs {
            m.add(doc)?;
        }
        Ok(m)
    }

    /// Reads [`Manifests::parse`] from a file.
    ///
    /// # Errors
    /// When the file cannot be read or parsed.
    pub fn load(path: &Path) -> anyhow::Result<Manifests> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Manifests::parse(&text).with_context(|| format!("parsing {}", path.display()))
    }

    fn add(&mut self, doc: Value) -> anyhow::Result<()> {
        let kind = doc["kind"].as_str().unwrap_or_default().to_string();
        let Some(name) = doc["metadata"]["name"].as_str().map(str::to_string) else {
            bail!("an object of kind {kind:?} without metadata.name");
        };
        let typed = |what: &str| format!("{what} {name}");
        match kind.as_str() {
            "StatefulSet" => {
                let o = serde_json::from_value(doc).with_context(|| typed("StatefulSet"))?;
                self.statefulsets.insert(name, o);
            }
            "Deployment" => {
                let o = serde_json::from_value(doc).with_context(|| typed("Deployment"))?;
                self.deployments.insert(name, o);
            }
            "Service" => {
                let o = serde_json::from_value(doc).with_context(|| typed("Service"))?;
                self.services.insert(name, o);
            }
            "ConfigMap" => {
                let o = serde_json::from_value(doc).with_context(|| typed("ConfigMap"))?;
                self.configmaps.insert(name, o);
            }
            "Secret" => {
                let o = serde_json::from_value(doc).with_context(|| typed("Secret"))?;
                self.secrets.insert(name, o);
            }
            _ => {
                self.others.insert(format!("{kind}/{name}"), doc);
            }
        }
        Ok(())
    }

    /// The files of ConfigMap `name`: key → bytes.
    ///
    /// # Errors
    /// When there is no such ConfigMap.
    pub fn configmap_files(&self, name: &str) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
        let cm = self
            .configmaps
            .get(name)
            .with_context(|| format!("ConfigMap {name} is not in the release"))?;
        let mut out = BTreeMap::new();
        for (k, v) in cm.data.iter().flatten() {
            out.insert(k.clone(), v.clone().into_bytes());
        }
        for (k, v) in cm.binary_data.iter().flatten() {
            out.insert(k.clone(), v.0.clone());
        }
        Ok(out)
    }

    /// The files of Secret `name`: key → bytes (`stringData` wins, as the
    /// API server merges it).
    ///
    /// # Errors
    /// When there is no such Secret.
    pub fn secret_files(&self, name: &str) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
        let s = self
            .secrets
            .get(name)
            .with_context(|| format!("Secret {name} is not in the release"))?;
        let mut out = BTreeMap::new();
        for (k, v) in s.data.iter().flatten() {
            out.insert(k.clone(), v.0.clone());
        }
        for (k, v) in s.string_data.iter().flatten() {
            out.insert(k.clone(), v.clone().into_bytes());
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_yaml_streams_and_secrets() {
        let text = "---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {a: aGk=}\nstringData: {b: yo}\n---\n# comment only\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {x.toml: 'k = 1'}\n---\napiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: p}\n";
        let m = Manifests::parse(text).unwrap();
        assert_eq!(m.secret_files("s").unwrap()["a"], b"hi");
        assert_eq!(m.secret_files("s").unwrap()["b"], b"yo");
        assert_eq!(m.configmap_files("c").unwrap()["x.toml"], b"k = 1");
        assert!(m.others.contains_key("PodDisruptionBudget/p"));
        assert!(m.configmap_files("nope").is_err());
    }
}
