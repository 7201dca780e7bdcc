//! The harness's "cluster": the controllers (StatefulSet, Deployment), the
//! kubelet's part (probes, restarts, `preStop`, grace periods) and Services,
//! over [`RunningPod`]s on one bridge.
//!
//! What it does as Kubernetes does, because the chart relies on it:
//! - StatefulSet, `podManagementPolicy: Parallel`: pods `<name>-<ordinal>`
//!   for every ordinal below `replicas`, created and deleted without waiting
//!   for each other; scaling down deletes the highest ordinals; a claim per
//!   `volumeClaimTemplate` and pod that outlives the pod.
//! - Deployment, `RollingUpdate`: a new pod is created while the total stays
//!   within `replicas + maxSurge`; an old pod is deleted only while the ready
//!   pods stay at least `replicas - maxUnavailable`; scaling down deletes
//!   not-ready pods first, then the newest.
//! - A deleted pod leaves every Service's endpoints at once, runs its
//!   `preStop` hook, then gets SIGTERM, and SIGKILL when
//!   `terminationGracePeriodSeconds` has passed since the deletion.
//! - `restartPolicy: Always`: an exited container restarts, with backoff.
//! - Probes (HTTP GET): startup gates the others; readiness sets the pod's
//!   Ready condition; `failureThreshold` liveness failures restart it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::manifest::Manifests;
use crate::pod::{PodContext, PodPlan, RunningPod};
use crate::probe::{Health, ProbeSet};
use crate::proxy::{self, Endpoints};

/// The cluster domain the chart's names use.
pub const CLUSTER_DOMAIN: &str = "cluster.local";

/// Which controller owns a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// A StatefulSet, with the pod's ordinal.
    StatefulSet(String, i32),
    /// A Deployment, with the hash of the template the pod was made from.
    Deployment(String, String),
    /// Created through the API (a sandbox runtime), with the object as
    /// created.
    Api(Box<serde_json::Value>),
}

/// Why the API refused a create.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// A pod of that name exists.
    #[error("pod {0} already exists")]
    Exists(String),
    /// The object is not a pod the harness can run.
    #[error("{0}")]
    Invalid(String),
}

/// A pod the harness manages.
#[derive(Debug)]
pub struct Pod {
    /// Its controller.
    pub owner: Owner,
    /// The process, unless it is between restarts.
    pub running: Option<RunningPod>,
    /// Probe results.
    pub health: Arc<Health>,
    /// Labels from the template.
    pub labels: BTreeMap<String, String>,
    /// When it was created.
    pub created: Instant,
    /// Set when deletion began: when SIGKILL is due.
    pub kill_at: Option<Instant>,
    /// Restarts so far, and when the next one is due.
    pub restarts: u32,
    /// `restartPolicy: Never` and the container exited: its exit code.
    pub terminated: Option<i32>,
    next_start: Option<Instant>,
    probes: Option<tokio::task::JoinHandle<()>>,
    pub(crate) plan: PodPlan,
}

impl Pod {
    /// Ready and not being deleted: an endpoint.
    pub fn ready(&self) -> bool {
        self.kill_at.is_none() && self.running.is_some() && self.health.ready()
    }

    /// The pod's address.
    pub fn ip(&self) -> &str {
        &self.plan.ip
    }

    /// Container pid (for tests that check a process survived).
    pub fn pid(&self) -> Option<u32> {
        self.running.as_ref().and_then(RunningPod::container_pid)
    }
}

