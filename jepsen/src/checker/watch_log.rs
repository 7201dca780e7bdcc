//! What one watcher of the register workload delivered: the record the
//! `watch-events` checker ([`crate::checker::watch`]) reads, written as it
//! happens to `<run>/watch-<n>.jsonl` (one JSON object a line) and kept in
//! memory for the run's own check.
//!
//! The file's lines, in order:
//!
//! ```text
//! {"watch":{"name":"type","object_type":"jepsen-register","id":"","id_prefix":""}}
//! {"start":{"from":1}}
//! {"event":{"revision":12,"kind":"put","object_type":"jepsen-register","key":"r0","payload":"7","resource_version":12,"stream":1}}
//! ...
//! {"end":{"reason":"current","through":1840,"target":1833,"streams_opened":4,"errors":0,"detail":""}}
//! ```
//!
//! `start.from` is the first revision the watch covers: every covered event
//! from it up to `end.through` was delivered, if the store keeps its promise.
//! A watcher that never started has no `start` line; one whose run was
//! interrupted has no `end` line (the checker is then `unknown`).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What one watcher watches (`ObjectStore.Watch`'s selection).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchScope {
    /// The watcher's name in reports (`type`, `key-r0`, ...).
    pub name: String,
    /// The object type; empty: every type.
    pub object_type: String,
    /// Exactly this id; empty: every id starting with `id_prefix`.
    pub id: String,
    /// The id prefix (when `id` is empty).
    pub id_prefix: String,
}

impl WatchScope {
    /// Whether an object of `object_type` with id `key` is covered (the
    /// gateway's own rule, `raft_store::object_events::WatchKey::covers`).
    pub fn covers(&self, object_type: &str, key: &str) -> bool {
        if self.object_type.is_empty() {
            return true;
        }
        if object_type != self.object_type {
            return false;
        }
        if self.id.is_empty() {
            key.starts_with(&self.id_prefix)
        } else {
            key == self.id
        }
    }
}

/// A watch event's kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// The object was written.
    Put,
    /// The object was deleted.
    Delete,
    /// The gateway named no kind (never valid).
    Unspecified,
}

/// One event as the watcher delivered it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delivered {
    /// The event's store revision.
    pub revision: u64,
    /// Put or delete.
    pub kind: EventKind,
    /// The object's type.
    pub object_type: String,
    /// The object's id (the register).
    pub key: String,
    /// The object's payload as text (a register's value); empty for a
    /// delete.
    pub payload: String,
    /// The object's `resource_version` in the event (a put's is its
    /// revision).
    pub resource_version: u64,
    /// Which of the watcher's streams delivered it (1: the first; more
    /// after each resume).
    pub stream: u32,
}

/// Why a watcher stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EndReason {
    /// It was current past the highest acknowledged write's revision.
    Current,
    /// The bounded wait after the final heal passed before it was.
    Behind,
    /// A revision it still had to receive was no longer held
    /// (`openshell_client::Error::Compacted`).
    Compacted,
    /// It never started, or ended with an error no resume can change
    /// (refused, a bad request).
    Failed,
}

/// How a watcher ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchEnd {
    /// Why.
    pub reason: EndReason,
    /// Every covered event up to this revision was delivered (the
    /// watcher's next revision minus one).
    pub through: u64,
    /// The highest acknowledged write revision it was asked to pass
    /// (none: it ended before it was asked).
    pub target: Option<u64>,
    /// Streams opened: 1 + the resumes.
    pub streams_opened: u32,
    /// Errors the harness saw from `Watcher::next` and called it again
    /// after (each resumes from the revision it stopped at).
    pub errors: u32,
    /// The error, for `compacted` and `failed`.
    pub detail: String,
}

/// One watcher's whole record.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchLog {
    /// What it watched.
    pub scope: WatchScope,
    /// The first covered revision (none: it never started).
    pub start: Option<u64>,
    /// Every event, in the order delivered.
    pub events: Vec<Delivered>,
    /// How it ended (none: the record was cut short).
    pub end: Option<WatchEnd>,
}

/// One line of `watch-<n>.jsonl`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Line {
    /// The first line: the scope.
    Watch(WatchScope),
    /// The first covered revision.
    Start {
        /// The revision.
        from: u64,
    },
    /// An event.
    Event(Delivered),
    /// The last line.
    End(WatchEnd),
}

/// Why a watch log could not be read.
#[derive(Debug, thiserror::Error)]
pub enum WatchLogError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A line is not a watch log line.
    #[error("{path}:{line}: {source}")]
    Line {
        /// The file.
        path: PathBuf,
        /// The line number, from 1.
        line: usize,
        /// What serde found wrong.
        #[source]
        source: serde_json::Error,
    },
    /// The lines are out of place (no `watch` line first, two `start`s,
    /// a line after `end`).
    #[error("{path}:{line}: {what}")]
    Order {
        /// The file.
        path: PathBuf,
        /// The line number, from 1.
        line: usize,
        /// What is out of place.
        what: &'static str,
    },
}

