//! Dropping root after the control port is bound (`serve --run-as USER`),
//! and what the process inherited: its open files limit, an ignored SIGHUP.

use std::ffi::CString;
use std::io;

/// The uid/gid of a user from the password database.
pub fn lookup_user(name: &str) -> io::Result<(u32, u32)> {
    let c = CString::new(name).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "bad user name"))?;
    // SAFETY: getpwnam returns NULL or a pointer to a static passwd record
    // valid until the next getpw* call; we copy the two integers out at once,
    // before any other thread exists (this runs before the runtime starts).
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("no user {name}")));
    }
    // SAFETY: pw is non-null and points to a valid passwd record (see above).
    Ok(unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}

/// Become `uid`/`gid` for good (supplementary groups cleared). Call before
/// starting threads.
pub fn drop_to(uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY: plain syscalls with integer arguments; glibc applies them to
    // every thread of the process. Order matters: groups and gid while we
    // still have the privilege, uid last.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(gid) != 0 || libc::setuid(uid) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::setuid(0) == 0 {
            return Err(io::Error::other("could regain root after dropping privileges"));
        }
    }
    Ok(())
}

/// Effective uid of this process.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// The soft limit on open files (`None`: unlimited), what this process
/// may hold at once.
pub fn open_files_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Raise the soft limit on open files to the hard limit (a server holds a
/// descriptor per control connection, data connection and parked
/// connection opened ahead; the usual soft limit is 1024). Returns the
/// soft limit before and after; `None` stands for unlimited.
pub fn raise_open_files_limit() -> io::Result<(Option<u64>, Option<u64>)> {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let old = getrlimit(Resource::Nofile);
    if old.current == old.maximum {
        return Ok((old.current, old.current));
    }
    setrlimit(Resource::Nofile, Rlimit { current: old.maximum, maximum: old.maximum })?;
    Ok((old.current, old.maximum))
}

/// Whether SIGHUP is ignored, as `nohup` leaves it: a program run so must
/// not take it up, or the hang-up `nohup` guards against stops it (`cp`
/// stops on SIGHUP otherwise; a review's find: under `nohup` it did).
pub fn hangup_ignored() -> bool {
    // SAFETY: `sigaction` with a null new action only reads the current
    // disposition of SIGHUP into `old`, a zeroed struct of its type that
    // lives here; no handler is changed.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGHUP, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}