/// A Service the harness serves.
#[derive(Debug)]
struct ServiceState {
    name: String,
    vip: Option<String>,
    headless: bool,
    all_pods: bool,
    selector: BTreeMap<String, String>,
    /// (service port, target port or name, endpoints)
    ports: Vec<(i32, IntOrString, Endpoints)>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// The whole harness state. Drive it with [`Cluster::reconcile`].
pub struct Cluster {
    /// The bridge and namespaces (removed on drop).
    pub net: jepsen::net::Net,
    /// The release's objects (replicas and templates change through the
    /// harness's own methods).
    pub manifests: Manifests,
    /// The release's namespace.
    pub namespace: String,
    pub(crate) ctx: PodContext,
    /// Pods by name.
    pub pods: BTreeMap<String, Pod>,
    services: Vec<ServiceState>,
    next_ip: u8,
    next_port: u32,
    pub(crate) serial: u64,
    /// Pods whose grace period ran out (killed, not stopped), in order.
    pub grace_kills: Vec<String>,
}

impl Cluster {
    /// Sets up the network and the Services of `manifests`; starts no pod.
    ///
    /// # Errors
    /// When the network or a Service's address cannot be set up.
    pub async fn new(
        run: &str,
        root: PathBuf,
        bin_dir: PathBuf,
        manifests: Manifests,
        namespace: &str,
    ) -> anyhow::Result<Cluster> {
        let net = jepsen::net::Net::setup(run, 0)?;
        std::fs::create_dir_all(&root)?;
        let hosts = root.join("hosts");
        std::fs::write(&hosts, "127.0.0.1 localhost\n")?;
        let ctx = PodContext {
            root,
            bin_dir,
            hosts,
            extra_env: BTreeMap::new(),
            api_ca: None,
        };
        let mut c = Cluster {
            net,
            manifests,
            namespace: namespace.to_string(),
            ctx,
            pods: BTreeMap::new(),
            services: Vec::new(),
            next_ip: 20,
            next_port: 0,
            serial: 0,
            grace_kills: Vec::new(),
        };
        c.start_services().await?;
        c.write_hosts()?;
        Ok(c)
    }

    /// Adds what every pod gets to reach the in-cluster API: its address
    /// (environment) and CA (with a token, mounted).
    pub fn set_api(&mut self, env: BTreeMap<String, String>, ca_pem: Vec<u8>) {
        self.ctx.extra_env = env;
        self.ctx.api_ca = Some(ca_pem);
    }

    async fn start_services(&mut self) -> anyhow::Result<()> {
        let link = self.net.host_link();
        let mut k = 0u8;
        for (name, svc) in &self.manifests.services {
            let spec = svc.spec.clone().unwrap_or_default();
            let headless = spec.cluster_ip.as_deref() == Some("None");
            let vip = if headless {
                None
            } else {
                k += 1;
                let ip = format!("10.211.{}.{}", self.net.octet, 230 + k);
                jepsen::net::sh(&["ip", "addr", "add", &format!("{ip}/32"), "dev", &link])?;
                Some(ip)
            };
            let mut state = ServiceState {
                name: name.clone(),
                vip: vip.clone(),
                headless,
                all_pods: spec.publish_not_ready_addresses == Some(true),
                selector: spec.selector.clone().unwrap_or_default(),
                ports: Vec::new(),
                tasks: Vec::new(),
            };
            for p in spec.ports.iter().flatten() {
                let target = p.target_port.clone().unwrap_or(IntOrString::Int(p.port));
                let endpoints = Endpoints::default();
                if let Some(vip) = &vip {
                    let task = proxy::serve(format!("{vip}:{}", p.port), endpoints.clone())
                        .await
                        .with_context(|| format!("Service {name} port {}", p.port))?;
                    state.tasks.push(task);
                }
                state.ports.push((p.port, target, endpoints));
            }
            self.services.push(state);
        }
        Ok(())
    }

