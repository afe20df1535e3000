//! A remote tree listed in one command: `MLSR`, GCT's recursive MLSD.
//!
//! Listing a tree directory by directory costs each directory a PASV, a
//! data connection and its replies, two to three round trips: the git-like
//! tree's 948 directories took 18 s over a 95 ms path even with 16 control
//! sessions listing at once, three times as long as its 480 MB then took.
//! Where the server offers `MLSR`, one listing names everything below the
//! root (`a/b/f`). It shows symlinks as themselves (`Type=slink`), so the
//! ones a copy needs to follow are asked about with `MLST`, pipelined.
//!
//! GCT's MLSR is not to be trusted blindly. It takes a directory's first
//! entry for the directory itself when its name sorts before `.` (begins
//! with a space, a tab, `!`, `-`...): a directory so named is left out with
//! all it holds, its facts shown under its parent's name (or as a second
//! `.`); a file so named takes its parent's line. A tree whose root is a
//! symlink is listed as that one link, and a directory whose path passes
//! PATH_MAX is left out without a word. So the listing is checked: one
//! line for the root, no name twice, every entry inside a listed
//! directory, no directory path within a name of PATH_MAX, and the
//! `Unique` fact of the root and of every directory as MLST (pipelined)
//! gives it. A listing that fails a check, a refused MLSR or one that fails
//! part way (a directory it cannot read) is listed directory by directory
//! with MLSD after all. Only an unsafe name (`..`, absolute) refuses the
//! tree, as it does from MLSD.

use super::{join, Item, Plan, Walk};
use crate::session::fs::{entry_of, fact, is_other, listing_lines};
use crate::session::{Entry, Facts, Session};
use crate::{ClientError, Location, Remote};
use lightpath_proto::manifest;
use std::collections::HashMap;

/// The tree at `root` from one `MLSR`, or `None` when the server would not
/// list it so, or listed it wrongly (the caller walks it with MLSD). An
/// unsafe name, a tree past the walk's bounds or a lost control connection
/// is an error.
pub(super) async fn walk(
    s: &mut Session,
    (root, links_as_files): (&Remote, bool),
    target: &Location,
    extra: usize,
) -> Result<Option<Plan>, ClientError> {
    let data = match s.list_tree(&root.path).await {
        Ok(d) => d,
        Err(e @ ClientError::Control(..)) => return Err(e),
        Err(e) => return Ok(unusable(root, &e.to_string())),
    };
    let listed = Listed::parse(&data);
    listed.entries.iter().try_for_each(|e| name_ok(root, &e.name))?;
    if let Err(why) = listed.consistent(root.path.len()) {
        return Ok(unusable(root, &why));
    }
    if let Err(why) = verify_dirs(s, root, &listed, extra).await? {
        return Ok(unusable(root, &why));
    }
    for (name, kind) in &listed.others {
        let at = root.with_path(join_remote(root, name));
        tracing::warn!("skipping {}: not a file, directory or symlink ({kind})", at.display());
    }
    let mut w = Walk::new(root, target, links_as_files);
    let links = add_tree(&mut w, root, target, listed.entries)?;
    resolve_links(s, &mut w, links).await?;
    tracing::info!(dirs = w.plan.dirs.len(), files = w.plan.files.len(), "listed the remote tree with one MLSR");
    Ok(Some(w.plan))
}

fn unusable(root: &Remote, why: &str) -> Option<Plan> {
    tracing::info!("{}: MLSR no use ({why}); listing the tree directory by directory", root.display());
    None
}

/// An MLSR listing: its entries in name order (parents first: a path
/// sorts after every path it has as a prefix), and the `Unique` facts of
/// its root line and of its directories.
struct Listed {
    entries: Vec<Entry>,
    roots: Vec<Option<String>>,
    dirs: HashMap<Vec<u8>, Option<String>>,
    /// Entries neither files, directories nor symlinks, with their type.
    others: Vec<(Vec<u8>, String)>,
}

