//! What the placement asks of the I/O threads beyond their cpus: a raised
//! priority (nice) for every I/O thread and only for them, and the buffer
//! pool bound to a NUMA node. This VM has one node, so the binding is to
//! node 0: the test shows it is asked and accepted (mbind succeeded), not
//! that pages moved. (Its own test binary: the settings are process-wide.)

use lightpath_engine::iothreads::{self, IoConfig};
use std::time::{Duration, Instant};

/// (thread name, nice) of every thread of this process.
fn threads() -> Vec<(String, i32)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        // Fields after the command's closing parenthesis: state is 3rd, nice 19th.
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let nice = rest.split_whitespace().nth(16).and_then(|v| v.parse().ok()).unwrap_or(i32::MIN);
        out.push((comm.trim().to_string(), nice));
    }
    out
}

#[test]
fn io_threads_get_the_raised_priority_and_the_pool_its_node() {
    let caps = lightpath_sys::topo::capabilities().unwrap();
    assert!(caps.sys_nice, "this test raises priority: it needs CAP_SYS_NICE (run as root)");
    let before = lightpath_sys::topo::current_thread_nice().unwrap();
    iothreads::set_io_nice(before - 3);
    iothreads::set_buffer_node(0);
    iothreads::configure(IoConfig { net_threads: 2, disk_threads: 3 }).unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let io = |t: &(String, i32)| t.0.starts_with("lp-net-") || t.0.starts_with("lp-disk-");
    loop {
        let all = threads();
        let raised = all.iter().filter(|t| io(t) && t.1 == before - 3).count();
        if raised == 5 {
            let others: Vec<_> = all.iter().filter(|t| !io(t)).collect();
            assert!(others.iter().all(|t| t.1 == before), "only I/O threads are raised: {all:?}");
            break;
        }
        assert!(Instant::now() < deadline, "2 net + 3 disk threads at nice {}: {all:?}", before - 3);
        std::thread::sleep(Duration::from_millis(20));
    }
    let notes = iothreads::pool_notes().expect("the engine runs");
    assert!(notes.iter().all(|n| !n.starts_with("NUMA")), "binding the pool to node 0 failed: {notes:?}");
}
