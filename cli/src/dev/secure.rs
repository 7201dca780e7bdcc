//! The TLS material and secrets of `openshell-pool dev`, under
//! `<data dir>/tls/` (mode 0700): a throwaway CA (`ca.crt`, `ca.key`), one
//! certificate per gateway (`gateway-N.crt`/`.key`, SANs 127.0.0.1 and
//! localhost, server and client use: a gateway serves both ports and dials
//! its peers with it), the grant signing key (`signing.key`, 64 hex
//! characters), the file of trusted grant keys supervisors and runtimes
//! verify grants with (`trusted-grant-keys`: the signing key's public key;
//! the gateways launch runtimes with it),
//! the operator's admin token (`admin.token`), a credential per supervisor
//! (`<member>.credential`) and the gateways' member credentials file
//! (`member-credentials`: `member_id credential` lines). Keys and secrets
//! are mode 0600. Generated on the first run, reused after ([`Ca::load`]);
//! anything missing is generated again, and the two derived files are
//! written afresh from what they derive from.
//!
//! Also `<data dir>/env`, which points the CLI at the cluster
//! (`source openshell-dev/env`).
//!
//! Throwaway material for a laptop: real deployments bring their own CA and
//! keys (docs/security.md).

use std::io::Write;
use std::path::{Path, PathBuf};

use proto::tls::generate::{Ca, Issued, Usage};

use crate::CliError;

/// What `dev` generated (or found) under `<data dir>/tls/`.
pub struct Secrets {
    /// The CA certificate every party trusts.
    pub ca: PathBuf,
    /// Gateway `i + 1`'s certificate and key.
    pub gateways: Vec<Issued>,
    /// The grant signing key file (every gateway signs with it).
    pub signing_key: PathBuf,
    /// The admin token file (gateways accept it; the CLI presents it).
    pub admin_token: PathBuf,
    /// The gateways' member credentials file (`member_id credential`).
    pub member_credentials: PathBuf,
    /// The trusted grant keys file of supervisors (and their runtimes).
    pub trusted_keys: PathBuf,
    /// Where the credential files of members live (`<member>.credential`).
    dir: PathBuf,
}

impl Secrets {
    /// The file holding `member`'s credential (what its supervisor
    /// presents with `--credential-file`).
    pub fn credential(&self, member: &str) -> PathBuf {
        self.dir.join(format!("{member}.credential"))
    }
}

impl std::fmt::Debug for Secrets {
    /// Paths only (the contents are secret).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("ca", &self.ca)
            .field("gateways", &self.gateways)
            .field("signing_key", &self.signing_key)
            .field("admin_token", &self.admin_token)
            .field("member_credentials", &self.member_credentials)
            .field("trusted_keys", &self.trusted_keys)
            .finish()
    }
}

fn local(what: &str) -> impl FnOnce(std::io::Error) -> CliError + '_ {
    move |e| CliError::Local(format!("{what}: {e}"))
}

