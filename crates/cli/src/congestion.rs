//! `--congestion` of `serve` and `cp`: checked once at start-up, so that a
//! choice the kernel refuses is said at once instead of every data
//! connection quietly keeping the kernel's default.

/// The congestion control the data connections ask for (`kernel`: the
/// system's). An explicit one that this process may not set is an error
/// that says why; BBR, the default, falls back to the kernel's default
/// with a warning.
pub fn check(asked: Option<&str>) -> anyhow::Result<Option<String>> {
    let name = match asked {
        Some("kernel") => return Ok(Some("kernel".into())),
        Some(n) => n,
        None => lightpath_engine::DEFAULT_CONGESTION,
    };
    let Err(e) = lightpath_sys::net::congestion_usable(name) else {
        tracing::info!("data connections use congestion control {name}");
        return Ok(asked.map(str::to_string));
    };
    let why = refused(name, &e, lightpath_sys::net::congestion_lists());
    if asked.is_some() {
        anyhow::bail!("--congestion {name}: {why}");
    }
    tracing::warn!("{why}: data connections keep the kernel's default congestion control");
    Ok(Some("kernel".into()))
}

/// Why `name` cannot be set, from the error and the kernel's (available,
/// allowed) lists.
fn refused(name: &str, e: &std::io::Error, (available, allowed): (String, String)) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => format!("{name} is not available in this kernel (available: {available})"),
        std::io::ErrorKind::PermissionDenied => format!(
            "{name} is not in net.ipv4.tcp_allowed_congestion_control ({allowed}) and this process lacks CAP_NET_ADMIN"
        ),
        _ => format!("{name} cannot be set: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::refused;
    use std::io::{Error, ErrorKind};

    #[test]
    fn a_refused_congestion_control_is_explained_from_the_kernel_lists() {
        let lists = || ("reno bbr cubic".to_string(), "reno bbr".to_string());
        let denied = refused("cubic", &Error::from(ErrorKind::PermissionDenied), lists());
        assert_eq!(
            denied,
            "cubic is not in net.ipv4.tcp_allowed_congestion_control (reno bbr) and this process lacks CAP_NET_ADMIN"
        );
        let missing = refused("vegas", &Error::from(ErrorKind::NotFound), lists());
        assert_eq!(missing, "vegas is not available in this kernel (available: reno bbr cubic)");
    }
}
