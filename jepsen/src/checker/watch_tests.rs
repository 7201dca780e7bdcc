//! The `watch-events` checker over synthetic histories and watch records:
//! each way a watch can betray the writes is reported invalid, an
//! undecidable watcher unknown, a faithful one valid.

use serde_json::{json, Value};

use super::*;
use crate::checker::watch_log::{Delivered, WatchEnd, WatchScope};
use crate::checker::Validity;

/// A history under construction: each op is an invocation and its
/// completion.
#[derive(Default)]
struct History(Vec<Event>);

impl History {
    fn push(
        &mut self,
        kind: OpType,
        process: u64,
        f: &str,
        key: &str,
        value: Value,
        rv: Option<u64>,
    ) {
        let index = self.0.len() as u64;
        self.0.push(Event {
            index,
            kind,
            process: Process::Client(process),
            f: f.into(),
            key: Some(key.into()),
            value,
            time: index * 1000,
            node: Some("n1".into()),
            error: None,
            resource_version: rv,
        });
    }

    /// `write value` of `key` by `process`, ending `kind` (`ok` at `rv`).
    fn write(mut self, process: u64, key: &str, value: i64, kind: OpType, rv: u64) -> Self {
        self.push(OpType::Invoke, process, "write", key, json!(value), None);
        let rv = (kind == OpType::Ok).then_some(rv);
        self.push(kind, process, "write", key, json!(value), rv);
        self
    }

    /// `cas [expected new]` of `key`, acknowledged at `rv`.
    fn cas(mut self, process: u64, key: &str, expected: i64, new: i64, rv: u64) -> Self {
        let value = json!([expected, new]);
        self.push(OpType::Invoke, process, "cas", key, value.clone(), None);
        self.push(OpType::Ok, process, "cas", key, value, Some(rv));
        self
    }

    /// An `ok` read (not a write: the checker ignores it).
    fn read(mut self, process: u64, key: &str, value: i64, rv: u64) -> Self {
        self.push(OpType::Invoke, process, "read", key, Value::Null, None);
        self.push(OpType::Ok, process, "read", key, json!(value), Some(rv));
        self
    }
}

fn put(revision: u64, key: &str, value: i64) -> Delivered {
    Delivered {
        revision,
        kind: EventKind::Put,
        object_type: OBJECT_TYPE.into(),
        key: key.into(),
        payload: value.to_string(),
        resource_version: revision,
        stream: 1,
    }
}

fn scope(name: &str, id: &str) -> WatchScope {
    WatchScope {
        name: name.into(),
        object_type: OBJECT_TYPE.into(),
        id: id.into(),
        id_prefix: String::new(),
    }
}

/// A watcher of `scope` from revision 1 that ended `reason` current
/// through revision 100, after one resume.
fn watcher(scope: WatchScope, events: Vec<Delivered>, reason: EndReason) -> WatchLog {
    WatchLog {
        scope,
        start: Some(1),
        events,
        end: Some(WatchEnd {
            reason,
            through: 100,
            target: Some(12),
            streams_opened: 2,
            errors: 0,
            detail: if reason == EndReason::Compacted {
                "compacted: revision 40 is compacted (the oldest revision held is 60)".into()
            } else {
                String::new()
            },
        }),
    }
}

/// Acknowledged writes of r0 at revisions 10, 11 (a cas) and 12 and of r1
/// at revision 13, with a read in between.
fn history() -> Vec<Event> {
    History::default()
        .write(1, "r0", 1, OpType::Ok, 10)
        .cas(2, "r0", 1, 2, 11)
        .read(3, "r0", 2, 11)
        .write(1, "r0", 3, OpType::Ok, 12)
        .write(2, "r1", 4, OpType::Ok, 13)
        .0
}

/// What a faithful watch of the whole type delivers for [`history`].
fn faithful() -> Vec<Delivered> {
    vec![
        put(10, "r0", 1),
        put(11, "r0", 2),
        put(12, "r0", 3),
        put(13, "r1", 4),
    ]
}

