//! Opening MODE E data connections ahead, while the control connection
//! opens and logs in (lightpath's `DCON`, see `lightpath_proto::ahead`).
//! Only to servers the [`crate::peers`] book knows as lightpath.

use lightpath_proto::ahead::{hello, Token};
use std::net::TcpStream;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::task::JoinHandle;

// Every automatic stream count can be opened ahead: a DCON hello counts at
// most `MAX_COUNT` connections, and more would wait a round trip for PASV.
const _: () = assert!(lightpath_plan::MAX_AUTO_STREAMS <= lightpath_proto::ahead::MAX_COUNT);

/// Data connections opened ahead, each with the hello written.
#[derive(Debug)]
pub struct AheadConns {
    /// Their token.
    pub token: Token,
    /// The connections.
    pub conns: Vec<TcpStream>,
    /// The server's port they went to (its DCON port as the book knew it).
    pub port: u16,
}

/// Start connecting `n` data connections to `host:port` and writing their
/// hellos; each socket starts with a receive window of `window` (see
/// [`lightpath_sys::net::start_recv_window`]) and, with `fastopen`, sends
/// its hello in the SYN. The caller takes what is done with [`finish`].
pub fn start(host: &str, port: u16, n: u32, window: Option<usize>, fastopen: bool) -> JoinHandle<AheadConns> {
    let token = Token(rand::random());
    let host = host.to_string();
    tokio::spawn(async move {
        let mut set = tokio::task::JoinSet::new();
        for _ in 0..n {
            let h = host.clone();
            set.spawn(async move { one(&h, port, &token, window, fastopen).await });
        }
        let mut conns = Vec::new();
        while let Some(r) = set.join_next().await {
            match r {
                Ok(Ok(c)) => conns.push(c),
                Ok(Err(e)) => tracing::debug!("data connection ahead to {host}:{port}: {e}"),
                Err(e) => tracing::debug!("data connection ahead to {host}:{port}: {e}"),
            }
        }
        AheadConns { token, conns, port }
    })
}

async fn one(
    host: &str,
    port: u16,
    token: &Token,
    window: Option<usize>,
    fastopen: bool,
) -> std::io::Result<TcpStream> {
    let mut c = connect(host, port, window, fastopen).await?;
    c.write_all(&hello(token)).await?;
    c.into_std()
}

/// Connect, the receive window set before the SYN so that it counts from
/// the first round trip; with `fastopen`, as a TCP Fast Open client (the
/// hello goes in the SYN).
async fn connect(
    host: &str,
    port: u16,
    window: Option<usize>,
    fastopen: bool,
) -> std::io::Result<tokio::net::TcpStream> {
    crate::control::open_with(host, port, |sock| {
        if let Some(w) = window {
            if let Err(e) = lightpath_sys::net::start_recv_window(sock, w) {
                tracing::debug!("data connection ahead: receive window {w}: {e}");
            }
        }
        if fastopen {
            if let Err(e) = lightpath_sys::net::fastopen_connect(sock) {
                tracing::debug!("data connection ahead: TCP Fast Open: {e}");
            }
        }
    })
    .await
}

/// The connections of `job` that are open within `wait` (the control
/// connection is open by now, and these started with it): none if the
/// rest would hold the login up, e.g. behind a firewall that drops them.
pub async fn finish(job: JoinHandle<AheadConns>, wait: Duration) -> Option<AheadConns> {
    let abort = job.abort_handle();
    match tokio::time::timeout(wait, job).await {
        Ok(Ok(a)) if !a.conns.is_empty() => Some(a),
        Ok(_) => None,
        Err(_) => {
            abort.abort();
            tracing::debug!("data connections ahead: not open after {wait:?}; going without");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[tokio::test]
    async fn connects_and_says_hello() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let window = 3 << 20;
        let a = finish(start("127.0.0.1", port, 3, Some(window), false), Duration::from_secs(5)).await.unwrap();
        assert_eq!(a.conns.len(), 3);
        for c in &a.conns {
            assert!(socket2::SockRef::from(c).recv_buffer_size().unwrap() >= window);
        }
        for _ in 0..3 {
            let (mut c, _) = l.accept().unwrap();
            let mut h = [0u8; 20];
            c.read_exact(&mut h).unwrap();
            assert_eq!(lightpath_proto::ahead::parse_hello(&h), Some(a.token));
        }
    }

    #[tokio::test]
    async fn nothing_listening_gives_none() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        assert!(finish(start("127.0.0.1", port, 2, None, false), Duration::from_secs(5)).await.is_none());
    }

    #[tokio::test]
    async fn tokens_differ() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let a = start("127.0.0.1", port, 0, None, false).await.unwrap();
        let b = start("127.0.0.1", port, 0, None, false).await.unwrap();
        assert_ne!(a.token, b.token);
    }
}
