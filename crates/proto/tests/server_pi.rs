//! Scenario tests of the server protocol interpreter, driven the way the
//! server's driver drives it: bytes -> LineBuffer -> `handle_line`, drain
//! `poll_output` after every line, answer `Action::Login` with
//! `handle_login` and a checked `FsOp::Cwd` with `set_cwd`.

use lightpath_proto::command::Restart;
use lightpath_proto::held::{TreeResume, TreeRoot};
use lightpath_proto::line::MAX_LINE;
use lightpath_proto::vpath::MAX_PATH;
use lightpath_proto::{
    Action, Features, FsOp, LineBuffer, Mode, Output, PassiveKind, PiConfig, RangeSet, Reply, ReplyParser, ServerPi,
    Transfer, TransferKind, VPath,
};
use proptest::prelude::*;
use std::net::SocketAddr;

fn cfg(anonymous: bool, read_only: bool) -> PiConfig {
    PiConfig {
        banner: "lightpath test server".into(),
        anonymous,
        read_only,
        anonymous_writes: true,
        version: "9.8.7".into(),
        cksum_algs: vec!["ADLER32".into(), "MD5".into()],
        dcon_port: Some(4242),
        data_peer: None,
        client: None,
        host: Vec::new(),
        host_data_ports: Vec::new(),
    }
}

/// A minimal driver: frames bytes, feeds lines, and (when `auto` is set)
/// answers logins (anonymous per config, or alice/secret) and CWDs.
struct Session {
    pi: ServerPi,
    lb: LineBuffer,
    auto: bool,
}

impl Session {
    fn new(cfg: PiConfig) -> (Session, Vec<Output>) {
        // As the server's driver: Telnet commands are taken out.
        let mut s = Session { pi: ServerPi::new(cfg), lb: LineBuffer::telnet(), auto: true };
        let mut greeting = Vec::new();
        s.drain(&mut greeting);
        (s, greeting)
    }

    fn manual(cfg: PiConfig) -> Session {
        let (mut s, _) = Session::new(cfg);
        s.auto = false;
        s
    }

    /// A session already logged in as alice.
    fn logged_in(cfg: PiConfig) -> Session {
        let (mut s, _) = Session::new(cfg);
        let out = s.send(b"USER alice\r\nPASS secret\r\n");
        assert_eq!(codes(&out), [331, 230]);
        s
    }

    fn send(&mut self, bytes: &[u8]) -> Vec<Output> {
        self.lb.handle_bytes(bytes);
        let mut out = Vec::new();
        while let Some(line) = self.lb.poll_line() {
            self.pi.handle_line(line);
            self.drain(&mut out);
        }
        out
    }

    fn drain(&mut self, out: &mut Vec<Output>) {
        while let Some(o) = self.pi.poll_output() {
            if self.auto {
                match &o {
                    Output::Action(Action::Login { user, pass }) => {
                        let ok = self.pi.is_anonymous_user(user) || (user == "alice" && pass == "secret");
                        let user = user.clone();
                        self.pi.handle_login(&user, ok);
                    }
                    Output::Action(Action::Fs(FsOp::Cwd(p))) => self.pi.set_cwd(p.clone()),
                    Output::Action(Action::Fs(FsOp::RenameFrom(p))) => self.pi.set_rename_from(p.clone()),
                    _ => {}
                }
            }
            out.push(o);
        }
    }
}

fn replies(out: &[Output]) -> Vec<&Reply> {
    out.iter()
        .filter_map(|o| match o {
            Output::Reply(r) => Some(r),
            _ => None,
        })
        .collect()
}

fn codes(out: &[Output]) -> Vec<u16> {
    replies(out).iter().map(|r| r.code).collect()
}

fn actions(out: &[Output]) -> Vec<&Action> {
    out.iter()
        .filter_map(|o| match o {
            Output::Action(a) => Some(a),
            _ => None,
        })
        .collect()
}

fn one_transfer(out: &[Output]) -> Transfer {
    match out {
        [Output::Action(Action::Transfer(t))] => (**t).clone(),
        other => panic!("expected one transfer, got {other:?}"),
    }
}

fn vp(p: &str) -> VPath {
    VPath::root().join(p.as_bytes()).unwrap()
}

// ------------------------------------------------------------------ login

#[test]
fn greeting_is_220_with_banner() {
    let (_, greeting) = Session::new(cfg(false, false));
    assert_eq!(greeting, vec![Output::Reply(Reply::new(220, "lightpath test server ready."))]);
}

#[test]
fn password_login_goes_through_the_driver() {
    let mut s = Session::manual(cfg(false, false));
    assert_eq!(codes(&s.send(b"USER alice\r\n")), [331]);
    let out = s.send(b"PASS secret\r\n");
    // No reply yet: the PI asks the driver to check the credentials.
    assert_eq!(out, vec![Output::Action(Action::Login { user: "alice".into(), pass: "secret".into() })]);
    assert_eq!(s.pi.user(), None);
    assert_eq!(codes(&s.send(b"PWD\r\n")), [530], "not logged in while the check runs");
    s.pi.handle_login("alice", true);
    assert_eq!(s.pi.poll_output(), Some(Output::Reply(Reply::new(230, "User alice logged in."))));
    assert_eq!(s.pi.user(), Some("alice"));
    assert_eq!(codes(&s.send(b"PWD\r\n")), [257]);
}

#[test]
fn rejected_login_starts_over() {
    let mut s = Session::manual(cfg(false, false));
    s.send(b"USER alice\r\n");
    let out = s.send(b"PASS wrong\r\n");
    assert_eq!(actions(&out).len(), 1);
    s.pi.handle_login("alice", false);
    assert_eq!(s.pi.poll_output(), Some(Output::Reply(Reply::new(530, "Login incorrect."))));
    assert_eq!(s.pi.user(), None);
    assert_eq!(codes(&s.send(b"PWD\r\n")), [530]);
    // PASS needs a fresh USER.
    assert_eq!(codes(&s.send(b"PASS secret\r\n")), [503]);
    assert_eq!(codes(&s.send(b"USER alice\r\n")), [331]);
    assert_eq!(actions(&s.send(b"PASS secret\r\n")).len(), 1);
}

#[test]
fn anonymous_login_depends_on_config() {
    for anonymous in [true, false] {
        let (mut s, _) = Session::new(cfg(anonymous, false));
        let out = s.send(b"USER anonymous\r\nPASS globus@\r\n");
        // The PI always defers to the driver; the driver asks the PI whether
        // this user counts as anonymous under the config.
        assert_eq!(actions(&out), [&Action::Login { user: "anonymous".into(), pass: "globus@".into() }]);
        assert_eq!(codes(&out), [331, if anonymous { 230 } else { 530 }]);
        assert_eq!(s.pi.user().is_some(), anonymous);
        for name in ["anonymous", "ftp", "FTP", "Anonymous"] {
            assert_eq!(s.pi.is_anonymous_user(name), anonymous, "{name}");
        }
        assert!(!s.pi.is_anonymous_user("alice"));
        assert!(!s.pi.is_anonymous_user("anonymous2"));
    }
}

