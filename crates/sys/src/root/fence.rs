//! A subtree whose listings hide the symlinks that leave an outer root
//! (a tree download, VRET): LIST and MLSD do not show such a link, since
//! following it beneath the served root fails, and a tree walk must not
//! send it either (its target names a place outside the served tree).

use super::*;

/// Called with the path (beneath the fenced root) of each symlink that a
/// fenced listing hides.
pub type OnHidden = Arc<dyn Fn(&[u8]) + Send + Sync>;

/// Where a fenced [`Root`] lies beneath the root its links must not leave.
#[derive(Clone)]
pub(super) struct Fence {
    /// The outer root.
    outer: Arc<OwnedFd>,
    /// The fenced root's path beneath it (`""`: the outer root itself).
    at: Vec<u8>,
    on_hidden: OnHidden,
}

impl std::fmt::Debug for Fence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fence").field("at", &String::from_utf8_lossy(&self.at)).finish_non_exhaustive()
    }
}

/// `a/b`, leaving out empty parts (and `.`, the root).
fn join(a: &[u8], b: &[u8]) -> Vec<u8> {
    let parts = [a, b].into_iter().filter(|p| !p.is_empty() && *p != b".");
    parts.collect::<Vec<_>>().join(&b'/')
}

impl Fence {
    /// The fence of the directory `rel` beneath the one fenced by `self`.
    pub(super) fn child(&self, rel: &[u8]) -> Fence {
        Fence { at: join(&self.at, rel), ..self.clone() }
    }

    /// Whether the symlink `rel` (beneath the fenced root) must be hidden:
    /// resolving it beneath the outer root fails because it leaves it
    /// (`EXDEV`: an absolute target, or `..` above the outer root). A
    /// dangling link that stays beneath it is kept. Hidden links are
    /// reported to `on_hidden`.
    pub(super) fn hides(&self, rel: &[u8]) -> bool {
        let path = join(&self.at, rel);
        let flags = OFlags::PATH | OFlags::CLOEXEC;
        let r = rustix::fs::openat2(&*self.outer, Root::rel(&path), flags, Mode::empty(), RESOLVE);
        let leaves = matches!(r, Err(rustix::io::Errno::XDEV));
        if leaves {
            (self.on_hidden)(rel);
        }
        leaves
    }
}

impl Root {
    /// [`Root::subdir`] whose listings ([`Root::read_dir`] and
    /// [`Root::read_dir_allowed`], and so a tree walk over it) leave out
    /// the symlinks that leave this root, as LIST and MLSD do, calling
    /// `on_hidden` with the path of each beneath the new root. Checked when
    /// the directory is read: a link replaced afterwards is not seen again.
    pub fn subdir_fenced(&self, rel: &[u8], on_hidden: OnHidden) -> io::Result<Root> {
        let mut sub = self.subdir(rel)?;
        let outer = Arc::new(self.dir.try_clone()?);
        sub.fence = Some(Fence { outer, at: join(b"", rel), on_hidden });
        Ok(sub)
    }

    /// Whether a listing of `dir` must leave out its entry `name` (a
    /// symlink leaving the outer root of a fenced root).
    pub(super) fn fenced_out(&self, dir: &[u8], name: &[u8], st: &Stat) -> bool {
        let Some(f) = &self.fence else { return false };
        FileType::from_raw_mode(st.st_mode) == FileType::Symlink && f.hides(&join(dir, name))
    }
}

#[cfg(test)]
mod fence_tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::sync::Mutex;

    #[test]
    fn a_fenced_listing_hides_the_links_leaving_the_outer_root() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path();
        std::fs::create_dir_all(p.join("root/tree/sub")).unwrap();
        std::fs::create_dir_all(p.join("root/other")).unwrap();
        std::fs::write(p.join("secret"), b"outside").unwrap();
        symlink(p.join("secret"), p.join("root/tree/abs")).unwrap();
        symlink("../../secret", p.join("root/tree/up")).unwrap();
        symlink("../other", p.join("root/tree/sibling")).unwrap();
        symlink("nowhere", p.join("root/tree/dangling")).unwrap();
        symlink("../../../secret", p.join("root/tree/sub/deep")).unwrap();
        symlink("..", p.join("root/tree/sub/parent")).unwrap();
        let root = Root::open(&p.join("root")).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let on_hidden: OnHidden = Arc::new(move |p: &[u8]| s.lock().unwrap().push(p.to_vec()));
        let tree = root.subdir_fenced(b"tree", on_hidden).unwrap();
        let names = |r: &Root, d: &[u8]| r.read_dir(d).unwrap().into_iter().map(|e| e.0).collect::<Vec<_>>();
        assert_eq!(names(&tree, b""), [&b"dangling"[..], b"sibling", b"sub"]);
        assert_eq!(names(&tree, b"sub"), [&b"parent"[..]]);
        let sub = tree.subdir(b"sub").unwrap();
        assert_eq!(names(&sub, b"."), [&b"parent"[..]], "the fence carries over to a subdirectory");
        let mut hidden = seen.lock().unwrap().clone();
        hidden.sort();
        assert_eq!(hidden, [&b"abs"[..], b"deep", b"sub/deep", b"up"]);
        assert_eq!(names(&root, b"tree").len(), 5, "an unfenced root lists them all");
    }
}
