//! The listener for data connections opened ahead (`DCON`, see
//! [`lightpath_proto::ahead`]) and the connections parked there until
//! their control session claims them.
//!
//! Everything that arrives here is hostile until its hello parses: a
//! connection must send the 20-byte hello within [`HELLO_WAIT`], at most
//! [`MAX_PARKED`] wait in all, unclaimed ones are closed after [`PARK_MAX`],
//! and a session only gets connections that came from its own control
//! connection's IP with its exact token and count.

use lightpath_proto::ahead::{parse_hello, DconArgs, Token, HELLO_LEN};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

/// How long a new connection has to send its hello.
pub const HELLO_WAIT: Duration = Duration::from_secs(10);
/// How long connections wait for their session's `DCON`.
pub const PARK_MAX: Duration = Duration::from_secs(60);
/// Connections parked at most, all tokens together.
pub const MAX_PARKED: usize = 1024;

/// Which port the server takes for data connections opened ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AheadPort {
    /// The control port + 1 if free, else any free port.
    Auto,
    /// None: `DCON` is not offered.
    Off,
    /// This port.
    Port(u16),
}

/// Bind the listener `port` asks for, on the control listener's IP.
pub fn bind(port: AheadPort, control: SocketAddr) -> std::io::Result<Option<std::net::TcpListener>> {
    let at = |p: u16| std::net::TcpListener::bind(SocketAddr::new(control.ip(), p));
    match port {
        AheadPort::Off => Ok(None),
        AheadPort::Port(p) => at(p).map(Some),
        AheadPort::Auto => {
            let next = control.port().checked_add(1).filter(|_| control.port() != 0);
            match next.map(at) {
                Some(Ok(l)) => Ok(Some(l)),
                _ => at(0).map(Some),
            }
        }
    }
}

struct Parked {
    ip: IpAddr,
    conns: Vec<TcpStream>,
    since: Instant,
}

/// Connections that said hello, by token.
#[derive(Default)]
pub struct Ahead {
    parked: Mutex<HashMap<Token, Parked>>,
    arrived: tokio::sync::Notify,
}

impl std::fmt::Debug for Ahead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ahead").field("tokens", &self.lock().len()).finish()
    }
}

