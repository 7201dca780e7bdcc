//! The chart as the scenarios use it: render it with Helm's own library
//! (`helm/chart-tests/render.py`, helm-python-sdk in the test venv), start it
//! in a [`Harness`], and talk to it the way an operator would — the CLI run
//! inside a gateway pod, with the CA and token the chart mounted there.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::Value;

use crate::cluster::Owner;
use crate::harness::Harness;
use crate::manifest::Manifests;

/// The venv `scripts/test-deps.sh` installs helm-python-sdk into.
pub const VENV_PYTHON: &str = "/opt/openshell-test-venv/bin/python";

/// The release name and namespace the scenarios install.
pub const RELEASE: &str = "rel";
/// The namespace.
pub const NAMESPACE: &str = "openshell";

/// `helm template` of `helm/openshell-gateway` with `values`.
///
/// # Errors
/// When the venv or the chart is missing, or Helm refuses the values.
pub fn render(workspace: &Path, values: &Value) -> anyhow::Result<Manifests> {
    let script = workspace.join("helm/chart-tests/render.py");
    let request = serde_json::json!({"values": values, "name": RELEASE, "namespace": NAMESPACE});
    let mut child = Command::new(VENV_PYTHON)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| {
            format!(
                "{VENV_PYTHON} {} (install it: bash scripts/test-deps.sh, as root)",
                script.display()
            )
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write;
        stdin.write_all(request.to_string().as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("render.py: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Manifests::parse(&String::from_utf8_lossy(&out.stdout))
}

/// The gateway StatefulSet's name.
pub fn gateway_set() -> String {
    format!("{RELEASE}-openshell-gateway")
}

/// The supervisor Deployment's name.
pub fn supervisor_deployment() -> String {
    format!("{RELEASE}-openshell-gateway-supervisor")
}

/// A started release and how to reach it.
pub struct Release {
    /// The harness running it.
    pub harness: Harness,
}

impl Release {
    /// Starts `manifests` with the image's binaries from `bin_dir`.
    ///
    /// # Errors
    /// When the harness cannot start.
    pub async fn start(
        run: &str,
        root: PathBuf,
        bin_dir: PathBuf,
        manifests: Manifests,
    ) -> anyhow::Result<Release> {
        let harness = Harness::start(run, root, bin_dir, manifests, NAMESPACE).await?;
        Ok(Release { harness })
    }

    /// Names of the pods `filter` selects, ready or not.
    pub fn pods(&self, filter: impl Fn(&Owner) -> bool) -> Vec<String> {
        self.harness.with(|c| {
            c.pods
                .iter()
                .filter(|(_, p)| p.kill_at.is_none() && filter(&p.owner))
                .map(|(n, _)| n.clone())
                .collect()
        })
    }

    /// Ready gateway pods.
    pub fn ready_gateways(&self) -> usize {
        self.harness.with(|c| {
            c.pods
                .values()
                .filter(|p| {
                    matches!(&p.owner, Owner::StatefulSet(s, _) if *s == gateway_set()) && p.ready()
                })
                .count()
        })
    }

    /// Ready supervisor pods.
    pub fn ready_supervisors(&self) -> usize {
        self.harness.with(|c| {
            c.pods
                .values()
                .filter(|p| {
                    matches!(&p.owner, Owner::Deployment(d, _) if *d == supervisor_deployment())
                        && p.ready()
                })
                .count()
        })
    }

    /// Runs `openshell-pool <args> -o json` inside a ready gateway pod
    /// against the client Service, with the mounted CA and admin token.
    ///
    /// # Errors
    /// When no gateway pod is ready or the CLI fails.
    pub fn cli(&self, args: &[&str]) -> anyhow::Result<Value> {
        let pod = self
            .harness
            .with(|c| {
                c.pods
                    .iter()
                    .find(|(_, p)| {
                        matches!(&p.owner, Owner::StatefulSet(s, _) if *s == gateway_set())
                            && p.ready()
                    })
                    .map(|(n, _)| n.clone())
            })
            .context("no ready gateway pod to run the CLI in")?;
        let endpoint = format!("{}.{NAMESPACE}.svc.cluster.local:7001", gateway_set());
        let mut argv: Vec<String> = [
            "openshell-pool",
            "--endpoints",
            &endpoint,
            "--ca-file",
            "/etc/openshell/tls/ca.crt",
            "--token-file",
            "/etc/openshell/tokens/admin-token",
            "-o",
            "json",
        ]
        .iter()
        .map(|s| (*s).to_string())
        .collect();
        argv.extend(args.iter().map(|s| (*s).to_string()));
        argv[0] = format!("{}/openshell-pool", crate::pod::IMAGE_BIN_DIR);
        let mut cmd = self
            .harness
            .with(|c| c.exec_in(&pod, &argv, Duration::from_secs(60)))?;
        let out = cmd
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .output()
            .context("running the CLI in a gateway pod")?;
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        if !out.status.success() {
            bail!("openshell-pool {}: {}", args.join(" "), stderr.trim());
        }
        if stdout.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(&stdout)
            .with_context(|| format!("openshell-pool {} printed {stdout:?}", args.join(" ")))
    }

    /// `pool status`.
    ///
    /// # Errors
    /// As [`Release::cli`].
    pub fn pool_status(&self) -> anyhow::Result<Value> {
        self.cli(&["pool", "status"])
    }

    /// `raft status`.
    ///
    /// # Errors
    /// As [`Release::cli`].
    pub fn raft_status(&self) -> anyhow::Result<Value> {
        self.cli(&["raft", "status"])
    }

    /// Pid of the runtime pod `name` (created by the gateways through the
    /// API), if it runs.
    pub fn runtime_pid(&self, name: &str) -> Option<u32> {
        self.harness
            .with(|c| c.pods.get(name).and_then(crate::cluster::Pod::pid))
    }

    /// Stops every pod within its grace period.
    pub async fn stop(self) {
        self.harness.stop().await;
    }
}

/// A sandbox as `pool status -o json` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxView {
    /// Owning member.
    pub owner: String,
    /// `assigned`, `recovering`, ...
    pub phase: String,
    /// Its ownership term.
    pub term: u64,
    /// Its runtime (pod) name.
    pub runtime: String,
}

/// id → view of every sandbox in a `pool status`.
pub fn sandboxes(status: &Value) -> BTreeMap<String, SandboxView> {
    status["sandboxes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| {
            let text = |k: &str| s[k].as_str().unwrap_or_default().to_string();
            Some((
                s["id"].as_str()?.to_string(),
                SandboxView {
                    owner: text("owner"),
                    phase: text("phase"),
                    term: s["term"].as_u64().unwrap_or_default(),
                    runtime: text("runtime_name"),
                },
            ))
        })
        .collect()
}

/// id → (state, incarnation) of every member in a `pool status`.
pub fn members(status: &Value) -> BTreeMap<String, (String, u64)> {
    status["members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| {
            Some((
                m["id"].as_str()?.to_string(),
                (
                    m["state"].as_str()?.to_string(),
                    m["incarnation"].as_u64().unwrap_or_default(),
                ),
            ))
        })
        .collect()
}

