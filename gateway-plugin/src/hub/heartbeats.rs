//! The per-tick heartbeat batch: every tick interval, one `Heartbeat`
//! command naming each attached member incarnation whose `HostStatus`
//! arrived recently (this gateway's monotonic clock decides "recently"; the
//! member's freshness is then counted in ticks inside apply).

use std::sync::Arc;
use std::time::Duration;

use pool::Command;
use tracing::Instrument;

use super::Hub;

impl Hub {
    /// The members whose status arrived within `fresh_within`.
    fn fresh_beats(&self, fresh_within: Duration) -> Vec<pool::Beat> {
        self.streams
            .lock()
            .iter()
            .filter(|(_, a)| a.last_status.elapsed() <= fresh_within)
            .map(|(member, a)| pool::Beat {
                member: member.clone(),
                incarnation: a.incarnation,
            })
            .collect()
    }

    /// Every tick interval: one heartbeat batch for the members whose
    /// status arrived within two and a half status intervals.
    pub async fn run_heartbeats(self: Arc<Self>) {
        let mut ticker = tokio::time::interval(self.settings.tick_interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let fresh_within = self.settings.status_interval * 2 + self.settings.status_interval / 2;
        loop {
            ticker.tick().await;
            let beats = self.fresh_beats(fresh_within);
            if beats.is_empty() {
                continue;
            }
            let span = tracing::debug_span!("heartbeat_batch", beats = beats.len());
            let proposed = self
                .propose(&Command::Heartbeat(pool::Heartbeat { beats }))
                .instrument(span.clone())
                .await;
            if let Err(status) = proposed {
                span.in_scope(|| tracing::debug!(%status, "heartbeat batch not applied"));
            }
        }
    }
}