#[test]
fn pass_while_checking_or_logged_in_is_refused() {
    let mut s = Session::manual(cfg(false, false));
    s.send(b"USER alice\r\nPASS secret\r\n");
    assert_eq!(codes(&s.send(b"PASS again\r\n")), [503]);
    s.pi.handle_login("alice", true);
    s.pi.poll_output();
    let out = s.send(b"PASS again\r\n");
    assert_eq!(codes(&out), [503]);
    assert!(actions(&out).is_empty());
    assert_eq!(s.pi.user(), Some("alice"));
}

#[test]
fn bad_user_names_refused() {
    let (mut s, _) = Session::new(cfg(true, false));
    assert_eq!(codes(&s.send(b"USER \r\n")), [501]);
    let long = format!("USER {}\r\n", "u".repeat(257));
    assert_eq!(codes(&s.send(long.as_bytes())), [501]);
    assert_eq!(codes(&s.send(b"PASS x\r\n")), [503]);
}

#[test]
fn commands_before_login_get_530() {
    let (mut s, _) = Session::new(cfg(true, false));
    for cmd in [
        "PWD",
        "CWD /",
        "CDUP",
        "TYPE I",
        "MODE E",
        "PASV",
        "EPSV",
        "SPAS",
        "PORT 127,0,0,1,4,1",
        "RETR /f",
        "STOR /f",
        "LIST",
        "MLSD",
        "SIZE /f",
        "REST 10",
        "OPTS RETR Parallelism=4,4,4;",
        "SITE CHMOD 644 /f",
        "ABOR",
        "RNFR /a",
        "DELE /f",
        "CKSM MD5 0 -1 /f",
        "SBUF 1000",
    ] {
        let out = s.send(format!("{cmd}\r\n").as_bytes());
        assert_eq!(out.len(), 1, "{cmd}: {out:?}");
        assert_eq!(codes(&out), [530], "{cmd}");
    }
    // Not logged in and no settings changed.
    assert_eq!(s.pi.settings().mode, Mode::Stream);
    assert_eq!(s.pi.settings().parallelism, 1);
}

#[test]
fn commands_allowed_before_login() {
    let (mut s, _) = Session::new(cfg(false, false));
    let out = s.send(b"FEAT\r\nSYST\r\nNOOP\r\nHELP\r\nLANG EN\r\n");
    assert_eq!(codes(&out), [211, 215, 200, 214, 200]);
    let out = s.send(b"QUIT\r\n");
    assert_eq!(out, vec![Output::Reply(Reply::new(221, "Goodbye.")), Output::Close]);
}

#[test]
fn feat_parses_back_into_features() {
    let (mut s, _) = Session::new(cfg(false, false));
    let out = s.send(b"FEAT\r\n");
    let [r] = replies(&out)[..] else { panic!("{out:?}") };
    // Through the wire and the client's parser.
    let mut lb = LineBuffer::new();
    lb.handle_bytes(&r.encode());
    let mut p = ReplyParser::new();
    let mut got = None;
    while let Some(lightpath_proto::Line::Text(l)) = lb.poll_line() {
        got = p.handle_line(std::str::from_utf8(&l).unwrap()).unwrap().or(got);
    }
    let f = Features::from_reply(&got.unwrap());
    assert!(f.parallel && f.eret && f.esto && f.rest_stream && f.size && f.mdtm && f.mlst && f.spas);
    assert_eq!(f.cksm, ["ADLER32", "MD5"]);
    assert!(f.has_cksm("md5") && !f.has_cksm("SHA1"));
    assert_eq!(f.lightpath.as_deref(), Some("9.8.7"));
    assert_eq!((f.lpvf, f.lpvf_copies), (Some(1), lightpath_proto::manifest::MAX_COPIES));
}

// -------------------------------------------------------------- read-only

#[test]
fn read_only_refuses_writes() {
    let mut s = Session::logged_in(cfg(false, true));
    for cmd in
        ["STOR /f", "APPE /f", "ESTO A 0 /f", "MKD /d", "RMD /d", "DELE /f", "RNFR /a", "RNTO /b", "SITE CHMOD 644 /f"]
            .into_iter()
            .chain(["MFMT 20010203040506 /f"])
    {
        let out = s.send(format!("{cmd}\r\n").as_bytes());
        assert_eq!(out.len(), 1, "{cmd}: {out:?}");
        assert_eq!(codes(&out), [550], "{cmd}");
    }
    // Reads still work.
    assert!(matches!(one_transfer(&s.send(b"RETR /f\r\n")).kind, TransferKind::Retr));
    assert!(matches!(one_transfer(&s.send(b"ERET P 0 10 /f\r\n")).kind, TransferKind::Eret { offset: 0, len: 10 }));
    assert_eq!(actions(&s.send(b"SIZE /f\r\n")), [&Action::Fs(FsOp::Size(vp("/f")))]);
    assert!(matches!(one_transfer(&s.send(b"LIST\r\n")).kind, TransferKind::List));
}

/// Anonymous sessions may only read unless the server lets them write;
/// a user's session may write all the same.
#[test]
fn anonymous_sessions_read_only_unless_allowed() {
    let config = PiConfig { anonymous_writes: false, ..cfg(true, false) };
    let (mut s, _) = Session::new(config.clone());
    assert_eq!(codes(&s.send(b"USER anonymous\r\nPASS x\r\n")), [331, 230]);
    assert!(!s.pi.may_write());
    for cmd in ["STOR /f", "APPE /f", "ESTO A 0 /f", "VSTO /t", "MKD /d", "DELE /f", "RNFR /a", "SITE CHMOD 644 /f"] {
        let out = s.send(format!("{cmd}\r\n").as_bytes());
        assert_eq!(codes(&out), [550], "{cmd}");
        assert!(replies(&out)[0].text().contains("anonymous sessions may only read"), "{cmd}");
    }
    let t = one_transfer(&s.send(b"MLSD /\r\n"));
    assert!(!t.may_write, "listings say so in their Perm facts");
    assert!(matches!(one_transfer(&s.send(b"RETR /f\r\n")).kind, TransferKind::Retr));
    let mut user = Session::logged_in(config);
    assert!(user.pi.may_write());
    assert!(one_transfer(&user.send(b"STOR /f\r\n")).may_write);
}

/// `VRET dir/` asks for a directory only (the client speculates with it);
/// without the slash a file is fine too. The slash never reaches the path.
#[test]
fn vret_trailing_slash_means_directory_only() {
    let mut s = Session::logged_in(cfg(false, false));
    let t = one_transfer(&s.send(b"VRET /tree/\r\n"));
    assert_eq!((t.kind, t.path, t.dir_only), (TransferKind::VfileRetr, vp("/tree"), true));
    let t = one_transfer(&s.send(b"VRET /tree\r\n"));
    assert!(!t.dir_only);
    assert!(!one_transfer(&s.send(b"VRET /\r\n")).dir_only, "the root is a directory anyway");
}

