//! A virtual file over real parallel TCP streams: many small manifest
//! chunks spread over eight sender threads must arrive as one ordered
//! manifest, and the tree must come out identical. (The race fixed in
//! `send_pack`, where two threads could number chunks in swapped order, is
//! too narrow for this test to hit reliably; the fix removes it by
//! construction: only the feeder thread numbers chunks.)

use lightpath_engine::vfile::{pack, PackOptions, UnpackOptions, Unpacker};
use lightpath_engine::vfile_chan::{recv_opts, send_pack, VfileSink};
use lightpath_engine::{Control, DataChannel};
use lightpath_sys::root::Root;
use std::net::TcpListener;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

fn tree(root: &Path, n: usize) {
    for i in 0..n {
        let d = root.join(format!("d{}", i % 13)).join(format!("e{}", i % 5));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(format!("f{i}")), vec![(i % 251) as u8; i % 700]).unwrap();
    }
}

fn files(root: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.strip_prefix(root).unwrap().to_path_buf(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn manifest_stays_ordered_across_eight_streams() {
    let tmp = tempfile::tempdir().unwrap();
    let (src, dst) = (tmp.path().join("src"), tmp.path().join("dst"));
    tree(&src, 1500);
    let data: u64 = files(&src).iter().map(|(_, b)| b.len() as u64).sum();
    for round in 0..4 {
        // Rounds 2 and 3 send each manifest chunk twice, on two streams.
        let copies = 1 + u8::from(round >= 2);
        let out = dst.join(format!("r{round}"));
        std::fs::create_dir_all(&out).unwrap();
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let (mut tx_dc, mut rx_dc) = (DataChannel::new(), DataChannel::new());
        tx_dc.connect_to(vec![l.local_addr().unwrap()]);
        rx_dc.listen(l);
        let opts = PackOptions { chunk_bytes: 256, ..PackOptions::default() };
        let pk = pack(Arc::new(Root::open(&src).unwrap()), vec![Vec::new()], opts).unwrap();
        let sink =
            VfileSink::new(Unpacker::new(Arc::new(Root::open(&out).unwrap()), UnpackOptions::default()).unwrap());
        let rx_ctl = Control::new();
        std::thread::scope(|s| {
            let h = s.spawn(|| {
                tx_dc.prepare_send(8).unwrap();
                send_pack(&mut tx_dc, &pk, 4096, copies, &Control::new()).unwrap()
            });
            rx_dc.prepare_recv().unwrap();
            rx_dc.recv_e(&sink, &recv_opts(Duration::from_secs(30)), &rx_ctl).unwrap();
            h.join().unwrap();
        });
        let stats = sink.finish().unwrap();
        assert_eq!(files(&src), files(&out), "round {round}");
        let manifest = rx_ctl.bytes() - data - stats.manifest_repeated;
        assert!(manifest > 0);
        let repeated = if copies == 2 { manifest } else { 0 };
        assert_eq!(stats.manifest_repeated, repeated, "round {round}: each manifest byte {copies} times, one kept");
    }
}
