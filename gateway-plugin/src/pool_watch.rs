//! `PoolAdmin.WatchPool`: the pool's whole state, then what changed, as
//! this gateway applies it.
//!
//! Each watcher's task remembers a hash of every member, sandbox and
//! operation view it sent, and after each applied batch re-reads only what
//! may have changed:
//!
//! - **Sandboxes** named by the pool's change journal
//!   (`pool::visibility::ChangeLog`: launches, takeovers, moves, failures,
//!   deletes, collections) at once; a full comparison when the journal
//!   cannot name them (an operation started or ended, a restore) and, for
//!   what the journal does not follow (a supervisor's report of a
//!   sandbox's observed status), periodically: every second, or every
//!   twenty times the last full comparison took, whichever is longer (so a
//!   watcher costs at most about 5 % of a core however large the pool).
//! - **Members and operations** (few) in full, at most every 250 ms; a
//!   member's `ticks_since_heartbeat` alone is no change.
//!
//! Bounded like `ObjectStore.Watch` ([`crate::object_watch`]): at most
//! [`MAX_POOL_WATCHERS`] per gateway, one response buffered per watcher (a
//! slow one gets the changes coalesced: the views as they are when it
//! reads), `UNAVAILABLE` when the gateway stops.

use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pool::visibility::Changes;
use prost::Message;
use proto::pool_admin::{PoolChange, PoolMember, WatchPoolRequest};
use raft_store::RaftNode;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tonic::Status;
use tracing::Instrument;

use crate::convert::to_proto;
use crate::metrics::Metrics;
use crate::state::GatewayState;
use crate::watch_wait::{progress_interval, Counted, Waiter, Wake};

/// Pool watchers one gateway serves at once, at most.
pub const MAX_POOL_WATCHERS: usize = 16;
/// Records in one of the first changes (the whole pool), at most.
pub const CHUNK_RECORDS: usize = 1000;
/// Members and operations are compared at most this often.
const MEMBERS_EVERY: Duration = Duration::from_millis(250);
/// Full comparisons of the sandboxes, at most this often...
const FULL_EVERY: Duration = Duration::from_secs(1);
/// ...and at most this share of the time (1 in 20).
const FULL_COST_FACTOR: u32 = 20;

/// The pool watchers of one gateway.
#[derive(Clone)]
pub struct PoolWatchers {
    node: RaftNode<GatewayState>,
    slots: Arc<Semaphore>,
    stopping: watch::Receiver<bool>,
    metrics: Metrics,
}

type Sender = mpsc::Sender<Result<PoolChange, Status>>;

impl PoolWatchers {
    /// The pool watchers of `node`, counted in `metrics`; they end when
    /// `stopping` turns true.
    pub fn new(
        node: RaftNode<GatewayState>,
        stopping: watch::Receiver<bool>,
        metrics: Metrics,
    ) -> Self {
        PoolWatchers {
            node,
            slots: Arc::new(Semaphore::new(MAX_POOL_WATCHERS)),
            stopping,
            metrics,
        }
    }

    /// Starts a watcher: the stream of its changes.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` naming `progress_interval_ms`,
    /// `RESOURCE_EXHAUSTED` when [`MAX_POOL_WATCHERS`] watch already,
    /// `UNAVAILABLE`/`DEADLINE_EXCEEDED` when a linearizable start cannot
    /// read.
    pub async fn start(
        &self,
        request: WatchPoolRequest,
    ) -> Result<mpsc::Receiver<Result<PoolChange, Status>>, Status> {
        let progress = progress_interval(request.progress_interval_ms)?;
        let Ok(slot) = Arc::clone(&self.slots).try_acquire_owned() else {
            self.metrics
                .watch_refusals
                .with_label_values(&["pool", "limit"])
                .inc();
            return Err(Status::resource_exhausted(format!(
                "this gateway serves {MAX_POOL_WATCHERS} pool watchers already; watch through \
                 another gateway or close a watcher"
            )));
        };
        let whole = |state: &GatewayState, index: u64| Seen::whole(state, index);
        let (seen, first) = if request.stale {
            self.node.read_local(whole)
        } else {
            self.node.read(whole).await.map_err(crate::status::read)?
        };
        let (tx, rx) = mpsc::channel(1);
        let worker = Worker {
            node: self.node.clone(),
            progress,
            stopping: self.stopping.clone(),
            _counted: Counted::new(&self.metrics, "pool"),
            _slot: slot,
        };
        let span = tracing::debug_span!("watch_pool", at = seen.at);
        tokio::spawn(worker.run(tx, first, seen).instrument(span));
        Ok(rx)
    }
}

