//! Sampling every replica's `StateDigest` at one applied index, for
//! `replicas-identical-digest`.
//!
//! The leader keeps appending (ticks, heartbeat batches), so replicas rarely
//! stand at one index when asked "now". Each round therefore asks every
//! replica twice: for its state now (which says where each one stands), then
//! for its state right after an index none has applied yet, which each takes
//! inside apply when it gets there. A replica that applied past that index
//! before the question reached it answers `FAILED_PRECONDITION`; the next
//! round re-reads where every replica stands and aims further ahead (the
//! lead doubles each round that missed), so a cluster that applies faster
//! than a question travels is still caught at one index.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::checker::DigestSample;

/// The furthest ahead of the most advanced replica a round aims.
pub const MAX_LEAD: u64 = 256;

/// How long a round waits for every replica to reach its index, at most.
const ROUND_WAIT: Duration = Duration::from_secs(5);

/// Samples the digests of `nodes` until some applied index was sampled on
/// all of them or `within` passes; returns every sample taken.
///
/// `ask(at, wait)` asks every node, in the order of `nodes`, for its digest
/// now (`at` 0) or right after it applies `at` (waiting up to `wait`), and
/// returns each answer (`(applied_index, crc32)`) or its error.
pub async fn sample<F, Fut, E>(nodes: &[String], within: Duration, mut ask: F) -> Vec<DigestSample>
where
    F: FnMut(u64, Duration) -> Fut,
    Fut: Future<Output = Vec<Result<(u64, u32), E>>>,
{
    let deadline = Instant::now() + within;
    let mut samples: Vec<DigestSample> = Vec::new();
    let mut lead = 1;
    loop {
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .clamp(Duration::from_millis(1), ROUND_WAIT);
        let now = record(nodes, &mut samples, ask(0, wait).await);
        if on_all(nodes, &samples) {
            return samples;
        }
        if let Some(furthest) = now {
            record(nodes, &mut samples, ask(furthest + lead, wait).await);
            if on_all(nodes, &samples) {
                return samples;
            }
            lead = (lead * 2).min(MAX_LEAD);
        }
        if Instant::now() >= deadline {
            return samples;
        }
        tokio::time::sleep(Duration::from_millis(37)).await;
    }
}

/// Adds the answers to `samples`; returns the highest applied index among
/// them.
fn record<E>(
    nodes: &[String],
    samples: &mut Vec<DigestSample>,
    answers: Vec<Result<(u64, u32), E>>,
) -> Option<u64> {
    let mut furthest = None;
    for (node, answer) in nodes.iter().zip(answers) {
        if let Ok((applied_index, crc32)) = answer {
            furthest = furthest.max(Some(applied_index));
            samples.push(DigestSample {
                node: node.clone(),
                applied_index,
                crc32,
            });
        }
    }
    furthest
}

/// Whether some applied index was sampled on every one of `nodes`.
fn on_all(nodes: &[String], samples: &[DigestSample]) -> bool {
    let mut at: BTreeMap<u64, BTreeSet<&str>> = BTreeMap::new();
    for s in samples {
        at.entry(s.applied_index).or_default().insert(&s.node);
    }
    at.values().any(|seen| seen.len() == nodes.len())
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    /// Three replicas applying `step` entries between any two questions
    /// (the leader first, the followers one behind), answering the way a
    /// gateway's `StateDigest` does.
    struct Busy {
        applied: RefCell<Vec<u64>>,
        step: u64,
    }

    #[derive(Debug, PartialEq)]
    enum Refused {
        Passed,
    }

    impl Busy {
        fn ask(&self, at: u64) -> Vec<Result<(u64, u32), Refused>> {
            let mut applied = self.applied.borrow_mut();
            let leader = applied[0] + self.step;
            applied[0] = leader;
            applied[1] = leader - 1;
            applied[2] = leader - 1;
            applied
                .iter_mut()
                .map(|a| {
                    if at == 0 {
                        Ok((*a, crc(*a)))
                    } else if at <= *a {
                        Err(Refused::Passed)
                    } else {
                        *a = at;
                        Ok((at, crc(at)))
                    }
                })
                .collect()
        }
    }

    fn crc(index: u64) -> u32 {
        u32::try_from(index % 1_000).unwrap_or(0) * 7
    }

    fn names() -> Vec<String> {
        vec!["n1".into(), "n2".into(), "n3".into()]
    }

    #[tokio::test(start_paused = true)]
    async fn replicas_that_apply_faster_than_a_question_travels_are_caught_at_one_index() {
        // Given replicas that apply 5 entries between any two questions:
        // every "the index after the furthest" is passed when it arrives.
        let busy = Busy {
            applied: RefCell::new(vec![2049, 2047, 2047]),
            step: 5,
        };
        // When the sampler runs for up to 10 s.
        let samples = sample(&names(), Duration::from_secs(10), |at, _| {
            std::future::ready(busy.ask(at))
        })
        .await;
        // Then some index was sampled on all three.
        assert!(on_all(&names(), &samples), "no index on all: {samples:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_replica_that_never_answers_leaves_no_index_on_all_and_the_sampler_stops() {
        // Given a third replica that refuses every question.
        let busy = Busy {
            applied: RefCell::new(vec![10, 9, 9]),
            step: 1,
        };
        let started = Instant::now();
        let samples = sample(&names(), Duration::from_secs(10), |at, _| {
            let mut answers = busy.ask(at);
            answers[2] = Err(Refused::Passed);
            std::future::ready(answers)
        })
        .await;
        // Then no index is on all, and the sampler gave up at its deadline.
        assert!(!on_all(&names(), &samples));
        assert!(samples.iter().all(|s| s.node != "n3"));
        assert!(started.elapsed() >= Duration::from_secs(10));
        assert!(started.elapsed() < Duration::from_secs(11));
    }
}
