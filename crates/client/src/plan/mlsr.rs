//! A remote tree listed in one command: `MLSR`, GCT's recursive MLSD.
//!
//! Listing a tree directory by directory costs each directory a PASV, a
//! data connection and its replies, two to three round trips: the git-like
//! tree's 948 directories took 18 s over a 95 ms path even with 16 control
//! sessions listing at once, three times as long as its 480 MB then took.
//! Where the server offers `MLSR`, one listing names everything below the
//! root (`a/b/f`), each directory before what it holds. It shows symlinks
//! as themselves (`Type=slink`), so the ones a copy needs to follow are
//! asked about with `MLST`, pipelined. A server that refuses `MLSR` (or
//! fails it part way, e.g. at a directory it cannot read) is listed
//! directory by directory after all.

use super::{join, Item, Plan, Walk};
use crate::session::{Entry, Session};
use crate::{ClientError, Location, Remote};
use lightpath_proto::manifest;
use std::collections::HashSet;

/// The tree at `root` from one `MLSR`, or `None` when the server would not
/// list it so (the caller walks it with MLSD). An unsafe name, a tree past
/// the walk's bounds or a lost control connection is an error.
pub(super) async fn walk(
    s: &mut Session,
    (root, links_as_files): (&Remote, bool),
    target: &Location,
) -> Result<Option<Plan>, ClientError> {
    let entries = match s.list_tree(&root.path).await {
        Ok(e) => e,
        Err(e @ ClientError::Control(..)) => return Err(e),
        Err(e) => {
            tracing::info!("{}: MLSR failed ({e}); listing the tree directory by directory", root.display());
            return Ok(None);
        }
    };
    let mut w = Walk::new(root, target, links_as_files);
    let links = add_tree(&mut w, root, target, entries)?;
    resolve_links(s, &mut w, links).await?;
    tracing::info!(dirs = w.plan.dirs.len(), files = w.plan.files.len(), "listed the remote tree with one MLSR");
    Ok(Some(w.plan))
}

/// Plan the entries of an MLSR of `root`: directories and files, checked
/// as the virtual file's paths are ([`manifest::check_path`]), each inside
/// a directory the listing named. Returns the symlinks to ask about (when
/// the walk copies links to files as files).
fn add_tree(
    w: &mut Walk,
    root: &Remote,
    target: &Location,
    mut entries: Vec<Entry>,
) -> Result<Vec<(Remote, Location)>, ClientError> {
    // A path sorts after every path it has as a prefix: parents first.
    entries.sort_unstable_by(|a, b| a.name.cmp(&b.name));
    let (mut dirs, mut links) = (HashSet::new(), Vec::new());
    for e in entries {
        tree_name_ok(root, &e.name, &dirs)?;
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
            dirs.insert(e.name);
            w.plan.dirs.push(dst);
        } else {
            w.plan.files.push(Item { src: Location::Remote(sr), dst, size: e.size });
        }
    }
    Ok(links)
}

/// A name in a recursive listing is a relative path with no `.`, `..` or
/// empty part, inside a directory the same listing named: otherwise it
/// would place the copy outside the destination (`../x`, `/etc/x`) or
/// under a symlink's name. Such a listing is refused whole.
fn tree_name_ok(root: &Remote, name: &[u8], dirs: &HashSet<Vec<u8>>) -> Result<(), ClientError> {
    let why = match manifest::check_path(name) {
        Err(p) => p.to_string(),
        Ok(()) => match manifest::parent(name) {
            Some(p) if !dirs.contains(p) => {
                format!("it is inside \"{}\", not listed as a directory", manifest::show(p))
            }
            _ => return Ok(()),
        },
    };
    Err(ClientError::Local(format!(
        "{}: the server listed the unsafe name \"{}\" ({why}); refusing to copy this tree",
        root.display(),
        manifest::show(name)
    )))
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
            Ok(Some((false, size))) => w.plan.files.push(Item { src: Location::Remote(sr), dst, size }),
            Ok(Some((true, _))) => tracing::warn!("skipping {}: a symlink to a directory", sr.display()),
            Ok(None) => tracing::debug!("leaving out {}: a symlink that leads nowhere", sr.display()),
            Err(e @ ClientError::Control(..)) => return Err(e),
            Err(e) => tracing::warn!("leaving out {}: {e}", sr.display()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, is_dir: bool, unresolved: bool) -> Entry {
        Entry { name: name.as_bytes().to_vec(), is_dir, size: 3, link: unresolved, unresolved }
    }

    fn tree(names: &[(&str, bool, bool)]) -> (Walk, Result<Vec<(Remote, Location)>, ClientError>) {
        let Ok(Location::Remote(root)) = Location::parse("ftp://h/d/") else { panic!("url") };
        let target = Location::Local("/dst".into());
        let mut w = Walk::new(&root, &target, true);
        let entries = names.iter().map(|&(n, d, l)| entry(n, d, l)).collect();
        let r = add_tree(&mut w, &root, &target, entries);
        (w, r)
    }

    #[test]
    fn a_recursive_listing_is_planned_parents_first_with_links_to_ask_about() {
        let (w, links) =
            tree(&[("a/b/f", false, false), ("a/b", true, false), ("a", true, false), ("a/l", false, true)]);
        let links = links.expect("planned");
        let dirs: Vec<String> = w.plan.dirs.iter().map(super::super::describe).collect();
        assert_eq!(dirs, ["/dst/a", "/dst/a/b"]);
        let files: Vec<String> = w.plan.files.iter().map(|i| super::super::describe(&i.dst)).collect();
        assert_eq!(files, ["/dst/a/b/f"]);
        assert_eq!(links.iter().map(|(r, _)| r.path.clone()).collect::<Vec<_>>(), [b"/d/a/l".to_vec()]);
    }

    #[test]
    fn unsafe_names_in_a_recursive_listing_refuse_the_tree() {
        let evil: [&[(&str, bool, bool)]; 7] = [
            &[("../x", false, false)],
            &[("a", true, false), ("a/../../x", false, false)],
            &[("/etc/x", false, false)],
            &[("a//x", false, false)],
            &[("x/f", false, false)],
            // Under a symlink's name: the link is not a directory.
            &[("l", false, true), ("l/f", false, false)],
            &[("a", false, false), ("a/f", false, false)],
        ];
        for names in evil {
            let err = tree(names).1.expect_err("refused").to_string();
            assert!(err.contains("unsafe name"), "{names:?}: {err}");
        }
    }
}
