//! The two in-process references of the benchmarks (behind the `bench`
//! feature; never in a gateway build): the local file limit and an
//! in-process three-node raft group. `benches/commit_latency.rs` and
//! `openshell-bench compare` both drive these, so both measure the same
//! thing.
//!
//! - [`FileLimit`]: one plain file opened for append, 256-byte records
//!   ([`RECORD_BYTES`]); one dedicated writer thread takes every record
//!   queued at that moment, writes them with one `write_all`, calls
//!   `fdatasync` (`File::sync_data`) once, then completes every producer of
//!   that batch (group commit). The file is not preallocated, so it grows
//!   with every batch like a log would.
//! - [`InProcCluster`]: three [`RaftNode<Objects>`] in this process on
//!   loopback gRPC, default [`NodeConfig`]; writers call
//!   [`RaftNode::write`] on the leader.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use crate::objects::Objects;
use crate::{NodeConfig, RaftNode};

/// Bytes of every record of the file limit (and of every object payload the
/// benchmarks write).
pub const RECORD_BYTES: usize = 256;

/// What went wrong in a benchmark reference.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// An I/O call of the file limit failed (the file's state is unknown).
    #[error("file limit: {0}")]
    File(String),
    /// The file limit's writer thread has stopped (after an earlier error).
    #[error("file limit: the writer thread has stopped")]
    WriterGone,
    /// The in-process raft group could not start.
    #[error("in-process raft: {0}")]
    Raft(String),
}

/// One record queued for the writer thread, with the producer to complete
/// once it is durable.
struct FileRecord {
    record: Box<[u8]>,
    done: tokio::sync::oneshot::Sender<Result<(), String>>,
}

/// What the file limit's writer thread did over its life.
#[derive(Clone, Copy, Debug, Default)]
pub struct FileWriterStats {
    /// `fdatasync` calls (one per batch).
    pub batches: u64,
    /// Records written.
    pub records: u64,
}

/// The file limit: a writer thread appending group-committed batches to one
/// file. Dropping every clone of the handle (then [`FileLimit::finish`])
/// ends the thread.
pub struct FileLimit {
    path: PathBuf,
    queue: mpsc::Sender<FileRecord>,
    thread: std::thread::JoinHandle<Result<FileWriterStats, String>>,
}

/// A cheap handle producers append through.
#[derive(Clone)]
pub struct FileAppender {
    queue: mpsc::Sender<FileRecord>,
}

impl FileLimit {
    /// Opens `path` for append (created if missing) and starts the writer.
    ///
    /// # Errors
    /// When the file cannot be opened or the thread cannot start.
    pub fn start(path: &Path) -> Result<FileLimit, BenchError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| BenchError::File(format!("open {} for append: {e}", path.display())))?;
        let (queue, rx) = mpsc::channel::<FileRecord>();
        let thread = {
            let path = path.to_path_buf();
            std::thread::Builder::new()
                .name("file-limit-writer".into())
                .spawn(move || file_writer(&path, file, rx))
                .map_err(|e| BenchError::File(format!("spawn the writer thread: {e}")))?
        };
        Ok(FileLimit {
            path: path.to_path_buf(),
            queue,
            thread,
        })
    }

    /// A handle producers append through.
    pub fn appender(&self) -> FileAppender {
        FileAppender {
            queue: self.queue.clone(),
        }
    }

    /// Ends the writer (once every [`FileAppender`] is dropped too) and
    /// checks that the file holds exactly the records written.
    ///
    /// # Errors
    /// When the writer failed, or the file's length disagrees.
    pub fn finish(self) -> Result<FileWriterStats, BenchError> {
        drop(self.queue);
        let stats = self
            .thread
            .join()
            .map_err(|_| BenchError::File("the writer thread panicked".into()))?
            .map_err(BenchError::File)?;
        let len = std::fs::metadata(&self.path)
            .map_err(|e| BenchError::File(format!("stat {}: {e}", self.path.display())))?
            .len();
        if len != stats.records * RECORD_BYTES as u64 {
            return Err(BenchError::File(format!(
                "{} holds {len} bytes, expected {} records of {RECORD_BYTES} bytes",
                self.path.display(),
                stats.records
            )));
        }
        Ok(stats)
    }
}

