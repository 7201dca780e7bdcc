//! Per-run TLS material and credentials: what makes a run's cluster secure
//! the way an operator's is.
//!
//! Each run generates, under `<run>/tls/`, a throwaway CA (`ca.crt`), one
//! certificate per gateway whose SAN is the address the gateway is reached
//! at inside its network namespace (`n<i>.crt`, server and client usage: a
//! gateway serves both ports and dials its peers with it), the grant
//! signing key (`signing.key`) and its public key as the supervisors'
//! trusted grant keys file (`trusted-grant-keys`), an admin token
//! (`admin.token`), and a credential per pool member (`<member>.credential`,
//! all listed in the gateways' `members.credentials`, so a supervisor can
//! only join as the member it is). Secret files are mode 0600.
//!
//! The harness's clients trust the CA ([`Credentials::client_tls`]) and
//! carry the admin token on every call ([`Bearer`]); supervisors (process
//! and scripted) trust the CA and present their own member's credential in
//! their hello; process supervisors and their runtimes trust only the run's
//! grant key.
//! `--insecure` runs ([`Security::Insecure`]) keep the plaintext, one-port,
//! token-less setup of before, for comparison.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use proto::client::{connect, ClientConfig, Role};
use proto::cluster::cluster_admin_client::ClusterAdminClient;
use proto::cluster::StatusRequest;
use proto::tls::generate::{Ca, Issued, Usage};
use proto::tls::ClientTls;
use rand::RngCore;
use serde_json::json;
use testkit::member::{attach_secure, hello_with_credential};
use tonic::metadata::AsciiMetadataValue;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;

use crate::cluster::Cluster;

/// Whether a run's cluster speaks TLS.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Security {
    /// TLS on every gRPC port, a peer port with mutual TLS, tokens
    /// (the default).
    #[default]
    Tls,
    /// `--insecure` gateways: plaintext, one port, no tokens.
    Insecure,
}

impl Security {
    /// `tls` / `insecure` (the report's `security` field).
    pub fn name(self) -> &'static str {
        match self {
            Security::Tls => "tls",
            Security::Insecure => "insecure",
        }
    }
}

/// The material of one secure run (see the module doc).
pub struct Credentials {
    /// `<run>/tls`.
    pub dir: PathBuf,
    /// The CA every gateway certificate chains to.
    ca: Ca,
    /// The grant signing key file (64 hex characters).
    pub signing_key: PathBuf,
    /// The admin token (platform_admin) every harness call carries.
    admin_token: String,
    /// The file holding it (`--admin-token-file`).
    pub admin_token_file: PathBuf,
    /// The gateways' `--member-credentials-file` (`member_id credential`
    /// lines).
    pub member_credentials_file: PathBuf,
    /// The supervisors' `--trusted-grant-keys-file` (the signing key's
    /// public key).
    pub trusted_keys_file: PathBuf,
    /// member id -> (credential, the file holding it).
    members: BTreeMap<String, (String, PathBuf)>,
    /// What the harness's clients trust (the CA).
    client_tls: ClientTls,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("dir", &self.dir)
            .field("ca", &self.ca.cert)
            .finish_non_exhaustive()
    }
}

