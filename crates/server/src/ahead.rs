//! The listener for data connections opened ahead (`DCON`, see
//! [`lightpath_proto::ahead`]) and the connections parked there until
//! their control session claims them.
//!
//! Everything that arrives here is hostile until its hello parses: a
//! connection must send the 20-byte hello within [`HELLO_WAIT`] (and at
//! most [`MAX_PARKED`] in all and [`MAX_PARKED_PER_IP`] from one address
//! may be waiting to), at most as many wait parked,
//! unclaimed ones are closed after [`PARK_MAX`], and a session only gets
//! connections that came from its own control connection's IP with its
//! exact token and count.
//!
//! When the park is full, a connection that arrives is closed, and so are
//! the others of its token: its `DCON` cannot be met, and is told so at
//! once ([`ClaimError::Busy`]) instead of waiting out the claim, so the
//! client falls back to PORT or PASV one round trip later and keeps using
//! `DCON` with this server later (a 425 would make it stop for good).

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
/// Connections parked at most from one address: four clients that open
/// the most a `DCON` counts, so one host cannot fill the park.
pub const MAX_PARKED_PER_IP: usize = 4 * lightpath_proto::ahead::MAX_COUNT as usize;
/// Tokens remembered as turned away for a full park (their `DCON` is told
/// so at once); beyond that, a claim waits and fails as before.
const MAX_BUSY: usize = 1024;

/// Why a claim failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimError {
    /// Fewer connections than announced arrived in time.
    Missing { arrived: usize, count: u32 },
    /// More connections than announced carried the token.
    Extra { arrived: usize, count: u32 },
    /// The park was full when some arrived: all of them were closed.
    Busy,
}

impl std::fmt::Display for ClaimError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClaimError::Missing { arrived, count } => {
                write!(f, "{arrived} of {count} data connections opened ahead arrived")
            }
            ClaimError::Extra { arrived, count } => {
                write!(f, "{arrived} data connections carried the token, not {count}")
            }
            ClaimError::Busy => write!(f, "server busy: too many data connections opened ahead wait; they were closed"),
        }
    }
}

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
    /// Some were turned away for a full park: the claim fails at once.
    busy: bool,
}

/// Connections that said hello, by token.
#[derive(Default)]
pub struct Ahead {
    parked: Mutex<HashMap<Token, Parked>>,
    arrived: tokio::sync::Notify,
    /// Connections yet to say hello, by address ([`Greeting`]).
    greeting: Mutex<HashMap<IpAddr, usize>>,
}

/// A connection's place among those yet to say hello, given back when
/// dropped. Without a bound, one host that opened connections and sent
/// nothing held a descriptor each for [`HELLO_WAIT`]: tens of thousands
/// ran the server out of them (its control port is guarded by admission,
/// this one was not), stopping logins, PASV and file opens for everyone.
struct Greeting<'a> {
    ahead: &'a Ahead,
    ip: IpAddr,
}

