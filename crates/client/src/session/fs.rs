//! File-system commands of a session: MLST/SIZE stat, MKD, CKSM (one, or
//! many pipelined), MLSD listings.

use super::{data_channel, fill_err, Session};
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
}

impl Session {
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

    /// The mode and mtime of `path` as its MLST facts (`UNIX.mode`,
    /// `Modify`) said them, if [`Session::stat`] asked (or the login did)
    /// and the server gave a mode.
    pub(crate) fn stat_meta(&self, path: &[u8]) -> Option<TreeRoot> {
        self.stats.get(path).and_then(|st| st.meta)
    }

    /// `SIZE` and `MDTM path` sent together (one round trip, not cached):
    /// the file's size and modification time as the server says them, if
    /// it does.
    pub async fn size_and_mtime(&mut self, path: &[u8]) -> Result<(Option<u64>, Option<String>), ClientError> {
        self.ctl.flush().await?;
        self.ctl.send(&path_cmd("SIZE ", path)).await?;
        self.ctl.send(&path_cmd("MDTM ", path)).await?;
        let size = self.ctl.final_reply().await?;
        let mdtm = self.ctl.final_reply().await?;
        let size = (size.code == 213).then(|| size.text().trim().parse().ok()).flatten();
        Ok((size, (mdtm.code == 213).then(|| mdtm.text().trim().to_string())))
    }

    /// `SIZE path`, if the server supports it and the file exists.
    pub async fn remote_size(&mut self, path: &[u8]) -> Result<Option<u64>, ClientError> {
        let r = self.ctl.cmd(path_cmd("SIZE ", path)).await?;
        Ok(if r.code == 213 { r.text().trim().parse().ok() } else { None })
    }

    /// `MKD path`. A refusal (550, 553, 521) is also what servers say of a
    /// directory that exists, so it is no error when MLST finds the
    /// directory there. A server without MLST is taken at its word: a
    /// reply saying the name exists ([`says_exists`]) is no error, any
    /// other refusal (550 permission denied, a missing parent) is. The
    /// error names the directory, and fails the copy once, not each
    /// file's STOR.
    pub async fn mkdir(&mut self, path: &[u8]) -> Result<(), ClientError> {
        self.ctl.flush().await?;
        self.ctl.send(&path_cmd("MKD ", path)).await?;
        let r = self.ctl.final_reply().await?;
        if !r.is_error() {
            return Ok(());
        }
        let exists = match r.code {
            550 | 553 | 521 if self.feat.mlst => self.is_dir(path).await?,
            550 | 553 | 521 => says_exists(&r),
            _ => false,
        };
        if exists {
            return Ok(());
        }
        Err(self.ctl.unexpected(&format!("MKD {}", String::from_utf8_lossy(path)), &r))
    }

    /// Whether MLST finds a directory at `path` (asked afresh, not cached).
    async fn is_dir(&mut self, path: &[u8]) -> Result<bool, ClientError> {
        self.ctl.send(&path_cmd("MLST ", path)).await?;
        let r = self.ctl.final_reply().await?;
        Ok(stat_of(&r, &Reply::new(0, "")).is_dir)
    }

    /// `DELE path`: remove a file on the server.
    pub async fn delete(&mut self, path: &[u8]) -> Result<(), ClientError> {
        self.ctl.flush().await?;
        let cmd = path_cmd("DELE ", path);
        self.ctl.send(&cmd).await?;
        let r = self.ctl.final_reply().await?;
        if r.is_error() {
            return Err(self.ctl.unexpected(&String::from_utf8_lossy(&cmd), &r));
        }
        Ok(())
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
        let r = self.ctl.ok(cksm_cmd(alg, off, len, path)).await?;
        Ok(r.text().trim().to_ascii_lowercase())
    }

