//! The results of a pipelined batch of transfers, and which files go again
//! after the data channel was lost.
//!
//! A transfer that fails once it has begun (a 451 after the 150, or our
//! own end of the data channel failing) leaves no data channel: both sides
//! drop their cached MODE E connections, and a GridFTP server (GCT) also
//! forgets the PORT or PASV, refusing every later transfer ("500 Command
//! failed") until it gets a new one. The commands pipelined behind the
//! failed one were sent before anyone knew: once the channel is lost,
//! nothing more is sent; those already sent are answered, and any of them
//! the server refused is sent once more, with the rest of the batch, after
//! a new PORT or PASV ([`Session::prepare_get`], `prepare_put`).

use super::Session;
use crate::ClientError;

/// One file's result, by its place in the batch.
#[derive(Debug)]
pub(super) struct Batch {
    out: Vec<Option<Result<u64, ClientError>>>,
    /// Sent once more already: its next result is final.
    again: Vec<bool>,
}

/// How far a round of a batch got: the file whose failure lost the data
/// channel was answered while the commands up to `sent` were out.
#[derive(Debug, Default)]
pub(super) struct Round {
    /// Commands of the round sent so far.
    pub sent: usize,
    /// The data channel was lost while the first `lost_at` commands of the
    /// round were out: none is sent after it.
    pub lost_at: Option<usize>,
}

impl Round {
    /// Whether more commands may be sent in this round.
    pub fn sending(&self) -> bool {
        self.lost_at.is_none()
    }

    /// Note the outcome of a transfer: `lost` says it lost the data channel.
    pub fn note(&mut self, lost: bool) {
        if lost && self.lost_at.is_none() {
            self.lost_at = Some(self.sent);
        }
    }
}

impl Batch {
    /// A batch of `n` files, none done.
    pub fn new(n: usize) -> Batch {
        Batch { out: (0..n).map(|_| None).collect(), again: vec![false; n] }
    }

    /// Record file `i`'s result `r`. `shadowed`: its command went out
    /// before the data channel was lost (by an earlier file). Returns
    /// whether the file is to be sent once more instead: a refusal in the
    /// shadow of a lost channel, the first time.
    pub fn record(&mut self, i: usize, r: Result<u64, ClientError>, shadowed: bool) -> bool {
        // Not only once: a round's first file is never shadowed, so each
        // round settles at least one file. Once, two files whose targets
        // could not be made (each losing the channel) in one batch failed
        // every file behind the second (a defect hunt's find).
        if shadowed && matches!(r, Err(ClientError::Refused { .. })) {
            tracing::info!(code = refused_code(&r), "transfer refused after the data channel was lost: sent again");
            self.again[i] = true;
            return true;
        }
        self.out[i] = Some(r);
        false
    }

    /// Every file without a result fails with `e`.
    pub fn fail_rest(&mut self, e: &ClientError) {
        for r in self.out.iter_mut().filter(|r| r.is_none()) {
            *r = Some(Err(e.clone()));
        }
    }

    /// The results in batch order.
    pub fn finish(self) -> Vec<Result<u64, ClientError>> {
        let lost = || Err(ClientError::Local("transfer not attempted".into()));
        self.out.into_iter().map(|r| r.unwrap_or_else(lost)).collect()
    }
}

impl Session {
    /// The results of `todo`'s files, moved in rounds by `round` (which
    /// returns the files to send again) until each has one. Another round
    /// follows a lost data channel and starts on a new one: connections
    /// made meanwhile for commands the server then refused (it had
    /// forgotten its PASV) would have been taken for a live channel, and
    /// the round sent without a new PASV, refused again.
    pub(super) async fn in_rounds<T>(
        &mut self,
        mut todo: Vec<T>,
        mut round: impl AsyncFnMut(&mut Session, Vec<T>, &mut Batch) -> Result<Vec<T>, ClientError>,
    ) -> Batch {
        let mut batch = Batch::new(todo.len());
        while !todo.is_empty() {
            match round(self, todo, &mut batch).await {
                Ok(again) => {
                    if !again.is_empty() {
                        self.dc().drop_cache();
                    }
                    todo = again;
                }
                Err(e) => {
                    batch.fail_rest(&e);
                    break;
                }
            }
        }
        batch
    }
}

fn refused_code(r: &Result<u64, ClientError>) -> u16 {
    match r {
        Err(ClientError::Refused { code, .. }) => *code,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::{Batch, Round};
    use crate::ClientError;

    fn refused() -> Result<u64, ClientError> {
        Err(ClientError::Refused {
            server: "h:1".into(),
            cmd: "RETR".into(),
            reply: "500 x".into(),
            code: 500,
            here: crate::DataEnd::Fine,
        })
    }

    #[test]
    fn a_refusal_behind_a_lost_channel_goes_again() {
        let mut b = Batch::new(3);
        assert!(!b.record(0, refused(), false), "not shadowed: final");
        assert!(b.record(1, refused(), true), "shadowed: again");
        assert!(b.record(1, refused(), true), "shadowed in the next round too: again");
        assert!(!b.record(1, refused(), false), "first in its round: final");
        assert!(!b.record(2, Err(ClientError::Local("disk".into())), true), "only refusals go again");
        let out = b.finish();
        assert!(out.iter().all(|r| r.is_err()));
    }

    #[test]
    fn a_round_stops_sending_once_the_channel_is_lost() {
        let mut r = Round { sent: 4, lost_at: None };
        r.note(false);
        assert!(r.sending());
        r.note(true);
        r.sent = 5;
        r.note(true);
        assert_eq!(r.lost_at, Some(4));
        assert!(!r.sending());
    }
}
