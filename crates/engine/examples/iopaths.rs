//! Measure the I/O paths the engine can take on this machine (not a test):
//! buffered vs direct reads and writes at several block sizes, socket ->
//! file (read+pwrite, splice, read+direct pwrite) and file -> socket
//! (sendfile, splice, read+write, direct read+write) over loopback.
//!
//! `cargo run --release -p lightpath-engine --example iopaths -- [DIR] [GiB] [REPS]`
//! (defaults /var/tmp 2 3). Run as root: caches are dropped before every
//! cold read (`/proc/sys/vm/drop_caches`). Prints the median of REPS runs.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use lightpath_sys::dio::reopen_direct;
use lightpath_sys::mem::AlignedBuf;
use lightpath_sys::splice::{splice_from_file, splice_to_file, Pipe};

const KIB: usize = 1024;
const MIB: usize = 1 << 20;

fn drop_caches() -> io::Result<()> {
    std::process::Command::new("sync").status()?;
    std::fs::write("/proc/sys/vm/drop_caches", "3")
}

fn create(path: &Path, size: u64) -> io::Result<File> {
    let f = OpenOptions::new().read(true).write(true).create(true).truncate(true).open(path)?;
    lightpath_sys::file::preallocate(&f, size)?;
    Ok(f)
}

/// Write `size` bytes in `bs` pieces, buffered or direct, then fsync.
fn write_file(path: &Path, size: u64, bs: usize, direct: bool) -> io::Result<()> {
    let f = create(path, size)?;
    let out = if direct { reopen_direct(&f, true)? } else { f.try_clone()? };
    let mut buf = AlignedBuf::new(bs, 4096)?;
    buf.fill(0x5a);
    let mut off = 0;
    while off < size {
        out.write_all_at(&buf, off)?;
        off += bs as u64;
    }
    f.sync_all()
}

/// Read the whole file in `bs` pieces, buffered or direct.
fn read_file(path: &Path, bs: usize, direct: bool) -> io::Result<()> {
    let f = File::open(path)?;
    let size = f.metadata()?.len();
    let inp = if direct { reopen_direct(&f, false)? } else { f.try_clone()? };
    let mut buf = AlignedBuf::new(bs, 4096)?;
    let mut off = 0;
    while off < size {
        inp.read_exact_at(&mut buf, off)?;
        off += bs as u64;
    }
    Ok(())
}

fn pair() -> io::Result<(TcpStream, TcpStream)> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let a = TcpStream::connect(l.local_addr()?)?;
    Ok((a, l.accept()?.0))
}

/// Receive `size` bytes from a memory sender into `path`, then fsync.
fn sock_to_file(path: &Path, size: u64, how: &str) -> io::Result<()> {
    let (mut tx, mut rx) = pair()?;
    let sender = std::thread::spawn(move || -> io::Result<()> {
        let buf = vec![0x33u8; MIB];
        for _ in 0..size / MIB as u64 {
            tx.write_all(&buf)?;
        }
        Ok(())
    });
    let f = create(path, size)?;
    match how {
        "splice" => {
            let pipe = Pipe::new()?;
            let mut off = 0;
            while off < size {
                match splice_to_file(&rx, &pipe, &f, off, size - off)? {
                    0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                    n => off += n as u64,
                }
            }
        }
        _ => {
            let out = if how == "direct" { reopen_direct(&f, true)? } else { f.try_clone()? };
            let mut buf = AlignedBuf::new(256 * KIB, 4096)?;
            let mut off = 0;
            while off < size {
                rx.read_exact(&mut buf)?;
                out.write_all_at(&buf, off)?;
                off += buf.len() as u64;
            }
        }
    }
    sender.join().map_err(|_| io::Error::other("sender panicked"))??;
    f.sync_all()
}

