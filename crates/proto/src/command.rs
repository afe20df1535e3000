//! Control-channel commands (RFC 959, 2389, 2428, 3659; GridFTP GFD.20).
//! A line from the network is hostile until [`Command::parse`] accepts it.

use crate::hostport::{parse_eprt, parse_port, AddrError};
use crate::ranges::{RangeError, RangeSet};
use std::net::SocketAddr;

mod opts;
use opts::parse_opts;
pub use opts::{opts_vret, opts_vret_copies, opts_vret_skip, opts_vsto_resume, MAX_VRET_AFTER};

/// A path argument exactly as the client sent it (may be any bytes but CR/LF/NUL).
pub type RawPath = Vec<u8>;

/// Why a command line was refused (turned into a 500/501 reply).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// Verb not known.
    #[error("'{0}': command not understood")]
    Unknown(String),
    /// Verb known, arguments wrong.
    #[error("syntax error in parameters: {0}")]
    Syntax(String),
    /// Bad host-port.
    #[error(transparent)]
    Addr(#[from] AddrError),
    /// Bad range list.
    #[error(transparent)]
    Range(#[from] RangeError),
}

impl CommandError {
    /// The FTP reply code for this error.
    pub fn code(&self) -> u16 {
        match self {
            CommandError::Unknown(_) => 500,
            _ => 501,
        }
    }
}

/// Argument of `REST`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Restart {
    /// Stream-mode byte offset.
    Offset(u64),
    /// GridFTP MODE E restart marker: ranges the receiver already has.
    Ranges(RangeSet),
}

/// `OPTS` sub-commands we act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opts {
    /// `OPTS RETR Parallelism=n,min,max;` and friends.
    Retr {
        /// Streams the server should open for RETR.
        parallelism: Option<u32>,
        /// Perf marker interval on RETR (seconds).
        markers: Option<u32>,
        /// `BlockSize=n;`: the largest MODE E block the receiver wants
        /// (GFD.20 names it for striped layouts; between lightpath peers it
        /// lets a sender use bigger blocks, see `lightpath_plan::Growth`).
        /// Within [`crate::modee::BLOCK_SIZE_OPTION`].
        block_size: Option<u64>,
    },
    /// `OPTS VRET After=<hex>;[Check=<16 hex>;]` (lightpath): the next
    /// VRET resumes a tree whose receiver holds every regular file up to
    /// this manifest path, in the walk's order, from an earlier try or run
    /// (docs/manifest.md).
    Vret(crate::held::TreeResume),
    /// `OPTS VRET Skip=<hex>;` (lightpath): the next VRET leaves out the
    /// regular file at this manifest path, and names it among the entries
    /// it could not read; the client asks so of a file that changed while
    /// being read on two tries (docs/manifest.md). Repeated for several.
    VretSkip(Vec<u8>),
    /// `OPTS VRET Copies=<n>;` (lightpath): the receiver of the next VRET
    /// takes each manifest chunk up to `n` times (1 to
    /// [`crate::manifest::MAX_COPIES`]), so the sender may put a copy on a
    /// second stream: one stalled stream then holds no entries back
    /// (docs/manifest.md).
    VretCopies(u8),
    /// `OPTS VSTO Mode=<octal>;[Modify=<ns>;]` (lightpath): the mode and
    /// mtime of the tree's own directory, for the next VSTO to apply.
    Vsto(crate::held::TreeRoot),
    /// `OPTS STOR Mode=<octal>;[Modify=<ns>;]` (lightpath): the source's
    /// mode and mtime, for the next `STOR` to give a file it creates
    /// before naming it (an existing file keeps its mode, as `cp` keeps
    /// it); a single file's counterpart of [`Opts::Vsto`].
    Stor(crate::held::TreeRoot),
    /// `OPTS VSTO After=<hex>;Check=<16 hex>;` (lightpath): the next VSTO
    /// resumes a tree an earlier run left; the sender leaves out every
    /// regular file up to `after`, and the receiving server first compares
    /// the check of the files it holds (docs/manifest.md).
    VstoResume(crate::held::TreeResume),
    /// `OPTS MLST fact;fact;`
    Mlst(String),
    /// `OPTS CKSM markers=N;` (GCT's): a `113` status marker every N
    /// seconds while a CKSM runs (`None`, 0: none). Other CKSM options are
    /// taken and ignored, as before.
    Cksm(Option<u32>),
    /// Any other `OPTS` (refused).
    Other(String),
}

