//! The start and end every pod-harness scenario shares: skip without root,
//! render and install the chart with the workspace's binaries as the image,
//! run the scenario, print the pods' logs if it failed, stop every pod
//! within its grace period.

use std::future::Future;
use std::sync::Arc;

use pod_harness::release::{self, Release};
use serde_json::Value;

/// Runs `scenario` against the chart installed with `values` (test name
/// `test`, network run id `run`); panics with the scenario's error.
pub async fn run<F, Fut>(test: &str, run: &str, values: Value, scenario: F)
where
    F: FnOnce(Arc<Release>) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    if testkit::skip_without_root(test) {
        return;
    }
    let workspace = testkit::bins::workspace_root();
    let bin_dir = testkit::bins::gateway_bin()
        .parent()
        .expect("bin dir")
        .to_path_buf();
    let root = tempfile::tempdir().expect("tempdir");
    let rel = Arc::new(
        release::install(run, &workspace, bin_dir, root.path(), &values)
            .await
            .expect("install"),
    );
    let result = scenario(rel.clone()).await;
    if result.is_err() {
        release::dump_logs(root.path());
    }
    if let Ok(rel) = Arc::try_unwrap(rel) {
        rel.stop().await;
    }
    result.expect("scenario");
}
