//! Helpers for tests that drive the `openshell-pool` CLI binary.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use proto::objects::object_store_client::ObjectStoreClient;
use proto::objects::{precondition, ListRequest, Precondition, PutRequest};
use serde_json::Value;

use proto::client::{self, ClientConfig, Role};
use proto::tls::ClientTls;
use testkit::gateway::object;
use testkit::ports::free_port;
use testkit::secure::{ClientSecurity, Material};
use testkit::TestResult;

/// The `openshell-pool` binary (this package's; elsewhere the workspace
/// build's).
pub fn pool_bin() -> PathBuf {
    match option_env!("CARGO_BIN_EXE_openshell-pool") {
        Some(bin) => PathBuf::from(bin),
        None => testkit::bins::workspace_bin("openshell-pool"),
    }
}

/// Brings the supervisor and runtime binaries up to date next to
/// openshell-pool (dev starts them from there).
pub fn build_supervisor_bins() {
    testkit::bins::workspace_bin("openshell-supervisor");
    testkit::bins::workspace_bin("openshell-sandbox-runtime");
}

/// A base port whose dev ports are all free.
pub fn free_base() -> u16 {
    for _ in 0..200 {
        let base = 20_000 + (std::process::id() as u16 % 100) * 100 + (free_port() % 50);
        let offsets = [0u16, 1, 2, 10, 11, 12, 100, 101, 102, 200, 201];
        if offsets
            .iter()
            .all(|o| std::net::TcpListener::bind(("127.0.0.1", base + o)).is_ok())
        {
            return base;
        }
    }
    panic!("no free port range");
}

/// Runs `openshell-pool --insecure ARGS` (the test gateways are plaintext);
/// returns (exit code, stdout, stderr).
pub fn pool(endpoints: &str, args: &[&str]) -> (i32, String, String) {
    pool_as(&["--insecure".to_string()], endpoints, args)
}

