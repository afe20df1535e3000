//! Control-channel line framing (RFC 959: Telnet lines ending in CRLF).
//! Bytes go in as they arrive; complete lines come out. Over-long lines are
//! reported once and discarded up to their end, so a hostile peer cannot make
//! us buffer without bound; one still without an end past [`MAX_DISCARD`]
//! is reported again ([`Line::Endless`]), so that the peer can be let go
//! rather than read for ever.
//!
//! A server's buffer ([`LineBuffer::telnet`]) also removes Telnet commands
//! (RFC 854) from the stream, as RFC 959 asks of a server-PI: clients
//! abort with the urgent sequence `IAC IP IAC DM ABOR` (RFC 959 section
//! 4.1.3), and `IAC IAC` stands for one literal 0xFF byte.

use std::collections::VecDeque;

/// Longest line accepted (paths can be long; 4096 + command + slack).
pub const MAX_LINE: usize = 8192;

/// Bytes of one over-long line discarded before it is [`Line::Endless`]:
/// no command needs more than [`MAX_LINE`], and a peer that has sent a
/// megabyte without a line end is not sending commands.
pub const MAX_DISCARD: usize = 1 << 20;

/// One framed item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// A complete line without its CR LF.
    Text(Vec<u8>),
    /// A line that exceeded [`MAX_LINE`] (its bytes were dropped).
    TooLong,
    /// The same line, still without an end past [`MAX_DISCARD`] bytes
    /// (reported once; its bytes are still dropped).
    Endless,
}

/// Telnet's "interpret as command" byte.
const IAC: u8 = 0xFF;

/// Where the Telnet filter is between two chunks.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Telnet {
    /// Not interpreting Telnet at all (a client reading replies).
    #[default]
    Off,
    /// Ordinary data.
    Data,
    /// After an IAC.
    Iac,
    /// After IAC WILL/WONT/DO/DONT: the option byte comes next.
    Option,
}

/// Splits a byte stream into lines.
#[derive(Debug, Default)]
pub struct LineBuffer {
    buf: Vec<u8>,
    discarding: bool,
    /// Bytes of the line being discarded, dropped so far.
    discarded: usize,
    telnet: Telnet,
    /// The last byte taken was a CR (a CR LF may span two chunks).
    last_cr: bool,
    /// A line of this server's peer ended in CR LF: from then on only CR
    /// LF ends one ([`LineBuffer::handle_text`]).
    crlf_seen: bool,
    out: VecDeque<Line>,
}

impl LineBuffer {
    /// An empty buffer.
    pub fn new() -> Self {
        Self::default()
    }

    /// A buffer for a server's control connection: Telnet commands are
    /// taken out of the stream. `IAC IAC` is a 0xFF byte; IAC and a byte
    /// that is no Telnet command (below 0xF0) are kept as they are, for
    /// clients that send a raw 0xFF in a name without doubling it.
    pub fn telnet() -> Self {
        LineBuffer { telnet: Telnet::Data, ..Self::default() }
    }

    /// Feed bytes received from the peer.
    pub fn handle_bytes(&mut self, data: &[u8]) {
        if self.telnet == Telnet::Off {
            return self.handle_text(data);
        }
        let mut text = Vec::with_capacity(data.len());
        for &b in data {
            self.telnet = match (self.telnet, b) {
                (Telnet::Iac, IAC) => keep(&mut text, &[IAC]),
                // SE, NOP, DM, BRK, IP, AO, AYT, EC, EL, GA, SB: dropped.
                (Telnet::Iac, 0xF0..=0xFA) => Telnet::Data,
                // WILL, WONT, DO, DONT: dropped with their option byte.
                (Telnet::Iac, 0xFB..=0xFE) => Telnet::Option,
                (Telnet::Iac, _) => keep(&mut text, &[IAC, b]),
                // No option: a line's end after a raw 0xFF 0xFB-0xFE in a
                // name (the end's CR eaten, the LF after it is a byte of
                // the line once the client has ended one in CR LF).
                (Telnet::Option, b'\r' | b'\n') => keep(&mut text, &[b]),
                (Telnet::Option, _) => Telnet::Data,
                (_, IAC) => Telnet::Iac,
                _ => keep(&mut text, &[b]),
            };
        }
        self.handle_text(&text);
    }

