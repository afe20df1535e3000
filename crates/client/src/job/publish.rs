//! Files stored on a server without lightpath's extensions (GCT's, any
//! FTP server) go under a hidden temporary name in their directory and
//! are renamed (`RNFR`, `RNTO`) once complete: such a server writes a STOR
//! straight under the name it is given, so an upload broken off, a client
//! killed or a copy interrupted left a short file posing as the whole one.
//! A lightpath server keeps an upload unnamed until it is whole, so its
//! files are stored under their own names.
//!
//! A batch's renames, and the removal (`DELE`) of what its failed files
//! left, are pipelined together once the batch is done: a round trip per
//! batch, not per file. What a try left is removed before the next try,
//! so a third-party copy retried within the run starts its file over
//! rather than resuming it (its resume would name the temporary file).

use crate::plan::Item;
use crate::retry::Task;
use crate::session::Session;
use crate::{ClientError, Location, Remote};

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
                Location::Remote(r) => Location::Remote(Remote { path: temp_path(&r.path), ..r.clone() }),
                l => l.clone(),
            };
            let item = Item { dst, ..t.item.clone() };
            Task { item, tries: t.tries, resume: t.resume.clone(), at_once: t.at_once }
        })
        .collect()
}

/// `dir/.NAME.lp-<8 hex>.part` beside `path` (`dir/.lp-<16 hex>.part`
/// when that would pass `NAME_MAX`): hidden, and not the name of any
/// file of the copy.
pub(super) fn temp_path(path: &[u8]) -> Vec<u8> {
    let cut = path.iter().rposition(|&b| b == b'/').map_or(0, |i| i + 1);
    let (dir, name) = path.split_at(cut);
    let mut out = dir.to_vec();
    let tag: u64 = rand::random();
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
/// file, naming the temporary file, which is then removed too.
pub(super) async fn publish(d: &mut Session, temps: &[Task], batch: &[Task], results: &mut [Result<u64, ClientError>]) {
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
    let moves: Vec<(Vec<u8>, Vec<u8>)> = done.iter().map(|&i| (path(&temps[i]), path(&batch[i]))).collect();
    keep_meta(d, done.iter().map(|&i| (&temps[i], &batch[i]))).await;
    let renamed = d.rename_many(&moves).await;
    for ((&i, (temp, _)), r) in done.iter().zip(&moves).zip(renamed) {
        if let Err(e) = r {
            results[i] =
                Err(ClientError::Local(format!("stored as {}, not renamed: {e}", String::from_utf8_lossy(temp))));
        }
    }
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
        batch[i].resume.clear();
    }
}

/// Stored files (`(temporary, source)` pairs) get their source's mode
/// and mtime before their names: such a server makes each file 0644 and
/// of the time it was stored, so a private (0600) file became readable
/// to all there (names audit). A remote source's are what its listing
/// said (a third-party copy; none said, none set). A server that refuses
/// is warned of once.
async fn keep_meta<'a>(d: &mut Session, files: impl Iterator<Item = (&'a Task, &'a Task)>) {
    use std::os::unix::fs::MetadataExt;
    let metas: Vec<(Vec<u8>, u32, Option<i64>)> = files
        .filter_map(|(temp, t)| match &t.item.src {
            Location::Local(p) => std::fs::metadata(p).ok().map(|m| (path(temp), m.mode(), Some(m.mtime()))),
            Location::Remote(_) => Some((path(temp), t.item.mode?, Some(t.item.mtime?))),
        })
        .collect();
    let cancel = d.opts.cancel.clone();
    let stopped = || cancel.load(std::sync::atomic::Ordering::Relaxed);
    if metas.is_empty() || stopped() {
        return;
    }
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let refused = d.set_meta_many(&metas).await;
    // After Ctrl-C the commands were cut off, not refused.
    if refused > 0 && !stopped() && !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!(
            "{}: {refused} SITE CHMOD / MFMT commands refused: those files have the mode and mtime the server gave them, not their sources'",
            d.ctl.name
        );
    }
}

fn path(t: &Task) -> Vec<u8> {
    super::remote(&t.item.dst).path.clone()
}
