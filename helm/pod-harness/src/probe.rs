//! The kubelet's probes, HTTP GET only (the chart's probes are HTTP):
//! startup gates readiness and liveness; readiness sets the pod's Ready
//! condition after `successThreshold` successes and clears it after
//! `failureThreshold` failures; liveness reports a restart after
//! `failureThreshold` failures. A pod without a readiness probe is ready
//! once started, as in Kubernetes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::core::v1::{PodSpec, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What the probes found.
#[derive(Debug, Default)]
pub struct Health {
    started: AtomicBool,
    ready: AtomicBool,
    liveness_failed: AtomicBool,
}

impl Health {
    /// The Ready condition.
    pub fn ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// Liveness failed `failureThreshold` times in a row.
    pub fn liveness_failed(&self) -> bool {
        self.liveness_failed.load(Ordering::SeqCst)
    }

    /// After a restart: nothing known.
    pub fn reset(&self) {
        self.started.store(false, Ordering::SeqCst);
        self.ready.store(false, Ordering::SeqCst);
        self.liveness_failed.store(false, Ordering::SeqCst);
    }
}

/// One pod's probes.
#[derive(Debug, Clone)]
pub struct ProbeSet {
    ip: String,
    startup: Option<Probe>,
    readiness: Option<Probe>,
    liveness: Option<Probe>,
    container_ports: Vec<(String, i32)>,
}

impl ProbeSet {
    /// The probes of `spec`'s container, aimed at `ip`.
    pub fn of(spec: &PodSpec, ip: &str) -> ProbeSet {
        let c = spec.containers.first();
        ProbeSet {
            ip: ip.to_string(),
            startup: c.and_then(|c| c.startup_probe.clone()),
            readiness: c.and_then(|c| c.readiness_probe.clone()),
            liveness: c.and_then(|c| c.liveness_probe.clone()),
            container_ports: c
                .iter()
                .flat_map(|c| c.ports.iter().flatten())
                .filter_map(|p| Some((p.name.clone()?, p.container_port)))
                .collect(),
        }
    }

    /// Probes until aborted, writing into `health`.
    pub async fn run(self, health: std::sync::Arc<Health>) {
        if let Some(p) = &self.startup {
            self.wait_initial(p).await;
            let mut failures = 0;
            loop {
                if self.check(p).await {
                    break;
                }
                failures += 1;
                if failures >= p.failure_threshold.unwrap_or(3) {
                    health.liveness_failed.store(true, Ordering::SeqCst);
                    return;
                }
                tokio::time::sleep(period(p)).await;
            }
        }
        health.started.store(true, Ordering::SeqCst);
        let readiness = self.readiness.clone();
        let liveness = self.liveness.clone();
        let me = self.clone();
        let h = health.clone();
        let ready_task = tokio::spawn(async move {
            let Some(p) = readiness else {
                h.ready.store(true, Ordering::SeqCst);
                return;
            };
            me.wait_initial(&p).await;
            let (mut ok, mut bad) = (0, 0);
            loop {
                if me.check(&p).await {
                    ok += 1;
                    bad = 0;
                    if ok >= p.success_threshold.unwrap_or(1) {
                        h.ready.store(true, Ordering::SeqCst);
                    }
                } else {
                    bad += 1;
                    ok = 0;
                    if bad >= p.failure_threshold.unwrap_or(3) {
                        h.ready.store(false, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(period(&p)).await;
            }
        });
        if let Some(p) = liveness {
            self.wait_initial(&p).await;
            let mut bad = 0;
            loop {
                if self.check(&p).await {
                    bad = 0;
                } else {
                    bad += 1;
                    if bad >= p.failure_threshold.unwrap_or(3) {
                        health.liveness_failed.store(true, Ordering::SeqCst);
                        break;
                    }
                }
                tokio::time::sleep(period(&p)).await;
            }
        }
        let _ = ready_task.await;
    }

    async fn wait_initial(&self, p: &Probe) {
        let d = u64::try_from(p.initial_delay_seconds.unwrap_or(0)).unwrap_or(0);
        tokio::time::sleep(Duration::from_secs(d)).await;
    }

    /// One HTTP GET: a 2xx or 3xx status within `timeoutSeconds`.
    async fn check(&self, p: &Probe) -> bool {
        let Some(get) = &p.http_get else {
            return p.tcp_socket.is_none() && p.exec.is_none();
        };
        let port = match &get.port {
            IntOrString::Int(n) => *n,
            IntOrString::String(name) => match self.container_ports.iter().find(|(n, _)| n == name)
            {
                Some((_, port)) => *port,
                None => return false,
            },
        };
        let path = get.path.clone().unwrap_or_else(|| "/".to_string());
        let timeout =
            Duration::from_secs(u64::try_from(p.timeout_seconds.unwrap_or(1)).unwrap_or(1));
        let addr = format!("{}:{port}", self.ip);
        let attempt = async {
            let mut s = TcpStream::connect(&addr).await.ok()?;
            let req = format!(
                "GET {path} HTTP/1.0\r\nHost: {addr}\r\nUser-Agent: kube-probe/harness\r\n\r\n"
            );
            s.write_all(req.as_bytes()).await.ok()?;
            let mut buf = vec![0u8; 64];
            let n = s.read(&mut buf).await.ok()?;
            let line = String::from_utf8_lossy(&buf[..n]).to_string();
            let code: u16 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some((200..400).contains(&code))
        };
        matches!(tokio::time::timeout(timeout, attempt).await, Ok(Some(true)))
    }
}

fn period(p: &Probe) -> Duration {
    Duration::from_secs(
        u64::try_from(p.period_seconds.unwrap_or(10))
            .unwrap_or(10)
            .max(1),
    )
}
