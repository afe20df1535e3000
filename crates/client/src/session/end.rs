//! The end of a transfer: the server's final reply and the outcome of our
//! data job, both kept, so that a failure says what each side saw: the
//! server's reply (or why none came) and our end of the data channel's own
//! error (a stall, a reset), which is often the cause.

use super::{cancelled, Session, ABORT_WAIT};
use crate::{ClientError, DataEnd};
use lightpath_engine::{Control, DataChannel};
use lightpath_proto::Reply;
use std::time::Duration;
use tokio::task::JoinHandle;

/// A running data job, which gives the data channel back with its outcome.
pub(crate) type Job<T> = JoinHandle<(DataChannel, Result<T, ClientError>)>;

/// How long the server has to send its final reply once our end of the
/// data channel failed by itself (stalled, reset): a server that saw the
/// failure too answers at once, and one that is stuck would otherwise
/// keep the client for the whole reply timeout (never longer than that:
/// [`reply_after_data_failed`]).
pub(crate) const REPLY_AFTER_DATA_FAILED: Duration = Duration::from_secs(10);

/// [`REPLY_AFTER_DATA_FAILED`], or the reply timeout if that is shorter.
fn reply_after_data_failed() -> Duration {
    REPLY_AFTER_DATA_FAILED.min(crate::control::reply_timeout())
}

/// How a transfer ended.
pub(crate) struct Ended<T> {
    /// The final reply, or why none came.
    pub fin: Result<Reply, ClientError>,
    /// The data channel, back from the job.
    pub dc: DataChannel,
    /// What the data job did.
    pub data: Result<T, ClientError>,
}

impl<T> Ended<T> {
    /// The final reply if it is a 2xx, else the error, with the data
    /// side's own failure beside it ([`with_local_cause`]); `what` names
    /// the command for a refusal.
    pub fn checked_reply(&self, s: &Session, what: &str) -> Result<Reply, ClientError> {
        match &self.fin {
            Ok(r) if r.is_ok() => Ok(r.clone()),
            Ok(r) => Err(with_local_cause(s.ctl.unexpected(what, r), &self.data)),
            Err(e) => Err(with_local_cause(e.clone(), &self.data)),
        }
    }
}

/// What came first while a transfer ran.
enum First<T> {
    Reply(Result<Reply, ClientError>),
    Data((DataChannel, Result<T, ClientError>)),
    Cancelled,
}

