//! File-system commands of a session: MLST/SIZE stat, MKD, CKSM (one, or
//! many pipelined), MLSD listings.

use super::{fill_err, Session};
use crate::ClientError;
use lightpath_engine::{Control, MemorySink};
use lightpath_proto::held::TreeRoot;
use lightpath_proto::Reply;

/// One entry of a remote listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Name (raw bytes).
    pub name: Vec<u8>,
    /// Directory?
    pub is_dir: bool,
    /// Size in bytes (files).
    pub size: u64,
    /// A symlink shown as what it points to (MLSD's `UNIX.slink` fact).
    pub link: bool,
    /// A symlink shown as itself (MLSR's `Type=slink`): whether it leads
    /// to a file, a directory or nowhere, the listing does not say.
    pub unresolved: bool,
    /// Permission bits (`UNIX.mode`), if the listing gave them.
    pub mode: Option<u32>,
    /// Modification time (`Modify`, whole seconds since the epoch), if
    /// the listing gave it with the mode.
    pub mtime: Option<i64>,
    /// `Unique`: the file system's identity of it, if the listing gave it
    /// (the names of one file, hard links, share it).
    pub unique: Option<String>,
}

impl Session {
    /// Drop what [`Session::stat`] knows of `path`: the next asks the server.
    pub fn forget_stat(&mut self, path: &[u8]) {
        self.stats.remove(path);
    }

    /// Whether `path` is a directory, and its size (0 when unknown): from
    /// the login's answers, else MLST and SIZE sent together (one round trip).
    pub async fn stat(&mut self, path: &[u8]) -> Result<(bool, u64), ClientError> {
        if let Some(st) = self.stats.get(path) {
            return Ok((st.is_dir, st.size));
        }
        self.ctl.flush().await?;
        for cmd in stat_cmds(path) {
            self.ctl.send(&cmd).await?;
        }
        let mlst = self.ctl.final_reply().await?;
        let size = self.ctl.final_reply().await?;
        let st = stat_of(&mlst, &size);
        self.stats.insert(path.to_vec(), st);
        Ok((st.is_dir, st.size))
    }

    /// Whether MLST answered for `path` with its facts, as far as
    /// [`Session::stat`] asked (or the login did).
    /// (A [`Session::stat`] of a path not there says "a file of 0 bytes".)
    pub fn listed(&self, path: &[u8]) -> bool {
        self.stats.get(path).is_some_and(|st| st.listed)
    }

    /// The mode and mtime of `path` as its MLST facts (`UNIX.mode`,
    /// `Modify`) said them, if [`Session::stat`] asked (or the login did)
    /// and the server gave a mode.
    pub(crate) fn stat_meta(&self, path: &[u8]) -> Option<TreeRoot> {
        self.stats.get(path).and_then(|st| st.meta)
    }

    /// `SIZE`, `MDTM` and `MLST path` sent together (one round trip, not
    /// cached): the file's size, and what tells it from another file of
    /// that size, if the server says it: `MDTM`, and MLST's `Modify` (a
    /// lightpath server gives the fraction of the second) and `Unique`
    /// (GCT's and ours: device and inode). With `MDTM` alone (whole
    /// seconds), a source rewritten within its second, or renamed over by
    /// a file with its mtime kept, was resumed: two versions joined under
    /// the final name, exit 0 (a defect hunt).
    pub async fn size_and_stamp(&mut self, path: &[u8]) -> Result<(Option<u64>, Option<String>), ClientError> {
        self.ctl.flush().await?;
        for verb in ["SIZE ", "MDTM ", "MLST "] {
            self.ctl.send(&path_cmd(verb, path)).await?;
        }
        let size = self.ctl.final_reply().await?;
        let mdtm = self.ctl.final_reply().await?;
        let mlst = self.ctl.final_reply().await?;
        let size = (size.code == 213).then(|| size.text().trim().parse().ok()).flatten();
        let facts = mlst.is_ok().then(|| mlst.lines.iter().find_map(|l| facts_of(l))).flatten();
        let more =
            facts.map(|f| format!(" {} {}", fact(&f, "modify").unwrap_or("-"), fact(&f, "unique").unwrap_or("-")));
        Ok((size, (mdtm.code == 213).then(|| format!("{}{}", mdtm.text().trim(), more.unwrap_or_default()))))
    }

    /// `SIZE path`, if the server supports it and the file exists.
    pub async fn remote_size(&mut self, path: &[u8]) -> Result<Option<u64>, ClientError> {
        let r = self.ctl.cmd(path_cmd("SIZE ", path)).await?;
        Ok(if r.code == 213 { r.text().trim().parse().ok() } else { None })
    }

