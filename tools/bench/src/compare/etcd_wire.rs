//! The few messages of etcd's v3 KV service the bench calls (`Range`, `Put`,
//! `Txn`), declared by hand with prost, field numbers and names as in etcd
//! 3.4's `etcdserverpb/rpc.proto` and `mvccpb/kv.proto`. The `etcd-client`
//! crate generates them at build time with a system `protoc`, which this
//! workspace does not require (proto/ uses a vendored one); unused fields are
//! left out, which protobuf allows in both directions.

use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;

/// `etcdserverpb.ResponseHeader`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ResponseHeader {
    #[prost(uint64, tag = "1")]
    pub cluster_id: u64,
    #[prost(uint64, tag = "2")]
    pub member_id: u64,
    /// The store's revision when the request was applied (for a write: the
    /// revision it created).
    #[prost(int64, tag = "3")]
    pub revision: i64,
    #[prost(uint64, tag = "4")]
    pub raft_term: u64,
}

/// `mvccpb.KeyValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(int64, tag = "2")]
    pub create_revision: i64,
    #[prost(int64, tag = "3")]
    pub mod_revision: i64,
    #[prost(int64, tag = "4")]
    pub version: i64,
    #[prost(bytes = "vec", tag = "5")]
    pub value: Vec<u8>,
}

/// `etcdserverpb.RangeRequest` (one key, linearizable).
#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
}

/// `etcdserverpb.RangeResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RangeResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(message, repeated, tag = "2")]
    pub kvs: Vec<KeyValue>,
}

/// `etcdserverpb.PutRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PutRequest {
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// `etcdserverpb.PutResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PutResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
}

/// `etcdserverpb.Compare.CompareResult::EQUAL`.
pub const COMPARE_EQUAL: i32 = 0;
/// `etcdserverpb.Compare.CompareTarget::MOD`.
pub const TARGET_MOD: i32 = 2;

/// `etcdserverpb.Compare` with its `mod_revision` target.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Compare {
    #[prost(int32, tag = "1")]
    pub result: i32,
    #[prost(int32, tag = "2")]
    pub target: i32,
    #[prost(bytes = "vec", tag = "3")]
    pub key: Vec<u8>,
    /// `target_union.mod_revision` (a oneof member is an optional field on
    /// the wire; this one is always set).
    #[prost(int64, optional, tag = "6")]
    pub mod_revision: Option<i64>,
}

/// `etcdserverpb.RequestOp` with its `request_put` member.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RequestOp {
    #[prost(message, optional, tag = "2")]
    pub request_put: Option<PutRequest>,
}

/// `etcdserverpb.TxnRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnRequest {
    #[prost(message, repeated, tag = "1")]
    pub compare: Vec<Compare>,
    #[prost(message, repeated, tag = "2")]
    pub success: Vec<RequestOp>,
    #[prost(message, repeated, tag = "3")]
    pub failure: Vec<RequestOp>,
}

/// `etcdserverpb.TxnResponse` (the per-op responses are not read).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TxnResponse {
    #[prost(message, optional, tag = "1")]
    pub header: Option<ResponseHeader>,
    #[prost(bool, tag = "2")]
    pub succeeded: bool,
}

/// A client of the `etcdserverpb.KV` service on one channel.
#[derive(Clone)]
pub struct KvClient {
    grpc: tonic::client::Grpc<Channel>,
}

impl KvClient {
    /// A client on `channel`.
    pub fn new(channel: Channel) -> KvClient {
        KvClient {
            grpc: tonic::client::Grpc::new(channel),
        }
    }

    async fn unary<Q, R>(&mut self, path: &'static str, request: Q) -> Result<R, tonic::Status>
    where
        Q: prost::Message + Send + Sync + 'static,
        R: prost::Message + Default + Send + Sync + 'static,
    {
        self.grpc
            .ready()
            .await
            .map_err(|e| tonic::Status::unavailable(format!("etcd channel not ready: {e}")))?;
        let codec = tonic_prost::ProstCodec::<Q, R>::default();
        let reply = self
            .grpc
            .unary(
                tonic::Request::new(request),
                PathAndQuery::from_static(path),
                codec,
            )
            .await?;
        Ok(reply.into_inner())
    }

    /// `KV/Range` of one key (linearizable).
    ///
    /// # Errors
    /// The gRPC status.
    pub async fn range(&mut self, key: Vec<u8>) -> Result<RangeResponse, tonic::Status> {
        self.unary("/etcdserverpb.KV/Range", RangeRequest { key })
            .await
    }

    /// `KV/Put`.
    ///
    /// # Errors
    /// The gRPC status.
    pub async fn put(
        &mut self,
        key: Vec<u8>,
        value: Vec<u8>,
    ) -> Result<PutResponse, tonic::Status> {
        self.unary("/etcdserverpb.KV/Put", PutRequest { key, value })
            .await
    }

    /// `KV/Txn`: if `key`'s `mod_revision == expected` then put `value`.
    ///
    /// # Errors
    /// The gRPC status.
    pub async fn cas(
        &mut self,
        key: Vec<u8>,
        expected: i64,
        value: Vec<u8>,
    ) -> Result<TxnResponse, tonic::Status> {
        let request = TxnRequest {
            compare: vec![Compare {
                result: COMPARE_EQUAL,
                target: TARGET_MOD,
                key: key.clone(),
                mod_revision: Some(expected),
            }],
            success: vec![RequestOp {
                request_put: Some(PutRequest { key, value }),
            }],
            failure: Vec::new(),
        };
        self.unary("/etcdserverpb.KV/Txn", request).await
    }
}