    /// `/etc/hosts` of every pod: Services by their DNS names, StatefulSet
    /// pods by `<pod>.<service>` names; rewritten in place.
    fn write_hosts(&self) -> anyhow::Result<()> {
        let ns = &self.namespace;
        let mut text = String::from("127.0.0.1 localhost\n");
        text.push_str(&format!(
            "{} kubernetes kubernetes.default kubernetes.default.svc kubernetes.default.svc.{CLUSTER_DOMAIN}\n",
            self.net.harness_ip()
        ));
        for s in &self.services {
            if let Some(vip) = &s.vip {
                let n = &s.name;
                text.push_str(&format!(
                    "{vip} {n}.{ns}.svc.{CLUSTER_DOMAIN} {n}.{ns}.svc {n}.{ns} {n}\n"
                ));
            }
        }
        for (pod, p) in &self.pods {
            let Owner::StatefulSet(sts, _) = &p.owner else {
                continue;
            };
            let Some(service) = self
                .manifests
                .statefulsets
                .get(sts)
                .and_then(|s| s.spec.as_ref())
                .and_then(|s| s.service_name.clone())
            else {
                continue;
            };
            text.push_str(&format!(
                "{ip} {pod}.{service}.{ns}.svc.{CLUSTER_DOMAIN} {pod}.{service}.{ns}.svc {pod}.{service}.{ns} {pod}.{service} {pod}\n",
                ip = p.ip()
            ));
        }
        rewrite_in_place(&self.ctx.hosts, &text)
    }

    /// One pass of every controller, the kubelet and the endpoints.
    ///
    /// # Errors
    /// When a pod cannot be created or started (the spec is not one the
    /// harness runs, a volume source is missing).
    pub fn reconcile(&mut self) -> anyhow::Result<()> {
        self.reconcile_statefulsets()?;
        self.reconcile_deployments()?;
        self.kubelet()?;
        self.update_endpoints();
        self.write_hosts()
    }

    pub(crate) fn create_pod(
        &mut self,
        name: &str,
        owner: Owner,
        template: &PodTemplateSpec,
        claims: BTreeMap<String, PathBuf>,
    ) -> anyhow::Result<()> {
        let ns = self.namespace.clone();
        self.create_pod_in(&ns, name, owner, template, claims)
    }

    pub(crate) fn create_pod_in(
        &mut self,
        namespace: &str,
        name: &str,
        owner: Owner,
        template: &PodTemplateSpec,
        claims: BTreeMap<String, PathBuf>,
    ) -> anyhow::Result<()> {
        let ip = format!("10.211.{}.{}", self.net.octet, self.next_ip);
        self.next_ip = if self.next_ip >= 199 {
            20
        } else {
            self.next_ip + 1
        };
        self.next_port += 1;
        let netns = format!("{}-p{}", self.net.prefix, self.next_port);
        self.net
            .plug(&netns, &format!("p{}", self.next_port), &ip)?;
        let spec: PodSpec = template.spec.clone().unwrap_or_default();
        let labels = template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.clone())
            .unwrap_or_default();
        let plan = PodPlan {
            name: name.to_string(),
            namespace: namespace.to_string(),
            ip,
            netns,
            spec,
            claims,
        };
        tracing::info!(pod = name, ip = %plan.ip, "pod created");
        self.pods.insert(
            name.to_string(),
            Pod {
                owner,
                running: None,
                health: Arc::new(Health::default()),
                labels,
                created: Instant::now(),
                kill_at: None,
                restarts: 0,
                terminated: None,
                next_start: Some(Instant::now()),
                probes: None,
                plan,
            },
        );
        Ok(())
    }

