//! The commands other than `dev`: each calls one or two RPCs and prints a
//! table or a JSON document.
//!
//! One module per command group: [`raft`](mod@raft) (and its
//! [`check`](mod@check)), [`pool`](mod@pool),
//! [`sandbox`](mod@sandbox) (and [`sandbox_cells`](mod@sandbox_cells), with
//! `--cells`), [`backup`](mod@backup), and
//! [`local_status`](mod@local_status) (offline, on a data directory); this
//! module holds the output they share.
//!
//! Text output never carries a raw control character from a gateway (a
//! supervisor's address, an operation id, a failure message): every table
//! cell is escaped ([`proto::text::escaped`]: ESC, CR, NUL, newlines, bidi
//! overrides become `\u{1b}`, `\r`, ...), and every other text block passes
//! [`proto::text::escaped_lines`] before it is printed, so a field can
//! neither forge a row nor drive the terminal. `-o json` is escaped by
//! its JSON encoding ([`json_text`]). `sandbox exec` is the exception: it
//! writes the command's own output as it came, like `kubectl exec`.

pub mod backup;
pub mod check;
mod each;
pub mod follow;
pub mod local_status;
pub mod pool;
pub mod raft;
pub mod sandbox;
pub mod sandbox_cells;
pub mod watch;

use serde_json::Value;

use crate::Output;

pub use backup::backup;
pub use local_status::local_status;
pub use pool::pool;
pub use raft::raft;
pub use sandbox::sandbox;
pub use sandbox_cells::sandbox_cells;

/// Prints `value` as JSON, or `table` as text (control characters
/// escaped, line ends kept). A reader that closed the pipe (`| head`)
/// ends the output quietly, as it does for any Unix tool; `println!`
/// panicked there.
pub(crate) fn emit(output: Output, value: Value, table: impl FnOnce() -> String) {
    use std::io::Write;
    let text = match output {
        Output::Json => format!("{}\n", json_text(&value, true)),
        Output::Table => proto::text::escaped_lines(&table()).into_owned(),
    };
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            eprintln!("openshell-pool: cannot write the output: {e}");
        }
    }
}

/// `value` as JSON (`pretty`: indented), with every character
/// [`proto::text::is_unsafe`] written as a `\uXXXX` escape. serde_json
/// already escapes C0 controls; this also covers DEL, C1 and bidi
/// characters, which JSON allows raw but a terminal acts on. The document
/// is the same (a JSON parser reads the same strings).
pub(crate) fn json_text(value: &Value, pretty: bool) -> String {
    let text = if pretty {
        serde_json::to_string_pretty(value)
    } else {
        serde_json::to_string(value)
    }
    .unwrap_or_else(|_| value.to_string());
    if !text.chars().any(|c| c != '\n' && proto::text::is_unsafe(c)) {
        return text;
    }
    // Unsafe characters that serde_json left raw can only be inside
    // strings (outside them JSON has only its own punctuation and
    // whitespace, which serde_json writes as spaces and line ends).
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if proto::text::is_unsafe(c) && !matches!(c, '\n' | ' ') {
            out.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            out.push(c);
        }
    }
    out
}

/// Formats rows as aligned columns, every cell escaped
/// ([`proto::text::escaped`]): a cell holding a newline or an escape
/// sequence stays one cell of one row.
pub(crate) fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let rows: Vec<Vec<String>> = rows
        .into_iter()
        .map(|row| {
            row.into_iter()
                .map(|cell| proto::text::escaped(&cell).into_owned())
                .collect()
        })
        .collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.len());
            }
        }
    }
    let line = |cells: Vec<String>| {
        let mut out = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<width$}", width = widths.get(i).copied().unwrap_or(0)))
            .collect::<Vec<_>>()
            .join("  ");
        out.truncate(out.trim_end().len());
        out + "\n"
    };
    let mut out = line(header.iter().map(|h| h.to_string()).collect());
    for row in rows {
        out += &line(row);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hostile_cell_stays_one_escaped_cell_of_one_row() {
        let text = table(
            &["ID", "ADDRESS"],
            vec![vec!["m1".into(), "a\r\nFORGED\u{1b}[2J\u{202e}".into()]],
        );
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(!text.chars().any(|c| c != '\n' && proto::text::is_unsafe(c)));
        assert!(text.contains("a\\r\\nFORGED\\u{1b}[2J\\u{202e}"), "{text}");
    }

    #[test]
    fn json_escapes_what_serde_json_leaves_raw_and_reads_back_the_same() {
        let value = serde_json::json!({"s": "a\u{7f}b\u{9b}c\u{202e}d\n\u{1b}", "n": 1});
        for pretty in [true, false] {
            let text = json_text(&value, pretty);
            assert!(
                !text.chars().any(|c| c != '\n' && proto::text::is_unsafe(c)),
                "{text}"
            );
            let back: Value = serde_json::from_str(&text).expect("valid JSON");
            assert_eq!(back, value);
        }
        let plain = serde_json::json!({"s": "plain"});
        assert_eq!(json_text(&plain, false), plain.to_string());
    }
}
