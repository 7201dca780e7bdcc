//! Scenario: a deposed leader's launcher, holding a list of runtimes taken
//! before it lost leadership, must not fail a sandbox whose runtime its
//! successor started meanwhile (the t32 CI failure; issue 27).
//!
//! Three gateways in this process (real raft over real gRPC on loopback,
//! sled on disk), each with a scripted sandbox driver over one shared
//! world of runtimes, so that the test decides when a launcher's `list`
//! answers:
//!
//! - given: leader A's launcher is inside `list` (it saw no runtime of
//!   `b3`: `b3` is not created yet), held there
//! - when: `b3` is created, leadership moves to B, B's launcher ensures
//!   `b3`'s runtime and records it; then A's `list` answers with what it
//!   saw (no `b3`)
//! - then: `b3` is never failed, and its runtime survives B's next passes
//!   (on the old code A read B's fresh state through B's read-index against
//!   its stale list, proposed `FailLaunch(RuntimeLost: ... is gone)`
//!   forwarded to B, and B's next pass deleted the runtime)

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use gateway_plugin::config::{GatewayConfig, GatewaySection, ValidateGateway};
use gateway_plugin::config_driver::SandboxDriverSection;
use gateway_plugin::embed::Gateway;
use pool::Phase;
use proto::pool_admin::pool_admin_client::PoolAdminClient;
use proto::pool_admin::CreateSandboxRequest;
use sandbox_driver::{DriverError, Endpoint, LaunchSpec, Observed, RuntimeState, SandboxDriver};
use testkit::gateway::{eventually, test_channel};
use testkit::member::ScriptedMember;
use testkit::TestResult;
use tokio::sync::{oneshot, watch};

const CA: &str = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

/// The runtimes that exist, shared by every gateway's driver.
#[derive(Default)]
struct World {
    runtimes: Mutex<BTreeMap<String, Observed>>,
}

impl World {
    fn snapshot(&self) -> Vec<Observed> {
        lock(&self.runtimes).values().cloned().collect()
    }

