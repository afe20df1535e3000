//! The only crate with `unsafe` and OS-specific calls: served-root
//! confinement (openat2), zero-copy sends, socket options, TUN devices for
//! the WAN lab. Everything else in lightpath is portable safe Rust on top.

pub mod dio;
pub mod file;
pub mod mem;
pub mod net;
pub mod privs;
pub mod root;
pub mod scoped;
pub mod splice;
pub mod topo;
pub mod tty;
pub mod tun;
