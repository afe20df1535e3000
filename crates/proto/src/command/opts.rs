//! `OPTS` lines: GCT's `OPTS RETR` and `OPTS CKSM`, and lightpath's own for the virtual
//! file (`VRET`, `VSTO`) and a single file's mode and mtime (`STOR`).

use super::{CommandError, Opts};

pub(super) fn parse_opts(t: &str) -> Result<Opts, CommandError> {
    let (sub, rest) = t.split_once(' ').unwrap_or((t, ""));
    match sub.to_ascii_uppercase().as_str() {
        "RETR" => parse_opts_retr(rest),
        "VRET" => parse_opts_vret(rest),
        "VSTO" => parse_opts_vsto(rest),
        "STOR" => parse_meta("STOR", rest).map(Opts::Stor),
        "MLST" | "MLSD" | "MLSR" => Ok(Opts::Mlst(rest.to_string())),
        "CKSM" => Ok(Opts::Cksm(cksm_markers(rest))),
        _ => Ok(Opts::Other(t.to_string())),
    }
}

/// The `markers=N;` of `OPTS CKSM`, if given as a number.
fn cksm_markers(rest: &str) -> Option<u32> {
    let opts = rest.split(';').filter_map(|o| o.split_once('='));
    opts.filter(|(k, _)| k.trim().eq_ignore_ascii_case("markers")).find_map(|(_, v)| v.trim().parse().ok())
}

/// The longest path `OPTS VRET After=` takes (decoded): its hex and the
/// command fit in a control line ([`crate::line::MAX_LINE`]). A longer
/// one does not travel, and the tree goes whole.
pub const MAX_VRET_AFTER: usize = 4000;

/// `OPTS VRET After=<hex>;`, for the manifest path `after`, with
/// `Check=<16 hex>;` when the held files' check is given.
pub fn opts_vret(after: &[u8], check: Option<u64>) -> Vec<u8> {
    opts_resume("VRET", after, check)
}

/// `OPTS VRET Skip=<hex>;`: the next VRET leaves out the file at the
/// manifest path `path` ([`Opts::VretSkip`]).
pub fn opts_vret_skip(path: &[u8]) -> Vec<u8> {
    format!("OPTS VRET Skip={};", crate::held::hex(path)).into_bytes()
}

/// `OPTS VRET Copies=<n>;`: the receiver of the next VRET takes each
/// manifest chunk up to `n` times ([`Opts::VretCopies`]).
pub fn opts_vret_copies(n: u8) -> Vec<u8> {
    format!("OPTS VRET Copies={n};").into_bytes()
}

/// `OPTS VSTO After=<hex>;Check=<16 hex>;`: an upload resumed from an
/// earlier run, `check` being the sender's check of the files up to
/// `after` ([`Opts::VstoResume`]).
pub fn opts_vsto_resume(after: &[u8], check: u64) -> Vec<u8> {
    opts_resume("VSTO", after, Some(check))
}

fn opts_resume(verb: &str, after: &[u8], check: Option<u64>) -> Vec<u8> {
    let check = check.map(|c| format!("Check={c:016x};")).unwrap_or_default();
    format!("OPTS {verb} After={};{check}", crate::held::hex(after)).into_bytes()
}

/// `First=v;` or `First=v;Second=w;` (keys in that order, any case) and
/// nothing else: the values.
fn one_or_two<'a>(rest: &'a str, first: &str, second: &str) -> Option<(&'a str, Option<&'a str>)> {
    let fields: Vec<&str> = rest.trim().strip_suffix(';')?.split(';').collect();
    let value = |i: usize, key: &str| {
        let (k, v) = fields.get(i)?.split_once('=')?;
        k.eq_ignore_ascii_case(key).then_some(v)
    };
    match fields.len() {
        1 => Some((value(0, first)?, None)),
        2 => Some((value(0, first)?, Some(value(1, second)?))),
        _ => None,
    }
}

