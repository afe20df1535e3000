//! The file system every run writes into: a freshly made ext4 (with its
//! journal) on a loop device, made again before each run.
//!
//! Why not a directory on the machine's own file system: ext4 without a
//! journal (this project's VM runs its root that way) will not reuse an
//! inode freed in the last 1-6 minutes, and finds that out inode by inode
//! (`recently_deleted()` in `fs/ext4/ialloc.c`). The harness deletes the
//! previous run's copy just before each run, so every run of a tree paid
//! for the last one: copying the Linux source over loopback took 8-15 s of
//! the client's system time into such a directory, 60 % of it in that
//! check, against 3.6-4.1 s into a fresh journaled ext4 (`perf`, by hand).
//! A new file system per run also stops one run's fragmentation from
//! reaching the next. Only data sets of several files get one; where
//! loop devices or mkfs are missing, runs fall back to a directory and the
//! results say so.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::proc::run_quiet;

/// The scratch space of one scenario.
pub struct ScratchFs {
    dir: PathBuf,
    fresh: Option<Fresh>,
    /// Why runs write into a plain directory, when they do.
    fallback: Option<String>,
}

struct Fresh {
    image: PathBuf,
    loopdev: String,
    inodes: u64,
}

impl ScratchFs {
    /// Scratch space at `dir` with room for `bytes` (plus slack) and
    /// `files` inodes (plus slack): a fresh file system for data sets of
    /// several files, the cache's own file system for one file or none
    /// (a large file meets no inode allocation, and the disk scenario's
    /// fio reference measures the machine's disk, not a loop device over it).
    pub fn new(dir: &Path, bytes: u64, files: u64) -> Self {
        let image = dir.with_extension("img");
        // A bench killed mid-run left its file system mounted and its loop
        // device attached: take both down before the image is replaced, or
        // (one file) left alone for good, with its image.
        unmount(dir);
        detach_loops_of(&image);
        if files <= 1 {
            let _ = fs::remove_file(&image);
            let why = "one file: the machine's disk itself".to_string();
            return ScratchFs { dir: dir.to_path_buf(), fresh: None, fallback: Some(why) };
        }
        match Fresh::create(&image, bytes, files) {
            Ok(fresh) => ScratchFs { dir: dir.to_path_buf(), fresh: Some(fresh), fallback: None },
            Err(e) => {
                let why = format!("{e:#}");
                eprintln!("bench: note: runs write into a plain directory: {why}");
                ScratchFs { dir: dir.to_path_buf(), fresh: None, fallback: Some(why) }
            }
        }
    }

    /// The mount point (or plain directory), empty.
    pub fn reset(&self) -> Result<&Path> {
        unmount(&self.dir);
        if self.dir.exists() {
            fs::remove_dir_all(&self.dir).with_context(|| format!("cannot clean {}", self.dir.display()))?;
        }
        fs::create_dir_all(&self.dir)?;
        if let Some(f) = &self.fresh {
            f.mkfs()?;
            // noinit_itable: no background zeroing of inode tables during runs.
            run_quiet(Command::new("mount").args(["-o", "noinit_itable", &f.loopdev]).arg(&self.dir))
                .with_context(|| format!("cannot mount {} on {}", f.loopdev, self.dir.display()))?;
        }
        Ok(&self.dir)
    }

    /// What the runs write into, for the record.
    pub fn describe(&self) -> String {
        match &self.fallback {
            None => "fresh ext4 per run (journal, loop device with direct I/O over a sparse image)".into(),
            Some(why) => format!("directory on the cache's file system ({why})"),
        }
    }
}

impl Drop for ScratchFs {
    fn drop(&mut self) {
        unmount(&self.dir);
        if let Some(f) = &self.fresh {
            let _ = run_quiet(Command::new("losetup").args(["-d", &f.loopdev]));
            let _ = fs::remove_file(&f.image);
        }
    }
}

impl Fresh {
    fn create(image: &Path, bytes: u64, files: u64) -> Result<Fresh> {
        let size = bytes + bytes / 4 + (2 << 30);
        let _ = fs::remove_file(image);
        let f = fs::File::create(image).with_context(|| format!("cannot create {}", image.display()))?;
        f.set_len(size)?;
        drop(f);
        let attached = run_quiet(Command::new("losetup").args(["--find", "--show", "--direct-io=on"]).arg(image));
        let loopdev = match attached {
            Ok(out) => out.trim().to_string(),
            Err(e) => {
                let _ = fs::remove_file(image);
                return Err(e);
            }
        };
        // ext4's default (one inode per 16 KiB) is short for trees of
        // small files; twice the data set's files plus room for logs.
        let inodes = (size >> 14).max(files * 2 + 10_000);
        let fresh = Fresh { image: image.to_path_buf(), loopdev, inodes };
        if let Err(e) = fresh.mkfs() {
            let _ = run_quiet(Command::new("losetup").args(["-d", &fresh.loopdev]));
            let _ = fs::remove_file(image);
            return Err(e);
        }
        Ok(fresh)
    }

    /// A new file system: the journal and inode tables are left for the
    /// kernel to initialise lazily (the image is sparse, so they read as
    /// zeros), and `mkfs` discards the device first, which punches the last
    /// run's blocks out of the image.
    fn mkfs(&self) -> Result<()> {
        run_quiet(Command::new("mkfs.ext4").args([
            "-q",
            "-F",
            "-N",
            &self.inodes.to_string(),
            "-E",
            "lazy_itable_init=1,lazy_journal_init=1",
            &self.loopdev,
        ]))
        .with_context(|| format!("mkfs.ext4 on {}", self.loopdev))
        .map(drop)
    }
}

/// Detaches the loop devices backed by `image` (`losetup -j`).
fn detach_loops_of(image: &Path) {
    let Ok(out) = run_quiet(Command::new("losetup").arg("-j").arg(image)) else { return };
    for dev in out.lines().filter_map(|l| l.split(':').next()).filter(|d| d.starts_with("/dev/loop")) {
        let _ = run_quiet(Command::new("losetup").args(["-d", dev]));
    }
}

/// Unmounts whatever is mounted at `dir` (nothing happens if nothing is).
fn unmount(dir: &Path) {
    let mounted = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let target = dir.to_string_lossy();
    if mounted.lines().any(|l| l.split_whitespace().nth(1) == Some(&*target)) {
        let _ = run_quiet(Command::new("umount").arg(dir));
    }
}