impl Session {
    /// Wait for a transfer's final reply and its data job together.
    pub(crate) async fn finish_stream_job<T: Send + 'static>(
        &mut self,
        job: Job<T>,
        ctl: &Control,
        what: &str,
    ) -> Result<T, ClientError> {
        self.finish_job_with_reply(job, ctl, what).await.map(|(t, _)| t)
    }

    /// [`Session::finish_stream_job`], also giving the final (positive) reply.
    pub(crate) async fn finish_job_with_reply<T: Send + 'static>(
        &mut self,
        job: Job<T>,
        ctl: &Control,
        what: &str,
    ) -> Result<(T, Reply), ClientError> {
        self.finish_job_noting_failure(job, ctl, what, |_| {}).await
    }

    /// [`Session::finish_job_with_reply`], where `note` first sees a final
    /// reply that is a failure, and may take lines out of it
    /// ([`Reply::take_held`]).
    pub(crate) async fn finish_job_noting_failure<T: Send + 'static>(
        &mut self,
        job: Job<T>,
        ctl: &Control,
        what: &str,
        note: impl FnOnce(&mut Reply),
    ) -> Result<(T, Reply), ClientError> {
        self.broken_off = None;
        let mut end = self.end_transfer(job, ctl).await?;
        match (&mut end.fin, &mut self.broken_off) {
            (Ok(r), _) if r.is_error() => note(r),
            (_, Some(r)) if r.is_error() => note(r),
            _ => {}
        }
        let fin = end.checked_reply(self, what);
        let ok = fin.is_ok() && end.data.is_ok();
        self.keep_channel(end.dc, ok);
        let fin = fin?;
        end.data.map(|t| (t, fin))
    }

    /// Wait for the final reply of the running transfer and for its data
    /// job `job`, whichever ends first:
    /// - the reply: a 2xx waits for the job; anything else gives the job
    ///   [`ABORT_WAIT`] to end by itself (its own error says more than
    ///   our cancellation would), then cancels it;
    /// - the job, failed: the server has [`reply_after_data_failed`] to
    ///   answer, else the session is lost (a control-channel error);
    /// - Ctrl-C: the transfer is aborted ([`Session::abort`]).
    pub(crate) async fn end_transfer<T: Send + 'static>(
        &mut self,
        mut job: Job<T>,
        ctl: &Control,
    ) -> Result<Ended<T>, ClientError> {
        let moved = || ctl.bytes();
        let first = tokio::select! {
            r = self.ctl.final_reply_alive(&moved) => First::Reply(r),
            j = &mut job => First::Data(joined(j)?),
            _ = cancelled(ctl) => First::Cancelled,
        };
        Ok(match first {
            First::Reply(fin) => {
                let (dc, data) = data_after_reply(job, &fin, ctl).await?;
                Ended { fin, dc, data }
            }
            First::Data((dc, data)) => Ended { fin: self.reply_after_data(&data, ctl).await, dc, data },
            First::Cancelled => {
                let keep = self.opts.keep_interrupted;
                if !keep {
                    self.abort().await;
                }
                let (dc, data) = joined(job.await)?;
                if keep {
                    self.break_off().await;
                }
                Ended { fin: Err(ClientError::Local("interrupted".into())), dc, data }
            }
        })
    }

    /// Break off an interrupted transfer without `ABOR` (`cp --partial`):
    /// its data job has ended and closed its connections, which the server
    /// takes for a broken transfer (and keeps an upload's partial file).
    /// Its failure reply, after the `111` marker of what it wrote, is read
    /// for at most [`ABORT_WAIT`] and kept ([`Session::broken_off`]); the
    /// session is given up.
    async fn break_off(&mut self) {
        let r = tokio::time::timeout(ABORT_WAIT, self.ctl.final_reply()).await;
        self.broken_off = r.ok().and_then(Result::ok);
        self.lost();
    }

    /// The final reply of the running transfer that `ctl` drives. If the
    /// job is stopped first (Ctrl-C), the transfer is aborted with ABOR:
    /// the server stops sending or drops what it received (or, with
    /// `keep_interrupted`, broken off: [`Session::break_off`]).
    async fn transfer_reply(&mut self, ctl: &Control) -> Result<Reply, ClientError> {
        tokio::select! {
            r = self.ctl.final_reply() => return r,
            _ = cancelled(ctl) => {}
        }
        // The data job has ended (this waits only after it).
        match self.opts.keep_interrupted {
            true => self.break_off().await,
            false => self.abort().await,
        }
        Err(ClientError::Local("interrupted".into()))
    }

    /// The final reply once the data job has ended with `data`: waited
    /// for as long as a reply may take after a job that did its part, for
    /// [`reply_after_data_failed`] after one that failed ([`ABORT_WAIT`]
    /// after one that failed for a local reason).
    async fn reply_after_data<T>(
        &mut self,
        data: &Result<T, ClientError>,
        ctl: &Control,
    ) -> Result<Reply, ClientError> {
        if data.is_ok() || ctl.is_cancelled() {
            return self.transfer_reply(ctl).await;
        }
        // Our end failed for a reason of its own (a local error): the
        // server's reply usually follows at once (our data connections
        // closed), but a tree download whose destination cannot be made
        // fails before it serves the data channel, and a server waiting
        // for data connections that will not come never answers. That was
        // a control-channel error after 10 s, retried (a defect hunt: 47
        // s); it is given up after ABORT_WAIT, failing for our reason.
        let local = matches!(data, Err(ClientError::Local(_)));
        let wait = if local { ABORT_WAIT } else { reply_after_data_failed() };
        match (tokio::time::timeout(wait, self.transfer_reply(ctl)).await, data) {
            (Ok(r), _) => r,
            (Err(_), Err(e)) if local => {
                let _ = self.abandon_transfer().await; // the session reopened before its next command
                Err(e.clone())
            }
            (Err(_), _) => {
                self.lost();
                let secs = wait.as_secs();
                let why = format!("no reply {secs} s after our end of the data channel failed");
                Err(ClientError::Control(self.ctl.name.clone(), why))
            }
        }
    }
}