/// What a watcher was sent: a hash of each view, by id.
struct Seen {
    /// The applied index of the last change sent.
    at: u64,
    members: BTreeMap<String, u64>,
    sandboxes: BTreeMap<String, u64>,
    operations: BTreeMap<String, u64>,
    /// When members and operations are compared next.
    members_due: Instant,
    /// When the sandboxes are compared in full next.
    full_due: Instant,
}

fn hash_of(message: &impl Message) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    message.encode_to_vec().hash(&mut hasher);
    hasher.finish()
}

/// A member's hash, its ticks since the last heartbeat left out.
fn member_hash(member: &PoolMember) -> u64 {
    hash_of(&PoolMember {
        ticks_since_heartbeat: 0,
        ..member.clone()
    })
}

/// Records `hash` for `id`: whether it differs from what was sent.
fn changed(seen: &mut BTreeMap<String, u64>, id: &str, hash: u64) -> bool {
    seen.insert(id.to_string(), hash) != Some(hash)
}

impl Seen {
    /// The whole pool at `index`, in changes of at most [`CHUNK_RECORDS`]
    /// records, and what they show.
    fn whole(state: &GatewayState, index: u64) -> (Seen, Vec<PoolChange>) {
        let now = Instant::now();
        let mut seen = Seen {
            at: index,
            members: BTreeMap::new(),
            sandboxes: BTreeMap::new(),
            operations: BTreeMap::new(),
            members_due: now + MEMBERS_EVERY,
            full_due: now + FULL_EVERY,
        };
        let header = to_proto::pool_status_header(&state.pool, index);
        let empty = || PoolChange {
            status: Some(header.clone()),
            applied_index: index,
            initial: true,
            ..PoolChange::default()
        };
        let mut chunks = vec![empty()];
        let mut records = 0;
        // The chunk the next record goes into.
        let mut next = |chunks: &mut Vec<PoolChange>| -> usize {
            if records == CHUNK_RECORDS {
                chunks.push(empty());
                records = 0;
            }
            records += 1;
            chunks.len() - 1
        };
        for view in state.pool.member_views() {
            let member = to_proto::pool_member(&view);
            seen.members.insert(member.id.clone(), member_hash(&member));
            let at = next(&mut chunks);
            chunks[at].members.push(member);
        }
        for s in state.pool.sandboxes().values() {
            let sandbox = to_proto::sandbox(&state.pool, s);
            seen.sandboxes.insert(sandbox.id.clone(), hash_of(&sandbox));
            let at = next(&mut chunks);
            chunks[at].sandboxes.push(sandbox);
        }
        for o in state.pool.operations().values() {
            let operation = to_proto::operation(o);
            seen.operations
                .insert(operation.id.clone(), hash_of(&operation));
            let at = next(&mut chunks);
            chunks[at].operations.push(operation);
        }
        if let Some(last) = chunks.last_mut() {
            last.initial_complete = true;
        }
        (seen, chunks)
    }

