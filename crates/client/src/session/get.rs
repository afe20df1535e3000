//! Downloads of a session: pipelined RETRs over the reused MODE E channel,
//! sent again behind a lost data channel ([`super::batch`]).

use super::batch::{Batch, Round};
use super::{check_whole, fill_err, retr_cmd, FileOp, Session};
use crate::local::{LocalTarget, OpenTarget};
use crate::resume::rest_cmd;
use crate::ClientError;
use lightpath_engine::{Control, DataChannel, Direction, RecvOpts};
use lightpath_proto::RangeSet;

/// Files still to fetch, by their place in the batch.
type Todo = Vec<(usize, FileOp, LocalTarget)>;

impl Session {
    /// Download files, keeping up to `pipeline` RETRs in flight on the reused
    /// MODE E channel. Returns one result per file. A `RETR` sent with the
    /// login is the first file's when it names it, else its file is
    /// received into nothing and forgotten.
    pub async fn get_many(&mut self, mut ops: Vec<(FileOp, LocalTarget)>) -> Vec<Result<u64, ClientError>> {
        let mut out = Vec::new();
        if let Some(path) = self.spec_retr.take() {
            let hit = ops.first().is_some_and(|(op, _)| op.part.is_none() && op.remote == path);
            let (op, target) = if hit {
                ops.remove(0)
            } else {
                (FileOp { remote: path, part: None, resume: None }, LocalTarget::Null)
            };
            let r = self.get_speculated(&op, target).await;
            if let Err(e @ ClientError::Control(..)) = &r {
                let n = ops.len() + usize::from(hit);
                return fill_err(out, n, e.clone());
            }
            if hit {
                out.push(r);
            }
        }
        out.extend(self.get_many_now(ops).await);
        out
    }

    async fn get_many_now(&mut self, ops: Vec<(FileOp, LocalTarget)>) -> Vec<Result<u64, ClientError>> {
        if !self.can_mode_e() {
            let mut out = Vec::new();
            for (op, t) in ops {
                out.push(self.get_stream(op, t).await);
            }
            return out;
        }
        let todo: Todo = ops.into_iter().enumerate().map(|(i, (op, t))| (i, op, t)).collect();
        let batch = self.in_rounds(todo, async |s: &mut Session, t, b: &mut Batch| s.get_round(t, b).await).await;
        batch.finish()
    }

    /// Send the RETRs of `todo` (pipelined) and receive their files, until
    /// all are done or the data channel is lost. Returns the files to send
    /// again after a new PORT; an error is the session's (control channel).
    async fn get_round(&mut self, todo: Todo, batch: &mut Batch) -> Result<Todo, ClientError> {
        self.data_lost = false;
        self.prepare_get().await?;
        // A name that cannot travel in a command fails alone, unsent.
        let cmds = self.checked(todo.iter().map(|(_, op, _)| retr_cmd(op)));
        // A file resumed from an earlier try asks for the ranges it lacks.
        let rests: Vec<Option<Vec<u8>>> = todo.iter().map(|(_, _, t)| t.kept().map(|h| rest_cmd(&h))).collect();
        let (mut round, mut again) = (Round::default(), Vec::new());
        // The first commands leave in one piece with the first reply read.
        self.ctl.cork();
        for (k, (i, op, target)) in todo.into_iter().enumerate() {
            while round.sending() && round.sent < cmds.len() && round.sent < k + self.opts.pipeline.max(1) {
                if let Ok(cmd) = &cmds[round.sent] {
                    if let Some(rest) = &rests[round.sent] {
                        self.ctl.send(rest).await?;
                    }
                    self.ctl.send(cmd).await?;
                }
                round.sent += 1;
            }
            if let Err(e) = &cmds[k] {
                batch.record(i, Err(e.clone()), false);
            } else if k >= round.sent {
                again.push((i, op, target)); // not sent: the channel was lost
            } else {
                let r = self.get_one_e(&op, target.clone()).await;
                if let Err(e @ ClientError::Control(..)) = r {
                    return Err(e);
                }
                if batch.record(i, r, round.lost_at.is_some()) {
                    again.push((i, op, target));
                }
                round.note(std::mem::take(&mut self.data_lost));
            }
        }
        Ok(again)
    }

    /// The file of the `RETR` sent with the login. A server that refused
    /// MODE E sends it in MODE S, on one connection to the PORT it accepted.
    async fn get_speculated(&mut self, op: &FileOp, target: LocalTarget) -> Result<u64, ClientError> {
        if self.can_mode_e() {
            return self.get_one_e(op, target).await;
        }
        // The setup's replies one by one: MODE E comes first, so a refusal
        // of it is the error flush reports.
        let setup = self.ctl.flush().await;
        if !matches!(&setup, Err(ClientError::Refused { cmd, .. }) if cmd == "MODE E") {
            return self.get_one_e(op, target).await;
        }
        self.mode_e = Some(false);
        self.parallelism = 0;
        let first = self.ctl.reply().await?;
        if !first.is_preliminary() {
            return Err(self.ctl.unexpected(&String::from_utf8_lossy(&super::retr_cmd(op)), &first));
        }
        let dc = self.dc.take().unwrap_or_default();
        self.recv_stream(dc, op, target).await
    }

