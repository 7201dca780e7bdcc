//! The run's history: Jepsen op maps written as JSON Lines (see
//! `shared/design/HISTORY.md`).
//!
//! One [`Recorder`] per run hands out event indexes and timestamps from one
//! monotonic clock, keeps the events in memory for the checkers and appends
//! each one to `history.jsonl` as it happens, so a run that is interrupted
//! still leaves its history behind.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// `type` of an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OpType {
    /// A client sent the operation.
    Invoke,
    /// It took effect.
    Ok,
    /// It certainly did not take effect.
    Fail,
    /// Unknown (timeout, lost connection), or a nemesis event.
    Info,
}

/// `process`: a client number, or `"nemesis"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Process {
    /// A client process; after an `info` it never issues again.
    Client(u64),
    /// The fault injector.
    Nemesis,
}

impl Serialize for Process {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Process::Client(n) => s.serialize_u64(*n),
            Process::Nemesis => s.serialize_str("nemesis"),
        }
    }
}

impl<'de> Deserialize<'de> for Process {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::Number(n) => n
                .as_u64()
                .map(Process::Client)
                .ok_or_else(|| serde::de::Error::custom("process must be a non-negative integer")),
            serde_json::Value::String(s) if s == "nemesis" => Ok(Process::Nemesis),
            other => Err(serde::de::Error::custom(format!(
                "process must be an integer or \"nemesis\", got {other}"
            ))),
        }
    }
}

/// One line of `history.jsonl`. Every field HISTORY.md names is required
/// (`key`, `node` and `error` are optional there) and no other is allowed:
/// a line without `time` is an error, not an event at time 0. What `value`
/// holds per `f` is typed in [`crate::ops`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Event {
    /// Position in the history, from 0.
    pub index: u64,
    /// invoke / ok / fail / info.
    #[serde(rename = "type")]
    pub kind: OpType,
    /// Who issued it.
    pub process: Process,
    /// The operation (`read`, `write`, `cas`, or a nemesis verb).
    pub f: String,
    /// The register (register workload), the sandbox or member (pool
    /// workload); absent on nemesis events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The value, shaped per `f` (HISTORY.md; typed in [`crate::ops`]).
    pub value: serde_json::Value,
    /// Nanoseconds since the run started (harness monotonic clock).
    pub time: u64,
    /// The node the client talked to (extra key, as Jepsen's `:node`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Why an op failed or is unknown (extra key, as Jepsen's `:error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Register workload, `ok` read/write/cas only: the object's
    /// `resource_version` the op read or its write was given (extra key;
    /// absent when the register was absent). Checked by
    /// [`crate::checker::versions`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<u64>,
}

/// Process numbers shared by every client of a workload.
#[derive(Clone)]
pub struct Processes(pub Arc<AtomicU64>);

