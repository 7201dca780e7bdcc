//! TLS material for secure end-to-end tests: a throwaway CA, a certificate
//! per gateway (and any other party a test needs), a signing key and an
//! admin token, all as files under one directory, the way an operator
//! provides them; plus the client side ([`Material::client`]) a test dials
//! with.

use std::path::{Path, PathBuf};

use proto::tls::generate::{Ca, Issued, Usage};
use proto::tls::ClientTls;

/// Generated TLS material and credentials.
pub struct Material {
    /// Where every file lives.
    pub dir: PathBuf,
    /// The CA every gateway's certificate chains to.
    pub ca: Ca,
    /// The grant signing key file (64 hex characters).
    pub signing_key: PathBuf,
    /// The admin token, and the file holding it.
    pub admin_token: String,
    pub admin_token_file: PathBuf,
}

/// How a test client reaches a secure gateway.
#[derive(Clone, Debug)]
pub struct ClientSecurity {
    /// Trusts the cluster CA.
    pub tls: ClientTls,
    /// The bearer token every call carries.
    pub token: String,
}

/// 32 random bytes, hex (tokens and seeds).
pub fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    let read = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    read.unwrap_or_else(|e| panic!("/dev/urandom: {e}"));
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_secret(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}

impl Material {
    /// A CA, a signing key and an admin token under `dir` (created).
    pub fn generate(dir: &Path) -> Material {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let ca = Ca::create(dir, "openshell test CA").unwrap_or_else(|e| panic!("{e}"));
        let signing_key = dir.join("signing.key");
        write_secret(&signing_key, &random_hex());
        let admin_token = random_hex();
        let admin_token_file = dir.join("admin.token");
        write_secret(&admin_token_file, &admin_token);
        Material {
            dir: dir.to_path_buf(),
            ca,
            signing_key,
            admin_token,
            admin_token_file,
        }
    }

    /// A certificate for `stem` on loopback (127.0.0.1 and localhost).
    pub fn issue(&self, stem: &str, usage: Usage) -> Issued {
        self.issue_in(&self.dir, stem, usage)
    }

    /// [`Material::issue`] into another directory.
    pub fn issue_in(&self, dir: &Path, stem: &str, usage: Usage) -> Issued {
        std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        self.ca
            .issue(
                dir,
                stem,
                &["127.0.0.1".to_string(), "localhost".to_string()],
                usage,
            )
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The flags of a secure gateway `id` with the certificate `issued`
    /// (peer port and addresses are the caller's).
    pub fn gateway_flags(&self, issued: &Issued) -> Vec<String> {
        let path = |p: &Path| p.display().to_string();
        vec![
            "--tls-cert-file".into(),
            path(&issued.cert),
            "--tls-key-file".into(),
            path(&issued.key),
            "--tls-ca-file".into(),
            path(&self.ca.cert),
            "--signing-key-file".into(),
            path(&self.signing_key),
            "--admin-token-file".into(),
            path(&self.admin_token_file),
        ]
    }

    /// How a test client with the admin token dials the gateways.
    pub fn client(&self) -> ClientSecurity {
        ClientSecurity {
            tls: ClientTls::load(&self.ca.cert, None).unwrap_or_else(|e| panic!("{e}")),
            token: self.admin_token.clone(),
        }
    }
}

/// A certificate mounted the way the kubelet mounts a Secret:
/// `dir/tls.crt -> ..data/tls.crt`, `..data -> ..vN` (a dated directory),
/// updated by [`Material::rotate`] with an atomic swap of `..data`.
pub struct Mounted {
    /// The mount directory.
    pub dir: PathBuf,
    /// The paths a process is given (the symlinks).
    pub files: Issued,
    /// The real files `..data` points at now.
    pub current: Issued,
    version: u32,
}

impl Material {
    /// Mounts a new certificate for `usage` under `dir`.
    pub fn mount(&self, dir: &Path, usage: Usage) -> Mounted {
        let current = self.issue_in(&dir.join("..v1"), "tls", usage);
        std::os::unix::fs::symlink("..v1", dir.join("..data"))
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for f in ["tls.crt", "tls.key"] {
            std::os::unix::fs::symlink(format!("..data/{f}"), dir.join(f))
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        }
        Mounted {
            dir: dir.to_path_buf(),
            files: Issued {
                cert: dir.join("tls.crt"),
                key: dir.join("tls.key"),
            },
            current,
            version: 1,
        }
    }

    /// Issues a new certificate into `..v(N+1)` and swaps `..data` to it
    /// atomically (rename of a new link over the old one).
    pub fn rotate(&self, mounted: &mut Mounted, usage: Usage) {
        mounted.version += 1;
        let name = format!("..v{}", mounted.version);
        mounted.current = self.issue_in(&mounted.dir.join(&name), "tls", usage);
        let tmp = mounted.dir.join("..data_tmp");
        std::os::unix::fs::symlink(&name, &tmp).unwrap_or_else(|e| panic!("{e}"));
        std::fs::rename(&tmp, mounted.dir.join("..data")).unwrap_or_else(|e| panic!("{e}"));
    }
}

/// The DER of the first certificate of a PEM file.
pub fn cert_der(path: &Path) -> Vec<u8> {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    proto::tls::read_certs(path, &text).unwrap_or_else(|e| panic!("{e}"))[0]
        .as_ref()
        .to_vec()
}
