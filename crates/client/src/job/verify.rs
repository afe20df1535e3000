//! `--verify` of files copied one by one: each file's checksum on both
//! sides, and a copy whose digest differs removed where it was written.

use super::{local, remote, CopyOptions};
use crate::local::LocalSource;
use crate::session::Session;
use crate::{ClientError, Location};
use lightpath_engine::checksum::checksum;

/// Whether `--verify alg` can be done for a copy of `srcs` to `dst`: with
/// a local end this client computes `alg` too, and a local destination
/// must be a file whose checksum can be taken (`/dev/null`: the copy went,
/// then failed its check, exit 1).
pub(super) fn checkable(verify: Option<&str>, srcs: &[Location], dst: &Location) -> Result<(), ClientError> {
    let Some(alg) = verify else { return Ok(()) };
    if srcs.iter().chain([dst]).any(|l| matches!(l, Location::Local(_))) {
        computed_here(alg)?;
    }
    match dst {
        Location::Local(p) if std::fs::metadata(p).is_ok_and(|m| !m.is_file() && !m.is_dir()) => {
            Err(ClientError::Usage(format!(
                "--verify {alg}: {} is not a regular file, whose checksum could be taken; nothing copied",
                p.display()
            )))
        }
        _ => Ok(()),
    }
}

/// `--verify alg` with a local end: this client must compute `alg` too.
fn computed_here(alg: &str) -> Result<(), ClientError> {
    use lightpath_engine::checksum::{Checksum, ALGORITHMS};
    match Checksum::new(alg) {
        None => Err(ClientError::Usage(format!(
            "--verify {alg}: not a checksum this client computes ({})",
            ALGORITHMS.join(", ")
        ))),
        Some(_) => Ok(()),
    }
}

/// Which end of a two-party copy was written: the one a file that fails
/// `--verify` is removed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    Local,
    Remote,
}

/// With `--verify`, compare each copied file's checksum on both sides;
/// `pairs` yields (remote, local) locations in batch order, `written` says
/// which of them is the destination. A copy whose digest differs is
/// removed there ([`discard_copy`]).
pub(super) async fn verify_batch<'a>(
    s: &mut Session,
    opts: &CopyOptions,
    pairs: impl Iterator<Item = (&'a Location, &'a Location)>,
    written: Side,
    results: &mut [Result<u64, ClientError>],
) {
    let Some(alg) = &opts.verify else { return };
    for ((r_loc, l_loc), r) in pairs.zip(results.iter_mut()) {
        if r.is_err() {
            continue;
        }
        let (rpath, lpath) = (&remote(r_loc).path, local(l_loc));
        let dst = if written == Side::Local { l_loc } else { r_loc };
        *r = match verify_local(s, alg, (rpath, lpath), written == Side::Local).await {
            Ok(()) => continue,
            Err(e) if opts.part.is_some() => Err(e), // a window of a file: kept
            // Where written here, it has its name: not a temporary one.
            Err(e) if written == Side::Local => Err(kept_unverified(alg, discard_copy(e, dst, Some(s)).await, dst)),
            Err(e) => Err(discard_copy(e, dst, Some(s)).await),
        };
    }
}

/// Compare the server's file with the local one, the source's digest
/// first (the local file is the copy of a download).
async fn verify_local(
    s: &mut Session,
    alg: &str,
    (rpath, lpath): (&[u8], &std::path::Path),
    download: bool,
) -> Result<(), ClientError> {
    let theirs = s.checksum(alg, rpath).await?;
    let (a, p) = (alg.to_string(), lpath.to_path_buf());
    let ours = tokio::task::spawn_blocking(move || local_digest(&a, &p))
        .await
        .map_err(|e| ClientError::Local(e.to_string()))??;
    match download {
        true => compare_digests(alg, Ok(theirs), Ok(ours)),
        false => compare_digests(alg, Ok(ours), Ok(theirs)),
    }
}

/// `e`, unless a mismatch dealt with ([`discard_copy`]): a check that
/// could not be made of the copy at `dst`, which stays under its name.
pub(crate) fn kept_unverified(alg: &str, e: ClientError, dst: &Location) -> ClientError {
    match e {
        e @ ClientError::VerifyFailed { .. } => e,
        // A lost connection is the session's: the file goes again, and
        // the session is opened anew (a review's find: wrapped, neither).
        e if e.is_transient() => e,
        e => ClientError::NotVerified {
            alg: alg.to_string(),
            why: e.to_string(),
            outcome: format!("the copy {} is kept, unverified", crate::plan::describe(dst)),
        },
    }
}

