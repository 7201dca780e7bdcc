//! The commands other than `dev`: each calls one or two RPCs and prints a
//! table or a JSON document.
//!
//! One module per command group: [`raft`](mod@raft), [`pool`](mod@pool),
//! [`sandbox`](mod@sandbox), [`backup`](mod@backup), and
//! [`local_status`](mod@local_status) (offline, on a data directory); this
//! module holds the output they share.

pub mod backup;
pub mod local_status;
pub mod pool;
pub mod raft;
pub mod sandbox;
pub mod watch;

use serde_json::Value;

use crate::Output;

pub use backup::backup;
pub use local_status::local_status;
pub use pool::pool;
pub use raft::raft;
pub use sandbox::sandbox;

/// Prints `value` as JSON, or `table` as text.
pub(crate) fn emit(output: Output, value: Value, table: impl FnOnce() -> String) {
    match output {
        Output::Json => println!(
            "{}",
            serde_json::to_string_pretty(&value).unwrap_or_else(|_| value.to_string())
        ),
        Output::Table => print!("{}", table()),
    }
}

/// Formats rows as aligned columns.
pub(crate) fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
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
