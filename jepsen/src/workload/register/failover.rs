//! Client failover of the register workload: a short deadline per attempt
//! through one gateway, gateways to avoid after a timeout or a refusal, and
//! another gateway for an op whose attempt certainly had no effect (see the
//! parent module's doc).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::Rng;

use super::{lock, short, Outcome, Planned, Shared};

/// How a client fails over from a gateway that is dead, paused or cut off
/// instead of waiting it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failover {
    /// Deadline of one attempt through one gateway; `None`: one attempt per
    /// op, through the node it picked, within the client timeout (no
    /// failover).
    pub attempt: Option<Duration>,
    /// How long a client avoids a gateway whose attempt timed out, refused
    /// the connection or found no leader.
    pub avoid: Duration,
}

impl Default for Failover {
    fn default() -> Self {
        Failover {
            attempt: Some(Duration::from_millis(1500)),
            avoid: Duration::from_secs(2),
        }
    }
}

impl Failover {
    /// No failover: one attempt per op within the client timeout.
    pub fn off() -> Self {
        Failover {
            attempt: None,
            avoid: Duration::ZERO,
        }
    }
}

/// What one attempt through one gateway came to.
enum Attempt {
    /// The op's outcome.
    Done(Outcome),
    /// It certainly had no effect and the gateway did not serve it (no
    /// leader, unreachable, too slow for a read): try another gateway.
    Elsewhere(Outcome),
}

/// One client's gateways to avoid, until when.
pub(super) struct Avoid(pub(super) HashMap<usize, Instant>);

impl Avoid {
    fn mark(&mut self, node: usize, failover: &Failover) {
        if failover.attempt.is_some() {
            self.0.insert(node, Instant::now() + failover.avoid);
        }
    }

    /// A random node of `1..=n` other than `except`, not avoided when
    /// there is such a node.
    pub(super) fn pick(&mut self, rng: &mut StdRng, n: usize, except: Option<usize>) -> usize {
        let now = Instant::now();
        self.0.retain(|_, until| *until > now);
        let good: Vec<usize> = (1..=n)
            .filter(|i| Some(*i) != except && !self.0.contains_key(i))
            .collect();
        if let Some(&node) = good.get(rng.gen_range(0..good.len().max(1))) {
            return node;
        }
        let rest: Vec<usize> = (1..=n).filter(|i| Some(*i) != except).collect();
        rest.get(rng.gen_range(0..rest.len().max(1)))
            .copied()
            .unwrap_or(1)
    }
}

/// A put's outcome as an attempt: a certain failure because the
/// gateway had no leader or was unreachable may be tried elsewhere.
fn put_attempt(outcome: Outcome) -> Attempt {
    match outcome {
        Outcome::Fail(e) if e.starts_with("Unavailable") || e.starts_with("DeadlineExceeded") => {
            Attempt::Elsewhere(Outcome::Fail(e))
        }
        done => Attempt::Done(done),
    }
}

impl Shared {
    /// One attempt of `planned` through `node`, within `limit`.
    async fn attempt(&self, node: usize, key: &str, planned: Planned, limit: Duration) -> Attempt {
        let result = tokio::time::timeout(limit, async {
            match planned {
                Planned::Read => match self.read(node, key).await {
                    // A failed read changed nothing: another gateway may serve it.
                    Outcome::Fail(e) => Attempt::Elsewhere(Outcome::Fail(e)),
                    done => Attempt::Done(done),
                },
                Planned::Write(v) => put_attempt(self.write(node, key, v).await),
                Planned::Cas {
                    expected,
                    new,
                    version: None,
                } => match self.get(node, key).await {
                    Err(s) => {
                        Attempt::Elsewhere(Outcome::Fail(format!("read before cas: {}", short(&s))))
                    }
                    Ok((current, version)) => {
                        if current != Some(expected) {
                            if let Some(c) = current {
                                lock(&self.seen).insert(key.to_string(), c);
                            }
                            return Attempt::Done(Outcome::Fail(format!(
                                "register holds {current:?}"
                            )));
                        }
                        put_attempt(
                            self.cas_own_version(node, key, expected, new, version)
                                .await,
                        )
                    }
                },
                Planned::Cas {
                    expected,
                    new,
                    version: Some(version),
                } => put_attempt(
                    self.cas_own_version(node, key, expected, new, version)
                        .await,
                ),
            }
        })
        .await;
        match result {
            Ok(attempt) => attempt,
            // Cut short: a read changed nothing; a put may have been sent.
            Err(_) => match planned {
                Planned::Read => Attempt::Elsewhere(Outcome::Fail(format!(
                    "no answer within {} ms",
                    limit.as_millis()
                ))),
                _ => Attempt::Done(Outcome::Info(format!(
                    "no answer within {} ms (attempt deadline)",
                    limit.as_millis()
                ))),
            },
        }
    }

    /// Runs `planned`, first through `node`, failing over to other
    /// gateways while its attempts certainly had no effect and the client
    /// timeout allows. Returns the outcome and the gateway that decided it.
    pub(super) async fn execute(
        &self,
        node: usize,
        key: &str,
        planned: Planned,
        avoid: &mut Avoid,
        rng: &mut StdRng,
    ) -> (Outcome, usize) {
        let failover = self.options.failover;
        let timeout = self.cluster.options.client_timeout;
        let Some(per_attempt) = failover.attempt else {
            // No failover: one attempt within the client timeout (the
            // channel's own request timeout ends it).
            return match self.attempt(node, key, planned, timeout * 2).await {
                Attempt::Done(o) | Attempt::Elsewhere(o) => (o, node),
            };
        };
        let deadline = Instant::now() + timeout;
        let mut node = node;
        loop {
            let limit = per_attempt.min(deadline.saturating_duration_since(Instant::now()));
            match self
                .attempt(node, key, planned, limit.max(Duration::from_millis(1)))
                .await
            {
                Attempt::Done(outcome) => {
                    if matches!(&outcome, Outcome::Info(_)) {
                        avoid.mark(node, &failover);
                    }
                    return (outcome, node);
                }
                Attempt::Elsewhere(outcome) => {
                    avoid.mark(node, &failover);
                    let pause = Duration::from_millis(20);
                    if Instant::now() + pause >= deadline {
                        return (outcome, node);
                    }
                    tokio::time::sleep(pause).await;
                    node = avoid.pick(rng, self.cluster.nodes.len(), Some(node));
                }
            }
        }
    }
}
