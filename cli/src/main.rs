//! `openshell-pool`: the operator CLI. Parses flags and dispatches; every
//! failure is one line on stderr and a non-zero exit code.

use clap::Parser;
use cli::{run, Cli, CliError};

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
            // clap quotes the value it refused: escaped like every output.
            let first = proto::text::escaped(first);
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
            // One line, whatever a gateway's message held (it may echo
            // what the user typed, or a field a supervisor sent).
            eprintln!("openshell-pool: {}", proto::text::escaped(&e.to_string()));
        }
        std::process::exit(e.exit_code());
    }
}
