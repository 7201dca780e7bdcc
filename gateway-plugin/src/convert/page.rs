//! Keyset pagination of the pool's operator reads: `ListSandboxes` (sandboxes
//! by id) and `GetSupervisorPoolStatus` (members, then operations, then
//! sandboxes, each by id, as one sequence). Page tokens are
//! [`raft_store::page_token`]'s, the codec the object store's lists use.
//!
//! A status page walks the keys `m/<member>`, `o/<operation>`,
//! `s/<sandbox>` (in that order, which is also their byte order), so one
//! token names a position in all three. The whole counts stay in every page.

use std::collections::BTreeMap;
use std::ops::Bound;

use pool::PoolState;
use proto::pool_admin::{ListSandboxesResponse, PoolMember, SupervisorPoolStatus};
use tonic::Status;

use super::to_proto;

/// Records per page when the request asks for 0.
pub const DEFAULT_PAGE_SIZE: u32 = 500;
/// Largest page a request may ask for.
pub const MAX_PAGE_SIZE: u32 = 5000;

/// Section prefixes of a status page's keys, in walking order.
const MEMBERS: &str = "m/";
const OPERATIONS: &str = "o/";
const SANDBOXES: &str = "s/";

/// A checked page request: how many records, after which key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageRequest {
    /// Records in the page (1..=[`MAX_PAGE_SIZE`]).
    pub size: usize,
    /// The key the previous page ended with; `None` for the first page.
    pub after: Option<String>,
}

impl PageRequest {
    /// Checks `page_size` (0: [`DEFAULT_PAGE_SIZE`]) and `page_token`.
    ///
    /// # Errors
    /// `INVALID_ARGUMENT` naming `page_size` or `page_token`.
    pub fn new(page_size: u32, page_token: &str) -> Result<Self, Status> {
        let size = match page_size {
            0 => DEFAULT_PAGE_SIZE,
            n if n <= MAX_PAGE_SIZE => n,
            n => {
                return Err(Status::invalid_argument(format!(
                    "page_size {n} is over the limit {MAX_PAGE_SIZE} (0 means {DEFAULT_PAGE_SIZE})"
                )))
            }
        };
        let after = raft_store::page_token::decode(page_token)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        Ok(PageRequest {
            size: size as usize,
            after,
        })
    }
}

/// Up to `size` entries of `map` after `after` (by key), and whether any
/// entry follows them.
fn keyset<'a, V>(
    map: &'a BTreeMap<String, V>,
    after: Option<&str>,
    size: usize,
) -> (Vec<(&'a String, &'a V)>, bool) {
    let start = after.map_or(Bound::Unbounded, Bound::Excluded);
    let mut range = map.range::<str, _>((start, Bound::Unbounded));
    let page: Vec<_> = range.by_ref().take(size).collect();
    let more = range.next().is_some();
    (page, more)
}

/// One page of `ListSandboxes`.
pub fn sandboxes(state: &PoolState, page: &PageRequest) -> ListSandboxesResponse {
    let (items, more) = keyset(state.sandboxes(), page.after.as_deref(), page.size);
    let next_page_token = match items.last() {
        Some((id, _)) if more => raft_store::page_token::encode(id),
        _ => String::new(),
    };
    ListSandboxesResponse {
        sandboxes: items
            .into_iter()
            .map(|(_, s)| to_proto::sandbox(state, s))
            .collect(),
        next_page_token,
    }
}

/// Where a section starts for a status page that continues after `after`:
/// `None` when the whole section lies before it, else the id to start
/// after (`None` inside: from the section's start).
fn section_start<'a>(after: Option<&'a str>, prefix: &str) -> Option<Option<&'a str>> {
    match after {
        None => Some(None),
        Some(key) => match key.strip_prefix(prefix) {
            Some(id) => Some(Some(id)),
            // Keys of an earlier section sort before this prefix.
            None if key < prefix => Some(None),
            None => None,
        },
    }
}

/// One page of `GetSupervisorPoolStatus` at `applied_index`: the records of
/// members, operations and sandboxes after the page's position, at most
/// `page.size` of them together; the counts are whole.
pub fn pool_status(
    state: &PoolState,
    applied_index: u64,
    page: &PageRequest,
) -> SupervisorPoolStatus {
    let mut status = to_proto::pool_status_header(state, applied_index);
    let after = page.after.as_deref();
    let mut left = page.size;
    let mut last: Option<String> = None;
    let mut more = false;
    if let Some(start) = section_start(after, MEMBERS) {
        let (items, rest) = keyset(state.members(), start, left);
        left -= items.len();
        more |= rest;
        last = items
            .last()
            .map(|(id, _)| format!("{MEMBERS}{id}"))
            .or(last);
        status.members = items
            .into_iter()
            .map(|(_, m)| member(state, m))
            .collect::<Vec<PoolMember>>();
    }
    if let Some(start) = section_start(after, OPERATIONS) {
        let (items, rest) = keyset(state.operations(), start, left);
        left -= items.len();
        more |= rest;
        last = items
            .last()
            .map(|(id, _)| format!("{OPERATIONS}{id}"))
            .or(last);
        status.operations = items
            .into_iter()
            .map(|(_, o)| to_proto::operation(o))
            .collect();
    }
    if let Some(start) = section_start(after, SANDBOXES) {
        let (items, rest) = keyset(state.sandboxes(), start, left);
        more |= rest;
        last = items
            .last()
            .map(|(id, _)| format!("{SANDBOXES}{id}"))
            .or(last);
        status.sandboxes = items
            .into_iter()
            .map(|(_, s)| to_proto::sandbox(state, s))
            .collect();
    }
    status.next_page_token = match last {
        Some(key) if more => raft_store::page_token::encode(&key),
        _ => String::new(),
    };
    status
}

/// A member's operator view.
fn member(state: &PoolState, m: &pool::Member) -> PoolMember {
    to_proto::pool_member(&pool::MemberView {
        member: m.clone(),
        ticks_since_heartbeat: state.now_tick().saturating_sub(m.last_heartbeat_tick),
        eligible: state.is_eligible(m),
    })
}
