//! The retry loop every call runs through: one attempt per endpoint in
//! turn, starting at the one that answered last, with bounded exponential
//! backoff between attempts and one overall deadline.
//!
//! An attempt ends in an answer (success, or a status retrying cannot
//! change: returned at once), or in a retryable failure
//! ([`crate::error::is_retryable`]: unreachable, lost, no leader, outcome
//! unknown, the attempt's own timeout), after which the next endpoint is
//! tried. A write's attempts all carry the same request id, so however many
//! of them reach a leader, apply applies the write once.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use proto::client::{connect, Bearer, ClientConfig, Role};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::Status;

use crate::error::{is_retryable, Error, Result};

/// A channel to one gateway, adding the bearer token to every call.
pub type Authed = InterceptedService<Channel, Bearer>;

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
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            deadline: Duration::from_secs(30),
            attempt_timeout: Duration::from_secs(6),
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
        }
    }
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
    Connect(String),
    /// The gateway (or the transport) answered with a status.
    Status(Status),
}

impl Endpoints {
    pub(crate) fn new(
        addrs: Vec<String>,
        config: ClientConfig,
        bearer: Bearer,
        policy: RetryPolicy,
    ) -> Self {
        let channels = Mutex::new(vec![None; addrs.len()]);
        Endpoints {
            addrs,
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

    async fn channel(&self, index: usize) -> std::result::Result<Channel, AttemptError> {
        if let Some(channel) = self.cached(index) {
            return Ok(channel);
        }
        let channel = connect(Role::Client, &self.addrs[index], &self.config)
            .await
            .map_err(|e| AttemptError::Connect(e.to_string()))?;
        self.set(index, Some(channel.clone()));
        Ok(channel)
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
            .call(operation, |channel| call(channel, request.clone()))
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

    /// Runs `call` until an attempt answers or the deadline passes, trying
    /// the endpoints in turn.
    ///
    /// # Errors
    /// The answer's [`Error`] for a status retrying cannot change;
    /// [`Error::DeadlineExceeded`] naming the last failure otherwise.
    pub(crate) async fn call<T, F, Fut>(
        &self,
        operation: &'static str,
        mut call: F,
    ) -> Result<Attempted<T>>
    where
        F: FnMut(Authed) -> Fut,
        Fut: Future<Output = std::result::Result<T, Status>>,
    {
        let started = Instant::now();
        let deadline = started + self.policy.deadline;
        let n = self.addrs.len();
        let mut index = self.preferred.load(Ordering::Relaxed) % n;
        let mut backoff = self.policy.initial_backoff;
        let mut attempts = 0u32;
        let mut last = String::from("no attempt made");
        loop {
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                return Err(Error::DeadlineExceeded {
                    operation,
                    attempts,
                    elapsed: started.elapsed(),
                    deadline: self.policy.deadline,
                    last,
                });
            }
            attempts += 1;
            let endpoint = &self.addrs[index];
            let attempt = async {
                let channel = self.channel(index).await?;
                call(InterceptedService::new(channel, self.bearer.clone()))
                    .await
                    .map_err(AttemptError::Status)
            };
            let limit = remaining.min(self.policy.attempt_timeout);
            match tokio::time::timeout(limit, attempt).await {
                Ok(Ok(value)) => {
                    self.preferred.store(index, Ordering::Relaxed);
                    return Ok(Attempted {
                        value,
                        attempts,
                        endpoint: endpoint.clone(),
                    });
                }
                Ok(Err(AttemptError::Status(status))) if !is_retryable(&status) => {
                    return Err(Error::from_status(endpoint, &status));
                }
                Ok(Err(AttemptError::Status(status))) => {
                    last = format!("{endpoint}: {:?}: {}", status.code(), status.message());
                }
                Ok(Err(AttemptError::Connect(e))) => last = e,
                Err(_) => last = format!("{endpoint}: no answer within {limit:?}"),
            }
            tracing::debug!(operation, attempts, %last, "attempt failed; trying the next gateway");
            self.set(index, None);
            index = (index + 1) % n;
            let pause = backoff.min(deadline.saturating_duration_since(Instant::now()));
            tokio::time::sleep(pause).await;
            backoff = (backoff * 2).min(self.policy.max_backoff);
        }
    }
}
