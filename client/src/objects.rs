//! The object-store calls: [`Client::get`], [`Client::put`],
//! [`Client::delete`], [`Client::list`], [`Client::list_page`].
//!
//! Reads are linearizable (read-index on the gateway that serves them).
//! Writes carry a fresh request id, the same on every retry.

use proto::objects::object_store_client::ObjectStoreClient;
use proto::objects::{
    precondition, DeleteRequest, DeleteResponse, GetRequest, ListRequest, ListResponse, Object,
    Precondition, PutRequest, PutResponse,
};
use tonic::Code;

use crate::error::{Error, Result};
use crate::retry::Repeat;
use crate::{new_request_id, Client, Written};

/// The precondition of a put or delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    /// Always applies.
    Always,
    /// Applies only if no object with this (type, id) exists.
    MustCreate,
    /// Applies only if the object exists at exactly this resource version
    /// (compare-and-swap).
    MatchResourceVersion(u64),
}

impl Condition {
    fn to_proto(self) -> Precondition {
        let kind = match self {
            Condition::Always => precondition::Kind::Unconditional(true),
            Condition::MustCreate => precondition::Kind::MustCreate(true),
            Condition::MatchResourceVersion(rv) => precondition::Kind::MatchResourceVersion(rv),
        };
        Precondition { kind: Some(kind) }
    }
}

/// The most pages [`Client::list`] follows (with the default page size of
/// 100, 100 000 objects): a bound against a token that never ends.
const MAX_LIST_PAGES: usize = 1000;

impl Client {
    /// The object `(object_type, id)`, or `None` when it does not exist.
    ///
    /// # Errors
    /// [`Error`] (`NOT_FOUND` is `Ok(None)`).
    pub async fn get(&self, object_type: &str, id: &str) -> Result<Option<Object>> {
        let request = GetRequest {
            r#type: object_type.to_string(),
            id: id.to_string(),
            stale: false,
        };
        let got = self
            .endpoints
            .call("get", Repeat::Safe, |channel| {
                let request = request.clone();
                async move {
                    match ObjectStoreClient::new(channel).get(request).await {
                        Ok(reply) => Ok(reply.into_inner().object),
                        Err(status) if status.code() == Code::NotFound => Ok(None),
                        Err(status) => Err(status),
                    }
                }
            })
            .await?;
        Ok(got.value)
    }

    /// Stores `object` if `condition` holds. One request id for every
    /// attempt: retried after a lost answer, it never applies twice.
    ///
    /// # Errors
    /// [`Error::Conflict`] for a failed compare-and-swap,
    /// [`Error::AlreadyExists`] for a failed must-create, [`Error::NotFound`]
    /// for a compare-and-swap on an absent object,
    /// [`Error::DeadlineExceeded`] when no attempt answered in time.
    pub async fn put(&self, object: Object, condition: Condition) -> Result<Written<PutResponse>> {
        let request = PutRequest {
            object: Some(object),
            precondition: Some(condition.to_proto()),
            request_id: new_request_id()?,
        };
        self.endpoints
            .write(
                "put",
                request.request_id.clone(),
                request,
                |channel, request| async move {
                    let answer = ObjectStoreClient::new(channel)
                        .put(request)
                        .await?
                        .into_inner();
                    let replayed = answer.replayed;
                    Ok((answer, replayed))
                },
            )
            .await
    }

    /// Deletes `(object_type, id)` if `condition` holds, with one request id
    /// for every attempt.
    ///
    /// # Errors
    /// As [`Client::put`]; deleting an absent object is
    /// [`Error::NotFound`].
    pub async fn delete(
        &self,
        object_type: &str,
        id: &str,
        condition: Condition,
    ) -> Result<Written<DeleteResponse>> {
        let request = DeleteRequest {
            r#type: object_type.to_string(),
            id: id.to_string(),
            precondition: Some(condition.to_proto()),
            request_id: new_request_id()?,
        };
        self.endpoints
            .write(
                "delete",
                request.request_id.clone(),
                request,
                |channel, request| async move {
                    let answer = ObjectStoreClient::new(channel)
                        .delete(request)
                        .await?
                        .into_inner();
                    let replayed = answer.replayed;
                    Ok((answer, replayed))
                },
            )
            .await
    }

    /// One page of the objects of `object_type` (and `scope`, unless
    /// empty) after `page_token` (empty: the first page).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad page size or token.
    pub async fn list_page(
        &self,
        object_type: &str,
        scope: &str,
        page_size: u32,
        page_token: &str,
    ) -> Result<ListResponse> {
        let request = ListRequest {
            r#type: object_type.to_string(),
            scope: scope.to_string(),
            page_size,
            page_token: page_token.to_string(),
            stale: false,
        };
        let page = self
            .endpoints
            .call("list", Repeat::Safe, |channel| {
                let request = request.clone();
                async move {
                    Ok(ObjectStoreClient::new(channel)
                        .list(request)
                        .await?
                        .into_inner())
                }
            })
            .await?;
        Ok(page.value)
    }

    /// Every object of `object_type` (and `scope`, unless empty), in id
    /// order, page by page (each page is one linearizable read; the whole
    /// list is not one snapshot).
    ///
    /// # Errors
    /// As [`Client::list_page`]; [`Error::Refused`] past
    /// 1000 pages.
    pub async fn list(&self, object_type: &str, scope: &str) -> Result<Vec<Object>> {
        let mut objects = Vec::new();
        let mut token = String::new();
        for _ in 0..MAX_LIST_PAGES {
            let page = self.list_page(object_type, scope, 0, &token).await?;
            objects.extend(page.objects);
            if page.next_page_token.is_empty() {
                return Ok(objects);
            }
            token = page.next_page_token;
        }
        Err(Error::Refused {
            endpoint: String::new(),
            code: Code::OutOfRange,
            message: format!("the list did not end within {MAX_LIST_PAGES} pages"),
        })
    }
}
