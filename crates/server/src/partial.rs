//! Partial uploads kept for a restart (GFD.20's `REST` with a range list
//! before `STOR`): a MODE E upload whose data or control connection broke
//! keeps its temporary file and the ranges written to it (a MiB or more),
//! for a while, so that the client's next try sends only the rest.
//!
//! Only the same user from the same address may resume a partial file,
//! only by claiming ranges the server itself wrote (the ranges its `111`
//! markers reported), and only for a file of the same size. A partial file
//! is never visible under the final name: it stays a temporary file
//! (unnamed, `O_TMPFILE`, where the file system allows: nothing of it
//! outlives the server process) until a resumed upload completes it, and
//! is removed when it expires (`serve --keep-partial`, [`KEEP_FOR`] by
//! default; the server sweeps every 30 s) or when more than [`MAX_KEPT`]
//! are kept.

use lightpath_proto::held::TreeRoot;
use lightpath_proto::{Mode, RangeSet, Reply, Restart, Transfer, TransferKind};
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a partial upload waits for its resumption, by default.
pub const KEEP_FOR: Duration = Duration::from_secs(15 * 60);

/// Partial uploads kept at most (each holds a file of its full size).
pub const MAX_KEPT: usize = 16;

/// Partial uploads kept at most for one user (anonymous logins are one):
/// one user's broken uploads pushed out every other user's, the oldest
/// going first (a security hunt's find).
pub const MAX_KEPT_PER_USER: usize = 4;

/// Bytes an upload must have written to be kept: less is as quickly sent
/// again, and a client that breaks many small uploads holds no disk.
pub const MIN_KEPT: u64 = 1 << 20;

/// Who uploaded what: a partial file is resumed only by the same user,
/// from the same address, to the same path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    /// The user logged in.
    pub user: String,
    /// The client's address.
    pub ip: Option<IpAddr>,
}

/// A kept partial upload: its file (a [`lightpath_sys::root::TempFile`]
/// in the server), the ranges written to it, and the size its `ALLO` said.
#[derive(Debug)]
pub struct Partial<F> {
    owner: Owner,
    path: Vec<u8>,
    /// The file, still under its temporary name.
    pub file: F,
    /// Ranges written to it.
    pub have: RangeSet,
    /// The size its `ALLO` announced.
    pub size: Option<u64>,
    /// The source's mode and mtime its `OPTS STOR` gave: what tells the
    /// upload that wrote these bytes from another of the same name and size.
    pub meta: Option<TreeRoot>,
    since: Instant,
}

/// The partial uploads a server keeps (shared by its sessions).
#[derive(Debug)]
pub struct Partials<F> {
    kept: Mutex<Vec<Partial<F>>>,
    keep_for: Duration,
}

/// Which kept upload goes (oldest first, `kept` is in keeping order)
/// before one more of `user`'s is kept: its own oldest past
/// [`MAX_KEPT_PER_USER`]; past [`MAX_KEPT`], the oldest of the user who
/// holds the most.
fn evictee<F>(kept: &[Partial<F>], user: &str) -> Option<usize> {
    let of = |u: &str| kept.iter().filter(|p| p.owner.user == u).count();
    if of(user) >= MAX_KEPT_PER_USER {
        return kept.iter().position(|p| p.owner.user == user);
    }
    if kept.len() < MAX_KEPT {
        return None;
    }
    let most = kept.iter().map(|p| of(&p.owner.user)).max()?;
    kept.iter().position(|p| of(&p.owner.user) == most)
}

