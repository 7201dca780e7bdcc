//! The retry loop every call runs through (the one failover policy of the
//! workspace's clients, the `openshell-pool` CLI included): one attempt per
//! endpoint in turn, starting at the one that answered last, with bounded
//! exponential backoff between attempts, one overall deadline and, when
//! the policy says so, a bound on the rounds over the endpoints.
//!
//! An attempt ends in an answer (success, or a status retrying cannot
//! change: returned at once), in a leader hint (a gateway that is not the
//! leader answers `FAILED_PRECONDITION` naming the leader's address: the
//! next attempt goes there), or in a retryable failure
//! ([`crate::error::is_retryable`]: unreachable, lost, no leader, outcome
//! unknown, the attempt's own timeout), after which the next endpoint is
//! tried. A write's attempts all carry the same request id, so however many
//! of them reach a leader, apply applies the write once. A call that must
//! not run twice and has no request id ([`Repeat::Once`]) is retried only
//! where the gateway surely did not act.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use proto::client::{connect, Bearer, ClientConfig, Role};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::Status;

use crate::error::{
    is_retryable, is_retryable_once, leader_hint, Cause, Error, Failure, Result, MAX_FAILURES,
};

/// A channel to one gateway, adding the bearer token to every call.
pub type Authed = InterceptedService<Channel, Bearer>;

/// How many leader hints one call follows.
const MAX_HINTS: u32 = 2;

/// How the client retries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The whole call, every attempt and pause included.
    pub deadline: Duration,
    /// One attempt (connecting included).
    pub attempt_timeout: Duration,
    /// The pause after the first failed attempt; doubled after each
    /// further one.
    pub initial_backoff: Duration,
    /// The longest pause between two attempts.
    pub max_backoff: Duration,
    /// How many times the call goes round every endpoint before it gives
    /// up with [`Error::Unanswered`] (`None`: until the deadline). The CLI
    /// makes one round: an operator reads the cause at once rather than
    /// wait out a deadline.
    pub max_rounds: Option<u32>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            deadline: Duration::from_secs(30),
            attempt_timeout: Duration::from_secs(6),
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
            max_rounds: None,
        }
    }
}

/// Whether a call may run twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Repeat {
    /// Reads, writes carrying a request id, and changes that are
    /// idempotent (a membership change to the same target): every
    /// retryable failure is retried.
    Safe,
    /// A call that must not run twice and carries no request id (a
    /// command run in a sandbox, an operation started): retried only when
    /// the gateway surely did not act (the channel did not open, the
    /// gateway itself answered `UNAVAILABLE`, or it named the leader).
    Once,
}

/// A call's value and how it was obtained.
#[derive(Clone, Debug)]
pub struct Attempted<T> {
    /// What the gateway answered.
    pub value: T,
    /// How many attempts the call took (1: the first answered).
    pub attempts: u32,
    /// The gateway that answered.
    pub endpoint: String,
}

/// The endpoints, their cached channels and the retry policy.
pub(crate) struct Endpoints {
    /// host:port of every gateway, in the caller's order.
    addrs: Vec<String>,
    /// Who dials (named in connect errors; the CLI's deadlines differ).
    role: Role,
    /// How a channel connects (TLS, connect timeout, attempt deadline).
    config: ClientConfig,
    /// The token interceptor.
    bearer: Bearer,
    /// The retry rules.
    pub(crate) policy: RetryPolicy,
    /// One cached channel per endpoint, dropped after a failed attempt so
    /// the next attempt there dials afresh. A std mutex: held only to
    /// clone or replace an entry, never across an await.
    channels: Mutex<Vec<Option<Channel>>>,
    /// The endpoint to try first: the last one that answered.
    preferred: AtomicUsize,
}

/// Why one attempt failed.
enum AttemptError {
    /// The channel could not be opened.
    Connect(Arc<proto::client::ClientError>),
    /// The gateway (or the transport) answered with a status.
    Status(Status),
}

