//! The one cached HTTP/2 channel per peer address, and the rule that
//! replaces a channel whose calls keep timing out.
//!
//! A peer connection can die without closing: heavy packet loss leaves a
//! TCP connection in retransmission backoff (each retry waits twice as long,
//! up to two minutes), and a middlebox that lost the flow drops its packets
//! for good. Nothing then fails on it; every call just times out. Two things
//! notice it (issue 33):
//!
//! - HTTP/2 keep-alive on the channel itself ([`proto::client`]'s
//!   `Role::Peer`: a ping after 500 ms without a frame read, the connection
//!   closed after 500 ms more without its answer), after which tonic dials
//!   a new connection at the next call;
//! - this cache: after [`FRESH_AFTER_TIMEOUTS`] calls in a row to one
//!   address timed out (and the channel is at least [`FRESH_MIN_AGE`] old),
//!   the channel is dropped and the next call opens a fresh one. This also
//!   covers a connection whose pings are answered while its calls are not.
//!
//! A call that timed out is one tonic ended at its deadline
//! ([`timed_out`]). A call its caller dropped before it finished
//! ([`CallWatch`]) is not counted: openraft drops a vote, and a leadership
//! check's heartbeat, at its own TTL (the heartbeat interval), which says
//! that the peer answers slowly, not that the connection is dead. Counted,
//! those drops replaced the connection to a slow follower once a second
//! while it was catching up, each time with a new TLS handshake on a loaded
//! machine (a Jepsen register run, issue 33). Appends are never dropped
//! so: they run to their own deadline ([`super::outstanding`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tonic::transport::Channel;

/// Calls in a row to one address that timed out before its channel is
/// replaced by a fresh connection.
pub const FRESH_AFTER_TIMEOUTS: u32 = 3;

/// The youngest channel that may be replaced: at most one fresh connection
/// per address per this interval (calls time out every heartbeat while a
/// peer is down or paused).
pub const FRESH_MIN_AGE: Duration = Duration::from_secs(1);

/// One address's channel.
struct Cached {
    /// The channel every call to the address shares.
    channel: Channel,
    /// When it was built.
    opened: Instant,
    /// Calls in a row that timed out on it.
    timeouts: u32,
}

/// Address -> channel, shared by every clone. A std lock: held only to look
/// up, insert or count (never across an await). A poisoned lock is
/// recovered: the map holds only channels and counters.
#[derive(Clone, Default)]
pub struct ChannelCache(Arc<Mutex<BTreeMap<String, Cached>>>);

impl ChannelCache {
    fn map(&self) -> MutexGuard<'_, BTreeMap<String, Cached>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The cached channel to `addr`.
    pub fn get(&self, addr: &str) -> Option<Channel> {
        self.map().get(addr).map(|c| c.channel.clone())
    }

    /// Caches `channel` for `addr` unless another caller cached one
    /// meanwhile; returns the one cached.
    pub fn insert_first(&self, addr: &str, channel: Channel) -> Channel {
        self.map()
            .entry(addr.to_string())
            .or_insert_with(|| Cached {
                channel,
                opened: Instant::now(),
                timeouts: 0,
            })
            .channel
            .clone()
    }

    /// A call to `addr` got an answer (any answer: the connection works).
    pub fn answered(&self, addr: &str) {
        if let Some(c) = self.map().get_mut(addr) {
            c.timeouts = 0;
        }
    }

    /// A call to `addr` timed out. Returns true when that made the cache
    /// drop the channel (the next call opens a fresh connection).
    pub fn timed_out(&self, addr: &str) -> bool {
        let mut map = self.map();
        let Some(c) = map.get_mut(addr) else {
            return false;
        };
        c.timeouts = c.timeouts.saturating_add(1);
        if c.timeouts < FRESH_AFTER_TIMEOUTS || c.opened.elapsed() < FRESH_MIN_AGE {
            return false;
        }
        let timeouts = c.timeouts;
        map.remove(addr);
        drop(map);
        tracing::info!(
            addr,
            timeouts,
            "{timeouts} calls in a row to {addr} timed out: opening a fresh connection"
        );
        true
    }
}