/// `SITE` sub-commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Site {
    /// SITE HELP
    Help,
    /// SITE BUFSIZE / RETRBUFSIZE / STORBUFSIZE / SBUF ... n
    BufSize(u64),
    /// SITE CLIENTINFO k=v;...
    ClientInfo(String),
    /// SITE VERSION
    Version,
    /// SITE WHOAMI
    Whoami,
    /// SITE CHMOD mode path
    Chmod(u32, RawPath),
    /// Anything else (answered with 500).
    Other(String),
}

/// Checksum request (`CKSM alg offset length path`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CksumArgs {
    /// Algorithm name, upper-cased.
    pub alg: String,
    /// Start offset.
    pub offset: u64,
    /// Length, `None` for `-1` (to the end).
    pub len: Option<u64>,
    /// File.
    pub path: RawPath,
}

/// One parsed command.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Command {
    User(String),
    Pass(String),
    Syst,
    Feat,
    Help,
    Opts(Opts),
    /// TYPE A or I (the representation code only).
    Type(char),
    /// MODE S or E.
    Mode(char),
    Stru(char),
    Pasv,
    /// EPSV, EPSV 1/2, EPSV ALL
    Epsv(Option<String>),
    /// SPAS (striped passive).
    Spas,
    Port(SocketAddr),
    Eprt(SocketAddr),
    Spor(Vec<SocketAddr>),
    Retr(RawPath),
    Stor(RawPath),
    Appe(RawPath),
    /// ERET P offset length path
    Eret {
        offset: u64,
        len: u64,
        path: RawPath,
    },
    /// ESTO A offset path
    Esto {
        offset: u64,
        path: RawPath,
    },
    Rest(Restart),
    /// VRET path: send the tree (or file) at path as one virtual file (lightpath `LPVF`).
    Vret(RawPath),
    /// VSTO path: receive a virtual file and rebuild its tree under path (lightpath `LPVF`).
    Vsto(RawPath),
    /// DCON token count: adopt data connections opened ahead (lightpath, see [`crate::ahead`]).
    Dcon(crate::ahead::DconArgs),
    Size(RawPath),
    Mdtm(RawPath),
    Mlst(Option<RawPath>),
    Mlsd(Option<RawPath>),
    List(Option<RawPath>),
    Nlst(Option<RawPath>),
    Stat(Option<RawPath>),
    Cwd(RawPath),
    Cdup,
    Pwd,
    Mkd(RawPath),
    Rmd(RawPath),
    Dele(RawPath),
    Rnfr(RawPath),
    Rnto(RawPath),
    Allo(u64),
    Sbuf(u64),
    Site(Site),
    Cksm(CksumArgs),
    /// `MFMT YYYYMMDDHHMMSS[.fraction] path` (draft-somers-ftp-mfxx): set
    /// a file's or directory's modification time (seconds and
    /// nanoseconds since the epoch).
    Mfmt {
        /// The time.
        mtime: (i64, u32),
        /// The file or directory.
        path: RawPath,
    },
    Dcau(String),
    Pbsz(u64),
    Prot(char),
    Lang(String),
    Trev(String),
    Abor,
    Noop,
    Quit,
}

