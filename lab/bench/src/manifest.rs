//! What a tree holds, by path: every regular file (size and CRC-32C),
//! every directory (empty ones too) and every symbolic link (its target
//! text). A run's output is compared with its data set's manifest path
//! by path, so a copy with swapped names, a flattened or re-nested tree,
//! a lost empty directory or a changed link fails the check.
//!
//! Paths are relative to the directory holding the copied entry (so they
//! start with the entry's own name, `tree/...` or `big.bin`) and kept as
//! [`escape`]d text: names are bytes and need not be UTF-8.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// The entries of a tree, keyed by [`escape`]d relative path.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Manifest {
    /// Regular files: (size, CRC-32C; 0 when not computed).
    pub files: BTreeMap<String, (u64, u32)>,
    /// Directories, the copied entry itself when it is one.
    pub dirs: BTreeSet<String>,
    /// Symbolic links: the [`escape`]d target text.
    pub symlinks: BTreeMap<String, String>,
}

impl Manifest {
    pub fn bytes(&self) -> u64 {
        self.files.values().map(|f| f.0).sum()
    }

    /// The files as sorted (size, CRC-32C) pairs, without their paths (the
    /// manifests of old caches held only these).
    pub fn pairs(&self) -> Vec<(u64, u32)> {
        let mut pairs: Vec<(u64, u32)> = self.files.values().copied().collect();
        pairs.sort_unstable();
        pairs
    }
}

/// A name's bytes as text, losslessly: valid UTF-8 stays as it is, except
/// `%` (`%25`) and control characters; each byte of an invalid sequence,
/// and each control character, becomes `%XX`.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '%' || c.is_control() {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    let _ = write!(out, "%{b:02X}");
                }
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// The manifest of `base/entry` (a file, a directory or a link), paths
/// starting with `entry`; CRCs only `with_crc` (else 0).
pub fn manifest_of(base: &Path, entry: &str, with_crc: bool) -> Result<Manifest> {
    let mut m = Manifest::default();
    walk(&base.join(entry), entry.as_bytes().to_vec(), with_crc, &mut m)?;
    Ok(m)
}