    /// `MKD` each of `paths`, parents before children, the commands
    /// pipelined (one round trip for a tree's directories, not one each).
    /// A refusal is fine where the directory exists already: MLST (also
    /// pipelined) finds one there, or, from a server without it, the reply
    /// says so ([`says_exists`]). A name that cannot travel is left out
    /// with a warning.
    /// The first `parents` paths are made as `mkdir -p` would, where they
    /// are missing; a refusal of one is no error (the directory beneath
    /// it says why it cannot be made).
    pub async fn mkdirs(&mut self, paths: &[Vec<u8>], parents: usize) -> Result<(), ClientError> {
        let cmds = self.path_cmds("MKD ", paths);
        let mut refused = Vec::new();
        for (i, (p, r)) in paths.iter().zip(self.final_replies(&cmds).await).enumerate() {
            if i < parents && !matches!(r, Err(ClientError::Control(..))) {
                continue;
            }
            // A name that cannot travel (a line break; bytes this server
            // would change) is not made: the files beneath it, their paths
            // as unsendable, fail one by one, and the rest of the tree goes
            // (it ended the whole copy, with some directories made).
            let r = match r {
                Err(e @ ClientError::Usage(_)) => {
                    tracing::warn!("directory not made, the files beneath it fail: {e}");
                    continue;
                }
                r => r?,
            };
            if r.is_error() {
                refused.push((p.clone(), r));
            }
        }
        let mlst = self.feat.mlst && refused.iter().all(|(_, r)| matches!(r.code, 550 | 553 | 521));
        let found = if mlst {
            self.dirs_there(&refused).await
        } else {
            refused.iter().map(|(p, r)| Ok(matches!(r.code, 550 | 553 | 521) && says_exists(r, p))).collect::<Vec<_>>()
        };
        for ((p, r), exists) in refused.iter().zip(found) {
            if !exists? {
                return Err(self.ctl.unexpected(&format!("MKD {}", String::from_utf8_lossy(p)), r));
            }
        }
        Ok(())
    }

    /// Whether a directory is at each path whose `MKD` was refused (with
    /// its reply), by `MLST` (pipelined), or, where the server refuses
    /// that (GCT's `-disable-command-list MLST` still lists it in FEAT),
    /// as the `MKD`'s reply says ([`says_exists`]). The refused MLST read
    /// as "no directory", and a tree into an existing one failed whole
    /// (a defect hunt's find).
    async fn dirs_there(&mut self, refused: &[(Vec<u8>, Reply)]) -> Vec<Result<bool, ClientError>> {
        let which: Vec<Vec<u8>> = refused.iter().map(|(p, _)| p.clone()).collect();
        let cmds = self.path_cmds("MLST ", &which);
        let there = |r: Reply, (p, mkd): &(Vec<u8>, Reply)| match r.code {
            _ if r.is_ok() => r.lines.iter().find_map(|l| Facts::of_line(l)).is_some_and(|f| f.is_dir),
            550 => false,
            _ => says_exists(mkd, p),
        };
        let replies = self.final_replies(&cmds).await.into_iter().zip(refused);
        replies.map(|(r, x)| r.map(|r| there(r, x))).collect()
    }

    /// `DELE path`: remove a file on the server.
    pub async fn delete(&mut self, path: &[u8]) -> Result<(), ClientError> {
        self.delete_many(&[path.to_vec()]).await.pop().unwrap_or(Ok(()))
    }

    /// `verb path` for each of `paths`, each checked before it is sent
    /// (a name that cannot travel fails alone: [`Session::final_replies`]).
    fn path_cmds(&self, verb: &str, paths: &[Vec<u8>]) -> Vec<Result<Vec<u8>, ClientError>> {
        self.checked(paths.iter().map(|p| path_cmd(verb, p)))
    }

    /// Each of `cmds`, or why it cannot be sent to this server
    /// ([`ControlConn::check`](crate::control::ControlConn::check)): a
    /// batch's commands are checked one by one, so that one name that
    /// cannot travel fails alone.
    pub(super) fn checked(&self, cmds: impl IntoIterator<Item = Vec<u8>>) -> Vec<Result<Vec<u8>, ClientError>> {
        cmds.into_iter().map(|c| self.ctl.check(&c).map(|()| c)).collect()
    }