    /// Lines end at LF (a CR before it is dropped). On a server's
    /// connection, once a line has ended in CR LF, as RFC 959 has every
    /// line end, a bare LF is a byte of the line: globus-url-copy sends a
    /// name holding an LF as it is, and `STOR /y/a<LF>b` was taken as
    /// `STOR /y/a`, which replaced another file (a defect hunt's find,
    /// exit 0). Such a line now names a path no command takes. A client
    /// that ends its lines in LF alone still gets them ended.
    fn handle_text(&mut self, mut data: &[u8]) {
        while let Some(i) = data.iter().position(|&b| b == b'\n') {
            let cr = if i > 0 { data[i - 1] == b'\r' } else { self.last_cr };
            if self.telnet != Telnet::Off && self.crlf_seen && !cr {
                self.push_partial(&data[..=i]);
            } else {
                self.push_partial(&data[..i]);
                self.crlf_seen |= cr;
                self.finish_line();
            }
            self.last_cr = false;
            data = &data[i + 1..];
        }
        if let Some(&last) = data.last() {
            self.push_partial(data);
            self.last_cr = last == b'\r';
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
            let before = self.discarded;
            self.discarded = before.saturating_add(part.len());
            if before <= MAX_DISCARD && self.discarded > MAX_DISCARD {
                self.out.push_back(Line::Endless);
            }
            return;
        }
        if self.buf.len() + part.len() > MAX_LINE {
            self.discarded = self.buf.len() + part.len();
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

fn keep(text: &mut Vec<u8>, bytes: &[u8]) -> Telnet {
    text.extend_from_slice(bytes);
    Telnet::Data
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

    /// A server's peer that ended a line in CR LF ends every line so: a
    /// bare LF after that is part of the line (a name's byte), in one
    /// chunk or split across two; before it, LF alone ends lines.
    #[test]
    fn after_a_crlf_a_servers_lines_end_only_at_crlf() {
        let mut lb = LineBuffer::telnet();
        lb.handle_bytes(b"USER a\nPASS b\r");
        lb.handle_bytes(b"\nSTOR /y/a\nb\r\nRETR c\r");
        lb.handle_bytes(b"\nDELE d\n");
        lb.handle_bytes(b"e\r\n");
        let lines: Vec<Line> = std::iter::from_fn(|| lb.poll_line()).collect();
        let text = |s: &[u8]| Line::Text(s.to_vec());
        assert_eq!(
            lines,
            [text(b"USER a"), text(b"PASS b"), text(b"STOR /y/a\nb"), text(b"RETR c"), text(b"DELE d\ne")]
        );
        let mut client = LineBuffer::new();
        client.handle_bytes(b"226 a\r\n150 b\n");
        assert_eq!(client.poll_line(), Some(text(b"226 a")));
        assert_eq!(client.poll_line(), Some(text(b"150 b")), "replies: LF ends a line");
    }

    /// A line still without an end past a megabyte is reported once more,
    /// as endless; its bytes are still dropped, and a line end ends it.
    #[test]
    fn a_line_without_end_is_reported_once() {
        let mut lb = LineBuffer::new();
        let chunk = vec![b'C'; 64 * 1024];
        for _ in 0..(MAX_DISCARD / chunk.len() + 4) {
            lb.handle_bytes(&chunk);
        }
        assert_eq!(lb.pending(), 0, "nothing held");
        assert_eq!(std::iter::from_fn(|| lb.poll_line()).collect::<Vec<_>>(), [Line::TooLong, Line::Endless]);
        lb.handle_bytes(&chunk);
        lb.handle_bytes(b"\r\nNOOP\r\n");
        assert_eq!(lb.poll_line(), Some(Line::Text(b"NOOP".to_vec())));
        lb.handle_bytes(&vec![b'x'; MAX_LINE + 1]);
        lb.handle_bytes(b"\n");
        assert_eq!(lb.poll_line(), Some(Line::TooLong), "a second long line: counted from its start");
        assert_eq!(lb.poll_line(), None);
    }

    #[test]
    fn telnet_commands_are_taken_out_on_a_server() {
        let wire = b"\xff\xf4\xff\xf2ABOR\r\nMKD a\xff\xffb\r\nMKD c \xff d\r\n\xff\xfd\x01NOOP\r\n";
        let want = [&b"ABOR"[..], b"MKD a\xffb", b"MKD c \xff d", b"NOOP"];
        for split in 0..wire.len() {
            let mut lb = LineBuffer::telnet();
            lb.handle_bytes(&wire[..split]);
            lb.handle_bytes(&wire[split..]);
            let got: Vec<_> = std::iter::from_fn(|| lb.poll_line()).collect();
            assert_eq!(got, want.map(|w| Line::Text(w.to_vec())), "split at {split}");
        }
        let mut plain = LineBuffer::new();
        plain.handle_bytes(b"\xff\xf4x\r\n");
        assert_eq!(plain.poll_line(), Some(Line::Text(b"\xff\xf4x".to_vec())), "a client's buffer keeps every byte");
    }
}
