//! The `power-cut` nemesis: kills one node's or a majority's gateway,
//! cuts their lazyfs disks ([`crate::power::Disks::cut`]) and, once healed
//! and restarted, checks that every cut node starts. A node that refuses
//! (its gateway exits) is recovered as the runbook says for a data
//! directory that cannot be used: removed from the membership, wiped,
//! re-added as a learner and promoted; each refusal and rejoin is counted.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use proto::cluster::RemoveRequest;
use rand::seq::SliceRandom;

use super::{fmt_group, Nemesis};

/// How long a restarted node has to answer before it counts as slow (it
/// is not counted as refused unless its process exits).
const START_WAIT: Duration = Duration::from_secs(15);

impl Nemesis {
    /// Whether `--power-cuts N` cuts are done.
    pub(super) fn power_cuts_done(&self) -> bool {
        self.power.as_ref().is_some_and(|(o, s)| {
            o.cuts
                .is_some_and(|limit| s.cuts.load(Ordering::Relaxed) >= limit)
        })
    }

    /// Cuts the power of one node (the leader half the time) or of a
    /// majority (the leader and random others) at once.
    pub(super) async fn power_cut(&mut self) {
        let cluster = self.cluster.clone();
        let (Some((options, stats)), Some(disks)) = (self.power.clone(), cluster.disks.as_ref())
        else {
            self.note_err("power-cut", "cut", "the data directories are not on lazyfs");
            return;
        };
        let want = options.nodes.count(self.n());
        let first = match options.nodes {
            crate::power::CutNodes::One => self.target().await,
            crate::power::CutNodes::Majority => self.leader_or_random().await,
        };
        let mut others: Vec<usize> = (1..=self.n()).filter(|i| *i != first).collect();
        others.shuffle(&mut self.rng);
        let mut nodes: Vec<usize> = std::iter::once(first)
            .chain(others)
            .filter(|i| cluster.node(*i).is_ok_and(|n| n.is_running()))
            .take(want)
            .collect();
        nodes.sort_unstable();
        // Every gateway dies before any disk is cut: one instant of power
        // loss for all of them.
        for &i in &nodes {
            if let Ok(node) = cluster.node(i) {
                node.kill9();
            }
        }
        let mut failed = Vec::new();
        for &i in &nodes {
            if let Err(e) = disks.cut(i) {
                failed.push(format!("n{i}: {e:#}"));
            }
        }
        self.active.killed.extend(nodes.iter().copied());
        self.active.cut.extend(nodes.iter().copied());
        stats.cuts.fetch_add(1, Ordering::Relaxed);
        stats
            .node_cuts
            .fetch_add(nodes.len() as u64, Ordering::Relaxed);
        self.note(
            "power-cut",
            format!(
                "{} lost power (unsynced data dropped){}",
                fmt_group(&nodes),
                if failed.is_empty() {
                    String::new()
                } else {
                    format!("; cutting failed: {}", failed.join("; "))
                }
            ),
        );
    }

    /// After the restart of cut nodes: each must answer (it started) or, if
    /// its gateway exited, it refused: recover it from its peers.
    pub(super) async fn check_restarted(&mut self, cut: BTreeSet<usize>) {
        if cut.is_empty() {
            return;
        }
        let cluster = self.cluster.clone();
        let mut waiting = cut;
        let mut refused = Vec::new();
        let deadline = Instant::now() + START_WAIT;
        while !waiting.is_empty() && Instant::now() < deadline {
            for i in waiting.clone() {
                let Ok(node) = cluster.node(i) else {
                    waiting.remove(&i);
                    continue;
                };
                if node.exited() {
                    refused.push(i);
                    waiting.remove(&i);
                } else if node.status().await.is_ok() {
                    waiting.remove(&i);
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if !waiting.is_empty() {
            let group: Vec<usize> = waiting.into_iter().collect();
            self.note(
                "power-cut",
                format!("{} slow to answer after restart", fmt_group(&group)),
            );
        }
        for k in refused {
            self.recover_refused(k).await;
        }
    }

    /// A node that refused to start after a cut: note why (its log's last
    /// lines), then remove, wipe, re-add and promote it.
    async fn recover_refused(&mut self, k: usize) {
        let cluster = self.cluster.clone();
        let Ok(node) = cluster.node(k) else {
            return;
        };
        let log = std::fs::read_to_string(&node.log_path).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(3).collect();
        self.note(
            "refused",
            format!(
                "n{k} exited after a power cut: {}",
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            ),
        );
        if let Some((_, stats)) = &self.power {
            stats.refused.fetch_add(1, Ordering::Relaxed);
        }
        node.kill9();
        let via =
            (1..=self.n()).find(|i| *i != k && cluster.node(*i).is_ok_and(|n| n.is_running()));
        if let Some(Ok(v)) = via.map(|v| cluster.node(v)) {
            match v.admin().remove(RemoveRequest { id: k as u64 }).await {
                Ok(_) => self.note("remove", format!("n{k} (refused after a power cut)")),
                Err(e) => self.note_err("remove", &format!("n{k}"), e.message()),
            }
        }
        if let Err(e) = node.wipe() {
            self.note_err("wipe", &format!("n{k}"), e);
            return;
        }
        self.rejoin(k).await;
        let rejoined = node
            .status()
            .await
            .is_ok_and(|s| s.nodes.iter().any(|m| m.id == k as u64 && m.voter));
        if let (true, Some((_, stats))) = (rejoined, &self.power) {
            stats.rejoined.fetch_add(1, Ordering::Relaxed);
        }
    }
}