/// 32 random bytes from the OS, as 64 hex characters.
fn random_hex() -> Result<String, CliError> {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .map_err(local("/dev/urandom"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes `text` to `path` with mode 0600 from creation (no window in which
/// another user may read it), unless the file exists.
fn secret_file(
    path: &Path,
    text: impl FnOnce() -> Result<String, CliError>,
) -> Result<(), CliError> {
    if path.exists() {
        return Ok(());
    }
    write_private(path, &text()?)
}

/// Writes `text` to `path` afresh, mode 0600 from creation.
fn write_private(path: &Path, text: &str) -> Result<(), CliError> {
    use std::os::unix::fs::OpenOptionsExt;
    let what = path.display().to_string();
    let _ = std::fs::remove_file(path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(local(&what))?;
    file.write_all(text.as_bytes()).map_err(local(&what))?;
    file.sync_all().map_err(local(&what))
}

/// The CA, certificates and secrets of a dev cluster of `gateways` nodes
/// and the supervisors `members` under `tls_dir`: loaded when present,
/// generated when not.
///
/// # Errors
/// [`CliError::Local`] naming the file that could not be read or written.
pub fn prepare(tls_dir: &Path, gateways: u16, members: &[&str]) -> Result<Secrets, CliError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(tls_dir)
        .map_err(local(&tls_dir.display().to_string()))?;
    let generate = |e: proto::tls::generate::GenerateError| CliError::Local(e.to_string());
    let ca = if tls_dir.join("ca.crt").exists() {
        Ca::load(tls_dir).map_err(generate)?
    } else {
        Ca::create(tls_dir, "openshell-dev throwaway CA").map_err(generate)?
    };
    let names = ["127.0.0.1".to_string(), "localhost".to_string()];
    let mut issued = Vec::new();
    for id in 1..=gateways {
        let stem = format!("gateway-{id}");
        let files = Issued {
            cert: tls_dir.join(format!("{stem}.crt")),
            key: tls_dir.join(format!("{stem}.key")),
        };
        if files.cert.exists() && files.key.exists() {
            issued.push(files);
        } else {
            issued.push(
                ca.issue(tls_dir, &stem, &names, Usage::ServerAndClient)
                    .map_err(generate)?,
            );
        }
    }
    let secrets = Secrets {
        ca: ca.cert.clone(),
        gateways: issued,
        signing_key: tls_dir.join("signing.key"),
        admin_token: tls_dir.join("admin.token"),
        member_credentials: tls_dir.join("member-credentials"),
        trusted_keys: tls_dir.join("trusted-grant-keys"),
        dir: tls_dir.to_path_buf(),
    };
    secret_file(&secrets.signing_key, random_hex)?;
    secret_file(&secrets.admin_token, random_hex)?;
    let mut lines = String::from("# member_id  credential (written by openshell-pool dev)\n");
    for member in members {
        let file = secrets.credential(member);
        secret_file(&file, random_hex)?;
        let credential = proto::secret::read_secret_file("--credential-file", &file)
            .map_err(|e| CliError::Local(e.to_string()))?;
        lines.push_str(&format!("{member} {credential}\n"));
    }
    write_private(&secrets.member_credentials, &lines)?;
    let seed = proto::secret::read_secret_file("--signing-key-file", &secrets.signing_key)
        .map_err(|e| CliError::Local(e.to_string()))?;
    let public = proto::grant::GrantSigner::from_seed_hex(&seed)
        .map_err(|e| CliError::Local(format!("{}: {e}", secrets.signing_key.display())))?
        .public_key_hex();
    std::fs::write(
        &secrets.trusted_keys,
        format!("# the public key of signing.key (written by openshell-pool dev)\n{public}\n"),
    )
    .map_err(local(&secrets.trusted_keys.display().to_string()))?;
    Ok(secrets)
}

/// `text` quoted for a POSIX shell (single quotes).
fn shell_quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// Writes `env`: the variables that point the CLI at this cluster
/// (`OPENSHELL_CA_FILE`, `OPENSHELL_TOKEN_FILE`, `OPENSHELL_ENDPOINTS`).
///
/// # Errors
/// [`CliError::Local`] naming the file.
pub fn write_env(env: &Path, secrets: &Secrets, endpoints: &[String]) -> Result<(), CliError> {
    let text = format!(
        "# Points openshell-pool at the `openshell-pool dev` cluster: source this file.\n\
         export OPENSHELL_CA_FILE={}\n\
         export OPENSHELL_TOKEN_FILE={}\n\
         export OPENSHELL_ENDPOINTS={}\n",
        shell_quote(&secrets.ca.display().to_string()),
        shell_quote(&secrets.admin_token.display().to_string()),
        shell_quote(&endpoints.join(",")),
    );
    std::fs::write(env, text).map_err(local(&env.display().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn material_is_generated_once_private_and_reused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let tls = dir.path().join("tls");
        let first = prepare(&tls, 3, &["s1", "s2"]).unwrap_or_else(|e| panic!("{e}"));
        let mode = |p: &Path| {
            std::fs::metadata(p)
                .map(|m| m.permissions().mode() & 0o777)
                .unwrap_or(0)
        };
        assert_eq!(mode(&tls), 0o700);
        for secret in [
            &first.signing_key,
            &first.admin_token,
            &first.member_credentials,
            &first.credential("s2"),
            &first.gateways[0].key,
            &tls.join("ca.key"),
        ] {
            assert_eq!(mode(secret), 0o600, "{}", secret.display());
        }
        let key = std::fs::read_to_string(&first.signing_key).unwrap_or_default();
        assert!(
            key.len() == 64 && key.chars().all(|c| c.is_ascii_hexdigit()),
            "{key}"
        );
        let before: Vec<Vec<u8>> = [&first.ca, &first.gateways[2].cert, &first.admin_token]
            .iter()
            .map(|p| std::fs::read(p).unwrap_or_default())
            .collect();
        let again = prepare(&tls, 3, &["s1", "s2"]).unwrap_or_else(|e| panic!("{e}"));
        let after: Vec<Vec<u8>> = [&again.ca, &again.gateways[2].cert, &again.admin_token]
            .iter()
            .map(|p| std::fs::read(p).unwrap_or_default())
            .collect();
        assert_eq!(before, after, "a second run reuses the material");
        let listed = std::fs::read_to_string(&again.member_credentials).unwrap_or_default();
        let s1 = std::fs::read_to_string(again.credential("s1")).unwrap_or_default();
        assert!(listed.contains(&format!("s1 {s1}")), "{listed}");
        let trusted = std::fs::read_to_string(&again.trusted_keys).unwrap_or_default();
        assert!(
            proto::grant::parse_trusted_keys(&trusted).is_ok(),
            "{trusted}"
        );
        let env = dir.path().join("env");
        write_env(&env, &again, &["127.0.0.1:7001".into()]).unwrap_or_else(|e| panic!("{e}"));
        let text = std::fs::read_to_string(&env).unwrap_or_default();
        assert!(text.contains("export OPENSHELL_CA_FILE='"), "{text}");
        assert!(
            text.contains("export OPENSHELL_ENDPOINTS='127.0.0.1:7001'"),
            "{text}"
        );
        assert_eq!(shell_quote("a'b"), r"'a'\''b'");
    }
}