impl FileAppender {
    /// Appends `record` and waits until its batch is `fdatasync`ed.
    ///
    /// # Errors
    /// When the batch's write or sync failed, or the writer is gone.
    pub async fn append(&self, record: Box<[u8]>) -> Result<(), BenchError> {
        let (done, wait) = tokio::sync::oneshot::channel();
        self.queue
            .send(FileRecord { record, done })
            .map_err(|_| BenchError::WriterGone)?;
        match wait.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(BenchError::File(e)),
            Err(_) => Err(BenchError::WriterGone),
        }
    }
}

/// The writer thread: takes every record queued at that moment, writes them
/// with one `write_all`, `fdatasync`s once, then completes every producer of
/// the batch. Ends when every producer is gone, or after a failed write or
/// sync (every producer of that batch gets the error, later producers find
/// the thread gone).
fn file_writer(
    path: &Path,
    mut file: File,
    queue: mpsc::Receiver<FileRecord>,
) -> Result<FileWriterStats, String> {
    let mut stats = FileWriterStats::default();
    let mut buf: Vec<u8> = Vec::with_capacity(64 * RECORD_BYTES);
    let mut batch: Vec<FileRecord> = Vec::with_capacity(64);
    while let Ok(first) = queue.recv() {
        batch.push(first);
        batch.extend(queue.try_iter());
        buf.clear();
        for r in &batch {
            buf.extend_from_slice(&r.record);
        }
        let result = file
            .write_all(&buf)
            .map_err(|e| {
                format!(
                    "write_all of {} bytes to {} failed: {e}",
                    buf.len(),
                    path.display()
                )
            })
            .and_then(|()| {
                file.sync_data()
                    .map_err(|e| format!("fdatasync of {} failed: {e}", path.display()))
            });
        stats.batches += 1;
        stats.records += batch.len() as u64;
        for r in batch.drain(..) {
            // A producer that stopped waiting is not an error of the file.
            let _ = r.done.send(result.clone());
        }
        result?;
    }
    Ok(stats)
}

/// Three raft nodes in this process on loopback gRPC.
pub struct InProcCluster {
    nodes: Vec<RaftNode<Objects>>,
    servers: Vec<tokio::task::JoinHandle<()>>,
}

impl InProcCluster {
    /// Starts three nodes with data directories under `dir` and waits (up
    /// to 10 s) until each knows the leader.
    ///
    /// # Errors
    /// When a node cannot bind, start or initialize, or no leader emerges.
    pub async fn start(dir: &Path) -> Result<InProcCluster, BenchError> {
        let raft = |what: &str, e: &dyn std::fmt::Display| BenchError::Raft(format!("{what}: {e}"));
        let mut listeners = Vec::new();
        for _ in 0..3 {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .map_err(|e| raft("bind loopback", &e))?;
            let addr = l.local_addr().map_err(|e| raft("local addr", &e))?;
            listeners.push((l, addr.to_string()));
        }
        let members: Vec<(u64, String)> = listeners
            .iter()
            .enumerate()
            .map(|(i, (_, a))| (i as u64 + 1, a.clone()))
            .collect();
        let mut cluster = InProcCluster {
            nodes: Vec::new(),
            servers: Vec::new(),
        };
        for (i, (listener, addr)) in listeners.into_iter().enumerate() {
            let data = dir.join(format!("inproc-{}", i + 1));
            let config = NodeConfig::new(i as u64 + 1, &addr, data, "bench");
            let node: RaftNode<Objects> = RaftNode::start(config)
                .await
                .map_err(|e| raft("start node", &e))?;
            let incoming =
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
            let service = node.transport_service();
            cluster.servers.push(tokio::spawn(async move {
                if let Err(e) = tonic::transport::Server::builder()
                    .add_service(service)
                    .serve_with_incoming(incoming)
                    .await
                {
                    tracing::warn!(error = %e, "in-process raft server failed");
                }
            }));
            cluster.nodes.push(node);
        }
        cluster.nodes[0]
            .initialize(members)
            .await
            .map_err(|e| raft("initialize", &e))?;
        for node in &cluster.nodes {
            node.raft()
                .wait(Some(Duration::from_secs(10)))
                .metrics(|m| m.current_leader.is_some(), "leader known")
                .await
                .map_err(|e| raft("no leader within 10 s", &e))?;
        }
        Ok(cluster)
    }

    /// The current leader, if this process's nodes know one.
    pub fn leader(&self) -> Option<RaftNode<Objects>> {
        self.nodes.iter().find(|n| n.is_leader()).cloned()
    }

    /// Shuts every node down and stops the servers.
    pub async fn stop(self) {
        for n in &self.nodes {
            n.shutdown().await;
        }
        for s in &self.servers {
            s.abort();
        }
    }
}