    /// What the replies to [`rename_cmds`] of `moves` (`RNFR from`, `RNTO
    /// to` for each pair, pipelined) say: one result a pair.
    pub(crate) fn renamed(
        &self,
        replies: &[Result<Reply, ClientError>],
        moves: &[(Vec<u8>, Vec<u8>)],
    ) -> Vec<Result<(), ClientError>> {
        let shown = |verb: &str, p: &[u8]| format!("{verb} {}", String::from_utf8_lossy(p));
        let mut out = Vec::with_capacity(moves.len());
        for (r, (from, to)) in replies.chunks(2).zip(moves) {
            let (rnfr, rnto) = (r[0].as_ref().map_err(Clone::clone), r[1].as_ref().map_err(Clone::clone));
            out.push(match (rnfr, rnto) {
                (Err(e), _) | (Ok(_), Err(e)) => Err(e),
                (Ok(a), _) if a.code != 350 => Err(self.ctl.unexpected(&shown("RNFR", from), a)),
                (Ok(_), Ok(b)) if !b.is_ok() => Err(self.ctl.unexpected(&shown("RNTO", to), b)),
                _ => Ok(()),
            });
        }
        out
    }

    /// `SITE CHMOD` and, where FEAT offers it, `MFMT` for each path (its
    /// mode, and mtime in seconds where known), pipelined. Returns how
    /// many paths kept the mode or mtime they had: the server refused one
    /// of their commands (it counted commands, two a directory: "8 of 4
    /// directories", a defect hunt's find).
    pub async fn set_meta_many(&mut self, metas: &[(Vec<u8>, u32, Option<i64>)]) -> usize {
        let (mut cmds, mut sticky, mut spans) = (Vec::with_capacity(metas.len() * 2), Vec::new(), Vec::new());
        for (p, mode, mtime) in metas {
            let start = cmds.len();
            if mode & 0o1000 != 0 {
                sticky.push((cmds.len(), p, *mode));
            }
            cmds.push(chmod_cmd(p, *mode));
            cmds.extend(mtime.and_then(|t| self.mfmt_cmd(p, t)));
            spans.push(start..cmds.len());
        }
        let replies = self.flight(cmds).await;
        let failed = |r: &Result<Reply, ClientError>| !r.as_ref().is_ok_and(Reply::is_ok);
        let mut refused: Vec<bool> = replies.iter().map(failed).collect();
        // A server that takes no sticky bit (lightpath's before it took
        // one) is asked for the permission bits alone.
        let again: Vec<(usize, Vec<u8>)> = sticky
            .iter()
            .filter(|(i, ..)| matches!(&replies[*i], Ok(r) if !r.is_ok()))
            .map(|(i, p, mode)| (*i, chmod_cmd(p, mode & 0o777)))
            .collect();
        if !again.is_empty() {
            let (at, cmds): (Vec<usize>, Vec<Vec<u8>>) = again.into_iter().unzip();
            for (i, r) in at.into_iter().zip(self.flight(cmds).await) {
                refused[i] = failed(&r);
            }
        }
        spans.into_iter().filter(|s| refused[s.clone()].iter().any(|&f| f)).count()
    }

    /// `MFMT` of `p` to `t` (whole seconds), where FEAT offers it.
    pub(crate) fn mfmt_cmd(&self, p: &[u8], t: i64) -> Option<Vec<u8>> {
        self.feat.mfmt.then(|| path_cmd(&format!("MFMT {} ", lightpath_proto::ftptime::format(t)), p))
    }

    /// Each of `cmds`, pipelined ([`Session::final_replies`]): its final
    /// reply, or why it could not be sent.
    pub(crate) async fn flight(&mut self, cmds: Vec<Vec<u8>>) -> Vec<Result<Reply, ClientError>> {
        let cmds = self.checked(cmds);
        self.final_replies(&cmds).await
    }

    /// `DELE` of each path, pipelined: one result a path.
    pub async fn delete_many(&mut self, paths: &[Vec<u8>]) -> Vec<Result<(), ClientError>> {
        let cmds = self.path_cmds("DELE ", paths);
        let replies = self.final_replies(&cmds).await;
        let shown = |p: &[u8]| format!("DELE {}", String::from_utf8_lossy(p));
        replies
            .into_iter()
            .zip(paths)
            .map(|(r, p)| match r {
                Ok(r) if r.is_error() => Err(self.ctl.unexpected(&shown(p), &r)),
                r => r.map(drop),
            })
            .collect()
    }

