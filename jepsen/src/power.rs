//! Power loss: every node's data directory is a lazyfs mount
//! (`openshell-lazyfs`, which holds written data in memory until fsync), so
//! the `power-cut` nemesis can drop what a node never synced. Owns the
//! run's power settings ([`PowerOptions`]), the mounts ([`Disks`]) and
//! what the cuts did ([`PowerStats`], in `results.json` under `power`).
//!
//! A cut of node i: `kill -9` its gateway, `kill -9` its lazyfs (the
//! volatile cache goes with the process's memory), detach the dead mount
//! (`umount -l`) and mount a fresh lazyfs on the same backing directory
//! (`<run>/n<i>-disk`). The nemesis restarts the gateway on what is left
//! when it heals ([`crate::nemesis`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use anyhow::Context;
use lazyfs::mount::LazyMount;
use serde_json::json;

/// How many nodes one power cut takes down at once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CutNodes {
    /// One node (the leader half the time).
    #[default]
    One,
    /// A majority at once (the leader and others): the cluster loses
    /// quorum until they restart, and the write acknowledged last lives
    /// only on disks that lost power.
    Majority,
}

impl FromStr for CutNodes {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "1" | "one" => Ok(CutNodes::One),
            "majority" => Ok(CutNodes::Majority),
            other => Err(format!(
                "--power-cut-nodes takes 1 or majority, not {other:?}"
            )),
        }
    }
}

impl CutNodes {
    /// The CLI name.
    pub fn name(self) -> &'static str {
        match self {
            CutNodes::One => "1",
            CutNodes::Majority => "majority",
        }
    }

    /// How many of `n` nodes one cut takes.
    pub fn count(self, n: usize) -> usize {
        match self {
            CutNodes::One => 1.min(n),
            CutNodes::Majority => n / 2 + 1,
        }
    }
}

/// The run's power-loss settings (used when the nemesis has `power-cut`).
#[derive(Clone, Debug, Default)]
pub struct PowerOptions {
    /// The `openshell-lazyfs` binary (default: beside the gateway binary).
    pub lazyfs_bin: Option<PathBuf>,
    /// End the run after this many cuts (the time limit still caps it).
    pub cuts: Option<u64>,
    /// Nodes per cut.
    pub nodes: CutNodes,
}

impl PowerOptions {
    /// The lazyfs binary: the one given, or `openshell-lazyfs` beside the
    /// gateway binary.
    pub fn bin(&self, gateway_bin: &Path) -> PathBuf {
        self.lazyfs_bin
            .clone()
            .unwrap_or_else(|| gateway_bin.with_file_name("openshell-lazyfs"))
    }
}

/// What the power cuts did.
#[derive(Debug, Default)]
pub struct PowerStats {
    /// Cuts (each takes one node or a majority at once).
    pub cuts: AtomicU64,
    /// Node power losses (sum over cuts of the nodes each took).
    pub node_cuts: AtomicU64,
    /// Gateways that exited on their own after a restart on a cut disk.
    pub refused: AtomicU64,
    /// Refused nodes wiped and re-added (learner, then promoted).
    pub rejoined: AtomicU64,
}

impl PowerStats {
    /// For `results.json`.
    pub fn to_json(&self, nodes: CutNodes) -> serde_json::Value {
        json!({
            "cuts": self.cuts.load(Ordering::Relaxed),
            "nodes_per_cut": nodes.name(),
            "node_cuts": self.node_cuts.load(Ordering::Relaxed),
            "refused": self.refused.load(Ordering::Relaxed),
            "rejoined": self.rejoined.load(Ordering::Relaxed),
        })
    }
}

/// Every node's lazyfs mount. Dropping it cuts them all (after the
/// cluster's processes are killed).
pub struct Disks {
    /// Node id -> its mount. A lock because cuts come from the nemesis
    /// task while the cluster is shared (`Arc`).
    mounts: Mutex<BTreeMap<usize, LazyMount>>,
}

impl Disks {
    /// Mounts a lazyfs at every node's data directory (`nodes`: id and
    /// data directory), backed by `<run>/n<i>-disk`, logging to
    /// `<run>/n<i>-lazyfs.log`.
    ///
    /// # Errors
    /// When the binary is missing or a mount does not appear.
    pub fn mount(dir: &Path, nodes: &[(usize, &Path)], bin: &Path) -> anyhow::Result<Disks> {
        if !bin.is_file() {
            anyhow::bail!(
                "lazyfs binary {} not found; build it first: cargo build -p lazyfs --bin openshell-lazyfs",
                bin.display()
            );
        }
        let mut mounts = BTreeMap::new();
        for &(id, data_dir) in nodes {
            let m = LazyMount::start(
                bin,
                &dir.join(format!("n{id}-disk")),
                data_dir,
                &dir.join(format!("n{id}-lazyfs.log")),
            )
            .with_context(|| format!("mounting lazyfs for node {id} ({})", data_dir.display()))?;
            mounts.insert(id, m);
        }
        Ok(Disks {
            mounts: Mutex::new(mounts),
        })
    }

    /// Cuts node `id`'s power (its gateway must be killed first) and mounts
    /// a fresh lazyfs on what its disk kept.
    ///
    /// # Errors
    /// When the mount cannot be detached or mounted again.
    pub fn cut(&self, id: usize) -> anyhow::Result<()> {
        let mut mounts = match self.mounts.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let m = mounts
            .get_mut(&id)
            .with_context(|| format!("no lazyfs mount for n{id}"))?;
        m.cut().with_context(|| format!("cutting n{id}"))?;
        m.remount().with_context(|| format!("remounting n{id}"))?;
        Ok(())
    }
}