/// A checksum mismatch `e`, saying what became of the copy: `outcome`.
pub(crate) fn mismatch(e: ClientError, outcome: String) -> ClientError {
    match e {
        ClientError::Checksum { alg, local, remote } => ClientError::VerifyFailed { alg, local, remote, outcome },
        other => other,
    }
}

/// A copy at `dst` whose digest differs from its source's (`e`, a
/// checksum mismatch): removed, here or on the destination server `d`,
/// so that it does not pose as a good copy. Other errors leave it.
pub(crate) async fn discard_copy(e: ClientError, dst: &Location, d: Option<&mut Session>) -> ClientError {
    match (&e, dst, d) {
        (ClientError::Checksum { .. }, Location::Local(p), _) => discard_local(e, p).await,
        (ClientError::Checksum { .. }, Location::Remote(r), Some(d)) => discard_remote(e, d, &r.path).await,
        _ => e,
    }
}

/// A download that failed `--verify`: removed from `p`, so that it does
/// not pose as a good copy (only a regular file: never `/dev/null`).
async fn discard_local(e: ClientError, p: &std::path::Path) -> ClientError {
    let path = p.to_path_buf();
    discard_local_by(e, p, move || match std::fs::symlink_metadata(&path) {
        Ok(m) if m.is_file() => std::fs::remove_file(&path).map(|()| true),
        Ok(_) => Ok(false),
        Err(e) => Err(e),
    })
    .await
}

/// [`discard_local`] with `remove` (on a blocking thread) saying whether
/// it removed the regular file at `p` or left something else there.
pub(crate) async fn discard_local_by(
    e: ClientError,
    p: &std::path::Path,
    remove: impl FnOnce() -> std::io::Result<bool> + Send + 'static,
) -> ClientError {
    let removed =
        tokio::task::spawn_blocking(remove).await.map_err(|e| std::io::Error::other(e.to_string())).and_then(|r| r);
    let what = match removed {
        Ok(true) => format!("the copy {} was removed", p.display()),
        Ok(false) => format!("{} is not a regular file: left alone", p.display()),
        Err(err) => format!("the copy {} could not be removed: {err}", p.display()),
    };
    mismatch(e, what)
}

/// An upload (or third-party copy) that failed `--verify`: deleted on
/// the destination server `d` (DELE), or the refusal said.
async fn discard_remote(e: ClientError, d: &mut Session, path: &[u8]) -> ClientError {
    let name = String::from_utf8_lossy(path).into_owned();
    let what = match d.delete(path).await {
        Ok(()) => format!("the copy {name} was removed from {} (DELE)", d.ctl.name),
        Err(err) => format!("the copy {name} could not be removed: {err}"),
    };
    mismatch(e, what)
}

/// A file's check: both digests known and equal (`src` is reported as the
/// source's, `dst` as the copy's).
pub(crate) fn compare_digests(
    alg: &str,
    src: Result<String, ClientError>,
    dst: Result<String, ClientError>,
) -> Result<(), ClientError> {
    let (a, b) = (src?, dst?);
    if a != b {
        return Err(ClientError::Checksum { alg: alg.into(), local: a, remote: b });
    }
    Ok(())
}

/// The `alg` digest of the local file at `p` (blocking: reads it all).
pub(crate) fn local_digest(alg: &str, p: &std::path::Path) -> Result<String, ClientError> {
    let src = LocalSource::File(p.to_path_buf()).open()?;
    checksum(src.as_ref(), alg, 0, None).map_err(|e| ClientError::Local(format!("{}: {e}", p.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A lost control connection during the check goes through as it is:
    /// transient, the file goes again on a new session. Wrapped as "could
    /// not check it", it was final and the dead session was used on (a
    /// review's find). A refused CKSM is wrapped.
    #[test]
    fn only_a_final_error_makes_a_copy_unverified() {
        let dst = Location::Local("/d/f".into());
        let lost = ClientError::Control("s".into(), "control connection lost".into());
        assert!(matches!(kept_unverified("MD5", lost, &dst), ClientError::Control(..)));
        let refused = ClientError::Refused {
            server: "s".into(),
            cmd: "CKSM MD5 0 -1 /f".into(),
            reply: "Command not supported.".into(),
            code: 500,
            here: crate::DataEnd::Fine,
        };
        let e = kept_unverified("MD5", refused, &dst);
        assert!(matches!(&e, ClientError::NotVerified { .. }) && e.to_string().contains("/d/f is kept"), "{e}");
    }
}