    /// Whether this server computes `alg` with CKSM as far as its FEAT
    /// says: one that lists the algorithms it computes, without `alg`, is
    /// a usage error of the option `what` (`--verify`, `--alg`).
    pub fn computes(&self, what: &str, alg: &str) -> Result<(), ClientError> {
        if self.feat.cksm.is_empty() || self.feat.has_cksm(alg) {
            return Ok(());
        }
        Err(ClientError::Usage(format!(
            "{what} {alg}: {} does not compute {alg} checksums (its CKSM offers {})",
            self.ctl.name,
            self.feat.cksm.join(", ")
        )))
    }

    /// Ask once per session for `113` status markers during a CKSM
    /// (`OPTS CKSM markers=N;`, GCT's; lightpath's server sends them too),
    /// a few within the reply timeout: each is a reply, so a checksum of a
    /// file too large to read within the timeout (500 MB/s: 150 GB in 300
    /// s) is not taken for a stalled server. Queued with what follows; a
    /// server that refuses it is no error.
    async fn ask_cksm_markers(&mut self) -> Result<(), ClientError> {
        if std::mem::replace(&mut self.cksm_markers, true) {
            return Ok(());
        }
        let every = (crate::control::reply_timeout().as_secs() / 4).clamp(1, 30);
        self.ctl.queue_optional(format!("OPTS CKSM markers={every};")).await
    }

    /// `CKSM alg 0 -1 path`, the path as its bytes (names need not be UTF-8).
    pub async fn checksum(&mut self, alg: &str, path: &[u8]) -> Result<String, ClientError> {
        self.checksum_of(alg, 0, None, path).await
    }

    /// `CKSM alg off len path`: the digest of `len` bytes at `off` (`None`: to the end).
    pub async fn checksum_of(
        &mut self,
        alg: &str,
        off: u64,
        len: Option<u64>,
        path: &[u8],
    ) -> Result<String, ClientError> {
        self.ask_cksm_markers().await?;
        let r = self.ctl.ok(cksm_cmd(alg, off, len, path)).await?;
        Ok(r.text().trim().to_ascii_lowercase())
    }

    /// `CKSM alg 0 -1 path` of each of `paths`, with up to `pipeline`
    /// commands in flight (one round trip for a batch, not one per file).
    /// One result per path, in order; a lost control connection fails the rest.
    pub async fn checksums(&mut self, alg: &str, paths: &[Vec<u8>]) -> Vec<Result<String, ClientError>> {
        if let Err(e) = self.ask_cksm_markers().await {
            return paths.iter().map(|_| Err(e.clone())).collect();
        }
        let cmds = self.checked(paths.iter().map(|p| cksm_cmd(alg, 0, None, p)));
        let replies = self.final_replies(&cmds).await;
        let digest = |(cmd, r): (&Result<Vec<u8>, ClientError>, Reply)| match cmd {
            Ok(c) if r.is_error() => Err(self.ctl.unexpected(&String::from_utf8_lossy(c), &r)),
            _ => Ok(r.text().trim().to_ascii_lowercase()),
        };
        cmds.iter().zip(replies).map(|(c, r)| r.and_then(|r| digest((c, r)))).collect()
    }

    /// The final reply to each of `cmds`, with up to `pipeline` commands in
    /// flight (at least [`CONTROL_WINDOW`] when pipelining). A command that
    /// could not be made fails alone, unsent; a lost control connection
    /// fails it and the rest.
    async fn final_replies(&mut self, cmds: &[Result<Vec<u8>, ClientError>]) -> Vec<Result<Reply, ClientError>> {
        if let Err(e) = self.ctl.flush().await {
            return fill_err(Vec::new(), cmds.len(), e);
        }
        let window = match self.opts.pipeline {
            0 | 1 => 1,
            n => n.max(CONTROL_WINDOW),
        };
        let (mut sent, mut out) = (0, Vec::new());
        self.ctl.cork();
        for (i, cmd) in cmds.iter().enumerate() {
            while sent < cmds.len() && sent < i + window {
                if let Ok(c) = &cmds[sent] {
                    if let Err(e) = self.ctl.send(c).await {
                        return fill_err(out, cmds.len(), e);
                    }
                }
                sent += 1;
            }
            let r = match cmd {
                Ok(_) => self.ctl.final_reply().await,
                Err(e) => Err(e.clone()),
            };
            if let Err(e @ ClientError::Control(..)) = &r {
                let e = e.clone();
                return fill_err(out, cmds.len(), e);
            }
            out.push(r);
        }
        // When no command could be sent nothing was read: nothing stays
        // corked (a failed write shows at the next command).
        let _ = self.ctl.uncork().await;
        out
    }

