//! The emulator against independent measurements (iperf3, UDP echo, TCP
//! connect, timed UDP streams). Needs root and iperf3; runs the labs one at
//! a time so that they do not compete for the CPU. Set
//! LIGHTPATH_SKIP_LAB_TESTS=1 to skip them where root is not available.
//!
//! Retry policy: a timing check (RTT, rate, outage edges, reordering) is
//! measured again (at most `validate::ATTEMPTS` times) only when it failed
//! while the host stalled the delay line
//! (`Counters::stall`: many packets late, which says nothing about the
//! emulator); that attempt's rows stay in the table, marked void. A failure
//! on a line that kept time fails at once. Every row printed includes the
//! emulator's own health (lateness, kernel drops).
use std::sync::Mutex;
use std::time::Duration;

use lightpath_wan::validate::{self, scenarios, Check};
use lightpath_wan::{cleanup_prefix, netns, Lab, LabError, PathSpec, Side};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn lab_tests_enabled() -> bool {
    if std::env::var_os("LIGHTPATH_SKIP_LAB_TESTS").is_some() {
        eprintln!("LIGHTPATH_SKIP_LAB_TESTS set: skipping");
        return false;
    }
    assert!(rustix::process::geteuid().is_root(), "lab tests need root (or set LIGHTPATH_SKIP_LAB_TESTS=1)");
    true
}

fn assert_all(checks: &[Check]) {
    let table = validate::table(checks);
    println!("{table}");
    assert!(validate::all_pass(checks), "failed:\n{table}");
}

fn rtt_and_rate(prefix: &str, spec: PathSpec) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let lab = validate::fresh_lab(prefix, &spec).unwrap();
    lab.tune_tcp_buffers(scenarios::TCP_BUFFERS).unwrap();
    let mut checks = validate::with_retries(&lab, || validate::rtt_check(&lab, 50)).unwrap();
    let (secs, omit) = (scenarios::RATE_SECS, scenarios::OMIT_SECS);
    let rate = || Ok(vec![validate::rate_check(&lab, "cubic", 4, secs, omit)?]);
    checks.extend(validate::with_retries(&lab, rate).unwrap());
    if spec.offload {
        checks.push(validate::offload_check(&lab).unwrap());
    }
    println!("{}", lab.counters());
    assert_all(&checks);
}

#[test]
fn rtt_and_rate_1g_95ms_mtu9000() {
    if lab_tests_enabled() {
        rtt_and_rate("lpt-r95", scenarios::clean_95ms());
    }
}

/// The same path with segmentation offload: the rate and RTT still hold
/// (the delay line charges a segment for the packets it stands for), and
/// the stack really sent segments larger than the MTU.
#[test]
fn rtt_rate_and_segments_1g_95ms_mtu9000_offload() {
    if lab_tests_enabled() {
        rtt_and_rate("lpt-o95", scenarios::clean_95ms_offload());
    }
}

#[test]
fn rtt_and_rate_200m_20ms_mtu1500() {
    if lab_tests_enabled() {
        rtt_and_rate("lpt-r20", scenarios::clean_20ms());
    }
}

#[test]
fn loss_is_counted_and_seen_by_the_receiver() {
    if !lab_tests_enabled() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let lab = validate::fresh_lab("lpt-loss", &scenarios::lossy()).unwrap();
    // Counting, not timing: a stalled host is no excuse here (no retry).
    assert_all(&validate::loss_check(&lab, "100M", 4).unwrap());
}

#[test]
fn rate_limiter_and_queue_under_udp_overload() {
    if !lab_tests_enabled() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let lab = validate::fresh_lab("lpt-over", &scenarios::overload()).unwrap();
    assert_all(&validate::with_retries(&lab, || validate::overload_check(&lab, 4)).unwrap());
}

#[test]
fn outage_drops_everything_for_its_duration() {
    if !lab_tests_enabled() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let lab = validate::fresh_lab("lpt-out", &scenarios::outage()).unwrap();
    let outage = || Ok(vec![validate::outage_check(&lab, Duration::from_millis(700))?]);
    assert_all(&validate::with_retries(&lab, outage).unwrap());
}

