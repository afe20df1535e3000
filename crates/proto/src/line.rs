//! Control-channel line framing (RFC 959: Telnet lines ending in CRLF).
//! Bytes go in as they arrive; complete lines come out. Over-long lines are
//! reported once and discarded up to their end, so a hostile peer cannot make
//! us buffer without bound.

use std::collections::VecDeque;

/// Longest line accepted (paths can be long; 4096 + command + slack).
pub const MAX_LINE: usize = 8192;

/// One framed item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A complete line without its CR LF.
    Text(Vec<u8>),
    /// A line that exceeded [`MAX_LINE`] (its bytes were dropped).
    TooLong,
}

/// Splits a byte stream into lines.
#[derive(Debug, Default)]
pub struct LineBuffer {
    buf: Vec<u8>,
    discarding: bool,
    out: VecDeque<Line>,
}

impl LineBuffer {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed bytes received from the peer.
    pub fn handle_bytes(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            match data.iter().position(|&b| b == b'\n') {
                Some(i) => {
                    self.push_partial(&data[..i]);
                    self.finish_line();
                    data = &data[i + 1..];
                }
                None => {
                    self.push_partial(data);
                    data = &[];
                }
            }
        }
    }

    /// Next complete line, if any.
    pub fn poll_line(&mut self) -> Option<Line> {
        self.out.pop_front()
    }

    /// Bytes of an unfinished line held back.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }

    fn push_partial(&mut self, part: &[u8]) {
        if self.discarding {
            return;
        }
        if self.buf.len() + part.len() > MAX_LINE {
            self.buf.clear();
            self.discarding = true;
            self.out.push_back(Line::TooLong);
            return;
        }
        self.buf.extend_from_slice(part);
    }

    fn finish_line(&mut self) {
        if self.discarding {
            self.discarding = false;
            return;
        }
        let mut line = std::mem::take(&mut self.buf);
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        self.out.push_back(Line::Text(line));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_and_limits() {
        let mut lb = LineBuffer::new();
        lb.handle_bytes(b"USER a\r\nPA");
        lb.handle_bytes(b"SS b\n");
        assert_eq!(lb.poll_line(), Some(Line::Text(b"USER a".to_vec())));
        assert_eq!(lb.poll_line(), Some(Line::Text(b"PASS b".to_vec())));
        lb.handle_bytes(&vec![b'x'; MAX_LINE + 10]);
        lb.handle_bytes(b"yyy\r\nNOOP\r\n");
        assert_eq!(lb.poll_line(), Some(Line::TooLong));
        assert_eq!(lb.poll_line(), Some(Line::Text(b"NOOP".to_vec())));
        assert_eq!(lb.poll_line(), None);
    }
}
