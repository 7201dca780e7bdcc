//! Secrets: the one type that holds them ([`Secret`]), constant-time
//! comparison, and reading a token from a file (so it need not show in
//! `/proc/*/cmdline`).
//!
//! Every token, credential and key a config type holds is a [`Secret`]: its
//! `Debug` prints [`REDACTED`] (so a config type derives `Debug` and never
//! writes redaction by hand), it is zeroized when dropped (the `secrecy`
//! crate's `SecretString` inside), compared in constant time, and read
//! only through [`Secret::expose`], which makes every use greppable.
//! Every crate that checks a token or credential compares it with
//! [`ct_eq`] (or [`Secret`]'s `==`, which does).

use std::path::{Path, PathBuf};

use subtle::ConstantTimeEq;

/// The largest secret file read, in bytes: tokens, keys and credentials are
/// far smaller; a file past it (a wrong path, `/dev/zero`) is refused
/// rather than read without end.
pub const MAX_SECRET_FILE_BYTES: u64 = 64 * 1024;

/// What `Debug` prints in place of a secret.
pub const REDACTED: &str = "<redacted>";

/// Compares a presented secret with the expected one in time independent of
/// where they differ (only the lengths may leak).
pub fn ct_eq(presented: &[u8], expected: &[u8]) -> bool {
    presented.ct_eq(expected).into()
}

/// Redacted form of an optional secret for `Debug` output (for a field
/// that cannot be a [`Secret`], such as another crate's type).
pub fn redact_opt<T>(secret: &Option<T>) -> Option<&'static str> {
    secret.as_ref().map(|_| REDACTED)
}

/// A token, credential or key: printed as [`REDACTED`], zeroized on drop,
/// compared in constant time, read through [`Secret::expose`] only.
/// Serialized as its plain text (a configuration file a launcher writes,
/// mode 0600, must hold what it was given); deserialized from a string.
#[derive(Clone, Default)]
pub struct Secret(secrecy::SecretString);

impl Secret {
    /// The secret's text, for the one place that needs it (a header, a
    /// comparison, a file written 0600). Never log it.
    pub fn expose(&self) -> &str {
        secrecy::ExposeSecret::expose_secret(&self.0)
    }

    /// Whether it is the empty string (no secret at all).
    pub fn is_empty(&self) -> bool {
        self.expose().is_empty()
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(REDACTED)
    }
}

impl PartialEq for Secret {
    /// Constant time in the contents ([`ct_eq`]).
    fn eq(&self, other: &Secret) -> bool {
        ct_eq(self.expose().as_bytes(), other.expose().as_bytes())
    }
}

impl Eq for Secret {}

impl From<String> for Secret {
    fn from(s: String) -> Secret {
        Secret(s.into())
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Secret {
        Secret(s.into())
    }
}

impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;

    /// For a command-line flag (`clap` parses a `Secret` with it).
    fn from_str(s: &str) -> Result<Secret, Self::Err> {
        Ok(Secret::from(s))
    }
}

impl serde::Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.expose())
    }
}

impl<'de> serde::Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Secret, D::Error> {
        String::deserialize(deserializer).map(Secret::from)
    }
}

/// Why a secret file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    /// The file could not be read.
    #[error("{flag} {}: {error}", path.display())]
    Read {
        /// The flag that named the file.
        flag: String,
        /// The file.
        path: PathBuf,
        /// The read error (in the message, not a `source`, so that an error
        /// chain prints it once).
        error: std::io::Error,
    },
    /// The file is larger than [`MAX_SECRET_FILE_BYTES`].
    #[error("{flag} {}: larger than {MAX_SECRET_FILE_BYTES} bytes: not a secret file", path.display())]
    TooLarge {
        /// The flag that named the file.
        flag: String,
        /// The file.
        path: PathBuf,
    },
    /// The file holds nothing (after the trailing newline is trimmed).
    #[error("{flag} {}: the file is empty", path.display())]
    Empty {
        /// The flag that named the file.
        flag: String,
        /// The file.
        path: PathBuf,
    },
}

