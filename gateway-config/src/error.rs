//! What every part of the gateway configuration reports: [`ConfigError`],
//! naming the key at fault and how to fix it, and the range check the
//! validations share. A leaf: every other file imports it.

use std::path::PathBuf;

/// A configuration value that is missing, malformed or out of range.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// The file cannot be read or parsed.
    #[error("config file {path}: {problem}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A required key is missing.
    #[error("{key} is required (set it in the config file, or with {flag})")]
    Missing {
        /// The key, e.g. `openshell.gateway.node_id`.
        key: &'static str,
        /// The flag that sets it.
        flag: &'static str,
    },
    /// Secure mode lacks what it needs (each `(key, flag)` missing).
    #[error("{}", not_secured(.0))]
    NotSecured(Vec<(&'static str, &'static str)>),
    /// A secret file the configuration names cannot be read or is empty:
    /// the key or flag and the file, with the cause.
    #[error("{0}")]
    SecretFile(String),
    /// A value is invalid.
    #[error("{key} = {value}: {problem}")]
    Invalid {
        /// The key.
        key: &'static str,
        /// The value given.
        value: String,
        /// What is wrong, with the allowed range.
        problem: String,
    },
}

/// The one line of [`ConfigError::NotSecured`].
fn not_secured(missing: &[(&'static str, &'static str)]) -> String {
    let list = missing
        .iter()
        .map(|(key, flag)| format!("{flag} ({key})"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "refusing to start without transport security and authentication: missing {list}; \
         provide them, or pass --insecure for a plaintext, open development gateway"
    )
}

/// `value` when it is within `lo..=hi`, else [`ConfigError::Invalid`]
/// naming `key` and the range.
pub fn in_range(key: &'static str, value: u64, lo: u64, hi: u64) -> Result<u64, ConfigError> {
    if (lo..=hi).contains(&value) {
        Ok(value)
    } else {
        Err(ConfigError::Invalid {
            key,
            value: value.to_string(),
            problem: format!("must be within {lo}..={hi}"),
        })
    }
}
