//! Scenario: the process driver launches real `openshell-sandbox-runtime`
//! processes, each in its own network namespace (we run as root), and
//! reports, adopts and removes them.
//!
//! - given: a driver over a fresh directory, namespaces on
//! - when: `ensure` a sandbox generation
//! - then: Running at `<namespace IP>:7400`; the runtime answers `Status`
//!   over TLS verified with the endpoint's CA and the runtime's name as
//!   server name; it is in another network namespace (not reachable on the
//!   host's 127.0.0.1) and in its own session; a second `ensure` adopts it
//!   (same pid, same CA, one process); `delete` removes process, namespace,
//!   veth and directory
//! - and: two sandboxes get different /30s, `list` shows both; `kill -9` of
//!   one runtime shows as Failed (`runtime exited: ...`)
//! - and: a runtime outlives the gateway-like process that launched it
//!   (killed with SIGKILL)
//! - and: without namespaces (Off) the runtime serves on 127.0.0.1 and its
//!   workload gets `OPENSHELL_SANDBOX_ID`; a runtime that cannot start is
//!   Failed with its log's last line; a directory another gateway is still
//!   creating is Pending, then Failed once quiet for 10 s
//! - and: a namespace left by the runtime's name fails the create with
//!   `ip`'s message and is left alone; the directory is removed
//! - and: namespaces asked for (`On`) where `ip` cannot run: the driver
//!   refuses to start, naming why; `Auto` falls back to 127.0.0.1
//!
//! Every test removes its processes and namespaces on the way out, failed
//! or not ([`Cleanup`]).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use proto::client::{connect, ClientConfig, Role};
use proto::grant::GrantSigner;
use proto::sandbox_runtime::sandbox_runtime_client::SandboxRuntimeClient;
use proto::sandbox_runtime::{RuntimeStatus, RuntimeStatusRequest};
use proto::tls::ClientTls;
use sandbox_driver::process::{netns, NetnsMode, ProcessConfig, ProcessDriver};
use sandbox_driver::{Endpoint, LaunchSpec, RuntimeState, SandboxDriver, RUNTIME_PORT};

/// The environment variable that turns [`gateway_child`] into a launcher.
const GATEWAY_DIR_ENV: &str = "T01_GATEWAY_DIR";

/// Kills every runtime of a driver directory and removes its namespaces,
/// veths and the directory, on drop (a failing test included).
struct Cleanup {
    dir: tempfile::TempDir,
}

