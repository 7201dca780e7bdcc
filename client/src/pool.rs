//! The pool calls: [`Client::create_sandbox`], [`Client::delete_sandbox`]
//! (writes, with one request id for every attempt), [`Client::get_sandbox`],
//! [`Client::list_sandboxes`], [`Client::pool_status`], [`Client::watch_pool`].

use proto::pool_admin::pool_admin_client::PoolAdminClient;
use proto::pool_admin::{
    CreateSandboxRequest, DeleteSandboxRequest, GetSandboxRequest, GetSupervisorPoolStatusRequest,
    ListSandboxesRequest, PoolChange, Sandbox, SupervisorPoolStatus, WatchPoolRequest,
};
use tonic::{Code, Response, Status, Streaming};

use crate::error::{Error, Result};
use crate::retry::{Attempted, Repeat};
use crate::{new_request_id, Client, Written};

/// The most pages a whole-list call follows (500 records each by default).
const MAX_PAGES: usize = 1000;

/// The sandbox of a write's reply and whether the gateway marked it a
/// replay of an earlier attempt.
fn sandbox_reply(reply: Response<Sandbox>) -> (Sandbox, bool) {
    let replayed = reply.metadata().contains_key(proto::metadata::REPLAYED);
    (reply.into_inner(), replayed)
}

fn too_many_pages(what: &str) -> Error {
    Error::Refused {
        endpoint: String::new(),
        code: Code::OutOfRange,
        message: format!("the {what} did not end within {MAX_PAGES} pages"),
    }
}

impl Client {
    /// Creates a sandbox. `request.request_id` is set to a fresh id when
    /// empty; every attempt carries the same one. Naming the sandbox
    /// (`sandbox_id`) is recommended: the gateway names it otherwise.
    ///
    /// # Errors
    /// [`Error::AlreadyExists`], [`Error::Refused`] (`RESOURCE_EXHAUSTED`:
    /// no capacity), [`Error::RequestIdReused`] (the caller's
    /// `request_id` was used for another write), [`Error::DeadlineExceeded`],
    /// ...
    pub async fn create_sandbox(
        &self,
        mut request: CreateSandboxRequest,
    ) -> Result<Written<Sandbox>> {
        if request.request_id.is_empty() {
            request.request_id = new_request_id()?;
        }
        self.endpoints
            .write(
                "create_sandbox",
                request.request_id.clone(),
                request,
                |channel, request| async move {
                    Ok(sandbox_reply(
                        PoolAdminClient::new(channel)
                            .create_sandbox(request)
                            .await?,
                    ))
                },
            )
            .await
    }

