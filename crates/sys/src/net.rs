//! Socket helpers for the data mover: zero-copy sends, readiness, tuning.

use std::fs::File;
use std::io;
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::Duration;

/// Send `len` bytes of `file` starting at `offset` with `sendfile(2)`: the
/// bytes go from the page cache to the socket without a user-space copy.
pub fn sendfile_all(sock: &TcpStream, file: &File, offset: u64, len: u64) -> io::Result<()> {
    let mut off = offset;
    let end = offset + len;
    while off < end {
        let chunk = (end - off).min(1 << 30) as usize;
        match rustix::fs::sendfile(sock.as_fd(), file.as_fd(), Some(&mut off), chunk) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "file shrank while being sent")),
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) => return Err(io::Error::new(io::ErrorKind::TimedOut, "send timed out")),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Make the socket's close send a reset (`SO_LINGER` with a zero
/// timeout) rather than an orderly FIN: for a connection whose close
/// would otherwise mean "end of data" (MODE S), after a failure.
pub fn reset_on_close(sock: &impl AsFd) -> io::Result<()> {
    socket2::SockRef::from(sock).set_linger(Some(Duration::ZERO))
}

/// `send(2)` with `MSG_MORE`: more data follows at once (a block's
/// payload after its header), so the kernel holds a short piece back for
/// it even with `TCP_NODELAY`.
pub fn send_more(sock: &impl AsFd, buf: &[u8]) -> io::Result<usize> {
    loop {
        match rustix::net::send(sock, buf, rustix::net::SendFlags::MORE) {
            Ok(n) => return Ok(n),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// One `sendfile(2)` call on a non-blocking socket: returns the bytes sent
/// (0 when the file ended), or `WouldBlock` when the socket buffer is full.
pub fn sendfile_some(sock: &impl AsFd, file: &File, offset: u64, len: usize) -> io::Result<usize> {
    let mut off = offset;
    loop {
        match rustix::fs::sendfile(sock.as_fd(), file.as_fd(), Some(&mut off), len) {
            Ok(n) => return Ok(n),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// Wait until `fd` is readable (or has a pending connection). `Ok(false)` on timeout.
pub fn wait_readable(fd: &impl AsFd, timeout: Duration) -> io::Result<bool> {
    let mut fds = [rustix::event::PollFd::new(fd, rustix::event::PollFlags::IN)];
    let ts = rustix::event::Timespec { tv_sec: timeout.as_secs() as i64, tv_nsec: i64::from(timeout.subsec_nanos()) };
    match rustix::event::poll(&mut fds, Some(&ts)) {
        Ok(n) => Ok(n > 0),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Whether the peer of the connected socket `sock` closed its side (a FIN
/// or a reset), waiting at most `wait` for it: asked of the kernel, which
/// says so even with unread bytes queued before the FIN, not of whichever
/// task reads the socket (it may not have run yet).
pub fn peer_closed_within(sock: &impl AsFd, wait: Duration) -> bool {
    use rustix::event::{PollFd, PollFlags};
    let mut fds = [PollFd::new(sock, PollFlags::RDHUP)];
    let ts = rustix::event::Timespec { tv_sec: wait.as_secs() as i64, tv_nsec: i64::from(wait.subsec_nanos()) };
    loop {
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(_) => return fds[0].revents().intersects(PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR),
            // Woken by a signal: waited again, as long again at most.
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return false,
        }
    }
}

/// Wakes a thread blocked in [`Waker::wait`] (a pipe, so it works with poll).
#[derive(Debug)]
pub struct Waker {
    rx: std::os::fd::OwnedFd,
    tx: std::os::fd::OwnedFd,
}

impl Waker {
    /// A new waker.
    pub fn new() -> io::Result<Waker> {
        let (rx, tx) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK)?;
        Ok(Waker { rx, tx })
    }

    /// Wake the waiter (idempotent).
    pub fn wake(&self) {
        let _ = rustix::io::write(&self.tx, &[1]);
    }

    /// Forget past wakes, so the next wait blocks until a new one.
    pub fn drain(&self) {
        let mut buf = [0u8; 64];
        while matches!(rustix::io::read(&self.rx, &mut buf), Ok(n) if n > 0) {}
    }

    /// Wait until [`Waker::wake`] was called or `timeout` passed, then
    /// [`Waker::drain`].
    pub fn park(&self, timeout: Duration) -> io::Result<()> {
        use rustix::event::{PollFd, PollFlags};
        let mut fds = [PollFd::new(&self.rx, PollFlags::IN)];
        let ts =
            rustix::event::Timespec { tv_sec: timeout.as_secs() as i64, tv_nsec: i64::from(timeout.subsec_nanos()) };
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {
                self.drain();
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Wait until `fd` is readable or [`Waker::wake`] was called. Returns
    /// `Ok(true)` if `fd` is readable.
    pub fn wait(&self, fd: &impl AsFd, timeout: Duration) -> io::Result<bool> {
        use rustix::event::{PollFd, PollFlags};
        let mut fds = [PollFd::new(fd, PollFlags::IN), PollFd::new(&self.rx, PollFlags::IN)];
        let ts =
            rustix::event::Timespec { tv_sec: timeout.as_secs() as i64, tv_nsec: i64::from(timeout.subsec_nanos()) };
        match rustix::event::poll(&mut fds, Some(&ts)) {
            Ok(_) => Ok(fds[0].revents().contains(PollFlags::IN)),
            Err(rustix::io::Errno::INTR) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

/// Options applied to every data connection.
#[derive(Debug, Clone, Default)]
pub struct SockOpts {
    /// Fixed SO_SNDBUF/SO_RCVBUF; `None` keeps kernel autotuning (the default:
    /// a fixed size disables autotuning, which long fat paths need).
    pub buffer: Option<usize>,
    /// TCP congestion control to ask for (e.g. "bbr"); failures are ignored.
    pub congestion: Option<String>,
    /// TCP_NOTSENT_LOWAT: most bytes a socket holds that it has not sent
    /// yet. Parallel streams take blocks from one queue; without a bound a
    /// stream buffers seconds of data that it alone must then drain at the
    /// end of a transfer, while the others idle.
    pub notsent_lowat: Option<u32>,
    /// A receive window to start from, autotuning kept (see
    /// [`start_recv_window`]); unlike `buffer`, it only ever raises.
    pub recv_window: Option<usize>,
    /// Listeners accept data connections from this address only (a
    /// server's client), others are closed: with no data-channel
    /// authentication, anyone who reaches a PASV port first would get the
    /// data or could write it. `None`: from anywhere. Not a socket option;
    /// it travels with the listener's options to wherever it accepts.
    pub accept_from: Option<std::net::IpAddr>,
    /// Who `accept_from` is, and how to accept anyone, for the warning
    /// of a refusal: a client's listener named the server's side.
    pub accept_hint: AcceptHint,
}

/// Whose listener refused a data connection ([`SockOpts::accept_hint`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AcceptHint {
    /// A server's: only its client's connections are taken.
    #[default]
    Server,
    /// A client's (a MODE E download's port): only its server's.
    Client,
}

impl AcceptHint {
    /// Why a connection was refused, and the option that takes it.
    pub fn why(self) -> &'static str {
        match self {
            AcceptHint::Server => "not from the client's address (serve --data-peers any accepts it)",
            AcceptHint::Client => "not from the server's address (cp --data-from-any accepts it)",
        }
    }
}

impl SockOpts {
    /// Whether a data connection from `peer` may be accepted.
    pub fn admits(&self, peer: std::net::SocketAddr) -> bool {
        self.accept_from.is_none_or(|ip| ip.to_canonical() == peer.ip().to_canonical())
    }
}

/// Apply [`SockOpts`]; returns what could not be applied, for verbose output.
/// On a listener, the connections it accepts inherit the options (and a
/// buffer set there also sizes the window scale their SYN-ACK offers).
pub fn tune(sock: &impl AsFd, opts: &SockOpts) -> Vec<String> {
    let s = socket2::SockRef::from(sock);
    let mut notes = Vec::new();
    // Always: with Nagle on, the last short segment of a file (and the
    // 17-byte EOD header after it) waited for the ACK of the data before
    // it, one round trip per file: guc fetching small files from us took
    // twice as long as from GCT's server. Headers that lead a block are
    // sent with MSG_MORE ([`send_more`]), so they do not go out alone.
    if let Err(e) = s.set_tcp_nodelay(true) {
        notes.push(format!("TCP_NODELAY: {e}"));
    }
    if let Some(b) = opts.buffer {
        if let Err(e) = s.set_send_buffer_size(b).and_then(|_| s.set_recv_buffer_size(b)) {
            notes.push(format!("buffer size {b}: {e}"));
        }
    }
    if let Some(cc) = &opts.congestion {
        if let Err(e) = s.set_tcp_congestion(cc.as_bytes()) {
            notes.push(format!("congestion control {cc}: {e}"));
        }
    }
    if let Some(w) = opts.recv_window {
        if let Err(e) = start_recv_window(sock, w) {
            notes.push(format!("receive window {w}: {e}"));
        }
    }
    if let Some(n) = opts.notsent_lowat {
        if let Err(e) = set_notsent_lowat(sock, n) {
            notes.push(format!("TCP_NOTSENT_LOWAT {n}: {e}"));
        }
    }
    notes
}

/// The kernel's smoothed RTT of a connected TCP socket (`TCP_INFO`'s
/// `tcpi_rtt`).
pub fn tcp_rtt(sock: &impl AsFd) -> io::Result<Duration> {
    Ok(Duration::from_micros(u64::from(tcp_info(sock)?.tcpi_rtt)))
}

/// Whether the data sent with this socket's SYN was acknowledged by the
/// SYN-ACK: TCP Fast Open saved the handshake's round trip (`TCP_INFO`'s
/// `TCPI_OPT_SYN_DATA`).
pub fn syn_data_acked(sock: &impl AsFd) -> io::Result<bool> {
    /// `TCPI_OPT_SYN_DATA` from linux/tcp.h (libc does not name it).
    const TCPI_OPT_SYN_DATA: u8 = 32;
    Ok(tcp_info(sock)?.tcpi_options & TCPI_OPT_SYN_DATA != 0)
}

/// Whether this socket's handshake is done (or was never deferred): false
/// for a TCP Fast Open client whose `connect` returned at once, its SYN
/// waiting for the first write (`TCP_INFO`'s state still `SYN_SENT`).
pub fn tcp_handshake_done(sock: &impl AsFd) -> io::Result<bool> {
    /// `TCP_SYN_SENT` from linux/tcp_states.h.
    const TCP_SYN_SENT: u8 = 2;
    Ok(tcp_info(sock)?.tcpi_state != TCP_SYN_SENT)
}

/// The window scale the peer offered in its handshake (`TCP_INFO`'s
/// `tcpi_snd_wscale`, the low nibble of the byte it shares).
pub fn tcp_peer_wscale(sock: &impl AsFd) -> io::Result<u8> {
    Ok(tcp_info(sock)?.tcpi_snd_rcv_wscale & 0x0f)
}

/// The rate (bytes/s) at which the kernel paces this socket's sends
/// (`TCP_INFO`'s `tcpi_pacing_rate`); `None` while it has none.
pub fn tcp_pacing_rate(sock: &impl AsFd) -> io::Result<Option<u64>> {
    Ok(pacing_rate(&tcp_info(sock)?))
}

/// `tcpi_pacing_rate`, unless it is unset (0) or unlimited (`u64::MAX`).
fn pacing_rate(info: &libc::tcp_info) -> Option<u64> {
    Some(info.tcpi_pacing_rate).filter(|&r| r != 0 && r != u64::MAX)
}

/// How long this socket's bytes not yet sent (`tcpi_notsent_bytes`) take
/// to leave at its pacing rate (`tcpi_pacing_rate`); `None` while it has
/// no pacing rate.
pub fn tcp_unsent_time(sock: &impl AsFd) -> io::Result<Option<std::time::Duration>> {
    let info = tcp_info(sock)?;
    Ok(pacing_rate(&info).map(|r| std::time::Duration::from_secs_f64(f64::from(info.tcpi_notsent_bytes) / r as f64)))
}

/// Set `TCP_NOTSENT_LOWAT` (see [`SockOpts::notsent_lowat`]).
pub fn set_notsent_lowat(sock: &impl AsFd, bytes: u32) -> io::Result<()> {
    socket2::SockRef::from(sock).set_tcp_notsent_lowat(bytes)
}

/// `TCP_INFO` of a TCP socket. Neither socket2 nor rustix reads it.
fn tcp_info(sock: &impl AsFd) -> io::Result<libc::tcp_info> {
    use std::os::fd::AsRawFd;
    // SAFETY: tcp_info is plain integers, so all-zero is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: a valid socket fd for the lifetime of `sock`; the kernel
    // writes at most `len` bytes into `info` and sets `len`.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_fd().as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(info)
}

/// `setsockopt` of one `int`, for the options neither socket2 nor rustix
/// sets (`SO_RCVLOWAT`, `TCP_FASTOPEN`, `TCP_FASTOPEN_CONNECT`).
fn set_int(sock: &impl AsFd, level: libc::c_int, name: libc::c_int, value: libc::c_int) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid socket fd for the lifetime of `sock`; the kernel reads
    // exactly `size_of::<c_int>()` bytes from `&value`.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_fd().as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Set `SO_RCVLOWAT`: the socket reports readable only once `bytes` are
/// queued. On TCP, raising it also grows the socket's receive buffer to hold
/// that many bytes, without locking the size as `SO_RCVBUF` does.
pub fn set_recv_lowat(sock: &impl AsFd, bytes: usize) -> io::Result<()> {
    let v = libc::c_int::try_from(bytes.max(1)).unwrap_or(libc::c_int::MAX);
    set_int(sock, libc::SOL_SOCKET, libc::SO_RCVLOWAT, v)
}

/// Bytes queued on a socket for reading (`FIONREAD`).
pub fn recv_queued(sock: &impl AsFd) -> io::Result<usize> {
    Ok(rustix::io::ioctl_fionread(sock)? as usize)
}

/// Keep TCP urgent data in the stream (`SO_OOBINLINE`): the Telnet Synch
/// that clients send as urgent data with an FTP abort (RFC 959 4.1.3) is
/// then read with the line it precedes.
pub fn set_oobinline(sock: &impl AsFd) -> io::Result<()> {
    Ok(rustix::net::sockopt::set_socket_oobinline(sock, true)?)
}

/// Read what is queued on `sock` now, without waiting: `None` when nothing
/// is (or on an error, which the next blocking read reports). A read stops
/// short at the urgent mark, and an async runtime then takes the socket
/// for drained while the rest is queued already.
pub fn recv_now(sock: &impl AsFd, buf: &mut [u8]) -> Option<usize> {
    loop {
        match rustix::net::recv(sock, &mut *buf, rustix::net::RecvFlags::DONTWAIT) {
            Ok((n, _)) => return Some(n),
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return None,
        }
    }
}

/// TCP Fast Open for a socket about to connect (`TCP_FASTOPEN_CONNECT`):
/// `connect` returns at once and the first write goes out with the SYN.
/// With a cookie from an earlier connection to the same server, the server
/// reads that data half a round trip after the start instead of one and a
/// half. Without one (or if the server refuses), the kernel does a plain
/// handshake and sends the data after it: nothing is lost but the saving.
pub fn fastopen_connect(sock: &impl AsFd) -> io::Result<()> {
    set_int(sock, libc::IPPROTO_TCP, libc::TCP_FASTOPEN_CONNECT, 1)
}

/// Accept TCP Fast Open on a listening socket (`TCP_FASTOPEN`, with at most
/// `queue` pending Fast Open requests). The kernel only honours it where
/// `net.ipv4.tcp_fastopen` has the server bit (2); see
/// [`fastopen_server_allowed`].
pub fn fastopen_listen(sock: &impl AsFd, queue: u16) -> io::Result<()> {
    set_int(sock, libc::IPPROTO_TCP, libc::TCP_FASTOPEN, libc::c_int::from(queue))
}

/// Whether this network namespace's `net.ipv4.tcp_fastopen` lets servers
/// accept data in SYNs (bit 2; the kernel's default is 1, clients only).
pub fn fastopen_server_allowed() -> bool {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_fastopen")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .is_some_and(|v| v & 2 != 0)
}

/// Whether this process may give its TCP sockets the congestion control
/// `name`: tried on a fresh, unconnected socket. `NotFound` when the kernel
/// has no such algorithm, `PermissionDenied` when it is not in
/// `net.ipv4.tcp_allowed_congestion_control` and the process lacks
/// CAP_NET_ADMIN.
pub fn congestion_usable(name: &str) -> io::Result<()> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    s.set_tcp_congestion(name.as_bytes())
}

/// The congestion control a TCP socket runs (e.g. "bbr").
pub fn tcp_congestion(sock: &impl AsFd) -> io::Result<String> {
    let name = socket2::SockRef::from(sock).tcp_congestion()?;
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    Ok(String::from_utf8_lossy(&name[..end]).into_owned())
}

/// Start a connected TCP socket's congestion control afresh, keeping the
/// algorithm: for BBR, a new STARTUP that doubles its rate each round trip
/// from the current window, with its old bandwidth estimate dropped.
/// Setting the name a socket already has does nothing in the kernel, so
/// this goes through "reno" (built in, always allowed) and back. If the
/// way back fails the socket is left on reno, which still delivers.
pub fn restart_congestion(sock: &impl AsFd) -> io::Result<()> {
    let s = socket2::SockRef::from(sock);
    let name = tcp_congestion(sock)?;
    s.set_tcp_congestion(b"reno")?;
    s.set_tcp_congestion(name.as_bytes())
}

/// The kernel's congestion-control lists, as `/proc` shows them (space
/// separated): which are available, which unprivileged processes may use.
pub fn congestion_lists() -> (String, String) {
    let read = |f: &str| {
        std::fs::read_to_string(format!("/proc/sys/net/ipv4/{f}")).map_or_else(|_| "?".into(), |s| s.trim().to_string())
    };
    (read("tcp_available_congestion_control"), read("tcp_allowed_congestion_control"))
}

/// Give a TCP socket (connected, about to connect, or listening: accepted
/// sockets inherit it) room for a receive window of `bytes` from its first
/// round trip, with autotuning kept. Autotuning alone grows the buffer once
/// per round trip from what the last one carried, so a fresh stream's
/// window trails slow start by a round trip each time.
///
/// Raising `SO_RCVLOWAT` grows the buffer and the window clamp to fit (the
/// kernel's documented behaviour since 4.18, made for zero-copy receive);
/// the mark then goes back to 1 byte, so readiness is as before.
pub fn start_recv_window(sock: &impl AsFd, bytes: usize) -> io::Result<()> {
    set_recv_lowat(sock, bytes)?;
    set_recv_lowat(sock, 1)
}

/// The kernel's ephemeral port range (`net.ipv4.ip_local_port_range`,
/// which IPv6 shares), where listeners bound to port 0 get their port.
pub fn ephemeral_ports() -> Option<(u16, u16)> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = text.split_whitespace().map(|n| n.parse::<u16>().ok());
    Some((it.next()??, it.next()??))
}
