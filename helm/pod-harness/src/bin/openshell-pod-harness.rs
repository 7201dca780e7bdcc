//! `openshell-pod-harness`: runs a rendered release (multi-document YAML,
//! as `helm template` prints it, or a JSON array) as pods on this machine
//! until Ctrl-C, then deletes every pod within its grace period.

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;

#[derive(Parser, Debug)]
#[command(name = "openshell-pod-harness", version, about)]
struct Args {
    /// The rendered release (YAML stream or JSON array).
    #[arg(long)]
    manifests: PathBuf,
    /// The release's namespace.
    #[arg(long, default_value = "openshell")]
    namespace: String,
    /// Where the image's binaries are (a command's file name found here runs from here).
    #[arg(long)]
    bin_dir: PathBuf,
    /// Working directory (pod files, claims, logs).
    #[arg(long)]
    root: PathBuf,
    /// A short run id (names the network namespaces: osj-<run>-*).
    #[arg(long, default_value = "ph")]
    run: String,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let rt = tokio::runtime::Runtime::new().context("tokio runtime")?;
    rt.block_on(async move {
        let manifests = pod_harness::manifest::Manifests::load(&args.manifests)?;
        let harness = pod_harness::harness::Harness::start(
            &args.run,
            args.root,
            args.bin_dir,
            manifests,
            &args.namespace,
        )
        .await?;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("SIGTERM")?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C")?,
            _ = term.recv() => {}
        }
        harness.stop().await;
        Ok(())
    })
}
