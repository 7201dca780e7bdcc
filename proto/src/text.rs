//! Free-form text that crosses the network: the "printable" rule the API
//! holds a supervisor's `member_uid` and `advertise_address` to
//! ([`check_printable`]), and the escaping every human-readable output
//! applies to what a gateway or supervisor sent ([`escaped`]), so that no
//! field can move a terminal's cursor, rewrite a line or forge a table row
//! (issue 32: a supervisor's `advertise_address` holding ESC, CR and
//! newlines reached `pool status` raw).

use std::borrow::Cow;

/// Checks `value` of `field`: 1 to `max` bytes of printable ASCII without
/// spaces (`0x21..=0x7E`). The text of the error names the field, the
/// limit and the first character at fault (escaped).
///
/// # Errors
/// What is wrong, in words.
pub fn check_printable(field: &str, value: &str, max: usize) -> Result<(), String> {
    if value.is_empty() {
        return Err(format!("{field} must not be empty"));
    }
    if value.len() > max {
        return Err(format!("{field} is {} bytes; at most {max}", value.len()));
    }
    if let Some((at, c)) = value.char_indices().find(|(_, c)| !c.is_ascii_graphic()) {
        return Err(format!(
            "{field} holds {:?} at byte {at}: only printable ASCII without spaces (0x21..=0x7E)",
            c
        ));
    }
    Ok(())
}

/// Whether `c` must not reach a terminal as it is: a control character
/// (C0, DEL, C1: what starts an escape sequence, moves the cursor or
/// ends a line) or a bidirectional formatting character (which reorders
/// what follows it on the line).
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with every [`is_unsafe`] character written as an escape: `\n`,
/// `\r`, `\t`, `\0`, or `\u{1b}` for any other. Borrowed when nothing
/// needs escaping.
pub fn escaped(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            c if is_unsafe(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// `text` as [`escaped`], except that line ends stay (for a whole block
/// of output, e.g. a table, whose own lines must break).
pub fn escaped_lines(text: &str) -> Cow<'_, str> {
    if !text.chars().any(|c| c != '\n' && is_unsafe(c)) {
        return Cow::Borrowed(text);
    }
    let lines: Vec<Cow<'_, str>> = text.split('\n').map(escaped).collect();
    Cow::Owned(lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printable_means_graphic_ascii_within_the_limit() {
        assert!(check_printable("f", "10.0.0.1:7001", 256).is_ok());
        assert!(check_printable("f", "[fe80::1%eth0]:7001", 256).is_ok());
        assert!(check_printable("f", &"a".repeat(256), 256).is_ok());
        for (bad, word) in [
            ("", "empty"),
            ("a b", "' '"),
            ("a\u{1b}[2J", "'\\u{1b}'"),
            ("a\rb", "'\\r'"),
            ("a\0", "'\\0'"),
            ("a\nb", "'\\n'"),
            ("\u{e9}", "'\u{e9}'"),
            ("a\u{202e}b", "'\\u{202e}'"),
        ] {
            let e = check_printable("HostHello.advertise_address", bad, 256).unwrap_err();
            assert!(e.starts_with("HostHello.advertise_address"), "{bad:?}: {e}");
            assert!(e.contains(word), "{bad:?}: {e}");
        }
        let e = check_printable("f", &"a".repeat(257), 256).unwrap_err();
        assert_eq!(e, "f is 257 bytes; at most 256");
    }

    #[test]
    fn control_and_bidi_characters_are_escaped_and_nothing_else() {
        assert!(matches!(
            escaped("plain 10.0.0.1:7 \u{e9}"),
            Cow::Borrowed(_)
        ));
        assert_eq!(
            escaped("a\u{1b}[2J\r\nb\t\0\u{7f}\u{9b}\u{202e}z"),
            "a\\u{1b}[2J\\r\\nb\\t\\0\\u{7f}\\u{9b}\\u{202e}z"
        );
        assert_eq!(
            escaped_lines("row 1\nrow\u{1b} 2\n"),
            "row 1\nrow\\u{1b} 2\n"
        );
        for s in ["\u{1b}", "\r", "\u{85}", "\u{2066}"] {
            assert!(!escaped(s).chars().any(is_unsafe), "{s:?}");
        }
    }
}
