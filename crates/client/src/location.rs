//! Where a copy reads or writes: a local path or `ftp://[user[:pass]@]host[:port]/path`.

use std::path::PathBuf;

/// Errors in a source or destination argument.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LocationError {
    /// Not a URL we can use.
    #[error("bad URL {0}: {1}")]
    Url(String, String),
    /// `LIGHTPATH_PASSWORD` would go to more than one login.
    #[error(
        "LIGHTPATH_PASSWORD would be sent to {0}: it is one password, for one user of one server; give the others in their URLs"
    )]
    SharedPassword(String),
}

/// A GridFTP server and a path on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Remote {
    /// Host name or address.
    pub host: String,
    /// Control port.
    pub port: u16,
    /// User (default `anonymous`).
    pub user: String,
    /// Password (default `lightpath@`).
    pub pass: String,
    /// Path on the server (percent-decoded bytes, starts with `/`).
    pub path: Vec<u8>,
}

impl Remote {
    /// The same server with another path.
    pub fn with_path(&self, path: Vec<u8>) -> Remote {
        Remote { path, ..self.clone() }
    }

    /// Server identity (for session reuse).
    pub fn server_key(&self) -> (String, u16, String) {
        (self.host.clone(), self.port, self.user.clone())
    }

    /// For messages.
    pub fn display(&self) -> String {
        format!("ftp://{}{}", host_port(&self.host, self.port), String::from_utf8_lossy(&self.path))
    }
}

/// `host:port`, an IPv6 address in brackets (`[::1]:2811`): as written
/// in a URL, and not ambiguous.
pub fn host_port(host: &str, port: u16) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// A copy endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A local file or directory.
    Local(PathBuf),
    /// A file or directory on a GridFTP server.
    Remote(Remote),
}

impl Location {
    /// Parse a command-line argument as the OS gave it: a local path may
    /// hold any bytes (a name that is not UTF-8 is a file name like any
    /// other); a URL must be UTF-8, other bytes percent-encoded.
    pub fn parse_os(arg: &std::ffi::OsStr) -> Result<Location, LocationError> {
        use std::os::unix::ffi::OsStrExt;
        if let Some(text) = arg.to_str() {
            return Location::parse(text);
        }
        let raw = arg.as_bytes();
        if [&b"ftp://"[..], b"gsiftp://", b"file:/"].iter().any(|s| raw.starts_with(s)) {
            let shown = String::from_utf8_lossy(raw).into_owned();
            return Err(LocationError::Url(shown, "not UTF-8 (percent-encode other bytes, e.g. %FF)".into()));
        }
        Ok(Location::Local(PathBuf::from(arg)))
    }

    /// Parse a command-line argument: `ftp://` (any case) is a server's,
    /// `file://` (with no host or `localhost`), `file:/path`, and anything without a
    /// scheme a local path; other schemes are refused, not taken for a
    /// local path.
    pub fn parse(arg: &str) -> Result<Location, LocationError> {
        // The URL an error shows has no password (it went to cron logs).
        Self::parse_shown(arg).map_err(|e| match e {
            LocationError::Url(u, why) => LocationError::Url(without_password(&u), why),
            e => e,
        })
    }

    fn parse_shown(arg: &str) -> Result<Location, LocationError> {
        if let Some(path) = file_minimal(arg) {
            return parse_file(arg, path);
        }
        let Some((scheme, rest)) = split_scheme(arg) else {
            return Ok(Location::Local(PathBuf::from(arg)));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "ftp" => parse_ftp(&format!("ftp://{rest}")),
            "file" => parse_file(arg, rest.strip_prefix("localhost").unwrap_or(rest)),
            "gsiftp" => Err(LocationError::Url(arg.into(), "gsiftp:// (GSI) is not supported; use ftp://".into())),
            _ => Err(LocationError::Url(
                arg.into(),
                format!("{scheme}:// is not supported (ftp:// and file:// are; ./{arg} names a local path)"),
            )),
        }
    }

