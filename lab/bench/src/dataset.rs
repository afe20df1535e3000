//! Data sets: generated deterministically (or extracted once) into a cache
//! directory, each with a manifest of its files (size and CRC-32C) that a
//! run's output is checked against.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};

use crate::gen;
use crate::proc::run_stoppable;
use crate::scenario::{DatasetConfig, DatasetKind};
use crate::units::fmt_bytes;

/// Where Debian's `linux-source-6.1` package puts its tarball.
pub const LINUX_TARBALL: &str = "/usr/src/linux-source-6.1.tar.xz";

/// A data set ready in the cache.
#[derive(Clone, Debug, Serialize)]
pub struct Dataset {
    pub kind: DatasetKind,
    pub id: String,
    /// Directory a source server serves (absent for memory runs).
    pub root: Option<PathBuf>,
    /// What is copied, relative to `root`: a file or a directory.
    pub entry: String,
    pub is_dir: bool,
    pub files: u64,
    pub bytes: u64,
    #[serde(skip)]
    pub manifest: Manifest,
}

/// Every regular file of a tree as (size, CRC-32C), sorted.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    pub files: Vec<(u64, u32)>,
}

impl Manifest {
    pub fn bytes(&self) -> u64 {
        self.files.iter().map(|f| f.0).sum()
    }
}

/// The default size and count of each kind (full scale for this machine).
fn resolved(cfg: &DatasetConfig) -> (u64, u64) {
    use DatasetKind::*;
    let size = cfg.size.map(|s| s.0);
    let count = cfg.count;
    match cfg.kind {
        LargeFile => (size.unwrap_or(3 << 30), 1),
        LargeFiles => (size.unwrap_or(512 << 20), count.unwrap_or(6)),
        Incompressible => (size.unwrap_or(15_000_000), count.unwrap_or(30)),
        GitLike => (size.unwrap_or(480_000_000), count.unwrap_or(5000)),
        Memory => (size.unwrap_or(2 << 30), 0),
        LinuxSource => (0, 0),
    }
}

/// The cache key of a data set.
pub fn id_of(cfg: &DatasetConfig) -> String {
    let (size, count) = resolved(cfg);
    match cfg.kind {
        DatasetKind::LargeFile => format!("large-file-{size}"),
        DatasetKind::LargeFiles => format!("large-files-{count}x{size}"),
        DatasetKind::Incompressible => format!("incompressible-{count}x{size}"),
        DatasetKind::GitLike => format!("git-like-{count}-{size}"),
        DatasetKind::Memory => format!("memory-{size}"),
        DatasetKind::LinuxSource => "linux-source-6.1".into(),
    }
}

/// Checks that a data set can be made here, before anything runs.
pub fn preflight(cfg: &DatasetConfig) -> Result<()> {
    if cfg.kind == DatasetKind::LinuxSource {
        let tar = cfg.tarball.clone().unwrap_or_else(|| LINUX_TARBALL.into());
        ensure!(tar.exists(), "{} is missing: install it with `apt-get install linux-source-6.1`", tar.display());
    }
    Ok(())
}

/// Makes (or finds) the data set in `cache`.
pub fn prepare(cfg: &DatasetConfig, cache: &Path) -> Result<Dataset> {
    let id = id_of(cfg);
    let (size, count) = resolved(cfg);
    let mut ds = Dataset {
        kind: cfg.kind,
        id: id.clone(),
        root: None,
        entry: String::new(),
        is_dir: !matches!(cfg.kind, DatasetKind::LargeFile | DatasetKind::Memory),
        files: 0,
        bytes: size,
        manifest: Manifest::default(),
    };
    if cfg.kind == DatasetKind::Memory {
        ds.entry = "dev/zero".into();
        return Ok(ds);
    }
    let root = cache.join("datasets").join(&id);
    ds.entry = if ds.is_dir { "tree".into() } else { "big.bin".into() };
    let manifest_path = cache.join("datasets").join(format!("{id}.manifest.json"));
    let manifest = match read_manifest(&manifest_path) {
        Some(m) if root.join(&ds.entry).exists() => m,
        _ => {
            build(cfg, &root, &ds.entry, size, count)?;
            let m = manifest_of(&root.join(&ds.entry), true)?;
            fs::write(&manifest_path, serde_json::to_vec(&m)?)?;
            m
        }
    };
    ds.files = manifest.files.len() as u64;
    ds.bytes = manifest.bytes();
    ds.manifest = manifest;
    ds.root = Some(root);
    Ok(ds)
}

