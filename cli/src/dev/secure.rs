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
//! are mode 0600. Generated on the first run, reused after; anything
//! missing is generated again, and the two derived files are written
//! afresh from what they derive from (all by the `local-cluster` library,
//! which `testkit` and the Jepsen harness use too).
//!
//! Also `<data dir>/env`, which points the CLI at the cluster
//! (`source openshell-dev/env`).
//!
//! Throwaway material for a laptop: real deployments bring their own CA and
//! keys (docs/security.md).

use std::path::{Path, PathBuf};

use local_cluster::secrets::{loopback_names, GatewayFiles, Members, Secrets as LocalSecrets};
use local_cluster::supervisor::SupervisorSecurity;
use proto::tls::generate::Issued;

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
    /// What the cluster library generated.
    local: LocalSecrets,
}

impl Secrets {
    /// The file holding `member`'s credential (what its supervisor
    /// presents with `--credential-file`).
    pub fn credential(&self, member: &str) -> PathBuf {
        self.local.credential_file(member)
    }

    /// The secret files of a gateway (only dev's members may join).
    pub fn gateway_files(&self) -> GatewayFiles<'_> {
        self.local.gateway_files(Members::Listed)
    }

    /// What `member`'s supervisor presents and trusts.
    pub fn supervisor_security(&self, member: &str) -> SupervisorSecurity {
        self.local.supervisor_security(member)
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

/// The CA, certificates and secrets of a dev cluster of `gateways` nodes
/// and the supervisors `members` under `tls_dir`: loaded when present,
/// generated when not (the cluster library's [`LocalSecrets::prepare`];
/// dev's policy is the names: `gateway-N` on loopback).
///
/// # Errors
/// [`CliError::Local`] naming the file that could not be read or written.
pub fn prepare(tls_dir: &Path, gateways: u16, members: &[&str]) -> Result<Secrets, CliError> {
    let local = |e: local_cluster::secrets::SecretsError| CliError::Local(e.to_string());
    let secrets =
        LocalSecrets::prepare(tls_dir, "openshell-dev throwaway CA", members).map_err(local)?;
    let issued = (1..=gateways)
        .map(|id| secrets.gateway_cert(&format!("gateway-{id}"), &loopback_names()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(local)?;
    Ok(Secrets {
        ca: secrets.ca_file().to_path_buf(),
        gateways: issued,
        signing_key: secrets.signing_key.clone(),
        admin_token: secrets.admin_token_file.clone(),
        member_credentials: secrets.member_credentials.clone(),
        trusted_keys: secrets.trusted_keys.clone(),
        local: secrets,
    })
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
    let mut file =
        raft_store::modes::create_private_file(env).map_err(local(&env.display().to_string()))?;
    std::io::Write::write_all(&mut file, text.as_bytes()).map_err(local(&env.display().to_string()))
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
        assert_eq!(first.gateways[2].cert, tls.join("gateway-3.crt"));
        assert_eq!(first.member_credentials, tls.join("member-credentials"));
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
