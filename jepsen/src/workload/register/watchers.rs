//! The register workload's watchers: `ObjectStore.Watch` through
//! `openshell_client`'s [`Watcher`] (TLS and the admin token, every
//! gateway as an endpoint, resuming on another gateway from the last
//! revision it saw), recording every event into `<run>/watch-<n>.jsonl`
//! ([`crate::checker::watch_log`]) for the `watch-events` checker
//! ([`crate::checker::watch`]).
//!
//! They start before the clients, each from "now" (`from_revision` 0, a
//! linearizable start), and run through the whole run, nemeses included.
//! After the final heal each is told the highest acknowledged write
//! revision and stops once it is current past it, or when the bounded
//! wait ([`CATCH_UP`]) ends. An error of `Watcher::next` other than a
//! compacted revision or a refusal is counted and `next` called again: the
//! same watcher resumes from the revision it stopped at.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use openshell_client::{Client, Error as ClientError, Role, WatchEventKind, WatchSpec, Watcher};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::checker::watch_log::{
    Delivered, EndReason, EventKind, Line, WatchEnd, WatchLog, WatchScope,
};
use crate::cluster::{Cluster, OBJECT_TYPE};

/// How long a watcher may take to open at the start of the run.
pub const OPEN_WITHIN: Duration = Duration::from_secs(30);
/// How long the watchers get after the final heal to be current past the
/// highest acknowledged write.
pub const CATCH_UP: Duration = Duration::from_secs(30);
/// Progress interval asked of the gateways: a quiet stream hears its
/// revision this often, and one silent for 2 × this + 5 s is resumed
/// elsewhere (a paused gateway).
const PROGRESS: Duration = Duration::from_millis(500);
/// Pause before calling `next` again after an error.
const RETRY_PAUSE: Duration = Duration::from_millis(250);

/// The register workload's watchers: the whole register type, register
/// `r0` alone (the first key every run uses), and the registers whose id
/// starts with `r1` (`r1`, `r10`..`r19`, ...).
pub fn scopes() -> Vec<WatchScope> {
    let of = |name: &str, id: &str, id_prefix: &str| WatchScope {
        name: name.into(),
        object_type: OBJECT_TYPE.into(),
        id: id.into(),
        id_prefix: id_prefix.into(),
    };
    vec![
        of("type", "", ""),
        of("key-r0", "r0", ""),
        of("prefix-r1", "", "r1"),
    ]
}

/// What the watchers are told.
#[derive(Clone, Copy, Debug, Default)]
struct Stop {
    /// Stop once current past this revision.
    target: Option<u64>,
    /// Stop now.
    now: bool,
}

/// The running watchers.
pub struct Watchers {
    scopes: Vec<WatchScope>,
    stop: watch::Sender<Stop>,
    tasks: Vec<JoinHandle<WatchLog>>,
}

/// The harness's client of every gateway, as the register clients reach
/// them (the run's CA and admin token; plaintext in `--insecure` runs),
/// trying gateway `first` (0-based, modulo their number) first: the
/// watchers start on different gateways, so the nemeses cut, kill and
/// pause the gateways serving them and they resume elsewhere.
fn client(cluster: &Cluster, first: usize) -> Result<Client, ClientError> {
    let n = cluster.nodes.len();
    let builder = Client::builder()
        .endpoints(
            cluster
                .nodes
                .iter()
                .cycle()
                .skip(first % n.max(1))
                .take(n)
                .map(|node| node.addr.clone()),
        )
        .role(Role::Jepsen)
        .connect_timeout(Duration::from_secs(1))
        .attempt_timeout(Duration::from_secs(3))
        .deadline(Duration::from_secs(10));
    match &cluster.credentials {
        Some(c) => builder.tls(c.client_tls()).token(c.admin_token()),
        None => builder.insecure(),
    }
    .build()
}

