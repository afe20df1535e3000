//! The client's control connection: send commands, read replies (framed by
//! `lightpath-proto`), log in, learn FEAT.

use crate::ClientError;
use lightpath_proto::{Features, Line, LineBuffer, Reply, ReplyParser};
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long to wait for any reply.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(300);

/// One control connection.
#[derive(Debug)]
pub struct ControlConn {
    stream: TcpStream,
    lines: LineBuffer,
    parser: ReplyParser,
    /// Server name for messages.
    pub name: String,
}

impl ControlConn {
    /// Connect and read the 220 greeting.
    pub async fn connect(host: &str, port: u16) -> Result<ControlConn, ClientError> {
        let name = format!("{host}:{port}");
        let fut = TcpStream::connect((host, port));
        let stream = tokio::time::timeout(Duration::from_secs(30), fut)
            .await
            .map_err(|_| ClientError::Connect(name.clone(), "timed out".into()))?
            .map_err(|e| ClientError::Connect(name.clone(), e.to_string()))?;
        let _ = stream.set_nodelay(true);
        let mut c = ControlConn { stream, lines: LineBuffer::new(), parser: ReplyParser::new(), name };
        let hello = c.reply().await?;
        if hello.code != 220 {
            return Err(c.unexpected("greeting", &hello));
        }
        Ok(c)
    }

    /// Local address of the control connection (our address for PORT).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.stream.local_addr()
    }

    /// Peer address (host for EPSV replies).
    pub fn peer_addr(&self) -> std::io::Result<SocketAddr> {
        self.stream.peer_addr()
    }

    /// Send one command line.
    pub async fn send(&mut self, cmd: &[u8]) -> Result<(), ClientError> {
        tracing::debug!(server = %self.name, "> {}", redact(cmd));
        let mut line = cmd.to_vec();
        line.extend_from_slice(b"\r\n");
        self.stream.write_all(&line).await.map_err(|e| ClientError::Control(self.name.clone(), e.to_string()))
    }

    /// Read the next reply (preliminary ones included).
    pub async fn reply(&mut self) -> Result<Reply, ClientError> {
        let mut buf = [0u8; 8192];
        loop {
            while let Some(line) = self.lines.poll_line() {
                let Line::Text(t) = line else { continue };
                let text = String::from_utf8_lossy(&t);
                let parsed = self
                    .parser
                    .handle_line(&text)
                    .map_err(|e| ClientError::Control(self.name.clone(), e.to_string()))?;
                if let Some(r) = parsed {
                    tracing::debug!(server = %self.name, "< {} {}", r.code, r.full_text());
                    return Ok(r);
                }
            }
            let n = tokio::time::timeout(REPLY_TIMEOUT, self.stream.read(&mut buf))
                .await
                .map_err(|_| ClientError::Control(self.name.clone(), "no reply (timeout)".into()))?
                .map_err(|e| ClientError::Control(self.name.clone(), e.to_string()))?;
            if n == 0 {
                return Err(ClientError::Control(self.name.clone(), "server closed the control connection".into()));
            }
            self.lines.handle_bytes(&buf[..n]);
        }
    }

    /// Read replies until a final (non-1xx) one.
    pub async fn final_reply(&mut self) -> Result<Reply, ClientError> {
        loop {
            let r = self.reply().await?;
            if !r.is_preliminary() {
                return Ok(r);
            }
        }
    }

    /// Send a command and return its final reply.
    pub async fn cmd(&mut self, cmd: &str) -> Result<Reply, ClientError> {
        self.send(cmd.as_bytes()).await?;
        self.final_reply().await
    }

    /// Send a command that must succeed (2yz, or 3yz where that is progress).
    pub async fn ok(&mut self, cmd: &str) -> Result<Reply, ClientError> {
        let r = self.cmd(cmd).await?;
        if r.is_error() {
            return Err(ClientError::Refused {
                server: self.name.clone(),
                cmd: redact(cmd.as_bytes()),
                reply: r.full_text(),
                code: r.code,
            });
        }
        Ok(r)
    }

    /// USER/PASS, FEAT, TYPE I.
    pub async fn login(&mut self, user: &str, pass: &str) -> Result<Features, ClientError> {
        let r = self.cmd(&format!("USER {user}")).await?;
        if r.code == 331 {
            let r = self.cmd(&format!("PASS {pass}")).await?;
            if !r.is_ok() {
                return Err(ClientError::Login(self.name.clone(), r.full_text()));
            }
        } else if !r.is_ok() {
            return Err(ClientError::Login(self.name.clone(), r.full_text()));
        }
        let feat = self.cmd("FEAT").await?;
        let features = Features::from_reply(&feat);
        self.ok("TYPE I").await?;
        Ok(features)
    }

    /// The error for a reply we did not expect.
    pub fn unexpected(&self, what: &str, r: &Reply) -> ClientError {
        ClientError::Refused { server: self.name.clone(), cmd: what.into(), reply: r.full_text(), code: r.code }
    }
}

fn redact(cmd: &[u8]) -> String {
    if cmd.len() >= 4 && cmd[..4].eq_ignore_ascii_case(b"PASS") {
        return "PASS ****".into();
    }
    String::from_utf8_lossy(cmd).into_owned()
}
