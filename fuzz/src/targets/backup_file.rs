//! A backup file (`proto::backup`, what `openshell-gateway restore` reads):
//! magic, JSON header line, state bytes checked by length and crc32.
//! Until `proto::backup::decode(&[u8])` exists the target goes through
//! `read` on a scratch file ([`super::scratch_file`]).

/// Runs one input.
pub fn run(data: &[u8]) {
    let path = super::scratch_file("backup", data);
    let result = proto::backup::read(&path);
    let _ = std::fs::remove_file(&path);
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
