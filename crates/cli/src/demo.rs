//! `lightpath demo`: the embedded default. Starts a server on loopback,
//! generates incompressible data, copies it with parallel MODE E streams
//! through the real client and protocol, verifies it, and prints the rate.

use crate::cp::summary;
use crate::units::parse_size;
use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use lightpath_client::{copy, CopyOptions, Location, Progress};
use lightpath_server::{Server, ServerConfig};
use rand::{RngCore, SeedableRng};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Options of `lightpath demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Size of the generated file.
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    pub size: u64,
    /// Parallel streams.
    #[arg(short = 'p', long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=128))]
    pub parallel: u32,
    /// Work directory (default: a fresh temporary directory, removed afterwards).
    #[arg(long)]
    pub dir: Option<std::path::PathBuf>,
}

fn generate(path: &Path, size: u64) -> anyhow::Result<()> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0x11_6874_7061_7468);
    let mut f = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let mut buf = vec![0u8; 1 << 20];
    let mut left = size;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        rng.fill_bytes(&mut buf[..n]);
        f.write_all(&buf[..n])?;
        left -= n as u64;
    }
    f.flush()?;
    Ok(())
}

/// Run the demo.
pub fn run(a: DemoArgs) -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new().prefix("lightpath-demo-").tempdir()?;
    let dir = a.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    let (root, local) = (dir.join("served"), dir.join("received"));
    for d in [&root, &local] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    crate::log::say(&format!(
        "lightpath demo: generating {} bytes of incompressible data in {}",
        a.size,
        root.display()
    ));
    let file = root.join("demo.bin");
    generate(&file, a.size).with_context(|| format!("writing {}", file.display()))?;
    let rt = tokio::runtime::Runtime::new()?;
    let cfg = server_config(root.clone())?;
    let server = rt.block_on(Server::bind(cfg))?;
    let addr = server.local_addr()?;
    rt.spawn(server.run());
    crate::log::say(&format!("lightpath demo: server on {addr}, copying with {} parallel MODE E streams", a.parallel));
    let src = Location::parse(&format!("ftp://{addr}/demo.bin"))?;
    let opts = copy_options(a.parallel);
    let progress = Arc::new(Progress::default());
    let pb = bar(progress.clone(), a.size);
    let t = Instant::now();
    let results = rt.block_on(copy(vec![src], Location::Local(local.join("demo.bin")), opts, progress))?;
    pb.finish_and_clear();
    if let Some(e) = results.iter().find_map(|r| r.result.as_ref().err()) {
        anyhow::bail!("demo transfer failed: {e}");
    }
    summary(&format!("{} file(s)", results.len()), 0, a.size, t.elapsed());
    crate::log::say("lightpath demo: MD5 verified by the server's CKSM against the received file");
    Ok(())
}

/// The demo's server: anonymous and read-only on `root`, on a free port
/// of the loopback.
fn server_config(root: std::path::PathBuf) -> anyhow::Result<ServerConfig> {
    Ok(ServerConfig {
        listen: "127.0.0.1:0".parse()?,
        root,
        anonymous: true,
        anonymous_writes: false,
        read_only: true,
        users: None,
        memory_paths: false,
        public_ip: None,
        data_ports: None,
        congestion: None,
        fsync: false,
        direct_io: lightpath_plan::DirectIo::Auto,
        ahead: lightpath_server::ahead::AheadPort::Auto,
        limits: Default::default(),
        data_peers: Default::default(),
        keep_partial: lightpath_server::partial::KEEP_FOR,
        marker_interval: 5,
    })
}

/// The demo's copy: one file over `streams` MODE E streams, verified by
/// MD5 (the server's CKSM against the received file).
fn copy_options(streams: u32) -> CopyOptions {
    CopyOptions {
        streams,
        target_bps: 0,
        cc: 1,
        recursive: false,
        pipeline: 1,
        block: lightpath_engine::DEFAULT_BLOCK,
        part: None,
        verify: Some("MD5".into()),
        fsync: false,
        direct_io: lightpath_plan::DirectIo::Auto,
        connect_ahead: false,
        fastopen: false,
        congestion: None,
        data_from_any: false,
        retries: 0,
        partial: false,
        mlsr: true,
        quiet: false,
    }
}

fn bar(p: Arc<Progress>, total: u64) -> ProgressBar {
    let pb = ProgressBar::new(total);
    pb.set_style(
        ProgressStyle::with_template(
            "[{elapsed_precise}] [{wide_bar}] {decimal_bytes}/{decimal_total_bytes} {decimal_bytes_per_sec}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let pb2 = pb.clone();
    std::thread::spawn(move || loop {
        pb2.set_position(p.bytes.load(Ordering::Relaxed));
        if pb2.is_finished() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    });
    pb
}