impl Processes {
    /// A fresh process number.
    pub fn fresh(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

/// The fields a caller supplies; index and time are the recorder's.
#[derive(Clone, Debug)]
pub struct EventSpec {
    /// invoke / ok / fail / info.
    pub kind: OpType,
    /// Who.
    pub process: Process,
    /// What.
    pub f: String,
    /// Which register.
    pub key: Option<String>,
    /// With which value.
    pub value: serde_json::Value,
    /// Through which node.
    pub node: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
}

struct Inner {
    events: Vec<Event>,
    file: Option<BufWriter<File>>,
}

/// The file beside `history.jsonl` holding the wall-clock time of event
/// time 0, as nanoseconds since the Unix epoch.
pub const STARTED_FILE: &str = "history-started.txt";

/// Reads a run's [`STARTED_FILE`]; None when absent or malformed (a run
/// kept before it existed). Reads at most 64 bytes: the file holds one
/// integer, and a larger one is not a file this harness wrote.
pub fn read_started_at(path: &Path) -> Option<SystemTime> {
    use std::io::Read;
    let mut text = String::new();
    File::open(path)
        .ok()?
        .take(64)
        .read_to_string(&mut text)
        .ok()?;
    let nanos: u64 = text.trim().parse().ok()?;
    Some(UNIX_EPOCH + Duration::from_nanos(nanos))
}

/// Thread-safe history recorder.
#[derive(Clone)]
pub struct Recorder {
    start: Instant,
    /// The wall clock when `start` was taken: maps event times onto the
    /// timestamps that processes on this machine log (see
    /// [`Recorder::started_at`]).
    started_at: SystemTime,
    // A std mutex: held only to push one event and write one line, never
    // across an await.
    inner: Arc<Mutex<Inner>>,
}

impl Recorder {
    /// A recorder that also appends to `path` (if given).
    ///
    /// # Errors
    /// When the file cannot be created.
    pub fn new(path: Option<&Path>) -> std::io::Result<Recorder> {
        let file = match path {
            Some(p) => Some(BufWriter::new(File::create(p)?)),
            None => None,
        };
        Ok(Recorder {
            start: Instant::now(),
            started_at: SystemTime::now(),
            inner: Arc::new(Mutex::new(Inner {
                events: Vec::new(),
                file,
            })),
        })
    }

    /// The wall-clock time at which event time 0 fell. Only for comparing
    /// event times with the logs of processes on this same machine (the
    /// harness runs them all), never with another machine's clock.
    pub fn started_at(&self) -> SystemTime {
        self.started_at
    }

    /// Writes [`Recorder::started_at`] into `path` (the run's
    /// [`STARTED_FILE`]) so that `openshell-jepsen check` can map a kept
    /// history onto its runtimes' logs later.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn write_started_at(&self, path: &Path) -> std::io::Result<()> {
        let nanos = self
            .started_at
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        std::fs::write(path, format!("{nanos}\n"))
    }

    /// Nanoseconds since the run started.
    pub fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Appends one event and returns it.
    pub fn record(&self, spec: EventSpec) -> Event {
        self.record_with_version(spec, None)
    }

    /// Appends one event carrying the `resource_version` a register op
    /// observed (see [`Event::resource_version`]) and returns it.
    pub fn record_with_version(&self, spec: EventSpec, resource_version: Option<u64>) -> Event {
        let mut inner = match self.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let event = Event {
            index: inner.events.len() as u64,
            kind: spec.kind,
            process: spec.process,
            f: spec.f,
            key: spec.key,
            value: spec.value,
            time: self.now(),
            node: spec.node,
            error: spec.error,
            resource_version,
        };
        if let Some(file) = inner.file.as_mut() {
            if let Ok(line) = serde_json::to_string(&event) {
                let _ = writeln!(file, "{line}");
            }
        }
        inner.events.push(event.clone());
        event
    }

    /// A nemesis event (`type` info).
    pub fn nemesis(&self, f: &str, value: impl Into<String>) -> Event {
        let value: String = value.into();
        tracing::info!(f, value = %value, "nemesis");
        self.record(EventSpec {
            kind: OpType::Info,
            process: Process::Nemesis,
            f: f.to_string(),
            key: None,
            value: serde_json::Value::String(value),
            node: None,
            error: None,
        })
    }

    /// A copy of every event so far; flushes the file.
    pub fn snapshot(&self) -> Vec<Event> {
        let mut inner = match self.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(file) = inner.file.as_mut() {
            let _ = file.flush();
        }
        inner.events.clone()
    }
}

/// Why a history file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A line is not an event (a missing, unknown or mistyped field).
    #[error("{path}:{line}: {source}")]
    Line {
        /// The file.
        path: PathBuf,
        /// The line number, from 1.
        line: usize,
        /// What serde found wrong (names the field).
        #[source]
        source: serde_json::Error,
    },
}

/// Parses one line of a history (`line` numbers it for the error).
///
/// # Errors
/// [`ReadError::Line`] when the line is not an event.
pub fn parse_line(path: &Path, line: usize, text: &str) -> Result<Event, ReadError> {
    serde_json::from_str(text).map_err(|source| ReadError::Line {
        path: path.to_path_buf(),
        line,
        source,
    })
}

