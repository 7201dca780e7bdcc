//! `--watch`: a status command re-run every interval until Ctrl-C.
//!
//! - on a terminal (`-o table`): the screen is cleared and the table redrawn,
//!   under a line naming the command, the interval and the time;
//! - piped (`-o table`): each table follows a `--- <unix ms>` line;
//! - `-o json`: one compact JSON document per line (NDJSON), each the same
//!   document `-o json` prints once.
//!
//! A failed round (no gateway answers) prints its error on stderr and the
//! watch goes on; Ctrl-C ends it with exit code 0. What a gateway sent is
//! escaped as in every other output ([`super`]): only the watch's own
//! clear-screen sequence reaches the terminal.

use std::future::Future;
use std::io::{IsTerminal, Write};
use std::time::Duration;

use serde_json::Value;

use crate::{CliError, Output};

/// The shortest interval `--interval` accepts.
pub const MIN_INTERVAL: Duration = Duration::from_millis(250);
/// The interval without `--interval`.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(2);

/// Runs `fetch` once and prints it (`watch` false), or watches it.
///
/// # Errors
/// `fetch`'s error (once); `--interval` without `--watch` or below
/// [`MIN_INTERVAL`].
pub async fn once_or_watch<F, Fut>(
    title: &str,
    output: Output,
    watch_it: bool,
    interval_ms: Option<u64>,
    mut fetch: F,
) -> Result<(), CliError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(Value, String), CliError>>,
{
    if !watch_it {
        if interval_ms.is_some() {
            return Err(CliError::Usage(
                "--interval is the --watch interval: add --watch".into(),
            ));
        }
        let (document, table) = fetch().await?;
        super::emit(output, document, || table);
        return Ok(());
    }
    let interval = interval_ms.map_or(DEFAULT_INTERVAL, Duration::from_millis);
    watch(title, output, interval, fetch).await
}

/// Re-runs `fetch` every `interval` and prints its document and table as the
/// module doc says, until Ctrl-C.
///
/// # Errors
/// `interval` below [`MIN_INTERVAL`].
pub async fn watch<F, Fut>(
    title: &str,
    output: Output,
    interval: Duration,
    mut fetch: F,
) -> Result<(), CliError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(Value, String), CliError>>,
{
    check_interval(interval)?;
    let terminal = std::io::stdout().is_terminal();
    let mut every = tokio::time::interval(interval);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => {}
            _ = tokio::signal::ctrl_c() => return Ok(()),
        }
        let round = tokio::select! {
            round = fetch() => round,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let shown = match round {
            Ok((document, table)) => show(
                output,
                terminal,
                &format!("{title} (every {} ms; Ctrl-C stops)", interval.as_millis()),
                &document,
                &table,
            ),
            Err(e) => {
                eprintln!(
                    "{title}: {} (retrying)",
                    proto::text::escaped(&e.to_string())
                );
                Ok(())
            }
        };
        // The reader went away (`| head`): the watch is over.
        if shown.is_err() {
            return Ok(());
        }
    }
}

/// Prints one round of a watch: `document` as one NDJSON line with `-o
/// json`; else `table` under `heading` on a cleared terminal, or after a
/// `--- <unix ms>` line when piped.
///
/// # Errors
/// Writing to stdout failed (the reader went away).
pub fn show(
    output: Output,
    terminal: bool,
    heading: &str,
    document: &Value,
    table: &str,
) -> std::io::Result<()> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or_default();
    let table = proto::text::escaped_lines(table);
    let text = match output {
        Output::Json => format!("{}\n", super::json_text(document, false)),
        Output::Table if terminal => format!("\x1b[2J\x1b[H{heading}\n\n{table}"),
        Output::Table => format!("--- {now_ms}\n{table}"),
    };
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush())
}

/// Refuses an `--interval` below [`MIN_INTERVAL`].
///
/// # Errors
/// [`CliError::Usage`] naming both.
pub fn check_interval(interval: Duration) -> Result<(), CliError> {
    if interval < MIN_INTERVAL {
        return Err(CliError::Usage(format!(
            "--interval {} ms: at least {} ms",
            interval.as_millis(),
            MIN_INTERVAL.as_millis()
        )));
    }
    Ok(())
}