    /// Begins deleting pod `name`: out of the endpoints now, `preStop`, then
    /// SIGTERM; SIGKILL at the end of the grace period.
    pub fn delete_pod(&mut self, name: &str) {
        let Some(p) = self.pods.get_mut(name) else {
            return;
        };
        if p.kill_at.is_some() {
            return;
        }
        let grace = p.plan.spec.termination_grace_period_seconds.unwrap_or(30);
        p.kill_at = Some(Instant::now() + Duration::from_secs(u64::try_from(grace).unwrap_or(30)));
        tracing::info!(pod = name, grace, "pod deleting");
        let hook = p
            .plan
            .spec
            .containers
            .first()
            .and_then(|c| c.lifecycle.as_ref())
            .and_then(|l| l.pre_stop.as_ref())
            .and_then(|h| h.exec.as_ref())
            .and_then(|e| e.command.clone());
        if let Some(running) = &p.running {
            let pid = running.container_pid();
            let hook = hook.and_then(|argv| {
                running.exec_command(
                    &argv,
                    Duration::from_secs(u64::try_from(grace).unwrap_or(30)),
                )
            });
            let pod = name.to_string();
            // The kubelet runs preStop, then sends SIGTERM; neither blocks
            // the other pods.
            std::thread::spawn(move || {
                if let Some(mut cmd) = hook {
                    let status = cmd.status();
                    tracing::info!(pod, ?status, "preStop hook ran");
                }
                if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
                    // SAFETY: kill(2) on the pod's container pid; no memory is touched.
                    unsafe {
                        libc::kill(pid, libc::SIGTERM);
                    }
                }
            });
        }
    }

    /// The kubelet: start and restart containers, probes, and finish
    /// deletions.
    fn kubelet(&mut self) -> anyhow::Result<()> {
        let now = Instant::now();
        let mut gone = Vec::new();
        for (name, p) in &mut self.pods {
            if let Some(kill_at) = p.kill_at {
                let exited = p.running.as_mut().is_none_or(|r| r.exited().is_some());
                if exited || now >= kill_at {
                    if let Some(mut r) = p.running.take() {
                        if !exited {
                            tracing::warn!(pod = %name, "grace period over: SIGKILL");
                            self.grace_kills.push(name.clone());
                        }
                        r.kill();
                    }
                    gone.push(name.clone());
                }
                continue;
            }
            if let Some(r) = &mut p.running {
                let exit = r.exited();
                let never = p.plan.spec.restart_policy.as_deref() == Some("Never");
                if never && exit.is_some() {
                    p.terminated = Some(exit.and_then(|e| e.code()).unwrap_or(137));
                    tracing::info!(pod = %name, code = ?p.terminated, "container exited (restartPolicy Never)");
                    p.running = None;
                    p.health.reset();
                    continue;
                }
                let dead = exit.is_some() || p.health.liveness_failed();
                if dead {
                    tracing::warn!(pod = %name, restarts = p.restarts, "container exited or failed liveness; restarting");
                    r.kill();
                    p.running = None;
                    if let Some(t) = p.probes.take() {
                        t.abort();
                    }
                    p.health.reset();
                    p.restarts += 1;
                    let backoff =
                        Duration::from_secs(u64::from((1u32 << p.restarts.min(4)).min(10)));
                    p.next_start = Some(now + backoff);
                }
            }
            if p.running.is_none() && p.next_start.is_some_and(|t| now >= t) {
                p.next_start = None;
                let running = RunningPod::start(&self.ctx, &self.manifests, p.plan.clone())?;
                let probes = ProbeSet::of(&p.plan.spec, &p.plan.ip);
                p.probes = Some(tokio::spawn(probes.run(p.health.clone())));
                p.running = Some(running);
            }
        }
        for name in gone {
            if let Some(mut p) = self.pods.remove(&name) {
                if let Some(t) = p.probes.take() {
                    t.abort();
                }
                let _ = self.net.unplug(&p.plan.netns);
                tracing::info!(pod = %name, "pod deleted");
            }
        }
        Ok(())
    }

    fn update_endpoints(&self) {
        for s in &self.services {
            for (_, target, endpoints) in &s.ports {
                let mut list = Vec::new();
                for p in self.pods.values() {
                    let matches = !s.selector.is_empty()
                        && s.selector.iter().all(|(k, v)| p.labels.get(k) == Some(v));
                    let serving = if s.all_pods {
                        p.kill_at.is_none() && p.running.is_some()
                    } else {
                        p.ready()
                    };
                    if matches && serving {
                        if let Some(port) = target_port(&p.plan.spec, target) {
                            list.push(format!("{}:{port}", p.ip()));
                        }
                    }
                }
                list.sort();
                endpoints.set(list);
            }
            let _ = s.headless;
        }
    }

    /// Sets a StatefulSet's replicas (`kubectl scale`).
    ///
    /// # Errors
    /// When there is no such StatefulSet.
    pub fn scale_statefulset(&mut self, name: &str, replicas: i32) -> anyhow::Result<()> {
        let s = self
            .manifests
            .statefulsets
            .get_mut(name)
            .with_context(|| format!("no StatefulSet {name}"))?;
        s.spec.get_or_insert_with(Default::default).replicas = Some(replicas);
        Ok(())
    }

    /// Sets a Deployment's replicas.
    ///
    /// # Errors
    /// When there is no such Deployment.
    pub fn scale_deployment(&mut self, name: &str, replicas: i32) -> anyhow::Result<()> {
        let d = self
            .manifests
            .deployments
            .get_mut(name)
            .with_context(|| format!("no Deployment {name}"))?;
        d.spec.get_or_insert_with(Default::default).replicas = Some(replicas);
        Ok(())
    }

    /// Replaces the release's objects (`helm upgrade`): templates and
    /// replicas change, pods follow on the next passes; Services and files
    /// are taken as they are.
    pub fn upgrade(&mut self, mut manifests: Manifests) {
        // Secrets created through the API (runtime TLS) are not the chart's.
        for (name, secret) in std::mem::take(&mut self.manifests.secrets) {
            manifests.secrets.entry(name).or_insert(secret);
        }
        self.manifests = manifests;
    }

    /// Begins deleting every pod at once (their grace periods run).
    pub fn delete_all(&mut self) {
        let names: Vec<String> = self.pods.keys().cloned().collect();
        for n in &names {
            self.delete_pod(n);
        }
    }

    /// One kubelet pass during shutdown: true once no pod is left.
    ///
    /// # Errors
    /// As [`Cluster::reconcile`].
    pub fn drain_step(&mut self) -> anyhow::Result<bool> {
        self.kubelet()?;
        Ok(self.pods.is_empty())
    }

    /// Stops serving the Services.
    pub fn stop_services(&mut self) {
        for s in &self.services {
            for t in &s.tasks {
                t.abort();
            }
        }
    }

    /// The command that runs `argv` in pod `name` (its namespaces, user
    /// and environment); run it without holding the harness's lock.
    ///
    /// # Errors
    /// When the pod is not running.
    pub fn exec_in(
        &self,
        name: &str,
        argv: &[String],
        timeout: Duration,
    ) -> anyhow::Result<std::process::Command> {
        let running = self
            .pods
            .get(name)
            .and_then(|p| p.running.as_ref())
            .with_context(|| format!("pod {name} is not running"))?;
        running
            .exec_command(argv, timeout)
            .with_context(|| format!("pod {name} has no container process yet"))
    }
}

