//! Writes for test steps that only need the data written, through whatever
//! elections a loaded machine causes.

use std::time::Duration;

use proto::objects::object_store_client::ObjectStoreClient;
use proto::objects::{Object, PutRequest};
use tonic::transport::Channel;

/// Puts `object` through `client` under the request id `request_id`, and
/// puts it again under the same id after an answer that leaves the outcome
/// open or names no leader (`Unknown`, `Unavailable`: a leader change), at
/// most 50 times, 200 ms apart. The request id makes the retry exactly
/// once. For steps that only need the data written through whatever
/// elections the machine causes (every gateway of a loaded 2-core machine
/// stalls for a second or more at times, and raft then rightly elects
/// again), never for a test of what a client sees during a leader change.
pub async fn put_through_elections(
    client: &mut ObjectStoreClient<Channel>,
    object: Object,
    request_id: &str,
) -> Result<(), tonic::Status> {
    let mut attempts = 0;
    loop {
        let put = client
            .put(PutRequest {
                object: Some(object.clone()),
                precondition: None,
                request_id: request_id.to_string(),
            })
            .await;
        match put {
            Ok(_) => return Ok(()),
            Err(status)
                if attempts < 50
                    && matches!(
                        status.code(),
                        tonic::Code::Unknown | tonic::Code::Unavailable
                    ) =>
            {
                eprintln!("put {request_id} again after: {}", status.message());
                attempts += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(status) => return Err(status),
        }
    }
}
