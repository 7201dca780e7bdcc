//! The controllers: StatefulSet (`podManagementPolicy: Parallel`, ordinals,
//! claims) and Deployment (`RollingUpdate` within `maxSurge` and
//! `maxUnavailable`, judged by readiness), as passes over [`Cluster`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::cluster::{Cluster, Owner, Pod};

impl Cluster {
    pub(crate) fn reconcile_statefulsets(&mut self) -> anyhow::Result<()> {
        let sets: Vec<_> = self
            .manifests
            .statefulsets
            .iter()
            .map(|(n, s)| (n.clone(), s.clone()))
            .collect();
        for (name, sts) in sets {
            let spec = sts.spec.clone().unwrap_or_default();
            let replicas = spec.replicas.unwrap_or(1);
            for ordinal in 0..replicas {
                let pod = format!("{name}-{ordinal}");
                if !self.pods.contains_key(&pod) {
                    let mut claims = BTreeMap::new();
                    for t in spec.volume_claim_templates.iter().flatten() {
                        let claim = t.metadata.name.clone().unwrap_or_default();
                        claims.insert(
                            claim.clone(),
                            self.ctx.root.join("pvc").join(format!("{claim}-{pod}")),
                        );
                    }
                    self.create_pod(
                        &pod,
                        Owner::StatefulSet(name.clone(), ordinal),
                        &spec.template,
                        claims,
                    )?;
                }
            }
            let extra: Vec<String> = self
                .pods
                .iter()
                .filter(|(_, p)| matches!(&p.owner, Owner::StatefulSet(s, o) if *s == name && *o >= replicas))
                .map(|(n, _)| n.clone())
                .collect();
            for pod in extra {
                self.delete_pod(&pod);
            }
        }
        Ok(())
    }

    pub(crate) fn reconcile_deployments(&mut self) -> anyhow::Result<()> {
        let deps: Vec<_> = self
            .manifests
            .deployments
            .iter()
            .map(|(n, d)| (n.clone(), d.clone()))
            .collect();
        for (name, dep) in deps {
            let spec = dep.spec.clone().unwrap_or_default();
            let replicas = spec.replicas.unwrap_or(1);
            let hash = template_hash(&spec.template);
            let (surge, unavailable) = rolling(&spec, replicas);
            let live: Vec<(&String, &Pod)> = self
                .pods
                .iter()
                .filter(|(_, p)| {
                    p.kill_at.is_none() && matches!(&p.owner, Owner::Deployment(d, _) if *d == name)
                })
                .collect();
            let new: Vec<_> = live
                .iter()
                .filter(|(_, p)| matches!(&p.owner, Owner::Deployment(_, h) if *h == hash))
                .collect();
            let old: Vec<_> = live
                .iter()
                .filter(|(_, p)| !matches!(&p.owner, Owner::Deployment(_, h) if *h == hash))
                .collect();
            let ready = live.iter().filter(|(_, p)| p.ready()).count() as i32;
            let total = live.len() as i32;
            let new_count = new.len() as i32;
            let mut create = 0;
            let mut delete: Vec<String> = Vec::new();
            if new_count < replicas && total < replicas + surge {
                create = (replicas - new_count).min(replicas + surge - total);
            }
            if !old.is_empty() {
                // Delete old pods while the ready ones stay >= replicas - maxUnavailable.
                let mut can = ready - (replicas - unavailable);
                let mut olds: Vec<_> = old.iter().collect();
                olds.sort_by_key(|(_, p)| p.ready()); // not-ready first
                for (n, p) in olds {
                    if !p.ready() {
                        delete.push((*n).clone());
                    } else if can > 0 {
                        can -= 1;
                        delete.push((*n).clone());
                    }
                }
            } else if new_count > replicas {
                let mut news: Vec<_> = new.iter().collect();
                // Not-ready first, then the newest.
                news.sort_by_key(|(_, p)| (p.ready(), std::cmp::Reverse(p.created)));
                delete.extend(
                    news.iter()
                        .take((new_count - replicas) as usize)
                        .map(|(n, _)| (*n).clone()),
                );
            }
            for _ in 0..create {
                self.serial += 1;
                let pod = format!("{name}-{}-{:05x}", &hash[..8.min(hash.len())], self.serial);
                self.create_pod(
                    &pod,
                    Owner::Deployment(name.clone(), hash.clone()),
                    &spec.template,
                    BTreeMap::new(),
                )?;
            }
            for pod in delete {
                self.delete_pod(&pod);
            }
        }
        Ok(())
    }
}

/// `(maxSurge, maxUnavailable)` of a Deployment, as numbers of pods.
fn rolling(spec: &k8s_openapi::api::apps::v1::DeploymentSpec, replicas: i32) -> (i32, i32) {
    let ru = spec
        .strategy
        .as_ref()
        .and_then(|s| s.rolling_update.clone())
        .unwrap_or_default();
    let resolve = |v: Option<IntOrString>, round_up: bool| match v {
        None => (replicas + 3) / 4,
        Some(IntOrString::Int(n)) => n,
        Some(IntOrString::String(p)) => {
            let pct: i32 = p.trim_end_matches('%').parse().unwrap_or(25);
            if round_up {
                (replicas * pct + 99) / 100
            } else {
                replicas * pct / 100
            }
        }
    };
    let surge = resolve(ru.max_surge, true);
    let unavailable = resolve(ru.max_unavailable, false);
    if surge == 0 && unavailable == 0 {
        (1, 0)
    } else {
        (surge, unavailable)
    }
}

/// A short hash of a pod template (`pod-template-hash`).
fn template_hash(t: &PodTemplateSpec) -> String {
    let text = serde_json::to_string(t).unwrap_or_default();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}