fn read_manifest(path: &Path) -> Option<Manifest> {
    serde_json::from_slice(&fs::read(path).ok()?).ok()
}

fn build(cfg: &DatasetConfig, root: &Path, entry: &str, size: u64, count: u64) -> Result<()> {
    if root.exists() {
        fs::remove_dir_all(root)?;
    }
    fs::create_dir_all(root)?;
    let target = root.join(entry);
    eprintln!("bench: building data set {} ...", root.display());
    match cfg.kind {
        DatasetKind::LargeFile => gen::random_file(&target, size, 1)?,
        DatasetKind::LargeFiles | DatasetKind::Incompressible => {
            fs::create_dir(&target)?;
            for i in 0..count {
                gen::random_file(&target.join(format!("file-{i:04}.bin")), size, 100 + i)?;
            }
        }
        DatasetKind::GitLike => gen::git_like_tree(&target, count, size)?,
        DatasetKind::LinuxSource => extract_linux(cfg, root, &target)?,
        DatasetKind::Memory => {}
    }
    make_world_readable(root)
}

fn extract_linux(cfg: &DatasetConfig, root: &Path, target: &Path) -> Result<()> {
    let tar = cfg.tarball.clone().unwrap_or_else(|| LINUX_TARBALL.into());
    let tmp = root.join("extract");
    fs::create_dir_all(&tmp)?;
    run_stoppable(Command::new("tar").arg("-xf").arg(&tar).arg("-C").arg(&tmp))?;
    let top: Vec<PathBuf> = fs::read_dir(&tmp)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
    ensure!(top.len() == 1, "{}: expected one top-level directory", tar.display());
    fs::rename(&top[0], target)?;
    fs::remove_dir(&tmp)?;
    // Regular files and directories only: tools differ on symlinks.
    run_stoppable(Command::new("find").arg(target).args(["-type", "l", "-delete"]))?;
    Ok(())
}

/// Directories 0755 and files 0644 (servers run as an unprivileged user).
fn make_world_readable(root: &Path) -> Result<()> {
    fs::set_permissions(root, fs::Permissions::from_mode(0o755))?;
    run_stoppable(Command::new("chmod").args(["-R", "u+rwX,go+rX,go-w"]).arg(root))?;
    Ok(())
}

/// Walks `path` (a file or a tree) and lists its regular files.
pub fn manifest_of(path: &Path, with_crc: bool) -> Result<Manifest> {
    let mut files = Vec::new();
    walk(path, &mut |p, size| {
        let crc = if with_crc { crc_of(p)? } else { 0 };
        files.push((size, crc));
        Ok(())
    })?;
    files.sort_unstable();
    Ok(Manifest { files })
}

fn walk(path: &Path, f: &mut dyn FnMut(&Path, u64) -> Result<()>) -> Result<()> {
    let meta = fs::symlink_metadata(path).with_context(|| format!("cannot stat {}", path.display()))?;
    if meta.is_file() {
        return f(path, meta.len());
    }
    if meta.is_dir() {
        let mut entries: Vec<PathBuf> = fs::read_dir(path)?.filter_map(|e| e.ok().map(|e| e.path())).collect();
        entries.sort();
        for e in entries {
            walk(&e, f)?;
        }
    }
    Ok(())
}

fn crc_of(path: &Path) -> Result<u32> {
    let mut file = File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut buf = vec![0u8; 1 << 20];
    let mut crc = 0u32;
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(crc);
        }
        crc = crc32c::crc32c_append(crc, &buf[..n]);
    }
}

/// Compares what arrived under `dest` with the data set.
pub fn verify(ds: &Dataset, dest: &Path, full: bool) -> Result<()> {
    let got = manifest_of(dest, full)?;
    let (n, b) = (got.files.len() as u64, got.bytes());
    if n != ds.files || b != ds.bytes {
        bail!(
            "expected {} files / {}, found {n} files / {} under {}",
            ds.files,
            fmt_bytes(ds.bytes),
            fmt_bytes(b),
            dest.display()
        );
    }
    if full && got != ds.manifest {
        let bad = got.files.iter().zip(&ds.manifest.files).filter(|(a, b)| a != b).count();
        bail!("content differs from the source in {bad} of {n} files");
    }
    Ok(())
}

/// Writes a small file (used by tests and by generators).
pub fn write_all(path: &Path, data: &[u8]) -> Result<()> {
    File::create(path)?.write_all(data)?;
    Ok(())
}