impl Watchers {
    /// Starts one watcher per scope, each recording into
    /// `<cluster.dir>/watch-<n>.jsonl`, and waits until each is open (or
    /// gave up after [`OPEN_WITHIN`]).
    pub async fn start(cluster: &Cluster, scopes: Vec<WatchScope>) -> Watchers {
        let (stop, _) = watch::channel(Stop::default());
        let mut tasks = Vec::new();
        let mut ready = Vec::new();
        for (n, scope) in scopes.iter().enumerate() {
            let (tx, rx) = oneshot::channel();
            let sink = Sink::create(&cluster.dir.join(format!("watch-{}.jsonl", n + 1)));
            let record = Record::new(scope.clone(), sink);
            let task = match client(cluster, n) {
                Ok(client) => tokio::spawn(watch_one(client, record, stop.subscribe(), tx)),
                Err(e) => {
                    let detail = format!("no client: {e}");
                    tokio::spawn(async move { record.failed(detail) })
                }
            };
            tasks.push(task);
            ready.push(rx);
        }
        for rx in ready {
            // A watcher that could not open says so in its record.
            let _ = tokio::time::timeout(OPEN_WITHIN + Duration::from_secs(5), rx).await;
        }
        Watchers {
            scopes,
            stop,
            tasks,
        }
    }

    /// After the final heal: each watcher reads until it is current past
    /// `target` (the highest acknowledged write revision), at most
    /// `within`; returns every watcher's record.
    pub async fn finish(mut self, target: u64, within: Duration) -> Vec<WatchLog> {
        self.stop.send_modify(|s| s.target = Some(target));
        let deadline = Instant::now() + within;
        let mut logs = Vec::new();
        let tasks = std::mem::take(&mut self.tasks);
        for (scope, mut task) in self.scopes.clone().into_iter().zip(tasks) {
            let done = match tokio::time::timeout_at(deadline, &mut task).await {
                Ok(done) => done,
                Err(_) => {
                    self.stop.send_modify(|s| s.now = true);
                    task.await
                }
            };
            logs.push(done.unwrap_or_else(|e| WatchLog {
                scope,
                end: Some(WatchEnd {
                    reason: EndReason::Failed,
                    through: 0,
                    target: Some(target),
                    streams_opened: 0,
                    errors: 0,
                    detail: format!("the watcher's task ended: {e}"),
                }),
                ..WatchLog::default()
            }));
        }
        logs
    }
}

impl Drop for Watchers {
    fn drop(&mut self) {
        self.stop.send_modify(|s| s.now = true);
    }
}

/// `watch-<n>.jsonl`, written as the events arrive (a run cut short
/// leaves what was seen). A file that cannot be written is said once; the
/// record in memory goes on.
struct Sink {
    path: PathBuf,
    file: Option<BufWriter<File>>,
}

impl Sink {
    fn create(path: &Path) -> Sink {
        let file = File::create(path)
            .map_err(|e| tracing::warn!(path = %path.display(), error = %e, "cannot create the watch log"))
            .ok()
            .map(BufWriter::new);
        Sink {
            path: path.to_path_buf(),
            file,
        }
    }

    fn write(&mut self, line: &Line) {
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let written = serde_json::to_string(line)
            .map_err(std::io::Error::other)
            .and_then(|text| writeln!(file, "{text}"));
        if let Err(e) = written {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot write the watch log; keeping it in memory only");
            self.file = None;
        }
    }

    fn flush(&mut self) {
        if let Some(Err(e)) = self.file.as_mut().map(BufWriter::flush) {
            tracing::warn!(path = %self.path.display(), error = %e, "cannot write the watch log; keeping it in memory only");
            self.file = None;
        }
    }
}

/// One watcher's record, in memory and in its file.
struct Record {
    log: WatchLog,
    sink: Sink,
}

impl Record {
    fn new(scope: WatchScope, mut sink: Sink) -> Record {
        sink.write(&Line::Watch(scope.clone()));
        sink.flush();
        Record {
            log: WatchLog {
                scope,
                ..WatchLog::default()
            },
            sink,
        }
    }

    fn start(&mut self, from: u64) {
        self.log.start = Some(from);
        self.sink.write(&Line::Start { from });
    }