#[test]
fn writable_server_emits_write_actions() {
    let mut s = Session::logged_in(cfg(false, false));
    let t = one_transfer(&s.send(b"STOR f\r\n"));
    assert_eq!((t.kind, t.path), (TransferKind::Stor, vp("/f")));
    assert_eq!(one_transfer(&s.send(b"APPE /g\r\n")).kind, TransferKind::Appe);
    assert_eq!(one_transfer(&s.send(b"ESTO A 7 /g\r\n")).kind, TransferKind::Esto { offset: 7 });
    assert_eq!(actions(&s.send(b"MKD d\r\n")), [&Action::Fs(FsOp::Mkd(vp("/d")))]);
    assert_eq!(actions(&s.send(b"RMD d\r\n")), [&Action::Fs(FsOp::Rmd(vp("/d")))]);
    assert_eq!(actions(&s.send(b"DELE f\r\n")), [&Action::Fs(FsOp::Dele(vp("/f")))]);
    assert_eq!(actions(&s.send(b"SITE CHMOD 640 f\r\n")), [&Action::Fs(FsOp::Chmod { mode: 0o640, path: vp("/f") })]);
}

// ----------------------------------------------------- REST, ALLO, RNFR/RNTO

#[test]
fn rest_is_consumed_by_the_next_transfer() {
    let mut s = Session::logged_in(cfg(false, false));
    assert_eq!(codes(&s.send(b"MODE E\r\nREST 0-100,200-300\r\n")), [200, 350]);
    // Commands in between do not consume it.
    assert_eq!(codes(&s.send(b"TYPE I\r\n")), [200]);
    let t = one_transfer(&s.send(b"RETR /f\r\n"));
    assert_eq!(t.restart, Some(Restart::Ranges(RangeSet::parse("0-100,200-300").unwrap())));
    assert_eq!(one_transfer(&s.send(b"RETR /f\r\n")).restart, None);

    // Stream mode: a byte offset.
    s.send(b"MODE S\r\nREST 1048000\r\n");
    assert_eq!(one_transfer(&s.send(b"RETR /f\r\n")).restart, Some(Restart::Offset(1048000)));
    assert_eq!(one_transfer(&s.send(b"RETR /f\r\n")).restart, None);

    // Range markers in stream mode are refused, and the REST is gone afterwards.
    s.send(b"REST 0-5\r\n");
    let out = s.send(b"RETR /f\r\n");
    assert_eq!(codes(&out), [501]);
    assert!(actions(&out).is_empty());
    assert_eq!(one_transfer(&s.send(b"RETR /f\r\n")).restart, None);
}

/// A transfer command refused (a write on a read-only server, one that
/// does not parse) uses up its REST and ALLO: they shaped the next
/// transfer, a RETR from offset 1000 (a review's find).
#[test]
fn a_refused_transfer_uses_up_its_rest_and_allo() {
    let mut s = Session::logged_in(cfg(false, true));
    assert_eq!(codes(&s.send(b"REST 1000\r\nSTOR /x\r\n")), [350, 550]);
    assert_eq!(one_transfer(&s.send(b"RETR /y\r\n")).restart, None);
    let mut s = Session::logged_in(cfg(false, false));
    assert_eq!(codes(&s.send(b"ALLO 10\r\nREST 7\r\nSTOR\r\n")), [200, 350, 501]);
    let t = one_transfer(&s.send(b"STOR /f\r\n"));
    assert_eq!((t.allo, t.restart), (None, None));
    // Not-transfer commands between still keep them.
    assert_eq!(codes(&s.send(b"REST 7\r\nNOOP\r\nBOGUS\r\n")), [350, 200, 500]);
    assert_eq!(one_transfer(&s.send(b"RETR /y\r\n")).restart, Some(Restart::Offset(7)));
}

#[test]
fn opts_vsto_is_consumed_by_the_next_transfer_and_kept_by_a_vsto_only() {
    let mut s = Session::logged_in(cfg(false, false));
    assert_eq!(codes(&s.send(b"MODE E\r\nOPTS VSTO Mode=700;Modify=5;\r\n")), [200, 200]);
    let root = Some(TreeRoot { mode: 0o700, mtime_ns: Some(5) });
    assert_eq!(one_transfer(&s.send(b"VSTO /tree\r\n")).settings.vsto_root, root);
    assert_eq!(one_transfer(&s.send(b"VSTO /tree\r\n")).settings.vsto_root, None);
    s.send(b"OPTS VSTO Mode=700;\r\n");
    assert_eq!(one_transfer(&s.send(b"VRET /tree\r\n")).settings.vsto_root, None);
    assert_eq!(one_transfer(&s.send(b"VSTO /tree\r\n")).settings.vsto_root, None, "consumed by the VRET");
    assert_eq!(codes(&s.send(b"OPTS VSTO Mode=9;\r\n")), [501]);
}

#[test]
fn mfmt_sets_a_modification_time() {
    let mut s = Session::logged_in(cfg(false, false));
    let want = Action::Fs(FsOp::Mfmt { mtime: (981_173_106, 500_000_000), path: vp("/d/f") });
    assert_eq!(actions(&s.send(b"MFMT 20010203040506.5 /d/f\r\n")), [&want]);
    for bad in ["MFMT 2001 /f", "MFMT 20010203040506", "MFMT x /f"] {
        assert_eq!(codes(&s.send(format!("{bad}\r\n").as_bytes())), [501], "{bad}");
    }
    let feat = s.send(b"FEAT\r\n");
    assert!(replies(&feat)[0].lines.iter().any(|l| l.trim() == "MFMT"), "{feat:?}");
}

#[test]
fn opts_stor_is_consumed_by_the_next_transfer_and_kept_by_a_stor_only() {
    let mut s = Session::logged_in(cfg(false, false));
    assert_eq!(codes(&s.send(b"OPTS STOR Mode=600;Modify=-5;\r\nALLO 3\r\n")), [200, 200]);
    let meta = Some(TreeRoot { mode: 0o600, mtime_ns: Some(-5) });
    let t = one_transfer(&s.send(b"STOR /f\r\n"));
    assert_eq!((t.meta, t.allo), (meta, Some(3)));
    assert_eq!(one_transfer(&s.send(b"STOR /f\r\n")).meta, None);
    s.send(b"OPTS STOR Mode=600;\r\n");
    assert_eq!(one_transfer(&s.send(b"APPE /f\r\n")).meta, None);
    assert_eq!(one_transfer(&s.send(b"STOR /f\r\n")).meta, None, "consumed by the APPE");
    assert_eq!(codes(&s.send(b"OPTS STOR Mode=9;\r\nOPTS STOR Modify=1;\r\n")), [501, 501]);
}

