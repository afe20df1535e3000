//! Child processes that cannot outlive the harness: each one leads its own
//! process group, which is killed when its guard drops (also on errors and
//! on Ctrl-C, which only sets a flag that every wait loop polls).

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rustix::process::{kill_process_group, Pid, Signal};

static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();

fn stop_flag() -> &'static Arc<AtomicBool> {
    STOP.get_or_init(|| Arc::new(AtomicBool::new(false)))
}

/// Routes SIGINT, SIGTERM and SIGHUP to the stop flag; a second signal exits at once.
pub fn install_signal_handlers() -> Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let flag = stop_flag();
    // SIGHUP too (a closed terminal or SSH session): it ended the bench
    // outright, its finished runs unwritten and its namespace left behind.
    for sig in [SIGINT, SIGTERM, SIGHUP] {
        signal_hook::flag::register_conditional_shutdown(sig, 130, Arc::clone(flag))?;
        signal_hook::flag::register(sig, Arc::clone(flag))?;
    }
    Ok(())
}

/// Asks every running wait loop to stop (what Ctrl-C does).
pub fn request_stop() {
    stop_flag().store(true, Ordering::SeqCst);
}

/// Clears a previous stop request (tests run several benches in one process).
pub fn reset_stop() {
    stop_flag().store(false, Ordering::SeqCst);
}

/// True once Ctrl-C (or `request_stop`) happened.
pub fn stopping() -> bool {
    stop_flag().load(Ordering::SeqCst)
}

/// Fails with a recognisable error when a stop was requested.
pub fn check_stop() -> Result<()> {
    if stopping() {
        bail!(Interrupted);
    }
    Ok(())
}

/// The error raised when the user interrupts the run.
#[derive(Debug)]
pub struct Interrupted;

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("interrupted")
    }
}
impl std::error::Error for Interrupted {}

/// A running child in its own process group; killed with its group on drop.
#[derive(Debug)]
pub struct Proc {
    child: Child,
    pub name: String,
    pub started: Instant,
    status: Option<ExitStatus>,
}

/// How a waited-for child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    Exited(Option<i32>),
    TimedOut,
}

impl Proc {
    /// Spawns `cmd` as a new process-group leader, stdout/stderr to `log_base`.{out,err}.
    pub fn spawn(name: &str, mut cmd: Command, log_base: Option<&Path>) -> Result<Proc> {
        cmd.process_group(0).stdin(Stdio::null());
        match log_base {
            Some(base) => {
                let out = File::create(base.with_extension("out"))?;
                let err = File::create(base.with_extension("err"))?;
                cmd.stdout(out).stderr(err);
            }
            None => {
                cmd.stdout(Stdio::null()).stderr(Stdio::null());
            }
        }
        let started = Instant::now();
        let child = cmd.spawn().with_context(|| format!("cannot start {name}: {cmd:?}"))?;
        Ok(Proc { child, name: name.to_string(), started, status: None })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Non-blocking check; `Some` once the leader has exited.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatus>> {
        if self.status.is_none() {
            self.status = self.child.try_wait()?;
        }
        Ok(self.status)
    }

    /// Waits for the leader to exit, up to `limit`; polls the stop flag.
    pub fn wait_timeout(&mut self, limit: Duration) -> Result<(Ending, Duration)> {
        loop {
            if let Some(st) = self.try_wait()? {
                return Ok((Ending::Exited(st.code()), self.started.elapsed()));
            }
            if self.started.elapsed() >= limit {
                let took = self.started.elapsed();
                self.kill();
                return Ok((Ending::TimedOut, took));
            }
            check_stop()?;
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Kills the whole process group and reaps the leader.
    /// Send `sig` to its process group (the leader and what it started).
    pub fn signal_group(&self, sig: Signal) {
        if let (None, Some(pid)) = (self.status, Pid::from_raw(self.child.id() as i32)) {
            let _ = kill_process_group(pid, sig);
        }
    }

    pub fn kill(&mut self) {
        kill_group(self.child.id());
        if self.status.is_none() {
            self.status = self.child.wait().ok();
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// SIGKILL to a process group (ignores groups that are already gone).
pub fn kill_group(pgid: u32) {
    if let Some(pid) = Pid::from_raw(pgid as i32) {
        let _ = kill_process_group(pid, Signal::KILL);
    }
}

/// SIGKILL to one process.
pub fn kill_pid(pid: u32) {
    if let Some(pid) = Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(pid, Signal::KILL);
    }
}

/// Runs a long helper command (extracting a data set) to completion, in
/// its own process group: a stop request (Ctrl-C, SIGTERM) kills the group
/// and fails with [`Interrupted`] at once, where [`run_quiet`] would wait
/// for the command, and a SIGTERM to the harness alone would leave it
/// running. Fails with its stderr.
pub fn run_stoppable(cmd: &mut Command) -> Result<()> {
    cmd.process_group(0).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    let mut child = cmd.spawn().with_context(|| format!("cannot run {cmd:?}"))?;
    let mut err = child.stderr.take().context("stderr of a helper")?;
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err, &mut s);
        s
    });
    let mut guard = Proc { child, name: format!("{cmd:?}"), started: Instant::now(), status: None };
    // On a stop request this returns early, and dropping the guard kills the group.
    let (ending, _) = guard.wait_timeout(Duration::MAX)?;
    let stderr = reader.join().unwrap_or_default();
    match ending {
        Ending::Exited(Some(0)) => Ok(()),
        Ending::Exited(code) => bail!("{} failed ({code:?}): {}", guard.name, stderr.trim()),
        Ending::TimedOut => bail!("{} did not end", guard.name),
    }
}

/// Runs a short helper command to completion; fails with its stderr.
pub fn run_quiet(cmd: &mut Command) -> Result<String> {
    let out = cmd.stdin(Stdio::null()).output().with_context(|| format!("cannot run {cmd:?}"))?;
    if !out.status.success() {
        bail!("{cmd:?} failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