impl Command {
    /// Parse one line (CR LF already stripped).
    pub fn parse(line: &[u8]) -> Result<Command, CommandError> {
        if line.contains(&0) {
            return Err(CommandError::Syntax("NUL byte in command".into()));
        }
        let (verb, arg) = match line.iter().position(|&b| b == b' ') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &[][..]),
        };
        let verb = std::str::from_utf8(verb)
            .ok()
            .filter(|v| v.len() <= 8 && v.chars().all(|c| c.is_ascii_alphabetic()))
            .ok_or_else(|| CommandError::Unknown(String::from_utf8_lossy(&line[..line.len().min(16)]).into()))?
            .to_ascii_uppercase();
        parse_verb(&verb, arg)
    }

    /// The verb, for logs (never includes a password).
    pub fn verb(&self) -> &'static str {
        verb_name(self)
    }
}

/// Telnet's "interpret as command" byte (RFC 854).
const IAC: u8 = 0xFF;

/// A command line as a client puts it on the wire. RFC 959 commands are
/// Telnet lines, and RFC 854 sends a data byte 255 as `IAC IAC`: a 0xFF in
/// an argument (a name need not be UTF-8) is doubled, or a server that
/// interprets Telnet (ours: [`crate::LineBuffer::telnet`]) would take it
/// and the byte after it for a Telnet command. CR LF ends the line. The
/// caller keeps CR, LF and NUL out of `line` (they cannot travel in a
/// command at all).
pub fn wire_line(line: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(line.len() + 2);
    for &b in line {
        out.push(b);
        if b == IAC {
            out.push(IAC);
        }
    }
    out.extend_from_slice(b"\r\n");
    out
}

fn text(arg: &[u8]) -> Result<String, CommandError> {
    String::from_utf8(arg.to_vec()).map_err(|_| CommandError::Syntax("argument is not UTF-8".into()))
}

fn num(arg: &[u8]) -> Result<u64, CommandError> {
    let t = text(arg)?;
    let t = t.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CommandError::Syntax(format!("not a number: {:.32}", t)));
    }
    t.parse().map_err(|_| CommandError::Syntax("number too large".into()))
}

fn path(arg: &[u8]) -> Result<RawPath, CommandError> {
    if arg.is_empty() {
        return Err(CommandError::Syntax("missing path".into()));
    }
    Ok(arg.to_vec())
}

/// An optional path after `ls`-style options, which are ignored: clients
/// send `LIST -la`, and `LIST -a /dir` names `/dir` (it listed the
/// current directory: the whole argument was dropped).
fn opt_path(arg: &[u8]) -> Option<RawPath> {
    let mut rest = arg;
    while rest.starts_with(b"-") {
        let end = rest.iter().position(|&b| b == b' ')?;
        rest = rest[end..].trim_ascii_start();
    }
    (!rest.is_empty()).then(|| rest.to_vec())
}

fn one_char(arg: &[u8], allowed: &str) -> Result<char, CommandError> {
    let t = text(arg)?.to_ascii_uppercase();
    let c = t.chars().next().ok_or_else(|| CommandError::Syntax("missing argument".into()))?;
    if allowed.contains(c) {
        Ok(c)
    } else {
        Err(CommandError::Syntax(format!("'{:.16}' unrecognized", t)))
    }
}

fn parse_verb(verb: &str, arg: &[u8]) -> Result<Command, CommandError> {
    use Command as C;
    Ok(match verb {
        "USER" => C::User(text(arg)?),
        "PASS" => C::Pass(String::from_utf8_lossy(arg).into_owned()),
        "SYST" => C::Syst,
        "FEAT" => C::Feat,
        "HELP" => C::Help,
        "OPTS" => C::Opts(parse_opts(&text(arg)?)?),
        "TYPE" => C::Type(one_char(arg, "AIL")?),
        "MODE" => C::Mode(one_char(arg, "SE")?),
        "STRU" => C::Stru(one_char(arg, "F")?),
        "PASV" => C::Pasv,
        "EPSV" => C::Epsv(if arg.is_empty() { None } else { Some(text(arg)?) }),
        "SPAS" => C::Spas,
        "PORT" => C::Port(parse_port(&text(arg)?)?),
        "EPRT" => C::Eprt(parse_eprt(&text(arg)?)?),
        "SPOR" => C::Spor(parse_spor(&text(arg)?)?),
        "RETR" => C::Retr(path(arg)?),
        "STOR" => C::Stor(path(arg)?),
        "APPE" => C::Appe(path(arg)?),
        "ERET" => parse_eret(arg)?,
        "ESTO" => parse_esto(arg)?,
        "REST" => C::Rest(parse_rest(&text(arg)?)?),
        "VRET" => C::Vret(path(arg)?),
        "VSTO" => C::Vsto(path(arg)?),
        "DCON" => C::Dcon(crate::ahead::parse_dcon(&text(arg)?)?),
        _ => return parse_verb2(verb, arg),
    })
}