#[test]
fn opts_vret_after_is_consumed_by_the_next_transfer_and_kept_by_a_vret_only() {
    let mut s = Session::logged_in(cfg(false, false));
    assert_eq!(codes(&s.send(b"MODE E\r\nOPTS VRET After=612f62;\r\n")), [200, 200]);
    let after = |check| Some(TreeResume { after: b"a/b".to_vec(), check });
    assert_eq!(one_transfer(&s.send(b"VRET /tree\r\n")).settings.vret_after, after(None));
    assert_eq!(codes(&s.send(b"OPTS VRET After=612f62;Check=00000000000000ff;\r\n")), [200]);
    assert_eq!(one_transfer(&s.send(b"VRET /tree\r\n")).settings.vret_after, after(Some(255)));
    assert_eq!(one_transfer(&s.send(b"VRET /tree\r\n")).settings.vret_after, None);
    s.send(b"OPTS VRET After=61;\r\n");
    assert_eq!(one_transfer(&s.send(b"RETR /f\r\n")).settings.vret_after, None);
    assert_eq!(one_transfer(&s.send(b"VRET /tree\r\n")).settings.vret_after, None, "consumed by the RETR");
    assert_eq!(codes(&s.send(b"OPTS VRET After=6;\r\n")), [501]);
}

/// Files a VRET is asked to leave out: gathered until the next transfer,
/// which takes them (a VRET only keeps them), at most MAX_VRET_SKIP.
#[test]
fn opts_vret_skip_gathers_names_for_the_next_vret_only() {
    use lightpath_proto::server_pi::MAX_VRET_SKIP;
    let mut s = Session::logged_in(cfg(false, false));
    assert_eq!(codes(&s.send(b"MODE E\r\nOPTS VRET Skip=61;\r\nOPTS VRET Skip=622f63;\r\n")), [200, 200, 200]);
    let skip = one_transfer(&s.send(b"VRET /tree\r\n")).settings.vret_skip;
    assert_eq!(skip, vec![b"a".to_vec(), b"b/c".to_vec()]);
    assert!(one_transfer(&s.send(b"VRET /tree\r\n")).settings.vret_skip.is_empty(), "consumed");
    s.send(b"OPTS VRET Skip=61;\r\n");
    assert!(one_transfer(&s.send(b"RETR /f\r\n")).settings.vret_skip.is_empty());
    assert!(one_transfer(&s.send(b"VRET /tree\r\n")).settings.vret_skip.is_empty(), "consumed by the RETR");
    for _ in 0..MAX_VRET_SKIP {
        assert_eq!(codes(&s.send(b"OPTS VRET Skip=61;\r\n")), [200]);
    }
    assert_eq!(codes(&s.send(b"OPTS VRET Skip=61;\r\n")), [501]);
    assert_eq!(one_transfer(&s.send(b"VRET /tree\r\n")).settings.vret_skip.len(), MAX_VRET_SKIP);
}

/// Manifest copies: for the next VRET only; any other transfer drops them.
#[test]
fn opts_vret_copies_holds_for_the_next_vret_only() {
    let mut s = Session::logged_in(cfg(false, false));
    assert_eq!(codes(&s.send(b"MODE E\r\nOPTS VRET Copies=2;\r\n")), [200, 200]);
    assert_eq!(one_transfer(&s.send(b"VRET /tree\r\n")).settings.vret_copies, 2);
    assert_eq!(one_transfer(&s.send(b"VRET /tree\r\n")).settings.vret_copies, 1, "consumed");
    s.send(b"OPTS VRET Copies=2;\r\n");
    assert_eq!(one_transfer(&s.send(b"RETR /f\r\n")).settings.vret_copies, 1);
    assert_eq!(one_transfer(&s.send(b"VRET /tree\r\n")).settings.vret_copies, 1, "consumed by the RETR");
    assert_eq!(codes(&s.send(b"OPTS VRET Copies=3;\r\n")), [501]);
}

#[test]
fn opts_vsto_after_is_consumed_by_the_next_transfer_and_kept_by_a_vsto_only() {
    let mut s = Session::logged_in(cfg(false, false));
    assert_eq!(codes(&s.send(b"MODE E\r\nOPTS VSTO After=612f62;Check=00000000000000ff;\r\n")), [200, 200]);
    let after = Some(TreeResume { after: b"a/b".to_vec(), check: Some(255) });
    s.send(b"OPTS VSTO Mode=700;\r\n");
    let t = one_transfer(&s.send(b"VSTO /tree\r\n"));
    assert_eq!((t.settings.vsto_after, t.settings.vsto_root.is_some()), (after, true), "both kinds of OPTS VSTO");
    assert_eq!(one_transfer(&s.send(b"VSTO /tree\r\n")).settings.vsto_after, None);
    s.send(b"OPTS VSTO After=612f62;Check=00000000000000ff;\r\n");
    assert_eq!(one_transfer(&s.send(b"VRET /tree\r\n")).settings.vsto_after, None);
    assert_eq!(one_transfer(&s.send(b"VSTO /tree\r\n")).settings.vsto_after, None, "consumed by the VRET");
    assert_eq!(codes(&s.send(b"OPTS VSTO After=612f62;\r\n")), [501], "no check");
}

#[test]
fn allo_is_consumed_by_the_next_transfer() {
    let mut s = Session::logged_in(cfg(false, false));
    assert_eq!(codes(&s.send(b"ALLO 1048581\r\n")), [200]);
    assert_eq!(one_transfer(&s.send(b"STOR /f\r\n")).allo, Some(1048581));
    assert_eq!(one_transfer(&s.send(b"STOR /f\r\n")).allo, None);
}

#[test]
fn rnfr_rnto_ordering() {
    let mut s = Session::logged_in(cfg(false, false));
    assert_eq!(codes(&s.send(b"RNTO /b\r\n")), [503]);
    // The driver checks that the name is there, answers 350 (or 550) and
    // reports it back (the test driver says every name is there).
    assert_eq!(actions(&s.send(b"RNFR a\r\n")), [&Action::Fs(FsOp::RenameFrom(vp("/a")))]);
    let out = s.send(b"RNTO sub/b\r\n");
    assert_eq!(actions(&out), [&Action::Fs(FsOp::Rename { from: vp("/a"), to: vp("/sub/b") })]);
    // Used up.
    assert_eq!(codes(&s.send(b"RNTO /c\r\n")), [503]);
    // Anything else in between cancels the RNFR, NOOP and junk too.
    assert_eq!(codes(&s.send(b"RNFR a\r\nPWD\r\nRNTO b\r\n")), [257, 503]);
    assert_eq!(codes(&s.send(b"RNFR a\r\nNOOP\r\nRNTO b\r\n")), [200, 503]);
    assert_eq!(codes(&s.send(b"RNFR a\r\nXYZZY\r\nRNTO b\r\n")), [500, 503]);
    // A name the driver did not find (it answered 550) is not renamed.
    s.auto = false;
    assert_eq!(actions(&s.send(b"RNFR missing\r\n")), [&Action::Fs(FsOp::RenameFrom(vp("/missing")))]);
    assert_eq!(codes(&s.send(b"RNTO b\r\n")), [503]);
    s.auto = true;
    // A bad RNFR path leaves nothing to rename.
    let long = format!("RNFR {}\r\nRNTO c\r\n", "a".repeat(5000));
    assert_eq!(codes(&s.send(long.as_bytes())), [553, 503]);
    // A second RNFR replaces the first.
    s.send(b"RNFR x\r\nRNFR y\r\n");
    assert_eq!(actions(&s.send(b"RNTO z\r\n")), [&Action::Fs(FsOp::Rename { from: vp("/y"), to: vp("/z") })]);
}

