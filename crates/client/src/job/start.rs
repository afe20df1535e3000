//! What a copy settles before its first login: its sessions' options,
//! options that cannot go together, and what goes with the login.

use super::tree::tree_noted;
use super::CopyOptions;
use crate::session::{SessionOpts, Speculation};
use crate::{ClientError, Location, Progress, Remote};

/// The options of a copy's sessions.
pub(super) fn session_opts(opts: &CopyOptions, progress: &Progress) -> SessionOpts {
    SessionOpts {
        streams: opts.streams,
        target_bps: opts.target_bps,
        block: opts.block,
        pipeline: opts.pipeline,
        total: progress.bytes.clone(),
        cancel: progress.cancel.clone(),
        direct_io: opts.direct_io,
        connect_ahead: opts.connect_ahead,
        fastopen: opts.fastopen,
        congestion: opts.congestion.clone(),
        data_from_any: opts.data_from_any,
        keep_interrupted: opts.partial,
        mlsr: opts.mlsr,
        quiet: opts.quiet,
        sessions: 1,
    }
}

/// Options that cannot go together, refused before anything is tried.
pub(super) fn refuse_misuse(srcs: &[Location], opts: &CopyOptions) -> Result<(), ClientError> {
    let zero = Location::Local("/dev/zero".into());
    if opts.part.is_none() && srcs.contains(&zero) {
        // It has no end: without a length it sent nothing, exit 0.
        return Err(ClientError::Usage("/dev/zero as a source needs --len (how many bytes)".into()));
    }
    if opts.part.is_some() && opts.verify.is_some() {
        // It compared the whole source's checksum with the part copied:
        // every such copy failed, its part left in place.
        return Err(ClientError::Usage(
            "--verify checks whole files: not with --off/--len (a part of a file); nothing copied".into(),
        ));
    }
    Ok(())
}

/// What goes with the login to the planning server `r`, the server of
/// `src`: a remote tree to a local directory (VRET), or one remote file
/// to a local path (RETR), saves a round trip. Not with --verify: the
/// servers' CKSM algorithms are checked first.
pub(super) fn speculation<'a>(
    r: &'a Remote,
    src: &Location,
    dst: &Location,
    opts: &CopyOptions,
    (tree, one_file): (bool, bool),
) -> Speculation<'a> {
    let Location::Local(d) = dst else { return Speculation::None };
    match () {
        _ if opts.verify.is_some() => Speculation::None,
        _ if tree && !tree_noted(opts, src, dst) => Speculation::Tree(r.path.as_slice()),
        // A RETR in the login flight goes before FEAT says what the server
        // is: only with a name every server reads as sent (GCT drops bytes
        // outside printable ASCII, and `café` fetched `caf`: an audit).
        _ if one_file
            && crate::control::any_server_reads(&r.path)
            && !(opts.partial && crate::partial::kept_for(d, &r.path)) =>
        {
            Speculation::File(r.path.as_slice())
        }
        _ => Speculation::None,
    }
}