    /// Deletes the sandbox `sandbox_id`, with one request id for every
    /// attempt.
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::DeadlineExceeded`], ...
    pub async fn delete_sandbox(&self, sandbox_id: &str) -> Result<Written<Sandbox>> {
        let request = DeleteSandboxRequest {
            sandbox_id: sandbox_id.to_string(),
            request_id: new_request_id()?,
        };
        self.endpoints
            .write(
                "delete_sandbox",
                request.request_id.clone(),
                request,
                |channel, request| async move {
                    Ok(sandbox_reply(
                        PoolAdminClient::new(channel)
                            .delete_sandbox(request)
                            .await?,
                    ))
                },
            )
            .await
    }

    /// The sandbox `sandbox_id`, or `None` when it does not exist.
    ///
    /// # Errors
    /// [`Error`] (`NOT_FOUND` is `Ok(None)`).
    pub async fn get_sandbox(&self, sandbox_id: &str) -> Result<Option<Sandbox>> {
        let request = GetSandboxRequest {
            sandbox_id: sandbox_id.to_string(),
            stale: false,
        };
        let got = self
            .endpoints
            .call("get_sandbox", Repeat::Safe, |channel| {
                let request = request.clone();
                async move {
                    match PoolAdminClient::new(channel).get_sandbox(request).await {
                        Ok(reply) => Ok(Some(reply.into_inner())),
                        Err(status) if status.code() == Code::NotFound => Ok(None),
                        Err(status) => Err::<_, Status>(status),
                    }
                }
            })
            .await?;
        Ok(got.value)
    }

    /// Every sandbox, by id, page by page.
    ///
    /// # Errors
    /// [`Error`]; [`Error::Refused`] past 1000 pages.
    pub async fn list_sandboxes(&self) -> Result<Vec<Sandbox>> {
        let mut sandboxes = Vec::new();
        let mut token = String::new();
        for _ in 0..MAX_PAGES {
            let request = ListSandboxesRequest {
                stale: false,
                page_size: 0,
                page_token: token.clone(),
            };
            let page = self
                .endpoints
                .call("list_sandboxes", Repeat::Safe, |channel| {
                    let request = request.clone();
                    async move {
                        Ok(PoolAdminClient::new(channel)
                            .list_sandboxes(request)
                            .await?
                            .into_inner())
                    }
                })
                .await?
                .value;
            sandboxes.extend(page.sandboxes);
            if page.next_page_token.is_empty() {
                return Ok(sandboxes);
            }
            token = page.next_page_token;
        }
        Err(too_many_pages("sandbox list"))
    }

    /// One page of the pool status (linearizable): at most `page_size`
    /// records (0: the gateway's default) after `token`.
    async fn status_page(
        &self,
        operation: &'static str,
        page_size: u32,
        token: &str,
    ) -> Result<SupervisorPoolStatus> {
        let request = GetSupervisorPoolStatusRequest {
            stale: false,
            page_size,
            page_token: token.to_string(),
        };
        Ok(self
            .endpoints
            .call(operation, Repeat::Safe, |channel| {
                let request = request.clone();
                async move {
                    Ok(PoolAdminClient::new(channel)
                        .get_supervisor_pool_status(request)
                        .await?
                        .into_inner())
                }
            })
            .await?
            .value)
    }

    /// The pool's status: every member, operation and sandbox (all pages
    /// merged into one; the counts and ticks are the first page's).
    ///
    /// # Errors
    /// [`Error`]; [`Error::Refused`] past 1000 pages.
    pub async fn pool_status(&self) -> Result<SupervisorPoolStatus> {
        let mut status: Option<SupervisorPoolStatus> = None;
        let mut token = String::new();
        for _ in 0..MAX_PAGES {
            let page = self.status_page("pool_status", 0, &token).await?;
            token = page.next_page_token.clone();
            match &mut status {
                None => status = Some(page),
                Some(merged) => {
                    merged.members.extend(page.members);
                    merged.operations.extend(page.operations);
                    merged.sandboxes.extend(page.sandboxes);
                }
            }
            if token.is_empty() {
                return Ok(status
                    .map(|s| SupervisorPoolStatus {
                        next_page_token: String::new(),
                        ..s
                    })
                    .unwrap_or_default());
            }
        }
        Err(too_many_pages("pool status"))
    }

    /// Opens a pool watch (`PoolAdmin.WatchPool`): the whole pool, then
    /// what each applied batch changed, with a progress change every
    /// `progress` (zero: the gateway's 5 s). Only opening is retried; when
    /// the stream breaks, open another (its first changes carry the whole
    /// pool again, so nothing is missed).
    ///
    /// # Errors
    /// [`Error`] when no gateway opened it.
    pub async fn watch_pool(
        &self,
        progress: std::time::Duration,
    ) -> Result<Attempted<Streaming<PoolChange>>> {
        let request = WatchPoolRequest {
            stale: false,
            progress_interval_ms: u32::try_from(progress.as_millis()).unwrap_or(u32::MAX),
        };
        self.endpoints
            .call("watch_pool", Repeat::Safe, |channel| async move {
                Ok(PoolAdminClient::new(channel)
                    .watch_pool(request)
                    .await?
                    .into_inner())
            })
            .await
    }
}

/// What one gateway group can still take: its eligible members' free slots
/// (capacity less used), read from the members section of the pool status
/// (no sandbox record is read). Placement across cells weighs by it
/// ([`crate::cells`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Headroom {
    /// Free slots over the eligible members.
    pub free_slots: u64,
    /// Members that may take sandboxes now.
    pub eligible_members: u64,
    /// Every member, eligible or not.
    pub members: u64,
    /// Every sandbox.
    pub sandboxes: u64,
}

/// Records per page of a headroom read.
const HEADROOM_PAGE: u32 = 1000;

impl Client {
    /// The pool's [`Headroom`], reading the members section of the status
    /// page by page (linearizable) and stopping where it ends.
    ///
    /// # Errors
    /// [`Error`]; [`Error::Refused`] past 1000 pages.
    pub async fn headroom(&self) -> Result<Headroom> {
        let mut headroom = Headroom::default();
        let mut seen = 0u64;
        let mut token = String::new();
        for _ in 0..MAX_PAGES {
            let page = self
                .status_page("pool_headroom", HEADROOM_PAGE, &token)
                .await?;
            headroom.members = page.member_count;
            headroom.sandboxes = page.sandbox_count;
            for member in page.members.iter().filter(|m| m.eligible) {
                headroom.eligible_members += 1;
                headroom.free_slots += u64::from(member.capacity.saturating_sub(member.used));
            }
            seen += page.members.len() as u64;
            // Members come first; a page that reaches past them, or the
            // last page, ends the section.
            let past_members = !page.operations.is_empty() || !page.sandboxes.is_empty();
            if past_members || page.next_page_token.is_empty() || seen >= page.member_count {
                return Ok(headroom);
            }
            token = page.next_page_token;
        }
        Err(too_many_pages("pool status (members)"))
    }
}