// --------------------------------------------------------- transfer settings

#[test]
fn opts_retr_parallelism_applies_to_transfers() {
    let mut s = Session::logged_in(cfg(false, false));
    assert_eq!(codes(&s.send(b"OPTS RETR Parallelism=4,4,4;\r\n")), [200]);
    assert_eq!(s.pi.settings().parallelism, 4);
    assert_eq!(codes(&s.send(b"OPTS RETR Parallelism=8,1,8;markers=3;\r\n")), [200]);
    assert_eq!(s.pi.settings().parallelism, 8);
    assert_eq!(s.pi.settings().retr_markers, Some(3));
    // Refusals keep the old value.
    for bad in ["OPTS RETR Parallelism=2,2,2", "OPTS RETR Parallelism=0;", "OPTS RETR Parallelism=x;"] {
        assert_eq!(codes(&s.send(format!("{bad}\r\n").as_bytes())), [501], "{bad}");
        assert_eq!(s.pi.settings().parallelism, 8);
    }
    // An OPTS RETR without markers= keeps the marker setting.
    s.send(b"OPTS RETR Parallelism=2,2,2;\r\n");
    let t = one_transfer(&s.send(b"RETR /f\r\n"));
    assert_eq!((t.settings.parallelism, t.settings.retr_markers), (2, Some(3)));
    assert_eq!(codes(&s.send(b"OPTS UTF8 ON\r\n")), [500]);
    assert_eq!(codes(&s.send(b"OPTS MLST type;size;\r\nOPTS CKSM markers=5;\r\n")), [200, 200]);
}

#[test]
fn mode_e_and_s() {
    let mut s = Session::logged_in(cfg(false, false));
    assert_eq!(s.pi.settings().mode, Mode::Stream);
    assert_eq!(s.send(b"mode e\r\n"), vec![Output::Reply(Reply::new(200, "Mode set to E."))]);
    assert_eq!(s.pi.settings().mode, Mode::Extended);
    assert_eq!(one_transfer(&s.send(b"RETR /f\r\n")).settings.mode, Mode::Extended);
    assert_eq!(codes(&s.send(b"MODE B\r\n")), [501]);
    assert_eq!(s.pi.settings().mode, Mode::Extended);
    assert_eq!(codes(&s.send(b"MODE S\r\n")), [200]);
    assert_eq!(one_transfer(&s.send(b"STOR /f\r\n")).settings.mode, Mode::Stream);
}

#[test]
fn buffer_sizes() {
    let mut s = Session::logged_in(cfg(false, false));
    assert_eq!(codes(&s.send(b"SBUF 4194304\r\n")), [200]);
    assert_eq!(s.pi.settings().tcp_buffer, 4194304);
    assert_eq!(codes(&s.send(b"SITE RETRBUFSIZE 1048576\r\n")), [200]);
    assert_eq!(s.pi.settings().tcp_buffer, 1048576);
    // Capped at 1 GiB.
    s.send(b"SITE BUFSIZE 99999999999\r\n");
    assert_eq!(s.pi.settings().tcp_buffer, 1 << 30);
}

#[test]
fn passive_and_active_actions() {
    let mut s = Session::logged_in(cfg(false, false));
    // Passive: the driver opens the listener and sends the reply itself.
    assert_eq!(s.send(b"PASV\r\n"), vec![Output::Action(Action::Passive(PassiveKind::Pasv))]);
    assert_eq!(s.send(b"EPSV\r\n"), vec![Output::Action(Action::Passive(PassiveKind::Epsv))]);
    assert_eq!(s.send(b"EPSV 2\r\n"), vec![Output::Action(Action::Passive(PassiveKind::Epsv))]);
    assert_eq!(s.send(b"SPAS\r\n"), vec![Output::Action(Action::Passive(PassiveKind::Spas))]);
    assert_eq!(codes(&s.send(b"EPSV 3\r\n")), [522]);
    // Known, the client's family decides: the listener is of its family.
    for (client, other, own) in [("::1", "EPSV 1", "EPSV 2"), ("::ffff:127.0.0.1", "EPSV 2", "EPSV 1")] {
        let mut s = Session::logged_in(PiConfig { client: Some(client.parse().unwrap()), ..cfg(false, false) });
        let no = s.send(format!("{other}\r\n").as_bytes());
        assert_eq!(codes(&no), [522], "{client}: {other}");
        let want = if own == "EPSV 1" { "use (1)" } else { "use (2)" };
        assert!(format!("{no:?}").contains(want), "{no:?}");
        assert_eq!(actions(&s.send(format!("{own}\r\n").as_bytes())), [&Action::Passive(PassiveKind::Epsv)]);
    }

    // Active: answered here, then the address goes to the driver.
    let a: SocketAddr = "127.0.0.1:1025".parse().unwrap();
    let out = s.send(b"PORT 127,0,0,1,4,1\r\n");
    assert_eq!(
        out,
        vec![Output::Reply(Reply::new(200, "PORT Command successful.")), Output::Action(Action::Active(vec![a]))]
    );
    let v6: SocketAddr = "[::1]:5000".parse().unwrap();
    assert_eq!(actions(&s.send(b"EPRT |2|::1|5000|\r\n")), [&Action::Active(vec![v6])]);
    let b: SocketAddr = "127.0.0.1:1026".parse().unwrap();
    assert_eq!(actions(&s.send(b"SPOR 127,0,0,1,4,1 127,0,0,1,4,2\r\n")), [&Action::Active(vec![a, b])]);
    // Over IPv6 a stripe goes as in EPRT, the form of GCT's SPAS reply.
    assert_eq!(actions(&s.send(b"SPOR |2|::1|5000| 127,0,0,1,4,1\r\n")), [&Action::Active(vec![v6, a])]);
    // Bounce protection: privileged ports are refused without an action.
    let out = s.send(b"PORT 10,0,0,1,0,21\r\n");
    assert_eq!(codes(&out), [501]);
    assert!(actions(&out).is_empty());
    assert!(actions(&s.send(b"EPRT |1|10.0.0.1|22|\r\n")).is_empty());
}