    /// Whether the argument names a directory by its trailing slash, or
    /// (a local path) by ending in `.` or `..`: such a source's contents
    /// go into the destination, as `cp -r .. dst/` and rsync do. Its name
    /// joined to the destination (`dst/..`) wrote into the destination's
    /// parent, over its files (a defect hunt's find).
    pub fn is_dir_syntax(&self) -> bool {
        match self {
            Location::Local(p) => {
                let b = p.as_os_str().as_encoded_bytes();
                let last = b.rsplit(|&c| c == b'/').next().unwrap_or(b);
                b.ends_with(b"/") || last == b"." || last == b".."
            }
            Location::Remote(r) => r.path.ends_with(b"/"),
        }
    }
}

/// The path of a `file:/path` URL (RFC 8089's form without an authority),
/// which globus-url-copy takes for `/path`: read as a relative local
/// path, it failed as "No such file" (`./file:/x` still names that).
fn file_minimal(arg: &str) -> Option<&str> {
    let head = arg.get(..6)?;
    (head.eq_ignore_ascii_case("file:/") && !arg[5..].starts_with("//")).then(|| &arg[5..])
}

/// `scheme` and what follows `scheme://`, if `arg` starts so (RFC 3986's
/// scheme: a letter, then letters, digits, `+`, `-`, `.`).
fn split_scheme(arg: &str) -> Option<(&str, &str)> {
    let (scheme, rest) = arg.split_once("://")?;
    let mut c = scheme.chars();
    let ok = c.next().is_some_and(|f| f.is_ascii_alphabetic())
        && c.all(|x| x.is_ascii_alphanumeric() || matches!(x, '+' | '-' | '.'));
    ok.then_some((scheme, rest))
}

/// An `ftp://` URL. A `?` or `#` in it is part of the path, as GCT's
/// client takes `?` (a URL parser cut them off, as a query and a
/// fragment: `ftp://h/run#1` fetched `/run`).
fn parse_ftp(arg: &str) -> Result<Location, LocationError> {
    check_raw(arg)?;
    // `ftp:///x` would take `x` for the host (WHATWG's special schemes).
    if arg.split_once("://").is_some_and(|(_, rest)| rest.starts_with(['/', '\\'])) {
        return Err(LocationError::Url(arg.into(), "no host".into()));
    }
    // A backslash is a byte of a name (or a password) to a server, but a
    // `/` to WHATWG's parser: `ftp://h/a\b` would name `/a/b`. Encoded,
    // it is decoded back below.
    let escaped = arg.replace('\\', "%5C");
    let u = url::Url::parse(&escaped).map_err(|e| LocationError::Url(arg.into(), e.to_string()))?;
    let host = u.host_str().ok_or_else(|| LocationError::Url(arg.into(), "no host".into()))?;
    let user = if u.username().is_empty() { "anonymous".to_string() } else { decode(u.username()) };
    let pass = match u.password() {
        Some(p) => decode(p),
        None if !is_anonymous(&user) => password_from_env().unwrap_or_else(|| "lightpath@".to_string()),
        None => "lightpath@".to_string(),
    };
    let mut raw = u.path().to_string();
    if let Some(q) = u.query() {
        raw = format!("{raw}?{q}");
    }
    if let Some(f) = u.fragment() {
        raw = format!("{raw}#{f}");
    }
    Ok(Location::Remote(Remote {
        host: host.trim_matches(['[', ']']).to_string(),
        port: u.port().unwrap_or(if names_a_port(&escaped) { 21 } else { 2811 }),
        user,
        pass,
        path: percent_decode(&raw),
    }))
}

/// Whether `user` is an anonymous login, whose password is no secret
/// (an e-mail address by custom): `LIGHTPATH_PASSWORD` never goes there.
pub(crate) fn is_anonymous(user: &str) -> bool {
    ["anonymous", "ftp"].contains(&user)
}