    /// Receive one file whose RETR (and `REST`, when resuming) was sent.
    async fn get_one_e(&mut self, op: &FileOp, target: LocalTarget) -> Result<u64, ClientError> {
        let target = self.choose_io(target);
        let announced = target.size();
        let restarted = target.kept().is_some();
        self.settle().await?;
        if restarted {
            self.rest_reply(op).await?;
        }
        let first = self.ctl.reply().await?;
        if !first.is_preliminary() {
            return Err(self.ctl.unexpected(&String::from_utf8_lossy(&super::retr_cmd(op)), &first));
        }
        let base = op.part.map(|p| p.0).unwrap_or(0);
        let ctl = self.opts.control();
        let mut dc = self.dc.take().unwrap_or_default();
        let (c2, slot) = (ctl.clone(), target.resume_slot());
        let job = tokio::task::spawn_blocking(move || {
            let opts = RecvOpts { base, max_offset: u64::MAX >> 1, idle: dc.idle };
            let r = recv_into(&mut dc, target, &opts, &c2);
            (dc, r)
        });
        let end = self.end_transfer(job, &ctl).await?;
        let fin = end.checked_reply(self, &String::from_utf8_lossy(&super::retr_cmd(op)));
        let ok = fin.is_ok() && end.dc.cached(Direction::Recv) > 0;
        self.keep_channel(end.dc, ok);
        let (w, got) = match (fin, end.data) {
            (Ok(_), Ok(d)) => d,
            (Err(e), Ok((w, got))) => {
                // Every byte came but the server's reply did not: keep them.
                slot.inspect(|s| s.keep(w, got));
                return Err(e);
            }
            (Err(e), Err(_)) | (Ok(_), Err(e)) => return Err(e),
        };
        if op.part.is_none() {
            check_whole(op, got.is_contiguous_from(0), got.end(), announced)?;
        }
        w.finish(op.part.is_none().then_some(got.covered()))?;
        Ok(got.covered())
    }

    /// The reply to the `REST` sent before a resumed file's RETR. A server
    /// that refuses it sends the whole file, which lands on the same bytes.
    async fn rest_reply(&mut self, op: &FileOp) -> Result<(), ClientError> {
        let r = self.ctl.reply().await?;
        if r.code != 350 {
            let name = String::from_utf8_lossy(&op.remote);
            tracing::warn!(server = %self.ctl.name, "{name}: restart refused ({} {}); fetching it whole", r.code, r.full_text());
        }
        Ok(())
    }
}

/// The largest file whose data is drained when its target cannot be
/// opened, so that a reused channel stays in step (a new one costs a round
/// trip). A larger one's channel is closed instead, failing the server's
/// transfer at once: drained, a 20 GiB download into a directory that did
/// not exist took 21 s to fail, and would take hours on a WAN.
pub(crate) const DRAIN_AT_MOST: u64 = 16 << 20;

/// Receive a MODE E file into `target`, resuming what its slot kept.
/// Returns the open file and every range it now holds. A transfer that
/// fails leaves the file and the ranges written in the slot for the next
/// try ([`crate::resume`]); one whose target cannot be opened is drained
/// or its channel closed ([`DRAIN_AT_MOST`]).
fn recv_into(
    dc: &mut DataChannel,
    target: LocalTarget,
    opts: &RecvOpts,
    ctl: &Control,
) -> Result<(OpenTarget, RangeSet), ClientError> {
    let (slot, size) = (target.resume_slot(), target.size());
    let (w, have) = match target.open_resuming() {
        Ok(x) => x,
        Err(e) if size > DRAIN_AT_MOST => {
            dc.close();
            return Err(e);
        }
        Err(e) => return Err(dc.recv_e(&lightpath_engine::NullSink, opts, ctl).map_or_else(ClientError::from, |_| e)),
    };
    let r = dc.recv_e(w.sink().as_ref(), opts, ctl);
    match r {
        Ok(got) => {
            if !have.is_empty() {
                tracing::info!("resumed a download: {} bytes kept, {} received", have.covered(), got.covered());
            }
            Ok((w, have.union(&got)))
        }
        // Kept only when the network failed, or the copy was interrupted
        // (for `cp --partial`): not after a disk error or a peer that
        // broke the protocol's rules.
        Err(e) => {
            if e.is_transient() || ctl.is_cancelled() {
                slot.inspect(|s| s.keep(w, have.union(&ctl.take_written())));
            }
            Err(e.into())
        }
    }
}