    /// Directory listing with MLSD (MODE S, fresh PASV, as GCT expects).
    pub async fn list(&mut self, path: &[u8]) -> Result<Vec<Entry>, ClientError> {
        let data = self.listing("MLSD", path).await?;
        let (mut entries, mut others) = (Vec::new(), Vec::new());
        for (facts, name) in listing_lines(&data) {
            match fact(&facts, "type") {
                Some(kind) if is_other(kind) && !name.is_empty() => others.push((name.to_vec(), kind.to_string())),
                _ => entries.extend(entry_of(&facts, name, false)),
            }
        }
        self.others = others;
        Ok(entries)
    }

    /// The whole tree under `path` in one listing, where the server offers
    /// `MLSR` (GCT): its lines, names relative to `path` (`a/b/f`),
    /// symlinks as themselves (`Type=slink`); see [`listing_lines`].
    pub async fn list_tree(&mut self, path: &[u8]) -> Result<Vec<u8>, ClientError> {
        self.listing("MLSR", path).await
    }

    /// What `MLST` says each of `paths` is, the commands pipelined (one
    /// round trip for a batch): a file or a directory, as a symlink there
    /// leads (the server follows it); `None` where the server refused (a
    /// dangling link) or named something else. A lost control connection
    /// fails the rest.
    pub async fn stat_many(&mut self, paths: &[Vec<u8>]) -> Vec<Result<Option<Facts>, ClientError>> {
        let cmds = self.path_cmds("MLST ", paths);
        let kind = |r: Reply| r.is_ok().then(|| r.lines.iter().find_map(|l| Facts::of_line(l))).flatten();
        self.final_replies(&cmds).await.into_iter().map(|r| r.map(kind)).collect()
    }

    /// One listing (`verb path`) over a fresh PASV in MODE S, as GCT
    /// expects, at most [`crate::plan::MAX_LISTING`] bytes.
    async fn listing(&mut self, verb: &str, path: &[u8]) -> Result<Vec<u8>, ClientError> {
        self.set_mode(false).await?;
        let addr = self.pasv().await?;
        self.ctl.send(&path_cmd(&format!("{verb} "), path)).await?;
        let mut dc = self.dc.take().unwrap_or_default();
        dc.connect_to(vec![addr]);
        let job = tokio::task::spawn_blocking(move || {
            let sink = MemorySink::new(crate::plan::MAX_LISTING);
            let r = dc.open_stream().and_then(|c| dc.recv_s(c, &sink, 0, crate::plan::MAX_LISTING, &Control::new()));
            (dc, r.map(|_| sink.into_inner()))
        });
        let first = self.ctl.reply().await?;
        if first.is_error() {
            job.abort();
            self.dc = Some(self.new_dc());
            return Err(self.ctl.unexpected(verb, &first));
        }
        let (dc, data) = job.await.map_err(|e| ClientError::Local(e.to_string()))?;
        self.dc = Some(dc);
        let fin = if first.is_preliminary() { self.ctl.final_reply().await? } else { first };
        if !fin.is_ok() {
            return Err(self.ctl.unexpected(verb, &fin));
        }
        self.names_left_out = fin.names_left_out();
        Ok(data?)
    }
}

/// Commands kept in flight by [`Session::final_replies`] unless pipelining
/// is off: they carry no data, and a tree's 948 MKDs or MLSTs 16 at a time
/// took 60 round trips. 128 commands of a few hundred bytes, and their
/// replies, fit the socket buffers both ways, so neither end blocks
/// writing while the other does.
const CONTROL_WINDOW: usize = 128;

/// The lines of an MLSD or MLSR listing (`facts; name`) as their facts
/// (lower case) and name; lines without both are skipped.
pub(crate) fn listing_lines(data: &[u8]) -> impl Iterator<Item = (String, &[u8])> {
    data.split(|&b| b == b'\n').filter_map(|line| {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let sp = line.iter().position(|&b| b == b' ')?;
        Some((String::from_utf8_lossy(&line[..sp]).to_ascii_lowercase(), &line[sp + 1..]))
    })
}

/// Whether a `type` fact names something other than a file, a directory
/// or a symlink (`OS.unix=pipe`, `OS.unix=chr`, `OS.unix=other`).
pub(crate) fn is_other(kind: &str) -> bool {
    !matches!(kind, "file" | "dir" | "cdir" | "pdir" | "slink" | "")
}

