//! The workspace's binaries for end-to-end tests in any of its crates.
//!
//! One build per test process: `cargo build --workspace --exclude sim
//! --bins --tests` into the target directory of the running test
//! executable. It selects the packages and targets `scripts/test.sh`'s
//! `cargo test --workspace --exclude sim` builds, so dependencies are
//! resolved with the same features and nothing is compiled twice: without
//! `--tests` the dev-dependencies' features (jepsen's tokio `test-util`)
//! drop out and every workspace crate is built again beside the test
//! build's, about a minute and a half; a `-p <package>` build, or one with
//! `sim` selected (turmoil, kube's client), differs the same way. When the
//! test build already made the binaries it takes a fraction of a second,
//! and under `cargo test -p X` it brings other packages' binaries up to
//! date instead of running stale ones.
//! Only std.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `target/<profile>` of the running test executable
/// (`target/<profile>/deps/<test>`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_else(|| panic!("no target/<profile> above {}", exe.display()))
}

/// The workspace root (parent of every crate directory, this one's
/// included).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| panic!("no workspace above {}", env!("CARGO_MANIFEST_DIR")))
}

/// A `cargo` command (the one running the tests, `$CARGO`) without the
/// variables cargo sets for the running test's own package
/// (`CARGO_MANIFEST_DIR`, `CARGO_PKG_NAME`, ...). Build scripts declare some
/// of them with `rerun-if-env-changed` (ring's does), so a nested build that
/// inherited them would see them "changed" and rebuild ring and everything
/// above it: about a minute per test crate.
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        let Some(name) = name.to_str() else { continue };
        if PACKAGE_VARS.iter().any(|p| name.starts_with(p)) {
            cmd.env_remove(name);
        }
    }
    cmd
}

/// Prefixes of the variables cargo sets for a package's tests and build.
const PACKAGE_VARS: &[&str] = &[
    "CARGO_MANIFEST_",
    "CARGO_PKG_",
    "CARGO_CRATE_",
    "CARGO_BIN_",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "CARGO_CFG_",
    "OUT_DIR",
];

/// The workspace binary `name` (e.g. `openshell-gateway`), built up to date
/// once per test process.
pub fn workspace_bin(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let dir = profile_dir();
        let target = dir
            .parent()
            .unwrap_or_else(|| panic!("no target dir above {}", dir.display()));
        let mut cmd = cargo();
        cmd.current_dir(workspace_root())
            .args([
                "build",
                "--workspace",
                "--exclude",
                "sim",
                "--bins",
                "--tests",
            ])
            .arg("--target-dir")
            .arg(target);
        if dir.file_name().is_some_and(|p| p == "release") {
            cmd.arg("--release");
        }
        let status = cmd.status().unwrap_or_else(|e| {
            panic!("running cargo build --workspace --exclude sim --bins --tests: {e}")
        });
        assert!(
            status.success(),
            "cargo build --workspace --exclude sim --bins --tests failed: {status}"
        );
        dir
    });
    let bin = dir.join(name);
    assert!(bin.is_file(), "{} missing after the build", bin.display());
    bin
}

/// `openshell-gateway`, built up to date by the workspace build.
pub fn gateway_bin() -> PathBuf {
    workspace_bin("openshell-gateway")
}

/// `openshell-supervisor`, built up to date by the workspace build.
pub fn supervisor_bin() -> PathBuf {
    workspace_bin("openshell-supervisor")
}

/// `openshell-sandbox-runtime`, built up to date by the workspace build.
pub fn runtime_bin() -> PathBuf {
    workspace_bin("openshell-sandbox-runtime")
}
