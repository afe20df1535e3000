//! Files stored on a server without lightpath's extensions (GCT's, any
//! FTP server) go under a hidden temporary name in their directory and
//! are renamed (`RNFR`, `RNTO`) once complete: such a server writes a STOR
//! straight under the name it is given, so an upload broken off, a client
//! killed or a copy interrupted left a short file posing as the whole one.
//! A lightpath server keeps an upload unnamed until it is whole, so its
//! files are stored under their own names.
//!
//! A batch's files are published once the batch is done, in two
//! pipelined flights (a round trip each per batch, not per file): what
//! each name holds now (`MLST`) with the mtimes (`MFMT`), then the modes
//! (`SITE CHMOD`) with the renames; what its failed files left is removed
//! (`DELE`) in a third, only when some failed. What a try left is
//! removed before the next try, so a third-party copy retried within the
//! run starts its file over rather than resuming it (its resume would
//! name the temporary file).

use crate::plan::Item;
use crate::retry::Task;
use crate::session::fs::{chmod_cmd, path_cmd, rename_cmds, Facts};
use crate::session::Session;
use crate::{ClientError, Location, Remote};
use lightpath_proto::Reply;

/// Linux's longest name (`NAME_MAX`).
const NAME_MAX: usize = 255;

/// Whether files stored on `d` go under temporary names: whole files to
/// a server that is not lightpath.
pub(super) fn wanted(d: &Session, part: Option<(u64, u64)>) -> bool {
    !d.is_lightpath() && part.is_none()
}

/// The tasks of `batch` with each destination under its temporary name.
pub(super) fn temp_tasks(batch: &[Task]) -> Vec<Task> {
    batch
        .iter()
        .map(|t| {
            let dst = match &t.item.dst {
                Location::Remote(r) => Location::Remote(Remote { path: temp_path(&r.path, t.tag), ..r.clone() }),
                l => l.clone(),
            };
            let item = Item { dst, ..t.item.clone() };
            Task { item, tries: t.tries, resume: t.resume.clone(), at_once: t.at_once, tag: t.tag }
        })
        .collect()
}

/// `dir/.NAME.lp-<8 hex>.part` beside `path` (`dir/.lp-<16 hex>.part`
/// when that would pass `NAME_MAX`), from the file's random `tag`:
/// hidden, and not the name of any file of the copy.
pub(super) fn temp_path(path: &[u8], tag: u64) -> Vec<u8> {
    let cut = path.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    let (dir, name) = path.split_at(cut);
    let mut out = dir.to_vec();
    if name.len() + ".lp-12345678.part".len() < NAME_MAX {
        out.push(b'.');
        out.extend_from_slice(name);
        out.extend_from_slice(format!(".lp-{:08x}.part", tag as u32).as_bytes());
    } else {
        out.extend_from_slice(format!(".lp-{tag:016x}.part").as_bytes());
    }
    out
}

/// Give each file of `batch` stored whole under its temporary name (in
/// `temps`) its own name; remove what the others left (and forget what a
/// retry would resume from: it was there). A refused rename fails its
/// file, naming the temporary file, which is then removed too. So does a
/// file there that this login could not have written in place
/// ([`decide`]); `tree`: the batch is a tree's.
pub(super) async fn publish(
    d: &mut Session,
    (temps, batch): (&[Task], &[Task]),
    results: &mut [Result<u64, ClientError>],
    tree: bool,
) {
    // A transfer the batch gave up (its source failed a file) left the
    // session out of step, and GCT closes one after an ABOR: the renames
    // went on a dead connection, failed, and the files were removed (a
    // third-party audit lost readable files beside unreadable ones). One
    // that cannot be reopened fails them below.
    // After Ctrl-C a session whose transfer was aborted is not trusted
    // for the renames and removals: GCT left such renames unanswered
    // until the grace period ended the process, and the files they named
    // stayed under temporary names (a defect hunt's find).
    if d.opts.cancel.load(std::sync::atomic::Ordering::Relaxed) {
        d.lost();
    }
    let _ = d.reopen_if_out_of_step().await;
    let done: Vec<usize> = (0..results.len()).filter(|&i| results[i].is_ok()).collect();
    let pairs: Vec<(&Task, &Task)> = done.iter().map(|&i| (&temps[i], &batch[i])).collect();
    let modes = look_and_stamp(d, &pairs, tree).await;
    let mut moves = Vec::new();
    for (&i, m) in done.iter().zip(modes) {
        match m {
            Ok(mode) => moves.push((i, path(&temps[i]), path(&batch[i]), mode)),
            Err(e) => results[i] = Err(e),
        }
    }
    for (i, r) in moves.iter().map(|m| m.0).zip(chmod_and_rename(d, &moves).await) {
        if let Err(e) = r {
            let temp = String::from_utf8_lossy(&path(&temps[i])).into_owned();
            results[i] = Err(ClientError::Local(format!("stored as {temp}, not renamed: {e}")));
        }
    }
    remove_left(d, (temps, batch), results).await;
}