/// Runs `openshell-pool SECURITY ARGS` (e.g. `--ca-file F --token-file T`,
/// or nothing at all), with none of the CLI's variables from the
/// environment; returns (exit code, stdout, stderr).
pub fn pool_as(security: &[String], endpoints: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(pool_bin())
        .arg("--endpoints")
        .arg(endpoints)
        .args(security)
        .args(args)
        .env_remove("OPENSHELL_TOKEN")
        .env_remove("OPENSHELL_TOKEN_FILE")
        .env_remove("OPENSHELL_CA_FILE")
        .env_remove("OPENSHELL_ENDPOINTS")
        .output()
        .unwrap_or_else(|e| panic!("run openshell-pool: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs a command that must succeed with `-o json`; returns the document.
pub fn json(endpoints: &str, args: &[&str]) -> Value {
    json_as(&["--insecure".to_string()], endpoints, args)
}

/// [`json`] with the security flags `security` (see [`pool_as`]).
pub fn json_as(security: &[String], endpoints: &str, args: &[&str]) -> Value {
    let mut all = vec!["-o", "json"];
    all.extend_from_slice(args);
    let (code, out, err) = pool_as(security, endpoints, &all);
    assert_eq!(code, 0, "openshell-pool {args:?} failed: {err}");
    serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("openshell-pool {args:?}: not JSON ({e}): {out}"))
}

/// Retries a JSON command until `ok` holds on its output.
pub fn json_until(endpoints: &str, args: &[&str], why: &str, ok: impl Fn(&Value) -> bool) -> Value {
    json_until_as(&["--insecure".to_string()], endpoints, args, why, ok)
}

/// [`json_until`] with the security flags `security` (see [`pool_as`]).
pub fn json_until_as(
    security: &[String],
    endpoints: &str,
    args: &[&str],
    why: &str,
    ok: impl Fn(&Value) -> bool,
) -> Value {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let mut all = vec!["-o", "json"];
        all.extend_from_slice(args);
        let (code, out, _) = pool_as(security, endpoints, &all);
        if code == 0 {
            if let Ok(v) = serde_json::from_str::<Value>(&out) {
                if ok(&v) {
                    return v;
                }
            }
        }
        assert!(Instant::now() < deadline, "{why}: last output {out}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub struct Dev {
    child: Option<Child>,
    pub dir: PathBuf,
}

impl Dev {
    pub fn start(dir: &Path, base: u16) -> Dev {
        let log =
            std::fs::File::create(dir.with_extension("log")).unwrap_or_else(|e| panic!("{e}"));
        let child = Command::new(pool_bin())
            .args(["dev", "--data-dir"])
            .arg(dir)
            .args(["--base-port", &base.to_string()])
            .stdout(Stdio::from(
                log.try_clone().unwrap_or_else(|e| panic!("{e}")),
            ))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn dev: {e}"));
        Dev {
            child: Some(child),
            dir: dir.to_path_buf(),
        }
    }

    pub fn output(&self) -> String {
        std::fs::read_to_string(self.dir.with_extension("log")).unwrap_or_default()
    }

    /// The CLI flags that reach this dev cluster: its CA and admin token.
    pub fn security(&self) -> Vec<String> {
        dev_security(&self.dir)
    }

    /// How a test client reaches this dev cluster (TLS with its CA, its
    /// admin token).
    pub fn client(&self) -> ClientSecurity {
        dev_client(&self.dir)
    }

    /// Ctrl-C; returns once dev exited.
    pub fn interrupt(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status();
            let deadline = Instant::now() + Duration::from_secs(15);
            while child.try_wait().ok().flatten().is_none() {
                assert!(Instant::now() < deadline, "dev did not stop on Ctrl-C");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

impl Dev {
    /// The pid of the `dev` process, while it is ours.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Reaps a `dev` the test killed by hand; the drop then interrupts
    /// nothing.
    pub fn forget(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        self.interrupt();
        let _ = Command::new("pkill")
            .args(["-9", "-f", &self.dir.display().to_string()])
            .status();
    }
}

/// The CLI flags that reach a secure test cluster made of `material`: its
/// CA and admin token file.
pub fn material_security(material: &Material) -> Vec<String> {
    vec![
        "--ca-file".into(),
        material.ca.cert.display().to_string(),
        "--token-file".into(),
        material.admin_token_file.display().to_string(),
    ]
}

/// The CLI flags that reach the dev cluster of `dir`: its CA and admin
/// token, as `<dir>/env` names them.
pub fn dev_security(dir: &Path) -> Vec<String> {
    let tls = dir.join("tls");
    vec![
        "--ca-file".into(),
        tls.join("ca.crt").display().to_string(),
        "--token-file".into(),
        tls.join("admin.token").display().to_string(),
    ]
}

/// How a test client reaches the dev cluster of `dir`.
pub fn dev_client(dir: &Path) -> ClientSecurity {
    let tls = dir.join("tls");
    ClientSecurity {
        tls: ClientTls::load(&tls.join("ca.crt"), None).unwrap_or_else(|e| panic!("{e}")),
        token: std::fs::read_to_string(tls.join("admin.token"))
            .unwrap_or_else(|e| panic!("{e}"))
            .trim()
            .to_string(),
    }
}

/// The dev cluster's TLS material as a [`Material`] (to start another
/// secure gateway for it: its CA issues the certificate).
pub fn dev_material(dir: &Path) -> Material {
    let tls = dir.join("tls");
    Material {
        dir: tls.clone(),
        ca: proto::tls::generate::Ca::load(&tls).unwrap_or_else(|e| panic!("{e}")),
        signing_key: tls.join("signing.key"),
        admin_token: dev_client(dir).token,
        admin_token_file: tls.join("admin.token"),
    }
}

/// The configuration of the gateway process whose command line is
/// `cmdline`: the `--config` file it names, read the way the gateway reads
/// it.
pub fn gateway_config_of(cmdline: &str) -> local_cluster::gateway::GatewaySection {
    let mut words = cmdline.split_whitespace();
    let file = words
        .by_ref()
        .skip_while(|w| *w != "--config")
        .nth(1)
        .unwrap_or_else(|| panic!("no --config in {cmdline}"));
    local_cluster::gateway::read_file(Path::new(file)).unwrap_or_else(|e| panic!("{e}"))
}

pub fn processes_under(dir: &Path) -> usize {
    let out = Command::new("pgrep")
        .args(["-f", &dir.display().to_string()])
        .output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).lines().count())
        .unwrap_or(0)
}

/// A channel to the gateway at `addr`: TLS with `security`'s CA, else
/// plaintext.
async fn channel(
    addr: &str,
    security: Option<&ClientSecurity>,
) -> TestResult<tonic::transport::Channel> {
    let config = ClientConfig::for_role(Role::Cli)
        .with_request_timeout(Duration::from_secs(15))
        .with_tls(security.map(|s| s.tls.clone()));
    Ok(client::connect(Role::Cli, addr, &config).await?)
}

/// `message` with `security`'s token, if any.
fn authed<T>(message: T, security: Option<&ClientSecurity>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(value) = security.and_then(|s| format!("Bearer {}", s.token).parse().ok()) {
        request.metadata_mut().insert("authorization", value);
    }
    request
}

/// Puts an object of the test type through the gateway at `addr` (with
/// `security`, for a secure gateway).
pub async fn put_object(
    addr: &str,
    security: Option<&ClientSecurity>,
    id: &str,
    value: &str,
) -> TestResult<u64> {
    let request = authed(
        PutRequest {
            object: Some(object(id, value)),
            precondition: Some(Precondition {
                kind: Some(precondition::Kind::Unconditional(true)),
            }),
            request_id: String::new(),
        },
        security,
    );
    let reply = ObjectStoreClient::new(channel(addr, security).await?)
        .put(request)
        .await?;
    Ok(reply
        .into_inner()
        .object
        .map(|o| o.resource_version)
        .unwrap_or(0))
}

pub async fn objects_at(
    addr: &str,
    security: Option<&ClientSecurity>,
) -> TestResult<Vec<(String, Vec<u8>, u64)>> {
    let mut client = ObjectStoreClient::new(channel(addr, security).await?);
    let list = client
        .list(authed(
            ListRequest {
                r#type: "test".into(),
                page_size: 1000,
                ..Default::default()
            },
            security,
        ))
        .await?
        .into_inner();
    Ok(list
        .objects
        .into_iter()
        .map(|o| (o.id, o.payload, o.resource_version))
        .collect())
}

pub fn sandbox_key(v: &Value) -> Vec<(String, String, u64, u64, String)> {
    let mut out: Vec<_> = v["sandboxes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|s| {
                    (
                        s["id"].as_str().unwrap_or_default().to_string(),
                        s["owner"].as_str().unwrap_or_default().to_string(),
                        s["term"].as_u64().unwrap_or(0),
                        s["credential_epoch"].as_u64().unwrap_or(0),
                        s["phase"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Every file under `dir` with its bytes.
pub fn contents(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)
            .unwrap_or_else(|e| panic!("{e}"))
            .flatten()
        {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

/// Runs `cmd` to its end (20 s at most); returns (exit code, stderr).
pub fn run_to_end(mut cmd: Command) -> (i32, String) {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .env("RUST_BACKTRACE", "0")
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            if let Some(mut s) = child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut s, &mut err);
            }
            return (status.code().unwrap_or(-1), err);
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            return (-1, "still running after 20 s: it did not refuse".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