/// Parse MLSD (or MLSR) lines (`facts; name`), skipping cdir/pdir.
/// Files and directories are kept; with `slinks`, symlinks shown as
/// themselves too (`Type=slink`, [`Entry::unresolved`]).
pub fn parse_listing(data: &[u8], slinks: bool) -> Vec<Entry> {
    listing_lines(data).filter_map(|(facts, name)| entry_of(&facts, name, slinks)).collect()
}

/// The entry a listing line (its facts, lower case, and name) gives, as
/// [`parse_listing`] keeps it; `None` for the lines it skips.
pub(crate) fn entry_of(facts: &str, name: &[u8], slinks: bool) -> Option<Entry> {
    let kind = fact(facts, "type").unwrap_or_default();
    if kind == "cdir" || kind == "pdir" || name.is_empty() || name == b"." || name == b".." {
        return None;
    }
    let (is_dir, unresolved) = (kind == "dir", slinks && kind == "slink");
    if !(is_dir || unresolved || kind == "file") {
        return None;
    }
    let size = fact(facts, "size").and_then(|s| s.parse().ok()).unwrap_or(0);
    let link = unresolved || fact(facts, "unix.slink").is_some();
    let meta = meta_of_facts(facts);
    let (mode, mtime) = (meta.map(|m| m.mode), meta.and_then(|m| m.mtime_secs()));
    let unique = fact(facts, "unique").map(String::from);
    Some(Entry { name: name.to_vec(), is_dir, size, link, unresolved, mode, mtime, unique })
}

/// What a line of MLST facts says of a file or directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// A directory (else a file).
    pub is_dir: bool,
    /// `Size`, 0 when not given.
    pub size: u64,
    /// `Unique`: the file system's identity of it (GCT: device-inode).
    pub unique: Option<String>,
    /// Mode and mtime (`UNIX.mode`, `Modify`); `None` without a mode.
    pub meta: Option<TreeRoot>,
    /// `Perm` (lower case): what this login may do with it (RFC 3659's
    /// `w`: write it in place).
    pub perm: Option<String>,
    /// `UNIX.owner` (GCT's).
    pub owner: Option<String>,
}

impl Facts {
    /// The facts of a line of MLST facts (` facts; path`); `None` for
    /// anything but a file or directory. Only the facts are read, never
    /// the path after them (a file may be named `type=dir`).
    pub(crate) fn of_line(line: &str) -> Option<Facts> {
        let facts = facts_of(line)?;
        let is_dir = match fact(&facts, "type")? {
            "dir" => true,
            "file" => false,
            _ => return None,
        };
        let size = fact(&facts, "size").and_then(|s| s.parse().ok()).unwrap_or(0);
        let unique = fact(&facts, "unique").map(String::from);
        let (perm, owner) = (fact(&facts, "perm").map(String::from), fact(&facts, "unix.owner").map(String::from));
        Some(Facts { is_dir, size, unique, meta: meta_of_facts(&facts), perm, owner })
    }
}

/// The facts (lower case) of an MLST reply's line that holds them
/// (` Type=file;...; /path`); `None` for its other lines.
fn facts_of(line: &str) -> Option<String> {
    let facts = line.trim_start().split_once(' ')?.0.to_ascii_lowercase();
    fact(&facts, "type").is_some().then_some(facts)
}

/// `RNFR from` and `RNTO to` for each pair.
pub(crate) fn rename_cmds(moves: &[(Vec<u8>, Vec<u8>)]) -> Vec<Vec<u8>> {
    moves.iter().flat_map(|(from, to)| [path_cmd("RNFR ", from), path_cmd("RNTO ", to)]).collect()
}

/// `SITE CHMOD` of `p` to `mode`'s permission bits and sticky bit (no
/// setuid or setgid: `cp -a` drops them too where the owner changes).
pub(crate) fn chmod_cmd(p: &[u8], mode: u32) -> Vec<u8> {
    path_cmd(&format!("SITE CHMOD {:o} ", mode & 0o1777), p)
}

/// `MLST path` and `SIZE path`, the path as its bytes.
pub(super) fn stat_cmds(path: &[u8]) -> [Vec<u8>; 2] {
    [path_cmd("MLST ", path), path_cmd("SIZE ", path)]
}