/// Refuses `args` (a command's paths) when `LIGHTPATH_PASSWORD` would go
/// to more than one login (user, host, port): a third-party copy naming
/// two users sent the one site's password to the other (a review's find).
pub fn one_env_password(args: &[std::ffi::OsString]) -> Result<(), LocationError> {
    if password_from_env().is_none() {
        return Ok(());
    }
    let mut logins: Vec<String> = Vec::new();
    for arg in args.iter().filter_map(|a| a.to_str()) {
        let Ok(Location::Remote(r)) = Location::parse(arg) else { continue };
        let login = format!("{}@{}:{}", r.user, r.host, r.port);
        if without_password(arg) == arg && !is_anonymous(&r.user) && !logins.contains(&login) {
            logins.push(login);
        }
    }
    match logins.len() {
        0 | 1 => Ok(()),
        _ => Err(LocationError::SharedPassword(logins.join(" and "))),
    }
}

/// The password of a user a URL names without one: `LIGHTPATH_PASSWORD`.
/// A password in the URL is in every process list (`/proc/PID/cmdline`
/// is readable by all users: a security hunt's find); the environment
/// is the owner's alone.
fn password_from_env() -> Option<String> {
    std::env::var("LIGHTPATH_PASSWORD").ok().filter(|p| !p.is_empty())
}

/// URL `arg` as written, without the password of its user
/// (`ftp://bob:secret@h/f` is `ftp://bob@h/f`): for output that may be
/// kept or shared (`sum` printed it).
pub fn without_password(arg: &str) -> String {
    let Some((scheme, authority, tail)) = split_authority(arg) else { return arg.to_string() };
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            format!("{scheme}://{user}@{host}{tail}")
        }
        None => arg.to_string(),
    }
}

/// URL `arg` as its scheme, its authority (`user:pass@host:port`, as
/// written) and the rest (path, query, fragment); `None` without `://`.
fn split_authority(arg: &str) -> Option<(&str, &str, &str)> {
    let (scheme, rest) = arg.split_once("://")?;
    let (authority, tail) = rest.split_at(rest.find(['/', '?', '#']).unwrap_or(rest.len()));
    Some((scheme, authority, tail))
}