/// Reads a `history.jsonl`.
///
/// # Errors
/// When the file cannot be read or a line is not an event (naming the line).
pub fn read_jsonl(path: &Path) -> Result<Vec<Event>, ReadError> {
    let io = |source| ReadError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let mut out = Vec::new();
    for (n, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(io)?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(parse_line(path, n + 1, &line)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The started-at file round-trips; a missing, malformed or oversized
    /// one reads as absent.
    #[test]
    fn started_at_round_trips_and_bad_files_read_as_absent() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join(STARTED_FILE);
        let r = Recorder::new(None).unwrap_or_else(|e| panic!("{e}"));
        r.write_started_at(&path).unwrap_or_else(|e| panic!("{e}"));
        let read = read_started_at(&path).unwrap_or_else(|| panic!("not read back"));
        let drift = read
            .duration_since(r.started_at())
            .or_else(|e| Ok::<_, std::time::SystemTimeError>(e.duration()))
            .unwrap_or_default();
        assert!(drift < Duration::from_micros(1), "{drift:?}");
        assert_eq!(read_started_at(&dir.path().join("absent")), None);
        std::fs::write(&path, "not a number").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read_started_at(&path), None);
        std::fs::write(&path, "1".repeat(100)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read_started_at(&path), None);
    }

    #[test]
    fn events_serialize_as_history_md_says() {
        let e = Event {
            index: 0,
            kind: OpType::Invoke,
            process: Process::Client(3),
            f: "cas".into(),
            key: Some("r7".into()),
            value: serde_json::json!([2, 5]),
            time: 1203344,
            node: None,
            error: None,
            resource_version: None,
        };
        let text = serde_json::to_string(&e).unwrap_or_default();
        assert_eq!(
            text,
            r#"{"index":0,"type":"invoke","process":3,"f":"cas","key":"r7","value":[2,5],"time":1203344}"#
        );
        // An ok register op's resource_version is an extra key, after the
        // others; `value` keeps its shape.
        let w = Event {
            kind: OpType::Ok,
            f: "write".into(),
            value: serde_json::json!(5),
            resource_version: Some(42),
            ..e
        };
        let text = serde_json::to_string(&w).unwrap_or_default();
        assert_eq!(
            text,
            r#"{"index":0,"type":"ok","process":3,"f":"write","key":"r7","value":5,"time":1203344,"resource_version":42}"#
        );
        let back: Event = serde_json::from_str(&text).unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(back, w);
        let n: Event = serde_json::from_str(
            r#"{"index":2,"type":"info","process":"nemesis","f":"start-partition","value":"majority [n1 n2 n3] | [n4 n5]","time":1900000}"#,
        )
        .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(n.process, Process::Nemesis);
        assert_eq!(n.kind, OpType::Info);
    }

    #[test]
    fn a_line_with_a_missing_field_is_rejected_naming_the_line_and_field() {
        let path = Path::new("history.jsonl");
        // No `time`.
        let line = r#"{"index":4,"type":"ok","process":3,"f":"write","key":"r1","value":7}"#;
        let err = parse_line(path, 5, line).err().map(|e| e.to_string());
        let err = err.unwrap_or_else(|| panic!("a line without time was accepted"));
        assert!(err.starts_with("history.jsonl:5: "), "{err}");
        assert!(err.contains("missing field `time`"), "{err}");
        // No `value`: not read as null.
        let line = r#"{"index":4,"type":"ok","process":3,"f":"write","key":"r1","time":9}"#;
        let err = parse_line(path, 6, line).err().map(|e| e.to_string());
        let err = err.unwrap_or_else(|| panic!("a line without value was accepted"));
        assert!(err.contains("missing field `value`"), "{err}");
        // A misspelt field is not ignored.
        let line =
            r#"{"index":4,"type":"ok","process":3,"f":"write","value":7,"time":9,"nod":"n1"}"#;
        let err = parse_line(path, 7, line).err().map(|e| e.to_string());
        let err = err.unwrap_or_else(|| panic!("an unknown field was accepted"));
        assert!(err.contains("unknown field `nod`"), "{err}");
    }

    #[test]
    fn a_value_with_a_missing_field_is_a_typed_error_naming_the_event() {
        let line = r#"{"index":12,"type":"ok","process":3,"f":"grant","key":"sb1","value":{"sandbox":"sb1","generation":1,"credential_epoch":1,"acknowledged":false,"phase":"assigned","member":"s1","incarnation":1,"log_index":40,"grant_bytes":64},"time":9}"#;
        let event = parse_line(Path::new("h"), 13, line).unwrap_or_else(|e| panic!("{e}"));
        let err = crate::ops::decode::<crate::ops::pool::Grant>(&event)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_else(|| panic!("a grant without term was accepted"));
        assert!(err.starts_with("event 12 (Ok grant): "), "{err}");
        assert!(err.contains("missing field `term`"), "{err}");
    }
}