    /// What changed since the last change sent, read from `state` at
    /// `index` (see the module doc for what is compared when).
    fn change(&mut self, state: &GatewayState, index: u64) -> PoolChange {
        let now = Instant::now();
        let pool = &state.pool;
        let mut change = PoolChange {
            status: Some(to_proto::pool_status_header(pool, index)),
            applied_index: index,
            ..PoolChange::default()
        };
        // The sandboxes the journal names, unless a full comparison is
        // due or the journal cannot name them.
        let named = match state.pool_changes.since(self.at) {
            Changes::Since { sandboxes, .. } if now < self.full_due => Some(sandboxes),
            _ => None,
        };
        let full = named.is_none();
        let ids: BTreeSet<String> = named.unwrap_or_else(|| {
            let mut all: BTreeSet<String> = pool.sandboxes().keys().cloned().collect();
            all.extend(self.sandboxes.keys().cloned());
            all
        });
        for id in &ids {
            match pool.sandboxes().get(id) {
                Some(s) => {
                    let sandbox = to_proto::sandbox(pool, s);
                    if changed(&mut self.sandboxes, id, hash_of(&sandbox)) {
                        change.sandboxes.push(sandbox);
                    }
                }
                None => {
                    if self.sandboxes.remove(id).is_some() {
                        change.removed_sandboxes.push(id.clone());
                    }
                }
            }
        }
        if full {
            // The next full comparison after twenty times this one's cost.
            let cost = now.elapsed() * FULL_COST_FACTOR;
            self.full_due = Instant::now() + cost.max(FULL_EVERY);
        }
        if full || now >= self.members_due {
            self.members_due = now + MEMBERS_EVERY;
            self.compare_members_and_operations(pool, &mut change);
        }
        self.at = index;
        change
    }

    fn compare_members_and_operations(&mut self, pool: &pool::PoolState, change: &mut PoolChange) {
        let mut present = BTreeSet::new();
        for view in pool.member_views() {
            let member = to_proto::pool_member(&view);
            present.insert(member.id.clone());
            if changed(&mut self.members, &member.id, member_hash(&member)) {
                change.members.push(member);
            }
        }
        self.members.retain(|id, _| {
            let kept = present.contains(id);
            if !kept {
                change.removed_members.push(id.clone());
            }
            kept
        });
        present.clear();
        for o in pool.operations().values() {
            let operation = to_proto::operation(o);
            present.insert(operation.id.clone());
            if changed(&mut self.operations, &operation.id, hash_of(&operation)) {
                change.operations.push(operation);
            }
        }
        self.operations.retain(|id, _| {
            let kept = present.contains(id);
            if !kept {
                change.removed_operations.push(id.clone());
            }
            kept
        });
    }
}

fn has_records(change: &PoolChange) -> bool {
    !(change.members.is_empty()
        && change.removed_members.is_empty()
        && change.sandboxes.is_empty()
        && change.removed_sandboxes.is_empty()
        && change.operations.is_empty()
        && change.removed_operations.is_empty())
}

/// One pool watcher's task.
struct Worker {
    node: RaftNode<GatewayState>,
    progress: Duration,
    stopping: watch::Receiver<bool>,
    /// Counted while the watcher runs.
    _counted: Counted,
    /// Held while the watcher runs.
    _slot: OwnedSemaphorePermit,
}

impl Worker {
    async fn run(self, tx: Sender, first: Vec<PoolChange>, mut seen: Seen) {
        let mut waiter = Waiter::new(&self.node, self.stopping.clone());
        for change in first {
            if tx.send(Ok(change)).await.is_err() {
                return;
            }
        }
        loop {
            let deadline = tokio::time::Instant::now() + self.progress;
            let change = loop {
                match waiter.wait(&tx, deadline).await {
                    Wake::Progress => break self.read(&mut seen),
                    Wake::Applied => {
                        let change = self.read(&mut seen);
                        if has_records(&change) {
                            break change;
                        }
                    }
                    Wake::Closed | Wake::Ended => return,
                }
            };
            // Waits for the watcher to take the previous change; meanwhile
            // nothing is read, so later changes coalesce.
            if tx.send(Ok(change)).await.is_err() {
                return;
            }
        }
    }

    fn read(&self, seen: &mut Seen) -> PoolChange {
        self.node
            .read_local(|state, index| seen.change(state, index))
    }
}