fn parse_verb2(verb: &str, arg: &[u8]) -> Result<Command, CommandError> {
    use Command as C;
    Ok(match verb {
        "SIZE" => C::Size(path(arg)?),
        "MDTM" => C::Mdtm(path(arg)?),
        "MLST" => C::Mlst(opt_path(arg)),
        "MLSD" => C::Mlsd(opt_path(arg)),
        "LIST" => C::List(opt_path(arg)),
        "NLST" => C::Nlst(opt_path(arg)),
        "STAT" => C::Stat(opt_path(arg)),
        "CWD" => C::Cwd(path(arg)?),
        "CDUP" => C::Cdup,
        "PWD" => C::Pwd,
        "MKD" => C::Mkd(path(arg)?),
        "RMD" => C::Rmd(path(arg)?),
        "DELE" => C::Dele(path(arg)?),
        "RNFR" => C::Rnfr(path(arg)?),
        "RNTO" => C::Rnto(path(arg)?),
        "ALLO" => C::Allo(num(arg.split(|&b| b == b' ').next().unwrap_or(arg))?),
        "SBUF" => C::Sbuf(num(arg)?),
        "SITE" => C::Site(parse_site(arg)?),
        "CKSM" => C::Cksm(parse_cksm(arg)?),
        "MFMT" => parse_mfmt(arg)?,
        "DCAU" => C::Dcau(text(arg)?),
        "PBSZ" => C::Pbsz(num(arg)?),
        "PROT" => C::Prot(one_char(arg, "CSEP")?),
        "LANG" => C::Lang(text(arg)?),
        "TREV" => C::Trev(text(arg)?),
        "ABOR" => C::Abor,
        "NOOP" => C::Noop,
        "QUIT" => C::Quit,
        other => return Err(CommandError::Unknown(other.to_string())),
    })
}

fn parse_rest(t: &str) -> Result<Restart, CommandError> {
    let t = t.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return Ok(Restart::Offset(num(t.as_bytes())?));
    }
    if t.eq_ignore_ascii_case("STREAM") {
        return Err(CommandError::Syntax("REST STREAM is a feature, not an argument".into()));
    }
    Ok(Restart::Ranges(RangeSet::parse(t)?))
}

fn parse_spor(t: &str) -> Result<Vec<SocketAddr>, CommandError> {
    // `h1,...,p2` or, over IPv6, `|2|addr|port|` (the form of GCT's SPAS).
    let one = |hp: &str| if hp.starts_with('|') { parse_eprt(hp) } else { parse_port(hp) };
    let addrs: Vec<SocketAddr> = t.split_whitespace().map(one).collect::<Result<_, _>>()?;
    if addrs.is_empty() || addrs.len() > 64 {
        return Err(CommandError::Syntax("SPOR needs 1 to 64 host-ports".into()));
    }
    Ok(addrs)
}

/// Split `n1 n2 ... rest` into `count` numbers and the rest (a path with spaces).
fn split_nums(arg: &[u8], count: usize) -> Result<(Vec<&[u8]>, &[u8]), CommandError> {
    let mut parts = Vec::with_capacity(count);
    let mut rest = arg;
    for _ in 0..count {
        let i = rest.iter().position(|&b| b == b' ').ok_or_else(|| CommandError::Syntax("too few arguments".into()))?;
        parts.push(&rest[..i]);
        rest = &rest[i + 1..];
    }
    Ok((parts, rest))
}

