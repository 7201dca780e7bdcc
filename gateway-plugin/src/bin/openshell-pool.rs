//! `openshell-pool`: the operator CLI. Parses flags and dispatches; every
//! failure is one line on stderr and a non-zero exit code.

use clap::{CommandFactory, Parser};
use gateway_plugin::cli::{commands, dev, Cli, CliError, Command, Gateway};

fn main() {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help, --version, and a command given without its subcommand.
        Err(e)
            if !e.use_stderr()
                || e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand =>
        {
            e.exit()
        }
        Err(e) => {
            // One line: clap's first line, without the usage block.
            let text = e.to_string();
            let first = text
                .lines()
                .next()
                .unwrap_or("invalid arguments")
                .trim_start_matches("error: ");
            eprintln!("openshell-pool: {first} (see `openshell-pool --help`)");
            std::process::exit(2);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("openshell-pool: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(run(cli)) {
        if !matches!(e, CliError::ExitStatus(_)) {
            eprintln!("openshell-pool: {e}");
        }
        std::process::exit(e.exit_code());
    }
}

async fn run(cli: Cli) -> Result<(), CliError> {
    let gw = Gateway {
        endpoints: cli.endpoints.clone(),
        token: cli.token.clone(),
    };
    match cli.command {
        Command::Dev(args) => dev::run(args).await,
        Command::Raft(c) => commands::raft(&gw, cli.output, c).await,
        Command::Pool(c) => commands::pool(&gw, cli.output, c).await,
        Command::Sandbox(c) => commands::sandbox(&gw, cli.output, c).await,
        Command::Backup(c) => commands::backup(&gw, cli.output, c).await,
        Command::Completions { shell } => {
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