fn check(history: &[Event], logs: Vec<WatchLog>) -> CheckResult {
    WatchEvents { logs }.check(history, &FinalState::default())
}

fn assert_invalid(result: &CheckResult, what: &str) {
    assert_eq!(result.valid, Validity::Invalid, "{}", result.summary);
    assert!(
        result.details.to_string().contains(what),
        "no violation saying {what:?}: {}",
        result.details
    );
}

/// Given four acknowledged writes, when a type watcher delivered each once
/// in revision order and a key watcher of r0 its three, then the checker
/// is valid and counts 7 events, 7 acknowledged writes checked, 2 resumes.
#[test]
fn a_faithful_watch_is_valid() {
    let key = faithful().into_iter().filter(|e| e.key == "r0").collect();
    let result = check(
        &history(),
        vec![
            watcher(scope("type", ""), faithful(), EndReason::Current),
            watcher(scope("key-r0", "r0"), key, EndReason::Current),
        ],
    );
    assert_eq!(result.valid, Validity::Valid, "{}", result.summary);
    assert_eq!(
        result.summary,
        "2 watchers: 7 events, 7 acknowledged writes checked, 2 resumes, 0 violations"
    );
}

/// Given the same writes, when the watcher never delivered revision 11,
/// then the checker is invalid and names the lost write.
#[test]
fn a_lost_event_is_invalid() {
    let mut events = faithful();
    events.remove(1);
    let result = check(
        &history(),
        vec![watcher(scope("type", ""), events, EndReason::Current)],
    );
    assert_invalid(
        &result,
        "r0=2 acknowledged at revision 11 was never delivered",
    );
    assert!(!result.offending.is_empty(), "the lost write's event");
}

/// Given the same writes, when the watcher delivered revision 11 twice (a
/// resume that sent it again), then the checker is invalid.
#[test]
fn a_repeated_event_is_invalid() {
    let mut events = faithful();
    events.insert(2, put(11, "r0", 2));
    let result = check(
        &history(),
        vec![watcher(scope("type", ""), events, EndReason::Current)],
    );
    assert_invalid(&result, "revision 11 delivered twice");
}

/// Given the same writes, when the watcher delivered revision 12 before
/// 11, then the checker is invalid.
#[test]
fn an_out_of_order_event_is_invalid() {
    let mut events = faithful();
    events.swap(1, 2);
    let result = check(
        &history(),
        vec![watcher(scope("type", ""), events, EndReason::Current)],
    );
    assert_invalid(
        &result,
        "revision 11 delivered after revision 12 (out of order)",
    );
}

/// Given the same writes, when the watcher delivered revision 12 with
/// another value than the write acknowledged there, then the checker is
/// invalid.
#[test]
fn a_wrong_value_is_invalid() {
    let mut events = faithful();
    events[2] = put(12, "r0", 2);
    let result = check(
        &history(),
        vec![watcher(scope("type", ""), events, EndReason::Current)],
    );
    assert_invalid(
        &result,
        "revision 12: delivered r0=2, but revision 12 was acknowledged to r0=3",
    );
}