    /// `CKSM alg 0 -1 path` of each of `paths`, with up to `pipeline`
    /// commands in flight (one round trip for a batch, not one per file).
    /// One result per path, in order; a lost control connection fails the rest.
    pub async fn checksums(&mut self, alg: &str, paths: &[Vec<u8>]) -> Vec<Result<String, ClientError>> {
        let cmds: Vec<Result<Vec<u8>, ClientError>> =
            paths.iter().map(|p| cksm_cmd(alg, 0, None, p)).map(|c| self.ctl.check(&c).map(|()| c)).collect();
        if let Err(e) = self.ctl.flush().await {
            return fill_err(Vec::new(), paths.len(), e);
        }
        let (window, mut sent, mut out) = (self.opts.pipeline.max(1), 0, Vec::new());
        self.ctl.cork();
        for (i, cmd) in cmds.iter().enumerate() {
            while sent < cmds.len() && sent < i + window {
                if let Ok(c) = &cmds[sent] {
                    if let Err(e) = self.ctl.send(c).await {
                        return fill_err(out, paths.len(), e);
                    }
                }
                sent += 1;
            }
            let r = match cmd {
                Ok(c) => self.cksm_reply(c).await,
                Err(e) => Err(e.clone()),
            };
            if let Err(e @ ClientError::Control(..)) = &r {
                let e = e.clone();
                return fill_err(out, paths.len(), e);
            }
            out.push(r);
        }
        // When no name could be sent nothing was read: nothing stays corked
        // (a failed write shows at the next command).
        let _ = self.ctl.uncork().await;
        out
    }

    /// The digest a `CKSM` already sent answers with.
    async fn cksm_reply(&mut self, cmd: &[u8]) -> Result<String, ClientError> {
        let r = self.ctl.final_reply().await?;
        if r.is_error() {
            return Err(self.ctl.unexpected(&String::from_utf8_lossy(cmd), &r));
        }
        Ok(r.text().trim().to_ascii_lowercase())
    }

    /// Directory listing with MLSD (MODE S, fresh PASV, as GCT expects).
    pub async fn list(&mut self, path: &[u8]) -> Result<Vec<Entry>, ClientError> {
        self.set_mode(false).await?;
        let addr = self.pasv().await?;
        let mut cmd = b"MLSD ".to_vec();
        cmd.extend_from_slice(path);
        self.ctl.send(&cmd).await?;
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
            self.dc = Some(data_channel(self.recv_window, self.opts.congestion.as_deref()));
            return Err(self.ctl.unexpected("MLSD", &first));
        }
        let (dc, data) = job.await.map_err(|e| ClientError::Local(e.to_string()))?;
        self.dc = Some(dc);
        let fin = if first.is_preliminary() { self.ctl.final_reply().await? } else { first };
        if !fin.is_ok() {
            return Err(self.ctl.unexpected("MLSD", &fin));
        }
        Ok(parse_mlsd(&data?))
    }
}

/// Parse MLSD lines (`facts; name`), skipping cdir/pdir.
pub fn parse_mlsd(data: &[u8]) -> Vec<Entry> {
    let mut out = Vec::new();
    for line in data.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(sp) = line.iter().position(|&b| b == b' ') else { continue };
        let (facts, name) = (String::from_utf8_lossy(&line[..sp]).to_ascii_lowercase(), &line[sp + 1..]);
        let kind = fact(&facts, "type").unwrap_or_default();
        if kind == "cdir" || kind == "pdir" || name.is_empty() || name == b"." || name == b".." {
            continue;
        }
        let is_dir = kind == "dir";
        if !(is_dir || kind == "file") {
            continue;
        }
        let size = fact(&facts, "size").and_then(|s| s.parse().ok()).unwrap_or(0);
        let link = fact(&facts, "unix.slink").is_some();
        out.push(Entry { name: name.to_vec(), is_dir, size, link });
    }
    out
}

/// `MLST path` and `SIZE path`, the path as its bytes.
pub(super) fn stat_cmds(path: &[u8]) -> [Vec<u8>; 2] {
    [path_cmd("MLST ", path), path_cmd("SIZE ", path)]
}