/// Remove what the failed files of a batch left under temporary names.
async fn remove_left(d: &mut Session, (temps, batch): (&[Task], &[Task]), results: &[Result<u64, ClientError>]) {
    // A copy that failed `--verify` was removed already (or its DELE's
    // refusal reported): `job::discard_copy`.
    let left_behind =
        |r: &Result<u64, ClientError>| matches!(r, Err(e) if !matches!(e, ClientError::VerifyFailed { .. }));
    let failed: Vec<usize> = (0..results.len()).filter(|&i| left_behind(&results[i])).collect();
    if failed.is_empty() {
        return;
    }
    let left: Vec<Vec<u8>> = failed.iter().map(|&i| path(&temps[i])).collect();
    let mut removed = d.delete_many(&left).await;
    if removed.iter().any(|r| matches!(r, Err(ClientError::Control(..)))) {
        // GCT closes a session whose upload was aborted (Ctrl-C): a new
        // one removes what it left.
        d.lost();
        if d.reopen_if_out_of_step().await.is_ok() {
            removed = d.delete_many(&left).await;
        }
    }
    for ((&i, p), r) in failed.iter().zip(&left).zip(removed) {
        // Nothing there (a STOR refused outright) is fine.
        tracing::debug!("removing {}: {r:?}", String::from_utf8_lossy(p));
        if let Err(e @ ClientError::Control(..)) = r {
            // Replaced by the file's next try, if any (the same name).
            tracing::warn!("{} may be left on the server: not removed ({e})", String::from_utf8_lossy(p));
        }
        batch[i].resume.clear();
    }
}

/// A stored file's source's mode and mtime: a local source's, or what a
/// remote source's listing said (a third-party copy; none said, none set).
fn source_meta(t: &Task) -> (Option<u32>, Option<i64>) {
    use std::os::unix::fs::MetadataExt;
    match &t.item.src {
        Location::Local(p) => std::fs::metadata(p).ok().map_or((None, None), |m| (Some(m.mode()), Some(m.mtime()))),
        Location::Remote(_) => (t.item.mode, t.item.mode.and(t.item.mtime)),
    }
}

/// The first of two pipelined flights that publish `(temporary, file)`
/// pairs: `MLST` of each destination (what its name holds now), for a
/// tree also of the first temporary file (whose this login's files
/// are), and `MFMT` of each temporary file to its source's mtime. Returns
/// the mode each is to get, or why it is not to replace what is there
/// ([`decide`]). A session lost on the way is opened again and the
/// flight sent once more: with no answers every name looked free.
async fn look_and_stamp(
    d: &mut Session,
    pairs: &[(&Task, &Task)],
    tree: bool,
) -> Vec<Result<Option<u32>, ClientError>> {
    let Some(first) = pairs.first() else { return Vec::new() };
    let metas: Vec<_> = pairs.iter().map(|(_, t)| source_meta(t)).collect();
    let mut cmds: Vec<Vec<u8>> = pairs.iter().map(|(_, t)| path_cmd("MLST ", &path(t))).collect();
    cmds.extend(tree.then(|| path_cmd("MLST ", &path(first.0))));
    let looks = cmds.len();
    let stamps = pairs.iter().zip(&metas).filter_map(|((temp, _), m)| d.mfmt_cmd(&path(temp), m.1?));
    let stamps: Vec<Vec<u8>> = stamps.collect();
    cmds.extend(stamps);
    let mut replies = d.flight(cmds.clone()).await;
    if replies.iter().any(|r| matches!(r, Err(ClientError::Control(..)))) {
        d.lost();
        if let Err(e) = d.reopen_if_out_of_step().await {
            return pairs.iter().map(|_| Err(e.clone())).collect();
        }
        replies = d.flight(cmds).await;
    }
    let facts = |r: &Result<Reply, ClientError>| {
        r.as_ref().ok().filter(|r| r.is_ok()).and_then(|r| r.lines.iter().find_map(|l| Facts::of_line(l)))
    };
    let ours = if tree { replies.get(pairs.len()).and_then(facts).and_then(|f| f.owner) } else { None };
    warn_refused(d, refused(&replies[looks..]));
    let unknown = unknown_but_there(d, pairs, &replies[..pairs.len()]).await;
    let there = replies.iter().take(pairs.len()).map(|r| match r {
        Err(e @ ClientError::Control(..)) => Err(e.clone()),
        r => Ok(facts(r)),
    });
    let decided = there.zip(metas).map(|(f, m)| decide(f?.as_ref(), m.0, tree, ours.as_deref()));
    decided.zip(unknown).map(|(r, unknown)| if unknown { Err(not_known()) } else { r }).collect()
}

