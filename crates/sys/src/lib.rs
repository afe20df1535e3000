//! The only crate with `unsafe` and OS-specific calls: socket options, zero-copy
//! syscalls, aligned buffers, TUN devices, CPU affinity.
pub mod tun;
