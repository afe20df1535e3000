//! Opening a session: connect, log in, and what goes with the login's
//! flight (stats, speculated transfers, data connections opened ahead).

use super::fs::{stat_cmds, stat_of};
use super::{Session, SessionOpts, Speculation};
use crate::ahead;
use crate::control::ControlConn;
use crate::peers::{Peer, PeerBook};
use crate::{ClientError, Remote};
use lightpath_proto::Features;
use std::time::Duration;

/// The receive window data connections start with, for `rtt`.
fn start_window(opts: &SessionOpts, rtt: Duration) -> Option<usize> {
    let rtt_us = rtt.as_micros() as u64;
    lightpath_plan::start_recv_window(rtt_us, opts.target_share(), crate::plan::stream_count(opts, rtt_us))
}

/// `spec`, unless it names a path held out of the login flight (`flight`):
/// that path's commands wait for FEAT, and a RETR or VRET sent ahead of
/// them would also put its replies out of step with the stats that were
/// sent. (A 0xFF name held back from a server not known as lightpath, sent
/// ahead anyway, reached GCT mangled: it drops 0xFF and the byte after.)
pub(super) fn follow_flight<'a>(spec: Speculation<'a>, flight: &[&Vec<u8>]) -> Speculation<'a> {
    match spec {
        Speculation::File(p) | Speculation::Tree(p) if !flight.iter().any(|f| f.as_slice() == p) => Speculation::None,
        s => s,
    }
}

impl Session {
    /// Connect and log in.
    pub async fn open(remote: &Remote, opts: SessionOpts) -> Result<Session, ClientError> {
        Self::open_and_stat(remote, opts, &[]).await
    }

    /// Connect and log in, asking MLST and SIZE of `paths` in the same
    /// round trip (see [`Session::stat`]).
    pub async fn open_and_stat(remote: &Remote, opts: SessionOpts, paths: &[Vec<u8>]) -> Result<Session, ClientError> {
        Self::open_speculating(remote, opts, paths, Speculation::None).await
    }

    /// [`Session::open_and_stat`], and with a [`Speculation`] also MODE E,
    /// the stream count, PORT and the transfer command in the login's
    /// flight, before it is known what the path is or what the server
    /// offers: the transfer starts one round trip sooner.
    /// - `VRET tree/`: the trailing slash makes the server refuse a file
    ///   (550); a server without LPVF refuses the command (500).
    ///   [`crate::vfile::get_tree`] takes the transfer over, or
    ///   [`Session::drop_speculation`] reads the refusal.
    /// - `RETR file`: [`Session::get_many`] takes it over (a server without
    ///   MODE E refuses MODE E and sends the file in MODE S to our PORT).
    ///
    /// Ctrl-C (`opts.cancel`) ends the wait at once: a server that never
    /// greets was waited for through [`crate::control::CONNECT_TIMEOUT`]
    /// or until the interrupted copy's grace ran out (10 s).
    pub async fn open_speculating(
        remote: &Remote,
        opts: SessionOpts,
        paths: &[Vec<u8>],
        spec: Speculation<'_>,
    ) -> Result<Session, ClientError> {
        let job = opts.control();
        tokio::select! {
            s = Self::log_in(remote, opts, paths, spec) => s,
            _ = super::cancelled(&job) => Err(ClientError::Local("interrupted".into())),
        }
    }

