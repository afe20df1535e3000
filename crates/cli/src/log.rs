//! Where log lines and messages go: standard error, never fatally.
//!
//! A failed write to stderr (a log pipe whose reader died, a full disk, a
//! terminal gone) panicked the thread that logged: `eprintln!` panics,
//! and so does tracing-subscriber's own report of a failed write. A
//! server then dropped the session of every failed login without a reply,
//! and SIGHUP ended it (exit 101; a defect hunt's find). Lines are
//! written here and a failure is ignored: the server goes on.
//!
//! Without colours (always for `serve`), control characters in a line are
//! written as `?`: a user name or path from the network holding ESC, CR or
//! BS could clear or rewrite the operator's terminal and forge log lines.

use std::borrow::Cow;
use std::io::Write;
use std::sync::Mutex;

/// The progress bar on the terminal, if one is drawn: a line written
/// while it is clears it first and draws it again after. Written over it,
/// a retry's warning ran on from the bar's line (a defect hunt's find).
static BAR: Mutex<Option<indicatif::ProgressBar>> = Mutex::new(None);

/// Lines go around `bar` from now on (`None`: it is gone).
pub fn set_bar(bar: Option<indicatif::ProgressBar>) {
    *BAR.lock().unwrap_or_else(|e| e.into_inner()) = bar;
}

/// Write `bytes` to stderr around the bar, if one is drawn.
fn write_err(bytes: &[u8]) {
    let bar = BAR.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let write = || {
        let _ = std::io::stderr().write_all(bytes);
    };
    match bar {
        Some(b) if !b.is_finished() => b.suspend(write),
        _ => write(),
    }
}

/// Write `line` and a line break to stderr; a failure is ignored.
pub fn say(line: &str) {
    write_err(format!("{line}\n").as_bytes());
}

/// A tracing writer to stderr ([`say`]'s rules; `plain`: control
/// characters shown as `?`).
pub struct LogWriter {
    plain: bool,
}

impl LogWriter {
    /// A writer; `plain` when the log has no colours.
    pub fn new(plain: bool) -> LogWriter {
        LogWriter { plain }
    }
}

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let out = if self.plain { printable(buf) } else { Cow::Borrowed(buf) };
        write_err(&out);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `buf` with every control character but TAB and a final line break
/// written as `?`.
fn printable(buf: &[u8]) -> Cow<'_, [u8]> {
    let last = buf.len().saturating_sub(1);
    let bad = |(i, &b): (usize, &u8)| (b < 0x20 && b != b'\t' && !(b == b'\n' && i == last)) || b == 0x7f;
    if !buf.iter().enumerate().any(bad) {
        return Cow::Borrowed(buf);
    }
    Cow::Owned(buf.iter().enumerate().map(|(i, &b)| if bad((i, &b)) { b'?' } else { b }).collect())
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn control_characters_but_tab_and_the_final_line_break_are_shown_as_question_marks() {
        assert_eq!(&*printable(b"login user=bob\n"), b"login user=bob\n");
        assert_eq!(&*printable(b"user=bob\x1b[2J\rx\x08\n2026 INFO forged\n"), b"user=bob?[2J?x??2026 INFO forged\n");
        assert_eq!(&*printable(b"a\tb\x7f"), b"a\tb?");
    }
}