/// RFC 2428 section 3: "Upon receipt of an EPSV ALL command, the server
/// MUST reject all data connection setup commands other than EPSV (i.e.,
/// EPRT, PORT, PASV, et al.)", for the rest of the session.
#[test]
fn epsv_all_leaves_only_epsv() {
    let mut s = Session::logged_in(cfg(false, false));
    assert_eq!(codes(&s.send(b"EPSV ALL\r\n")), [229]);
    let refused = [
        &b"PASV"[..],
        b"SPAS",
        b"PORT 127,0,0,1,4,1",
        b"EPRT |1|127.0.0.1|5001|",
        b"SPOR 127,0,0,1,4,1",
        b"DCON 0123456789abcdef0123456789abcdef 4",
    ];
    for line in refused {
        let out = s.send(&[line, b"\r\n"].concat());
        assert_eq!(codes(&out), [503], "{}", String::from_utf8_lossy(line));
        assert!(actions(&out).is_empty(), "{}", String::from_utf8_lossy(line));
        assert!(replies(&out)[0].lines[0].contains("EPSV ALL"));
    }
    assert_eq!(s.send(b"EPSV\r\n"), vec![Output::Action(Action::Passive(PassiveKind::Epsv))]);
    assert_eq!(s.send(b"EPSV 1\r\n"), vec![Output::Action(Action::Passive(PassiveKind::Epsv))]);
    assert_eq!(codes(&s.send(b"PASV\r\n")), [503], "still refused after EPSV");
}

/// RFC 959 4.1.3: the urgent abort `IAC IP IAC DM ABOR`; Telnet commands
/// are taken out of the line, `IAC IAC` is one 0xFF byte.
#[test]
fn telnet_abort_sequence_is_abor() {
    let mut s = Session::logged_in(cfg(false, false));
    let out = s.send(b"\xff\xf4\xff\xf2ABOR\r\n");
    assert_eq!((codes(&out), actions(&out)), (vec![226], vec![&Action::Abort]));
    let out = s.send(b"\xff\xfb\x18\xff\xf1DELE a\xff\xffb\r\n");
    assert_eq!(actions(&out), [&Action::Fs(FsOp::Dele(VPath::root().join(b"a\xffb").unwrap()))]);
}

#[test]
fn security_commands() {
    let mut s = Session::logged_in(cfg(false, false));
    assert_eq!(
        codes(&s.send(b"DCAU N\r\nDCAU A\r\nPBSZ 0\r\nPROT C\r\nPROT P\r\nPROT X\r\n")),
        [200, 504, 200, 200, 536, 501]
    );
}

#[test]
fn abor_without_transfer() {
    let mut s = Session::logged_in(cfg(false, false));
    let out = s.send(b"ABOR\r\n");
    assert_eq!(codes(&out), [226]);
    assert_eq!(actions(&out), [&Action::Abort]);
}

#[test]
fn cksm_checks_the_algorithm() {
    let mut s = Session::logged_in(cfg(false, false));
    let out = s.send(b"CKSM adler32 0 -1 f\r\n");
    assert_eq!(
        actions(&out),
        [&Action::Fs(FsOp::Cksm { alg: "ADLER32".into(), offset: 0, len: None, path: vp("/f"), markers: None })]
    );
    assert_eq!(codes(&s.send(b"CKSM SHA1 0 -1 f\r\n")), [504]);
    // `OPTS CKSM markers=N;` (GCT's): the CKSMs after it send 113 markers.
    assert_eq!(codes(&s.send(b"OPTS CKSM markers=2;\r\n")), [200]);
    let out = s.send(b"CKSM MD5 0 -1 f\r\n");
    assert!(matches!(actions(&out)[..], [&Action::Fs(FsOp::Cksm { markers: Some(2), .. })]), "{out:?}");
    assert_eq!(codes(&s.send(b"OPTS CKSM Foo=1;\r\n")), [200], "other CKSM options are taken, as before");
}

// ------------------------------------------------------------- directories

#[test]
fn cwd_pwd_and_relative_paths() {
    let mut s = Session::logged_in(cfg(false, false));
    assert_eq!(actions(&s.send(b"CWD data/sub\r\n")), [&Action::Fs(FsOp::Cwd(vp("/data/sub")))]);
    assert_eq!(s.pi.cwd(), &vp("/data/sub"));
    assert_eq!(replies(&s.send(b"PWD\r\n"))[0].text(), "\"/data/sub\" is current directory.");
    assert_eq!(one_transfer(&s.send(b"RETR ../f\r\n")).path, vp("/data/f"));
    assert_eq!(one_transfer(&s.send(b"MLSD\r\n")).path, vp("/data/sub"));
    assert_eq!(one_transfer(&s.send(b"LIST -la\r\n")).path, vp("/data/sub"));
    assert_eq!(actions(&s.send(b"MLST\r\n")), [&Action::Fs(FsOp::Mlst(vp("/data/sub")))]);
    // `..` never climbs above the root.
    assert_eq!(one_transfer(&s.send(b"RETR ../../../../etc/passwd\r\n")).path, vp("/etc/passwd"));
    assert_eq!(actions(&s.send(b"CDUP\r\n")), [&Action::Fs(FsOp::Cwd(vp("/data")))]);
    assert_eq!(codes(&s.send(b"STAT\r\n")), [212]);
    // A quote in the directory name is doubled in the 257 reply.
    s.send(b"CWD /a\"b\r\n");
    assert_eq!(replies(&s.send(b"PWD\r\n"))[0].text(), "\"/a\"\"b\" is current directory.");
    // A path too long is refused with 553; control bytes other than line
    // breaks (and NUL, which no command may hold) are valid in names.
    let out = s.send(format!("RETR {}\r\n", "a/".repeat(2100)).as_bytes());
    assert_eq!(codes(&out), [553]);
    assert!(actions(&out).is_empty());
    let out = s.send(b"SIZE a\x01\tb\r\n");
    assert_eq!(actions(&out), [&Action::Fs(FsOp::Size(vp("/a\"b/a\x01\tb")))]);
}

/// Regression: with a working directory longer than MAX_PATH/2, LIST/MLSD/
/// MLST without an argument (which join the cwd to itself) and CDUP from a
/// deep directory failed with "553 Bad path: path too long."
#[test]
fn deep_working_directory_still_lists() {
    let mut s = Session::logged_in(cfg(false, false));
    let name = "d".repeat(250);
    while s.pi.cwd().as_bytes().len() + 251 <= MAX_PATH {
        let out = s.send(format!("CWD {name}\r\n").as_bytes());
        assert_eq!(codes(&out), Vec::<u16>::new(), "{out:?}");
    }
    let cwd = s.pi.cwd().clone();
    assert!(cwd.as_bytes().len() > MAX_PATH / 2);
    assert_eq!(one_transfer(&s.send(b"LIST\r\n")).path, cwd);
    assert_eq!(one_transfer(&s.send(b"MLSD\r\n")).path, cwd);
    assert_eq!(actions(&s.send(b"MLST\r\n")), [&Action::Fs(FsOp::Mlst(cwd.clone()))]);
    assert_eq!(actions(&s.send(b"CDUP\r\n")), [&Action::Fs(FsOp::Cwd(cwd.parent()))]);
    assert_eq!(one_transfer(&s.send(b"RETR /top\r\n")).path, vp("/top"));
}

// ------------------------------------------------------ pipelining, framing

