//! Uploads of a session: pipelined ALLO+STOR over the reused MODE E
//! channel (or connections opened ahead), and MODE S.

use super::batch::{Batch, Round};
use super::{FileOp, Session};
use crate::local::LocalSource;
use crate::resume::Stamp;
use crate::ClientError;
use lightpath_engine::{Growth, SendPlan, GROWN_BLOCK};
use lightpath_proto::held::TreeRoot;
use lightpath_proto::RangeSet;

/// Files still to send, by their place in the batch.
type Todo = Vec<(usize, LocalSource, FileOp)>;

/// A file ready to go: its `STOR` (or `ESTO`) line, its size, and what a
/// lightpath server kept of it from an earlier try (sent as `REST`).
#[derive(Debug, Clone, Default)]
struct Prepared {
    stor: Vec<u8>,
    size: u64,
    kept: Option<RangeSet>,
    stamp: Option<Stamp>,
    /// The source's mode and mtime, sent ahead (`OPTS STOR`) to a
    /// lightpath server, which gives them to a file its STOR creates: it
    /// made every such file 0644 and of the time it was stored, so a
    /// private (0600) file became readable to all there (a defect hunt's
    /// find; GCT's get `SITE CHMOD` and `MFMT`: `job::publish`).
    meta: Option<TreeRoot>,
}

impl Session {
    /// Upload files. In MODE E, ALLO+STOR for up to `pipeline` files are
    /// sent ahead; each file's data is sent only after its own 1xx reply,
    /// so a refused STOR never puts bytes on the channel for the wrong file.
    /// Behind a lost data channel, files go again after a new PASV
    /// ([`super::batch`]). A `STOR` sent with the login is the first
    /// file's when it names it, else it is aborted.
    pub async fn put_many(&mut self, mut ops: Vec<(LocalSource, FileOp)>) -> Vec<Result<u64, ClientError>> {
        let mut out = Vec::new();
        if let Some((path, size, meta)) = self.spec_stor.take() {
            let hit = ops.first().is_some_and(|(_, op)| op.part.is_none() && op.remote == path);
            if !hit {
                if let Err(e) = self.drop_stor(&path, meta.is_some()).await {
                    return super::fill_err(out, ops.len(), e);
                }
            } else {
                let (src, op) = ops.remove(0);
                match self.put_speculated(src.clone(), &op, (size, meta)).await {
                    Some(Err(e @ ClientError::Control(..))) => return super::fill_err(out, ops.len() + 1, e),
                    Some(r) => out.push(r),
                    None => ops.insert(0, (src, op)),
                }
            }
        }
        out.extend(self.put_many_now(ops).await);
        out
    }

    /// `ALLO` and `STOR` for the first file of an upload, sent with the
    /// login after the connections opened ahead: the upload starts a round
    /// trip sooner ([`super::Speculation::Upload`]).
    pub(crate) async fn speculate_stor(
        &mut self,
        path: &[u8],
        size: u64,
        meta: Option<TreeRoot>,
    ) -> Result<(), ClientError> {
        let stor = stor_cmd(&FileOp { remote: path.to_vec(), part: None, resume: None });
        if self.ctl.check(&stor).is_err() {
            return Ok(()); // reported as that file's failure by put_many
        }
        self.send_put_cmds(&Prepared { stor, size, meta, ..Prepared::default() }).await?;
        self.spec_stor = Some((path.to_vec(), size, meta));
        Ok(())
    }

