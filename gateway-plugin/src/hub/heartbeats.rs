//! The per-tick heartbeat batch: every tick interval, one `Heartbeat`
//! command naming each attached member incarnation whose `HostStatus`
//! arrived recently (this gateway's monotonic clock decides "recently"; the
//! member's freshness is then counted in ticks inside apply).

use std::sync::Arc;
use std::time::Duration;

use pool::Command;
use prost::Message;
use tracing::Instrument;

use super::Hub;

/// Most encoded bytes of beats in one `Heartbeat` command: well under the
/// store's command limit (`raft_store::batcher::MAX_COMMAND_BYTES`), so a
/// gateway with thousands of attached members proposes several commands a
/// tick instead of one the store refuses (which would expire them all).
pub const HEARTBEAT_CHUNK_BYTES: usize = 32 * 1024;

/// Splits `beats` into runs of at most [`HEARTBEAT_CHUNK_BYTES`] encoded
/// bytes each (at least one beat per run).
pub fn chunks(beats: Vec<pool::Beat>) -> Vec<Vec<pool::Beat>> {
    let mut out: Vec<Vec<pool::Beat>> = Vec::new();
    let mut bytes = 0usize;
    for beat in beats {
        // The beat's own length plus its field tag and length prefix.
        let size = beat.encoded_len() + 4;
        match out.last_mut() {
            Some(run) if bytes + size <= HEARTBEAT_CHUNK_BYTES => run.push(beat),
            _ => {
                out.push(vec![beat]);
                bytes = 0;
            }
        }
        bytes += size;
    }
    out
}

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
            for beats in chunks(beats) {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(i: usize) -> pool::Beat {
        pool::Beat {
            member: format!("member-{i:0>200}"),
            incarnation: i as u64 + 1,
        }
    }

    /// Thousands of members with long ids: every command stays under the
    /// chunk bound, and every beat is sent exactly once, in order.
    #[test]
    fn a_large_pool_heartbeats_in_commands_under_the_bound() {
        let beats: Vec<_> = (0..3000).map(beat).collect();
        let runs = chunks(beats.clone());
        assert!(runs.len() > 1);
        for run in &runs {
            let encoded =
                Command::Heartbeat(pool::Heartbeat { beats: run.clone() }).encode_to_vec();
            assert!(
                encoded.len() <= HEARTBEAT_CHUNK_BYTES + 64,
                "{} bytes",
                encoded.len()
            );
        }
        assert_eq!(runs.concat(), beats);
        assert_eq!(chunks(vec![beat(1)]).len(), 1);
        assert!(chunks(Vec::new()).is_empty());
    }
}
