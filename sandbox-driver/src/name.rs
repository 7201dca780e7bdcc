//! Runtime names: `sbx-<id>-g<generation>-<hash>`, at most 63 characters of
//! `[a-z0-9-]` (a DNS label, so a valid Pod name, hostname and TLS server
//! name). `<id>` is the sandbox id lower-cased with `.` and `_` turned into
//! `-` and cut to 32 characters; `<hash>` is the first 8 hex digits of the
//! SHA-256 of the exact id, so ids that differ only in case, punctuation or
//! beyond the cut still get different names.

use sha2::{Digest, Sha256};

/// Longest runtime name (a DNS label).
pub const MAX_NAME_LEN: usize = 63;

/// The runtime name of sandbox `sandbox_id`, generation `generation`.
pub fn runtime_name(sandbox_id: &str, generation: u64) -> String {
    let mut readable: String = sandbox_id
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .take(32)
        .collect();
    while readable.ends_with('-') {
        readable.pop();
    }
    let digest = Sha256::digest(sandbox_id.as_bytes());
    let hash = hex::encode(&digest[..4]);
    let name = if readable.is_empty() {
        format!("sbx-g{generation}-{hash}")
    } else {
        format!("sbx-{readable}-g{generation}-{hash}")
    };
    // 4 + 32 + 2 + 20 + 1 + 8 = 67 at most for a u64 generation: shorten
    // the readable part for very large generations.
    if name.len() <= MAX_NAME_LEN {
        return name;
    }
    let excess = name.len() - MAX_NAME_LEN;
    let keep = readable.len().saturating_sub(excess);
    let mut short = readable[..keep].to_string();
    while short.ends_with('-') {
        short.pop();
    }
    format!("sbx-{short}-g{generation}-{hash}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_dns_label(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= MAX_NAME_LEN
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    }

    #[test]
    fn names_are_dns_labels_and_tell_ids_apart() {
        let long = "A".repeat(128);
        for (id, generation) in [
            ("sb-0", 1),
            ("Sb_0", 1),
            ("sb.0", 1),
            ("_", 7),
            (long.as_str(), u64::MAX),
        ] {
            let name = runtime_name(id, generation);
            assert!(is_dns_label(&name), "{id} -> {name}");
        }
        assert_eq!(runtime_name("sb-0", 3).len(), "sbx-sb-0-g3-".len() + 8);
        assert!(runtime_name("sb-0", 3).starts_with("sbx-sb-0-g3-"));
        assert_ne!(runtime_name("sb-0", 1), runtime_name("Sb-0", 1));
        assert_ne!(runtime_name("sb-0", 1), runtime_name("sb_0", 1));
        assert_ne!(runtime_name("sb-0", 1), runtime_name("sb-0", 2));
    }
}
