//! Drain and leave on stop (`--drain-on-stop`, the default): what the
//! supervisor does between the first SIGTERM/SIGINT and its exit, so that
//! Kubernetes scale-downs and rolling updates move sandboxes by drain (an
//! operation: the workloads keep running, their runtimes keep their
//! processes) instead of by expiry.
//!
//! 1. `/readyz` turns 503 `not ready: draining (stopping)` at once.
//! 2. Every `HostStatus` carries `stopping`: the gateway holding the stream
//!    starts a drain of exactly this member (retried while the pool refuses
//!    it, e.g. while no other member is eligible).
//! 3. The supervisor keeps supervising what it still owns until its
//!    assignment set is empty (every sandbox moved away) or
//!    `--drain-timeout-ms` passed.
//! 4. It sends `HostLeave` until the gateway answers `HostLeft` (bounded by
//!    [`LEAVE_WAIT`]); the member turns `leaving` and whatever it still owns
//!    is taken over by the normal path.
//!
//! Without any gateway attached for [`NO_GATEWAY_GIVE_UP`] (they are down
//! or stopping too) the stop gives up and exits: the member then expires by
//! TTL. The caller races all this against a second signal, which exits at
//! once.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use proto::supervisor_host::{supervisor_message, HostLeave};

use super::Agent;

/// How long the supervisor waits for the pool to confirm its leave
/// (`HostLeft`) before it exits anyway (the member then expires by TTL).
pub const LEAVE_WAIT: Duration = Duration::from_secs(5);

/// How often the drain's progress is checked.
const POLL: Duration = Duration::from_millis(100);

/// How long the stop goes on without any gateway attached before it gives
/// up and exits: nobody is left to drain this member or to hear its leave
/// (the gateways are down or stopping too, e.g. the whole system is being
/// stopped); the member then expires by TTL, as if it had been killed. A
/// gateway that stops or dies is replaced within milliseconds (the next
/// gateway of the list, at once), far below this.
pub const NO_GATEWAY_GIVE_UP: Duration = Duration::from_secs(1);

/// Drains this member and leaves the pool (steps 1-4 of the module doc).
pub async fn drain_and_leave(agent: &Arc<Agent>) {
    let timeout = agent.config.drain_timeout;
    agent.stopping.store(true, Ordering::SeqCst);
    // Ask now rather than at the next status interval.
    agent.send(supervisor_message::Message::Status(agent.host_status()));
    tracing::info!(
        timeout_ms = timeout.as_millis() as u64,
        owned = owned(agent),
        "stopping: asking the pool to drain this member, then leaving"
    );
    let deadline = tokio::time::Instant::now() + timeout;
    let mut alone = Alone::default();
    loop {
        if alone.gave_up(agent) {
            return;
        }
        if drained(agent) {
            tracing::info!("drained: this member owns no sandbox any more");
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(
                owned = owned(agent),
                "drain timeout passed: leaving anyway; what this member still owns is taken over \
                 by the normal path (recovery)"
            );
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    leave(agent).await;
}

/// The sandboxes this member is still assigned (the latest snapshot), or
/// holds a session of.
fn owned(agent: &Agent) -> usize {
    let assigned = Agent::lock(&agent.last_snapshot)
        .as_ref()
        .map_or(0, |s| s.assignments.len());
    assigned.max(Agent::lock(&agent.sessions).len())
}

/// Whether the pool moved everything away: attached, the latest snapshot
/// assigns nothing and no session is left.
fn drained(agent: &Agent) -> bool {
    agent.attached.load(Ordering::SeqCst)
        && Agent::lock(&agent.last_snapshot)
            .as_ref()
            .is_some_and(|s| s.assignments.is_empty())
        && Agent::lock(&agent.sessions).is_empty()
}

/// Sends `HostLeave` (again each second, on whichever stream is current)
/// until the leave is confirmed or [`LEAVE_WAIT`] passes.
async fn leave(agent: &Arc<Agent>) {
    agent.leave_sent.store(true, Ordering::SeqCst);
    let mut left = agent.left.subscribe();
    let deadline = tokio::time::Instant::now() + LEAVE_WAIT;
    let mut alone = Alone::default();
    let mut resend = tokio::time::Instant::now();
    loop {
        if tokio::time::Instant::now() >= resend {
            agent.send(supervisor_message::Message::Leave(HostLeave {}));
            resend += Duration::from_secs(1);
        }
        let wait = tokio::time::timeout(POLL, left.wait_for(|l| *l));
        if let Ok(Ok(_)) = wait.await {
            tracing::info!("left the pool; exiting");
            return;
        }
        if alone.gave_up(agent) {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(
                "the pool did not confirm the leave in time; exiting (the member expires by TTL)"
            );
            return;
        }
    }
}

/// Counts how long the stop has gone on without an attached gateway.
#[derive(Default)]
struct Alone {
    /// Since when no gateway is attached (None: one is).
    since: Option<tokio::time::Instant>,
}

impl Alone {
    /// Whether the stop should give up: no gateway attached for
    /// [`NO_GATEWAY_GIVE_UP`] (logged once, here).
    fn gave_up(&mut self, agent: &Agent) -> bool {
        if agent.attached.load(Ordering::SeqCst) {
            self.since = None;
            return false;
        }
        let since = *self.since.get_or_insert_with(tokio::time::Instant::now);
        if since.elapsed() < NO_GATEWAY_GIVE_UP {
            return false;
        }
        tracing::warn!(
            owned = owned(agent),
            "stopping: no gateway attached for {} ms, nobody to drain this member or hear its leave; \
             exiting (the member expires by TTL)",
            NO_GATEWAY_GIVE_UP.as_millis()
        );
        true
    }
}