impl Cleanup {
    fn new() -> Self {
        Cleanup {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("driver")
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Ok(entries) = std::fs::read_dir(self.path()) else {
            return;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if let Some(pid) = read_pid(&path) {
                // SAFETY: plain syscalls.
                unsafe {
                    libc::kill(-pid, libc::SIGKILL);
                    libc::kill(pid, libc::SIGKILL);
                }
            }
            if let Ok(ns) = std::fs::read_to_string(path.join("netns")) {
                let ns = ns.trim();
                let _ = std::process::Command::new("ip")
                    .args(["netns", "del", ns])
                    .stderr(std::process::Stdio::null())
                    .status();
                let _ = std::process::Command::new("ip")
                    .args(["link", "del", &netns::veth_names(ns).0])
                    .stderr(std::process::Stdio::null())
                    .status();
            }
        }
    }
}

fn read_pid(entry: &Path) -> Option<i32> {
    std::fs::read_to_string(entry.join("pid"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn driver(cleanup: &Cleanup, mode: NetnsMode) -> ProcessDriver {
    ProcessDriver::new(ProcessConfig {
        dir: cleanup.path(),
        runtime_bin: testkit::bins::runtime_bin(),
        netns: mode,
    })
    .expect("driver")
}

/// A sandbox id unique to this test process.
fn sandbox_id(tag: &str) -> String {
    format!("t01-{}-{tag}", std::process::id())
}

fn spec(id: &str, workload: Vec<String>) -> LaunchSpec {
    LaunchSpec {
        sandbox_id: id.to_string(),
        generation: 1,
        workload,
        recovery_deadline_ms: 600_000,
        trusted_grant_keys: vec![GrantSigner::insecure_development_key("t01").public_key_hex()],
        trusted_grant_keys_file: None,
    }
}

/// `ensure` until Running (the runtime starts and binds), at most 60 s.
async fn ensure_running(driver: &ProcessDriver, spec: &LaunchSpec) -> Endpoint {
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let state = driver.ensure(spec).await.expect("ensure");
        match state {
            RuntimeState::Running(endpoint) => return endpoint,
            RuntimeState::Pending { .. } if Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => {
                let entry = driver.dir().join(spec.name());
                let log = std::fs::read_to_string(entry.join("runtime.log")).unwrap_or_default();
                let pid = read_pid(&entry).unwrap_or_default();
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                panic!(
                    "{} is {other:?}; pid {pid}: cmdline {:?}, stat {stat:?}; runtime.log:\n{log}",
                    spec.name(),
                    String::from_utf8_lossy(&cmdline)
                );
            }
        }
    }
}

/// The runtime's Status over TLS: verified with the endpoint's CA for the
/// runtime's name, dialled at its address.
async fn status(endpoint: &Endpoint) -> Result<RuntimeStatus, String> {
    let tls = ClientTls::from_ca_pem(&endpoint.ca_pem)
        .map_err(|e| e.to_string())?
        .with_server_name(endpoint.name.clone());
    let config = ClientConfig::for_role(Role::SupervisorToRuntime)
        .with_tls(Some(tls))
        .with_request_timeout(Duration::from_secs(10))
        .with_connect_timeout(Duration::from_secs(5));
    let channel = connect(Role::SupervisorToRuntime, &endpoint.address, &config)
        .await
        .map_err(|e| e.to_string())?;
    SandboxRuntimeClient::new(channel)
        .status(RuntimeStatusRequest {})
        .await
        .map(tonic::Response::into_inner)
        .map_err(|s| s.to_string())
}

/// Pids of every live process whose command line names `--sandbox-id id`.
fn runtime_pids(id: &str) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(Result::ok)
    {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse().ok()) else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
        if args
            .windows(2)
            .any(|w| w[0] == b"--sandbox-id" && w[1] == id.as_bytes())
        {
            pids.push(pid);
        }
    }
    pids
}

fn netns_inode(pid: i32) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/net"))
        .map(|p| p.display().to_string())
        .unwrap_or_default()
}