impl Drop for Greeting<'_> {
    fn drop(&mut self) {
        let mut g = self.ahead.greeting.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = g.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                g.remove(&self.ip);
            }
        }
    }
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

    /// Take a place for a connection from `ip` to say hello in (given
    /// back by its [`Greeting`]), unless [`MAX_PARKED`] in all or
    /// [`MAX_PARKED_PER_IP`] from `ip` wait to.
    fn greet(&self, ip: IpAddr) -> bool {
        let mut g = self.greeting.lock().unwrap_or_else(|e| e.into_inner());
        let all: usize = g.values().sum();
        let mine = g.entry(ip).or_default();
        if all >= MAX_PARKED || *mine >= MAX_PARKED_PER_IP {
            if *mine == 0 {
                g.remove(&ip);
            }
            return false;
        }
        *mine += 1;
        true
    }

    /// Accept connections on `l` forever, parking those that say hello.
    pub async fn serve(self: std::sync::Arc<Self>, l: tokio::net::TcpListener) {
        loop {
            match l.accept().await {
                Ok((c, peer)) => {
                    if !self.greet(peer.ip()) {
                        tracing::debug!(%peer, "data connection ahead refused: too many yet to say hello");
                        continue;
                    }
                    tokio::spawn(self.clone().hello(c, peer));
                }
                Err(e) => {
                    // Out of descriptors and the like: the control port still works.
                    tracing::warn!("data connections ahead: accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    async fn hello(self: std::sync::Arc<Self>, mut c: tokio::net::TcpStream, peer: SocketAddr) {
        let _place = Greeting { ahead: &self, ip: peer.ip() };
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

    /// Close the parked connections no session claimed within
    /// [`PARK_MAX`]. Done at each park and every [`crate::SWEEP_EVERY`]:
    /// only at a park, those of clients turned away at the greeting (421)
    /// stayed in CLOSE-WAIT for good on a server nobody else reached (a
    /// defect hunt's find: 24 for 75 s and on, 97 after a burst).
    pub fn sweep(&self) {
        self.lock().retain(|_, p| p.since.elapsed() < PARK_MAX);
    }

    /// Keep `conn` for the session that will claim `token`.
    pub fn park(&self, token: Token, ip: IpAddr, conn: TcpStream) {
        let mut m = self.lock();
        m.retain(|_, p| p.since.elapsed() < PARK_MAX);
        if m.get(&token).is_some_and(|p| p.ip != ip) {
            tracing::warn!(%ip, "data connection ahead refused: its token came from another address");
            return;
        }
        let (all, mine) = m
            .values()
            .fold((0, 0), |(all, mine), p| (all + p.conns.len(), mine + if p.ip == ip { p.conns.len() } else { 0 }));
        if all >= MAX_PARKED || mine >= MAX_PARKED_PER_IP {
            tracing::warn!(%ip, all, from_ip = mine, "data connection ahead refused: the park is full");
            Self::turn_away(&mut m, token, ip);
        } else {
            let p =
                m.entry(token).or_insert_with(|| Parked { ip, conns: Vec::new(), since: Instant::now(), busy: false });
            if !p.busy {
                p.conns.push(conn);
            }
        }
        drop(m);
        self.arrived.notify_waiters();
    }

    /// Close what `token` holds and mark it busy, so its claim fails at
    /// once (unless [`MAX_BUSY`] tokens are marked already).
    fn turn_away(m: &mut HashMap<Token, Parked>, token: Token, ip: IpAddr) {
        if !m.contains_key(&token) && m.values().filter(|p| p.busy).count() >= MAX_BUSY {
            return;
        }
        let p = m.entry(token).or_insert_with(|| Parked { ip, conns: Vec::new(), since: Instant::now(), busy: true });
        p.conns.clear();
        p.busy = true;
    }

    /// The `count` connections with `token` from `ip`, waiting up to `wait`
    /// for them to arrive (their hellos and the `DCON` travel side by side).
    pub async fn claim(&self, a: DconArgs, ip: IpAddr, wait: Duration) -> Result<Vec<TcpStream>, ClaimError> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let notified = self.arrived.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(r) = self.try_claim(a, ip) {
                return r;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(ClaimError::Missing { arrived: self.give_up(a.token, ip), count: a.count });
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

    fn try_claim(&self, a: DconArgs, ip: IpAddr) -> Option<Result<Vec<TcpStream>, ClaimError>> {
        let mut m = self.lock();
        let p = m.get(&a.token).filter(|p| p.ip == ip)?;
        let n = p.conns.len();
        if n < a.count as usize && !p.busy {
            return None;
        }
        let p = m.remove(&a.token)?;
        if p.busy {
            return Some(Err(ClaimError::Busy));
        }
        if n > a.count as usize {
            return Some(Err(ClaimError::Extra { arrived: n, count: a.count }));
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
        assert!(again.unwrap_err().to_string().contains("0 of 2"));
        assert_eq!(a.claim(args(2, 1), LO, Duration::ZERO).await.unwrap().len(), 1);
    }

    /// A sweep closes what waited past [`PARK_MAX`], with no park to do
    /// it (a client turned away at the greeting claims nothing).
    #[tokio::test]
    async fn a_sweep_closes_what_no_session_claimed_in_time() {
        let a = Ahead::default();
        a.park(Token([6; 16]), LO, pair());
        a.park(Token([7; 16]), LO, pair());
        let old = Instant::now().checked_sub(PARK_MAX + Duration::from_secs(1)).unwrap();
        a.lock().get_mut(&Token([6; 16])).unwrap().since = old;
        a.sweep();
        assert_eq!(a.lock().len(), 1, "the stale one is closed, the fresh one stays");
        assert_eq!(a.claim(args(7, 1), LO, Duration::ZERO).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn another_address_gets_nothing() {
        let a = Ahead::default();
        a.park(Token([3; 16]), LO, pair());
        a.park(Token([3; 16]), OTHER, pair()); // refused: the token is LO's
        let err = a.claim(args(3, 1), OTHER, Duration::from_millis(10)).await.unwrap_err().to_string();
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
        assert!(a.claim(args(4, 2), LO, Duration::ZERO).await.unwrap_err().to_string().contains("3 data connections"));
        a.park(Token([5; 16]), LO, pair());
        let err = a.claim(args(5, 2), LO, Duration::from_millis(20)).await.unwrap_err().to_string();
        assert!(err.contains("1 of 2"), "{err}");
    }

    #[tokio::test]
    async fn a_full_park_turns_a_token_away_and_its_claim_fails_at_once() {
        let a = Ahead::default();
        // One address fills its share; the next token from it is turned away.
        for i in 0..MAX_PARKED_PER_IP {
            a.park(Token([10 + (i / 64) as u8; 16]), LO, pair());
        }
        a.park(Token([20; 16]), LO, pair());
        let t = Instant::now();
        let err = a.claim(args(20, 2), LO, Duration::from_secs(5)).await.unwrap_err();
        assert_eq!(err, ClaimError::Busy);
        assert!(t.elapsed() < Duration::from_secs(1), "told at once, not after the wait");
        // Another address still has room, and the first one's tokens are intact.
        a.park(Token([21; 16]), OTHER, pair());
        assert_eq!(a.claim(args(21, 1), OTHER, Duration::ZERO).await.unwrap().len(), 1);
        assert_eq!(a.claim(args(10, 64), LO, Duration::ZERO).await.unwrap().len(), 64);
        // With room again, a new token parks; the busy one stays refused.
        a.park(Token([22; 16]), LO, pair());
        assert_eq!(a.claim(args(22, 1), LO, Duration::ZERO).await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_token_half_parked_when_the_park_fills_loses_the_rest_too() {
        let a = Ahead::default();
        a.park(Token([30; 16]), LO, pair());
        for i in 0..MAX_PARKED_PER_IP - 1 {
            a.park(Token([31 + (i / 64) as u8; 16]), LO, pair());
        }
        a.park(Token([30; 16]), LO, pair()); // over the share: token 30 is turned away
        assert_eq!(a.claim(args(30, 2), LO, Duration::from_secs(5)).await.unwrap_err(), ClaimError::Busy);
        // Its first connection was closed too, making room for another.
        a.park(Token([40; 16]), LO, pair());
        assert_eq!(a.claim(args(40, 1), LO, Duration::ZERO).await.unwrap().len(), 1);
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

    /// One address may keep at most [`MAX_PARKED_PER_IP`] connections
    /// waiting to say hello: the next is closed at once, not held for
    /// [`HELLO_WAIT`]. Places come back as silent ones go.
    #[tokio::test]
    async fn silent_connections_from_one_address_are_bounded() {
        use tokio::io::AsyncWriteExt;
        let a = Arc::new(Ahead::default());
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(a.clone().serve(l));
        let mut silent = Vec::new();
        for _ in 0..MAX_PARKED_PER_IP {
            silent.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        let mut over = tokio::net::TcpStream::connect(addr).await.unwrap();
        let n = tokio::time::timeout(Duration::from_secs(2), over.read(&mut [0u8; 8])).await;
        assert!(matches!(n, Ok(Ok(0) | Err(_))), "one more silent connection was kept: {n:?}");
        drop(silent);
        let t = Instant::now();
        loop {
            let mut good = tokio::net::TcpStream::connect(addr).await.unwrap();
            good.write_all(&lightpath_proto::ahead::hello(&Token([8; 16]))).await.unwrap();
            if a.claim(args(8, 1), LO, Duration::from_millis(200)).await.is_ok() {
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(5), "the places did not come back");
        }
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
