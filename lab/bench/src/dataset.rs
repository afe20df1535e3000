//! Data sets: generated deterministically (or extracted once) into a cache
//! directory, each with a manifest of its entries by path (files with size
//! and CRC-32C, directories, symlinks) that a run's output is checked
//! against.

use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, ensure, Context, Result};
use serde::{Deserialize, Serialize};

use crate::gen;
use crate::manifest;
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

pub use crate::manifest::{manifest_of, Manifest};

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
    let manifest = match read_manifest(&cache.join("datasets").join(format!("{id}.{MANIFEST_SUFFIX}"))) {
        Some(m) if root.join(&ds.entry).exists() => m,
        _ => build_manifest(cfg, cache, &ds.entry, size, count)?,
    };
    ds.files = manifest.files.len() as u64;
    ds.bytes = manifest.bytes();
    ds.manifest = manifest;
    ds.root = Some(root);
    Ok(ds)
}

/// The cache's manifest files (`<id>.manifest-v2.json`): by path. Those
/// of older caches (`<id>.manifest.json`) held (size, CRC-32C) pairs only.
const MANIFEST_SUFFIX: &str = "manifest-v2.json";

/// Builds the data set (unless an older cache holds it intact) and writes
/// its manifest.
fn build_manifest(cfg: &DatasetConfig, cache: &Path, entry: &str, size: u64, count: u64) -> Result<Manifest> {
    let id = id_of(cfg);
    let datasets = cache.join("datasets");
    let root = datasets.join(&id);
    let m = match kept_tree(&root, entry, &datasets.join(format!("{id}.manifest.json")))? {
        Some(m) => m,
        None => {
            build(cfg, &root, entry, size, count)?;
            manifest_of(&root, entry, true)?
        }
    };
    fs::write(datasets.join(format!("{id}.{MANIFEST_SUFFIX}")), serde_json::to_vec(&m)?)?;
    Ok(m)
}

fn read_manifest(path: &Path) -> Option<Manifest> {
    serde_json::from_slice(&fs::read(path).ok()?).ok()
}

/// A manifest of an older cache: the files' sorted (size, CRC-32C) pairs.
#[derive(Deserialize)]
struct PairsManifest {
    files: Vec<(u64, u32)>,
}

/// The manifest by path of a data set an older cache built (its entry
/// there and its pairs-only manifest at `old`), when the tree still holds
/// what that manifest says; `None` means build it again.
fn kept_tree(root: &Path, entry: &str, old: &Path) -> Result<Option<Manifest>> {
    let Some(pairs) = fs::read(old).ok().and_then(|b| serde_json::from_slice::<PairsManifest>(&b).ok()) else {
        return Ok(None);
    };
    if !root.join(entry).exists() {
        return Ok(None);
    }
    let m = manifest_of(root, entry, true)?;
    Ok((m.pairs() == pairs.files).then_some(m))
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

/// Compares what arrived under `dest` (the copy of the data set's entry,
/// `dest/<entry>`) with the data set, path by path: the files' sizes (and
/// contents when `full`), the directories and the symlinks.
pub fn verify(ds: &Dataset, dest: &Path, full: bool) -> Result<()> {
    let got = manifest_of(dest, &ds.entry, full)?;
    let mut diffs = manifest::differences(&ds.manifest, &got, full);
    diffs.extend(beside_the_copy(dest, &ds.entry)?);
    if diffs.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = diffs.iter().take(SHOWN_DIFFERENCES).map(String::as_str).collect();
    bail!(
        "{} difference(s) from the source ({} files / {} expected, {} files / {} found under {}), first: {}",
        diffs.len(),
        ds.manifest.files.len(),
        fmt_bytes(ds.manifest.bytes()),
        got.files.len(),
        fmt_bytes(got.bytes()),
        dest.display(),
        shown.join("; ")
    )
}

/// Anything in `dest` (a fresh directory for each run) but the copy of
/// `entry`: a tool's leftover (a temporary or kept partial file beside a
/// single file's copy) is a difference, as it was when the whole of
/// `dest` was counted.
fn beside_the_copy(dest: &Path, entry: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for e in fs::read_dir(dest).with_context(|| format!("listing {}", dest.display()))? {
        let name = e?.file_name();
        if name != std::ffi::OsStr::new(entry) {
            out.push(format!("unexpected beside the copy: {}", name.to_string_lossy()));
        }
    }
    out.sort();
    Ok(out)
}

/// How many differing paths a failed check names.
const SHOWN_DIFFERENCES: usize = 5;

/// Writes a small file (used by tests and by generators).
pub fn write_all(path: &Path, data: &[u8]) -> Result<()> {
    File::create(path)?.write_all(data)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A data set whose entry is `tree` under `root`.
    fn tree_dataset(root: &Path) -> Dataset {
        let manifest = manifest_of(root, "tree", true).unwrap();
        Dataset {
            kind: DatasetKind::GitLike,
            id: "t".into(),
            root: Some(root.to_path_buf()),
            entry: "tree".into(),
            is_dir: true,
            files: manifest.files.len() as u64,
            bytes: manifest.bytes(),
            manifest,
        }
    }

    fn write_tree(root: &Path, files: &[(&str, &[u8])]) {
        for (rel, data) in files {
            let p = root.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, data).unwrap();
        }
    }

    #[test]
    fn verify_names_the_paths_that_differ() {
        let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        write_tree(src.path(), &[("tree/x/1", b"one"), ("tree/x/2", b"two")]);
        let ds = tree_dataset(src.path());
        write_tree(dst.path(), &[("tree/x/1", b"one"), ("tree/x/2", b"two")]);
        verify(&ds, dst.path(), true).unwrap();
        fs::rename(dst.path().join("tree/x/2"), dst.path().join("tree/2")).unwrap();
        let e = verify(&ds, dst.path(), false).unwrap_err().to_string();
        assert!(e.contains("2 difference(s)"), "{e}");
        assert!(e.contains("tree/2: unexpected file; tree/x/2: file missing"), "{e}");
        fs::rename(dst.path().join("tree/2"), dst.path().join("tree/x/2")).unwrap();
        fs::write(dst.path().join(".tree.lp-1.part"), b"left over").unwrap();
        let e = verify(&ds, dst.path(), true).unwrap_err().to_string();
        assert!(e.contains("unexpected beside the copy: .tree.lp-1.part"), "{e}");
    }

    #[test]
    fn a_tree_of_an_older_cache_is_kept_when_its_pairs_match() {
        let dir = tempfile::tempdir().unwrap();
        write_tree(dir.path(), &[("tree/a", b"aa"), ("tree/b", b"b")]);
        let old = dir.path().join("old.manifest.json");
        let pairs = manifest_of(dir.path(), "tree", true).unwrap().pairs();
        fs::write(&old, serde_json::json!({ "files": pairs }).to_string()).unwrap();
        let kept = kept_tree(dir.path(), "tree", &old).unwrap().expect("the tree is kept");
        assert_eq!(kept.files.keys().collect::<Vec<_>>(), ["tree/a", "tree/b"]);
        fs::write(dir.path().join("tree/b"), b"B").unwrap();
        assert_eq!(kept_tree(dir.path(), "tree", &old).unwrap(), None, "a changed tree is built again");
        assert_eq!(kept_tree(dir.path(), "tree", &dir.path().join("none")).unwrap(), None);
    }
}