/// 32 random bytes from the OS, as hex.
fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes a secret file, mode 0600 from creation.
fn write_secret(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    file.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

impl Credentials {
    /// Generates the CA, signing key, admin token and a credential for each
    /// of `members` under `dir` (created).
    ///
    /// # Errors
    /// When generating or writing fails.
    pub fn generate(dir: &Path, members: &[String]) -> anyhow::Result<Credentials> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let ca = Ca::create(dir, "openshell-jepsen run CA").context("generating the run CA")?;
        let signing_key = dir.join("signing.key");
        let seed = random_hex();
        write_secret(&signing_key, &seed)?;
        let public = proto::grant::GrantSigner::from_seed_hex(&seed)
            .map_err(|e| anyhow::anyhow!("the run's signing key: {e}"))?
            .public_key_hex();
        let trusted_keys_file = dir.join("trusted-grant-keys");
        std::fs::write(
            &trusted_keys_file,
            format!("# the run's grant key\n{public}\n"),
        )
        .with_context(|| format!("writing {}", trusted_keys_file.display()))?;
        let admin_token = random_hex();
        let admin_token_file = dir.join("admin.token");
        write_secret(&admin_token_file, &admin_token)?;
        let mut listing = String::from("# member_id credential\n");
        let mut by_member = BTreeMap::new();
        for member in members {
            let credential = random_hex();
            let file = dir.join(format!("{member}.credential"));
            write_secret(&file, &credential)?;
            listing.push_str(&format!("{member} {credential}\n"));
            by_member.insert(member.clone(), (credential, file));
        }
        let member_credentials_file = dir.join("members.credentials");
        write_secret(&member_credentials_file, &listing)?;
        let client_tls = ClientTls::load(&ca.cert, None).context("loading the run CA")?;
        Ok(Credentials {
            dir: dir.to_path_buf(),
            ca,
            signing_key,
            admin_token,
            admin_token_file,
            member_credentials_file,
            trusted_keys_file,
            members: by_member,
            client_tls,
        })
    }

    /// The CA certificate file (`--tls-ca-file` of gateways and
    /// supervisors).
    pub fn ca_file(&self) -> &Path {
        &self.ca.cert
    }

    /// Issues `<name>.crt` / `<name>.key` for a gateway reached at `ip`.
    ///
    /// # Errors
    /// When generating or writing fails.
    pub fn issue_gateway(&self, name: &str, ip: &str) -> anyhow::Result<Issued> {
        self.ca
            .issue(&self.dir, name, &[ip.to_string()], Usage::ServerAndClient)
            .with_context(|| format!("issuing the certificate of {name}"))
    }

    /// The TLS and credential flags of a gateway holding `issued`.
    pub fn gateway_flags(&self, issued: &Issued) -> Vec<String> {
        let path = |p: &Path| p.display().to_string();
        vec![
            "--tls-cert-file".into(),
            path(&issued.cert),
            "--tls-key-file".into(),
            path(&issued.key),
            "--tls-ca-file".into(),
            path(self.ca_file()),
            "--signing-key-file".into(),
            path(&self.signing_key),
            "--admin-token-file".into(),
            path(&self.admin_token_file),
            "--member-credentials-file".into(),
            path(&self.member_credentials_file),
        ]
    }

    /// What the harness's clients (and scripted supervisors) trust.
    pub fn client_tls(&self) -> ClientTls {
        self.client_tls.clone()
    }

    /// The interceptor adding the admin token to every call.
    pub fn bearer(&self) -> Bearer {
        Bearer::new(&self.admin_token)
    }

    /// How the run's supervisors reach the gateways.
    pub fn member_security(&self) -> MemberSecurity {
        MemberSecurity {
            tls: self.client_tls(),
            ca_file: self.ca_file().to_path_buf(),
            trusted_keys_file: self.trusted_keys_file.clone(),
            members: Arc::new(self.members.clone()),
        }
    }
}

/// How a supervisor (process or scripted) of a secure run reaches the
/// gateways: TLS trusting the run's CA, its own member's credential in its
/// hello, the run's grant key trusted.
#[derive(Clone)]
pub struct MemberSecurity {
    /// Scripted members' channel TLS.
    pub tls: ClientTls,
    /// `--tls-ca-file` of process members.
    pub ca_file: PathBuf,
    /// `--trusted-grant-keys-file` of process members.
    pub trusted_keys_file: PathBuf,
    /// member id -> (credential, its file).
    members: Arc<BTreeMap<String, (String, PathBuf)>>,
}

impl MemberSecurity {
    /// `--credential-file` of process member `member` (none: not a member
    /// of this run).
    pub fn of(&self, member: &str) -> Option<&Path> {
        self.members.get(member).map(|(_, file)| file.as_path())
    }

    /// The credential scripted member `member` puts in its hello (empty:
    /// not a member of this run).
    pub fn credential_of(&self, member: &str) -> &str {
        self.members.get(member).map_or("", |(c, _)| c.as_str())
    }
}

impl std::fmt::Debug for MemberSecurity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemberSecurity")
            .field("ca_file", &self.ca_file)
            .field("members", &self.members.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Adds `authorization: Bearer <token>` to every call (none: nothing).
#[derive(Clone, Default)]
pub struct Bearer(Option<AsciiMetadataValue>);

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Bearer(<redacted>)"
        } else {
            "Bearer(none)"
        })
    }
}

impl Bearer {
    /// With `token` (hex, so always a valid header value; an invalid one
    /// would send no header and be refused by the gateway).
    pub fn new(token: &str) -> Bearer {
        Bearer(format!("Bearer {token}").parse().ok())
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(
        &mut self,
        mut request: tonic::Request<()>,
    ) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.0 {
            request
                .metadata_mut()
                .insert("authorization", value.clone());
        }
        Ok(request)
    }
}

/// A channel whose calls carry the run's token (if any).
pub type Authed = InterceptedService<Channel, Bearer>;