/// Where the loop stands: the failures so far and the rotation.
struct Progress {
    /// Attempts made.
    attempts: u32,
    /// Failed attempts, oldest first, at most [`MAX_FAILURES`].
    failures: Vec<Failure>,
    /// The listed endpoint of the next listed attempt.
    index: usize,
    /// Listed attempts made in the current round.
    tried_in_round: usize,
    /// Rounds completed.
    rounds: u32,
    /// The leader's address a gateway named, tried next.
    hint: Option<String>,
    /// Hints followed so far.
    hints: u32,
}

impl Progress {
    fn fail(&mut self, endpoint: &str, cause: Cause) {
        if self.failures.len() == MAX_FAILURES {
            self.failures.remove(0);
        }
        self.failures.push(Failure {
            endpoint: endpoint.to_string(),
            cause,
        });
    }

    fn starting_at(index: usize) -> Self {
        Progress {
            attempts: 0,
            failures: Vec::new(),
            index,
            tried_in_round: 0,
            rounds: 0,
            hint: None,
            hints: 0,
        }
    }

    fn deadline_exceeded(
        self,
        operation: &'static str,
        started: Instant,
        deadline: Duration,
    ) -> Error {
        Error::DeadlineExceeded {
            operation,
            attempts: self.attempts,
            elapsed: started.elapsed(),
            deadline,
            last: self
                .failures
                .last()
                .map_or_else(|| "no attempt made".to_string(), ToString::to_string),
            failures: self.failures,
        }
    }

    fn unanswered(self, operation: &'static str) -> Error {
        Error::Unanswered {
            operation,
            attempts: self.attempts,
            failures: self.failures,
        }
    }
}

impl Endpoints {
    pub(crate) fn new(
        addrs: Vec<String>,
        role: Role,
        config: ClientConfig,
        bearer: Bearer,
        policy: RetryPolicy,
    ) -> Self {
        let channels = Mutex::new(vec![None; addrs.len()]);
        Endpoints {
            addrs,
            role,
            config,
            bearer,
            policy,
            channels,
            preferred: AtomicUsize::new(0),
        }
    }

    /// The endpoints, in the caller's order.
    pub(crate) fn addrs(&self) -> &[String] {
        &self.addrs
    }

    fn cached(&self, index: usize) -> Option<Channel> {
        let channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        channels.get(index).cloned().flatten()
    }

    fn set(&self, index: usize, channel: Option<Channel>) {
        let mut channels = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = channels.get_mut(index) {
            *slot = channel;
        }
    }

    /// A channel to `addr`: the cached one when `addr` is listed.
    async fn channel(&self, addr: &str) -> std::result::Result<Channel, AttemptError> {
        let index = self.addrs.iter().position(|a| a == addr);
        if let Some(channel) = index.and_then(|i| self.cached(i)) {
            return Ok(channel);
        }
        let channel = connect(self.role, addr, &self.config)
            .await
            .map_err(|e| AttemptError::Connect(Arc::new(e)))?;
        if let Some(i) = index {
            self.set(i, Some(channel.clone()));
        }
        Ok(channel)
    }

    /// After a stream from `endpoint` broke: its channel is dialled afresh
    /// next time, and the next call starts at the endpoint after it.
    pub(crate) fn failed(&self, endpoint: &str) {
        if let Some(i) = self.addrs.iter().position(|a| a == endpoint) {
            self.set(i, None);
            self.preferred
                .store((i + 1) % self.addrs.len(), Ordering::Relaxed);
        }
    }

    /// A write: `request` (which carries `request_id`) sent with `call` on
    /// every attempt, answered as (value, replayed).
    pub(crate) async fn write<R, T, F, Fut>(
        &self,
        operation: &'static str,
        request_id: String,
        request: R,
        mut call: F,
    ) -> Result<crate::Written<T>>
    where
        R: Clone,
        F: FnMut(Authed, R) -> Fut,
        Fut: Future<Output = std::result::Result<(T, bool), Status>>,
    {
        let done = self
            .call(operation, Repeat::Safe, |channel| {
                call(channel, request.clone())
            })
            .await?;
        let (value, replayed) = done.value;
        Ok(crate::Written {
            value,
            request_id,
            attempts: done.attempts,
            replayed,
            endpoint: done.endpoint,
        })
    }