#[test]
fn pipelined_commands_answered_in_order() {
    let (mut s, _) = Session::new(cfg(false, false));
    let out = s.send(
        b"USER alice\r\nPASS secret\r\nTYPE I\r\nMODE E\r\nOPTS RETR Parallelism=4,4,4;\r\n\
          PORT 127,0,0,1,4,1\r\nRETR a\r\nBOGUS\r\nRETR b\r\nQUIT\r\n",
    );
    let kinds: Vec<String> = out
        .iter()
        .map(|o| match o {
            Output::Reply(r) => r.code.to_string(),
            Output::Action(Action::Login { .. }) => "login".into(),
            Output::Action(Action::Active(_)) => "active".into(),
            Output::Action(Action::Transfer(t)) => format!("xfer {}", t.path.display()),
            Output::Action(a) => format!("{a:?}"),
            Output::Close => "close".into(),
        })
        .collect();
    assert_eq!(
        kinds,
        ["331", "login", "230", "200", "200", "200", "200", "active", "xfer /a", "500", "xfer /b", "221", "close"]
    );
    let t = out.iter().find_map(|o| match o {
        Output::Action(Action::Transfer(t)) => Some((**t).clone()),
        _ => None,
    });
    let t = t.unwrap();
    assert_eq!((t.settings.mode, t.settings.parallelism), (Mode::Extended, 4));
}

#[test]
fn overlong_line_gets_500_and_session_goes_on() {
    let mut s = Session::logged_in(cfg(false, false));
    let mut data = b"RETR /".to_vec();
    data.extend(vec![b'x'; MAX_LINE + 100]);
    data.extend_from_slice(b"\r\nPWD\r\n");
    // Arrives in pieces, as from a socket.
    let mut out = Vec::new();
    for chunk in data.chunks(1000) {
        out.extend(s.send(chunk));
    }
    assert_eq!(codes(&out), [500, 257]);
    assert_eq!(replies(&out)[0].text(), "Command line too long.");
    assert!(actions(&out).is_empty());
    assert_eq!(s.pi.user(), Some("alice"));
}

#[test]
fn injected_crlf_in_arguments_cannot_forge_replies() {
    let (mut s, _) = Session::new(cfg(false, false));
    // A bare CR inside a line is not a line end; it must not reach the wire.
    let out = s.send(b"USER evil\r230 User root logged in.\r\n");
    assert_eq!(codes(&out), [331]);
    let wire = replies(&out)[0].encode();
    assert_eq!(wire.iter().filter(|&&b| b == b'\r' || b == b'\n').count(), 2);
    assert_eq!(s.pi.user(), None);
}

#[test]
fn unknown_and_malformed_commands() {
    let (mut s, _) = Session::new(cfg(false, false));
    assert_eq!(codes(&s.send(b"XYZZY\r\nTYPE\r\n\r\nRETR a\0b\r\n\xff\xfe\r\n")), [500, 501, 500, 501, 500]);
    let mut s = Session::logged_in(cfg(false, false));
    assert_eq!(
        codes(&s.send(b"SITE FROB\r\nSITE WHOAMI\r\nSITE VERSION\r\nSITE CLIENTINFO a=b;\r\n")),
        [500, 200, 200, 250]
    );
    assert_eq!(codes(&s.send(b"ALLO x\r\nTREV PERF 5\r\nSTRU F\r\nSTRU R\r\n")), [501, 200, 200, 501]);
}

// ----------------------------------------------------------- properties

fn session_line() -> impl Strategy<Value = Vec<u8>> {
    let verb = proptest::sample::select(
        &[
            "USER alice",
            "USER anonymous",
            "PASS secret",
            "PASS x",
            "PWD",
            "CWD",
            "CDUP",
            "RETR",
            "STOR",
            "LIST",
            "MLSD",
            "REST",
            "ALLO",
            "RNFR",
            "RNTO",
            "MODE",
            "TYPE",
            "OPTS RETR",
            "PORT",
            "PASV",
            "EPSV",
            "QUIT",
            "NOOP",
            "FEAT",
            "SITE",
            "ABOR",
            "DELE",
            "ERET P",
            "ESTO A",
            "CKSM MD5",
            "X",
        ][..],
    );
    let arg = proptest::collection::vec(
        prop_oneof![
            Just(b"..".to_vec()),
            Just(b"/".to_vec()),
            Just(b" ".to_vec()),
            Just(b"-".to_vec()),
            Just(b",".to_vec()),
            Just(b";".to_vec()),
            Just(b"E".to_vec()),
            Just(b"S".to_vec()),
            "[0-9]{1,5}".prop_map(String::into_bytes),
            proptest::collection::vec(any::<u8>(), 1..4),
        ],
        0..6,
    );
    (verb, any::<bool>(), arg).prop_map(|(v, space, arg)| {
        let mut l = v.as_bytes().to_vec();
        if space {
            l.push(b' ');
        }
        l.extend(arg.concat());
        l.retain(|&b| b != b'\n');
        l
    })
}

proptest! {
    /// Every line gets at least one output, every reply is one well-formed
    /// wire line per text line, and every path handed to the driver is normal.
    #[test]
    fn every_line_is_answered(lines in proptest::collection::vec(session_line(), 1..25), anonymous in any::<bool>(), ro in any::<bool>()) {
        let (mut s, _) = Session::new(cfg(anonymous, ro));
        for l in &lines {
            let mut bytes = l.clone();
            bytes.extend_from_slice(b"\r\n");
            let out = s.send(&bytes);
            prop_assert!(!out.is_empty(), "no answer to {:?}", String::from_utf8_lossy(l));
            for o in &out {
                match o {
                    Output::Reply(r) => {
                        prop_assert!((100..=599).contains(&r.code));
                        let wire = r.encode();
                        prop_assert_eq!(wire.iter().filter(|&&b| b == b'\n').count(), r.lines.len().max(1));
                        prop_assert_eq!(wire.iter().filter(|&&b| b == b'\r').count(), r.lines.len().max(1));
                    }
                    Output::Action(Action::Transfer(t)) => {
                        prop_assert!(s.pi.user().is_some());
                        prop_assert_eq!(VPath::root().join(t.path.as_bytes()), Ok(t.path.clone()));
                        if ro {
                            prop_assert!(!t.kind.is_upload());
                        }
                    }
                    Output::Action(Action::Fs(op)) => {
                        prop_assert!(s.pi.user().is_some());
                        if ro {
                            prop_assert!(matches!(op, FsOp::Size(_) | FsOp::Mdtm(_) | FsOp::Mlst(_) | FsOp::Stat(_) | FsOp::Cwd(_) | FsOp::Cksm { .. }), "{:?}", op);
                        }
                    }
                    _ => {}
                }
            }
        }
    }

    /// Pipelining: the whole conversation in one chunk, or split anywhere,
    /// gives the same outputs in the same order as line by line.
    #[test]
    fn chunking_does_not_change_answers(lines in proptest::collection::vec(session_line(), 1..20), cuts in proptest::collection::vec(any::<usize>(), 0..10)) {
        let mut stream = Vec::new();
        for l in &lines {
            stream.extend_from_slice(l);
            stream.extend_from_slice(b"\r\n");
        }
        let (mut one, _) = Session::new(cfg(true, false));
        let mut by_line = Vec::new();
        for l in &lines {
            let mut b = l.clone();
            b.extend_from_slice(b"\r\n");
            by_line.extend(one.send(&b));
        }
        let (mut two, _) = Session::new(cfg(true, false));
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
        points.sort_unstable();
        let mut chunked = Vec::new();
        let mut prev = 0;
        for p in points.into_iter().chain(std::iter::once(stream.len())) {
            chunked.extend(two.send(&stream[prev..p]));
            prev = p;
        }
        prop_assert_eq!(by_line, chunked);
    }
}