    /// The file of the `STOR` sent with the login, `size` bytes as its
    /// `ALLO` said. `None`: the server refused the connections opened
    /// ahead, so the STOR had none (our server answers 425); the file goes
    /// again the usual way.
    async fn put_speculated(
        &mut self,
        src: LocalSource,
        op: &FileOp,
        (size, meta): (u64, Option<TreeRoot>),
    ) -> Option<Result<u64, ClientError>> {
        if let Err(e) = self.settle().await {
            return Some(Err(e));
        }
        if self.cached_send() > 0 {
            let stamp = self.is_lightpath().then(|| src.stamp()).flatten();
            return Some(self.put_one_e(src, op, Prepared { size, stamp, meta, ..Prepared::default() }).await);
        }
        if let Err(e) = self.setup_replies(meta.is_some()).await {
            return Some(Err(e));
        }
        match self.ctl.reply().await {
            Ok(r) if r.code / 100 == 4 => None,
            Ok(r) if r.is_preliminary() => Some(Err(self.abort_taken("STOR", &r).await)),
            Ok(r) => Some(Err(self.ctl.unexpected("STOR", &r))),
            Err(e) => Some(Err(e)),
        }
    }

    /// Read the replies of a `STOR` sent with the login that names no file
    /// of this upload, aborting it if the server took it.
    async fn drop_stor(&mut self, path: &[u8], meta: bool) -> Result<(), ClientError> {
        self.settle().await?;
        self.setup_replies(meta).await?;
        let r = self.ctl.reply().await?;
        tracing::debug!(path = %String::from_utf8_lossy(path), code = r.code, "speculative STOR not wanted");
        if r.is_preliminary() {
            let _ = self.abort_taken("STOR", &r).await;
        }
        Ok(())
    }

    async fn put_many_now(&mut self, ops: Vec<(LocalSource, FileOp)>) -> Vec<Result<u64, ClientError>> {
        if !self.can_mode_e() {
            let mut out = Vec::new();
            for (src, op) in ops {
                out.push(self.put_stream(src, &op).await);
            }
            return out;
        }
        let todo: Todo = ops.into_iter().enumerate().map(|(i, (s, op))| (i, s, op)).collect();
        let batch = self.in_rounds(todo, async |s: &mut Session, t, b: &mut Batch| s.put_round(t, b).await).await;
        if let Err(e) = self.ctl.uncork().await {
            tracing::debug!("control: {e}");
        }
        batch.finish()
    }

    /// Send ALLO+STOR for the files of `todo` (pipelined) and their data,
    /// until all are done or the data channel is lost. Returns the files to
    /// send again after a new PASV; an error is the session's.
    async fn put_round(&mut self, todo: Todo, batch: &mut Batch) -> Result<Todo, ClientError> {
        self.data_lost = false;
        self.prepare_put().await?;
        // A source that cannot be read is reported before its STOR is sent:
        // once the server says 150/125 it waits for that file's bytes.
        // So is a name that cannot travel in a command.
        let resumes = self.is_lightpath();
        let prepared: Vec<Result<Prepared, ClientError>> =
            todo.iter().map(|(_, s, op)| prepare(&self.ctl, s, op, resumes)).collect();
        let (mut round, mut again) = (Round::default(), Vec::new());
        // The first batch of ALLO+STOR leaves in one piece with the first reply read.
        self.ctl.cork();
        for (k, (i, src, op)) in todo.into_iter().enumerate() {
            while round.sending() && round.sent < prepared.len() && round.sent < k + self.opts.pipeline.max(1) {
                if let Ok(p) = &prepared[round.sent] {
                    self.send_put_cmds(p).await?;
                }
                round.sent += 1;
            }
            match &prepared[k] {
                Err(e) => {
                    batch.record(i, Err(e.clone()), false);
                }
                Ok(_) if k >= round.sent => again.push((i, src, op)),
                Ok(p) => {
                    let r = self.put_one_e(src.clone(), &op, p.clone()).await;
                    if let Err(e @ ClientError::Control(..)) = r {
                        return Err(e);
                    }
                    if batch.record(i, r, round.lost_at.is_some()) {
                        again.push((i, src, op));
                    }
                    round.note(std::mem::take(&mut self.data_lost));
                }
            }
        }
        Ok(again)
    }

    async fn prepare_put(&mut self) -> Result<(), ClientError> {
        self.set_mode(true).await?;
        self.settle().await?;
        if self.cached_send() == 0 {
            let addr = self.pasv().await?;
            self.dc().connect_to(vec![addr]);
        }
        Ok(())
    }

