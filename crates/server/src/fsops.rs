//! File-system commands (SIZE, MDTM, MLST, STAT, CWD, MKD, RMD, DELE,
//! RNFR/RNTO, CKSM, SITE CHMOD), always through the confined [`Root`].

use crate::listing::{facts, ftp_time, list_line, Rights};
use lightpath_engine::checksum::checksum_until;
use lightpath_engine::{Control, FileSource, ZeroSource};
use lightpath_proto::{FsOp, Reply, VPath};
use lightpath_sys::root::{FileType, Root};
use std::io;

/// Memory paths (`--memory-paths`) exposed in the served tree.
pub const DEV_ZERO: &[u8] = b"/dev/zero";
/// Write sink for memory-to-memory runs.
pub const DEV_NULL: &[u8] = b"/dev/null";

/// openat2(RESOLVE_BENEATH) refuses a path that would leave the root with EXDEV.
const EXDEV: i32 = 18;
const ELOOP: i32 = 40;

/// The reply for a failed file operation on `p`.
pub fn io_reply(p: &VPath, e: &io::Error) -> Reply {
    let what = match e.raw_os_error() {
        Some(EXDEV) => "path leaves the served root".to_string(),
        Some(ELOOP) => "too many levels of symbolic links".to_string(),
        _ => e.to_string(),
    };
    let code = if e.kind() == io::ErrorKind::AlreadyExists { 553 } else { 550 };
    Reply::new(code, format!("{}: {what}", p.display()))
}

/// What the session's PI must be told after a request succeeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// CWD: the new working directory ([`lightpath_proto::ServerPi::set_cwd`]).
    Cwd(VPath),
    /// RNFR: the name to rename ([`lightpath_proto::ServerPi::set_rename_from`]).
    RenameFrom(VPath),
}

/// Run one file-system request (`writable`: the server takes writes).
/// Returns the reply and what the PI must hear.
/// A `CKSM` stops when `ctl` is cancelled (ABOR) or lost.
pub fn run(root: &Root, memory: bool, writable: bool, op: FsOp, ctl: &Control) -> (Reply, Option<Effect>) {
    if let Some(p) = paths(&op).into_iter().find(|p| is_upload_in_progress(p)) {
        return (in_progress(p), None);
    }
    let r = match op {
        FsOp::Cwd(p) => return cwd(root, p),
        FsOp::RenameFrom(p) => return rename_from(root, p),
        FsOp::Size(p) => size(root, memory, &p),
        FsOp::Mdtm(p) => {
            root.stat(p.relative()).map(|st| Reply::new(213, ftp_time(st.st_mtime))).map_err(|e| io_reply(&p, &e))
        }
        FsOp::Mlst(p) => mlst(root, writable, &p),
        FsOp::Stat(p) => stat(root, &p),
        FsOp::Mkd(p) => {
            let msg = format!("Directory \"{}\" created successfully.", p.display().replace('"', "\"\""));
            root.mkdir(p.relative()).map(|_| Reply::new(257, msg)).map_err(|e| io_reply(&p, &e))
        }
        FsOp::Rmd(p) => root.rmdir(p.relative()).map(|_| Reply::new(250, "OK.")).map_err(|e| io_reply(&p, &e)),
        FsOp::Dele(p) => dele(root, &p),
        FsOp::Rename { from, to } => rename(root, &from, &to),
        FsOp::Cksm { alg, offset, len, path, .. } => cksm(root, memory, (&alg, offset, len), &path, ctl),
        FsOp::Chmod { mode, path } => chmod(root, mode, &path),
        FsOp::Mfmt { mtime, path } => mfmt(root, mtime, &path),
    };
    (r.unwrap_or_else(|e| e), None)
}

/// The paths `op` names.
fn paths(op: &FsOp) -> Vec<&VPath> {
    match op {
        FsOp::Size(p) | FsOp::Mdtm(p) | FsOp::Mlst(p) | FsOp::Stat(p) | FsOp::Cwd(p) => vec![p],
        FsOp::Mkd(p) | FsOp::Rmd(p) | FsOp::Dele(p) | FsOp::RenameFrom(p) => vec![p],
        FsOp::Rename { from, to } => vec![from, to],
        FsOp::Cksm { path, .. } | FsOp::Chmod { path, .. } | FsOp::Mfmt { path, .. } => vec![path],
    }
}

/// Whether `p` names the temporary file of an upload in progress
/// (`.NAME.lpPID-TOKEN-N.part`, [`lightpath_sys::root::is_temp_name`]),
/// named from the start where the file system has no `O_TMPFILE` (NFS):
/// hidden from listings and refused to every command, or another session
/// could download, rename (publish) or delete an unfinished upload (a
/// defect hunt's find).
pub fn is_upload_in_progress(p: &VPath) -> bool {
    lightpath_sys::root::is_temp_name(p.file_name())
}

/// The refusal of a command on such a path.
pub fn in_progress(p: &VPath) -> Reply {
    Reply::new(
        550,
        format!(
            "{}: a name this server keeps for the temporary files of uploads (.NAME.lpPID-TOKEN-N.part), \
             hidden and out of reach",
            p.display()
        ),
    )
}

