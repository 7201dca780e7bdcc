//! A backup file is checked whole before anything is restored (issue 32
//! item 3), through real processes: gateway, `openshell-pool backup save`,
//! `openshell-gateway restore`.
//!
//! - given: one gateway holding objects and a put under a request id (so
//!   the state records the log index that applied it)
//! - when: `backup save FILE`
//! - then: FILE is mode 0600 and no `FILE.tmp` is left; `backup save DIR`
//!   for an existing directory fails naming it, and leaves no `DIR.tmp`
//! - when: the file is changed: a header digit edited in place; the header
//!   rewritten with index 18446744073709551615, with cluster id
//!   `"../../x\0"`, or with an index below the one the state records (the
//!   checksum recomputed, as a careful forger would); 1,000 bytes appended;
//!   its end cut off
//! - then: `restore` refuses each (rc 1) with the right word ("checksum
//!   mismatch", the field named, "records log index", "too long" with the
//!   1000 extra bytes, "truncated") and creates no data directory
//! - when: a format-1 file (written by the previous version: no trailer)
//! - then: `restore` refuses it naming `--accept-format-1`; with the flag it
//!   restores, and a gateway started on it serves the objects

mod common;

use std::path::Path;
use std::process::Command;

use common::cli::*;
use common::*;
use proto::objects::object_store_client::ObjectStoreClient;
use proto::objects::{precondition, Precondition, PutRequest};
use serde_json::Value;
use sha2::Digest;

/// Length of a format-2 trailer: `\nOSBACKUP2 sha256 `, 64 hex, newline.
const TRAILER_LEN: usize = 18 + 64 + 1;

/// The header (as JSON) and the state of a format-2 file.
fn parts(bytes: &[u8]) -> (Value, Vec<u8>) {
    let rest = bytes
        .strip_prefix(b"OSBACKUP2\n")
        .unwrap_or_else(|| panic!("not a format-2 file"));
    let newline = rest
        .iter()
        .position(|b| *b == b'\n')
        .unwrap_or_else(|| panic!("no header line"));
    let header = serde_json::from_slice(&rest[..newline]).unwrap_or_else(|e| panic!("{e}"));
    let state = rest[newline + 1..rest.len() - TRAILER_LEN].to_vec();
    (header, state)
}

