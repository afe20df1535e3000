//! In-process probes: UDP echo for the RTT and a timed UDP stream for
//! outages. Sockets are opened inside the namespaces and used from here.
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::Check;
use crate::{Lab, LabError, Side};

/// One UDP socket in each namespace: (A's, B's).
fn socket_pair(lab: &Lab) -> Result<(UdpSocket, UdpSocket), LabError> {
    let (a, b) = (lab.addr(Side::A), lab.addr(Side::B));
    let sa = lab.in_ns(Side::A, || UdpSocket::bind((a, 0)))??;
    let sb = lab.in_ns(Side::B, || UdpSocket::bind((b, 0)))??;
    Ok((sa, sb))
}

/// Echoes datagrams on `sock` until `stop` is set.
fn echo(sock: &UdpSocket, stop: &AtomicBool) {
    super::boost_thread();
    let mut buf = [0u8; 2048];
    let _ = sock.set_read_timeout(Some(Duration::from_millis(50)));
    while !stop.load(Ordering::Relaxed) {
        if let Ok((n, from)) = sock.recv_from(&mut buf) {
            let _ = sock.send_to(&buf[..n], from);
        }
    }
}

/// Median round trip of `n` UDP echo probes from A to B, `gap` apart.
pub fn udp_rtt(lab: &Lab, n: usize, gap: Duration) -> Result<Duration, LabError> {
    let (cli, srv) = socket_pair(lab)?;
    let to = srv.local_addr()?;
    cli.set_read_timeout(Some(lab.spec().rtt * 2 + Duration::from_millis(200)))?;
    let stop = AtomicBool::new(false);
    let mut times = std::thread::scope(|s| {
        s.spawn(|| echo(&srv, &stop));
        let times = s.spawn(|| probe_loop(&cli, to, n, gap)).join().expect("probe thread");
        stop.store(true, Ordering::Relaxed);
        times
    });
    if times.len() < n / 2 {
        return Err(LabError::Spec(format!("only {} of {n} RTT probes came back", times.len())));
    }
    times.sort();
    Ok(times[times.len() / 2])
}

fn probe_loop(cli: &UdpSocket, to: std::net::SocketAddr, n: usize, gap: Duration) -> Vec<Duration> {
    super::boost_thread();
    let mut times = Vec::with_capacity(n);
    let mut buf = [0u8; 64];
    for seq in 0..n as u64 {
        let t = Instant::now();
        if cli.send_to(&seq.to_be_bytes(), to).is_err() {
            continue;
        }
        // Skip stale replies; give up on this probe at the read timeout.
        while let Ok(len) = cli.recv(&mut buf) {
            if len == 8 && buf[..8] == seq.to_be_bytes() {
                times.push(t.elapsed());
                break;
            }
        }
        std::thread::sleep(gap);
    }
    times
}

/// Sends a datagram from A to B every millisecond, takes the link down for
/// `dur` after one second, and checks that exactly the datagrams sent
/// while the link was down were lost (within 2 ms at the edges), that the
/// gap lasts `dur` ±3 ms, and that the emulator counted each loss.
pub fn outage_check(lab: &Lab, dur: Duration) -> Result<Check, LabError> {
    let (cli, srv) = socket_pair(lab)?;
    let to = srv.local_addr()?;
    srv.set_read_timeout(Some(Duration::from_millis(100) + lab.spec().rtt))?;
    let before = lab.counters().a_to_b.dropped_outage;
    let t0 = Instant::now();
    let lead = Duration::from_secs(1);
    let total = lead + dur + Duration::from_secs(1);
    let done = AtomicBool::new(false);
    let (sent, got, (o_start, o_end)) = std::thread::scope(|s| {
        let rx = s.spawn(|| receive_seqs(&srv, &done));
        let outage = s.spawn(|| {
            std::thread::sleep(lead);
            let start = t0.elapsed();
            lab.outage(dur);
            (start, start + dur)
        });
        let sent = s.spawn(|| send_stream(&cli, to, t0, total)).join().expect("sender thread");
        done.store(true, Ordering::Relaxed);
        let window = outage.join().expect("outage thread");
        (sent, rx.join().expect("receiver thread"), window)
    });
    let counted = lab.counters().a_to_b.dropped_outage - before;
    let v = judge_outage(&sent, &got, o_start, o_end, counted);
    Ok(Check {
        name: format!("outage {:?} on 1 ms UDP stream", dur),
        set: format!("{:.1} ms", dur.as_secs_f64() * 1e3),
        measured: format!("{:.1} ms", v.gap.as_secs_f64() * 1e3),
        limit: "±3 ms, edges 2 ms".into(),
        pass: v.pass,
        note: v.note,
        void: false,
    })
}

/// Sends `seq` datagrams every ms until `total`; returns each send time.
fn send_stream(cli: &UdpSocket, to: std::net::SocketAddr, t0: Instant, total: Duration) -> Vec<Duration> {
    super::boost_thread();
    let mut sent = Vec::new();
    let mut next = Duration::ZERO;
    while next < total {
        let now = t0.elapsed();
        if now < next {
            std::thread::sleep(next - now);
        }
        let seq = sent.len() as u64;
        sent.push(t0.elapsed());
        let _ = cli.send_to(&seq.to_be_bytes(), to);
        next += Duration::from_millis(1);
    }
    sent
}

/// Collects sequence numbers until `done` is set and then nothing more
/// arrives for one read timeout.
fn receive_seqs(srv: &UdpSocket, done: &AtomicBool) -> Vec<u64> {
    super::boost_thread();
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    loop {
        match srv.recv(&mut buf) {
            Ok(8) => got.push(u64::from_be_bytes(buf[..8].try_into().expect("8 bytes"))),
            Ok(_) => {}
            Err(_) if done.load(Ordering::Relaxed) => return got,
            Err(_) => {}
        }
    }
}