    /// Runs `call` until an attempt answers, the deadline passes or the
    /// policy's rounds are used up, trying the endpoints in turn and
    /// following a leader hint.
    ///
    /// # Errors
    /// The answer's [`Error`] for a status retrying cannot change;
    /// [`Error::DeadlineExceeded`] or [`Error::Unanswered`] naming the
    /// failed attempts otherwise.
    pub(crate) async fn call<T, F, Fut>(
        &self,
        operation: &'static str,
        repeat: Repeat,
        mut call: F,
    ) -> Result<Attempted<T>>
    where
        F: FnMut(Authed) -> Fut,
        Fut: Future<Output = std::result::Result<T, Status>>,
    {
        let started = Instant::now();
        let deadline = started + self.policy.deadline;
        let n = self.addrs.len();
        let mut p = Progress::starting_at(self.preferred.load(Ordering::Relaxed) % n);
        let mut backoff = self.policy.initial_backoff;
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(p.deadline_exceeded(operation, started, self.policy.deadline));
            }
            let hinted = p.hint.take();
            if hinted.is_none() && self.policy.max_rounds.is_some_and(|max| p.rounds >= max) {
                return Err(p.unanswered(operation));
            }
            let endpoint = hinted
                .clone()
                .unwrap_or_else(|| self.addrs[p.index].clone());
            p.attempts += 1;
            let attempt = async {
                let channel = self.channel(&endpoint).await?;
                call(InterceptedService::new(channel, self.bearer.clone()))
                    .await
                    .map_err(AttemptError::Status)
            };
            let limit = remaining.min(self.policy.attempt_timeout);
            let cause = match tokio::time::timeout(limit, attempt).await {
                Ok(Ok(value)) => {
                    if let Some(i) = self.addrs.iter().position(|a| *a == endpoint) {
                        self.preferred.store(i, Ordering::Relaxed);
                    }
                    return Ok(Attempted {
                        value,
                        attempts: p.attempts,
                        endpoint,
                    });
                }
                Ok(Err(AttemptError::Status(status))) => {
                    if let Some(leader) = leader_hint(&status).filter(|_| p.hints < MAX_HINTS) {
                        // "Not the leader, go there": an answer that
                        // changed nothing; the next attempt goes to it.
                        p.hints += 1;
                        p.hint = Some(leader);
                        p.fail(&endpoint, Cause::Status(status));
                        if hinted.is_none() {
                            self.next_listed(&mut p);
                        }
                        continue;
                    }
                    let again = match repeat {
                        Repeat::Safe => is_retryable(&status),
                        Repeat::Once => is_retryable_once(&status),
                    };
                    if !again && (repeat == Repeat::Safe || !is_retryable(&status)) {
                        return Err(Error::from_status(&endpoint, &status));
                    }
                    if !again {
                        // Once: the outcome is unknown; it is not run again.
                        p.fail(&endpoint, Cause::Status(status));
                        return Err(p.unanswered(operation));
                    }
                    Cause::Status(status)
                }
                Ok(Err(AttemptError::Connect(e))) => Cause::Connect(e),
                Err(_) if repeat == Repeat::Once => {
                    p.fail(&endpoint, Cause::TimedOut(limit));
                    return Err(p.unanswered(operation));
                }
                Err(_) => Cause::TimedOut(limit),
            };
            p.fail(&endpoint, cause);
            tracing::debug!(operation, attempts = p.attempts, last = %p.failures.last().map(ToString::to_string).unwrap_or_default(), "attempt failed; trying the next gateway");
            if let Some(i) = self.addrs.iter().position(|a| *a == endpoint) {
                self.set(i, None);
            }
            if hinted.is_none() {
                self.next_listed(&mut p);
            }
            if self.policy.max_rounds.is_some_and(|max| p.rounds >= max) {
                return Err(p.unanswered(operation));
            }
            let pause = backoff.min(deadline.saturating_duration_since(Instant::now()));
            tokio::time::sleep(pause).await;
            backoff = (backoff * 2).min(self.policy.max_backoff);
        }
    }

    /// Moves the rotation to the next listed endpoint, counting rounds.
    fn next_listed(&self, p: &mut Progress) {
        p.index = (p.index + 1) % self.addrs.len();
        p.tried_in_round += 1;
        if p.tried_in_round == self.addrs.len() {
            p.tried_in_round = 0;
            p.rounds += 1;
        }
    }
}