/// Whether a refused MKD says the name exists already: RFC 959's 521
/// ("already exists"), or a reply naming it, as GCT's (`553-GlobusError:
/// v=1 c=PATH_EXISTS`, `GridFTP-Error-String: File exists`) and ours
/// (`553 /d: File exists`) do. "No such file", "does not exist" do not.
/// The path the reply echoes is not read: a directory named `exists` or
/// `no such` says nothing.
fn says_exists(r: &Reply, path: &[u8]) -> bool {
    let mut t = r.full_text().to_ascii_lowercase();
    let path = String::from_utf8_lossy(path).to_ascii_lowercase();
    if !path.is_empty() {
        t = t.replace(path.as_str(), "");
    }
    let missing = ["not exist", "n't exist", "nonexist", "non-exist", "no such"].iter().any(|w| t.contains(w));
    r.code == 521 || (t.contains("exist") && !missing)
}

/// What MLST and SIZE said of a remote path.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RemoteStat {
    pub is_dir: bool,
    pub size: u64,
    /// Whether MLST gave facts (the path exists, as a directory or not).
    pub listed: bool,
    /// Mode and mtime, from the `UNIX.mode` and `Modify` facts.
    pub meta: Option<TreeRoot>,
}

/// What the replies to MLST and SIZE say.
pub(super) fn stat_of(mlst: &lightpath_proto::Reply, size: &lightpath_proto::Reply) -> RemoteStat {
    let facts = if mlst.is_ok() { mlst.lines.iter().find_map(|l| Facts::of_line(l)) } else { None };
    let size = if size.code == 213 { size.text().trim().parse().unwrap_or(0) } else { 0 };
    let (is_dir, listed) = (facts.as_ref().is_some_and(|f| f.is_dir), facts.is_some());
    RemoteStat { is_dir, size, listed, meta: facts.and_then(|f| f.meta) }
}

/// The mode (`UNIX.mode`, octal) and mtime (`Modify`, with its fraction of a second) in
/// MLST facts (`fact=value;...`); `None` without a mode.
fn meta_of_facts(facts: &str) -> Option<TreeRoot> {
    let mode = fact(facts, "unix.mode").and_then(|m| u32::from_str_radix(m, 8).ok()).filter(|m| *m <= 0o7777)?;
    let modify = fact(facts, "modify").and_then(lightpath_proto::ftptime::parse_ns);
    let mtime_ns = modify.and_then(|(s, ns)| s.checked_mul(1_000_000_000)?.checked_add(i64::from(ns)));
    Some(TreeRoot { mode, mtime_ns })
}

/// The value of the fact `key` (any case) in MLST/MLSD facts
/// (`Key=value;Key=value;`), the first if it is there twice.
pub(crate) fn fact<'a>(facts: &'a str, key: &str) -> Option<&'a str> {
    facts.split(';').filter_map(|f| f.split_once('=')).find(|(k, _)| k.eq_ignore_ascii_case(key)).map(|kv| kv.1)
}

/// `CKSM alg off len path`: the digest of `len` bytes at `off` (`None`:
/// `-1`, to the end).
fn cksm_cmd(alg: &str, off: u64, len: Option<u64>, path: &[u8]) -> Vec<u8> {
    let len = len.map_or_else(|| "-1".to_string(), |l| l.to_string());
    path_cmd(&format!("CKSM {alg} {off} {len} "), path)
}

/// `verb` (with its space) and a raw path: names need not be UTF-8.
pub(crate) fn path_cmd(verb: &str, path: &[u8]) -> Vec<u8> {
    let mut c = verb.as_bytes().to_vec();
    c.extend_from_slice(path);
    c
}

#[cfg(test)]
mod tests {
    use super::says_exists;

    #[test]
    fn mlsd_entries_say_which_are_links() {
        let data = b"Type=dir;UNIX.slink=.; self\r\nType=file;Size=5;UNIX.slink=; odd\r\nType=dir;Size=1; d\r\n";
        let got: Vec<(Vec<u8>, bool, bool)> =
            super::parse_listing(data, false).into_iter().map(|e| (e.name, e.is_dir, e.link)).collect();
        assert_eq!(got, [(b"self".to_vec(), true, true), (b"odd".to_vec(), false, true), (b"d".to_vec(), true, false)]);
    }

