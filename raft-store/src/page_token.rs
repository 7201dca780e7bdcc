//! The one page-token codec of every keyset-paginated read: the object
//! store's lists ([`crate::objects::Objects::list`]) and the gateway's
//! paginated pool reads (`GetSupervisorPoolStatus`, `ListSandboxes`).
//!
//! A token names the last key of the previous page: `v1.` followed by the
//! key's UTF-8 bytes in lower-case hex. It is opaque to clients and carries
//! no state, so any gateway serves the next page and a token stays valid
//! across leader changes (a key deleted meanwhile is simply passed over).
//! The empty token means "from the start".

/// The prefix of this version of the token.
const PREFIX: &str = "v1.";

/// Longest key a token may name, in bytes (identifiers are at most 512).
pub const MAX_KEY_BYTES: usize = 1024;

/// A token this codec did not produce.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid page_token {token:?}: pass the next_page_token of the previous page ({reason})")]
pub struct PageTokenError {
    /// The token as received (cut to 64 characters).
    pub token: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// The token of the page that follows the key `last`.
pub fn encode(last: &str) -> String {
    format!("{PREFIX}{}", hex::encode(last))
}

/// The key after which the page named by `token` starts; `None` for the
/// empty token (the first page).
///
/// # Errors
/// [`PageTokenError`] when `token` is not one [`encode`] produced.
pub fn decode(token: &str) -> Result<Option<String>, PageTokenError> {
    if token.is_empty() {
        return Ok(None);
    }
    let bad = |reason| PageTokenError {
        token: token.chars().take(64).collect(),
        reason,
    };
    let hex_key = token
        .strip_prefix(PREFIX)
        .ok_or_else(|| bad("unknown version"))?;
    if hex_key.len() > 2 * MAX_KEY_BYTES {
        return Err(bad("too long"));
    }
    let bytes = hex::decode(hex_key).map_err(|_| bad("not hex"))?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| bad("not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_round_trips() {
        for key in ["", "a", "sandbox-0001", "ü/é"] {
            assert_eq!(decode(&encode(key)), Ok(Some(key.to_string())), "{key}");
        }
        assert_eq!(decode(""), Ok(None));
    }

    #[test]
    fn foreign_tokens_are_refused() {
        for token in ["x", "v2.61", "v1.6", "v1.zz", "v1.ff"] {
            let err = decode(token).err();
            assert!(err.is_some(), "{token}");
            let shown = err.map(|e| e.to_string()).unwrap_or_default();
            assert!(shown.contains("page_token"), "{shown}");
        }
        let long = format!("v1.{}", "61".repeat(MAX_KEY_BYTES + 1));
        assert!(decode(&long).is_err());
    }
}