fn namespaces() -> String {
    let out = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("ip netns list");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits for `cond`, at most `secs` seconds, naming `what` on timeout.
async fn wait_for(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_runtime_in_its_namespace_serves_tls_is_adopted_and_deleted() {
    let cleanup = Cleanup::new();
    let driver = driver(&cleanup, NetnsMode::On);
    assert!(driver.uses_netns());
    assert_eq!(driver.kind(), "process");
    let id = sandbox_id("one");
    let spec = spec(&id, Vec::new());
    let name = spec.name();

    eprintln!("--- step: ensure -> Running in the namespace");
    let endpoint = ensure_running(&driver, &spec).await;
    assert_eq!(endpoint.name, name);
    let addr: std::net::SocketAddr = endpoint.address.parse().expect("ip:port");
    assert_eq!(addr.port(), RUNTIME_PORT);
    assert!(
        addr.ip().to_string().starts_with("10.213."),
        "{}",
        endpoint.address
    );
    let entry = driver.dir().join(&name);
    let pid = read_pid(&entry).expect("pid");
    let mode = |p: &Path| {
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(p).expect("stat").permissions())
            & 0o777
    };
    assert_eq!(mode(driver.dir()), 0o700);
    assert_eq!(mode(&entry.join("tls.key")), 0o600);
    assert!(
        !entry.join("address.crt").exists(),
        "a runtime given its certificate publishes no CA file"
    );
    assert_eq!(
        std::fs::read_to_string(entry.join("netns"))
            .expect("netns")
            .trim(),
        name
    );

    eprintln!("--- step: Status over TLS, verified for the runtime's name");
    let st = status(&endpoint).await.expect("status over TLS");
    assert_eq!(st.sandbox_id, id);
    assert_eq!(st.generation, 1);
    assert_eq!(
        st.workload.as_ref().map(|w| w.state.as_str()),
        Some("running"),
        "{st:?}"
    );
    let mut wrong = endpoint.clone();
    wrong.name = "sbx-someone-else".into();
    let e = status(&wrong).await.expect_err("another name is refused");
    assert!(
        e.contains("not valid for name") || e.contains("transport"),
        "{e}"
    );

    eprintln!("--- step: another namespace: not on the host's loopback, own session");
    assert_ne!(netns_inode(pid), netns_inode(std::process::id() as i32));
    assert!(
        std::net::TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], RUNTIME_PORT)),
            Duration::from_secs(1)
        )
        .is_err(),
        "the runtime must not be reachable on the host's 127.0.0.1"
    );
    // SAFETY: getsid has no preconditions.
    assert_eq!(
        unsafe { libc::getsid(pid) },
        pid,
        "the runtime leads its session"
    );

    eprintln!("--- step: a second ensure adopts (same pid, same CA, one process)");
    let again = driver.ensure(&spec).await.expect("ensure again");
    assert_eq!(again, RuntimeState::Running(endpoint.clone()));
    assert_eq!(read_pid(&entry), Some(pid));
    assert_eq!(runtime_pids(&id), vec![pid]);
    let other = ProcessDriver::new(ProcessConfig {
        dir: cleanup.path(),
        runtime_bin: testkit::bins::runtime_bin(),
        netns: NetnsMode::Auto,
    })
    .expect("a second gateway's driver");
    assert_eq!(
        other.ensure(&spec).await.expect("adopt"),
        RuntimeState::Running(endpoint.clone())
    );
    assert_eq!(runtime_pids(&id), vec![pid]);

    eprintln!("--- step: delete removes process, namespace, veth, directory");
    let (host_link, _) = netns::veth_names(&name);
    assert!(Path::new("/sys/class/net").join(&host_link).exists());
    driver.delete(&name).await.expect("delete");
    assert!(runtime_pids(&id).is_empty(), "runtime still running");
    assert!(
        !namespaces().contains(&name),
        "namespace left: {}",
        namespaces()
    );
    assert!(
        !Path::new("/sys/class/net").join(&host_link).exists(),
        "veth left"
    );
    assert!(!entry.exists(), "directory left");
    assert!(driver.list().await.expect("list").is_empty());
    driver.delete(&name).await.expect("deleting again is Ok");
}