impl Listed {
    fn parse(data: &[u8]) -> Listed {
        let (mut entries, mut roots, mut dirs, mut others) = (Vec::new(), Vec::new(), HashMap::new(), Vec::new());
        for (facts, name) in listing_lines(data) {
            let unique = fact(&facts, "unique").map(String::from);
            match fact(&facts, "type") {
                Some("cdir") => roots.push(unique),
                _ if name == b"." => roots.push(unique),
                Some("dir") if fact(&facts, "unix.slink").is_none() => {
                    dirs.insert(name.to_vec(), unique);
                }
                Some(kind) if is_other(kind) => others.push((name.to_vec(), kind.to_string())),
                _ => {}
            }
            entries.extend(entry_of(&facts, name, true));
        }
        entries.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        Listed { entries, roots, dirs, others }
    }

    /// One root line, no name twice, every entry inside a listed directory,
    /// no directory whose entries' paths may pass PATH_MAX (GCT leaves such
    /// a directory out silently; MLSD fails on it aloud). `root_len`: the
    /// bytes of the root's path, above the names.
    fn consistent(&self, root_len: usize) -> Result<(), String> {
        if self.roots.len() != 1 {
            return Err(format!("{} lines for the tree's own directory", self.roots.len()));
        }
        if let Some(w) = self.entries.windows(2).find(|w| w[0].name == w[1].name) {
            return Err(format!("\"{}\" listed twice", manifest::show(&w[0].name)));
        }
        if let Some(d) = self.dirs.keys().find(|d| root_len + 1 + d.len() + 1 + manifest::MAX_NAME >= PATH_MAX) {
            return Err(format!("\"{}\" is too deep for its entries to be listed", manifest::show(d)));
        }
        let outside = |e: &&Entry| manifest::parent(&e.name).is_some_and(|p| !self.dirs.contains_key(p));
        match self.entries.iter().find(outside) {
            Some(e) => Err(format!("\"{}\" is inside no listed directory", manifest::show(&e.name))),
            None => Ok(()),
        }
    }
}

/// Linux's longest path, with its NUL: GCT lists nothing longer.
const PATH_MAX: usize = 4096;

/// A name in a recursive listing is a relative path with no `.`, `..` or
/// empty part: otherwise it would place the copy outside the destination
/// (`../x`, `/etc/x`). Such a listing is refused whole.
fn name_ok(root: &Remote, name: &[u8]) -> Result<(), ClientError> {
    manifest::check_path(name).map_err(|why| {
        ClientError::Local(format!(
            "{}: the server listed the unsafe name \"{}\" ({why}); refusing to copy this tree",
            root.display(),
            manifest::show(name)
        ))
    })
}

/// Whether MLST (pipelined, over up to `extra` more sessions) gives the
/// root and every listed directory the `Unique` the listing gave it: where
/// GCT left a directory out, its facts stand under its parent's name.
/// `Err(why)` when one differs or is missing.
async fn verify_dirs(
    s: &mut Session,
    root: &Remote,
    listed: &Listed,
    extra: usize,
) -> Result<Result<(), String>, ClientError> {
    let mut names: Vec<&Vec<u8>> = listed.dirs.keys().collect();
    names.sort_unstable();
    let paths: Vec<Vec<u8>> =
        std::iter::once(root.path.clone()).chain(names.iter().map(|n| join_remote(root, n))).collect();
    let want = std::iter::once(&listed.roots[0]).chain(names.iter().map(|n| &listed.dirs[*n]));
    for ((path, want), got) in paths.iter().zip(want).zip(stat_spread(s, &paths, extra).await) {
        let got = match got {
            Ok(f) => f.filter(|f| f.is_dir).and_then(|f| f.unique),
            Err(e @ ClientError::Control(..)) => return Err(e),
            Err(_) => None,
        };
        if want.is_none() || *want != got {
            let path = manifest::show(path);
            return Ok(Err(format!("{path}: listed as {want:?}, MLST says {got:?}")));
        }
    }
    Ok(Ok(()))
}