/// Given the same writes, when the watcher delivered a value no op wrote,
/// a failed write's value, a put whose resource_version is not its
/// revision, a delete, or an event of a register a key watcher does not
/// cover, then each is invalid.
#[test]
fn events_no_write_explains_are_invalid() {
    let with_failed = History(history()).write(4, "r0", 9, OpType::Fail, 0).0;
    let cases: Vec<(Vec<Delivered>, WatchScope, &str)> = vec![
        (
            vec![put(20, "r0", 77)],
            scope("type", ""),
            "r0=77 was never written",
        ),
        (
            vec![put(20, "r0", 9)],
            scope("type", ""),
            "written by an op that certainly failed",
        ),
        (
            vec![Delivered {
                resource_version: 19,
                ..put(20, "r0", 9)
            }],
            scope("type", ""),
            "carries resource_version 19",
        ),
        (
            vec![Delivered {
                kind: EventKind::Delete,
                payload: String::new(),
                ..put(20, "r0", 0)
            }],
            scope("type", ""),
            "a Delete event of r0",
        ),
        (
            vec![put(13, "r1", 4)],
            scope("key-r0", "r0"),
            "is not covered by the watch",
        ),
    ];
    for (extra, scope, what) in cases {
        let mut events: Vec<Delivered> = faithful()
            .into_iter()
            .filter(|e| scope.covers(&e.object_type, &e.key))
            .collect();
        events.extend(extra);
        events.sort_by_key(|e| e.revision);
        let result = check(
            &with_failed,
            vec![watcher(scope, events, EndReason::Current)],
        );
        assert_invalid(&result, what);
    }
}

/// Given a write of unknown outcome (info), when it was delivered or not,
/// then the checker is valid either way: it may or may not have applied.
#[test]
fn an_info_write_may_or_may_not_be_delivered() {
    let history = History(history()).write(5, "r0", 5, OpType::Info, 0).0;
    let mut applied = faithful();
    applied.push(put(14, "r0", 5));
    for events in [faithful(), applied] {
        let result = check(
            &history,
            vec![watcher(scope("type", ""), events, EndReason::Current)],
        );
        assert_eq!(result.valid, Validity::Valid, "{}", result.summary);
    }
}

/// Given a watcher that ended with a compacted revision, when nothing it
/// delivered is wrong, then the checker is unknown and says why.
#[test]
fn a_compacted_watcher_is_unknown() {
    let mut log = watcher(scope("type", ""), faithful(), EndReason::Compacted);
    if let Some(end) = log.end.as_mut() {
        end.through = 11;
    }
    let result = check(&history(), vec![log]);
    assert_eq!(result.valid, Validity::Unknown, "{}", result.summary);
    assert!(
        result
            .summary
            .contains("type: it ended with a compacted revision"),
        "{}",
        result.summary
    );
    assert!(
        result
            .summary
            .contains("2 acknowledged writes after it unchecked"),
        "{}",
        result.summary
    );
}

/// Given a watcher that did not catch up after the final heal, or one
/// whose record has no end, then the checker is unknown; but a violation
/// it did see still makes it invalid.
#[test]
fn an_unfinished_watcher_is_unknown_unless_it_erred() {
    let behind = watcher(scope("type", ""), faithful(), EndReason::Behind);
    let result = check(&history(), vec![behind]);
    assert_eq!(result.valid, Validity::Unknown, "{}", result.summary);
    assert!(
        result.summary.contains("did not catch up"),
        "{}",
        result.summary
    );

    let cut = WatchLog {
        end: None,
        ..watcher(scope("type", ""), faithful(), EndReason::Current)
    };
    let result = check(&history(), vec![cut]);
    assert_eq!(result.valid, Validity::Unknown, "{}", result.summary);

    let mut repeated = faithful();
    repeated.push(put(13, "r1", 4));
    let result = check(
        &history(),
        vec![watcher(scope("type", ""), repeated, EndReason::Behind)],
    );
    assert_eq!(result.valid, Validity::Invalid, "{}", result.summary);
}

/// Given writes acknowledged before a watcher's first revision, then they
/// are not held against it.
#[test]
fn writes_before_the_watch_started_are_not_checked() {
    let mut log = watcher(
        scope("type", ""),
        faithful().split_off(2),
        EndReason::Current,
    );
    log.start = Some(12);
    let result = check(&history(), vec![log]);
    assert_eq!(result.valid, Validity::Valid, "{}", result.summary);
    assert!(
        result.summary.contains("2 acknowledged writes checked"),
        "{}",
        result.summary
    );
}