#[tokio::test]
async fn two_runtimes_get_two_subnets_and_a_killed_one_is_failed() {
    let cleanup = Cleanup::new();
    let driver = driver(&cleanup, NetnsMode::On);
    let (a, b) = (
        spec(&sandbox_id("a"), Vec::new()),
        spec(&sandbox_id("b"), Vec::new()),
    );
    let ea = ensure_running(&driver, &a).await;
    let eb = ensure_running(&driver, &b).await;
    let subnet = |s: &LaunchSpec| {
        std::fs::read_to_string(driver.dir().join(s.name()).join("subnet")).expect("subnet")
    };
    assert_ne!(subnet(&a), subnet(&b));
    assert_ne!(ea.address, eb.address);
    assert_ne!(ea.ca_pem, eb.ca_pem, "a CA per runtime");
    status(&ea).await.expect("a answers");
    status(&eb).await.expect("b answers");

    eprintln!("--- step: list shows both Running");
    let listed = driver.list().await.expect("list");
    assert_eq!(listed.len(), 2, "{listed:?}");
    for o in &listed {
        assert!(matches!(o.state, RuntimeState::Running(_)), "{o:?}");
        assert_eq!(o.generation, 1);
    }
    assert!(listed
        .iter()
        .any(|o| o.sandbox_id == a.sandbox_id && o.name == a.name()));

    eprintln!("--- step: kill -9 of a's runtime -> Failed; b untouched");
    let pid_a = read_pid(&driver.dir().join(a.name())).expect("pid");
    // SAFETY: plain syscall.
    assert_eq!(unsafe { libc::kill(pid_a, libc::SIGKILL) }, 0);
    let until = Instant::now() + Duration::from_secs(20);
    let failed = loop {
        let listed = driver.list().await.expect("list");
        let seen = listed
            .iter()
            .find(|o| o.name == a.name())
            .expect("a listed")
            .state
            .clone();
        if let RuntimeState::Failed { reason } = seen {
            break reason;
        }
        assert!(Instant::now() < until, "a still {seen:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(failed.starts_with("runtime exited: "), "{failed}");
    assert!(
        matches!(
            driver.ensure(&a).await.expect("ensure a"),
            RuntimeState::Failed { .. }
        ),
        "a killed runtime is never started again"
    );
    assert!(runtime_pids(&a.sandbox_id).is_empty());
    status(&eb).await.expect("b still answers");

    eprintln!("--- step: delete both; the freed /30 is handed out again");
    let subnet_a = subnet(&a);
    driver.delete(&a.name()).await.expect("delete a");
    let c = spec(&sandbox_id("c"), Vec::new());
    let _ = driver.ensure(&c).await.expect("ensure c");
    assert_eq!(subnet(&c), subnet_a, "lowest free /30");
    ensure_running(&driver, &c).await;
    for s in [&b, &c] {
        driver.delete(&s.name()).await.expect("delete");
    }
    assert!(driver.list().await.expect("list").is_empty());
}

/// Not a test on its own: with [`GATEWAY_DIR_ENV`] set (by
/// `a_runtime_outlives_the_gateway_that_launched_it`) it plays a gateway:
/// launches a runtime, prints `RUNNING`, then waits to be killed.
#[tokio::test]
async fn gateway_child() {
    let Ok(dir) = std::env::var(GATEWAY_DIR_ENV) else {
        return;
    };
    let driver = ProcessDriver::new(ProcessConfig {
        dir: PathBuf::from(dir),
        runtime_bin: testkit::bins::runtime_bin(),
        netns: NetnsMode::On,
    })
    .expect("driver");
    let spec = spec(
        &std::env::var("T01_SANDBOX").expect("T01_SANDBOX"),
        Vec::new(),
    );
    ensure_running(&driver, &spec).await;
    println!("RUNNING");
    tokio::time::sleep(Duration::from_secs(600)).await;
}

/// A child process killed (SIGKILL) and reaped on drop.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn a_runtime_outlives_the_gateway_that_launched_it() {
    let cleanup = Cleanup::new();
    let driver = driver(&cleanup, NetnsMode::On);
    let id = sandbox_id("orphan");
    let spec = spec(&id, Vec::new());
    // Build before the child needs the binary (one build per process).
    let _ = testkit::bins::runtime_bin();

    eprintln!("--- step: a gateway-like child process launches the runtime");
    let mut gateway = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args([
            "gateway_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(GATEWAY_DIR_ENV, cleanup.path())
        .env("T01_SANDBOX", &id)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the gateway child");
    let stdout = gateway.stdout.take().expect("stdout");
    let mut gateway = KillOnDrop(gateway);
    let entry = driver.dir().join(spec.name());
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|l| l.contains("RUNNING"))
    });
    wait_for("the child to report RUNNING", 120, || reader.is_finished()).await;
    assert!(
        reader.join().expect("reader"),
        "the child exited before RUNNING"
    );
    let pid = read_pid(&entry).expect("pid");

    eprintln!("--- step: kill -9 the gateway; the runtime stays");
    gateway.0.kill().expect("kill -9");
    gateway.0.wait().expect("reap");
    tokio::time::sleep(Duration::from_millis(500)).await;
    // SAFETY: getsid has no preconditions.
    assert_eq!(
        unsafe { libc::getsid(pid) },
        pid,
        "the runtime leads its session"
    );
    let listed = driver.list().await.expect("list");
    let endpoint = match &listed[0].state {
        RuntimeState::Running(endpoint) => endpoint.clone(),
        other => panic!("after the gateway died: {other:?}"),
    };
    let st = status(&endpoint).await.expect("the runtime still answers");
    assert_eq!(st.sandbox_id, id);
    assert_eq!(runtime_pids(&id), vec![pid]);

    eprintln!("--- step: this gateway adopts it and deletes it");
    assert_eq!(
        driver.ensure(&spec).await.expect("adopt"),
        RuntimeState::Running(endpoint)
    );
    driver.delete(&spec.name()).await.expect("delete");
    assert!(runtime_pids(&id).is_empty());
}

