//! Acknowledged writes never live in a sled blob file.
//!
//! sled 0.34 writes any page over a quarter of its segment size to its own
//! file under `raft/blobs/` and never syncs it; an entry in such a page could
//! be acknowledged while it lived only in the page cache. The store bounds
//! commands and batch entries in bytes and creates databases with a segment
//! size whose blob threshold no log page reaches.
//!
//! - given: a one-node store on a fresh data directory (real sled files)
//! - when: 64 concurrent writers put 30 KB objects (the largest payload class
//!   users send), batched by the leader
//! - then: every write is acknowledged, and `raft/blobs/` holds no file

mod common;

use std::path::Path;

use prost::Message;
use raft_store::objects::{object_command, Object, ObjectCommand, PutRequest};

const WRITERS: usize = 64;
const WRITES_PER_WRITER: usize = 12;
const PAYLOAD_BYTES: usize = 30 * 1024;

fn put(writer: usize, n: usize) -> Vec<u8> {
    // Distinct, incompressible-looking payloads: sled does not compress, but
    // nothing here should depend on that.
    let payload: Vec<u8> = (0..PAYLOAD_BYTES)
        .map(|i| (i.wrapping_mul(31) ^ writer.wrapping_mul(7) ^ n) as u8)
        .collect();
    ObjectCommand {
        op: Some(object_command::Op::Put(PutRequest {
            object: Some(Object {
                id: format!("w{writer}-{n}"),
                r#type: "blob-test".into(),
                payload,
                ..Default::default()
            }),
            precondition: None,
            request_id: String::new(),
        })),
    }
    .encode_to_vec()
}

fn blob_files(data_dir: &Path) -> Vec<String> {
    match std::fs::read_dir(data_dir.join("raft").join("blobs")) {
        Ok(entries) => entries
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_concurrent_writes_leave_no_blob_file() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let node = common::one_voter(dir.path(), "blob-test").await?;

    eprintln!("--- step: {WRITERS} writers x {WRITES_PER_WRITER} puts of {PAYLOAD_BYTES} bytes");
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let node = node.clone();
        writers.push(tokio::spawn(async move {
            for n in 0..WRITES_PER_WRITER {
                node.write(put(w, n)).await?;
            }
            Ok::<_, raft_store::WriteError>(())
        }));
    }
    for writer in writers {
        writer.await??;
    }
    let applied = node.status().applied_index;
    eprintln!("--- step: all acknowledged, applied index {applied}");
    assert!(
        applied >= 2 && applied < (WRITERS * WRITES_PER_WRITER) as u64,
        "writes were not batched (applied index {applied})"
    );

    let blobs = blob_files(dir.path());
    assert!(
        blobs.is_empty(),
        "acknowledged entries landed in sled blob files: {blobs:?}"
    );
    node.shutdown().await;
    Ok(())
}
