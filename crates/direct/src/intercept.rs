//! Catch every system call of this process and hand it to a hook.
//!
//! Mechanism: syscall user dispatch (`sud.rs`). Once [`install`]ed, every
//! `syscall` instruction the calling thread runs — from libc, from code
//! with its own system calls (Go, static binaries' wrappers), from code
//! loaded or generated later — raises SIGSYS before the kernel runs it;
//! the handler passes it to the hook, which answers it
//! ([`Action::Return`]) or lets it run ([`Action::Pass`]). Threads the
//! process creates afterwards and children it forks are armed as they
//! start. Not covered: threads that already existed at `install` (call it
//! first), and a new program after execve (the kernel disarms it; the
//! launcher arms the new image again).
//!
//! Each hooked call costs a signal delivery and return (measured by
//! `cargo bench -p fusebox-direct --bench hook_cost`); rewriting hot call
//! sites into direct calls (zpoline's approach) is the planned fast path
//! on top, with this layer catching whatever is not rewritten.
//!
//! The hook runs in a signal handler on the calling thread, with the
//! application's signal mask: it may make system calls (they are not hooked
//! again), but the interrupted code may hold libc's locks (a `malloc`
//! making an `mmap`), so a hook should decide from the call number alone
//! before it allocates. A signal that arrives while the hook itself runs
//! has its handler run unhooked (DESIGN.md); one that arrives while a
//! passed-on call blocks is hooked as usual.

use thiserror::Error;

use crate::sud;

/// One intercepted system call: the number and the six argument registers
/// as the caller set them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Syscall {
    pub nr: i64,
    pub args: [u64; 6],
    /// The address just after the `syscall` instruction that made it.
    pub call_addr: usize,
}

/// What the hook decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Run the call as made.
    Pass,
    /// Answer with this value (a result, or `-errno`) without running it.
    Return(i64),
}

/// The process-wide hook.
pub type Hook = fn(&Syscall) -> Action;

#[derive(Debug, Error)]
pub enum InterceptError {
    #[error(
        "this kernel refuses syscall user dispatch (needs Linux 5.11+ with CONFIG_GENERIC_ENTRY): {0}"
    )]
    Unsupported(#[source] std::io::Error),
    #[error("a different interception hook is installed in this process already")]
    AlreadyInstalled,
}

/// Start intercepting the calling thread's system calls (and those of the
/// threads and children it creates from now on) with `hook`.
pub fn install(hook: Hook) -> Result<(), InterceptError> {
    sud::install(hook)
}

/// Run `f` in each child that gets its own copy of this process's memory
/// (fork, vfork) before its code goes on; children that share the memory
/// (a CLONE_VM clone: posix_spawn's) do not run it.
pub fn after_fork(f: fn()) {
    sud::after_fork(f)
}

/// Stop intercepting the calling thread's system calls.
pub fn disarm_current_thread() {
    sud::disarm_current_thread()
}

/// Intercept the calling thread's system calls again (after
/// [`disarm_current_thread`], or in a thread that existed before
/// [`install`]).
pub fn arm_current_thread() -> Result<(), InterceptError> {
    sud::arm_current_thread()
}

/// Make a system call the hook will not see (for the hook's own I/O).
pub fn raw_syscall(nr: i64, args: [u64; 6]) -> i64 {
    sud::raw_syscall(nr, args)
}
