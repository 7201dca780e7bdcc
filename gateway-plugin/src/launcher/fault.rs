//! The Jepsen fault `stale-runtime-list` (feature
//! `fault-stale-runtime-list`, [`crate::fault::stale_runtime_list`]):
//! issue 27's race put back, for `jepsen/tests/t62` to prove that the
//! `healthy-workloads-kept` checker catches it.
//!
//! Beside the real launcher, every gateway that does not lead runs the
//! passes of a deposed leader that still believes it leads, the way the
//! launcher worked before issue 27: it lists the runtimes, stalls (a
//! starved CPU, a slow driver call), reads the state through whichever node
//! serves a read index, and fails as `RuntimeLost` every recorded runtime
//! its stale list misses, with an unfenced `FailLaunch` forwarded to the
//! leader. A list taken before the leader started a runtime and a read
//! after it recorded it fail a healthy sandbox.

use std::sync::Arc;
use std::time::Duration;

use pool::{Command, FailLaunch};
use sandbox_driver::SandboxDriver;

use super::plan::{self, Action, LaunchDefaults};
use super::PASS_EVERY;
use crate::hub::Hub;

/// How long a deposed pass stalls between its list and its read: longer
/// than a launch takes from `ensure` to `RecordRuntime` (about one pass).
const STALL: Duration = Duration::from_millis(1500);

/// Runs deposed passes while this node does not lead, forever.
pub(super) async fn deposed_passes(
    hub: Arc<Hub>,
    driver: Arc<dyn SandboxDriver>,
    defaults: LaunchDefaults,
) {
    loop {
        tokio::time::sleep(PASS_EVERY).await;
        if hub.node().is_leader() {
            continue;
        }
        let Ok(listed) = driver.list().await else {
            continue;
        };
        tokio::time::sleep(STALL).await;
        let Ok(actions) = hub
            .node()
            .read(|state, _| {
                plan::plan(&state.pool, &listed, u64::MAX, driver.scope(), &defaults).actions
            })
            .await
        else {
            continue;
        };
        for action in actions {
            if let Action::Fail {
                sandbox,
                generation,
                reason,
            } = action
            {
                tracing::warn!(%sandbox, generation, %reason, "FAULT: a deposed launcher fails the sandbox");
                let command = Command::FailLaunch(FailLaunch {
                    sandbox,
                    generation,
                    reason,
                    raft_term: 0,
                });
                let _ = hub.propose(&command).await;
            }
        }
    }
}