impl WatchLog {
    /// Adds one line read back from a file (`n` numbers it for errors).
    fn push(&mut self, path: &Path, n: usize, line: Line) -> Result<(), WatchLogError> {
        let order = |what| WatchLogError::Order {
            path: path.to_path_buf(),
            line: n,
            what,
        };
        if self.end.is_some() {
            return Err(order("a line after the `end` line"));
        }
        match line {
            Line::Watch(_) if n != 1 => return Err(order("a `watch` line that is not the first")),
            Line::Watch(scope) => self.scope = scope,
            _ if n == 1 => return Err(order("the first line is not the `watch` line")),
            Line::Start { .. } if self.start.is_some() => return Err(order("a second `start`")),
            Line::Start { from } => self.start = Some(from),
            Line::Event(_) if self.start.is_none() => return Err(order("an event before `start`")),
            Line::Event(e) => self.events.push(e),
            Line::End(end) => self.end = Some(end),
        }
        Ok(())
    }
}

/// Reads a `watch-<n>.jsonl`.
///
/// # Errors
/// [`WatchLogError`] naming the file and the line.
pub fn read(path: &Path) -> Result<WatchLog, WatchLogError> {
    let io = |source| WatchLogError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let mut log = WatchLog::default();
    let mut n = 0;
    for text in BufReader::new(file).lines() {
        let text = text.map_err(io)?;
        if text.trim().is_empty() {
            continue;
        }
        n += 1;
        let line: Line = serde_json::from_str(&text).map_err(|source| WatchLogError::Line {
            path: path.to_path_buf(),
            line: n,
            source,
        })?;
        log.push(path, n, line)?;
    }
    Ok(log)
}

/// The `watch-<n>.jsonl` files in `dir`, sorted by name.
pub fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("watch-") && n.ends_with(".jsonl"))
        })
        .collect();
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Given a log written line by line, when it is read back, then it is
    /// the same record.
    #[test]
    fn a_written_log_reads_back_the_same() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("watch-1.jsonl");
        let scope = WatchScope {
            name: "key-r0".into(),
            object_type: "jepsen-register".into(),
            id: "r0".into(),
            id_prefix: String::new(),
        };
        let event = Delivered {
            revision: 12,
            kind: EventKind::Put,
            object_type: "jepsen-register".into(),
            key: "r0".into(),
            payload: "7".into(),
            resource_version: 12,
            stream: 1,
        };
        let end = WatchEnd {
            reason: EndReason::Current,
            through: 20,
            target: Some(12),
            streams_opened: 2,
            errors: 0,
            detail: String::new(),
        };
        let lines = [
            Line::Watch(scope.clone()),
            Line::Start { from: 3 },
            Line::Event(event.clone()),
            Line::End(end.clone()),
        ];
        let text: Vec<String> = lines
            .iter()
            .map(|l| serde_json::to_string(l).expect("json"))
            .collect();
        std::fs::write(&path, text.join("\n")).expect("write");
        let log = read(&path).expect("read");
        assert_eq!(
            log,
            WatchLog {
                scope,
                start: Some(3),
                events: vec![event],
                end: Some(end)
            }
        );
        assert_eq!(files_in(dir.path()), vec![path]);
    }

    /// Given a log whose first line is an event, when it is read, then the
    /// error names the line.
    #[test]
    fn a_log_without_its_watch_line_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("watch-1.jsonl");
        std::fs::write(&path, "{\"start\":{\"from\":1}}\n").expect("write");
        let e = read(&path).expect_err("refused");
        assert!(e.to_string().contains(":1: the first line"), "{e}");
    }

    /// Given scopes of a type, a key and a prefix, then each covers what
    /// the gateway's watch covers.
    #[test]
    fn scopes_cover_as_the_gateway_does() {
        let of = |id: &str, id_prefix: &str| WatchScope {
            name: String::new(),
            object_type: "t".into(),
            id: id.into(),
            id_prefix: id_prefix.into(),
        };
        assert!(of("", "").covers("t", "r9"));
        assert!(!of("", "").covers("u", "r9"));
        assert!(of("r0", "").covers("t", "r0"));
        assert!(!of("r0", "").covers("t", "r01"));
        assert!(of("", "r1").covers("t", "r12"));
        assert!(!of("", "r1").covers("t", "r2"));
        assert!(WatchScope::default().covers("u", "x"));
    }
}