fn walk(path: &Path, rel: Vec<u8>, with_crc: bool, m: &mut Manifest) -> Result<()> {
    let meta = fs::symlink_metadata(path).with_context(|| format!("cannot stat {}", path.display()))?;
    let key = escape(&rel);
    if meta.is_file() {
        let crc = if with_crc { crc_of(path)? } else { 0 };
        m.files.insert(key, (meta.len(), crc));
    } else if meta.is_symlink() {
        let target = fs::read_link(path).with_context(|| format!("cannot read link {}", path.display()))?;
        m.symlinks.insert(key, escape(target.as_os_str().as_bytes()));
    } else if meta.is_dir() {
        m.dirs.insert(key);
        let entries = fs::read_dir(path).with_context(|| format!("cannot list {}", path.display()))?;
        for e in entries {
            let name = e?.file_name();
            let mut child = rel.clone();
            child.push(b'/');
            child.extend_from_slice(name.as_bytes());
            walk(&path.join(&name), child, with_crc, m)?;
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

/// How `got` differs from `want`, one line per path, in path order;
/// contents (CRCs) compared only `with_crc`. Empty when they match.
pub fn differences(want: &Manifest, got: &Manifest, with_crc: bool) -> Vec<String> {
    let mut found: Vec<(&str, String)> = Vec::new();
    for (path, &(size, crc)) in &want.files {
        match got.files.get(path) {
            None => found.push((path, "file missing".into())),
            Some(&(s, _)) if s != size => found.push((path, format!("{s} bytes, expected {size}"))),
            Some(&(_, c)) if with_crc && c != crc => found.push((path, "content differs".into())),
            Some(_) => {}
        }
    }
    let extra_files = got.files.keys().filter(|p| !want.files.contains_key(*p));
    found.extend(extra_files.map(|p| (p.as_str(), "unexpected file".to_string())));
    found.extend(want.dirs.difference(&got.dirs).map(|p| (p.as_str(), "directory missing".to_string())));
    found.extend(got.dirs.difference(&want.dirs).map(|p| (p.as_str(), "unexpected directory".to_string())));
    for (path, target) in &want.symlinks {
        match got.symlinks.get(path) {
            None => found.push((path, format!("symlink -> {target} missing"))),
            Some(t) if t != target => found.push((path, format!("symlink -> {t}, expected -> {target}"))),
            Some(_) => {}
        }
    }
    let extra_links = got.symlinks.iter().filter(|(p, _)| !want.symlinks.contains_key(*p));
    found.extend(extra_links.map(|(p, t)| (p.as_str(), format!("unexpected symlink -> {t}"))));
    found.sort();
    found.into_iter().map(|(p, what)| format!("{p}: {what}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    fn put(root: &Path, rel: &str, data: &[u8]) {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, data).unwrap();
    }

    /// tree/a (4 bytes "AAAA"), tree/b (4 bytes "BBBB"), tree/d/c, tree/empty/.
    fn source(root: &Path) {
        put(root, "tree/a", b"AAAA");
        put(root, "tree/b", b"BBBB");
        put(root, "tree/d/c", b"c");
        fs::create_dir_all(root.join("tree/empty")).unwrap();
    }

    fn diff(src: &Path, dst: &Path, crc: bool) -> Vec<String> {
        let want = manifest_of(src, "tree", true).unwrap();
        differences(&want, &manifest_of(dst, "tree", crc).unwrap(), crc)
    }

    #[test]
    fn an_identical_copy_has_no_differences() {
        let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        source(src.path());
        source(dst.path());
        assert_eq!(diff(src.path(), dst.path(), true), Vec::<String>::new());
        let m = manifest_of(src.path(), "tree", true).unwrap();
        assert_eq!((m.files.len(), m.bytes()), (3, 9));
        assert_eq!(m.dirs.iter().map(String::as_str).collect::<Vec<_>>(), ["tree", "tree/d", "tree/empty"]);
    }

    #[test]
    fn swapped_names_are_found_by_path() {
        let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        source(src.path());
        source(dst.path());
        put(dst.path(), "tree/a", b"BBBB");
        put(dst.path(), "tree/b", b"AAAA");
        assert_eq!(diff(src.path(), dst.path(), true), ["tree/a: content differs", "tree/b: content differs"]);
        assert!(diff(src.path(), dst.path(), false).is_empty(), "sizes alone cannot see a swap of equal sizes");
    }

    #[test]
    fn a_flattened_tree_and_a_lost_empty_directory_differ() {
        let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        source(src.path());
        put(dst.path(), "tree/a", b"AAAA");
        put(dst.path(), "tree/b", b"BBBB");
        put(dst.path(), "tree/c", b"c");
        let d = diff(src.path(), dst.path(), true);
        let want = [
            "tree/c: unexpected file",
            "tree/d: directory missing",
            "tree/d/c: file missing",
            "tree/empty: directory missing",
        ];
        assert_eq!(d, want);
    }

    #[test]
    fn symlinks_are_compared_by_their_target_text() {
        let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        source(src.path());
        source(dst.path());
        std::os::unix::fs::symlink("d/c", src.path().join("tree/l")).unwrap();
        std::os::unix::fs::symlink("a", dst.path().join("tree/l")).unwrap();
        std::os::unix::fs::symlink("a", dst.path().join("tree/m")).unwrap();
        let d = diff(src.path(), dst.path(), true);
        assert_eq!(d, ["tree/l: symlink -> a, expected -> d/c", "tree/m: unexpected symlink -> a"]);
    }

    #[test]
    fn names_that_are_not_utf8_stay_distinct() {
        assert_eq!(escape(b"f\xff"), "f%FF");
        assert_eq!(escape("100%\n".as_bytes()), "100%25%0A", "escapes cannot be confused with names");
        assert_eq!(escape("été".as_bytes()), "été");
        let (src, dst) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        for (dir, name) in [(src.path(), &b"f\xff"[..]), (dst.path(), &b"f\xfe"[..])] {
            fs::create_dir(dir.join("tree")).unwrap();
            fs::write(dir.join("tree").join(std::ffi::OsStr::from_bytes(name)), b"x").unwrap();
        }
        assert_eq!(diff(src.path(), dst.path(), true), ["tree/f%FE: unexpected file", "tree/f%FF: file missing"]);
    }
}
