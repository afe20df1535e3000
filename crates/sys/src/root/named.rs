//! The temporary names this process has given files it is receiving
//! ([`super::TempFile`], named from the start where the file system has
//! no `O_TMPFILE`: NFS, some FUSE), so that a server being stopped
//! (SIGTERM, Ctrl-C) removes them before it exits. It exited at once and
//! left each hidden `.NAME.lpPID-TOKEN-N.part` file, holding its space,
//! for ever: no client can list or remove such a name (a defect hunt's
//! find). A process killed outright (SIGKILL, power loss) still leaves
//! them; unnamed files (`O_TMPFILE`) never stay.

use super::*;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, RwLock};

/// Each temporary name (unique in the process) with its directory.
type Named = HashMap<Vec<u8>, Arc<OwnedFd>>;

/// The names made and not yet renamed or removed; `None` before the first
/// and after [`remove_temp_files`].
static NAMED: Mutex<Option<Named>> = Mutex::new(None);

/// Held shared while a name is recorded and made; taken exclusively by
/// [`remove_temp_files`], which never lets it go, so that no name is made
/// after it has removed them.
static MAKING: RwLock<()> = RwLock::new(());

fn named() -> MutexGuard<'static, Option<Named>> {
    NAMED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Make the temporary name `tmp` in `dir` with `make` (a create or a
/// link), recorded until [`forget`] unless `make` fails.
pub(super) fn make_named<T>(dir: &Arc<OwnedFd>, tmp: &[u8], make: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
    let _making = MAKING.read().unwrap_or_else(|e| e.into_inner());
    named().get_or_insert_with(HashMap::new).insert(tmp.to_vec(), dir.clone());
    let r = make();
    if r.is_err() {
        forget(tmp);
    }
    r
}

/// `tmp` no longer names a file being received (renamed, or removed).
pub(super) fn forget(tmp: &[u8]) {
    if let Some(n) = named().as_mut() {
        n.remove(tmp);
    }
}

/// Remove every temporary name this process made that was neither renamed
/// nor removed, and make none from then on (a thread that tries waits for
/// ever): for a process about to exit. The files' data goes once their
/// descriptors close. Returns how many names were removed.
pub fn remove_temp_files() -> usize {
    std::mem::forget(MAKING.write().unwrap_or_else(|e| e.into_inner()));
    let all = named().take().unwrap_or_default();
    let gone = |(tmp, dir): &(Vec<u8>, Arc<OwnedFd>)| {
        rustix::fs::unlinkat(&**dir, OsStr::from_bytes(tmp), AtFlags::empty()).is_ok()
    };
    all.into_iter().filter(|e| gone(e)).count()
}

/// [`remove_temp_files`] on a thread of its own, waited for at most
/// `limit`: on a file system that hangs (FUSE whose daemon stopped, hard
/// NFS) a stopping process waited in the removal, a second Ctrl-C
/// included (a defect hunt's find), and said nothing. `None`: not done
/// within `limit`. (A process with files open there still cannot end
/// before the file system answers: the kernel flushes each at exit and
/// waits for that, whatever the signal.)
pub fn remove_temp_files_within(limit: std::time::Duration) -> Option<usize> {
    let (tx, rx) = std::sync::mpsc::channel();
    // No thread to be had (a process at its limit): removed here, unbounded.
    match std::thread::Builder::new().spawn(move || tx.send(remove_temp_files())) {
        Ok(_) => rx.recv_timeout(limit).ok(),
        Err(_) => Some(remove_temp_files()),
    }
}