/// Fewest MLSTs worth another session: GCT answers about a thousand a
/// second in one session (the git-like tree's 948 directories: 0.96 s),
/// and a session's login costs a round trip or two.
const MLST_PER_SESSION: usize = 128;

/// [`Session::stat_many`] of `paths`, in order, split over `s` and up to
/// `extra` more sessions at once. A part whose session could not log in
/// is asked on `s`.
async fn stat_spread(s: &mut Session, paths: &[Vec<u8>], extra: usize) -> Vec<Result<Option<Facts>, ClientError>> {
    let helpers = extra.min(paths.len() / MLST_PER_SESSION);
    if helpers == 0 {
        return s.stat_many(paths).await;
    }
    let parts: Vec<&[Vec<u8>]> = paths.chunks(paths.len().div_ceil(helpers + 1)).collect();
    let (mine, theirs) = parts.split_first().map_or((&[][..], &[][..]), |(m, t)| (*m, t));
    let tasks: Vec<_> = theirs
        .iter()
        .map(|part| {
            let (remote, opts, part) = (s.remote.clone(), s.opts.clone(), part.to_vec());
            tokio::spawn(async move {
                let mut h = Session::open(&remote, opts).await.ok()?;
                let got = h.stat_many(&part).await;
                h.quit().await;
                Some(got)
            })
        })
        .collect();
    let mut out = s.stat_many(mine).await;
    for (t, part) in tasks.into_iter().zip(theirs) {
        match t.await.ok().flatten() {
            Some(got) => out.extend(got),
            None => out.extend(s.stat_many(part).await),
        }
    }
    out
}

fn join_remote(root: &Remote, name: &[u8]) -> Vec<u8> {
    match join(&Location::Remote(root.clone()), name) {
        Location::Remote(r) => r.path,
        Location::Local(_) => unreachable!("a remote path joined stays remote"),
    }
}

/// Plan the checked entries of an MLSR of `root`: directories and files.
/// Returns the symlinks to ask about (when the walk copies links to files
/// as files).
fn add_tree(
    w: &mut Walk,
    root: &Remote,
    target: &Location,
    entries: Vec<Entry>,
) -> Result<Vec<(Remote, Location)>, ClientError> {
    let mut links = Vec::new();
    for e in entries {
        let Location::Remote(sr) = join(&Location::Remote(root.clone()), &e.name) else { continue };
        let dst = join(target, &e.name);
        w.admit(&sr, &dst)?;
        if e.unresolved {
            if w.links_as_files {
                links.push((sr, dst));
            }
        } else if e.is_dir && e.link {
            tracing::warn!("skipping {}: a symlink to a directory", sr.display());
        } else if e.link && !w.links_as_files {
            continue;
        } else if e.is_dir {
            w.plan.add_dir(dst, e.mode.map(|m| (m, e.mtime)));
        } else {
            w.plan.files.push(Item::listed(sr, dst, &e));
        }
    }
    Ok(links)
}