#[tokio::test]
async fn without_namespaces_the_runtime_serves_on_loopback_and_failures_are_reported() {
    let cleanup = Cleanup::new();
    let driver = driver(&cleanup, NetnsMode::Off);
    assert!(!driver.uses_netns());
    let id = sandbox_id("off");
    let id_file = cleanup.dir.path().join("workload-sandbox-id");
    let workload = vec![
        "sh".to_string(),
        "-c".to_string(),
        format!(
            "echo \"$OPENSHELL_SANDBOX_ID\" > {}; exec sleep 600",
            id_file.display()
        ),
    ];
    let spec_off = spec(&id, workload);

    eprintln!("--- step: Running on 127.0.0.1; the workload knows its sandbox");
    let endpoint = ensure_running(&driver, &spec_off).await;
    assert!(
        endpoint.address.starts_with("127.0.0.1:"),
        "{}",
        endpoint.address
    );
    assert!(!driver.dir().join(spec_off.name()).join("netns").exists());
    let st = status(&endpoint).await.expect("status");
    assert_eq!(st.sandbox_id, id);
    wait_for("the workload's id file", 20, || {
        std::fs::read_to_string(&id_file).is_ok_and(|s| s.trim() == id)
    })
    .await;
    driver.delete(&spec_off.name()).await.expect("delete");
    assert!(runtime_pids(&id).is_empty());

    eprintln!("--- step: a runtime that cannot start is Failed with its last log line");
    let mut bad = spec(&sandbox_id("bad"), Vec::new());
    bad.trusted_grant_keys = vec!["not-a-key".into()];
    let until = Instant::now() + Duration::from_secs(30);
    let reason = loop {
        match driver.ensure(&bad).await.expect("ensure") {
            RuntimeState::Failed { reason } => break reason,
            RuntimeState::Pending { .. } if Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => panic!("a runtime with a bad key is {other:?}"),
        }
    };
    assert!(
        reason.starts_with("runtime exited: ") && reason.contains("--cluster-public-key"),
        "{reason}"
    );
    driver.delete(&bad.name()).await.expect("delete");

    eprintln!("--- step: no trusted key at all is refused before anything starts");
    let mut keyless = spec(&sandbox_id("keyless"), Vec::new());
    keyless.trusted_grant_keys.clear();
    assert!(driver.ensure(&keyless).await.is_err());
    assert!(!driver.dir().join(keyless.name()).exists());

    eprintln!("--- step: a directory still being created elsewhere is Pending, then Failed");
    let half = spec(&sandbox_id("half"), Vec::new());
    let half_dir = driver.dir().join(half.name());
    std::fs::create_dir(&half_dir).expect("mkdir");
    std::fs::write(
        half_dir.join("spec.json"),
        format!(r#"{{"sandbox_id":"{}","generation":1}}"#, half.sandbox_id),
    )
    .expect("spec.json");
    assert_eq!(
        driver.ensure(&half).await.expect("ensure"),
        RuntimeState::Pending {
            detail: "starting".into()
        }
    );
    assert!(
        runtime_pids(&half.sandbox_id).is_empty(),
        "never a second create"
    );
    let touched = std::process::Command::new("touch")
        .args(["-d", "-30 seconds"])
        .arg(&half_dir)
        .status()
        .expect("touch");
    assert!(touched.success());
    match driver.ensure(&half).await.expect("ensure") {
        RuntimeState::Failed { reason } => {
            assert!(reason.contains("launch did not complete"), "{reason}");
        }
        other => panic!("a create abandoned 30 s ago is {other:?}"),
    }
    let listed = driver.list().await.expect("list");
    assert!(
        matches!(listed[0].state, RuntimeState::Failed { .. }),
        "{listed:?}"
    );
    driver.delete(&half.name()).await.expect("delete");
    assert!(!half_dir.exists());
}

/// Not a test on its own: with `T01_NO_IP` set (by
/// `namespaces_on_without_ip_is_refused_clearly`, which also empties PATH)
/// it asks for namespaces where `ip` cannot be found.
#[test]
fn no_ip_child() {
    let Ok(dir) = std::env::var("T01_NO_IP") else {
        return;
    };
    let e = ProcessDriver::new(ProcessConfig {
        dir: PathBuf::from(dir),
        runtime_bin: PathBuf::from("/nonexistent/openshell-sandbox-runtime"),
        netns: NetnsMode::On,
    })
    .expect_err("On without ip must fail");
    println!("REFUSED: {e}");
    let auto = ProcessDriver::new(ProcessConfig {
        dir: std::env::temp_dir().join(format!("t01-no-ip-{}", std::process::id())),
        runtime_bin: PathBuf::from("/nonexistent/openshell-sandbox-runtime"),
        netns: NetnsMode::Auto,
    })
    .expect("Auto without ip falls back to 127.0.0.1");
    println!("AUTO NETNS: {}", auto.uses_netns());
    let _ = std::fs::remove_dir_all(auto.dir());
}

#[test]
fn namespaces_on_without_ip_is_refused_clearly() {
    let dir = tempfile::tempdir().expect("dir");
    let out = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args(["no_ip_child", "--exact", "--nocapture", "--test-threads=1"])
        .env("T01_NO_IP", dir.path())
        .env("PATH", "/nonexistent")
        .output()
        .expect("run the child");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("REFUSED: process driver: network namespaces requested (On) but unavailable: ip netns list: cannot run"),
        "{stdout}"
    );
    assert!(stdout.contains("AUTO NETNS: false"), "{stdout}");
}

/// A network namespace made by hand, deleted on drop.
struct NamespaceGuard(String);

impl Drop for NamespaceGuard {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.0])
            .status();
    }
}

#[tokio::test]
async fn a_namespace_left_by_that_name_fails_the_create_and_is_left_alone() {
    let cleanup = Cleanup::new();
    let driver = driver(&cleanup, NetnsMode::On);
    let left = spec(&sandbox_id("left"), Vec::new());
    let name = left.name();
    let added = std::process::Command::new("ip")
        .args(["netns", "add", &name])
        .status()
        .expect("ip netns add");
    assert!(added.success());
    let _guard = NamespaceGuard(name.clone());

    let e = driver
        .ensure(&left)
        .await
        .expect_err("a namespace by that name exists");
    let text = e.to_string();
    assert!(
        text.contains("ip netns add") && text.contains("File exists"),
        "the error carries ip's stderr: {text}"
    );
    assert!(namespaces().contains(&name), "not ours to remove");
    assert!(
        !driver.dir().join(&name).exists(),
        "a failed create removes its directory"
    );
    assert!(runtime_pids(&left.sandbox_id).is_empty());
}