fn parse_eret(arg: &[u8]) -> Result<Command, CommandError> {
    let (p, rest) = split_nums(arg, 3)?;
    if !p[0].eq_ignore_ascii_case(b"P") {
        return Err(CommandError::Syntax("only ERET P (partial) is supported".into()));
    }
    Ok(Command::Eret { offset: num(p[1])?, len: num(p[2])?, path: path(rest)? })
}

fn parse_esto(arg: &[u8]) -> Result<Command, CommandError> {
    let (p, rest) = split_nums(arg, 2)?;
    if !p[0].eq_ignore_ascii_case(b"A") {
        return Err(CommandError::Syntax("only ESTO A (adjusted) is supported".into()));
    }
    Ok(Command::Esto { offset: num(p[1])?, path: path(rest)? })
}

fn parse_cksm(arg: &[u8]) -> Result<CksumArgs, CommandError> {
    let (p, rest) = split_nums(arg, 3)?;
    let alg = text(p[0])?.to_ascii_uppercase();
    let len = if p[2] == b"-1" { None } else { Some(num(p[2])?) };
    Ok(CksumArgs { alg, offset: num(p[1])?, len, path: path(rest)? })
}

fn parse_site(arg: &[u8]) -> Result<Site, CommandError> {
    let (sub, rest) = match arg.iter().position(|&b| b == b' ') {
        Some(i) => (&arg[..i], &arg[i + 1..]),
        None => (arg, &[][..]),
    };
    let sub = text(sub)?.to_ascii_uppercase();
    Ok(match sub.as_str() {
        "HELP" => Site::Help,
        "BUFSIZE" | "SBUF" | "RETRBUFSIZE" | "RBUFSZ" | "RBUFSIZ" | "STORBUFSIZE" | "SBUFSZ" | "SBUFSIZ" => {
            Site::BufSize(num(rest)?)
        }
        "CLIENTINFO" => Site::ClientInfo(String::from_utf8_lossy(rest).into_owned()),
        "VERSION" => Site::Version,
        "WHOAMI" => Site::Whoami,
        "CHMOD" => {
            let (m, p) = split_nums(rest, 1)?;
            let mode = u32::from_str_radix(&text(m[0])?, 8).map_err(|_| CommandError::Syntax("bad mode".into()))?;
            if mode > 0o7777 {
                return Err(CommandError::Syntax("bad mode".into()));
            }
            Site::Chmod(mode, path(p)?)
        }
        other => Site::Other(other.chars().take(32).collect()),
    })
}

/// `MFMT <time> <path>`: the time as MDTM gives it, a space, the path.
fn parse_mfmt(arg: &[u8]) -> Result<Command, CommandError> {
    let bad = || CommandError::Syntax("MFMT needs YYYYMMDDHHMMSS[.fraction] and a path".into());
    let sp = arg.iter().position(|&b| b == b' ').ok_or_else(bad)?;
    let t = std::str::from_utf8(&arg[..sp]).map_err(|_| bad())?;
    let mtime = crate::ftptime::parse_ns(t).ok_or_else(bad)?;
    Ok(Command::Mfmt { mtime, path: path(&arg[sp + 1..])? })
}