impl Ahead {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Token, Parked>> {
        self.parked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Accept connections on `l` forever, parking those that say hello.
    pub async fn serve(self: std::sync::Arc<Self>, l: tokio::net::TcpListener) {
        loop {
            match l.accept().await {
                Ok((c, _)) => {
                    tokio::spawn(self.clone().hello(c));
                }
                Err(e) => {
                    // Out of descriptors and the like: the control port still works.
                    tracing::warn!("data connections ahead: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    async fn hello(self: std::sync::Arc<Self>, mut c: tokio::net::TcpStream) {
        let Ok(peer) = c.peer_addr() else { return };
        let mut h = [0u8; HELLO_LEN];
        let token = match tokio::time::timeout(HELLO_WAIT, c.read_exact(&mut h)).await {
            Ok(Ok(_)) => parse_hello(&h),
            _ => None,
        };
        let Some(token) = token else {
            tracing::debug!(%peer, "data connection ahead: no hello, closed");
            return;
        };
        match c.into_std() {
            Ok(s) => self.park(token, peer.ip(), s),
            Err(e) => tracing::debug!(%peer, "data connection ahead: {e}"),
        }
    }

    /// Keep `conn` for the session that will claim `token`.
    pub fn park(&self, token: Token, ip: IpAddr, conn: TcpStream) {
        let mut m = self.lock();
        m.retain(|_, p| p.since.elapsed() < PARK_MAX);
        if m.values().map(|p| p.conns.len()).sum::<usize>() >= MAX_PARKED {
            tracing::warn!(%ip, "data connection ahead refused: {MAX_PARKED} already wait");
            return;
        }
        let p = m.entry(token).or_insert_with(|| Parked { ip, conns: Vec::new(), since: Instant::now() });
        if p.ip != ip {
            tracing::warn!(%ip, "data connection ahead refused: its token came from another address");
            return;
        }
        p.conns.push(conn);
        drop(m);
        self.arrived.notify_waiters();
    }

    /// The `count` connections with `token` from `ip`, waiting up to `wait`
    /// for them to arrive (their hellos and the `DCON` travel side by side).
    pub async fn claim(&self, a: DconArgs, ip: IpAddr, wait: Duration) -> Result<Vec<TcpStream>, String> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.arrived.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(r) = self.try_claim(a, ip) {
                return r;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(format!(
                    "{} of {} data connections opened ahead arrived",
                    self.give_up(a.token, ip),
                    a.count
                ));
            }
        }
    }

    /// Close what arrived for a claim that timed out; returns how many.
    /// Connections parked by another address are not the claimant's to drop.
    fn give_up(&self, token: Token, ip: IpAddr) -> usize {
        let mut m = self.lock();
        if m.get(&token).is_some_and(|p| p.ip == ip) {
            return m.remove(&token).map_or(0, |p| p.conns.len());
        }
        0
    }

    fn try_claim(&self, a: DconArgs, ip: IpAddr) -> Option<Result<Vec<TcpStream>, String>> {
        let mut m = self.lock();
        let p = m.get(&a.token).filter(|p| p.ip == ip)?;
        let n = p.conns.len();
        if n < a.count as usize {
            return None;
        }
        let p = m.remove(&a.token)?;
        if n > a.count as usize {
            return Some(Err(format!("{n} data connections carried the token, not {}", a.count)));
        }
        Some(Ok(p.conns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn pair() -> TcpStream {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let _c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        l.accept().unwrap().0
    }

    const LO: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    const OTHER: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 1, 2, 3));

    fn args(t: u8, count: u32) -> DconArgs {
        DconArgs { token: Token([t; 16]), count }
    }

    #[tokio::test]
    async fn claims_exactly_its_connections() {
        let a = Ahead::default();
        a.park(Token([1; 16]), LO, pair());
        a.park(Token([1; 16]), LO, pair());
        a.park(Token([2; 16]), LO, pair());
        let got = a.claim(args(1, 2), LO, Duration::from_millis(10)).await.unwrap();
        assert_eq!(got.len(), 2);
        let again = a.claim(args(1, 2), LO, Duration::from_millis(10)).await;
        assert!(again.unwrap_err().contains("0 of 2"));
        assert_eq!(a.claim(args(2, 1), LO, Duration::ZERO).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn another_address_gets_nothing() {
        let a = Ahead::default();
        a.park(Token([3; 16]), LO, pair());
        a.park(Token([3; 16]), OTHER, pair()); // refused: the token is LO's
        let err = a.claim(args(3, 1), OTHER, Duration::from_millis(10)).await.unwrap_err();
        assert!(err.contains("0 of 1"), "{err}");
        // The failed claim from elsewhere left LO's connection where it was.
        assert_eq!(a.claim(args(3, 1), LO, Duration::ZERO).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn too_many_or_too_few_are_refused() {
        let a = Ahead::default();
        for _ in 0..3 {
            a.park(Token([4; 16]), LO, pair());
        }
        assert!(a.claim(args(4, 2), LO, Duration::ZERO).await.unwrap_err().contains("3 data connections"));
        a.park(Token([5; 16]), LO, pair());
        let err = a.claim(args(5, 2), LO, Duration::from_millis(20)).await.unwrap_err();
        assert!(err.contains("1 of 2"), "{err}");
    }

    #[tokio::test]
    async fn waits_for_late_connections() {
        let a = Arc::new(Ahead::default());
        let a2 = a.clone();
        let late = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            a2.park(Token([6; 16]), LO, pair());
        });
        let got = a.claim(args(6, 1), LO, Duration::from_secs(5)).await.unwrap();
        assert_eq!(got.len(), 1);
        late.await.unwrap();
    }

    #[tokio::test]
    async fn listener_parks_only_real_hellos() {
        use tokio::io::AsyncWriteExt;
        let a = Arc::new(Ahead::default());
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(a.clone().serve(l));
        let mut bad = tokio::net::TcpStream::connect(addr).await.unwrap();
        bad.write_all(b"USER anonymous\r\nPASS x\r\n").await.unwrap();
        let mut good = tokio::net::TcpStream::connect(addr).await.unwrap();
        good.write_all(&lightpath_proto::ahead::hello(&Token([7; 16]))).await.unwrap();
        assert_eq!(a.claim(args(7, 1), LO, Duration::from_secs(5)).await.unwrap().len(), 1);
        let mut buf = [0u8; 8];
        let n = tokio::time::timeout(Duration::from_secs(5), bad.read(&mut buf)).await.unwrap();
        assert!(matches!(n, Ok(0) | Err(_)), "the bad one is closed: {n:?}");
    }

    #[test]
    fn auto_port_is_the_next_one_or_any() {
        let control = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = control.local_addr().unwrap();
        let l = bind(AheadPort::Auto, c).unwrap().unwrap();
        let taken = l.local_addr().unwrap();
        let next = SocketAddr::new(c.ip(), c.port() + 1);
        assert!(taken == next || std::net::TcpListener::bind(next).is_err(), "{taken} for control {c}");
        let prev = SocketAddr::new(taken.ip(), taken.port() - 1);
        let other = bind(AheadPort::Auto, prev).unwrap().unwrap();
        assert_ne!(other.local_addr().unwrap().port(), taken.port(), "falls back to a free port");
        assert!(bind(AheadPort::Off, c).unwrap().is_none());
    }
}
