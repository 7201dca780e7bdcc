//! A supervisor of a local cluster as a spec ([`SupervisorSpec`]) and the
//! one spelling of its command line ([`SupervisorSpec::args`]). The
//! supervisor is configured by flags and environment (it has no config
//! file): launchers fill the spec and keep their own policy (addresses,
//! which namespace it runs in, how it is signalled).

use std::path::PathBuf;

/// How a supervisor proves who it is and what it trusts.
#[derive(Clone, Debug, Default)]
pub struct SupervisorSecurity {
    /// `--insecure`: plaintext to the gateways, grants not verified.
    pub insecure: bool,
    /// The CA the gateways' certificates chain to (TLS to them).
    pub tls_ca_file: Option<PathBuf>,
    /// The file holding its credential.
    pub credential_file: Option<PathBuf>,
    /// Its credential inline (a test; a file is preferred).
    pub credential: Option<String>,
    /// The public keys grants are verified with.
    pub trusted_keys_file: Option<PathBuf>,
}

/// One supervisor: the member it joins as and where it finds the gateways.
#[derive(Clone, Debug)]
pub struct SupervisorSpec {
    /// The pool member id.
    pub member: String,
    /// The member's uid (a new uid is a new incarnation of the member).
    pub uid: String,
    /// The gateways' client addresses.
    pub gateways: Vec<String>,
    /// The IP the member advertises.
    pub advertise_ip: String,
    /// Its HTTP endpoints, if served.
    pub http_listen: Option<String>,
    /// How many sandboxes it takes, if not the default.
    pub capacity: Option<u32>,
    /// Attach to the gateways in the listed order (tests).
    pub listed_order: bool,
    /// Its credential and trust.
    pub security: SupervisorSecurity,
    /// Flags after the spec's.
    pub extra_args: Vec<String>,
}

impl SupervisorSpec {
    /// Member `member` (uid `uid-<member>`) on loopback, dialing `gateways`.
    pub fn new(member: &str, gateways: Vec<String>) -> SupervisorSpec {
        SupervisorSpec {
            member: member.to_string(),
            uid: format!("uid-{member}"),
            gateways,
            advertise_ip: "127.0.0.1".into(),
            http_listen: None,
            capacity: None,
            listed_order: false,
            security: SupervisorSecurity::default(),
            extra_args: Vec::new(),
        }
    }

    /// The supervisor's arguments: the one place they are spelled.
    pub fn args(&self) -> Vec<String> {
        let mut args = vec![
            "--gateways".to_string(),
            self.gateways.join(","),
            "--pool-member-id".into(),
            self.member.clone(),
            "--pool-member-uid".into(),
            self.uid.clone(),
            "--pool-advertise-ip".into(),
            self.advertise_ip.clone(),
        ];
        let mut flag = |name: &str, value: String| args.extend([name.to_string(), value]);
        if let Some(http) = &self.http_listen {
            flag("--http-listen", http.clone());
        }
        if let Some(capacity) = self.capacity {
            flag("--capacity", capacity.to_string());
        }
        let security = &self.security;
        if let Some(file) = &security.tls_ca_file {
            flag("--tls-ca-file", file.display().to_string());
        }
        if let Some(file) = &security.credential_file {
            flag("--credential-file", file.display().to_string());
        }
        if let Some(credential) = &security.credential {
            flag("--credential", credential.clone());
        }
        if let Some(file) = &security.trusted_keys_file {
            flag("--trusted-grant-keys-file", file.display().to_string());
        }
        if security.insecure {
            args.push("--insecure".into());
        }
        if self.listed_order {
            args.push("--attach-listed-order".into());
        }
        args.extend(self.extra_args.iter().cloned());
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_becomes_its_flag() {
        let mut spec = SupervisorSpec::new("m1", vec!["a:1".into(), "b:2".into()]);
        spec.http_listen = Some("127.0.0.1:9".into());
        spec.capacity = Some(7);
        spec.security = SupervisorSecurity {
            insecure: false,
            tls_ca_file: Some("/s/ca.crt".into()),
            credential_file: Some("/s/m1.credential".into()),
            credential: None,
            trusted_keys_file: Some("/s/trusted".into()),
        };
        spec.extra_args = vec!["--drain-timeout-ms".into(), "5".into()];
        assert_eq!(
            spec.args().join(" "),
            "--gateways a:1,b:2 --pool-member-id m1 --pool-member-uid uid-m1 --pool-advertise-ip 127.0.0.1 \
             --http-listen 127.0.0.1:9 --capacity 7 --tls-ca-file /s/ca.crt --credential-file /s/m1.credential \
             --trusted-grant-keys-file /s/trusted --drain-timeout-ms 5"
        );
        spec.security = SupervisorSecurity {
            insecure: true,
            credential: Some("c".into()),
            ..SupervisorSecurity::default()
        };
        spec.listed_order = true;
        spec.extra_args.clear();
        assert!(spec
            .args()
            .join(" ")
            .ends_with("--capacity 7 --credential c --insecure --attach-listed-order"));
    }
}