/// Send the whole file to a discarding receiver.
fn file_to_sock(path: &Path, how: &str) -> io::Result<()> {
    let (mut tx, mut rx) = pair()?;
    let sink = std::thread::spawn(move || io::copy(&mut rx, &mut io::sink()));
    let f = File::open(path)?;
    let size = f.metadata()?.len();
    match how {
        "sendfile" => lightpath_sys::net::sendfile_all(&tx, &f, 0, size)?,
        "splice" => splice_from_file(&f, &Pipe::new()?, &tx, 0, size)?,
        _ => {
            let inp = if how == "direct" { reopen_direct(&f, false)? } else { f.try_clone()? };
            let mut buf = AlignedBuf::new(MIB, 4096)?;
            let mut off = 0;
            while off < size {
                inp.read_exact_at(&mut buf, off)?;
                tx.write_all(&buf)?;
                off += MIB as u64;
            }
        }
    }
    drop(tx);
    let got = sink.join().map_err(|_| io::Error::other("receiver panicked"))??;
    if got != size {
        return Err(io::Error::other(format!("receiver got {got} of {size}")));
    }
    Ok(())
}

/// Run `f` `reps` times (after `prep`), print the median and every run.
fn measure(name: &str, size: u64, reps: usize, prep: &dyn Fn() -> io::Result<()>, f: &dyn Fn() -> io::Result<()>) {
    let mut secs = Vec::new();
    for _ in 0..reps {
        if let Err(e) = prep() {
            println!("| {name} | prep failed: {e} |");
            return;
        }
        let t = Instant::now();
        if let Err(e) = f() {
            println!("| {name} | failed: {e} |");
            return;
        }
        secs.push(t.elapsed().as_secs_f64());
    }
    let mut sorted = secs.clone();
    sorted.sort_by(f64::total_cmp);
    let med = sorted[sorted.len() / 2];
    let runs: Vec<String> = secs.iter().map(|s| format!("{s:.2}")).collect();
    println!("| {name} | {:.0} | {med:.2} | {} |", size as f64 / med / 1e6, runs.join(" "));
}

fn main() -> io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = PathBuf::from(args.first().map(String::as_str).unwrap_or("/var/tmp"));
    let gib: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(2);
    let reps: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(3);
    let only = args.get(3).cloned().unwrap_or_default();
    let size = gib << 30;
    let data = dir.join("lightpath-iopaths.dat");
    let out = dir.join("lightpath-iopaths.out");
    let rm_out =
        || std::fs::remove_file(&out).or_else(|e| if e.kind() == io::ErrorKind::NotFound { Ok(()) } else { Err(e) });
    let cold = || drop_caches();
    println!("{} GiB in {}, median of {reps}", gib, dir.display());
    println!("| path | MB/s | median s | runs s |\n|---|---|---|---|");
    write_file(&data, size, MIB, false)?;
    for bs in [256 * KIB, MIB, 4 * MIB] {
        if only.is_empty() || only == "disk" {
            for direct in [false, true] {
                let what = if direct { "direct" } else { "buffered" };
                measure(&format!("read {what} cold, {} KiB", bs / KIB), size, reps, &cold, &|| {
                    read_file(&data, bs, direct)
                });
                let prep = || rm_out().and_then(|_| cold());
                let name = format!("write {what} + fsync, {} KiB", bs / KIB);
                measure(&name, size, reps, &prep, &|| write_file(&out, size, bs, direct));
            }
        }
    }
    if only.is_empty() || only == "net" {
        for how in ["read+pwrite", "splice", "direct"] {
            let prep = || rm_out().and_then(|_| cold());
            measure(&format!("socket->file {how} + fsync"), size, reps, &prep, &|| sock_to_file(&out, size, how));
        }
        for how in ["sendfile", "splice", "read+write", "direct"] {
            measure(&format!("file->socket {how}, cold"), size, reps, &cold, &|| file_to_sock(&data, how));
        }
        for how in ["sendfile", "splice", "read+write"] {
            let warm = || read_file(&data, MIB, false);
            measure(&format!("file->socket {how}, warm"), size, reps, &warm, &|| file_to_sock(&data, how));
        }
    }
    rm_out()?;
    std::fs::remove_file(&data)
}
