//! The local file limit as a [`BenchSystem`]: one file, 256-byte records,
//! one `fdatasync` per group-committed batch (`raft_store::bench::FileLimit`,
//! the definition in raft-store/README.md "Benchmark"). The key is ignored:
//! every write appends one record.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use raft_store::bench::{FileAppender, FileLimit};

use super::{run_levels, BenchArgs, BenchSystem, LevelResult, WriteError, VALUE_BYTES};

/// Appends through the file limit's writer thread.
pub struct FileSystem {
    appender: FileAppender,
}

impl BenchSystem for FileSystem {
    type Client = ();

    fn name(&self) -> &'static str {
        "file"
    }

    async fn connect(&self, _client: usize) -> anyhow::Result<()> {
        Ok(())
    }

    async fn write(&self, _client: &mut (), key: usize) -> Result<(), WriteError> {
        let mut record = vec![0xABu8; VALUE_BYTES].into_boxed_slice();
        record[..8].copy_from_slice(&(key as u64).to_le_bytes());
        self.appender
            .append(record)
            .await
            .map_err(|e| WriteError::Failed(e.to_string()))
    }
}

/// Every level against a fresh file in `dir`.
///
/// # Errors
/// When the file cannot be opened or the writer failed.
pub async fn measure(args: &BenchArgs, dir: &Path) -> anyhow::Result<Vec<LevelResult>> {
    let limit = FileLimit::start(&dir.join("records"))?;
    let system = Arc::new(FileSystem {
        appender: limit.appender(),
    });
    let levels = run_levels(system.clone(), args).await;
    drop(system);
    let stats = tokio::task::spawn_blocking(move || limit.finish())
        .await
        .context("file limit join task")??;
    println!(
        "  file: {:.1} records per fdatasync over all levels",
        stats.records as f64 / stats.batches.max(1) as f64
    );
    levels
}
