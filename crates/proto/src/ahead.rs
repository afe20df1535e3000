//! Data connections opened ahead (lightpath's `DCON` extension, between
//! lightpath peers only).
//!
//! A client that already knows a server is lightpath (it advertised
//! `DCON <port>` in FEAT on an earlier visit) opens its MODE E data
//! connections to that port while it opens the control connection, and
//! writes a [`Hello`] on each: the 4 bytes `LPDC` and a random 16-byte
//! token. In the login flight it then sends `PORT` (the fallback) and
//! `DCON <token in hex> <count>`; the server adopts the `count` connections
//! that carried the token (from the control connection's IP only) as the
//! session's cached MODE E channel, so the first `RETR` is answered `125`
//! and its data leaves at once instead of a round trip later (the server's
//! connects to the client's PORT). A server that does not know `DCON`, or
//! cannot find all the connections, refuses it, and `PORT` stands.
//!
//! Format, version 1: the hello is exactly [`HELLO_LEN`] bytes; the token is
//! 32 lower- or upper-case hex digits on the control channel; count is
//! 1..=[`MAX_COUNT`].

use crate::command::CommandError;

/// The first bytes of a data connection opened ahead.
pub const MAGIC: [u8; 4] = *b"LPDC";
/// Bytes of a hello: magic and token.
pub const HELLO_LEN: usize = 20;
/// Most connections one `DCON` may claim.
pub const MAX_COUNT: u32 = 64;

/// The secret that ties data connections to a control session.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Token(pub [u8; 16]);

impl std::fmt::Debug for Token {
    // Never log the whole secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Token({:02x}{:02x}…)", self.0[0], self.0[1])
    }
}

impl Token {
    /// 32 hex digits, for the `DCON` line.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Parse 32 hex digits.
    pub fn from_hex(t: &str) -> Option<Token> {
        if t.len() != 32 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let mut out = [0u8; 16];
        for (i, o) in out.iter_mut().enumerate() {
            *o = u8::from_str_radix(&t[2 * i..2 * i + 2], 16).ok()?;
        }
        Some(Token(out))
    }
}

/// The bytes a data connection opened ahead starts with.
pub fn hello(token: &Token) -> [u8; HELLO_LEN] {
    let mut h = [0u8; HELLO_LEN];
    h[..4].copy_from_slice(&MAGIC);
    h[4..].copy_from_slice(&token.0);
    h
}

/// The token of a hello, or `None` if the bytes are not one.
pub fn parse_hello(h: &[u8; HELLO_LEN]) -> Option<Token> {
    if h[..4] != MAGIC {
        return None;
    }
    let mut t = [0u8; 16];
    t.copy_from_slice(&h[4..]);
    Some(Token(t))
}

/// Arguments of `DCON <token> <count>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DconArgs {
    /// Which connections.
    pub token: Token,
    /// How many the client opened.
    pub count: u32,
}

/// Parse the argument of `DCON`.
pub fn parse_dcon(arg: &str) -> Result<DconArgs, CommandError> {
    let mut it = arg.split(' ').filter(|s| !s.is_empty());
    let bad = |why: &str| CommandError::Syntax(format!("DCON: {why}"));
    let token = it.next().and_then(Token::from_hex).ok_or_else(|| bad("token must be 32 hex digits"))?;
    let count = it
        .next()
        .filter(|c| !c.is_empty() && c.len() <= 3 && c.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|c| c.parse::<u32>().ok())
        .filter(|c| (1..=MAX_COUNT).contains(c))
        .ok_or_else(|| bad("count must be 1 to 64"))?;
    if it.next().is_some() {
        return Err(bad("too many arguments"));
    }
    Ok(DconArgs { token, count })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_hex_round_trips() {
        let t = Token([0, 1, 0xab, 0xff, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0x7f]);
        assert_eq!(Token::from_hex(&t.to_hex()), Some(t));
        assert_eq!(Token::from_hex(&t.to_hex().to_uppercase()), Some(t));
    }

    #[test]
    fn bad_tokens_are_refused() {
        for t in ["", "00", &"0".repeat(31), &"0".repeat(33), &format!("{}g", "0".repeat(31)), &"é".repeat(16)] {
            assert_eq!(Token::from_hex(t), None, "{t:?}");
        }
    }

    #[test]
    fn hello_round_trips_and_checks_magic() {
        let t = Token([9; 16]);
        let h = hello(&t);
        assert_eq!(parse_hello(&h), Some(t));
        let mut bad = h;
        bad[0] = b'X';
        assert_eq!(parse_hello(&bad), None);
        assert_eq!(parse_hello(b"USER anonymous\r\nPASS"), None);
    }

    #[test]
    fn dcon_arguments() {
        let t = Token([0x5a; 16]);
        let ok = parse_dcon(&format!("{} 16", t.to_hex())).unwrap();
        assert_eq!(ok, DconArgs { token: t, count: 16 });
        for bad in [
            String::new(),
            t.to_hex(),
            format!("{} 0", t.to_hex()),
            format!("{} 65", t.to_hex()),
            format!("{} -1", t.to_hex()),
            format!("{} 99999999999", t.to_hex()),
            format!("{} 4 x", t.to_hex()),
            "zz 4".into(),
        ] {
            assert!(parse_dcon(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn token_debug_hides_the_secret() {
        let s = format!("{:?}", Token([0xab; 16]));
        assert!(!s.contains(&"ab".repeat(16)), "{s}");
    }
}
