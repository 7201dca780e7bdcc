//! The harness as a whole: the [`Cluster`] behind a lock, its controller
//! loop (every 250 ms) and the API server, for tests and the binary.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::api::{self, Shared};
use crate::cluster::Cluster;
use crate::manifest::Manifests;

/// A running harness. [`Harness::stop`] deletes every pod within its grace
/// period; dropping it kills them and removes the network.
pub struct Harness {
    /// The cluster, for reads and changes between passes.
    pub shared: Shared,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    controller: Option<std::thread::JoinHandle<()>>,
}

impl Harness {
    /// Sets up the network, Services and API, and starts reconciling.
    ///
    /// # Errors
    /// When any of that cannot be set up.
    pub async fn start(
        run: &str,
        root: PathBuf,
        bin_dir: PathBuf,
        manifests: Manifests,
        namespace: &str,
    ) -> anyhow::Result<Harness> {
        let cluster = Cluster::new(run, root, bin_dir, manifests, namespace).await?;
        let shared: Shared = Arc::new(Mutex::new(cluster));
        let api = api::serve(shared.clone()).await?;
        let loop_shared = shared.clone();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop_loop = stop.clone();
        let handle = tokio::runtime::Handle::current();
        // The controller runs on a thread of its own: pods are its children
        // (they die with it, see `RunningPod::start`), and probes are tasks
        // on the runtime.
        let controller = std::thread::Builder::new()
            .name("pod-harness-controller".into())
            .spawn(move || {
                let _rt = handle.enter();
                let mut last_error = String::new();
                while !stop_loop.load(std::sync::atomic::Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(250));
                    match with(&loop_shared, Cluster::reconcile) {
                        Err(e) if format!("{e:#}") != last_error => {
                            last_error = format!("{e:#}");
                            tracing::error!(error = %last_error, "reconcile failed");
                        }
                        Ok(()) => last_error.clear(),
                        Err(_) => {}
                    }
                }
                // Shutdown: delete every pod, honouring grace periods.
                with(&loop_shared, Cluster::delete_all);
                for _ in 0..1200 {
                    if with(&loop_shared, |c| c.drain_step().unwrap_or(true)) {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                with(&loop_shared, Cluster::stop_services);
            })?;
        Ok(Harness {
            shared,
            tasks: vec![api],
            stop,
            controller: Some(controller),
        })
    }

    /// Runs `f` on the cluster under its lock.
    pub fn with<R>(&self, f: impl FnOnce(&mut Cluster) -> R) -> R {
        with(&self.shared, f)
    }

    /// Waits until `check` holds (polled every 200 ms) or `timeout` passes.
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&mut Cluster) -> bool,
    ) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            if self.with(&mut check) {
                return Ok(());
            }
            if start.elapsed() > timeout {
                anyhow::bail!("{what}: not within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Deletes every pod (grace periods honoured) and stops.
    pub async fn stop(mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.controller.take() {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        for t in &self.tasks {
            t.abort();
        }
        // Not joined here: a test that did not call `stop` still gets its
        // pods killed when the process exits (they die with the controller
        // thread) and its network removed with the cluster.
    }
}

fn with<R>(shared: &Shared, f: impl FnOnce(&mut Cluster) -> R) -> R {
    let mut g = match shared.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    f(&mut g)
}