    /// GCT's MLSR: relative paths, blank lines between entries, symlinks
    /// as `Type=slink` (kept only when asked for), other types left out.
    #[test]
    fn a_recursive_listing_keeps_slinks_unresolved() {
        let data = b"Type=cdir;X.count=3; .\r\n\r\nType=dir;Size=4096; a\r\n\r\n\
            Type=file;Size=3;Error=InvalidLink; a/f\r\n\r\nType=slink;UNIX.slink=../x; a/l\r\n\r\n\
            Type=OS.unix=pipe;Size=0; a/p\r\n";
        let got = |slinks| -> Vec<(Vec<u8>, bool, u64, bool, bool)> {
            super::parse_listing(data, slinks)
                .into_iter()
                .map(|e| (e.name, e.is_dir, e.size, e.link, e.unresolved))
                .collect()
        };
        let (a, f, l) =
            ((b"a".to_vec(), true, 4096, false, false), (b"a/f".to_vec(), false, 3, false, false), b"a/l".to_vec());
        assert_eq!(got(true), [a.clone(), f.clone(), (l, false, 0, true, true)]);
        assert_eq!(got(false), [a, f]);
    }

    #[test]
    fn what_mlst_says_a_path_is() {
        let line = |l: &str| super::Facts::of_line(l).map(|f| (f.is_dir, f.size, f.unique));
        assert_eq!(line(" Type=file;Size=3;UNIX.slink=/t/x; /t/a/lnk"), Some((false, 3, None)));
        assert_eq!(line(" type=DIR;size=4096;Unique=fe00-2; /t/a"), Some((true, 4096, Some("fe00-2".into()))));
        for none in [" Type=OS.unix=pipe;Size=0; /t/p", " Size=3; /t/f", "250 End.", ""] {
            assert_eq!(line(none), None, "{none}");
        }
    }

    #[test]
    fn a_mode_and_mtime_are_read_from_mlst_facts() {
        use super::{Facts, TreeRoot};
        let meta = |l: &str| Facts::of_line(l).and_then(|f| f.meta);
        let line = " Type=dir;Size=4096;Modify=20261121191802;Perm=el;UNIX.mode=0700;Unique=1-2; /a b";
        let want = TreeRoot { mode: 0o700, mtime_ns: Some(1_795_288_682_000_000_000) };
        assert_eq!(meta(line), Some(want));
        assert_eq!(meta(" type=dir;unix.mode=2775; /t"), Some(TreeRoot { mode: 0o2775, mtime_ns: None }));
        for bad in [" Type=dir;Modify=20261121191802; /t", " Type=dir;UNIX.mode=9; /t", "250 End", ""] {
            assert_eq!(meta(bad), None, "{bad}");
        }
    }

    /// MLST's answer is read from its facts: a file whose path holds
    /// `type=dir` is a file, and a reply without a facts line is neither.
    #[test]
    fn mlst_says_a_path_is_a_directory_only_in_its_facts() {
        let mlst = |lines: &[&str]| Reply { code: 250, lines: lines.iter().map(|l| l.to_string()).collect() };
        let size = Reply::new(213, "3");
        let file = mlst(&["Listing /d/type=dir;x", " Type=file;Size=3;UNIX.mode=0644; /d/type=dir;x", "End."]);
        let st = super::stat_of(&file, &size);
        assert!(!st.is_dir && st.size == 3 && st.meta.is_some_and(|m| m.mode == 0o644), "{st:?}");
        let dir = mlst(&["Listing /d", " Type=dir;Size=4096; /d", "End."]);
        assert!(super::stat_of(&dir, &size).is_dir);
        assert!(!super::stat_of(&mlst(&["Listing /type=dir", "End."]), &size).is_dir);
    }
    use lightpath_proto::Reply;

    #[test]
    fn an_mkd_refusal_says_whether_the_name_exists() {
        let gct = ["GlobusError: v=1 c=PATH_EXISTS", "GridFTP-Errno: 17", "GridFTP-Error-String: File exists", "End."];
        assert!(says_exists(&Reply { code: 553, lines: gct.map(String::from).to_vec() }, b"/d"));
        assert!(says_exists(&Reply::new(553, "/d: File exists (os error 17)"), b"/d"));
        assert!(says_exists(&Reply::new(521, "\"/d\" directory already present; taking no action"), b"/d"));
        assert!(says_exists(&Reply::new(550, "/d: File exists"), b"/d"));
        for refusal in ["/d: Permission denied", "/a/d: No such file or directory", "parent does not exist", "x"] {
            assert!(!says_exists(&Reply::new(550, refusal), b"/a/d"), "{refusal}");
        }
        // The name echoed is not the answer, either way.
        assert!(!says_exists(&Reply::new(550, "/up/exists: Permission denied"), b"/up/exists"));
        assert!(says_exists(&Reply::new(553, "/up/No Such: File exists"), b"/up/No Such"));
    }
}
