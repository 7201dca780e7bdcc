//! The security probe of a run: operates, against one running gateway,
//! what a secure run relies on (TLS and the token served, plaintext and
//! token-less clients refused, a wrong supervisor credential refused), for
//! `results.json`. Apart from [`crate::security`] so that the cluster,
//! which holds the run's credentials, and the probe, which reads the
//! cluster, import each other in one direction only.

use std::time::Duration;

use proto::client::{connect, ClientConfig, Role};
use proto::cluster::cluster_admin_client::ClusterAdminClient;
use proto::cluster::StatusRequest;
use proto::tls::ClientTls;
use serde_json::json;
use testkit::member::{attach_secure, hello_with_credential, Pings};
use tonic::service::interceptor::InterceptedService;

use crate::cluster::Cluster;
use crate::security::Bearer;

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
    attach_secure(
        addr,
        Duration::from_secs(2),
        tls,
        None,
        Pings::Off,
        hello,
        4,
    )
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
        .secrets
        .members()
        .next()
        .map_or_else(|| "jepsen-probe".to_string(), str::to_string);
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
