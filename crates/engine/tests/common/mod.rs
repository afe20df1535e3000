//! Helpers shared by the engine's test binaries.

use std::net::{TcpListener, TcpStream};

/// `n` loopback TCP connections: (connecting ends, accepted ends).
pub fn pair(n: usize) -> (Vec<TcpStream>, Vec<TcpStream>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = l.local_addr().unwrap();
    let send: Vec<_> = (0..n).map(|_| TcpStream::connect(a).unwrap()).collect();
    let recv: Vec<_> = (0..n).map(|_| l.accept().unwrap().0).collect();
    (send, recv)
}