/// `After=<hex>;` (a manifest path of 1 to [`MAX_VRET_AFTER`] bytes, hex
/// coded so that any bytes a name may hold travel in the command), then
/// optionally `Check=<16 hex digits>;`, and nothing else.
fn parse_opts_vret(rest: &str) -> Result<Opts, CommandError> {
    let bad = || CommandError::Syntax(format!("bad OPTS VRET: {:.64}", rest));
    if let Some((v, None)) = one_or_two(rest, "skip", "") {
        return parse_path(v).map(Opts::VretSkip).ok_or_else(bad);
    }
    if let Some((v, None)) = one_or_two(rest, "copies", "") {
        let ok = |n: &u8| (1..=crate::manifest::MAX_COPIES).contains(n);
        return v
            .parse()
            .ok()
            .filter(ok)
            .filter(|_| v.bytes().all(|b| b.is_ascii_digit()))
            .map(Opts::VretCopies)
            .ok_or_else(bad);
    }
    parse_resume(rest).map(Opts::Vret).ok_or_else(bad)
}

/// A manifest path of 1 to [`MAX_VRET_AFTER`] bytes, in hex.
fn parse_path(v: &str) -> Option<Vec<u8>> {
    if v.is_empty() || v.len() > 2 * MAX_VRET_AFTER {
        return None;
    }
    crate::held::unhex(v).filter(|p| !p.is_empty())
}

/// An [`Opts::VstoResume`] (its `Check=` required) or the tree root's
/// mode and mtime, by the first key.
fn parse_opts_vsto(rest: &str) -> Result<Opts, CommandError> {
    match parse_resume(rest) {
        Some(r) if r.check.is_some() => Ok(Opts::VstoResume(r)),
        Some(_) => Err(CommandError::Syntax(format!("bad OPTS VSTO: {:.64}", rest))),
        None => parse_meta("VSTO", rest).map(Opts::Vsto),
    }
}

/// `After=<hex>;[Check=<16 hex>;]` ([`parse_opts_vret`]).
fn parse_resume(rest: &str) -> Option<crate::held::TreeResume> {
    let (v, check) = one_or_two(rest, "after", "check")?;
    let after = parse_path(v)?;
    let check = match check {
        None => None,
        Some(c) if c.len() == 16 && c.bytes().all(|b| b.is_ascii_hexdigit()) => Some(u64::from_str_radix(c, 16).ok()?),
        Some(_) => return None,
    };
    Some(crate::held::TreeResume { after, check })
}

/// `Mode=<octal, 1 to 4 digits>;` then optionally `Modify=<signed
/// nanoseconds since the epoch>;`, and nothing else.
fn parse_meta(verb: &str, rest: &str) -> Result<crate::held::TreeRoot, CommandError> {
    let bad = || CommandError::Syntax(format!("bad OPTS {verb}: {:.64}", rest));
    let (m, modify) = one_or_two(rest, "mode", "modify").ok_or_else(bad)?;
    if !(1..=4).contains(&m.len()) || !m.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return Err(bad());
    }
    let mode = u32::from_str_radix(m, 8).map_err(|_| bad())?;
    let mtime_ns = match modify {
        None => None,
        Some(t) if t.len() <= 20 && !t.starts_with('+') => Some(t.parse::<i64>().map_err(|_| bad())?),
        Some(_) => return Err(bad()),
    };
    Ok(crate::held::TreeRoot { mode, mtime_ns })
}

/// `Parallelism=4,4,4;markers=5;` — every option ends with `;` (GCT rejects
/// it otherwise, and so do we).
fn parse_opts_retr(rest: &str) -> Result<Opts, CommandError> {
    let bad = || CommandError::Syntax(format!("bad OPTS RETR: {:.64}", rest));
    if !rest.trim_end().ends_with(';') {
        return Err(bad());
    }
    let (mut parallelism, mut markers, mut block_size) = (None, None, None);
    for opt in rest.trim().split(';').filter(|s| !s.is_empty()) {
        let (k, v) = opt.split_once('=').ok_or_else(bad)?;
        let first = v.split(',').next().unwrap_or("");
        match k.trim().to_ascii_lowercase().as_str() {
            "parallelism" => {
                let n: u32 = first.trim().parse().map_err(|_| bad())?;
                if n == 0 || n as u64 > crate::modee::MAX_STREAMS {
                    return Err(bad());
                }
                parallelism = Some(n);
            }
            "markers" => markers = Some(first.trim().parse().map_err(|_| bad())?),
            "blocksize" => {
                let n: u64 = first.trim().parse().map_err(|_| bad())?;
                if !crate::modee::BLOCK_SIZE_OPTION.contains(&n) {
                    return Err(bad());
                }
                block_size = Some(n);
            }
            _ => {}
        }
    }
    Ok(Opts::Retr { parallelism, markers, block_size })
}