/// Ask the server what each symlink leads to: one that leads to a file is
/// copied as that file; to a directory, skipped (it could loop or lead out
/// of the tree); to nothing, left out, as MLSD leaves it out.
async fn resolve_links(s: &mut Session, w: &mut Walk, links: Vec<(Remote, Location)>) -> Result<(), ClientError> {
    if links.is_empty() {
        return Ok(());
    }
    let paths: Vec<Vec<u8>> = links.iter().map(|(r, _)| r.path.clone()).collect();
    for ((sr, dst), kind) in links.into_iter().zip(s.stat_many(&paths).await) {
        match kind {
            Ok(Some(f)) if !f.is_dir => {
                let (mode, mtime) = (f.meta.map(|m| m.mode), f.meta.and_then(|m| m.mtime_secs()));
                w.plan.files.push(Item { src: Location::Remote(sr), dst, size: f.size, mode, mtime, unique: f.unique })
            }
            Ok(Some(_)) => tracing::warn!("skipping {}: a symlink to a directory", sr.display()),
            Ok(None) => tracing::warn!("skipping {}: a symlink that leads nowhere", sr.display()),
            Err(e @ ClientError::Control(..)) => return Err(e),
            Err(e) => tracing::warn!("leaving out {}: {e}", sr.display()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn root() -> Remote {
        let Ok(Location::Remote(root)) = Location::parse("ftp://h/d/") else { panic!("url") };
        root
    }

    fn listing(lines: &[&str]) -> Listed {
        Listed::parse(lines.iter().map(|l| format!("{l}\r\n\r\n")).collect::<String>().as_bytes())
    }

    const ROOT: &str = "Type=cdir;Unique=1; .";

    #[test]
    fn a_recursive_listing_is_planned_parents_first_with_links_to_ask_about() {
        let l = listing(&[
            ROOT,
            "Type=file;Size=3; a/b/f",
            "Type=dir;Unique=3; a/b",
            "Type=dir;Unique=2; a",
            "Type=slink; a/l",
        ]);
        assert_eq!(l.consistent(2), Ok(()));
        assert_eq!((l.roots.clone(), l.dirs.len()), (vec![Some("1".to_string())], 2));
        let target = Location::Local("/dst".into());
        let mut w = Walk::new(&root(), &target, true);
        let links = add_tree(&mut w, &root(), &target, l.entries).expect("planned");
        let dirs: Vec<String> = w.plan.dirs.iter().map(super::super::describe).collect();
        assert_eq!(dirs, ["/dst/a", "/dst/a/b"]);
        let files: Vec<String> = w.plan.files.iter().map(|i| super::super::describe(&i.dst)).collect();
        assert_eq!(files, ["/dst/a/b/f"]);
        assert_eq!(links.iter().map(|(r, _)| r.path.clone()).collect::<Vec<_>>(), [b"/d/a/l".to_vec()]);
    }

    #[test]
    fn unsafe_names_in_a_recursive_listing_refuse_the_tree() {
        for bad in ["../x", "a/../../x", "/etc/x", "a//x", "a/./x"] {
            let err = name_ok(&root(), bad.as_bytes()).expect_err(bad).to_string();
            assert!(err.contains("unsafe name"), "{bad}: {err}");
        }
        assert!(name_ok(&root(), b" lead/a b/\xff").is_ok());
    }

    /// What GCT sends for a directory whose first entry's name sorts
    /// before `.` (its facts under the parent's name, its contents left
    /// out), for a root that is a symlink, and other listings that cannot
    /// be right: each is no use (the tree is listed with MLSD), none
    /// refused. A directory deep enough that its entries may pass PATH_MAX
    /// is no use either.
    #[test]
    fn listings_that_cannot_be_right_are_no_use() {
        let cases: [&[&str]; 5] = [
            &["Type=slink;UNIX.slink=/t/d; lroot"],
            &[ROOT, "Type=cdir;Unique=9; .", "Type=dir;Unique=2; d"],
            &[ROOT, "Type=file;Size=1; f", "Type=file;Size=1; f"],
            &[ROOT, "Type=file;Size=1; x/f"],
            // Inside a symlink's name: the link is not a directory.
            &[ROOT, "Type=slink;UNIX.slink=/tmp; ln", "Type=file;Size=5; ln/escaped"],
        ];
        for lines in cases {
            assert!(listing(lines).consistent(2).is_err(), "{lines:?}");
        }
        let deep = format!("Type=dir;Unique=2; {}", "d".repeat(3700));
        assert_eq!(listing(&[ROOT, &deep]).consistent(2), Ok(()));
        let err = listing(&[ROOT, &deep]).consistent(140).expect_err("too deep");
        assert!(err.contains("too deep"), "{err}");
    }
}