/// A format-2 file of `header` and `state` with a correct checksum.
fn forged(header: &Value, state: &[u8]) -> Vec<u8> {
    let mut bytes = b"OSBACKUP2\n".to_vec();
    bytes.extend(header.to_string().as_bytes());
    bytes.push(b'\n');
    bytes.extend(state);
    let digest = sha2::Sha256::digest(&bytes);
    bytes.extend(b"\nOSBACKUP2 sha256 ");
    bytes.extend(hex_of(&digest).as_bytes());
    bytes.push(b'\n');
    bytes
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `openshell-gateway restore --from file --data-dir target [extra]`:
/// (exit code, stderr).
fn restore(file: &Path, target: &Path, advertise: &str, extra: &[&str]) -> (i32, String) {
    let mut cmd = Command::new(gateway_bin());
    cmd.args(["restore", "--from"])
        .arg(file)
        .args(["--advertise", advertise])
        .args(extra)
        .arg("--data-dir")
        .arg(target);
    run_to_end(cmd)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_or_misshapen_backup_is_refused_before_anything_is_written() -> TestResult {
    use std::os::unix::fs::PermissionsExt;
    let cluster = Cluster::start(1, &[]);
    cluster.wait_leader("bootstrap").await;
    let source = cluster.get(1);
    for i in 0..5 {
        put(source, &format!("k{i}"), &format!("value {i}")).await?;
    }
    ObjectStoreClient::new(test_channel(&source.addr, 500).await?)
        .put(PutRequest {
            object: Some(object("with-id", "v")),
            precondition: Some(Precondition {
                kind: Some(precondition::Kind::Unconditional(true)),
            }),
            request_id: "t80-request".into(),
        })
        .await?;
    put(source, "last", "v").await?;
    let scratch = tempfile::tempdir()?;

    eprintln!("--- step: backup save writes a 0600 file and no .tmp");
    let file = scratch.path().join("good.osbackup");
    let (code, _, err) = pool(
        &source.addr,
        &["backup", "save", &file.display().to_string()],
    );
    assert_eq!(code, 0, "backup save: {err}");
    let mode = std::fs::metadata(&file)?.permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "the backup is mode {mode:o}");
    assert!(!scratch.path().join("good.osbackup.tmp").exists());

    eprintln!("--- step: backup save onto an existing directory");
    let dir = scratch.path().join("backups");
    std::fs::create_dir(&dir)?;
    let (code, _, err) = pool(
        &source.addr,
        &["backup", "save", &dir.display().to_string()],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("is a directory"), "{err}");
    assert!(
        !scratch.path().join("backups.tmp").exists(),
        "backups.tmp was left behind"
    );
    assert_eq!(std::fs::read_dir(&dir)?.count(), 0);

    let good = std::fs::read(&file)?;
    let (header, state) = parts(&good);
    let index = header["index"].as_u64().ok_or("index")?;
    assert!(
        proto::backup::decode(&forged(&header, &state)).is_ok(),
        "the test forges files the reader accepts"
    );
    let with = |key: &str, value: Value| {
        let mut h = header.clone();
        h[key] = value;
        forged(&h, &state)
    };
    // One header digit changed in place: same length, checksum not redone.
    let needle = format!("\"index\":{index}");
    let other = if index % 10 == 9 {
        index - 1
    } else {
        index + 1
    };
    let at = good
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())
        .ok_or("no index in the header")?;
    let mut edited = good.clone();
    edited.splice(at..at + needle.len(), format!("\"index\":{other}").bytes());
    assert_eq!(edited.len(), good.len());
    let mut appended = good.clone();
    appended.extend(std::iter::repeat_n(b'x', 1000));
    let cases: Vec<(&str, Vec<u8>, String)> = vec![
        ("a header digit edited", edited, "checksum mismatch".into()),
        (
            "index 18446744073709551615",
            with("index", Value::from(u64::MAX)),
            "header: index 18446744073709551615 is out of range".into(),
        ),
        (
            "cluster id ../../x\\0",
            with("cluster_id", Value::from("../../x\0")),
            "header: invalid cluster_id".into(),
        ),
        (
            "an index below the state's",
            with("index", Value::from(1u64)),
            "records log index".into(),
        ),
        (
            "1,000 bytes appended",
            appended,
            "too long: the file is".into(),
        ),
        (
            "its end cut off",
            good[..good.len() - 10].to_vec(),
            "truncated: the file is".into(),
        ),
    ];
    for (what, bytes, expect) in cases {
        eprintln!("--- step: restore refuses a backup with {what}");
        let bad = scratch.path().join("bad.osbackup");
        std::fs::write(&bad, &bytes)?;
        let target = scratch.path().join("restored");
        let (code, err) = restore(&bad, &target, "127.0.0.1:7001", &[]);
        assert_eq!(code, 1, "{what}: {err}");
        assert!(err.contains(&expect), "{what}: {err}");
        assert!(!target.exists(), "{what}: {} was created", target.display());
        if what.starts_with("1,000") {
            assert!(err.contains("1000 more than"), "{err}");
            assert!(!err.contains("truncated"), "{err}");
        }
    }

    eprintln!("--- step: a format-1 file: refused, then restored with --accept-format-1");
    let mut old = b"OSBACKUP1\n".to_vec();
    old.extend(header.to_string().as_bytes());
    old.push(b'\n');
    old.extend(&state);
    let old_file = scratch.path().join("old.osbackup");
    std::fs::write(&old_file, &old)?;
    let root = tempfile::tempdir()?;
    let mut restored = Gateway::new(1, root.path(), Vec::new());
    let (code, err) = restore(&old_file, &restored.data_dir, &restored.addr, &[]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("format-1") && err.contains("--accept-format-1"),
        "{err}"
    );
    assert!(!restored.data_dir.exists());
    let flags = ["--accept-format-1", "--cluster-id", "test"];
    let (code, err) = restore(&old_file, &restored.data_dir, &restored.addr, &flags);
    assert_eq!(code, 0, "{err}");
    restored.start();
    let value = eventually("the restored gateway serves k3", || async {
        get(&restored, "k3", false).await
    })
    .await;
    assert_eq!(value.as_deref(), Some("value 3"));
    Ok(())
}
