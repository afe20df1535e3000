//! Dropping root after the control port is bound (`serve --run-as USER`).

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

/// This process's effective ids and groups, for a quick guess from a
/// file's owner and permission bits at whether it may read the file
/// ([`Creds::may_read`]).
#[derive(Debug, Clone)]
pub struct Creds {
    uid: u32,
    gid: u32,
    groups: Vec<u32>,
}

impl Creds {
    /// The calling process's (supplementary groups that cannot be read
    /// count as none).
    pub fn current() -> Creds {
        let groups = rustix::process::getgroups().unwrap_or_default();
        Creds {
            uid: rustix::process::geteuid().as_raw(),
            gid: rustix::process::getegid().as_raw(),
            groups: groups.into_iter().map(|g| g.as_raw()).collect(),
        }
    }

    /// Creds of the given ids (tests).
    pub fn new(uid: u32, gid: u32, groups: Vec<u32>) -> Creds {
        Creds { uid, gid, groups }
    }

    /// Whether the permission bits `mode` of a file owned by `uid`:`gid`
    /// let this process read it: root always, the owner by the owner's
    /// bit alone (as the kernel checks), a member of the group by the
    /// group's, anyone else by the others'. ACLs and capabilities other
    /// than root's are not seen: a `false` is worth confirming by opening
    /// the file, a `true` may still fail.
    pub fn may_read(&self, uid: u32, gid: u32, mode: u32) -> bool {
        if self.uid == 0 {
            true
        } else if uid == self.uid {
            mode & 0o400 != 0
        } else if gid == self.gid || self.groups.contains(&gid) {
            mode & 0o040 != 0
        } else {
            mode & 0o004 != 0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Creds;

    #[test]
    fn read_permission_by_class() {
        let me = Creds::new(1000, 100, vec![20]);
        assert!(me.may_read(1000, 5, 0o400));
        assert!(!me.may_read(1000, 100, 0o044), "the owner's bit alone counts for the owner");
        assert!(me.may_read(1, 100, 0o040));
        assert!(me.may_read(1, 20, 0o040), "a supplementary group");
        assert!(!me.may_read(1, 20, 0o404), "the group's bit alone counts for a member");
        assert!(me.may_read(1, 2, 0o004));
        assert!(!me.may_read(1, 2, 0o770));
        assert!(Creds::new(0, 0, vec![]).may_read(1, 2, 0o000), "root");
    }
}