/// Whether a `Status` call to `addr` succeeds, dialled with `tls` (`None`:
/// plaintext) and `bearer`; the error text when it does not.
async fn status_call(addr: &str, tls: Option<ClientTls>, bearer: Bearer) -> Result<(), String> {
    let config = ClientConfig::for_role(Role::Jepsen)
        .with_connect_timeout(Duration::from_secs(2))
        .with_request_timeout(Duration::from_secs(5))
        .with_tls(tls);
    let channel = connect(Role::Jepsen, addr, &config)
        .await
        .map_err(|e| e.to_string())?;
    ClusterAdminClient::new(InterceptedService::new(channel, bearer))
        .status(StatusRequest { local: true })
        .await
        .map(|_| ())
        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
}

/// Whether a supervisor hello for `member` with a wrong credential is
/// accepted over TLS (it must not be: the error text is what a refusal
/// looks like).
async fn wrong_credential_attach(
    addr: &str,
    tls: Option<ClientTls>,
    member: &str,
) -> Result<(), String> {
    let wrong = "0".repeat(64);
    let hello = hello_with_credential(member, 1, 0, 1, "10.0.0.1:1".into(), &wrong);
    attach_secure(addr, Duration::from_secs(2), tls, hello, 4)
        .await
        .map(|_| ())
        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
}

/// Operates what a secure run relies on, against node `node` (running):
/// the run's client (TLS + token) is served; a plaintext client is refused
/// on the client and the peer port; a TLS client without the token is
/// refused on the client port; a TLS client without a client certificate
/// is refused on the peer port; a supervisor hello with a wrong credential
/// is refused. Each check as `{"ok": bool, "saw": ...}`
/// for `results.json`; `None` for an `--insecure` run.
pub async fn probe(cluster: &Cluster, node: usize) -> Option<serde_json::Value> {
    let credentials = cluster.credentials.as_ref()?;
    let Ok(n) = cluster.node(node) else {
        return Some(json!({"error": format!("no node {node}")}));
    };
    let tls = || Some(credentials.client_tls());
    // Claims to be a member of the run (any id when it has none).
    let impostor = credentials
        .members
        .keys()
        .next()
        .cloned()
        .unwrap_or_else(|| "jepsen-probe".into());
    let served = status_call(&n.addr, tls(), credentials.bearer()).await;
    let refused = [
        (
            "plaintext_client_port",
            status_call(&n.addr, None, credentials.bearer()).await,
        ),
        (
            "plaintext_peer_port",
            status_call(&n.peer_addr, None, credentials.bearer()).await,
        ),
        (
            "no_token_client_port",
            status_call(&n.addr, tls(), Bearer::default()).await,
        ),
        (
            "no_client_certificate_peer_port",
            status_call(&n.peer_addr, tls(), credentials.bearer()).await,
        ),
        (
            "wrong_supervisor_credential",
            wrong_credential_attach(&n.addr, tls(), &impostor).await,
        ),
    ];
    let mut out = serde_json::Map::new();
    out.insert("node".into(), json!(n.name));
    out.insert(
        "tls_with_token_served".into(),
        json!({"ok": served.is_ok(), "saw": served.err()}),
    );
    for (what, result) in refused {
        out.insert(
            format!("{what}_refused"),
            json!({"ok": result.is_err(), "saw": result.err()}),
        );
    }
    Some(serde_json::Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn material_is_generated_with_private_secrets() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let members = ["s1".to_string(), "s2".to_string()];
        let c = Credentials::generate(dir.path(), &members).unwrap_or_else(|e| panic!("{e:#}"));
        let issued = c
            .issue_gateway("n1", "10.211.3.11")
            .unwrap_or_else(|e| panic!("{e:#}"));
        for secret in [
            &c.signing_key,
            &c.admin_token_file,
            &c.member_credentials_file,
            &issued.key,
        ] {
            let mode = std::fs::metadata(secret)
                .unwrap_or_else(|e| panic!("{e}"))
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{}", secret.display());
        }
        let security = c.member_security();
        for m in &members {
            let file = security.of(m).unwrap_or_else(|| panic!("no file for {m}"));
            let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(text, security.credential_of(m));
            let listing = std::fs::read_to_string(&c.member_credentials_file)
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(listing.contains(&format!("{m} {text}\n")), "{listing}");
        }
        assert_ne!(security.credential_of("s1"), security.credential_of("s2"));
        assert_eq!(security.of("s3"), None);
        let flags = c.gateway_flags(&issued);
        assert!(flags.contains(&"--admin-token-file".to_string()));
        assert!(flags.contains(&"--member-credentials-file".to_string()));
        assert!(!format!("{c:?}").contains(&c.admin_token));
        assert!(!format!("{:?}", c.bearer()).contains(&c.admin_token));
    }
}
