//! What the sandbox runtimes of process members logged: every runtime of a
//! sandbox appends to `runtimes/<sandbox>.log`; after the run the
//! `workload-continuity` checker ([`crate::checker::workload`]) reads how
//! many runtimes started and which grants they accepted.

use std::collections::BTreeMap;
use std::path::Path;

/// What one sandbox's runtimes logged (every runtime of a sandbox appends
/// to `runtimes/<sandbox>.log`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuntimeLog {
    /// Runtimes started (`serving SandboxRuntime` lines).
    pub starts: usize,
    /// Grants the runtimes accepted, in log order (`activated` lines).
    pub activations: Vec<Activation>,
}

/// A grant a runtime accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Activation {
    /// Member named by the grant.
    pub member: String,
    /// Its incarnation.
    pub incarnation: u64,
    /// Ownership term.
    pub term: u64,
    /// Credential epoch.
    pub credential_epoch: u64,
}

/// The line without ANSI colour sequences (`ESC [ ... m`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `value` of ` key=value` in a log line.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let at = line.find(&format!(" {key}="))? + key.len() + 2;
    line[at..].split(char::is_whitespace).next()
}

/// Parses one runtime log.
pub fn parse_runtime_log(text: &str) -> RuntimeLog {
    let mut log = RuntimeLog::default();
    for line in text.lines() {
        let line = strip_ansi(line);
        let line = line.as_str();
        if line.contains("serving SandboxRuntime") {
            log.starts += 1;
        } else if line.contains(" activated") {
            let number = |k: &str| field(line, k).and_then(|v| v.parse::<u64>().ok());
            if let (Some(member), Some(incarnation), Some(term), Some(credential_epoch)) = (
                field(line, "member"),
                number("incarnation"),
                number("term"),
                number("credential_epoch"),
            ) {
                log.activations.push(Activation {
                    member: member.to_string(),
                    incarnation,
                    term,
                    credential_epoch,
                });
            }
        }
    }
    log
}

/// Every sandbox's [`RuntimeLog`], from `runtime_dir/<sandbox>.log`.
pub fn runtime_logs(runtime_dir: &Path) -> BTreeMap<String, RuntimeLog> {
    crate::files_with_suffix(runtime_dir, ".log")
        .into_iter()
        .map(|(sandbox, path)| {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            (sandbox, parse_runtime_log(&text))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_logs_are_parsed_with_or_without_colour() {
        let text = "2026-11-29T13:19:34.695864Z  INFO supervisor::runtime: serving SandboxRuntime sandbox=sb32 addr=127.0.0.1:35319
2026-11-29T13:19:34.714752Z  INFO Activate{sandbox=sb32}: supervisor::runtime::service: activated member=s3 incarnation=17 term=1 credential_epoch=1
2026-11-29T13:20:02.028537Z  WARN Activate{sandbox=sb32}: supervisor::runtime::service: refused: credential epoch 2 is older than the current epoch 3 code=PermissionDenied
\u{1b}[2m2026\u{1b}[0m  INFO Activate: activated \u{1b}[3mmember\u{1b}[0m\u{1b}[2m=\u{1b}[0ms4 incarnation=18 term=3 credential_epoch=3\u{1b}[0m
";
        let log = parse_runtime_log(text);
        assert_eq!(log.starts, 1);
        assert_eq!(
            log.activations[0],
            Activation {
                member: "s3".into(),
                incarnation: 17,
                term: 1,
                credential_epoch: 1
            }
        );
        assert_eq!(
            log.activations[1],
            Activation {
                member: "s4".into(),
                incarnation: 18,
                term: 3,
                credential_epoch: 3
            }
        );
        assert_eq!(log.activations.len(), 2, "{log:?}");
    }
}