/// For each file, whether its `MLST` was refused (not `550`: nothing
/// there), and `SIZE` (asked then, in one more flight) does not say
/// `550` either: who may write a file there is unknown, and none is
/// replaced. Taken for
/// "nothing there", a file the login could not write was replaced (a
/// defect hunt's find, GCT with `-disable-command-list MLST`).
async fn unknown_but_there(
    d: &mut Session,
    pairs: &[(&Task, &Task)],
    looks: &[Result<Reply, ClientError>],
) -> Vec<bool> {
    let refused = |r: &Result<Reply, ClientError>| r.as_ref().is_ok_and(|r| !r.is_ok() && r.code != 550);
    let asked: Vec<usize> = looks.iter().enumerate().filter(|(_, r)| refused(r)).map(|(i, _)| i).collect();
    let mut unknown = vec![false; pairs.len()];
    if asked.is_empty() {
        return unknown;
    }
    let cmds = asked.iter().map(|&i| path_cmd("SIZE ", &path(pairs[i].1))).collect();
    for (i, r) in asked.into_iter().zip(d.flight(cmds).await) {
        // Only 550 says nothing is there; a refused SIZE, or a reply
        // lost with the session, is as good as a file there (a review's
        // find: MLST and SIZE both refused replaced root's file).
        unknown[i] = r.map_or(true, |r| r.code != 550);
    }
    unknown
}

fn not_known() -> ClientError {
    ClientError::Local(
        "not stored: the server refused MLST, and SIZE did not say that no file is there, so whether this login may replace one is unknown; nothing changed"
            .into(),
    )
}

/// How many of `replies` the server refused (not those never answered).
fn refused(replies: &[Result<Reply, ClientError>]) -> usize {
    replies.iter().filter(|r| r.as_ref().is_ok_and(|r| !r.is_ok())).count()
}

/// The mode for a stored file whose name holds `there` (as MLST gave
/// it): its source's (`source`), or a replaced file's own for a single
/// file. A file this login could not have written in place (no `w` in
/// its `Perm`) is not replaced, unless a tree's file replaces one of this
/// login's own (a tree's 0444 files, which its last copy made so), as a
/// lightpath server decides too. GCT renamed over a read-only file, or
/// another user's, in a directory the login could write, and made a
/// private (0600) file it replaced 0644 (a defect hunt's find).
fn decide(
    there: Option<&Facts>,
    source: Option<u32>,
    tree: bool,
    ours: Option<&str>,
) -> Result<Option<u32>, ClientError> {
    let Some(f) = there.filter(|f| !f.is_dir) else { return Ok(source) };
    let writable = f.perm.as_deref().is_none_or(|p| p.contains('w'));
    let own = ours.is_some() && f.owner.as_deref() == ours;
    let replaceable = writable || (tree && own);
    if !replaceable {
        let whose = f.owner.as_deref().map(|o| format!(", owner {o}")).unwrap_or_default();
        let perm = f.perm.as_deref().unwrap_or_default();
        return Err(ClientError::Local(format!(
            "not replaced: this login may not write the file there (Perm={perm}{whose}); nothing changed"
        )));
    }
    Ok(if tree { source } else { f.meta.map(|m| m.mode).or(source) })
}

/// A stored file to publish: its index in the batch, its temporary name,
/// its own name, and the mode it is to get.
type Move = (usize, Vec<u8>, Vec<u8>, Option<u32>);

/// The second flight: `SITE CHMOD` of each temporary file (where a mode
/// is known), then `RNFR` and `RNTO` to its own name. One result a file.
async fn chmod_and_rename(d: &mut Session, moves: &[Move]) -> Vec<Result<(), ClientError>> {
    // Even after Ctrl-C: a file renamed without its mode is 0644 there.
    let mut cmds: Vec<Vec<u8>> = moves.iter().filter_map(|(_, temp, _, m)| Some(chmod_cmd(temp, (*m)?))).collect();
    let n = cmds.len();
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = moves.iter().map(|(_, temp, dst, _)| (temp.clone(), dst.clone())).collect();
    cmds.extend(rename_cmds(&pairs));
    let replies = d.flight(cmds).await;
    warn_refused(d, refused(&replies[..n]));
    d.renamed(&replies[n..], &pairs)
}

/// Such a server makes each file 0644 and of the time it was stored, so
/// a file that keeps neither is warned of, once. After Ctrl-C the
/// commands were cut off, not refused.
fn warn_refused(d: &Session, refused: usize) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let stopped = d.opts.cancel.load(std::sync::atomic::Ordering::Relaxed);
    if refused > 0 && !stopped && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            "{}: SITE CHMOD / MFMT refused: files stored there keep the mode and mtime the server gave them, not their sources'",
            d.ctl.name
        );
    }
}

fn path(t: &Task) -> Vec<u8> {
    super::remote(&t.item.dst).path.clone()
}
