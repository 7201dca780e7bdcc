//! Tests that need root (network namespaces, nftables, mounts): a skip that
//! is counted, never silent.

/// True when running as root.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// True (the test should return at once) when not running as root: says so
/// and appends `test` to the file `$OPENSHELL_SKIP_LOG` names, if any, so
/// `scripts/test.sh` counts the skip instead of passing it silently.
pub fn skip_without_root(test: &str) -> bool {
    if is_root() {
        return false;
    }
    eprintln!("skipped: {test} needs root");
    if let Some(path) = std::env::var_os("OPENSHELL_SKIP_LOG") {
        use std::io::Write;
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| writeln!(f, "{test}"));
        if let Err(e) = appended {
            eprintln!("could not note the skip in {}: {e}", path.to_string_lossy());
        }
    }
    true
}
