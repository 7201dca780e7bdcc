//! raft-store's snapshot file (`current.snap`,
//! `raft_store::state_machine::decode_snapshot_file`): header, metadata
//! length, metadata, data length, data, crc32.
//!
//! Selector (first byte): even, the rest of the input is the file; odd, the
//! rest is the file without its last 4 bytes and the harness appends the
//! right crc32, so the fuzzer reaches the length fields behind the
//! checksum (a damaged file whose checksum still matches: a bug in the
//! writer, or a file crafted on purpose).

use raft_store::state_machine::decode_snapshot_file;

/// Runs one input.
pub fn run(data: &[u8]) {
    let (selector, bytes) = super::split(data);
    if selector % 2 == 0 {
        decode(bytes);
    } else {
        let mut file = bytes.to_vec();
        file.extend_from_slice(&crc32fast::hash(bytes).to_le_bytes());
        decode(&file);
    }
}

fn decode(file: &[u8]) {
    if let Ok((_meta, data)) = decode_snapshot_file(file) {
        // The data is a slice of the file: never longer than it.
        assert!(
            data.len() <= file.len(),
            "snapshot data longer than its file"
        );
    }
}
