//! Scenario 42: `openshell-supervisor --check-config` validates what a
//! start would (flags, the credential file, the trusted grant keys file,
//! the CA) without binding a port or dialling a gateway.
//!
//! - given: a CA, a credential file and a trusted grant keys file, as the
//!   chart mounts them; gateways that do not exist; a health port in use
//! - when: the binary runs with `--check-config`
//! - then: a valid configuration prints one line
//!   `openshell-supervisor: configuration ok (member ...)` and exits 0; each
//!   broken file or flag exits 1 with the one-line error a real start
//!   gives, naming the flag.

use std::process::Command;

use testkit::bins::supervisor_bin;
use testkit::secure::{random_hex, Material};

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Runs the supervisor with `args`; returns (exit code, stdout, stderr).
fn run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(supervisor_bin())
        .args(args)
        .env_remove("OPENSHELL_GATEWAYS")
        .output()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn check_config_validates_files_without_binding_or_dialling() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let material = Material::generate(dir.path());
    let signer =
        proto::grant::GrantSigner::from_seed_hex(&random_hex().unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
    let keys = dir.path().join("trusted-grant-keys");
    std::fs::write(
        &keys,
        format!("# cluster key\n{}\n", signer.public_key_hex()),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let credential = dir.path().join("credential");
    std::fs::write(&credential, "member-credential-0123456789\n").unwrap_or_else(|e| panic!("{e}"));
    // A health port in use: a real start would fail to bind it.
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
    let http = busy
        .local_addr()
        .unwrap_or_else(|e| panic!("{e}"))
        .to_string();
    let ca = material.ca.cert.display().to_string();
    let keys_s = keys.display().to_string();
    let cred_s = credential.display().to_string();
    let base = |ca: &str, keys: &str, cred: &str| -> Vec<String> {
        [
            "--check-config",
            "--gateways",
            "gw-0.example.invalid:7000,gw-1.example.invalid:7000",
            "--pool-member-id",
            "sup-7f9c",
            "--pool-member-uid",
            "uid-1",
            "--pool-advertise-ip",
            "10.0.0.7",
            "--http-listen",
            &http,
            "--tls-ca-file",
            ca,
            "--trusted-grant-keys-file",
            keys,
            "--credential-file",
            cred,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };

    eprintln!("--- step: a valid secure configuration");
    let (code, stdout, stderr) = run(&args(&base(&ca, &keys_s, &cred_s)));
    assert_eq!(code, 0, "stdout: {stdout} stderr: {stderr}");
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    assert!(
        stdout.starts_with(
            "openshell-supervisor: configuration ok (member sup-7f9c, 2 gateway(s), TLS, "
        ) && stdout.contains("drain on stop within 25000 ms"),
        "{stdout}"
    );
    assert!(!stdout.contains("member-credential"), "{stdout}");

    eprintln!("--- step: each broken file names its flag");
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap_or_else(|e| panic!("{e}"));
    let garbage = garbage.display().to_string();
    let missing = dir.path().join("missing").display().to_string();
    for (what, argv, flag) in [
        (
            "a CA that is no PEM",
            base(&garbage, &keys_s, &cred_s),
            "--tls-ca-file",
        ),
        (
            "a missing CA",
            base(&missing, &keys_s, &cred_s),
            "--tls-ca-file",
        ),
        (
            "trusted keys that are no keys",
            base(&ca, &garbage, &cred_s),
            "--trusted-grant-keys-file",
        ),
        (
            "a missing credential file",
            base(&ca, &keys_s, &missing),
            "--credential-file",
        ),
    ] {
        let (code, stdout, stderr) = run(&args(&argv));
        assert_eq!(code, 1, "{what}: stdout {stdout} stderr {stderr}");
        assert!(stdout.is_empty(), "{what}: {stdout}");
        let line = stderr.trim();
        assert_eq!(line.lines().count(), 1, "{what}: {stderr}");
        assert!(
            line.starts_with("openshell-supervisor: ") && line.contains(flag),
            "{what}: {line}"
        );
    }

    eprintln!("--- step: a bad flag, and the drain timeout");
    let mut argv = base(&ca, &keys_s, &cred_s);
    argv.extend(["--drain-timeout-ms".into(), "99999999".into()]);
    let (code, _, stderr) = run(&args(&argv));
    assert_eq!(code, 1);
    assert!(
        stderr
            .trim()
            .starts_with("openshell-supervisor: --drain-timeout-ms"),
        "{stderr}"
    );
    let mut argv = base(&ca, &keys_s, &cred_s);
    argv.extend(["--no-drain-on-stop".into()]);
    let (code, stdout, _) = run(&args(&argv));
    assert_eq!(code, 0);
    assert!(stdout.contains("no drain on stop"), "{stdout}");
    let mut argv = base(&ca, &keys_s, &cred_s);
    argv[8] = "not-an-ip".into();
    let (code, _, stderr) = run(&args(&argv));
    assert_eq!(code, 1);
    assert!(stderr.contains("--pool-advertise-ip"), "{stderr}");
    drop(busy);
}