    fn has(&self, name: &str) -> bool {
        lock(&self.runtimes).contains_key(name)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A hold on one gateway's next `list`: the list reads the world when it
/// is entered, says so, and answers only when released.
struct Hold {
    entered: oneshot::Sender<()>,
    release: oneshot::Receiver<()>,
}

/// One gateway's driver: serves the shared world at once, except for a
/// held list; counts its lists (the launcher's passes).
struct ScriptedDriver {
    world: Arc<World>,
    hold: Mutex<Option<Hold>>,
    lists: watch::Sender<u64>,
}

impl ScriptedDriver {
    fn new(world: Arc<World>) -> Arc<Self> {
        Arc::new(ScriptedDriver {
            world,
            hold: Mutex::new(None),
            lists: watch::channel(0).0,
        })
    }

    /// Holds the next list; returns (entered, release).
    fn hold_next_list(&self) -> (oneshot::Receiver<()>, oneshot::Sender<()>) {
        let (entered_tx, entered_rx) = oneshot::channel();
        let (release_tx, release_rx) = oneshot::channel();
        *lock(&self.hold) = Some(Hold {
            entered: entered_tx,
            release: release_rx,
        });
        (entered_rx, release_tx)
    }

    /// Waits until this driver answered `n` more lists.
    async fn passes(&self, n: u64) {
        let mut lists = self.lists.subscribe();
        let target = *lists.borrow_and_update() + n;
        let waited = tokio::time::timeout(
            Duration::from_secs(30),
            lists.wait_for(|count| *count >= target),
        )
        .await;
        assert!(waited.is_ok(), "the launcher did not pass {n} more times");
    }
}

#[async_trait]
impl SandboxDriver for ScriptedDriver {
    fn kind(&self) -> &'static str {
        "scripted"
    }

    fn scope(&self) -> &str {
        "scripted:one"
    }

    async fn ensure(&self, spec: &LaunchSpec) -> Result<RuntimeState, DriverError> {
        let name = spec.name();
        let state = RuntimeState::Running(Endpoint {
            name: name.clone(),
            address: "127.0.0.1:7400".into(),
            ca_pem: CA.into(),
        });
        lock(&self.world.runtimes)
            .entry(name.clone())
            .or_insert_with(|| Observed {
                name,
                sandbox_id: spec.sandbox_id.clone(),
                generation: spec.generation,
                state: state.clone(),
            });
        Ok(state)
    }

    async fn list(&self) -> Result<Vec<Observed>, DriverError> {
        let seen = self.world.snapshot();
        let hold = lock(&self.hold).take();
        if let Some(hold) = hold {
            let _ = hold.entered.send(());
            let _ = hold.release.await;
        }
        self.lists.send_modify(|n| *n += 1);
        Ok(seen)
    }

    async fn delete(&self, name: &str) -> Result<(), DriverError> {
        lock(&self.world.runtimes).remove(name);
        Ok(())
    }
}

/// Three insecure gateways on loopback ports, each with its own driver.
struct Group {
    gateways: Vec<Gateway>,
    drivers: Vec<Arc<ScriptedDriver>>,
    addrs: Vec<SocketAddr>,
    _servers: Vec<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Group {
    async fn start(world: &Arc<World>) -> TestResult<Group> {
        let dir = tempfile::tempdir()?;
        let mut listeners = Vec::new();
        for _ in 0..3 {
            listeners.push(tokio::net::TcpListener::bind("127.0.0.1:0").await?);
        }
        let addrs: Vec<SocketAddr> = listeners
            .iter()
            .map(|l| l.local_addr())
            .collect::<Result<_, _>>()?;
        let voters: Vec<String> = addrs
            .iter()
            .enumerate()
            .map(|(i, a)| format!("{}={a}", i + 1))
            .collect();
        let (mut gateways, mut drivers, mut servers) = (Vec::new(), Vec::new(), Vec::new());
        for (i, listener) in listeners.into_iter().enumerate() {
            let driver = ScriptedDriver::new(world.clone());
            let config = config(i as u64 + 1, addrs[i], &voters, &dir)?;
            let dyn_driver: Arc<dyn SandboxDriver> = driver.clone();
            let gateway = Gateway::start_with_driver(config, Some(dyn_driver)).await?;
            let server = gateway
                .server_builder()
                .add_routes(gateway.single_port_routes()?)
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
            servers.push(tokio::spawn(async move {
                let _ = server.await;
            }));
            gateways.push(gateway);
            drivers.push(driver);
        }
        Ok(Group {
            gateways,
            drivers,
            addrs,
            _servers: servers,
            _dir: dir,
        })
    }

    /// The index of the gateway leading a term whose `LeaderChanged` is
    /// applied (so its launcher acts), once there is one.
    async fn leader_in_office(&self) -> usize {
        eventually("a leader whose term is applied to the pool", || async {
            for (i, g) in self.gateways.iter().enumerate() {
                let m = g.node().raft().metrics().borrow().clone();
                let in_office = g.node().read_local(|s, _| s.pool.raft_term()) == m.current_term;
                if m.current_leader == Some(m.id) && in_office {
                    return TestResult::Ok(i);
                }
            }
            Err("no leader in office yet".into())
        })
        .await
    }

    fn sandbox(&self, i: usize, id: &str) -> Option<pool::Sandbox> {
        self.gateways[i]
            .node()
            .read_local(|s, _| s.pool.sandbox(id).cloned())
    }
}

fn config(
    id: u64,
    addr: SocketAddr,
    voters: &[String],
    dir: &tempfile::TempDir,
) -> TestResult<GatewayConfig> {
    let section = GatewaySection {
        node_id: Some(id),
        listen_addr: Some(addr.to_string()),
        data_dir: Some(dir.path().join(format!("gw{id}"))),
        initial_voters: Some(voters.to_vec()),
        insecure: Some(true),
        sandbox_driver: Some(SandboxDriverSection {
            kind: Some("none".into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    Ok(section.validate()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_launchers_stale_list_fails_no_sandbox() -> TestResult {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let world = Arc::new(World::default());
    let group = Group::start(&world).await?;
    let endpoints: Vec<String> = group.addrs.iter().map(|a| a.to_string()).collect();
    // The member acknowledges only after an hour: b3 stays `Admitting`, a
    // launch whose runtime the launcher must start (a supervisor
    // acknowledges once it reached the recorded runtime).
    let _member = ScriptedMember::start("m1", 7, 4, endpoints.clone(), Duration::from_secs(3600));
    let a = group.leader_in_office().await;
    let b = (a + 1) % 3;
    eprintln!(
        "--- step: leader A is gateway {}; its next list is held",
        a + 1
    );
    let (entered, release) = group.drivers[a].hold_next_list();
    tokio::time::timeout(Duration::from_secs(30), entered)
        .await
        .map_err(|_| "A's launcher never listed")??;
    assert!(!world.has(&sandbox_driver::runtime_name("b3", 1)));

    eprintln!(
        "--- step: b3 is created; leadership moves to gateway {}",
        b + 1
    );
    eventually("b3 created", || {
        let addr = endpoints[a].clone();
        async move {
            PoolAdminClient::new(test_channel(&addr, 500).await?)
                .create_sandbox(CreateSandboxRequest {
                    sandbox_id: "b3".into(),
                    launch_id: "l-b3".into(),
                    material_ref: "demo".into(),
                    request_id: String::new(),
                })
                .await?;
            TestResult::Ok(())
        }
    })
    .await;
    let target = group.gateways[b].node().id();
    group.gateways[a]
        .node()
        .transfer_leader(Some(target))
        .await?;
    let now = group.leader_in_office().await;
    assert_eq!(now, b, "the transfer made gateway {} leader", b + 1);

    eprintln!("--- step: B ensures and records b3's runtime");
    let runtime = sandbox_driver::runtime_name("b3", 1);
    eventually("B recorded b3's runtime", || async {
        let recorded = group
            .sandbox(b, "b3")
            .and_then(|s| s.runtime)
            .is_some_and(|r| r.name == runtime);
        if recorded && world.has(&runtime) {
            TestResult::Ok(())
        } else {
            Err(format!(
                "not yet: b3 at B {:?}, world {:?}, B listed {} times",
                group.sandbox(b, "b3"),
                world.snapshot(),
                *group.drivers[b].lists.borrow()
            )
            .into())
        }
    })
    .await;

    eprintln!("--- step: A's held list answers (no b3); B passes three more times");
    release.send(()).map_err(|()| "A's list was dropped")?;
    group.drivers[b].passes(3).await;
    for i in 0..3 {
        let sb = group.sandbox(i, "b3").ok_or("b3 is gone")?;
        assert!(
            !matches!(sb.phase, Phase::Failed | Phase::Deleted),
            "gateway {}: b3 is {:?} ({:?}): a healthy sandbox was failed",
            i + 1,
            sb.phase,
            sb.failure
        );
    }
    assert!(
        world.has(&runtime),
        "b3's runtime was deleted: its workload was killed"
    );
    Ok(())
}