#[test]
fn corruption_and_reordering_as_set() {
    if !lab_tests_enabled() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let lab = validate::fresh_lab("lpt-imp", &scenarios::impaired()).unwrap();
    assert_all(&validate::with_retries(&lab, || validate::impairment_check(&lab, Duration::from_secs(2))).unwrap());
}

#[test]
fn lifecycle_names_refusal_and_cleanup() {
    if !lab_tests_enabled() {
        return;
    }
    let spec = PathSpec { rate_bps: 10_000_000, rtt: Duration::from_millis(2), ..PathSpec::default() };
    let lab = validate::fresh_lab("lpt-life", &spec).unwrap();
    assert_eq!(lab.ns(Side::A), "lpt-life-a");
    assert!(netns::exists("lpt-life-b"));
    // A second lab with the same prefix is refused with a hint.
    let err = Lab::start("lpt-life", &spec).unwrap_err();
    assert!(matches!(err, LabError::Exists(..)), "{err}");
    // Commands run inside the namespace and see the lab's address.
    let out = lab.command(Side::B, "ip").args(["-4", "addr", "show", "wan0"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(&lab.addr(Side::B).to_string()), "{text}");
    assert!(text.contains("mtu 1500"), "{text}");
    // A process left inside is ended by Drop, and the namespaces go away.
    let mut sleeper = lab.command(Side::A, "sleep").arg("600").spawn().unwrap();
    drop(lab);
    assert!(!netns::exists("lpt-life-a") && !netns::exists("lpt-life-b"));
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    let status = loop {
        match sleeper.try_wait().unwrap() {
            Some(status) => break status,
            None if std::time::Instant::now() > deadline => {
                let _ = sleeper.kill();
                panic!("process in the namespace survived the lab");
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    assert!(!status.success());
    // cleanup_prefix removes namespaces left by a crashed run.
    let out = std::process::Command::new("ip").args(["netns", "add", "lpt-life-a"]).status().unwrap();
    assert!(out.success());
    cleanup_prefix("lpt-life").unwrap();
    assert!(!netns::exists("lpt-life-a"));
}

/// A lab whose namespaces were taken down (`lab down`) and then made
/// again by another lab of the same prefix leaves the other's alone when
/// it ends: it removed them by name, and the other ran on without a
/// network. (Its watchdog, which cleans up after a lab killed outright,
/// checks the same way.)
#[test]
fn a_lab_ends_only_its_own_namespaces() {
    if !lab_tests_enabled() {
        return;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let spec = PathSpec { rate_bps: 10_000_000, rtt: Duration::from_millis(2), ..PathSpec::default() };
    let first = validate::fresh_lab("lpt-own", &spec).unwrap();
    cleanup_prefix("lpt-own").unwrap();
    let second = Lab::start("lpt-own", &spec).unwrap();
    drop(first);
    assert!(netns::exists("lpt-own-a") && netns::exists("lpt-own-b"), "the second lab's namespaces went too");
    let out = second.command(Side::A, "ip").args(["link", "show", "wan0"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    drop(second);
    assert!(!netns::exists("lpt-own-a") && !netns::exists("lpt-own-b"));
}

#[test]
fn check_spec_explains_what_cannot_be_emulated() {
    let too_fast = PathSpec { rate_bps: 50_000_000_000, mtu: 9000, ..PathSpec::default() };
    let msg = lightpath_wan::check_spec(&too_fast).unwrap_err().to_string();
    assert!(msg.contains("cannot emulate"), "{msg}");
    let tiny_mtu = PathSpec { mtu: 200, ..PathSpec::default() };
    assert!(lightpath_wan::check_spec(&tiny_mtu).is_err());
    let lossy_offload = PathSpec { offload: true, loss: 0.001, ..PathSpec::default() };
    let msg = lightpath_wan::check_spec(&lossy_offload).unwrap_err().to_string();
    assert!(msg.contains("offload") && msg.contains("need it off"), "{msg}");
}
