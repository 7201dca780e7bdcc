//! A backup file (`proto::backup`, what `openshell-gateway restore` reads):
//! magic, JSON header line, state bytes checked by length and crc32.
//! `proto::backup::decode`, the decoder `read` calls on the file's bytes.

/// Runs one input.
pub fn run(data: &[u8]) {
    let result = proto::backup::decode(data);
    if let Ok((header, state)) = result {
        assert_eq!(
            header.bytes,
            state.len() as u64,
            "a backup read with a state of another length than its header says"
        );
        assert!(
            state.len() <= data.len(),
            "backup state longer than its file"
        );
    }
}
