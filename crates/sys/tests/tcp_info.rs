//! `net::tcp_rtt` reads the kernel's RTT of a connected socket and refuses
//! a socket that is not TCP.

use std::net::{TcpListener, TcpStream, UdpSocket};
use std::time::Duration;

#[test]
fn rtt_of_a_loopback_connection_is_small_and_known() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    for sock in [&c, &s] {
        let rtt = lightpath_sys::net::tcp_rtt(sock).unwrap();
        assert!(rtt < Duration::from_millis(50), "{rtt:?} on loopback");
    }
    // The connecting side has sampled the handshake: a real figure.
    assert!(lightpath_sys::net::tcp_rtt(&c).unwrap() > Duration::ZERO);
}

#[test]
fn a_udp_socket_is_refused() {
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    assert!(lightpath_sys::net::tcp_rtt(&u).is_err());
}
