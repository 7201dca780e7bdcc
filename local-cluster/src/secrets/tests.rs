use super::*;

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or(0)
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn random_hex_is_64_fresh_hex_characters() {
    let a = random_hex().unwrap_or_else(|e| panic!("{e}"));
    let b = random_hex().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        a.len() == 64 && a.chars().all(|c| c.is_ascii_hexdigit()),
        "{a}"
    );
    assert_ne!(a, b);
}

#[test]
fn material_is_generated_once_private_and_reused() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let tls = dir.path().join("tls");
    let first = Secrets::prepare(&tls, "test CA", &["s1", "s2"]).unwrap_or_else(|e| panic!("{e}"));
    let gateway = first
        .gateway_cert("gateway-3", &loopback_names())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(mode(&tls), 0o700);
    for secret in [
        &first.signing_key,
        &first.admin_token_file,
        &first.member_credentials,
        &first.credential_file("s2"),
        &gateway.key,
        &tls.join("ca.key"),
    ] {
        assert_eq!(mode(secret), 0o600, "{}", secret.display());
    }
    let key = read(&first.signing_key);
    assert!(
        key.len() == 64 && key.chars().all(|c| c.is_ascii_hexdigit()),
        "{key}"
    );
    let files = |s: &Secrets, g: &Issued| {
        [s.ca_file(), &g.cert, &s.admin_token_file]
            .iter()
            .map(|p| std::fs::read(p).unwrap_or_default())
            .collect::<Vec<_>>()
    };
    let before = files(&first, &gateway);
    let again = Secrets::prepare(&tls, "test CA", &["s1", "s2"]).unwrap_or_else(|e| panic!("{e}"));
    let gateway_again = again
        .gateway_cert("gateway-3", &loopback_names())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        before,
        files(&again, &gateway_again),
        "a second run reuses the material"
    );
    assert_eq!(again.admin_token(), first.admin_token());
    let listed = read(&again.member_credentials);
    let s1 = read(&again.credential_file("s1"));
    assert!(listed.contains(&format!("s1 {s1}\n")), "{listed}");
    assert_eq!(again.credential("s1"), Some(s1.as_str()));
    let trusted = read(&again.trusted_keys);
    assert!(
        proto::grant::parse_trusted_keys(&trusted).is_ok(),
        "{trusted}"
    );
}

#[test]
fn each_member_has_its_own_credential_and_nothing_leaks_in_debug() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let members = ["s1".to_string(), "s2".to_string()];
    let s = Secrets::prepare(dir.path(), "test CA", &members).unwrap_or_else(|e| panic!("{e}"));
    let issued = s
        .gateway_cert("n1", &["10.211.3.11".to_string()])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(mode(&issued.key), 0o600);
    let listing = read(&s.member_credentials);
    for m in &members {
        let text = read(&s.credential_file(m));
        assert_eq!(Some(text.as_str()), s.credential(m));
        assert!(listing.contains(&format!("{m} {text}\n")), "{listing}");
    }
    assert_ne!(s.credential("s1"), s.credential("s2"));
    assert_eq!(s.credential("s3"), None);
    assert_eq!(s.members().collect::<Vec<_>>(), ["s1", "s2"]);
    let debug = format!("{s:?}");
    assert!(!debug.contains(s.admin_token()), "{debug}");
    for m in &members {
        let credential = s.credential(m).unwrap_or_default();
        assert!(!debug.contains(credential), "{debug}");
    }
    assert!(s.client_tls().is_ok());
}

#[test]
fn a_damaged_secret_file_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.path().join(SIGNING_KEY_FILE), "not hex\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let err = Secrets::prepare(dir.path(), "test CA", &[] as &[&str])
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains(SIGNING_KEY_FILE), "{err}");
}

#[test]
fn gateway_and_supervisor_flags_name_the_files() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let s = Secrets::prepare(dir.path(), "test CA", &["s1"]).unwrap_or_else(|e| panic!("{e}"));
    let issued = s
        .gateway_cert("gateway-1", &loopback_names())
        .unwrap_or_else(|e| panic!("{e}"));
    let value = |flags: &[String], flag: &str| {
        let at = flags.iter().position(|f| f == flag);
        at.and_then(|i| flags.get(i + 1)).cloned()
    };
    let shown = |p: &Path| Some(p.display().to_string());
    let listed = s.gateway_flags(&issued, Members::Listed);
    assert_eq!(value(&listed, "--tls-cert-file"), shown(&issued.cert));
    assert_eq!(value(&listed, "--tls-key-file"), shown(&issued.key));
    assert_eq!(value(&listed, "--tls-ca-file"), shown(s.ca_file()));
    assert_eq!(value(&listed, "--signing-key-file"), shown(&s.signing_key));
    assert_eq!(
        value(&listed, "--admin-token-file"),
        shown(&s.admin_token_file)
    );
    assert_eq!(
        value(&listed, "--member-credentials-file"),
        shown(&s.member_credentials)
    );
    let unlisted = s.gateway_flags(&issued, Members::Unlisted);
    assert_eq!(value(&unlisted, "--member-credentials-file"), None);
    assert_eq!(unlisted.len() + 2, listed.len());
    let mut spec = crate::supervisor::SupervisorSpec::new("s1", vec!["g:1".into()]);
    spec.security = s.supervisor_security("s1");
    let sup = spec.args();
    assert_eq!(value(&sup, "--tls-ca-file"), shown(s.ca_file()));
    assert_eq!(
        value(&sup, "--credential-file"),
        shown(&s.credential_file("s1"))
    );
    assert_eq!(
        value(&sup, "--trusted-grant-keys-file"),
        shown(&s.trusted_keys)
    );
    assert!(!sup.iter().any(|a| a == "--insecure"), "{sup:?}");
}
