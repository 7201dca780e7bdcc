//! The process driver's scope (`SandboxDriver::scope`): which runtimes a
//! driver sees, recorded with each runtime so that a launcher never judges
//! one lost from a list that could not show it (issue 27).
//!
//! - gateways sharing a directory share its scope, even when they start at
//!   the same moment; another directory has another scope
//! - the scope file is hidden from the list of runtimes
//! - a damaged scope file stops the driver at start, naming the file (one
//!   of any size: no more than an id's length is read)

use std::path::Path;

use sandbox_driver::process::{NetnsMode, ProcessConfig, ProcessDriver, SCOPE_FILE};
use sandbox_driver::{DriverError, SandboxDriver};

fn driver(dir: &Path) -> Result<ProcessDriver, DriverError> {
    ProcessDriver::new(ProcessConfig {
        dir: dir.to_path_buf(),
        runtime_bin: "/usr/local/bin/openshell-sandbox-runtime".into(),
        netns: NetnsMode::Off,
    })
}

#[tokio::test]
async fn one_directory_one_scope_and_another_directory_another() {
    let root = tempfile::tempdir().unwrap();
    let shared = root.path().join("runtimes");
    let first = driver(&shared).unwrap();
    let scope = first.scope().to_string();
    let id = scope.strip_prefix("process:").unwrap();
    assert_eq!(id.len(), 32, "{scope}");
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()), "{scope}");
    assert_eq!(driver(&shared).unwrap().scope(), scope, "a second driver");
    let elsewhere = driver(&root.path().join("elsewhere")).unwrap();
    assert_ne!(elsewhere.scope(), scope);
    assert!(
        first.list().await.unwrap().is_empty(),
        "the scope file is not a runtime"
    );
    let files: Vec<String> = std::fs::read_dir(&shared)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        files,
        vec![SCOPE_FILE.to_string()],
        "no temporary file left"
    );
}

#[test]
fn drivers_starting_at_once_on_a_new_directory_agree_on_one_scope() {
    for _ in 0..20 {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("runtimes");
        std::fs::create_dir(&dir).unwrap();
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
        let scopes: Vec<String> = (0..8)
            .map(|_| {
                let (dir, barrier) = (dir.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    driver(&dir).unwrap().scope().to_string()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        assert!(scopes.iter().all(|s| s == &scopes[0]), "{scopes:?}");
    }
}

#[test]
fn a_damaged_scope_file_stops_the_driver_naming_the_file() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("runtimes");
    std::fs::create_dir(&dir).unwrap();
    // A megabyte of hex digits: read no further than an id's length.
    let huge = "0".repeat(1 << 20);
    for damaged in [
        "",
        "not hex at all",
        "0123456789abcdef",
        "g123456789abcdef0123456789abcdef",
        &huge,
    ] {
        std::fs::write(dir.join(SCOPE_FILE), damaged).unwrap();
        let error = driver(&dir).unwrap_err().to_string();
        assert!(
            error.contains(SCOPE_FILE) && error.contains("scope id"),
            "{damaged:.40?}: {error}"
        );
    }
}