/// The container port a Service's `targetPort` names.
fn target_port(spec: &PodSpec, target: &IntOrString) -> Option<i32> {
    match target {
        IntOrString::Int(p) => Some(*p),
        IntOrString::String(name) => spec
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| p.name.as_deref() == Some(name.as_str()))
            .map(|p| p.container_port),
    }
}

/// Writes `text` into the file at `path` keeping its inode (every pod's
/// `/etc/hosts` is a bind mount of it), and only when it changed. A
/// truncating write on every reconcile pass left the file empty for a
/// moment, and a pod resolving a Service name right then got "Temporary
/// failure in name resolution" (`t01_supervisors_scale_by_drain`'s
/// `sandbox create`, CI rehearsal of 2026-12-06). The file is overwritten
/// from its start and only then cut to length, so it is never empty: a
/// reader in between sees the new lines and at worst a tail of old ones.
fn rewrite_in_place(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    use std::io::{Seek, Write};
    if std::fs::read_to_string(path).is_ok_and(|current| current == text) {
        return Ok(());
    }
    let mut file = std::fs::OpenOptions::new().write(true).open(path)?;
    file.seek(std::io::SeekFrom::Start(0))?;
    file.write_all(text.as_bytes())?;
    file.set_len(text.len() as u64)?;
    Ok(())
}