#[test]
fn dcon_is_advertised_and_becomes_an_adopt_action() {
    let mut s = Session::logged_in(cfg(false, false));
    let out = s.send(b"FEAT\r\n");
    assert!(replies(&out)[0].lines.iter().any(|l| l.trim() == "DCON 4242"), "{out:?}");
    let token = "00112233445566778899aabbccddeeff";
    let out = s.send(format!("DCON {token} 8\r\n").as_bytes());
    match actions(&out)[..] {
        [Action::Adopt(a)] => {
            assert_eq!(a.count, 8);
            assert_eq!(a.token.to_hex(), token);
        }
        _ => panic!("{out:?}"),
    }
    assert!(replies(&out).is_empty(), "the driver answers DCON: {out:?}");
    assert_eq!(codes(&s.send(b"DCON 0011 8\r\n")), [501]);
    assert_eq!(codes(&s.send(format!("DCON {token} 0\r\n").as_bytes())), [501]);
}

#[test]
fn dcon_needs_login_and_the_feature() {
    let (mut s, _) = Session::new(cfg(false, false));
    s.auto = false;
    let token = "00112233445566778899aabbccddeeff";
    assert_eq!(codes(&s.send(format!("DCON {token} 2\r\n").as_bytes())), [530]);
    let mut off = cfg(false, false);
    off.dcon_port = None;
    let mut s = Session::logged_in(off);
    let out = s.send(b"FEAT\r\n");
    assert!(!replies(&out)[0].lines.iter().any(|l| l.contains("DCON")), "{out:?}");
    assert_eq!(codes(&s.send(format!("DCON {token} 2\r\n").as_bytes())), [502]);
}

/// PORT where the server may connect to any host (`--data-peers any`, for
/// third-party copies) still may not name its own loopback or its site's
/// private network for a client elsewhere: that client would reach, say, a
/// database on the server's loopback through it (a review's find). A
/// client on the same host or inside the same site may.
#[test]
fn port_to_any_host_is_not_port_into_the_servers_own_network() {
    let at = |client: &str| PiConfig { client: Some(client.parse().unwrap()), ..cfg(false, false) };
    let mut s = Session::logged_in(at("192.0.2.10"));
    for inner in ["PORT 127,0,0,1,24,235", "PORT 10,1,2,3,4,1", "PORT 192,168,0,9,4,1", "EPRT |2|::1|5000|"] {
        let out = s.send(format!("{inner}\r\n").as_bytes());
        assert_eq!(codes(&out), [501], "{inner}");
        assert!(actions(&out).is_empty(), "{inner}");
    }
    let far: SocketAddr = "198.51.100.7:1025".parse().unwrap();
    assert_eq!(actions(&s.send(b"PORT 198,51,100,7,4,1\r\n")), [&Action::Active(vec![far])]);
    let mut s = Session::logged_in(at("10.9.9.9"));
    let site: SocketAddr = "10.1.2.3:1025".parse().unwrap();
    assert_eq!(actions(&s.send(b"PORT 10,1,2,3,4,1\r\n")), [&Action::Active(vec![site])]);
    assert_eq!(codes(&s.send(b"PORT 127,0,0,1,4,1\r\n")), [501], "loopback from another host of the site");
    let mut s = Session::logged_in(at("127.0.0.1"));
    let lo: SocketAddr = "127.0.0.1:1025".parse().unwrap();
    assert_eq!(actions(&s.send(b"PORT 127,0,0,1,4,1\r\n")), [&Action::Active(vec![lo])]);
    // A client on the server's host (an SSH tunnel) may still name an
    // outside host: a third-party copy's destination.
    assert_eq!(actions(&s.send(b"PORT 198,51,100,7,4,1\r\n")), [&Action::Active(vec![far])]);
    let mut s = Session::logged_in(at("10.9.9.9"));
    assert_eq!(actions(&s.send(b"PORT 198,51,100,7,4,1\r\n")), [&Action::Active(vec![far])]);
}

/// Nor may it name the server's own public address for a client
/// elsewhere (a bounce into the host's own services: a security hunt's
/// find); a client on the host itself may.
#[test]
fn port_to_any_host_is_not_port_to_the_servers_own_address() {
    let host = vec!["127.0.0.1".parse().unwrap(), "198.51.100.1".parse().unwrap(), "2001:db8::1".parse().unwrap()];
    let at = |client: &str| PiConfig { client: Some(client.parse().unwrap()), host: host.clone(), ..cfg(false, false) };
    let mut s = Session::logged_in(at("203.0.113.2"));
    for own in ["PORT 198,51,100,1,183,166", "EPRT |1|198.51.100.1|47150|", "EPRT |2|2001:db8::1|5000|"] {
        let out = s.send(format!("{own}\r\n").as_bytes());
        assert_eq!(codes(&out), [501], "{own}");
        assert!(replies(&out)[0].text().contains("inside this server's host"), "{own}: {out:?}");
        assert!(actions(&out).is_empty(), "{own}");
    }
    let far: SocketAddr = "203.0.113.9:1025".parse().unwrap();
    assert_eq!(actions(&s.send(b"PORT 203,0,113,9,4,1\r\n")), [&Action::Active(vec![far])]);
    let own: SocketAddr = "198.51.100.1:1025".parse().unwrap();
    for local in ["198.51.100.1", "127.0.0.1", "::ffff:198.51.100.1"] {
        let mut s = Session::logged_in(at(local));
        assert_eq!(actions(&s.send(b"PORT 198,51,100,1,4,1\r\n")), [&Action::Active(vec![own])], "{local}");
    }
    // A data listener's port on the host (another server's PASV, for a
    // third-party copy between two servers of one host) is allowed.
    let mut s = Session::logged_in(PiConfig { host_data_ports: vec![(32768, 60999)], ..at("203.0.113.2") });
    let listener: SocketAddr = "198.51.100.1:40000".parse().unwrap();
    assert_eq!(actions(&s.send(b"PORT 198,51,100,1,156,64\r\n")), [&Action::Active(vec![listener])]);
    assert_eq!(codes(&s.send(b"PORT 198,51,100,1,24,235\r\n")), [501], "port 6379, a service's");
}