/// Sends a datagram from A to B every millisecond for `dur` through a path
/// with reordering and corruption: every corrupted datagram must be thrown
/// away by the receiver's checksums (a single flipped bit always fails the IP
/// or UDP checksum), so the receiver misses exactly the corrupted count; and
/// each reordered datagram must arrive right after its successor, so the
/// receiver sees exactly the reordered count of late arrivals (less those
/// that were also corrupted, or whose successor was).
pub fn impairment_check(lab: &Lab, dur: Duration) -> Result<Vec<Check>, LabError> {
    let (cli, srv) = socket_pair(lab)?;
    let to = srv.local_addr()?;
    srv.set_read_timeout(Some(Duration::from_millis(100) + lab.spec().rtt))?;
    let before = lab.counters().a_to_b;
    let t0 = Instant::now();
    let done = AtomicBool::new(false);
    let (sent, got) = std::thread::scope(|s| {
        let rx = s.spawn(|| receive_seqs(&srv, &done));
        let sent = s.spawn(|| send_stream(&cli, to, t0, dur)).join().expect("sender thread");
        done.store(true, Ordering::Relaxed);
        (sent, rx.join().expect("receiver thread"))
    });
    let after = lab.counters().a_to_b;
    let corrupted = after.corrupted - before.corrupted;
    let reordered = after.reordered - before.reordered;
    let lost = sent.len() as u64 - got.len() as u64;
    let late = got.windows(2).filter(|w| w[1] < w[0]).count() as u64;
    let spec = lab.spec();
    let name = |what: &str| format!("{what} on 1 ms UDP stream");
    Ok(vec![
        Check {
            name: name("corrupted = lost"),
            set: format!("{:.1} %", spec.corrupt * 100.0),
            measured: format!("{lost} lost"),
            limit: format!("= {corrupted}"),
            pass: corrupted > 0 && lost == corrupted,
            note: format!("{} sent, {corrupted} corrupted by the emulator", sent.len()),
            void: false,
        },
        Check {
            name: name("reordered = late"),
            set: format!("{:.1} %", spec.reorder * 100.0),
            measured: format!("{late} late"),
            limit: format!("{reordered} - lost..={reordered}"),
            pass: reordered > 0 && late <= reordered && late + lost >= reordered,
            note: format!("{reordered} reordered by the emulator"),
            void: false,
        },
    ])
}

/// Length of the loss gap: midway between the spread of the lost send times
/// (an underestimate by up to one spacing) and the distance between the
/// received neighbours around them (an overestimate by up to one).
fn gap_estimate(sent: &[Duration], received: &[bool], first: Option<Duration>, last: Option<Duration>) -> Duration {
    let (Some(f), Some(l)) = (first, last) else {
        return Duration::ZERO;
    };
    let before = sent.iter().zip(received).filter(|(t, r)| **r && **t < f).map(|(t, _)| *t).next_back();
    let after = sent.iter().zip(received).find(|(t, r)| **r && **t > l).map(|(t, _)| *t);
    match (before, after) {
        (Some(b), Some(a)) => (l - f + (a - b)) / 2,
        _ => l - f,
    }
}

struct OutageVerdict {
    gap: Duration,
    pass: bool,
    note: String,
}

fn judge_outage(sent: &[Duration], got: &[u64], start: Duration, end: Duration, counted: u64) -> OutageVerdict {
    let mut received = vec![false; sent.len()];
    for &s in got {
        if let Some(r) = received.get_mut(s as usize) {
            *r = true;
        }
    }
    let edge = Duration::from_millis(2);
    let (mut wrong, mut lost) = (0, 0u64);
    let (mut first, mut last) = (None, None);
    for (i, &t) in sent.iter().enumerate() {
        if !received[i] {
            lost += 1;
            first = first.or(Some(t));
            last = Some(t);
        }
        let must_lose = t >= start && t + edge < end;
        let must_get = t + edge < start || t > end + edge;
        wrong += usize::from((must_lose && received[i]) || (must_get && !received[i]));
    }
    let gap = gap_estimate(sent, &received, first, last);
    let pass = wrong == 0 && counted == lost && gap.abs_diff(end - start) <= Duration::from_millis(3);
    let note = format!("{lost} lost of {}, {counted} counted as outage drops, {wrong} misplaced", sent.len());
    OutageVerdict { gap, pass, note }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn judge_accepts_exact_window_and_rejects_leaks() {
        let sent: Vec<Duration> = (0..3000).map(ms).collect();
        let got: Vec<u64> = (0..3000).filter(|&i| !(1000..2000).contains(&i)).collect();
        let v = judge_outage(&sent, &got, ms(1000), ms(2000), 1000);
        assert!(v.pass, "{}", v.note);
        assert_eq!(v.gap, ms(1000));
        // A packet in the middle of the outage got through: fail.
        let mut leaky = got.clone();
        leaky.push(1500);
        assert!(!judge_outage(&sent, &leaky, ms(1000), ms(2000), 999).pass);
        // Counter disagrees with what the receiver saw: fail.
        assert!(!judge_outage(&sent, &got, ms(1000), ms(2000), 900).pass);
        // Outage too short.
        let short: Vec<u64> = (0..3000).filter(|&i| !(1000..1500).contains(&i)).collect();
        assert!(!judge_outage(&sent, &short, ms(1000), ms(2000), 500).pass);
    }
}