/// Whether a failed call ended at its deadline: tonic's own timeout
/// (`CANCELLED` from a [`tonic::TimeoutExpired`] source) or the peer's
/// (`DEADLINE_EXCEEDED`).
pub fn timed_out(status: &tonic::Status) -> bool {
    if status.code() == tonic::Code::DeadlineExceeded {
        return true;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(status);
    while let Some(error) = source {
        if error.is::<tonic::TimeoutExpired>() {
            return true;
        }
        source = error.source();
    }
    false
}

/// Watches one call to an address: [`CallWatch::answered`] or
/// [`CallWatch::failed`] when it ends; dropped without either (its caller
/// gave up on it, as openraft does at its TTL), it counts as nothing.
pub struct CallWatch {
    cache: ChannelCache,
    addr: String,
}

impl CallWatch {
    /// Watches a call to `addr`.
    pub fn new(cache: &ChannelCache, addr: &str) -> Self {
        CallWatch {
            cache: cache.clone(),
            addr: addr.to_string(),
        }
    }

    /// The call got an answer.
    pub fn answered(self) {
        self.cache.answered(&self.addr);
    }

    /// The call failed with `status`: a timeout counts; another failure
    /// (refused, reset, an error the peer sent) leaves the count as it is.
    pub fn failed(self, status: &tonic::Status) {
        if timed_out(status) {
            self.cache.timed_out(&self.addr);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn channel() -> Channel {
        tonic::transport::Endpoint::from_static("http://127.0.0.1:1").connect_lazy()
    }

    /// Makes the cached channel of `addr` old enough to be replaced.
    fn age(cache: &ChannelCache, addr: &str) {
        if let Some(c) = cache.map().get_mut(addr) {
            c.opened = Instant::now()
                .checked_sub(FRESH_MIN_AGE)
                .unwrap_or(c.opened);
        }
    }

    #[tokio::test]
    async fn the_channel_is_replaced_after_repeated_timeouts_only() {
        let cache = ChannelCache::default();
        cache.insert_first("a", channel());
        // Too young: counted, not replaced.
        for _ in 0..FRESH_AFTER_TIMEOUTS {
            assert!(!cache.timed_out("a"));
        }
        assert!(cache.get("a").is_some());
        // An answer resets the count.
        age(&cache, "a");
        cache.answered("a");
        for _ in 1..FRESH_AFTER_TIMEOUTS {
            assert!(!cache.timed_out("a"));
        }
        assert!(
            cache.timed_out("a"),
            "the third timeout in a row replaces it"
        );
        assert!(cache.get("a").is_none());
    }

    #[tokio::test]
    async fn a_dropped_call_is_not_a_timeout() {
        let cache = ChannelCache::default();
        cache.insert_first("a", channel());
        age(&cache, "a");
        for _ in 0..FRESH_AFTER_TIMEOUTS * 10 {
            drop(CallWatch::new(&cache, "a"));
        }
        assert!(cache.get("a").is_some(), "a slow peer keeps its connection");
        // Deadlines tonic enforced still count.
        for _ in 0..FRESH_AFTER_TIMEOUTS {
            CallWatch::new(&cache, "a").failed(&tonic::Status::deadline_exceeded("late"));
        }
        assert!(cache.get("a").is_none());
    }

    #[test]
    fn only_deadlines_are_timeouts() {
        let mut status = tonic::Status::cancelled("Timeout expired");
        status.set_source(Arc::new(tonic::TimeoutExpired(())));
        assert!(timed_out(&status));
        assert!(timed_out(&tonic::Status::deadline_exceeded("late")));
        assert!(!timed_out(&tonic::Status::cancelled("Timeout expired")));
        assert!(!timed_out(&tonic::Status::unavailable("refused")));
    }
}