/// The data job's outcome once the final reply `fin` came: awaited after
/// a 2xx; after anything else given [`ABORT_WAIT`] to end by itself, then
/// cancelled.
async fn data_after_reply<T>(
    mut job: Job<T>,
    fin: &Result<Reply, ClientError>,
    ctl: &Control,
) -> Result<(DataChannel, Result<T, ClientError>), ClientError> {
    if !matches!(fin, Ok(r) if r.is_ok()) {
        match tokio::time::timeout(ABORT_WAIT, &mut job).await {
            Ok(j) => return joined(j),
            Err(_) => ctl.cancel(),
        }
    }
    joined(job.await)
}

/// A joined data job, or why it could not be (it panicked).
fn joined<T>(
    j: Result<(DataChannel, Result<T, ClientError>), tokio::task::JoinError>,
) -> Result<(DataChannel, Result<T, ClientError>), ClientError> {
    j.map_err(|e| ClientError::Local(e.to_string()))
}

/// A server's refusal, or a control connection that failed (a reply that
/// never came), with our own end's failure beside it: a full local disk
/// shows on the server as a broken data connection, and a stalled or
/// reset data connection is why a reply never came. A refusal that came
/// as our end failed by itself (a disk, a source file, the peer's rules)
/// follows that failure, which comes first ([`ClientError::HereFailed`]);
/// a lost control connection stays [`ClientError::Control`], which ends
/// the session's batch. Not when our end only stopped because we
/// cancelled it.
pub(crate) fn with_local_cause<T>(mut e: ClientError, data: &Result<T, ClientError>) -> ClientError {
    let Err(local) = data else { return e };
    let l = local.to_string();
    if l.ends_with("transfer aborted") || !matches!(e, ClientError::Refused { .. } | ClientError::Control(..)) {
        return e;
    }
    match &mut e {
        ClientError::Refused { here, .. } if !local.is_transient() => {
            *here = DataEnd::Failed;
            return ClientError::HereFailed { local: l, then: Box::new(e) };
        }
        ClientError::Refused { reply, here, code, .. } => {
            // A 450 says the server's file was busy (a tree's file that
            // changed as it was read): our end only saw the data stop.
            if *code != 450 {
                reply.push_str(&format!(" (here: {l})"));
            }
            *here = DataEnd::Broke;
        }
        ClientError::Control(_, why) => why.push_str(&format!(" (here: {l})")),
        _ => {}
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: u16) -> ClientError {
        let reply = "/t: log changed while being read".to_string();
        ClientError::Refused { server: "s".into(), cmd: "VRET /t".into(), reply, code, here: DataEnd::Fine }
    }

    /// Our end's transient failure goes beside a server's refusal, but not
    /// beside a 450 (a file that changed there), which it only follows.
    #[test]
    fn a_local_consequence_is_not_shown_beside_a_busy_file() {
        let local: Result<(), ClientError> = Err(ClientError::Data { msg: "peer closed".into(), transient: true });
        let busy = with_local_cause(refused(450), &local);
        assert!(matches!(&busy, ClientError::Refused { here: DataEnd::Broke, .. }), "{busy:?}");
        assert!(busy.is_transient() && !busy.to_string().contains("here:"), "{busy}");
        let other = with_local_cause(refused(426), &local).to_string();
        assert!(other.contains("(here: data channel: peer closed)"), "{other}");
    }
}