fn verb_name(c: &Command) -> &'static str {
    use Command as C;
    match c {
        C::User(_) => "USER",
        C::Pass(_) => "PASS",
        C::Syst => "SYST",
        C::Feat => "FEAT",
        C::Help => "HELP",
        C::Opts(_) => "OPTS",
        C::Type(_) => "TYPE",
        C::Mode(_) => "MODE",
        C::Stru(_) => "STRU",
        C::Pasv => "PASV",
        C::Epsv(_) => "EPSV",
        C::Spas => "SPAS",
        C::Port(_) => "PORT",
        C::Eprt(_) => "EPRT",
        C::Spor(_) => "SPOR",
        C::Retr(_) => "RETR",
        C::Stor(_) => "STOR",
        C::Appe(_) => "APPE",
        C::Eret { .. } => "ERET",
        C::Esto { .. } => "ESTO",
        C::Rest(_) => "REST",
        C::Vret(_) => "VRET",
        C::Vsto(_) => "VSTO",
        C::Dcon(_) => "DCON",
        C::Size(_) => "SIZE",
        C::Mdtm(_) => "MDTM",
        C::Mlst(_) => "MLST",
        C::Mlsd(_) => "MLSD",
        C::List(_) => "LIST",
        C::Nlst(_) => "NLST",
        C::Stat(_) => "STAT",
        C::Cwd(_) => "CWD",
        C::Cdup => "CDUP",
        C::Pwd => "PWD",
        C::Mkd(_) => "MKD",
        C::Rmd(_) => "RMD",
        C::Dele(_) => "DELE",
        C::Rnfr(_) => "RNFR",
        C::Rnto(_) => "RNTO",
        C::Allo(_) => "ALLO",
        C::Sbuf(_) => "SBUF",
        C::Site(_) => "SITE",
        C::Cksm(_) => "CKSM",
        C::Mfmt { .. } => "MFMT",
        C::Dcau(_) => "DCAU",
        C::Pbsz(_) => "PBSZ",
        C::Prot(_) => "PROT",
        C::Lang(_) => "LANG",
        C::Trev(_) => "TREV",
        C::Abor => "ABOR",
        C::Noop => "NOOP",
        C::Quit => "QUIT",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guc_commands_parse() {
        assert_eq!(
            Command::parse(b"OPTS RETR Parallelism=4,4,4;").unwrap(),
            Command::Opts(Opts::Retr { parallelism: Some(4), markers: None, block_size: None })
        );
        assert!(Command::parse(b"OPTS RETR Parallelism=4,4,4").is_err());
        assert_eq!(
            Command::parse(b"OPTS RETR Parallelism=8,8,8;BlockSize=1048576;").unwrap(),
            Command::Opts(Opts::Retr { parallelism: Some(8), markers: None, block_size: Some(1 << 20) })
        );
        assert_eq!(
            Command::parse(b"ERET P 1000 5000 /a b").unwrap(),
            Command::Eret { offset: 1000, len: 5000, path: b"/a b".to_vec() }
        );
        assert_eq!(Command::parse(b"ESTO A 7 /x").unwrap(), Command::Esto { offset: 7, path: b"/x".to_vec() });
        assert_eq!(
            Command::parse(b"rest 0-1000,2000-3000").unwrap(),
            Command::Rest(Restart::Ranges(RangeSet::parse("0-1000,2000-3000").unwrap()))
        );
        assert_eq!(Command::parse(b"REST 100").unwrap(), Command::Rest(Restart::Offset(100)));
        let c = Command::parse(b"CKSM ADLER32 0 -1 /f").unwrap();
        assert_eq!(c, Command::Cksm(CksumArgs { alg: "ADLER32".into(), offset: 0, len: None, path: b"/f".to_vec() }));
        assert_eq!(Command::parse(b"SITE RETRBUFSIZE 1048576").unwrap(), Command::Site(Site::BufSize(1 << 20)));
        assert_eq!(Command::parse(b"SPOR 127,0,0,1,4,1 127,0,0,1,4,2").unwrap().verb(), "SPOR");
    }

    #[test]
    fn list_options_are_dropped_and_the_path_after_them_kept() {
        let list = |l: &[u8]| Command::parse(l).unwrap();
        assert_eq!(list(b"LIST -la"), Command::List(None));
        assert_eq!(list(b"LIST -a /dir"), Command::List(Some(b"/dir".to_vec())));
        assert_eq!(list(b"LIST -l -a  my dir"), Command::List(Some(b"my dir".to_vec())));
        assert_eq!(list(b"NLST -l "), Command::Nlst(None));
        assert_eq!(list(b"LIST d"), Command::List(Some(b"d".to_vec())));
    }

    /// What a client sends, a server that interprets Telnet reads back
    /// byte for byte, 0xFF and the bytes after it included.
    #[test]
    fn wire_lines_double_iac() {
        assert_eq!(wire_line(b"RETR a\xff\xfbz"), b"RETR a\xff\xff\xfbz\r\n");
        assert_eq!(wire_line(b"NOOP"), b"NOOP\r\n");
        for name in [&b"a\xff\xfbz"[..], b"x\xff", b"\xff\xff\xf4", b"\xff"] {
            let mut cmd = b"STOR ".to_vec();
            cmd.extend_from_slice(name);
            let mut lb = crate::LineBuffer::telnet();
            lb.handle_bytes(&wire_line(&cmd));
            assert_eq!(lb.poll_line(), Some(crate::Line::Text(cmd.clone())));
            assert_eq!(Command::parse(&cmd).unwrap(), Command::Stor(name.to_vec()));
        }
    }

    proptest::proptest! {
        #[test]
        fn any_line_survives_the_servers_telnet_filter(
            line in proptest::collection::vec(proptest::num::u8::ANY, 0..64)
        ) {
            let line: Vec<u8> = line.into_iter().filter(|b| !matches!(b, b'\r' | b'\n')).collect();
            let mut lb = crate::LineBuffer::telnet();
            lb.handle_bytes(&wire_line(&line));
            proptest::prop_assert_eq!(lb.poll_line(), Some(crate::Line::Text(line)));
        }
    }

    #[test]
    fn hostile_lines() {
        for bad in [
            &b"XYZZY"[..],
            b"TYPE E",
            b"MODE B",
            b"RETR",
            b"REST 5-3",
            b"PORT 1,2,3",
            b"ERET X 1 2 /p",
            b"ALLO -5",
            b"\xff\xfe",
            b"RETR a\0b",
            b"OPTS RETR Parallelism=0;",
            b"OPTS VRET After=;",
            b"OPTS VRET After=6;",
            b"OPTS VRET After=zz;",
            b"OPTS VRET After=+1;",
            b"OPTS VRET Before=61;",
            b"OPTS VRET After=61",
            b"OPTS VRET After=61;Check=1;",
            b"OPTS VRET After=61;Check=00000000000000zz;",
            b"OPTS VRET After=61;Check=+000000000000001;",
            b"OPTS VRET After=61;Check=00000000000000001;",
            b"OPTS VRET After=61;Check=0000000000000001",
            b"OPTS VRET After=61;Check=0000000000000001;Check=0000000000000001;",
            b"OPTS VRET After=61;Other=1;",
            b"OPTS VRET Skip=;",
            b"OPTS VRET Skip=6;",
            b"OPTS VRET Skip=61",
            b"OPTS VRET Skip=61;After=62;",
            b"OPTS VRET After=61;Skip=62;",
            b"OPTS VRET Skip=61;Check=0000000000000001;",
            b"OPTS VSTO Mode=;",
            b"OPTS VSTO Mode=8;",
            b"OPTS VSTO Mode=17777;",
            b"OPTS VSTO Mode=755",
            b"OPTS VSTO Mode=755;Modify=;",
            b"OPTS VSTO Mode=755;Modify=1x;",
            b"OPTS VSTO Mode=755;Modify=+1;",
            b"OPTS VSTO Mode=755;Modify=99999999999999999999;",
            b"OPTS VSTO Mode=755;Modify=1;Other=2;",
            b"OPTS VSTO Modify=1;Mode=755;",
            b"OPTS VSTO After=61;",
            b"OPTS VSTO After=;Check=0000000000000001;",
            b"OPTS VSTO After=61;Check=1;",
            b"OPTS VSTO After=61;Mode=755;",
            b"OPTS VSTO Check=0000000000000001;After=61;",
            b"OPTS VRET Check=0000000000000001;After=61;",
            b"OPTS RETR BlockSize=0;",
            b"OPTS RETR BlockSize=4095;",
            b"OPTS RETR BlockSize=16777217;",
            b"OPTS RETR BlockSize=1M;",
            b"OPTS RETR BlockSize=99999999999999999999999;",
        ] {
            assert!(Command::parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn opts_vsto_carries_the_roots_mode_and_mtime() {
        use crate::held::TreeRoot;
        for root in [
            TreeRoot { mode: 0o700, mtime_ns: None },
            TreeRoot { mode: 0o2775, mtime_ns: Some(1_764_210_000_123_456_789) },
            TreeRoot { mode: 0, mtime_ns: Some(-1_000_000_001) },
        ] {
            assert_eq!(Command::parse(&root.opts()).unwrap(), Command::Opts(Opts::Vsto(root)));
        }
    }

    #[test]
    fn opts_vret_carries_any_path_bytes() {
        use crate::held::TreeResume;
        let after = b"a b/\n\xff\x00;=/f".to_vec();
        for check in [None, Some(0), Some(0x0123_4567_89ab_cdef), Some(u64::MAX)] {
            let want = Command::Opts(Opts::Vret(TreeResume { after: after.clone(), check }));
            assert_eq!(Command::parse(&opts_vret(&after, check)).unwrap(), want);
        }
        let long = vec![b'x'; MAX_VRET_AFTER];
        assert!(Command::parse(&opts_vret(&long, Some(7))).is_ok());
        assert!(Command::parse(&opts_vret(&[long, vec![b'y']].concat(), None)).is_err());
    }

    /// A file the next VRET leaves out: any bytes, up to the length of
    /// `After=`.
    #[test]
    fn opts_vret_skip_carries_any_path_bytes() {
        let path = b"a b/\n\xff\x00;=/f".to_vec();
        assert_eq!(Command::parse(&opts_vret_skip(&path)).unwrap(), Command::Opts(Opts::VretSkip(path)));
        assert_eq!(Command::parse(b"OPTS VRET skip=61;").unwrap(), Command::Opts(Opts::VretSkip(b"a".to_vec())));
        let long = vec![b'x'; MAX_VRET_AFTER];
        assert!(Command::parse(&opts_vret_skip(&long)).is_ok());
        assert!(Command::parse(&opts_vret_skip(&[long, vec![b'y']].concat())).is_err());
    }

    /// Manifest copies: 1 to MAX_COPIES, decimal digits only.
    #[test]
    fn opts_vret_copies_takes_one_to_max_copies() {
        use crate::manifest::MAX_COPIES;
        assert_eq!(Command::parse(&opts_vret_copies(2)).unwrap(), Command::Opts(Opts::VretCopies(2)));
        assert_eq!(Command::parse(b"OPTS VRET copies=1;").unwrap(), Command::Opts(Opts::VretCopies(1)));
        for bad in ["Copies=0;", "Copies=3;", "Copies=+2;", "Copies=2", "Copies=;", "Copies=2;Skip=61;", "Copies=02x;"]
        {
            assert!(Command::parse(format!("OPTS VRET {bad}").as_bytes()).is_err(), "{bad}");
        }
        assert!(Command::parse(&opts_vret_copies(MAX_COPIES + 1)).is_err());
    }

    /// An upload resumed across runs: the same path and check as a VRET's,
    /// the check required.
    #[test]
    fn opts_vsto_resume_carries_any_path_bytes_and_its_check() {
        use crate::held::TreeResume;
        let after = b"a b/\n\xff\x00;=/f".to_vec();
        for check in [0, 0x0123_4567_89ab_cdef, u64::MAX] {
            let want = Command::Opts(Opts::VstoResume(TreeResume { after: after.clone(), check: Some(check) }));
            assert_eq!(Command::parse(&opts_vsto_resume(&after, check)).unwrap(), want);
        }
        let long = vec![b'x'; MAX_VRET_AFTER + 1];
        assert!(Command::parse(&opts_vsto_resume(&long, 7)).is_err());
    }
}
