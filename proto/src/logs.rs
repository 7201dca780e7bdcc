//! Log output of the binaries: `--log-format text|json` on stderr.
//!
//! - `text` (the default): tracing's human format, colours on a terminal.
//! - `json`: one JSON object per line (tracing-subscriber's JSON format):
//!   `timestamp`, `level`, `target`, `fields` (the event's fields, `message`
//!   among them), `span` (the innermost span's fields: for a gRPC call
//!   `rpc` with `method` and `request_id`) and `spans` (every enclosing
//!   span), plus this process's labels ([`init`]'s `labels`: a gateway's
//!   `node_id`, a supervisor's `member`) and, once a raft node reports it
//!   ([`set_term`]), the current `raft_term` (not `term`: a sandbox owner's
//!   term is another thing, and events carry it as a field).
//!
//! Both formats carry the labels and the term (text: `node_id=1
//! raft_term=3` at the end of the line), so a line says which node wrote it
//! and in which term wherever it ends up.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{self, FormatEvent, FormatFields, JsonFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("--log-format {other:?}: expected `text` or `json`")),
        }
    }
}

/// `--log-format text|json` (`OPENSHELL_LOG_FORMAT`), the flag every binary
/// takes: `#[command(flatten)]` it into the binary's arguments.
#[derive(Clone, Copy, Debug, Default, clap::Args)]
pub struct LogArgs {
    /// Log lines on stderr: `text` or `json` (one object per line, with
    /// this process's labels and, in a gateway, the raft term and each
    /// call's method and request_id).
    #[arg(
        long,
        env = "OPENSHELL_LOG_FORMAT",
        default_value = "text",
        value_name = "FORMAT"
    )]
    pub log_format: LogFormat,
}

/// The raft term lines carry; 0 = none reported yet (no term is 0 once a
/// node started).
static TERM: AtomicU64 = AtomicU64::new(0);
/// The labels, rendered once for each format.
static LABELS: OnceLock<Labels> = OnceLock::new();

struct Labels {
    /// `"node_id":1,` (JSON members, each followed by a comma).
    json: String,
    /// `node_id=1 ` (text pairs, each followed by a space; written at the
    /// end of a text line).
    text: String,
}

/// The raft term this process's lines carry from now on.
pub fn set_term(term: u64) {
    TERM.store(term, Ordering::Relaxed);
}

/// Installs the global subscriber: `format`, the `RUST_LOG` filter (else
/// `default_filter`), stderr, and `labels` on every line.
///
/// # Errors
/// A subscriber was already installed.
pub fn init(
    format: LogFormat,
    default_filter: &str,
    labels: &[(&str, serde_json::Value)],
) -> Result<(), String> {
    let mut json = String::new();
    let mut text = String::new();
    for (key, value) in labels {
        let _ = write!(json, "{}:{value},", serde_json::Value::from(*key));
        match value {
            serde_json::Value::String(s) => {
                let _ = write!(text, "{key}={s} ");
            }
            other => {
                let _ = write!(text, "{key}={other} ");
            }
        }
    }
    let _ = LABELS.set(Labels { json, text });
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_filter));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder
            .event_format(Labelled {
                inner: format::format()
                    .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())),
                json: false,
            })
            .try_init(),
        LogFormat::Json => builder
            .fmt_fields(JsonFields::new())
            .event_format(Labelled {
                inner: format::format()
                    .json()
                    .with_current_span(true)
                    .with_span_list(true),
                json: true,
            })
            .try_init(),
    };
    installed.map_err(|e| format!("installing the log subscriber: {e}"))
}

/// A format that adds the labels and the term to the inner format's line.
struct Labelled<F> {
    inner: F,
    json: bool,
}

impl<S, N, F> FormatEvent<S, N> for Labelled<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let labels = LABELS.get();
        let term = TERM.load(Ordering::Relaxed);
        let mut line = String::new();
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        if !self.json {
            // The labels close the line: the timestamp stays first.
            let body = line.strip_suffix('\n').unwrap_or(&line);
            writer.write_str(body)?;
            if let Some(labels) = labels {
                write!(writer, " {}", labels.text.trim_end())?;
            }
            if term > 0 {
                write!(writer, " raft_term={term}")?;
            }
            return writer.write_char('\n');
        }
        match line.strip_prefix('{') {
            Some(rest) => {
                writer.write_char('{')?;
                if let Some(labels) = labels {
                    writer.write_str(&labels.json)?;
                }
                if term > 0 {
                    write!(writer, "\"raft_term\":{term},")?;
                }
                writer.write_str(rest)
            }
            None => writer.write_str(&line),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_names_its_two_values_and_refuses_others() {
        assert_eq!("text".parse::<LogFormat>(), Ok(LogFormat::Text));
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        let refused = "yaml".parse::<LogFormat>().unwrap_err();
        assert!(
            refused.contains("text") && refused.contains("json"),
            "{refused}"
        );
    }
}