/// Reads the secret in `path` (given by `flag`), trimming one trailing
/// newline (`\n` or `\r\n`).
///
/// # Errors
/// [`SecretFileError`] naming the flag and path when the file cannot be read,
/// is larger than [`MAX_SECRET_FILE_BYTES`] or is empty.
pub fn read_secret_file(flag: &str, path: &Path) -> Result<String, SecretFileError> {
    use std::io::Read;
    let read_error = |error| SecretFileError::Read {
        flag: flag.to_string(),
        path: path.to_path_buf(),
        error,
    };
    let mut text = String::new();
    std::fs::File::open(path)
        .map_err(read_error)?
        .take(MAX_SECRET_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(read_error)?;
    if text.len() as u64 > MAX_SECRET_FILE_BYTES {
        return Err(SecretFileError::TooLarge {
            flag: flag.to_string(),
            path: path.to_path_buf(),
        });
    }
    let secret = text
        .strip_suffix('\n')
        .map(|t| t.strip_suffix('\r').unwrap_or(t))
        .unwrap_or(&text);
    if secret.is_empty() {
        return Err(SecretFileError::Empty {
            flag: flag.to_string(),
            path: path.to_path_buf(),
        });
    }
    Ok(secret.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_never_prints_and_round_trips_through_serde() {
        #[derive(Debug, serde::Serialize, serde::Deserialize)]
        struct Config {
            token: Secret,
            tokens: Vec<Secret>,
        }
        let config = Config {
            token: "s3cret-one".into(),
            tokens: vec!["s3cret-two".into()],
        };
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains(REDACTED), "{shown}");
        let json = serde_json::to_string(&config).unwrap();
        let back: Config = serde_json::from_str(&json).unwrap();
        assert_eq!(back.token.expose(), "s3cret-one");
        assert_eq!(back.tokens, config.tokens);
        assert_ne!(back.token, Secret::from("s3cret-two"));
    }

    #[test]
    fn ct_eq_compares_whole_secrets() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abd", b"abc"));
        assert!(!ct_eq(b"ab", b"abc"));
        assert!(!ct_eq(b"", b"abc"));
    }

    #[test]
    fn secret_files_are_trimmed_and_must_not_be_empty() {
        let dir = std::env::temp_dir().join(format!("proto-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("token");
        std::fs::write(&file, "s3cret\r\n").unwrap();
        assert_eq!(read_secret_file("--x-file", &file).unwrap(), "s3cret");
        std::fs::write(&file, "s3cret\n").unwrap();
        assert_eq!(read_secret_file("--x-file", &file).unwrap(), "s3cret");
        std::fs::write(&file, "\n").unwrap();
        let err = read_secret_file("--x-file", &file).unwrap_err().to_string();
        assert!(err.contains("--x-file") && err.contains("empty"), "{err}");
        let missing = dir.join("missing");
        let err = read_secret_file("--x-file", &missing)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--x-file") && err.contains("missing"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_secret_file_past_the_bound_is_refused_not_read_without_end() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let at = dir.path().join("at");
        std::fs::write(&at, "a".repeat(MAX_SECRET_FILE_BYTES as usize))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(read_secret_file("--x", &at).is_ok());
        let over = dir.path().join("over");
        std::fs::write(&over, "a".repeat(MAX_SECRET_FILE_BYTES as usize + 1))
            .unwrap_or_else(|e| panic!("{e}"));
        let e = read_secret_file("--x", &over)
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.contains("--x") && e.contains("larger than 65536"), "{e}");
        let endless = read_secret_file("--x", Path::new("/dev/zero"))
            .map(|_| ())
            .unwrap_err();
        assert!(
            matches!(endless, SecretFileError::TooLarge { .. }),
            "{endless}"
        );
    }
}
