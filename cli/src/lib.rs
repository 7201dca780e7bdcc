//! `openshell-pool`: the operator CLI of the OpenShell supervisor-pool store.
//!
//! Every command talks to any gateway of `--endpoints` through
//! `openshell-client` (the first that answers, one round over the
//! endpoints; the gateways forward to the leader, and the client follows a
//! leader hint; its writes carry request ids). Output is a table or, with `-o json`, one JSON document.
//! Failures print one line on stderr saying what failed and what to do, and
//! exit non-zero (see [`CliError::exit_code`]).
//!
//! The CLI talks to gateways only over gRPC (`openshell-client` and the
//! `proto` crate); it shares no code with `gateway-plugin`, so a gateway that embeds that library does
//! not carry the CLI. `local-status` reads a data directory through
//! `raft-store`, the storage layer, without a gateway.
//!
//! # Layout
//! - [`args`]: the flags and commands ([`Cli`]).
//! - [`client`]: the gateways ([`Gateway`]: an `openshell-client` set up
//!   from the flags) and [`CliError`] with its exit codes.
//! - [`cells`]: `--cells FILE`, several gateway groups (one client each,
//!   placement, `<cell>/<id>` ids).
//! - [`transport`]: TLS (`--ca-file`) or plaintext (`--insecure`), and a
//!   failed handshake as one line.
//! - [`commands`]: `raft`, `pool`, `sandbox` and `backup`, one module each,
//!   and the table/JSON output they share; `local-status`, the one command
//!   that reads a stopped gateway's data directory (through `raft-store`)
//!   instead of calling a gateway.
//! - [`dev`]: `openshell-pool dev`, the local cluster launcher, and the
//!   processes it owns.
//!
//! The binary (`src/main.rs`) only parses flags and calls [`run`].

pub mod args;
pub mod cells;
pub mod client;
pub mod commands;
pub mod dev;
pub mod transport;

pub use args::{
    BackupCommand, Cli, Command, Output, PoolCommand, RaftCommand, SandboxCommand, DEV_ENDPOINTS,
};
pub use client::{CliError, Gateway};

/// The gateways of `--endpoints` with the token and transport security of
/// the flags (commands that talk to gateways only: `dev`, `local-status`
/// and `completions` need neither).
///
/// # Errors
/// Neither `--ca-file` nor `--insecure` ([`transport::NO_SECURITY`]), or a
/// token or CA file that cannot be read.
pub fn gateway(cli: &Cli) -> Result<Gateway, CliError> {
    let client_cert = cli
        .client_cert_file
        .as_deref()
        .zip(cli.client_key_file.as_deref());
    let tls = transport::security(cli.ca_file.as_deref(), client_cert, cli.insecure)?;
    let token = match &cli.token_file {
        Some(file) => Some(
            proto::secret::read_secret_file("--token-file", file)
                .map_err(|e| CliError::Local(e.to_string()))?
                .into(),
        ),
        None => cli.token.clone(),
    };
    Gateway::new(cli.endpoints.clone(), token, tls)
}

/// Runs one parsed command line to its end.
///
/// # Errors
/// What the command failed on, as the user should read it; the process
/// exits with [`CliError::exit_code`].
pub async fn run(cli: Cli) -> Result<(), CliError> {
    let talks_to_gateways = !matches!(
        cli.command,
        Command::Dev(_) | Command::LocalStatus { .. } | Command::Completions { .. }
    );
    match (&cli.cells, &cli.cell) {
        (Some(map), cell) if talks_to_gateways => {
            let cg = cells::CellGateways::load(map)?;
            return with_cells(&cg, cell.as_deref(), cli.output, cli.command).await;
        }
        (None, Some(_)) if talks_to_gateways => {
            return Err(CliError::Usage(
                "--cell names a cell of a cell map: pass --cells FILE (OPENSHELL_CELLS)".into(),
            ))
        }
        _ => {}
    }
    // Used (and its error reported) only by the commands that call gateways.
    let gw = gateway(&cli);
    match cli.command {
        Command::Dev(args) => dev::run(args).await,
        Command::Raft(c) => commands::raft(&gw?, cli.output, c).await,
        Command::Pool(c) => commands::pool(&gw?, cli.output, c).await,
        Command::Sandbox(c) => commands::sandbox(&gw?, cli.output, c).await,
        Command::Backup(c) => commands::backup(&gw?, cli.output, c).await,
        Command::LocalStatus { data_dir } => commands::local_status(cli.output, &data_dir),
        Command::Completions { shell } => {
            use clap::CommandFactory;
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "openshell-pool",
                &mut std::io::stdout(),
            );
            Ok(())
        }
    }
}

/// A command that talks to gateways, given a cell map: `sandbox` across
/// the cells, every other command to the one `cell` names.
async fn with_cells(
    cg: &cells::CellGateways,
    cell: Option<&str>,
    output: Output,
    command: Command,
) -> Result<(), CliError> {
    if let Command::Sandbox(c) = command {
        return commands::sandbox_cells(cg, cell, output, c).await;
    }
    let name = |what: &str| cell.ok_or_else(|| cg.name_one(what));
    match command {
        Command::Raft(c) => commands::raft(cg.gateway(name("raft")?).await?, output, c).await,
        Command::Pool(c) => commands::pool(cg.gateway(name("pool")?).await?, output, c).await,
        Command::Backup(c) => commands::backup(cg.gateway(name("backup")?).await?, output, c).await,
        _ => Err(CliError::Usage("this command takes no cell map".into())),
    }
}
