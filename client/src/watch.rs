//! [`Client::watch`]: the object store's changes as a stream that survives
//! the loss of the gateway serving it.
//!
//! A [`Watcher`] remembers the revision it is current up to (the last
//! event's, or the last progress response's). When its stream breaks (the
//! gateway was killed, stopped, or went silent for longer than
//! [`Watcher::silence_limit`]), it opens a new one on the next gateway from
//! the revision after that, with a linearizable start; so no event is lost
//! and none is delivered twice (the watcher also drops any event at or
//! below a revision it already passed). Gateways hold recent revisions
//! only, each its own (a restarted one from its last snapshot on), so a
//! gateway that no longer holds the next revision sends the watcher to the
//! next one; only when every gateway said so does the watch end with
//! [`Error::Compacted`].

use std::time::Duration;

use proto::objects::object_store_client::ObjectStoreClient;
use proto::objects::{WatchEvent, WatchRequest, WatchResponse};
use tonic::{Code, Status, Streaming};

use crate::error::{is_retryable, Error, Result};
use crate::retry::Repeat;
use crate::Client;

/// What to watch (`ObjectStore.Watch`'s request, without the revision the
/// watcher manages).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchSpec {
    /// The object type; empty: every type.
    pub object_type: String,
    /// Exactly this id; empty: every id starting with `id_prefix`.
    pub id: String,
    /// The id prefix (when `id` is empty).
    pub id_prefix: String,
    /// The first revision to receive (0: the writes after the watch
    /// starts).
    pub from_revision: u64,
    /// How often a quiet gateway sends a progress response (0: the
    /// gateway's default, 5 s).
    pub progress_interval: Duration,
}

/// A watch in progress ([`Client::watch`]).
pub struct Watcher {
    client: Client,
    spec: WatchSpec,
    /// The next revision to receive: every event before it was delivered
    /// (0 before the first response when watching from now).
    next: u64,
    stream: Option<(String, Streaming<WatchResponse>)>,
    /// The first response of a watch from now, read when it was opened
    /// (it names the revision the watch starts after).
    first: Option<WatchResponse>,
    /// How many streams were opened (1 + the resumes).
    opened: u32,
}

impl Client {
    /// Starts watching `spec` (see [`Watcher`]).
    ///
    /// # Errors
    /// [`Error`] when no gateway opened the stream within the client's
    /// deadline; [`Error::Compacted`] for a revision no longer held;
    /// [`Error::InvalidArgument`] naming a bad field.
    pub async fn watch(&self, spec: WatchSpec) -> Result<Watcher> {
        let mut watcher = Watcher {
            client: self.clone(),
            next: spec.from_revision,
            spec,
            stream: None,
            first: None,
            opened: 0,
        };
        watcher.open().await?;
        if watcher.next == 0 {
            // From now: the first response fixes where "now" is, so a
            // resume before the caller reads it starts from there too.
            let first = watcher.next().await?;
            watcher.first = Some(first);
        }
        Ok(watcher)
    }
}

impl Watcher {
    /// The next response: events in revision order (none in a progress
    /// response) and the revision the watch is now current up to.
    /// Resumes on another gateway when the stream breaks.
    ///
    /// # Errors
    /// [`Error::Compacted`] when the gateways no longer hold the next
    /// revision; [`Error::Unauthorized`]; or the client's error when no
    /// gateway could resume the watch within its deadline.
    pub async fn next(&mut self) -> Result<WatchResponse> {
        if let Some(first) = self.first.take() {
            return Ok(first);
        }
        loop {
            if self.stream.is_none() {
                self.open().await?;
            }
            let silence = self.silence_limit();
            let Some((endpoint, stream)) = self.stream.as_mut() else {
                continue;
            };
            let endpoint = endpoint.clone();
            let received = tokio::time::timeout(silence, stream.message()).await;
            match received {
                Ok(Ok(Some(response))) => return Ok(self.take(response)),
                Ok(Ok(None)) => {
                    tracing::debug!(%endpoint, "watch stream ended; resuming");
                }
                Ok(Err(status)) if resumable(&status) => {
                    tracing::debug!(%endpoint, code = ?status.code(), message = status.message(), "watch stream broke; resuming");
                }
                Ok(Err(status)) => return Err(Error::from_status(&endpoint, &status)),
                Err(_) => {
                    tracing::debug!(%endpoint, "watch stream silent past its limit; resuming");
                }
            }
            self.stream = None;
            self.client.endpoints.failed(&endpoint);
        }
    }

    /// The next revision this watcher will receive: every event before it
    /// was delivered.
    pub fn next_revision(&self) -> u64 {
        self.next
    }

    /// The gateway serving the watch now, if a stream is open.
    pub fn endpoint(&self) -> Option<&str> {
        self.stream.as_ref().map(|(endpoint, _)| endpoint.as_str())
    }

    /// How many streams this watch opened (1 + how often it resumed).
    pub fn streams_opened(&self) -> u32 {
        self.opened
    }

    /// How long a stream may stay silent before the watcher takes it for
    /// lost and resumes elsewhere: two progress intervals and five seconds
    /// (a paused gateway holds its connection open).
    pub fn silence_limit(&self) -> Duration {
        let progress = if self.spec.progress_interval.is_zero() {
            Duration::from_secs(5)
        } else {
            self.spec.progress_interval
        };
        progress * 2 + Duration::from_secs(5)
    }

    /// Drops what was delivered already, and moves `next` on.
    fn take(&mut self, mut response: WatchResponse) -> WatchResponse {
        let next = self.next;
        response.events.retain(|e: &WatchEvent| e.revision >= next);
        let last_event = response.events.last().map_or(0, |e| e.revision);
        self.next = self
            .next
            .max(response.revision.saturating_add(1))
            .max(last_event.saturating_add(1));
        response
    }

    async fn open(&mut self) -> Result<()> {
        let request = WatchRequest {
            r#type: self.spec.object_type.clone(),
            id: self.spec.id.clone(),
            id_prefix: self.spec.id_prefix.clone(),
            from_revision: self.next,
            stale: false,
            progress_interval_ms: u32::try_from(self.spec.progress_interval.as_millis())
                .unwrap_or(u32::MAX),
        };
        // One gateway that no longer holds the revision does not end the
        // watch: each of the others is asked once more.
        let mut compacted = 0;
        loop {
            let opened = self
                .client
                .endpoints
                .call("watch", Repeat::Safe, |channel| {
                    let request = request.clone();
                    async move {
                        Ok(ObjectStoreClient::new(channel)
                            .watch(request)
                            .await?
                            .into_inner())
                    }
                })
                .await;
            match opened {
                Ok(opened) => {
                    self.opened += 1;
                    self.stream = Some((opened.endpoint, opened.value));
                    return Ok(());
                }
                Err(Error::Compacted { endpoint, .. })
                    if compacted + 1 < self.client.endpoints.addrs().len() =>
                {
                    tracing::debug!(%endpoint, from = self.next, "this gateway no longer holds the revision; asking the next");
                    compacted += 1;
                    self.client.endpoints.failed(&endpoint);
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Whether a broken stream is resumed elsewhere: a lost connection, a
/// gateway that stopped or lost raft, one that cannot answer now, or one
/// that no longer holds the next revision (a watcher it cut for falling
/// behind: another gateway may hold it, and [`Watcher::open`] asks each);
/// never an auth failure or a bad request.
fn resumable(status: &Status) -> bool {
    if status
        .metadata()
        .contains_key(proto::metadata::COMPACTED_REVISION)
    {
        return true;
    }
    is_retryable(status) || matches!(status.code(), Code::Cancelled | Code::Internal)
}
