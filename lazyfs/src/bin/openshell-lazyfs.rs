//! `openshell-lazyfs <backing-dir> <mountpoint>`: mounts the lazy
//! filesystem and serves it until SIGTERM/SIGINT (then unmounts) or
//! SIGKILL (a power cut: unsynced data is lost, the mount is left dead
//! for `umount -l`).

use std::path::PathBuf;

use clap::Parser;
use fuser::{Config, MountOption};

/// Command line.
#[derive(Parser, Debug)]
#[command(name = "openshell-lazyfs", version, about)]
struct Args {
    /// Directory that holds what was fsynced.
    backing: PathBuf,
    /// Where to mount.
    mountpoint: PathBuf,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,fuser=error")),
        )
        .init();
    let args = Args::parse();
    let backing = args
        .backing
        .canonicalize()
        .map_err(|e| anyhow::anyhow!("backing directory {}: {e}", args.backing.display()))?;
    if !backing.is_dir() {
        anyhow::bail!("backing {} is not a directory", backing.display());
    }
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("openshell-lazyfs".into()),
        MountOption::Subtype("lazyfs".into()),
    ];
    // Block the stop signals in every thread; the main thread waits for them.
    let signals = block_stop_signals()?;
    let session = fuser::spawn_mount(
        lazyfs::fs::LazyFs::new(backing.clone()),
        &args.mountpoint,
        &config,
    )
    .map_err(|e| anyhow::anyhow!("mounting {}: {e}", args.mountpoint.display()))?;
    tracing::info!(backing = %backing.display(), mountpoint = %args.mountpoint.display(), "mounted");
    let mut sig: libc::c_int = 0;
    // SAFETY: `signals` is an initialised set; `sig` is written by the call.
    unsafe { libc::sigwait(&signals, &mut sig) };
    tracing::info!(signal = sig, "unmounting (unsynced data is dropped)");
    drop(session);
    Ok(())
}

/// Blocks SIGTERM and SIGINT in this thread (and the threads it starts).
fn block_stop_signals() -> anyhow::Result<libc::sigset_t> {
    // SAFETY: plain libc signal-set calls on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
            anyhow::bail!("pthread_sigmask failed");
        }
        Ok(set)
    }
}
