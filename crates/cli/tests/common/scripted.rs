//! Scripted plain FTP servers for testing the client against a server that
//! lies or stalls: the accept loop, the command loop and the data
//! connection (MODE S style: PASV, EPSV or PORT on 127.0.0.1). Each test
//! file scripts the replies itself.

use super::free_port;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;

/// Listen on 127.0.0.1 and run `session` on its own thread for each
/// connection; the port.
pub fn serve(session: impl Fn(TcpStream) + Send + Sync + 'static) -> u16 {
    let port = free_port();
    let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
    let session = Arc::new(session);
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let s = session.clone();
            std::thread::spawn(move || s(conn));
        }
    });
    port
}

/// Greet with `220 {greeting}`, then answer each command line with what
/// `answer(out, VERB, arg)` returns (the verb in upper case); `None`, QUIT
/// or a failed write ends the session. `answer` may write preliminary
/// replies to `out` itself.
pub fn commands(conn: TcpStream, greeting: &str, mut answer: impl FnMut(&mut TcpStream, &str, &str) -> Option<String>) {
    let mut out = conn.try_clone().unwrap();
    let _ = out.write_all(format!("220 {greeting}\r\n").as_bytes());
    for line in BufReader::new(conn).split(b'\n').map_while(Result::ok) {
        let line = String::from_utf8_lossy(&line).trim_end().to_string();
        let (verb, arg) = line.split_once(' ').unwrap_or((&line, ""));
        let verb = verb.to_ascii_uppercase();
        if verb == "QUIT" {
            return;
        }
        let Some(reply) = answer(&mut out, &verb, arg) else { return };
        if out.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// Where a transfer's data connection comes from: the PASV (or EPSV)
/// listener, or a connect to the PORT given.
#[derive(Default)]
pub struct DataEnd {
    pasv: Option<TcpListener>,
    port: Option<SocketAddr>,
}

impl DataEnd {
    /// PASV, EPSV or PORT `arg`: the new endpoint (replacing any other),
    /// and its reply.
    pub fn set(&mut self, verb: &str, arg: &str) -> String {
        *self = DataEnd::default();
        if verb == "PORT" {
            let n: Vec<u16> = arg.split(',').filter_map(|x| x.trim().parse().ok()).collect();
            self.port = Some(([127, 0, 0, 1], (n[4] << 8) | n[5]).into());
            return "200 PORT OK\r\n".into();
        }
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        self.pasv = Some(l);
        if verb == "EPSV" {
            format!("229 Entering Extended Passive Mode (|||{p}|)\r\n")
        } else {
            format!("227 Entering Passive Mode (127,0,0,1,{},{})\r\n", p >> 8, p & 255)
        }
    }

    /// A connection from the endpoint, which stays for the next one.
    pub fn connect(&self) -> Option<TcpStream> {
        match (&self.pasv, self.port) {
            (Some(l), _) => l.accept().ok().map(|c| c.0),
            (None, Some(a)) => TcpStream::connect(a).ok(),
            (None, None) => None,
        }
    }

    /// A connection from the endpoint, which is used up (MODE S: one
    /// connection per transfer).
    pub fn open(&mut self) -> Option<TcpStream> {
        let c = self.connect();
        *self = DataEnd::default();
        c
    }

    /// Whether an endpoint is set.
    pub fn is_set(&self) -> bool {
        self.pasv.is_some() || self.port.is_some()
    }
}
