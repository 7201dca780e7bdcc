//! A node's state digests ([`crate::digest`]): now, at an index, and
//! the periodic ones its observer hears of.

use std::time::Duration;

use super::RaftNode;
use std::sync::Arc;

use crate::digest::{Digest, DigestError, StateCopy};
use crate::state_machine::{Applied, StateMachine};
use crate::store::NodeMachine;
use crate::NodeConfig;

impl<SM: StateMachine> RaftNode<SM> {
    /// The digest of this node's applied state now (the applied index it
    /// reflects included), encoded under the read lock. Replicas at the
    /// same applied index must agree byte for byte.
    pub fn state_digest(&self) -> Digest {
        self.read_local(|machine, index| Digest::of_encoding(index, &machine.snapshot()))
    }

    /// The digest of this node's applied state right after it applies
    /// `index`, waiting at most `wait` for it (0: now, whatever the
    /// applied index). Every replica asked for the same index digests the
    /// same log prefix.
    ///
    /// # Errors
    /// [`DigestError`]: the index was applied already, was not reached in
    /// time, is too far ahead, or too many requests wait.
    pub async fn state_digest_at(&self, index: u64, wait: Duration) -> Result<Digest, DigestError> {
        let registered = self.read_applied(|a: &Applied<SM>| {
            let applied = a.last_applied.map_or(0, |l| l.index);
            if index == 0 || applied == index {
                Ok(Err(StateCopy::new(applied, a.machine.clone())))
            } else {
                a.digests.register(index, applied).map(Ok)
            }
        })?;
        let copy = match registered {
            Err(now) => now,
            Ok(rx) => match tokio::time::timeout(wait, rx).await {
                Ok(Ok(copy)) => copy,
                Ok(Err(_)) => {
                    return Err(DigestError::Passed {
                        index,
                        applied: self.applied_index(),
                    })
                }
                Err(_) => {
                    return Err(DigestError::NotReached {
                        index,
                        applied: self.applied_index(),
                        waited_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                    })
                }
            },
        };
        Ok(hash_off_the_runtime(copy).await)
    }

    fn applied_index(&self) -> u64 {
        self.read_local(|_, index| index)
    }
}

/// Encodes and hashes `copy` on a blocking thread (a large state takes
/// a while; the runtime's workers keep serving), once for all who share it.
async fn hash_off_the_runtime<SM: StateMachine>(copy: Arc<StateCopy<SM>>) -> Digest {
    match tokio::task::spawn_blocking(move || copy.digest(StateMachine::snapshot)).await {
        Ok(digest) => digest,
        // Only a panic in the state machine's encoder gets here: re-raise.
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// Starts the periodic digests of `config` (none when
/// [`NodeConfig::digest_every`] is 0): a task hashes each copy and tells
/// the observer; it ends when the state-machine storage is dropped.
pub(crate) fn start_periodic<SM: StateMachine>(
    machine: &impl NodeMachine<SM>,
    config: &NodeConfig,
) {
    if config.digest_every == 0 {
        return;
    }
    let mut copies = machine.read(|a: &Applied<SM>| a.digests.periodic(config.digest_every));
    let observer = config.observer.clone();
    tokio::spawn(async move {
        while let Some(copy) = copies.recv().await {
            observer.state_digest(hash_off_the_runtime(copy).await);
        }
    });
}