    /// [`Session::open_speculating`], until cancelled.
    pub(super) async fn log_in(
        remote: &Remote,
        opts: SessionOpts,
        paths: &[Vec<u8>],
        spec: Speculation<'_>,
    ) -> Result<Session, ClientError> {
        let book = opts.connect_ahead.then(PeerBook::default);
        let peer = book.as_ref().and_then(|b| b.lookup(&remote.host, remote.port));
        // A name with a 0xFF byte waits for FEAT unless the book knows the
        // server (a lightpath peer): only lightpath may be sent one
        // (`ControlConn::send`); `stat` asks later.
        let flight: Vec<&Vec<u8>> = paths.iter().filter(|p| peer.is_some() || !p.contains(&0xFF)).collect();
        let spec = follow_flight(spec, &flight);
        let pending = peer.filter(|p| spec != Speculation::None && p.ahead_port != 0).map(|p| {
            let n = crate::plan::stream_count(&opts, p.rtt_us);
            let window = lightpath_plan::start_recv_window(p.rtt_us, opts.target_share(), n);
            ahead::start(&remote.host, p.ahead_port, n, window, opts.fastopen)
        });
        let book_rtt = peer.map(|p| Duration::from_micros(p.rtt_us));
        let ctl = ControlConn::connect(&remote.host, remote.port, opts.fastopen, book_rtt).await;
        let mut ctl = match (ctl, &pending) {
            (Err(e), Some(job)) => {
                job.abort();
                return Err(e);
            }
            (ctl, _) => ctl?,
        };
        // A Fast Open SYN still to leave, to a server the book does not
        // know: no stream count before the greeting brings the RTT.
        let rtt_known = ctl.rtt_known();
        let spec = if rtt_known { spec } else { Speculation::None };
        let extra: Vec<Vec<u8>> = flight.iter().flat_map(|p| stat_cmds(p)).collect();
        ctl.login_send(&remote.user, &remote.pass, &extra).await?;
        let recv_window = start_window(&opts, ctl.rtt);
        let mut s = Session::logging_in(ctl, remote.clone(), opts, recv_window);
        s.dc = Some(s.new_dc());
        s.send_speculation(pending, spec).await?;
        let anonymous = crate::location::is_anonymous(&remote.user);
        let (feat, replies) = s.ctl.login_read(extra.len()).await.map_err(|e| anonymous_hint(e, anonymous))?;
        if !rtt_known {
            s.recv_window = start_window(&s.opts, s.ctl.rtt);
            s.dc = Some(s.new_dc());
        }
        if s.opts.fastopen && s.ctl.fastopen_used() {
            tracing::info!(server = %s.ctl.name, "login flight sent with the SYN (TCP Fast Open)");
        }
        s.feat = feat;
        s.stats = flight.into_iter().cloned().zip(replies.chunks(2).map(|r| stat_of(&r[0], &r[1]))).collect();
        if let Some(b) = book {
            s.write_in(&b, peer);
        }
        Ok(s)
    }

    /// A session whose login is on its way: nothing known of the server yet.
    fn logging_in(ctl: ControlConn, remote: Remote, opts: SessionOpts, recv_window: Option<usize>) -> Session {
        Session {
            ctl,
            feat: Features::default(),
            remote,
            dc: None,
            mode_e: None,
            parallelism: 0,
            asked_block: None,
            stats: Default::default(),
            spec_vret: None,
            spec_retr: None,
            spec_stor: None,
            names_left_out: 0,
            cksm_markers: false,
            others: Vec::new(),
            spec_vsto: None,
            recv_window,
            out_of_step: false,
            data_lost: false,
            broken_off: None,
            ahead_to: None,
            opts,
        }
    }

    /// What a login sends before its replies come: the data connections
    /// opened ahead (`pending`, to a peer the book knows), then the first
    /// transfer's commands (`spec`).
    async fn send_speculation(
        &mut self,
        pending: Option<tokio::task::JoinHandle<ahead::AheadConns>>,
        spec: Speculation<'_>,
    ) -> Result<(), ClientError> {
        if let Some(job) = pending {
            // They started with the control connection: give them its RTT again.
            if let Some(a) = ahead::finish(job, self.ctl.rtt * 2 + Duration::from_millis(20)).await {
                let upload = matches!(spec, Speculation::Upload(_) | Speculation::UploadTree(..));
                self.offer_ahead(a, !upload).await?;
                match spec {
                    Speculation::Upload(Some((path, size, meta))) => self.speculate_stor(path, size, meta).await?,
                    Speculation::UploadTree(tree, root) => crate::vfile::speculate_vsto(self, tree, root).await?,
                    _ => {}
                }
            }
        }
        match spec {
            Speculation::Tree(t) => self.speculate_vret(t).await?,
            Speculation::File(f) => self.speculate_retr(f).await?,
            Speculation::None | Speculation::Upload(_) | Speculation::UploadTree(..) => {}
        }
        Ok(())
    }

    /// Write down what FEAT said of the server (`known`: what the book said
    /// before). A DCON port found unreachable stays so (`Peer::ahead_port`).
    fn write_in(&self, book: &PeerBook, known: Option<Peer>) {
        let unreachable = known.is_some_and(|p| p.ahead_port == 0);
        let rtt_us = self.ctl.rtt.as_micros() as u64;
        let entry = self.feat.dcon.map(|p| Peer { ahead_port: if unreachable { 0 } else { p }, rtt_us });
        book.remember(&self.remote.host, self.remote.port, entry);
    }
}

/// A refused login as anonymous (a URL without a user): the error says
/// how to give one.
fn anonymous_hint(e: ClientError, anonymous: bool) -> ClientError {
    match e {
        ClientError::Login(server, why) if anonymous => ClientError::Login(
            server,
            format!("{why} (as anonymous: give a user as ftp://USER@host/path, its password in LIGHTPATH_PASSWORD)"),
        ),
        e => e,
    }
}