    fn events(&mut self, response: &openshell_client::WatchResponse, stream: u32) {
        for e in &response.events {
            let object = e.object.clone().unwrap_or_default();
            let delivered = Delivered {
                revision: e.revision,
                kind: match e.kind() {
                    WatchEventKind::Put => EventKind::Put,
                    WatchEventKind::Delete => EventKind::Delete,
                    WatchEventKind::Unspecified => EventKind::Unspecified,
                },
                object_type: object.r#type,
                key: object.id,
                payload: String::from_utf8_lossy(&object.payload).into_owned(),
                resource_version: object.resource_version,
                stream,
            };
            self.sink.write(&Line::Event(delivered.clone()));
            self.log.events.push(delivered);
        }
        self.sink.flush();
    }

    fn end(mut self, end: WatchEnd) -> WatchLog {
        tracing::info!(watcher = %self.log.scope.name, reason = ?end.reason, through = end.through,
            events = self.log.events.len(), streams = end.streams_opened, detail = %end.detail, "watcher stopped");
        self.sink.write(&Line::End(end.clone()));
        self.sink.flush();
        self.log.end = Some(end);
        self.log
    }

    /// The record of a watcher that never opened.
    fn failed(self, detail: String) -> WatchLog {
        self.end(WatchEnd {
            reason: EndReason::Failed,
            through: 0,
            target: None,
            streams_opened: 0,
            errors: 0,
            detail,
        })
    }
}

/// Opens the watch from now, retrying until [`OPEN_WITHIN`] passes.
async fn open(client: &Client, scope: &WatchScope) -> Result<Watcher, ClientError> {
    let spec = WatchSpec {
        object_type: scope.object_type.clone(),
        id: scope.id.clone(),
        id_prefix: scope.id_prefix.clone(),
        from_revision: 0,
        progress_interval: PROGRESS,
    };
    let deadline = Instant::now() + OPEN_WITHIN;
    loop {
        match client.watch(spec.clone()).await {
            Ok(watcher) => return Ok(watcher),
            Err(e) if Instant::now() + RETRY_PAUSE >= deadline => return Err(e),
            Err(e) => {
                tracing::warn!(watcher = %scope.name, error = %e, "watch not opened yet; retrying");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    }
}

/// One watcher, from opening to its end.
async fn watch_one(
    client: Client,
    mut record: Record,
    mut stop: watch::Receiver<Stop>,
    ready: oneshot::Sender<()>,
) -> WatchLog {
    let mut watcher = match open(&client, &record.log.scope).await {
        Ok(w) => w,
        Err(e) => {
            let _ = ready.send(());
            return record.failed(format!("the watch did not open: {e}"));
        }
    };
    let mut errors = 0u32;
    // The first response (read by `Client::watch`): every covered event
    // after the store revision at the start was or will be delivered; its
    // events and its revision bound that revision from above.
    match watcher.next().await {
        Ok(first) => {
            let from = first
                .events
                .first()
                .map_or(first.revision.saturating_add(1), |e| {
                    e.revision.min(first.revision.saturating_add(1))
                });
            record.start(from);
            record.events(&first, watcher.streams_opened());
        }
        Err(e) => {
            let _ = ready.send(());
            return record.failed(format!("the watch's first response: {e}"));
        }
    }
    let _ = ready.send(());
    let (reason, detail) = loop {
        let now = *stop.borrow_and_update();
        if now.target.is_some_and(|t| watcher.next_revision() > t) {
            break (EndReason::Current, String::new());
        }
        if now.now {
            break (EndReason::Behind, String::new());
        }
        let received = tokio::select! {
            changed = stop.changed() => {
                if changed.is_err() {
                    break (EndReason::Behind, "the run ended".into());
                }
                continue;
            }
            received = watcher.next() => received,
        };
        match received {
            Ok(response) => record.events(&response, watcher.streams_opened()),
            Err(e @ ClientError::Compacted { .. }) => break (EndReason::Compacted, e.to_string()),
            Err(e @ (ClientError::Unauthorized { .. } | ClientError::InvalidArgument(_))) => {
                break (EndReason::Failed, e.to_string())
            }
            Err(e) => {
                errors += 1;
                tracing::warn!(watcher = %record.log.scope.name, error = %e, "watch interrupted; resuming");
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    };
    let target = stop.borrow().target;
    record.end(WatchEnd {
        reason,
        through: watcher.next_revision().saturating_sub(1),
        target,
        streams_opened: watcher.streams_opened(),
        errors,
        detail,
    })
}
