//! Reading a secret (a password) from standard input: without echo when
//! it is a terminal, as a line otherwise (a pipe, a file).

use std::io::{self, BufRead, Write};

/// One line of standard input without its line break. On a terminal,
/// `prompt` goes to standard error first and the typed characters are
/// not echoed; echo comes back even if reading fails.
pub fn read_secret(prompt: &str) -> io::Result<String> {
    let stdin = io::stdin();
    let tty = rustix::termios::isatty(&stdin);
    let saved = if tty { Some(rustix::termios::tcgetattr(&stdin)?) } else { None };
    if let Some(old) = &saved {
        // `eprint!` panics on a closed standard error; the prompt is a
        // courtesy, so failing to show it is no error.
        let mut err = io::stderr();
        let _ = err.write_all(prompt.as_bytes()).and_then(|()| err.flush());
        let mut quiet = old.clone();
        quiet.local_modes.remove(rustix::termios::LocalModes::ECHO);
        rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Flush, &quiet)?;
    }
    let mut line = String::new();
    let read = stdin.lock().read_line(&mut line);
    if let Some(old) = &saved {
        let _ = rustix::termios::tcsetattr(&stdin, rustix::termios::OptionalActions::Flush, old);
        let _ = io::stderr().write_all(b"\n");
    }
    read?;
    Ok(line.trim_end_matches(['\r', '\n']).to_string())
}