/// Whether a refused MKD says the name exists already: RFC 959's 521
/// ("already exists"), or a reply naming it, as GCT's (`553-GlobusError:
/// v=1 c=PATH_EXISTS`, `GridFTP-Error-String: File exists`) and ours
/// (`553 /d: File exists`) do. "No such file", "does not exist" do not.
fn says_exists(r: &Reply) -> bool {
    let t = r.full_text().to_ascii_lowercase();
    let missing = ["not exist", "n't exist", "nonexist", "non-exist", "no such"].iter().any(|w| t.contains(w));
    r.code == 521 || (t.contains("exist") && !missing)
}

/// What MLST and SIZE said of a remote path.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RemoteStat {
    pub is_dir: bool,
    pub size: u64,
    /// Mode and mtime, from the `UNIX.mode` and `Modify` facts.
    pub meta: Option<TreeRoot>,
}

/// What the replies to MLST and SIZE say.
pub(super) fn stat_of(mlst: &lightpath_proto::Reply, size: &lightpath_proto::Reply) -> RemoteStat {
    let is_dir = mlst.is_ok() && mlst.lines.iter().any(|l| l.to_ascii_lowercase().contains("type=dir"));
    let size = if size.code == 213 { size.text().trim().parse().unwrap_or(0) } else { 0 };
    let meta = if mlst.is_ok() { mlst.lines.iter().find_map(|l| meta_of_facts(l)) } else { None };
    RemoteStat { is_dir, size, meta }
}

/// The mode (`UNIX.mode`, octal) and mtime (`Modify`, whole seconds) in a
/// line of MLST facts (`fact=value;...; path`); `None` without a mode.
fn meta_of_facts(line: &str) -> Option<TreeRoot> {
    let facts = line.trim_start().split_once(' ')?.0;
    let mode = fact(facts, "unix.mode").and_then(|m| u32::from_str_radix(m, 8).ok()).filter(|m| *m <= 0o7777)?;
    let modify = fact(facts, "modify").and_then(lightpath_proto::ftptime::parse);
    Some(TreeRoot { mode, mtime_ns: modify.and_then(|s| s.checked_mul(1_000_000_000)) })
}

/// The value of the fact `key` (any case) in MLST/MLSD facts
/// (`Key=value;Key=value;`), the first if it is there twice.
fn fact<'a>(facts: &'a str, key: &str) -> Option<&'a str> {
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
            super::parse_mlsd(data).into_iter().map(|e| (e.name, e.is_dir, e.link)).collect();
        assert_eq!(got, [(b"self".to_vec(), true, true), (b"odd".to_vec(), false, true), (b"d".to_vec(), true, false)]);
    }

    #[test]
    fn a_mode_and_mtime_are_read_from_mlst_facts() {
        use super::{meta_of_facts, TreeRoot};
        let line = " Type=dir;Size=4096;Modify=20261121191802;Perm=el;UNIX.mode=0700;Unique=1-2; /a b";
        let want = TreeRoot { mode: 0o700, mtime_ns: Some(1_795_288_682_000_000_000) };
        assert_eq!(meta_of_facts(line), Some(want));
        assert_eq!(meta_of_facts(" type=dir;unix.mode=2775; /t"), Some(TreeRoot { mode: 0o2775, mtime_ns: None }));
        for bad in [" Type=dir;Modify=20261121191802; /t", " Type=dir;UNIX.mode=9; /t", "250 End", ""] {
            assert_eq!(meta_of_facts(bad), None, "{bad}");
        }
    }
    use lightpath_proto::Reply;

    #[test]
    fn an_mkd_refusal_says_whether_the_name_exists() {
        let gct = ["GlobusError: v=1 c=PATH_EXISTS", "GridFTP-Errno: 17", "GridFTP-Error-String: File exists", "End."];
        assert!(says_exists(&Reply { code: 553, lines: gct.map(String::from).to_vec() }));
        assert!(says_exists(&Reply::new(553, "/d: File exists (os error 17)")));
        assert!(says_exists(&Reply::new(521, "\"/d\" directory already present; taking no action")));
        assert!(says_exists(&Reply::new(550, "/d: File exists")));
        for refusal in ["/d: Permission denied", "/a/d: No such file or directory", "parent does not exist", "x"] {
            assert!(!says_exists(&Reply::new(550, refusal)), "{refusal}");
        }
    }
}
