//! The one rule for identifiers (sandbox ids, member ids, object types and
//! names): what the gateway accepts at its API, what `apply` admits into the
//! state, and what the supervisor may turn into a file name. Spelled here
//! and nowhere else; `proto::ids` re-exports it for the crates that do not
//! depend on `pool`.
//!
//! An identifier is 1 to [`MAX_ID_LEN`] bytes of `[A-Za-z0-9._-]`, does not
//! start with `.` or `-`, and so is never `.`, `..`, a path, an option or
//! blank. Such an id is safe as one path component: `<dir>/<id>.log` stays in
//! `<dir>`.

use serde::{Deserialize, Serialize};

/// The longest identifier, in bytes (ASCII, so also in characters).
pub const MAX_ID_LEN: usize = 128;

/// Why an identifier was refused; names the field it came from.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("invalid {field}: {rule}")]
pub struct InvalidId {
    /// The field that carried the id (`sandbox_id`, `member_id`, ...).
    pub field: String,
    /// The part of the rule it broke.
    pub rule: IdRule,
}

/// The part of the identifier rule an id broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
pub enum IdRule {
    /// The id is empty.
    #[error("must not be empty")]
    Empty,
    /// The id is longer than [`MAX_ID_LEN`] bytes.
    #[error("must be at most 128 characters")]
    TooLong,
    /// The id holds a character outside `[A-Za-z0-9._-]`.
    #[error("may hold only letters, digits, '.', '_' and '-'")]
    Charset,
    /// The id starts with `.` or `-` (this covers `.` and `..`).
    #[error("must not start with '.' or '-'")]
    LeadingChar,
}

/// The rule alone: which part of it `id` breaks, if any.
pub fn id_rule(id: &str) -> Option<IdRule> {
    let bytes = id.as_bytes();
    let allowed = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-');
    match bytes.first() {
        None => Some(IdRule::Empty),
        Some(_) if bytes.len() > MAX_ID_LEN => Some(IdRule::TooLong),
        Some(_) if !bytes.iter().all(allowed) => Some(IdRule::Charset),
        Some(b'.' | b'-') => Some(IdRule::LeadingChar),
        Some(_) => None,
    }
}

/// Checks `id` against the rule; the error names `field`.
pub fn check_id(field: &str, id: &str) -> Result<(), InvalidId> {
    match id_rule(id) {
        None => Ok(()),
        Some(rule) => Err(InvalidId {
            field: field.to_string(),
            rule,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_the_tests_and_the_demo_use_are_valid() {
        for id in [
            "sb1",
            "sup-a",
            "member-0",
            "a",
            "A.b_c-9",
            "demo-1",
            &"x".repeat(MAX_ID_LEN),
        ] {
            assert_eq!(id_rule(id), None, "{id}");
        }
    }

    #[test]
    fn each_break_of_the_rule_is_named() {
        let cases = [
            ("", IdRule::Empty),
            (".", IdRule::LeadingChar),
            ("..", IdRule::LeadingChar),
            (".hidden", IdRule::LeadingChar),
            ("-rf", IdRule::LeadingChar),
            ("../x", IdRule::Charset),
            ("/etc/passwd", IdRule::Charset),
            ("x/../../y", IdRule::Charset),
            ("a b", IdRule::Charset),
            ("a\0b", IdRule::Charset),
            ("é", IdRule::Charset),
            ("a@b", IdRule::Charset),
        ];
        for (id, rule) in cases {
            assert_eq!(id_rule(id), Some(rule), "{id:?}");
        }
        assert_eq!(id_rule(&"x".repeat(MAX_ID_LEN + 1)), Some(IdRule::TooLong));
        assert_eq!(id_rule(&"x".repeat(300)), Some(IdRule::TooLong));
    }

    #[test]
    fn the_error_names_the_field_and_the_rule() {
        let e = check_id("sandbox_id", "../x").unwrap_err();
        assert_eq!(e.field, "sandbox_id");
        assert_eq!(
            e.to_string(),
            "invalid sandbox_id: may hold only letters, digits, '.', '_' and '-'"
        );
        assert!(check_id("member_id", "sup-a").is_ok());
    }
}