    /// Connections ready to send on (cached, or opened ahead).
    pub(crate) fn cached_send(&mut self) -> usize {
        self.dc().cached(lightpath_engine::Direction::Send)
    }

    /// ALLO (for a whole file: a STOR), the REST of what the server kept
    /// of it, and the STOR or ESTO line.
    async fn send_put_cmds(&mut self, p: &Prepared) -> Result<(), ClientError> {
        if p.stor.starts_with(b"STOR ") {
            if let Some(m) = &p.meta {
                self.ctl.send(&m.opts_for("STOR")).await?;
            }
            self.ctl.send(format!("ALLO {}", p.size).as_bytes()).await?;
            if let Some(kept) = &p.kept {
                self.ctl.send(&crate::resume::rest_cmd(kept)).await?;
            }
        }
        self.ctl.send(&p.stor).await
    }

    /// Read the replies of ALLO (and REST) of a whole file: the ranges
    /// the server keeps if it took the REST.
    async fn put_preamble(&mut self, p: &Prepared) -> Result<Option<RangeSet>, ClientError> {
        self.setup_replies(p.meta.is_some()).await?;
        let Some(kept) = &p.kept else { return Ok(None) };
        let r = self.ctl.final_reply().await?;
        let taken = r.code == 350;
        tracing::info!(code = r.code, kept = %kept, taken, "resuming an upload from what the server kept");
        Ok(taken.then(|| kept.clone()))
    }

    /// The replies of `OPTS STOR` (if `meta`: sent) and `ALLO`, both
    /// advisory: a server that refuses them stores the file all the same.
    async fn setup_replies(&mut self, meta: bool) -> Result<(), ClientError> {
        if meta {
            let _ = self.ctl.final_reply().await?;
        }
        let _ = self.ctl.final_reply().await?;
        Ok(())
    }

    /// Send one file whose (ALLO, REST and) STOR were already sent.
    async fn put_one_e(&mut self, src: LocalSource, op: &FileOp, p: Prepared) -> Result<u64, ClientError> {
        let size = p.size;
        let kept = if op.part.is_none() { self.put_preamble(&p).await? } else { None };
        let (ranges, wire_base) = match (op.part, &kept) {
            (Some((off, len)), _) => (vec![(off, off.saturating_add(len).min(size))], off),
            (None, Some(k)) => (k.missing(size).ranges().to_vec(), 0),
            (None, None) => (vec![(0, size)], 0),
        };
        let _ = self.ctl.take_confirmed(); // an earlier file's
        let streams = self.streams();
        // A lightpath server takes bigger blocks while much is left (as it
        // sends them to us: `Session::set_parallelism`); GCT gets `--block`.
        let grow = self.is_lightpath().then_some(Growth { max: GROWN_BLOCK, streams });
        let plan = SendPlan { ranges, wire_base, block: self.opts.block, grow };
        let mut dc = self.dc.take().unwrap_or_default();
        let (go_tx, go_rx) = std::sync::mpsc::channel::<bool>();
        let ctl = self.opts.control();
        let c2 = ctl.clone();
        let named = src.clone();
        let job = tokio::task::spawn_blocking(move || {
            let r = dc.prepare_send(streams).map_err(ClientError::from).and_then(|_| {
                // A refused STOR leaves the channel clean: keep the connections.
                if !go_rx.recv().unwrap_or(false) {
                    return Err(ClientError::Local("server refused the upload".into()));
                }
                // A source that cannot be sent as planned fails as a send
                // does: the connections close, so the server ends at once.
                let r = src.open().and_then(|s| {
                    named.as_planned(s.len(), size)?;
                    dc.send_e(s.as_ref(), &plan, &c2).map_err(|e| named.send_error(e))
                });
                if r.is_err() {
                    dc.drop_cache();
                }
                r
            });
            (dc, r)
        });
        let first = self.ctl.reply().await;
        let go = matches!(&first, Ok(r) if r.is_preliminary());
        let _ = go_tx.send(go);
        if !go {
            ctl.cancel();
            let (dc, _) = job.await.map_err(|e| ClientError::Local(e.to_string()))?;
            self.dc = Some(dc);
            let refused = Err(self.ctl.unexpected("STOR", &first?));
            // A refused restart keeps nothing; any other refusal of a
            // resumed STOR leaves the ranges as they were.
            return if kept.is_some() { self.settle_put(op, refused, (kept, p.stamp)) } else { refused };
        }
        let r = self.finish_stream_job(job, &ctl, &format!("STOR {}", String::from_utf8_lossy(&op.remote))).await;
        self.settle_put(op, r, (kept, p.stamp))
    }

