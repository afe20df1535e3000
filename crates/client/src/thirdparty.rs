//! Third-party transfers: the client tells the destination to listen and
//! the source to connect, then watches both control channels. Data flows
//! server to server. The MODE E channel stays linked between files.

use crate::job::CopyOptions;
use crate::session::{cancelled, Session};
use crate::{ClientError, Remote};
use lightpath_proto::{hostport, PerfMarker, Reply};
use std::sync::atomic::Ordering;

fn path_cmd(verb: String, p: &[u8]) -> Vec<u8> {
    let mut c = verb.into_bytes();
    c.extend_from_slice(p);
    c
}

/// Copy one file from `s` to `d`. `linked` says whether both servers still
/// hold a MODE E channel between them from the previous file.
pub async fn transfer(
    s: &mut Session,
    d: &mut Session,
    src: &Remote,
    dst: &Remote,
    size: u64,
    opts: &CopyOptions,
    linked: &mut bool,
) -> Result<u64, ClientError> {
    let mode_e = s.can_mode_e() && d.can_mode_e();
    s.set_mode(mode_e).await?;
    d.set_mode(mode_e).await?;
    if mode_e {
        let n = if opts.streams > 0 { opts.streams } else { s.streams() };
        s.set_parallelism(n).await?;
    }
    if !mode_e || !*linked {
        let addr = d.pasv().await?;
        let hp = hostport::format_port(addr)
            .map(|h| format!("PORT {h}"))
            .unwrap_or_else(|| format!("EPRT {}", hostport::format_eprt(addr)));
        s.ctl.ok(&hp).await?;
        *linked = mode_e;
    }
    let (stor, retr) = match opts.part {
        Some((off, len)) => (format!("ESTO A {off} "), format!("ERET P {off} {len} ")),
        None => {
            d.ctl.ok(&format!("ALLO {size}")).await?;
            ("STOR ".to_string(), "RETR ".to_string())
        }
    };
    d.ctl.send(&path_cmd(stor, &dst.path)).await?;
    s.ctl.send(&path_cmd(retr, &src.path)).await?;
    s.settle().await?;
    d.settle().await?;
    watch(s, d).await.map(|(bytes, ..)| bytes)
}

/// Read both control channels until both transfers end; returns the bytes
/// and the final replies of the source and the destination.
pub(crate) async fn watch(s: &mut Session, d: &mut Session) -> Result<(u64, Reply, Reply), ClientError> {
    let (mut s_fin, mut d_fin): (Option<Reply>, Option<Reply>) = (None, None);
    let mut seen = 0u64;
    let total = s.opts.total.clone();
    let job = s.opts.control();
    while s_fin.is_none() || d_fin.is_none() {
        tokio::select! {
            _ = cancelled(&job) => {
                // Ctrl-C: both servers stop (the destination drops its temporary file).
                if s_fin.is_none() {
                    s.abort().await;
                }
                if d_fin.is_none() {
                    d.abort().await;
                }
                return Err(ClientError::Local("interrupted".into()));
            }
            r = s.ctl.reply(), if s_fin.is_none() => {
                let r = r?;
                if !r.is_preliminary() {
                    if r.is_error() && d_fin.is_none() {
                        d.ctl.send(b"ABOR").await?;
                        let _ = d.ctl.final_reply().await; // the STOR's failure
                    }
                    s_fin = Some(r);
                }
            }
            r = d.ctl.reply(), if d_fin.is_none() => {
                let r = r?;
                if let Some(m) = PerfMarker::from_reply(&r) {
                    total.fetch_add(m.bytes.saturating_sub(seen), Ordering::Relaxed);
                    seen = seen.max(m.bytes);
                }
                if !r.is_preliminary() {
                    if r.is_error() && s_fin.is_none() {
                        s.ctl.send(b"ABOR").await?;
                        let _ = s.ctl.final_reply().await;
                    }
                    d_fin = Some(r);
                }
            }
        }
    }
    let (sr, dr) = (s_fin.unwrap_or_else(|| Reply::new(0, "")), d_fin.unwrap_or_else(|| Reply::new(0, "")));
    if !sr.is_ok() {
        return Err(s.ctl.unexpected("RETR", &sr));
    }
    if !dr.is_ok() {
        return Err(d.ctl.unexpected("STOR", &dr));
    }
    Ok((seen, sr, dr))
}
