//! Text from the network on the terminal. File names and server replies
//! are the peer's bytes: escape sequences in them could retitle the
//! terminal, clear it, or move the cursor to overwrite what it showed, so
//! control characters are printed escaped (`\x1b`, `\r`).

/// `s` with control characters escaped; line breaks kept if `lines`.
fn escaped(s: &str, lines: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\n' if lines => out.push('\n'),
            '\t' => out.push('\t'),
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out
}

/// A name or one-line value from the network, as printed.
pub fn name(s: &str) -> String {
    escaped(s, false)
}

/// A message that may quote server replies (several lines), as printed.
pub fn message(s: &str) -> String {
    escaped(s, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_text_is_kept() {
        assert_eq!(name("a\x1b]0;PWNED\x07b\rc\nd é"), "a\\x1b]0;PWNED\\x07b\\rc\\nd é");
        assert_eq!(message("530 \x1b[2Jno\nsecond line\u{9b}"), "530 \\x1b[2Jno\nsecond line\\x9b");
    }
}