    /// After an upload's try ([`crate::resume::Resume::settle`]), if it can
    /// resume (a stamped source: a whole file to a lightpath server).
    fn settle_put(
        &mut self,
        op: &FileOp,
        r: Result<u64, ClientError>,
        (kept, stamp): (Option<RangeSet>, Option<Stamp>),
    ) -> Result<u64, ClientError> {
        let confirmed = self.ctl.take_confirmed();
        let (Some(res), Some(stamp)) = (&op.resume, stamp) else { return r };
        // The server's own failure (451: its disk, say) kept nothing of the
        // upload: noted, `cp --partial` promised a resume that the next run
        // got 554 for (a defect hunt's find).
        if matches!(r, Err(ClientError::Refused { code: 451, .. })) {
            res.clear();
            return r;
        }
        let path = String::from_utf8_lossy(&op.remote);
        let gone =
            |code, reply: &str| format!("{path}: the server no longer holds the partial upload ({code} {reply})");
        res.settle(r, (kept, confirmed), stamp, ("an upload", "server"), gone)
    }

    async fn put_stream(&mut self, src: LocalSource, op: &FileOp) -> Result<u64, ClientError> {
        self.set_mode(false).await?;
        let addr = self.pasv().await?;
        self.ctl.send(&stor_cmd(op)).await?;
        let mut dc = self.dc.take().unwrap_or_default();
        dc.connect_to(vec![addr]);
        let ctl = self.opts.control();
        let c2 = ctl.clone();
        let part = op.part;
        let named = src.clone();
        let job = tokio::task::spawn_blocking(move || {
            let r = src.open().and_then(|s| {
                let (start, end) = match part {
                    Some((o, l)) => (o, o.saturating_add(l).min(s.len())),
                    None => (0, s.len()),
                };
                let c = dc.open_stream()?;
                dc.send_s(c, s.as_ref(), start, end, &c2).map_err(|e| named.send_error(e))
            });
            (dc, r)
        });
        self.finish_stream_job(job, &ctl, "STOR").await
    }
}

/// The STOR (or ESTO) line of `op`, the size of `src` and, where the
/// server `resumes` uploads, what it kept of `src`; or why the file cannot
/// be sent.
fn prepare(
    ctl: &crate::control::ControlConn,
    src: &LocalSource,
    op: &FileOp,
    resumes: bool,
) -> Result<Prepared, ClientError> {
    let stor = stor_cmd(op);
    ctl.check(&stor)?;
    let size = src.clone().open()?.len();
    // Only a whole file to a lightpath server can resume: only its source is stamped.
    let stamp = (resumes && op.part.is_none()).then(|| src.stamp()).flatten();
    let kept = match (&op.resume, &stamp) {
        (Some(r), Some(st)) => r.sent_of(st.clone()),
        _ => None,
    };
    let meta = (resumes && op.part.is_none()).then(|| src.meta()).flatten();
    Ok(Prepared { stor, size, kept, stamp, meta })
}

fn stor_cmd(op: &FileOp) -> Vec<u8> {
    let mut c = match op.part {
        Some((off, _)) => format!("ESTO A {off} ").into_bytes(),
        None => b"STOR ".to_vec(),
    };
    c.extend_from_slice(&op.remote);
    c
}
