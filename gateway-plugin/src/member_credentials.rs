//! The member credentials file: which credential each supervisor (pool
//! member) presents, so that a supervisor can only join as the member it is
//! (`[openshell.gateway.supervisor_pool] member_credentials_file`,
//! `--member-credentials-file`).
//!
//! # Format (the only one)
//!
//! One member per line, `member_id credential`, separated by whitespace;
//! blank lines and lines starting with `#` are ignored. A member id follows
//! the identifier rule ([`proto::ids`]); a credential is 16 to 4096
//! printable characters without whitespace. A member id listed twice is an
//! error. Errors name the line, never the credential.
//!
//! ```text
//! # member_id  credential
//! sup-a        4f1c0e...   # e.g. `openssl rand -hex 32`
//! sup-b        9a77d2...
//! ```
//!
//! The gateway re-reads the file when it changes (checked at most every
//! [`RELOAD_EVERY`], when a supervisor says hello), so adding a member needs
//! no restart; a file that no longer parses is logged (file and line) and
//! the previous set stays in force ([`proto::watched_file`]).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use proto::secret::Secret;
use proto::watched_file::{Refresh, WatchedFile};

/// How often, at most, the file is re-read.
pub const RELOAD_EVERY: Duration = Duration::from_secs(2);
/// Shortest credential accepted (a guessable one is no credential).
const MIN_CREDENTIAL: usize = 16;
/// Longest credential accepted.
const MAX_CREDENTIAL: usize = 4096;

/// member id -> credential (`Debug` prints the credentials as
/// `<redacted>`: [`Secret`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberCredentials {
    by_member: BTreeMap<String, Secret>,
}

impl MemberCredentials {
    /// Parses the file's text (format in the module doc).
    ///
    /// # Errors
    /// `line N: <problem>` for the first bad line.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut by_member = BTreeMap::new();
        for (i, line) in text.lines().enumerate() {
            let n = i + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [member, credential] = fields[..] else {
                return Err(format!(
                    "line {n}: expected `member_id credential` (two fields), found {}",
                    fields.len()
                ));
            };
            proto::ids::check_id("member_id", member).map_err(|e| format!("line {n}: {e}"))?;
            let len = credential.chars().count();
            if !(MIN_CREDENTIAL..=MAX_CREDENTIAL).contains(&len)
                || credential.chars().any(|c| c.is_control())
            {
                return Err(format!(
                    "line {n}: the credential of member {member} must be {MIN_CREDENTIAL} to \
                     {MAX_CREDENTIAL} printable characters"
                ));
            }
            if by_member
                .insert(member.to_string(), credential.into())
                .is_some()
            {
                return Err(format!("line {n}: member {member} is listed twice"));
            }
        }
        Ok(MemberCredentials { by_member })
    }

    /// The credential of `member`, if listed.
    pub fn credential_of(&self, member: &str) -> Option<&str> {
        self.by_member.get(member).map(Secret::expose)
    }

    /// How many members are listed.
    pub fn len(&self) -> usize {
        self.by_member.len()
    }

    /// Whether no member is listed.
    pub fn is_empty(&self) -> bool {
        self.by_member.is_empty()
    }
}

/// The member credentials file, re-read on change.
pub type MemberCredentialsFile = WatchedFile<MemberCredentials>;

/// Loads the file (at start: a bad file stops the gateway).
///
/// # Errors
/// `<path>: line N: <problem>`.
pub fn load(path: &Path) -> Result<MemberCredentialsFile, String> {
    WatchedFile::load(path, MemberCredentials::parse, RELOAD_EVERY)
}

/// The credentials in force, after re-reading the file if it is due
/// (logging a reload or a refused file).
pub fn current(file: &MemberCredentialsFile) -> std::sync::Arc<MemberCredentials> {
    match file.refresh() {
        Refresh::Unchanged => {}
        Refresh::Reloaded => {
            tracing::info!(file = %file.path().display(), members = file.current().len(),
                "member credentials file reloaded")
        }
        Refresh::Kept(error) => {
            tracing::error!(%error, "member credentials file refused")
        }
    }
    file.current()
}

#[cfg(test)]
mod tests {
    use super::*;

    const C1: &str = "c1-0123456789abcdef";
    const C2: &str = "c2-0123456789abcdef";

    #[test]
    fn lines_comments_and_blanks() {
        let text = format!("# members\n\nm1 {C1}\n   m2\t{C2}  \n# end\n");
        let creds = MemberCredentials::parse(&text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(creds.credential_of("m1"), Some(C1));
        assert_eq!(creds.credential_of("m2"), Some(C2));
        assert_eq!(creds.credential_of("m3"), None);
        let shown = format!("{creds:?}");
        assert!(!shown.contains(C1) && shown.contains("m1"), "{shown}");
        assert!(MemberCredentials::parse("").unwrap_or_default().is_empty());
    }

    #[test]
    fn bad_lines_are_refused_naming_the_line_not_the_credential() {
        let refused = |text: &str| MemberCredentials::parse(text).err().unwrap_or_default();
        let e = refused(&format!("m1 {C1}\nm1 {C2}\n"));
        assert_eq!(e, "line 2: member m1 is listed twice");
        let e = refused(&format!("# x\n../etc {C1}\n"));
        assert!(e.starts_with("line 2: invalid member_id"), "{e}");
        let e = refused(&format!("m1 {C1} extra\n"));
        assert!(
            e.starts_with("line 1: expected `member_id credential`"),
            "{e}"
        );
        let e = refused("m1\n");
        assert!(e.starts_with("line 1: expected"), "{e}");
        let e = refused("m1 short\n");
        assert!(e.starts_with("line 1: the credential of member m1"), "{e}");
        assert!(!e.contains("short"), "{e}");
    }
}
