//! Who may hold a control connection. Every session costs descriptors (its
//! control connection, its data connections), and a server that runs out of
//! them cannot accept anyone: so at most [`Limits::sessions`] sessions at
//! once, and at most [`Limits::per_ip`] from one address, so that one host
//! cannot take them all. Over the limit a connection gets `421` and is
//! closed at once.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

/// Session limits of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Sessions at once, from all addresses.
    pub sessions: usize,
    /// Sessions at once from one address.
    pub per_ip: usize,
    /// A connection must log in this soon after it was accepted.
    pub login_wait: std::time::Duration,
    /// A client that takes none of a reply for this long is gone: its
    /// session ends (and its transfer with it) instead of waiting forever.
    pub reply_wait: std::time::Duration,
    /// A logged-in control connection that sends no command for this long
    /// (and runs no transfer) is closed with `421`.
    pub idle: std::time::Duration,
}

impl Default for Limits {
    /// Room for fifty clients running `-cc 8` at once, or for one running
    /// `--cc 64`, at about 33 descriptors per session (32 data streams).
    fn default() -> Self {
        let secs = std::time::Duration::from_secs;
        Limits { sessions: 512, per_ip: 128, login_wait: secs(60), reply_wait: secs(300), idle: secs(900) }
    }
}

/// Why a connection was turned away.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The server holds its maximum of sessions.
    #[error("Too many sessions ({0}) on this server; try again later.")]
    Full(usize),
    /// This address holds its maximum.
    #[error("Too many sessions ({0}) from your address; try again later.")]
    PerIp(usize),
}

/// The sessions held, per address.
#[derive(Debug, Default)]
pub struct Admission {
    limits: Limits,
    held: Mutex<(usize, HashMap<IpAddr, usize>)>,
}

/// A session's place; given back when dropped.
#[derive(Debug)]
pub struct Ticket {
    admission: Arc<Admission>,
    ip: IpAddr,
}

impl Admission {
    /// Admission under `limits`.
    pub fn new(limits: Limits) -> Arc<Admission> {
        Arc::new(Admission { limits, held: Mutex::default() })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, HashMap<IpAddr, usize>)> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a session from `ip`, if there is one.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Ticket, Refusal> {
        let mut held = self.lock();
        if held.0 >= self.limits.sessions {
            return Err(Refusal::Full(self.limits.sessions));
        }
        let from_ip = held.1.entry(ip).or_default();
        if *from_ip >= self.limits.per_ip {
            return Err(Refusal::PerIp(self.limits.per_ip));
        }
        *from_ip += 1;
        held.0 += 1;
        Ok(Ticket { admission: self.clone(), ip })
    }

    /// Sessions held now.
    pub fn held(&self) -> usize {
        self.lock().0
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut held = self.admission.lock();
        held.0 -= 1;
        if let Some(n) = held.1.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                held.1.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_hold_per_address_and_overall_and_places_come_back() {
        let a = Admission::new(Limits { sessions: 3, per_ip: 2, ..Limits::default() });
        let (x, y, z): (IpAddr, IpAddr, IpAddr) =
            ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap(), "10.0.0.3".parse().unwrap());
        let x1 = a.admit(x).unwrap();
        let _x2 = a.admit(x).unwrap();
        assert_eq!(a.admit(x).unwrap_err(), Refusal::PerIp(2));
        let _y1 = a.admit(y).unwrap();
        assert_eq!(a.admit(z).unwrap_err(), Refusal::Full(3));
        drop(x1);
        assert_eq!(a.held(), 2);
        let _z1 = a.admit(z).unwrap();
        assert_eq!(a.admit(x).unwrap_err(), Refusal::Full(3));
    }
}