/// Whether the authority of URL `arg` ends in `:DIGITS`. The `url` crate
/// drops a port that is the scheme's default, so `ftp://h:21/` looked
/// like `ftp://h/` and went to GridFTP's 2811 (a defect hunt's find).
fn names_a_port(arg: &str) -> bool {
    let Some((_, authority, _)) = split_authority(arg) else { return false };
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let after_host = host_port.rsplit_once(']').map_or(host_port, |(_, p)| p);
    after_host.rsplit_once(':').is_some_and(|(_, p)| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
}

/// `file:///path`: the path percent-decoded (RFC 8089), as
/// globus-url-copy reads it: `file:///tmp/my%20file` is `/tmp/my file`.
/// It was taken as it was written, so a guc script's upload failed or
/// read another file, and its download wrote `my%20file`, exit 0 (a
/// defect hunt's find).
fn parse_file(arg: &str, path: &str) -> Result<Location, LocationError> {
    use std::os::unix::ffi::OsStringExt;
    if !path.starts_with('/') {
        return Err(LocationError::Url(arg.into(), "a file:// URL names a local path: file:///path".into()));
    }
    let bytes = percent_decode(path);
    if bytes.contains(&0) {
        return Err(LocationError::Url(arg.into(), "%00 cannot be in a path".into()));
    }
    Ok(Location::Local(PathBuf::from(std::ffi::OsString::from_vec(bytes))))
}

/// A URL parser (WHATWG's rules, the `url` crate's) drops every tab and
/// line break and trims spaces and control characters at both ends, so
/// `ftp://h/new<LF>line` would name `/newline`, another file, and
/// `ftp://h/f<space>` the file `f`. Such a URL is refused; its bytes can
/// be given percent-encoded (`%0A`, `%20`).
fn check_raw(arg: &str) -> Result<(), LocationError> {
    let bad = |c: char| c.is_ascii_control();
    if arg.contains(bad) || arg.trim() != arg {
        let shown = arg.escape_debug().to_string();
        let why = "a tab, line break or other control character, or a space at an end, would be dropped from it; \
                   percent-encode such bytes (e.g. %0A, %20)";
        return Err(LocationError::Url(shown, why.into()));
    }
    Ok(())
}

fn decode(s: &str) -> String {
    String::from_utf8_lossy(&percent_decode(s)).into_owned()
}

fn percent_decode(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            // Bytes, not `&s[..]`: what follows a `%` of a file:// URL as
            // the user wrote it may be a character of several bytes.
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let Location::Remote(r) = Location::parse("ftp://bob:p%40ss@host:2812/a%20b/c").unwrap() else { panic!() };
        assert_eq!((r.host.as_str(), r.port, r.user.as_str(), r.pass.as_str()), ("host", 2812, "bob", "p@ss"));
        assert_eq!(r.path, b"/a b/c");
        assert_eq!(Location::parse("/tmp/x").unwrap(), Location::Local("/tmp/x".into()));
        assert_eq!(Location::parse("file:///tmp/x").unwrap(), Location::Local("/tmp/x".into()));
        assert!(Location::parse("gsiftp://h/x").is_err());
        use std::os::unix::ffi::OsStrExt;
        let odd = std::ffi::OsStr::from_bytes(b"/tmp/\xffbyte");
        assert_eq!(Location::parse_os(odd).unwrap(), Location::Local(PathBuf::from(odd)));
        assert!(Location::parse_os(std::ffi::OsStr::from_bytes(b"ftp://h/\xff")).is_err());
        assert_eq!(Location::parse_os("ftp://h/%ff".as_ref()).unwrap(), Location::parse("ftp://h/%ff").unwrap());
        assert!(Location::parse("ftp://h/d/").unwrap().is_dir_syntax());
        let file = |u: &str| Location::parse(u).unwrap();
        assert_eq!(file("file:///tmp/my%20file"), Location::Local(PathBuf::from("/tmp/my file")));
        assert_eq!(file("file://localhost/a%2Fb%25"), Location::Local(PathBuf::from("/a/b%")));
        assert_eq!(file("file:///%aé%"), Location::Local(PathBuf::from("/%aé%")));
        assert_eq!(file("file:///%ff"), Location::Local(PathBuf::from(std::ffi::OsStr::from_bytes(b"/\xff"))));
        assert!(Location::parse("file:///a%00b").is_err());
        let e = Location::parse("ftp://alice:pw1@127.0.0.1:99999/x").unwrap_err().to_string();
        assert!(e.contains("ftp://alice@127.0.0.1:99999/x") && !e.contains("pw1"), "{e}");
        assert_eq!(file("file:/tmp/x"), Location::Local("/tmp/x".into()));
        assert_eq!(file("FILE:/a%20b"), Location::Local("/a b".into()));
        assert_eq!(file("./file:/x"), Location::Local("./file:/x".into()));
        assert!(Location::parse_os(std::ffi::OsStr::from_bytes(b"file:/\xff")).is_err());
        for dir in ["..", ".", "a/..", "/x/."] {
            assert!(Location::parse(dir).unwrap().is_dir_syntax(), "{dir}");
        }
        assert!(!Location::parse("a..").unwrap().is_dir_syntax());
        assert!(!Location::parse(".hidden").unwrap().is_dir_syntax());
        let Location::Remote(r) = Location::parse("ftp://[::1]/%ff").unwrap() else { panic!() };
        assert_eq!((r.host.as_str(), r.path.as_slice()), ("::1", &b"/\xff"[..]));
        assert_eq!(r.with_path(b"/f".to_vec()).display(), "ftp://[::1]:2811/f", "brackets, as in a URL");
    }

    #[test]
    fn a_password_is_left_out_of_a_url_shown() {
        assert_eq!(without_password("ftp://bob:p%40ss@h:2811/a@b"), "ftp://bob@h:2811/a@b");
        assert_eq!(without_password("ftp://bob@h/f"), "ftp://bob@h/f");
        assert_eq!(without_password("ftp://h/f:x@y"), "ftp://h/f:x@y");
    }

    /// A port written is the port used: `:21` (ftp's default, which the
    /// `url` crate drops) went to 2811, as if none had been written.
    #[test]
    fn an_explicit_port_21_is_kept() {
        let port = |u: &str| match Location::parse(u).unwrap() {
            Location::Remote(r) => r.port,
            Location::Local(_) => panic!("{u}"),
        };
        for (u, p) in [
            ("ftp://h:21/x", 21),
            ("ftp://h/x", 2811),
            ("ftp://h:/x", 2811),
            ("ftp://u:p%3A21@h/x", 2811),
            ("ftp://u:p@h:21", 21),
            ("ftp://[::1]:21/x", 21),
            ("ftp://[::1]/x:21", 2811),
            ("ftp://h:2812/x", 2812),
        ] {
            assert_eq!(port(u), p, "{u}");
        }
    }

    /// The remote path a URL names.
    fn path(u: &str) -> Vec<u8> {
        match Location::parse(u).unwrap() {
            Location::Remote(r) => r.path,
            Location::Local(_) => panic!("{u}"),
        }
    }

    /// A URL parser would drop these bytes and name another file: refused,
    /// and the same names percent-encoded arrive whole.
    #[test]
    fn bytes_a_url_parser_drops_are_refused() {
        for raw in ["ftp://h/new\nline", "ftp://h/a\tb", "ftp://h/cr\r", "ftp://h/f ", "ftp://h/\x7f"] {
            let e = Location::parse(raw).expect_err(raw).to_string();
            assert!(e.contains("percent-encode"), "{e}");
        }
        assert_eq!(path("ftp://h/new%0Aline"), b"/new\nline");
        assert_eq!(path("ftp://h/a%09b"), b"/a\tb");
        assert_eq!(path("ftp://h/f%20"), b"/f ");
        assert_eq!(path("ftp://h/a b"), b"/a b", "a space inside is kept");
    }

    /// `?` and `#` are part of the path; a scheme is read in any case;
    /// one not supported is refused, not taken for a local path.
    #[test]
    fn schemes_and_the_rest_of_the_path() {
        assert_eq!(path("ftp://h/data/run#1"), b"/data/run#1");
        assert_eq!(path("ftp://h/a?b"), b"/a?b");
        assert_eq!(path("ftp://h/a?b c#d?e"), b"/a?b c#d?e");
        assert_eq!(path("ftp://h/a%3Fb%23c"), b"/a?b#c");
        assert_eq!(path("FTP://h/x"), b"/x");
        assert_eq!(Location::parse("file://localhost/tmp/x").unwrap(), Location::Local("/tmp/x".into()));
        for bad in ["sftp://h/x", "lightpath://h/x", "file://otherhost/x", "http://h/x"] {
            assert!(Location::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Location::parse("./sftp://h").unwrap(), Location::Local("./sftp://h".into()));
    }

    /// A backslash is a byte of the name (and of a password), not a `/`;
    /// a URL without a host is refused, not read as `ftp://x`.
    #[test]
    fn backslashes_are_bytes_and_a_host_is_needed() {
        assert_eq!(path("ftp://h/a\\b"), b"/a\\b");
        assert_eq!(path("ftp://h/dir\\..\\x"), b"/dir\\..\\x");
        let Ok(Location::Remote(r)) = Location::parse("ftp://u:p\\w@h/x") else { panic!() };
        assert_eq!((r.host.as_str(), r.pass.as_str(), &r.path[..]), ("h", "p\\w", &b"/x"[..]));
        for bad in ["ftp:///x", "ftp://\\x/y", "ftp://h\\x/y"] {
            assert!(Location::parse(bad).is_err(), "{bad}");
        }
    }
}
