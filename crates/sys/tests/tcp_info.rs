//! TCP socket options: `net::tcp_rtt` reads the kernel's RTT of a
//! connected socket and refuses a socket that is not TCP; `net::tune` sets
//! TCP_NOTSENT_LOWAT.

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
    // Both sides have sampled the handshake (SYN-ACK / ACK): a real figure,
    // which the server uses for accepted control connections.
    for sock in [&c, &s] {
        assert!(lightpath_sys::net::tcp_rtt(sock).unwrap() > Duration::ZERO);
    }
}

#[test]
fn a_udp_socket_is_refused() {
    let u = UdpSocket::bind("127.0.0.1:0").unwrap();
    assert!(lightpath_sys::net::tcp_rtt(&u).is_err());
}

#[test]
fn tune_sets_notsent_lowat() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let opts = lightpath_sys::net::SockOpts { notsent_lowat: Some(1 << 20), ..Default::default() };
    let notes = lightpath_sys::net::tune(&c, &opts);
    assert!(notes.is_empty(), "{notes:?}");
    let s = socket2::SockRef::from(&c);
    assert_eq!(s.tcp_notsent_lowat().unwrap(), 1 << 20);
}
