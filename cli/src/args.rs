//! The command line: flags, commands and subcommands as clap parses them.

use clap::{Parser, Subcommand, ValueEnum};

use crate::dev;

/// Default endpoints: the `openshell-pool dev` cluster.
pub const DEV_ENDPOINTS: &str = "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003";

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Human-readable tables.
    Table,
    /// One JSON document.
    Json,
}

/// Operate an OpenShell supervisor-pool store. (`Debug` prints the token
/// as `<redacted>`: a [`proto::secret::Secret`].)
#[derive(Parser, Debug)]
#[command(name = "openshell-pool", version, about, propagate_version = true)]
pub struct Cli {
    /// Gateway endpoints, comma-separated host:port; any one will do.
    #[arg(long, env = "OPENSHELL_ENDPOINTS", global = true, default_value = DEV_ENDPOINTS, value_delimiter = ',')]
    pub endpoints: Vec<String>,
    /// Bearer token (needs platform_admin for changes).
    #[arg(long, env = "OPENSHELL_TOKEN", global = true, hide_env_values = true)]
    pub token: Option<proto::secret::Secret>,
    /// File holding the bearer token (a trailing newline is trimmed); keeps
    /// it out of /proc/*/cmdline.
    #[arg(
        long,
        env = "OPENSHELL_TOKEN_FILE",
        global = true,
        conflicts_with = "token"
    )]
    pub token_file: Option<std::path::PathBuf>,
    /// The CA (PEM) that signed the gateways' certificates: every call
    /// speaks TLS and verifies the gateway against it. A command that talks
    /// to gateways needs this or --insecure.
    #[arg(long, env = "OPENSHELL_CA_FILE", global = true)]
    pub ca_file: Option<std::path::PathBuf>,
    /// A client certificate (PEM) to present: the gateways configured with
    /// `auth.client_ca_file` map its common name to a role (instead of a
    /// token). Needs --client-key-file and --ca-file.
    #[arg(
        long,
        env = "OPENSHELL_CLIENT_CERT_FILE",
        global = true,
        requires = "client_key_file"
    )]
    pub client_cert_file: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(
        long,
        env = "OPENSHELL_CLIENT_KEY_FILE",
        global = true,
        requires = "client_cert_file"
    )]
    pub client_key_file: Option<std::path::PathBuf>,
    /// A cell map (TOML, docs/design/0005-cells.md): several gateway
    /// groups, each with its own endpoints, CA and token file. `sandbox`
    /// commands place new sandboxes and take `<cell>/<id>` ids; every other
    /// command talks to the cell --cell names. Replaces --endpoints,
    /// --ca-file, --token and --insecure.
    #[arg(long, env = "OPENSHELL_CELLS", global = true)]
    pub cells: Option<std::path::PathBuf>,
    /// With --cells: the cell a command talks to (`sandbox create`: where
    /// the sandbox goes; a bare id of `sandbox get/delete/exec` is in it).
    #[arg(long, env = "OPENSHELL_CELL", global = true, value_name = "NAME")]
    pub cell: Option<String>,
    /// Talk plaintext, to gateways started with --insecure (development);
    /// overrides --ca-file.
    #[arg(long, global = true)]
    pub insecure: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", global = true, value_enum, default_value_t = Output::Table)]
    pub output: Output,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Top-level commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Start a complete local system (3 gateways, 2 supervisors, demo
    /// sandboxes) on loopback, in the foreground; Ctrl-C stops it.
    Dev(dev::DevArgs),
    /// The gateways' raft group.
    #[command(subcommand)]
    Raft(RaftCommand),
    /// The supervisor pool.
    #[command(subcommand)]
    Pool(PoolCommand),
    /// Sandboxes.
    #[command(subcommand)]
    Sandbox(SandboxCommand),
    /// Backups of the replicated state.
    #[command(subcommand)]
    Backup(BackupCommand),
    /// What a stopped gateway's data directory holds (read-only, offline):
    /// node and cluster id, last log index, committed and snapshot index,
    /// membership, vote. Refuses a directory a running process holds.
    LocalStatus {
        /// The gateway's data directory.
        #[arg(long)]
        data_dir: std::path::PathBuf,
    },
    /// Print shell completions.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// `raft ...`
#[derive(Subcommand, Debug)]
pub enum RaftCommand {
    /// Leader, term, commit and applied index, voters, learners, lag.
    Status {
        /// Re-run every --interval until Ctrl-C: a redrawn table on a
        /// terminal, tables after `--- <unix ms>` lines when piped, one JSON
        /// document per line with `-o json`.
        #[arg(long)]
        watch: bool,
        /// The --watch interval in ms (default 2000, at least 250).
        #[arg(long, value_name = "MS")]
        interval: Option<u64>,
    },
    /// Compare every gateway's state digest at one applied index (each of
    /// --endpoints asked on its own; list every gateway). Exit 7 when two
    /// replicas differ, 3 when a member could not be compared.
    Check,
    /// Add a gateway as a non-voting learner. Refused (nothing changes)
    /// unless the gateway at ADDR answers as node ID within 5 s; then waits
    /// up to 30 s until it caught up (exit 1 if it did not: it stays a
    /// learner).
    AddLearner {
        /// Its node id.
        id: u64,
        /// Its address, host:port.
        addr: String,
        /// Return at once with its progress instead of waiting.
        #[arg(long)]
        no_wait: bool,
    },
    /// Promote a learner to voter (refused unless it acknowledged the
    /// leader's appends within the last second or so and caught up).
    Promote {
        /// Its node id.
        id: u64,
        /// Promote even a learner that is down or behind (it then counts
        /// toward quorum without answering).
        #[arg(long)]
        force: bool,
    },
    /// Remove a voter or learner.
    Remove {
        /// Its node id.
        id: u64,
    },
    /// Move leadership (to ID, or to the most caught-up other voter).
    TransferLeader {
        /// The new leader.
        id: Option<u64>,
    },
    /// Build a snapshot now on the gateway that answers.
    Snapshot,
}

/// `pool ...`
#[derive(Subcommand, Debug)]
pub enum PoolCommand {
    /// Members, sandboxes and operations.
    Status {
        /// Follow the pool as it changes (`PoolAdmin.WatchPool`: no polling)
        /// until Ctrl-C: a redrawn table on a terminal, tables after
        /// `--- <unix ms>` lines when piped, one JSON document per line with
        /// `-o json`, each time something changed.
        #[arg(long)]
        watch: bool,
        /// With --watch: redraw at most every MS (default 250, at least 250).
        #[arg(long, value_name = "MS")]
        interval: Option<u64>,
    },
    /// Drain a member: move its sandboxes away; it takes no new work.
    Drain {
        /// The member id.
        member: String,
        /// Moves in flight at once, 1..=8.
        #[arg(long, default_value_t = 1)]
        max_parallel: u32,
        /// Show progress until the operation ends (a progress bar on a
        /// terminal, one line per change when stderr is piped).
        #[arg(long)]
        wait: bool,
    },
    /// Move sandboxes to their preferred members.
    Rebalance {
        /// Moves in flight at once, 1..=8.
        #[arg(long, default_value_t = 1)]
        max_parallel: u32,
        /// Show progress until the operation ends (a progress bar on a
        /// terminal, one line per change when stderr is piped).
        #[arg(long)]
        wait: bool,
    },
    /// Cancel an operation (a drained member returns to service).
    Cancel {
        /// The operation id.
        operation: String,
    },
}

/// `sandbox ...`
#[derive(Subcommand, Debug)]
pub enum SandboxCommand {
    /// Create a sandbox running COMMAND (default: the demo workload).
    Create {
        /// Sandbox id (generated if absent): 1 to 128 of `A-Za-z0-9._-`, not
        /// starting with `.` or `-` (docs/security.md, "Identifiers").
        #[arg(long)]
        id: Option<String>,
        /// The workload command.
        #[arg(last = true)]
        command: Vec<String>,
    },
    /// Delete a sandbox: its workload stops.
    Delete {
        /// Sandbox id.
        id: String,
    },
    /// One sandbox, with its workload's pid and start time.
    Get {
        /// Sandbox id.
        id: String,
    },
    /// Every sandbox.
    List {
        /// Follow the sandboxes as they change (`PoolAdmin.WatchPool`) until
        /// Ctrl-C: the table redrawn on each change (at most every
        /// --interval), as `pool status --watch`.
        #[arg(long)]
        watch: bool,
        /// With --watch: redraw at most every MS (default 250, at least 250).
        #[arg(long, value_name = "MS")]
        interval: Option<u64>,
    },
    /// Run a command inside a sandbox (through its supervisor).
    ///
    /// stdout and stderr are kept up to 1 MiB each; past that the output is
    /// cut, a line on stderr says so, and `-o json` sets `stdout_truncated` /
    /// `stderr_truncated`. A command still running at the timeout is killed.
    Exec {
        /// Sandbox id.
        id: String,
        /// The command.
        #[arg(last = true, required = true)]
        command: Vec<String>,
        /// Timeout in ms, 1..=60000 (the cap: a longer one is refused, not
        /// shortened).
        #[arg(long, default_value_t = 10_000,
              value_parser = clap::value_parser!(u64).range(1..=proto::exec::MAX_TIMEOUT_MS))]
        timeout_ms: u64,
    },
}

/// `backup ...`
#[derive(Subcommand, Debug)]
pub enum BackupCommand {
    /// Save a consistent snapshot from the leader to FILE.
    Save {
        /// The backup file.
        file: std::path::PathBuf,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_redacts_the_token() {
        let cli =
            Cli::try_parse_from(["openshell-pool", "--token", "cli-s3cret", "raft", "status"])
                .unwrap_or_else(|e| panic!("{e}"));
        let shown = format!("{cli:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
        let gateway = crate::Gateway::new(cli.endpoints.clone(), cli.token.clone(), None)
            .unwrap_or_else(|e| panic!("{e}"));
        let shown = format!("{gateway:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn token_and_token_file_conflict() {
        let parsed = Cli::try_parse_from([
            "openshell-pool",
            "--token",
            "x",
            "--token-file",
            "/f",
            "raft",
            "status",
        ]);
        assert!(parsed.is_err());
    }
}
