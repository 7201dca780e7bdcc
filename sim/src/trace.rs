//! The trace of one run: every byte a node received from the network and
//! every entry a node applied, with the simulated time it happened at,
//! folded into one SHA-256. Two runs of the same seed must give the same
//! hash: that is the determinism contract.
//!
//! Each event is one line (`<sim µs> <what>`); the hash covers the lines
//! and, for network events, the bytes themselves. The lines are kept only
//! when asked ([`Trace::keeping_lines`]), and the last [`TAIL`] always, so a
//! failing seed can print what led to it.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use sha2::{Digest, Sha256};

/// How many of the last lines a trace always keeps.
pub const TAIL: usize = 200;

#[derive(Default)]
struct Inner {
    hasher: Sha256,
    events: u64,
    lines: Option<Vec<String>>,
    tail: VecDeque<String>,
}

/// The trace of one run. Cloning shares it.
#[derive(Clone, Default)]
pub struct Trace(Arc<Mutex<Inner>>);

impl Trace {
    /// A trace that keeps only its hash and its last lines.
    pub fn new() -> Self {
        Trace::default()
    }

    /// A trace that also keeps every line.
    pub fn keeping_lines() -> Self {
        let trace = Trace::default();
        trace.inner().lines = Some(Vec::new());
        trace
    }

    /// One thread runs the simulation; a panic while recording ends it.
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records one event inside the simulation (a host or the client),
    /// with `bytes` (possibly empty) folded into the hash.
    pub fn record(&self, what: impl AsRef<str>, bytes: &[u8]) {
        self.record_at(turmoil::sim_elapsed().unwrap_or_default(), what, bytes);
    }

    /// Records one event at simulated time `at` (the driver, between steps).
    pub fn record_at(&self, at: std::time::Duration, what: impl AsRef<str>, bytes: &[u8]) {
        let line = format!("{} {}", at.as_micros(), what.as_ref());
        let mut inner = self.inner();
        inner.hasher.update(line.as_bytes());
        inner.hasher.update(b"\n");
        inner.hasher.update(bytes);
        inner.events += 1;
        if let Some(lines) = inner.lines.as_mut() {
            lines.push(line.clone());
        }
        if inner.tail.len() == TAIL {
            inner.tail.pop_front();
        }
        inner.tail.push_back(line);
    }

    /// The hash of every event so far, in hex.
    pub fn hash(&self) -> String {
        hex::encode(self.inner().hasher.clone().finalize())
    }

    /// How many events were recorded.
    pub fn events(&self) -> u64 {
        self.inner().events
    }

    /// Every line, if this trace keeps them.
    pub fn lines(&self) -> Option<Vec<String>> {
        self.inner().lines.clone()
    }

    /// The last lines (at most [`TAIL`]).
    pub fn tail(&self) -> Vec<String> {
        self.inner().tail.iter().cloned().collect()
    }
}
