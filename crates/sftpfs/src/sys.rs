//! The one `unsafe` of this crate: a step run in the forked child before
//! `ssh` is executed.
#![allow(unsafe_code)]

use std::os::unix::process::CommandExt;
use std::process::Command;

/// Have the kernel kill the child when the thread that started it ends
/// (PR_SET_PDEATHSIG). A server killed with SIGKILL then takes its `ssh`
/// with it at once, and writes that process still held are dropped
/// instead of reaching the server after the next server has replayed them
/// from the write log (see `writelog`). Call it from a thread that lives
/// as long as the process, or the child dies with the thread.
pub fn die_with_parent(cmd: &mut Command) {
    // SAFETY: the closure runs between fork and exec in the child, where
    // only async-signal-safe calls are allowed: it makes one prctl system
    // call (rustix issues the syscall directly, no allocation, no lock)
    // and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            Ok(())
        });
    }
}