/// Voter ids in a `raft status`.
pub fn voters(raft: &Value) -> Vec<u64> {
    let mut v: Vec<u64> = raft["voters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| n["id"].as_u64())
        .collect();
    v.sort_unstable();
    v
}

/// Polls `check` every 500 ms until it returns true or `timeout` passes;
/// an error from `check` is remembered and retried.
///
/// # Errors
/// At the timeout, with the last error `check` returned.
pub async fn until(
    what: &str,
    timeout: Duration,
    mut check: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let start = Instant::now();
    let mut last = String::new();
    loop {
        match check() {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => last = format!("{e:#}"),
        }
        if start.elapsed() > timeout {
            bail!("{what}: not within {timeout:?} (last error: {last})");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Renders the chart with `values` and starts it in a harness rooted at
/// `root`, with the workspace's binaries as the image. The scenario tests'
/// common start.
///
/// # Errors
/// When rendering or starting fails.
pub async fn install(
    run: &str,
    workspace: &Path,
    bin_dir: PathBuf,
    root: &Path,
    values: &Value,
) -> anyhow::Result<Release> {
    let manifests = render(workspace, values)?;
    Release::start(run, root.to_path_buf(), bin_dir, manifests).await
}

/// Prints the last lines of every pod's log under `root` (for a failed
/// scenario).
pub fn dump_logs(root: &Path) {
    let _ = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "for f in {}/pods/*/*.log; do echo \"== $f\"; tail -n 25 \"$f\"; done",
            root.display()
        ))
        .status();
}