impl<F> Partials<F> {
    /// Keeping each partial upload for `keep_for` (zero: none is kept).
    pub fn new(keep_for: Duration) -> Self {
        Partials { kept: Mutex::new(Vec::new()), keep_for }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Partial<F>>> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keep `file`, holding `have` of `path`'s upload by `owner`, in place
    /// of any earlier one of the same. Expired ones go, and the oldest
    /// beyond [`MAX_KEPT`]. Returns the partial files dropped (the caller
    /// drops them outside the lock: removing a file is a system call).
    pub fn keep(&self, now: Instant, (owner, path): (Owner, &[u8]), file: F, have: RangeSet, t: &Transfer) -> Vec<F> {
        let (size, meta) = (t.allo, t.meta);
        let mut kept = self.lock();
        let mut gone = expire(&mut kept, now, self.keep_for);
        if self.keep_for.is_zero() {
            gone.push(file);
            return gone;
        }
        if let Some(i) = kept.iter().position(|p| p.owner == owner && p.path == path) {
            gone.push(kept.remove(i).file);
        }
        if let Some(i) = evictee(&kept, &owner.user) {
            gone.push(kept.remove(i).file);
        }
        kept.push(Partial { owner, path: path.to_vec(), file, have, size, meta, since: now });
        gone
    }

    /// Take the partial upload of `path` by `owner`, if one is kept and
    /// has not expired.
    pub fn take(&self, now: Instant, owner: &Owner, path: &[u8]) -> (Option<Partial<F>>, Vec<F>) {
        let mut kept = self.lock();
        let gone = expire(&mut kept, now, self.keep_for);
        let i = kept.iter().position(|p| &p.owner == owner && p.path == path);
        (i.map(|i| kept.remove(i)), gone)
    }

    /// Remove the expired ones; returns their files (to drop outside the lock).
    pub fn sweep(&self, now: Instant) -> Vec<F> {
        expire(&mut self.lock(), now, self.keep_for)
    }

    /// Partial uploads kept now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether none is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn expire<F>(kept: &mut Vec<Partial<F>>, now: Instant, keep_for: Duration) -> Vec<F> {
    let mut gone = Vec::new();
    let mut i = 0;
    while i < kept.len() {
        if now.saturating_duration_since(kept[i].since) >= keep_for {
            gone.push(kept.remove(i).file);
        } else {
            i += 1;
        }
    }
    gone
}

/// The ranges a `STOR` after `REST` says the server already has (empty:
/// a plain STOR; other uploads name their offsets themselves). `None`: a
/// restart no partial file can resume: an offset, or MODE S (only MODE E
/// uploads, whose `111` markers name ranges, are kept).
pub fn claims(t: &Transfer) -> Option<RangeSet> {
    let c = match (&t.kind, &t.restart) {
        (TransferKind::Stor, Some(Restart::Ranges(have))) => have.clone(),
        (TransferKind::Stor, Some(Restart::Offset(o))) if *o > 0 => return None,
        _ => RangeSet::new(),
    };
    (c.is_empty() || t.settings.mode == Mode::Extended).then_some(c)
}

/// Whether `p` can resume `t`, which claims `claims`: the server wrote
/// every claimed range, and the file has the size it had. The refusal
/// (RFC 959's 554, "invalid REST parameter") says why.
pub fn check<F>(t: &Transfer, claims: &RangeSet, p: Option<&Partial<F>>) -> Result<(), Reply> {
    let why = match p {
        None => "no partial upload of this file from you is kept here (it expired, or the server restarted)".into(),
        Some(p) if !claims.ranges().iter().all(|&(s, e)| p.have.contains_range(s, e)) => {
            format!("the partial upload kept holds {}, not {claims}", p.have)
        }
        Some(p) if p.size.is_some() && t.allo.is_some() && p.size != t.allo => {
            format!("the partial upload kept is of {} bytes, not {}", p.size.unwrap_or(0), t.allo.unwrap_or(0))
        }
        // Another upload of the name, of another source file (its mode
        // and mtime, to the nanosecond, from `OPTS STOR`): two uploads of
        // one name from one user and host, both broken off, were joined
        // and published, 226 (a defect hunt's find).
        Some(p) if p.meta != t.meta => "the partial upload kept is of another source file (its mode or mtime)".into(),
        Some(_) => return Ok(()),
    };
    Err(Reply::new(554, format!("{}: Restart refused: {why}; send the whole file.", t.path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(user: &str) -> Owner {
        Owner { user: user.into(), ip: Some("10.0.0.1".parse().unwrap()) }
    }

    fn set(r: &[(u64, u64)]) -> RangeSet {
        let mut s = RangeSet::new();
        r.iter().for_each(|&(a, b)| s.insert(a, b));
        s
    }

    #[test]
    fn a_partial_is_taken_once_by_its_owner_for_its_path() {
        let (ps, t0) = (Partials::new(KEEP_FOR), Instant::now());
        assert!(ps.keep(t0, (owner("a"), b"/f"), 1, set(&[(0, 10)]), &stor(None, Some(20))).is_empty());
        assert!(ps.take(t0, &owner("b"), b"/f").0.is_none());
        let other_ip = Owner { ip: Some("10.0.0.2".parse().unwrap()), ..owner("a") };
        assert!(ps.take(t0, &other_ip, b"/f").0.is_none());
        assert!(ps.take(t0, &owner("a"), b"/g").0.is_none());
        let p = ps.take(t0, &owner("a"), b"/f").0.expect("kept");
        assert_eq!((p.file, p.have, p.size), (1, set(&[(0, 10)]), Some(20)));
        assert!(ps.take(t0, &owner("a"), b"/f").0.is_none());
    }

    #[test]
    fn partials_expire_are_replaced_and_are_bounded() {
        let (ps, t0) = (Partials::new(KEEP_FOR), Instant::now());
        ps.keep(t0, (owner("a"), b"/f"), 1, set(&[(0, 1)]), &stor(None, None));
        assert_eq!(ps.keep(t0, (owner("a"), b"/f"), 2, set(&[(0, 2)]), &stor(None, None)), vec![1]);
        assert!(ps.sweep(t0 + KEEP_FOR / 2).is_empty(), "not yet");
        assert_eq!(ps.sweep(t0 + KEEP_FOR), vec![2], "expired");
        assert!(ps.is_empty());
        ps.keep(t0, (owner("a"), b"/f"), 3, set(&[(0, 1)]), &stor(None, None));
        let (p, gone) = ps.take(t0 + KEEP_FOR, &owner("a"), b"/f");
        assert!(p.is_none() && gone == vec![3], "expired at take");
        // Four users of four each fill the server; a fifth user's push out
        // the oldest of a user who holds the most.
        let who = |i: usize| owner(&format!("u{}", i % 4));
        for i in 0..MAX_KEPT {
            ps.keep(t0, (who(i), format!("/{i}").as_bytes()), i, RangeSet::new(), &stor(None, None));
        }
        assert_eq!(ps.len(), MAX_KEPT);
        for i in MAX_KEPT..MAX_KEPT + 2 {
            assert_eq!(
                ps.keep(t0, (owner("e"), format!("/{i}").as_bytes()), i, RangeSet::new(), &stor(None, None)).len(),
                1
            );
        }
        assert_eq!(ps.len(), MAX_KEPT);
        assert!(ps.take(t0, &who(0), b"/0").0.is_none() && ps.take(t0, &who(1), b"/1").0.is_none());
        assert!(ps.take(t0, &who(2), b"/2").0.is_some());
        assert!(ps.take(t0, &owner("e"), b"/16").0.is_some());
        let none = Partials::new(Duration::ZERO);
        assert_eq!(none.keep(t0, (owner("a"), b"/f"), 7, set(&[(0, 1)]), &stor(None, None)), vec![7], "keeping none");
        assert!(none.is_empty());
    }

    /// One user's broken uploads push out only its own: the fifth goes
    /// in place of its oldest, however few the others keep.
    #[test]
    fn one_user_keeps_at_most_its_share() {
        let (ps, t0) = (Partials::new(KEEP_FOR), Instant::now());
        ps.keep(t0, (owner("alice"), b"/a"), 100, RangeSet::new(), &stor(None, None));
        for i in 0..10 {
            let gone =
                ps.keep(t0, (owner("mallory"), format!("/{i}").as_bytes()), i, RangeSet::new(), &stor(None, None));
            assert_eq!(gone, if i < MAX_KEPT_PER_USER { vec![] } else { vec![i - MAX_KEPT_PER_USER] }, "{i}");
        }
        assert_eq!(ps.len(), 1 + MAX_KEPT_PER_USER);
        assert!(ps.take(t0, &owner("alice"), b"/a").0.is_some(), "alice's stays");
    }

    fn stor(restart: Option<Restart>, allo: Option<u64>) -> Transfer {
        let path = lightpath_proto::VPath::root().join(b"f").unwrap();
        let settings = lightpath_proto::TransferSettings { mode: Mode::Extended, ..Default::default() };
        Transfer {
            kind: TransferKind::Stor,
            path,
            restart,
            allo,
            meta: None,
            settings,
            dir_only: false,
            may_write: true,
        }
    }

    #[test]
    fn only_ranges_the_server_wrote_of_a_file_of_the_same_size_resume() {
        let have = set(&[(0, 100), (200, 300)]);
        let p = Partial {
            owner: owner("a"),
            path: b"/f".to_vec(),
            file: (),
            have,
            size: Some(1000),
            meta: None,
            since: Instant::now(),
        };
        let ok = set(&[(0, 50), (200, 300)]);
        let t = stor(Some(Restart::Ranges(ok.clone())), Some(1000));
        assert_eq!(claims(&t), Some(ok.clone()));
        assert!(check(&t, &ok, Some(&p)).is_ok());
        let r = check(&t, &set(&[(0, 150)]), Some(&p)).unwrap_err();
        assert!(r.code == 554 && r.text().contains("holds 0-100,200-300, not 0-150"), "{}", r.text());
        let r = check(&stor(None, Some(999)), &ok, Some(&p)).unwrap_err();
        assert!(r.text().contains("of 1000 bytes, not 999"), "{}", r.text());
        let r = check::<()>(&t, &ok, None).unwrap_err();
        assert!(r.code == 554 && r.text().contains("send the whole file"), "{}", r.text());
        assert_eq!(claims(&stor(Some(Restart::Offset(0)), None)), Some(RangeSet::new()));
        assert_eq!(claims(&stor(Some(Restart::Offset(7)), None)), None);
        let mut s = stor(Some(Restart::Ranges(ok.clone())), None);
        s.settings.mode = Mode::Stream;
        assert_eq!(claims(&s), None, "MODE S uploads are not kept");
        // Another source file of the same name and size: refused.
        let meta = |ns| Some(TreeRoot { mode: 0o644, mtime_ns: Some(ns) });
        let p = Partial { meta: meta(1), ..p };
        let mut other = stor(Some(Restart::Ranges(ok.clone())), Some(1000));
        other.meta = meta(2);
        let r = check(&other, &ok, Some(&p)).unwrap_err();
        assert!(r.code == 554 && r.text().contains("another source file"), "{}", r.text());
        other.meta = meta(1);
        assert!(check(&other, &ok, Some(&p)).is_ok());
    }
}