/// SITE CHMOD: permission bits and the sticky bit only (a client must
/// not make setuid or setgid files, which the server's user would own; a
/// tree's shared 1777 directory keeps its sticky bit); [`Root::chmod`]
/// refuses the served root itself.
fn chmod(root: &Root, mode: u32, p: &VPath) -> Result<Reply, Reply> {
    if mode & !0o1777 != 0 {
        return Err(Reply::new(
            550,
            format!("SITE CHMOD {mode:o}: only permission bits and the sticky bit (1777) may be set"),
        ));
    }
    root.chmod(p.relative(), mode).map(|_| Reply::new(250, "OK.")).map_err(|e| io_reply(p, &e))
}

/// MFMT: the modification time of a file or directory (no symlink
/// followed on the way or at the end), as a client that keeps a tree's
/// directories' mtimes sets them once their files are in.
/// The reply says the time the file got, which the file system may have
/// held to its range (ext4: 2446), not the one asked for.
fn mfmt(root: &Root, (sec, nsec): (i64, u32), p: &VPath) -> Result<Reply, Reply> {
    root.set_mtime_strict(p.relative(), sec, nsec).map_err(|e| io_reply(p, &e))?;
    let st = root.lstat(p.relative()).map_err(|e| io_reply(p, &e))?;
    let t = lightpath_proto::ftptime::format_ns(st.st_mtime, st.st_mtime_nsec as u32);
    Ok(Reply::new(213, format!("Modify={t}; {}", p.display())))
}

/// CWD (and CDUP): the path must be a directory the session's user can
/// search (`x`), or nothing in it could be opened afterwards. Resolving
/// `dir/.` looks a name up in it, which takes that very permission (root
/// has it everywhere, as everything else it does).
fn cwd(root: &Root, p: VPath) -> (Reply, Option<Effect>) {
    match root.stat(p.relative()) {
        Ok(st) if FileType::from_raw_mode(st.st_mode) == FileType::Directory => {}
        Ok(_) => return (Reply::new(550, format!("{}: Not a directory", p.display())), None),
        Err(e) => return (io_reply(&p, &e), None),
    }
    let inside = if p.is_root() { b".".to_vec() } else { [p.relative(), b"/."].concat() };
    match root.stat(&inside) {
        Ok(_) => (Reply::new(250, "CWD command successful."), Some(Effect::Cwd(p))),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            let why = "Permission denied: the directory cannot be searched (no x permission), so it cannot be entered";
            (Reply::new(550, format!("{}: {why}", p.display())), None)
        }
        Err(e) => (io_reply(&p, &e), None),
    }
}

/// RNTO: the reply names what failed: the source if it has gone since RNFR
/// or its directory cannot be changed, else the target (its directory
/// missing or not writable, a directory in the way...).
fn rename(root: &Root, from: &VPath, to: &VPath) -> Result<Reply, Reply> {
    root.rename(from.relative(), to.relative()).map(|_| Reply::new(250, "OK.")).map_err(|e| {
        let source_gone = root.lstat(from.relative()).is_err();
        let denied = e.kind() == io::ErrorKind::PermissionDenied;
        let culprit = if source_gone || (denied && !changeable(root, &from.parent())) { from } else { to };
        io_reply(culprit, &e)
    })
}

/// Whether entries can be made and removed in the directory `dir`.
fn changeable(root: &Root, dir: &VPath) -> bool {
    root.stat_allowed(dir.relative()).is_ok_and(|(_, own, _)| own.write && own.search)
}

/// RNFR: the name must exist (RFC 959: 350 means "pending further
/// information", so a missing file is refused now, with 550). A final
/// symlink is the name itself, as the rename acts on it, not its target.
fn rename_from(root: &Root, p: VPath) -> (Reply, Option<Effect>) {
    if p.is_root() {
        return (Reply::new(550, "/: the served root cannot be renamed"), None);
    }
    match root.lstat(p.relative()) {
        Ok(_) => (Reply::new(350, "File exists, ready for destination name."), Some(Effect::RenameFrom(p))),
        Err(e) => (io_reply(&p, &e), None),
    }
}

fn size(root: &Root, memory: bool, p: &VPath) -> Result<Reply, Reply> {
    if memory && (p.as_bytes() == DEV_ZERO || p.as_bytes() == DEV_NULL) {
        return Ok(Reply::new(213, "0"));
    }
    let st = root.stat(p.relative()).map_err(|e| io_reply(p, &e))?;
    Ok(Reply::new(213, st.st_size.to_string()))
}

/// DELE removes the name itself: a symlink (to a directory too) goes,
/// its target stays; only a real directory needs RMD.
fn dele(root: &Root, p: &VPath) -> Result<Reply, Reply> {
    let st = root.lstat(p.relative()).ok();
    if st.is_some_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Directory) {
        return Err(Reply::new(550, format!("{}: Is a directory (use RMD)", p.display())));
    }
    root.unlink(p.relative()).map(|_| Reply::new(250, "OK.")).map_err(|e| io_reply(p, &e))
}

