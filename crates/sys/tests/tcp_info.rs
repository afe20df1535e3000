//! TCP socket options: `net::tcp_rtt` reads the kernel's RTT of a
//! connected socket and refuses a socket that is not TCP; `net::tune` sets
//! TCP_NOTSENT_LOWAT and TCP_NODELAY; `net::start_recv_window` grows a receive buffer
//! without locking it; `net::congestion_usable` tells which congestion
//! controls a socket may take.

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

/// Nagle held a file's last short segment (and the EOD header after it)
/// until the data before it was acknowledged: one round trip per file.
#[test]
fn tune_turns_nagle_off() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    assert!(!c.nodelay().unwrap(), "a new socket has Nagle on");
    assert!(lightpath_sys::net::tune(&c, &Default::default()).is_empty());
    assert!(c.nodelay().unwrap(), "a data connection sends short segments at once");
}

#[test]
fn a_listeners_start_window_is_inherited_and_stays_tunable() {
    use lightpath_sys::net::{start_recv_window, wait_readable};
    use std::io::Write;
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let before = socket2::SockRef::from(&l).recv_buffer_size().unwrap();
    let w = 4 << 20;
    assert!(before < w, "the default buffer ({before}) is already {w}");
    start_recv_window(&l, w).unwrap();
    let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    let got = socket2::SockRef::from(&s).recv_buffer_size().unwrap();
    assert!(got >= w, "accepted socket's buffer {got} < {w}");
    // The low-water mark went back to one byte: one byte makes it readable.
    c.write_all(b"x").unwrap();
    assert!(wait_readable(&s, Duration::from_secs(5)).unwrap());
    // Not locked as SO_RCVBUF would lock it: it can still grow.
    start_recv_window(&s, 2 * w).unwrap();
    let grown = socket2::SockRef::from(&s).recv_buffer_size().unwrap();
    assert!(grown > got, "buffer did not grow past {got}: locked?");
}

#[test]
fn tune_applies_the_start_window() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let opts = lightpath_sys::net::SockOpts { recv_window: Some(2 << 20), ..Default::default() };
    assert!(lightpath_sys::net::tune(&c, &opts).is_empty());
    assert!(socket2::SockRef::from(&c).recv_buffer_size().unwrap() >= 2 << 20);
}

#[test]
fn a_connection_that_sent_has_a_pacing_rate_and_takes_a_new_unsent_bound() {
    use std::io::{Read, Write};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (mut s, _) = l.accept().unwrap();
    c.write_all(&[7u8; 1 << 20]).unwrap();
    let mut got = vec![0u8; 1 << 20];
    s.read_exact(&mut got).unwrap();
    let rate = lightpath_sys::net::tcp_pacing_rate(&c).unwrap();
    assert!(rate.is_some_and(|r| r > 1_000_000), "{rate:?} bytes/s after 1 MiB over loopback");
    lightpath_sys::net::set_notsent_lowat(&c, 390_625).unwrap();
    assert_eq!(socket2::SockRef::from(&c).tcp_notsent_lowat().unwrap(), 390_625);
}

#[test]
fn reno_is_usable_and_an_unknown_congestion_control_is_not_found() {
    // Reno is built into every kernel (allowed unless an admin removed it;
    // the tests run as root, which may use any available one).
    lightpath_sys::net::congestion_usable("reno").unwrap();
    let e = lightpath_sys::net::congestion_usable("no-such-cc").unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
    let (available, allowed) = lightpath_sys::net::congestion_lists();
    assert!(available.split(' ').any(|c| c == "reno"), "available: {available}");
    assert_ne!(allowed, "?", "the allowed list is readable");
}

/// `restart_congestion` starts a live connection's congestion control
/// afresh: it keeps its algorithm and goes on delivering.
#[test]
fn a_restarted_congestion_control_keeps_its_name_and_the_connection() {
    use std::io::{Read, Write};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (mut s, _) = l.accept().unwrap();
    socket2::SockRef::from(&c).set_tcp_congestion(b"cubic").unwrap();
    assert_eq!(lightpath_sys::net::tcp_congestion(&c).unwrap(), "cubic");
    c.write_all(&[7u8; 1 << 20]).unwrap();
    lightpath_sys::net::restart_congestion(&c).unwrap();
    assert_eq!(lightpath_sys::net::tcp_congestion(&c).unwrap(), "cubic");
    c.write_all(&[8u8; 1 << 20]).unwrap();
    let mut got = vec![0u8; 2 << 20];
    s.read_exact(&mut got).unwrap();
    assert!(got[..1 << 20].iter().all(|&b| b == 7) && got[1 << 20..].iter().all(|&b| b == 8));
}
