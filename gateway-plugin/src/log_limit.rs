//! Rate limits for log lines a caller can cause at will: a refused token, a
//! refused supervisor hello, a stream that never says hello. Each is still
//! counted in the metrics (`openshell_auth_failures_total`) every time; the
//! log gets at most [`LINES_PER_WINDOW`] lines per reason per [`WINDOW`], and
//! the first line of a later window says how many were left out
//! (`suppressed`), so a flood of refused calls cannot fill a disk or bury the
//! lines that matter (issue 32: 10,000 refused calls had written 10,000
//! "request refused" lines).
//!
//! Why not a crate: `governor` answers "allowed or not" per key, but the
//! count of suppressed lines (what an operator needs to see that a flood
//! happened) would still be ours to keep, and the keys here are a small
//! closed set of `&'static str` pairs, so a fixed window per key in one
//! mutex is all it takes.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Lines per reason per window.
pub const LINES_PER_WINDOW: u32 = 10;
/// The window.
pub const WINDOW: Duration = Duration::from_secs(10);

/// A key: (what refused, why), both from code, never from a caller, so the
/// map stays as small as the set of reasons.
pub type Key = (&'static str, &'static str);

/// One key's window.
#[derive(Debug)]
struct Window {
    /// When the window began.
    started: Instant,
    /// Lines logged in it.
    logged: u32,
    /// Lines left out since the last one logged.
    suppressed: u64,
}

/// Per-key fixed windows. A std mutex: held only to update a counter, never
/// across an await.
#[derive(Debug, Default)]
pub struct LogLimiter {
    windows: Mutex<BTreeMap<Key, Window>>,
}

impl LogLimiter {
    /// An empty limiter (usable in a `static`).
    pub const fn new() -> Self {
        LogLimiter {
            windows: Mutex::new(BTreeMap::new()),
        }
    }

    /// Whether to log one more line for `key` at `now`: `Some(n)`, where `n`
    /// lines of this key were left out since the last one logged, or `None`
    /// (leave it out).
    pub fn allow_at(&self, key: Key, now: Instant) -> Option<u64> {
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        let window = windows.entry(key).or_insert(Window {
            started: now,
            logged: 0,
            suppressed: 0,
        });
        if now.saturating_duration_since(window.started) >= WINDOW {
            window.started = now;
            window.logged = 0;
        }
        if window.logged >= LINES_PER_WINDOW {
            window.suppressed += 1;
            return None;
        }
        window.logged += 1;
        Some(std::mem::take(&mut window.suppressed))
    }

    /// [`LogLimiter::allow_at`] now.
    pub fn allow(&self, key: Key) -> Option<u64> {
        self.allow_at(key, Instant::now())
    }
}

/// The gateway's limiter of refusal lines.
pub static REFUSALS: LogLimiter = LogLimiter::new();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_logs_a_few_lines_per_window_then_says_how_many_were_left_out() {
        let limiter = LogLimiter::new();
        let t0 = Instant::now();
        let key = ("pool_admin", "missing");
        let logged: Vec<u64> = (0..1000)
            .filter_map(|_| limiter.allow_at(key, t0))
            .collect();
        assert_eq!(logged, vec![0; LINES_PER_WINDOW as usize]);
        // Another key has its own window.
        assert_eq!(limiter.allow_at(("pool_admin", "invalid"), t0), Some(0));
        // Still in the window: left out.
        assert_eq!(limiter.allow_at(key, t0 + WINDOW / 2), None);
        // A new window: the first line counts what was left out.
        let later = t0 + WINDOW;
        assert_eq!(limiter.allow_at(key, later), Some(991));
        assert_eq!(limiter.allow_at(key, later), Some(0));
    }
}