fn mlst(root: &Root, writable: bool, p: &VPath) -> Result<Reply, Reply> {
    let (st, own, parent) = root.stat_allowed(p.relative()).map_err(|e| io_reply(p, &e))?;
    let rights = Rights { own, parent, writable };
    let line = format!(" {} {}", facts(&st, p.file_name(), rights), p.display());
    Ok(Reply::multi(250, &format!("status of {}", p.display()), vec![line]))
}

fn stat(root: &Root, p: &VPath) -> Result<Reply, Reply> {
    let st = root.stat(p.relative()).map_err(|e| io_reply(p, &e))?;
    let line = String::from_utf8_lossy(&list_line(&st, p.file_name())).trim_end().to_string();
    Ok(Reply::multi(213, &format!("status of {}", p.display()), vec![line]))
}

/// The longest `CKSM` of `/dev/zero` (`--memory-paths`): a few seconds of
/// hashing. It had no bound and cannot be aborted: `CKSM MD5 0 2^64-1
/// /dev/zero` from an anonymous reader held a core (and its session) for
/// good, a review found.
pub const MAX_ZERO_CKSM: u64 = 4 << 30;

/// `CKSM alg offset len path`. A regular file's is read to its end,
/// however large (a sparse TiB takes over an hour), so it stops at an
/// `ABOR` or when the client goes: it went on reading at full speed after
/// both (a defect hunt's find).
fn cksm(
    root: &Root,
    memory: bool,
    (alg, offset, len): (&str, u64, Option<u64>),
    p: &VPath,
    ctl: &Control,
) -> Result<Reply, Reply> {
    // `ctl` (this request's own) counts the bytes read: what the
    // session's 113 markers tell.
    let stop = |n: u64| {
        ctl.add(n.saturating_sub(ctl.bytes()));
        ctl.is_cancelled() || ctl.is_lost()
    };
    let sum = if memory && p.as_bytes() == DEV_ZERO {
        let l = len.ok_or_else(|| Reply::new(501, "CKSM of /dev/zero needs a length"))?;
        if l > MAX_ZERO_CKSM {
            return Err(Reply::new(501, format!("CKSM of /dev/zero: at most {MAX_ZERO_CKSM} bytes")));
        }
        checksum_until(&ZeroSource::in_memory(offset.saturating_add(l)), (alg, offset, Some(l)), &stop)
    } else {
        let f = root.open_read(p.relative()).map_err(|e| io_reply(p, &e))?;
        let src = FileSource::new(f, false).map_err(|e| io_reply(p, &e))?;
        checksum_until(&src, (alg, offset, len), &stop)
    };
    sum.map(|s| Reply::new(213, s)).map_err(|e| cksm_failed(p, &e))
}

/// The reply to a CKSM that failed: 501 for what the command asked
/// (an unknown algorithm, a range past the end), 426 when stopped, 451
/// for the server's disk (every error was a 501, "syntax error in
/// parameters", which a client does not try again).
fn cksm_failed(p: &VPath, e: &io::Error) -> Reply {
    match e.kind() {
        io::ErrorKind::Interrupted => Reply::new(426, format!("{}: CKSM aborted.", p.display())),
        io::ErrorKind::InvalidInput => Reply::new(501, format!("{}: {e}", p.display())),
        _ => Reply::new(451, format!("Error on the server's disk: {}: {e}", p.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cksm_that_could_not_read_is_the_servers_fault() {
        let p = VPath::root().join(b"f").unwrap();
        let code = |kind: io::ErrorKind| cksm_failed(&p, &io::Error::new(kind, "x")).code;
        assert_eq!(code(io::ErrorKind::InvalidInput), 501);
        assert_eq!(code(io::ErrorKind::Interrupted), 426);
        assert_eq!(code(io::ErrorKind::Other), 451);
        assert_eq!(code(io::ErrorKind::UnexpectedEof), 451);
    }

    fn vp(s: &str) -> VPath {
        VPath::root().join(s.as_bytes()).unwrap()
    }

    fn rnto(root: &Root, from: &str, to: &str) -> Reply {
        run(root, false, true, FsOp::Rename { from: vp(from), to: vp(to) }, &Control::new()).0
    }

    /// The reply names what failed: the target when it is the target's
    /// fault, the source only when the source has gone.
    #[test]
    fn a_failed_rnto_names_what_failed() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("full")).unwrap();
        std::fs::write(d.path().join("full/x"), b"x").unwrap();
        std::fs::write(d.path().join("f"), b"f").unwrap();
        let root = Root::open(d.path()).unwrap();
        for (to, why) in [("/nodir/g", "No such file"), ("/full", "Is a directory"), ("/f/g", "Not a directory")] {
            let r = rnto(&root, "/f", to);
            assert_eq!(r.code, 550, "{}", r.text());
            assert!(r.text().starts_with(&format!("{to}: {why}")), "RNTO {to}: {}", r.text());
        }
        let r = rnto(&root, "/gone", "/g");
        assert!(r.code == 550 && r.text().starts_with("/gone: No such file"), "{}", r.text());
        assert_eq!(rnto(&root, "/f", "/full/y").code, 250);
    }
}
