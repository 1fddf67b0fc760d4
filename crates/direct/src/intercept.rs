//! Catch every system call of this process and hand it to a hook.
//!
//! Two mechanisms, one on top of the other ([`Mechanism`]):
//! - syscall user dispatch (`sud.rs`). Once [`install`]ed, every
//!   `syscall` instruction the calling thread runs — from libc, from code
//!   with its own system calls (Go, static binaries' wrappers), from code
//!   loaded or generated later — raises SIGSYS before the kernel runs it;
//!   the handler passes it to the hook, which answers it
//!   ([`Action::Return`]) or lets it run ([`Action::Pass`]). A signal
//!   delivery and return per call.
//! - call-site rewriting (`rewrite.rs`, zpoline's technique applied
//!   lazily as lazypoline does): the first call from each site is caught
//!   by dispatch, which also rewrites the site into a direct call of the
//!   same hook; later calls from it cost about a function call. Needs a
//!   page at address 0 (`vm.mmap_min_addr`, root).
//!
//! Threads the process creates afterwards and children it forks are armed
//! as they start. Not covered: threads that already existed at `install`
//! (call it first), and a new program after execve (the kernel disarms
//! it; the launcher arms the new image again). Costs are measured by
//! `cargo bench -p fusebox-direct --bench hook_cost`.
//!
//! The hook runs on the calling thread's stack, in a signal handler or
//! called from a rewritten site, with the application's signal mask: it
//! may make system calls (they are not hooked again), but the interrupted
//! code may hold libc's locks (a `malloc` making an `mmap`), so a hook
//! should decide from the call number alone before it allocates. A signal
//! that arrives while the hook itself runs has its handler run unhooked
//! (DESIGN.md); one that arrives while a passed-on call blocks is hooked
//! as usual.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use thiserror::Error;

use crate::{rewrite, sud};

/// One intercepted system call: the number and the six argument registers
/// as the caller set them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Syscall {
    pub nr: i64,
    pub args: [u64; 6],
    /// The address just after the `syscall` instruction that made it.
    pub call_addr: usize,
}

/// How calls are caught.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    /// Syscall user dispatch for every call (no privilege needed).
    Dispatch,
    /// Dispatch for each site's first call, which rewrites the site into a
    /// direct call for the next ones (needs a page at address 0: root).
    Rewrite,
}

impl Mechanism {
    /// `FUSEBOX_DIRECT_INTERCEPT` = `rewrite` or `dispatch`; unset,
    /// rewrite where this user can ([`rewrite_unavailable`]), else dispatch.
    pub fn from_env() -> Result<Mechanism, InterceptError> {
        match std::env::var(MECHANISM_VAR).as_deref() {
            Err(_) if rewrite_unavailable().is_some() => Ok(Mechanism::Dispatch),
            Err(_) | Ok("rewrite") => Ok(Mechanism::Rewrite),
            Ok("dispatch") => Ok(Mechanism::Dispatch),
            Ok(other) => Err(InterceptError::UnknownMechanism(other.to_owned())),
        }
    }
}

/// The variable [`Mechanism::from_env`] reads.
pub const MECHANISM_VAR: &str = "FUSEBOX_DIRECT_INTERCEPT";

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
    #[error("call-site rewriting is not available: {0}")]
    Rewrite(String),
    #[error("{MECHANISM_VAR}={0:?}: expected rewrite or dispatch")]
    UnknownMechanism(String),
}

/// Start intercepting the calling thread's system calls (and those of the
/// threads and children it creates from now on) with `hook`. With
/// [`Mechanism::Rewrite`], an error if the trampoline cannot be mapped:
/// nothing is installed then, and the caller may choose dispatch alone.
pub fn install(hook: Hook, mechanism: Mechanism) -> Result<(), InterceptError> {
    if mechanism == Mechanism::Rewrite {
        rewrite::enable()?;
    }
    sud::install(hook)
}

/// Why [`Mechanism::Rewrite`] cannot work for this user, if it cannot
/// (an ordinary user where vm.mmap_min_addr is not 0): callers then choose
/// [`Mechanism::Dispatch`].
pub fn rewrite_unavailable() -> Option<String> {
    rewrite::unavailable()
}

/// Whether call sites are being rewritten in this process.
pub fn rewriting() -> bool {
    rewrite::enabled()
}

/// Run `f` in each child that gets its own copy of this process's memory
/// (fork, vfork) before its code goes on; children that share the memory
/// (a CLONE_VM clone: posix_spawn's) do not run it.
pub fn after_fork(f: fn()) {
    sud::after_fork(f)
}

/// Run `before` in a process about to fork (or vfork), and `after` with
/// the call's result in that process once the call returns (not in the
/// child, which runs `after_fork`'s function instead).
pub fn around_fork(before: fn(), after: fn(i64)) {
    sud::around_fork(before, after)
}

/// Times this process handed its descriptors to another process: a fork,
/// a vfork, any clone without CLONE_FILES, a sendmsg (which may carry
/// descriptors). An open file description made before the last of these
/// may be in use elsewhere; one made after it is this process's alone
/// until the next.
static DESCRIPTORS_SHARED: AtomicU64 = AtomicU64::new(0);

/// Set for good once a child sharing the memory may run alongside the
/// parent (a CLONE_VM clone without CLONE_VFORK, or a thread with its own
/// umask and working directory): per-process values are then never kept.
static MEMORY_SHARED_ALONGSIDE: AtomicBool = AtomicBool::new(false);

/// See `DESCRIPTORS_SHARED`.
pub fn descriptor_shares() -> u64 {
    DESCRIPTORS_SHARED.load(Ordering::Acquire)
}

/// This process is about to hand its descriptors on (see
/// `DESCRIPTORS_SHARED`).
pub fn descriptors_shared() {
    DESCRIPTORS_SHARED.fetch_add(1, Ordering::AcqRel);
}

/// Children sharing this memory that are running now (made, and their
/// parent not yet back from the clone): while there are none, and none
/// runs alongside, every caller of this memory is the process that owns
/// it, which then need not ask the kernel who it is.
static MEMORY_CHILDREN_RUNNING: AtomicU64 = AtomicU64::new(0);

/// Whether the caller may be a child sharing this memory (posix_spawn's,
/// between its clone and its exec) rather than the process itself. While
/// it may, per-process values (ids, umask) kept in this memory are neither
/// used nor stored: the child's are its own.
pub fn may_be_memory_child() -> bool {
    MEMORY_CHILDREN_RUNNING.load(Ordering::Acquire) != 0
        || MEMORY_SHARED_ALONGSIDE.load(Ordering::Acquire)
}

/// A clone sharing this memory is about to be made (`flags`: the
/// clone's). Marked before, for a child that runs alongside.
pub(crate) fn memory_sharing(flags: u64) {
    let thread = flags & libc::CLONE_THREAD as u64 != 0;
    let own_fs = flags & libc::CLONE_FS as u64 == 0;
    let waited = flags & libc::CLONE_VFORK as u64 != 0;
    if (thread && own_fs) || (!thread && !waited) {
        MEMORY_SHARED_ALONGSIDE.store(true, Ordering::Release);
    }
    if !thread {
        MEMORY_CHILDREN_RUNNING.fetch_add(1, Ordering::AcqRel);
    }
}

/// The clone of `memory_sharing` returned in the parent, which for
/// CLONE_VFORK means the child (if one was made) has executed or exited.
pub(crate) fn memory_shared(flags: u64) {
    if flags & libc::CLONE_THREAD as u64 == 0 {
        MEMORY_CHILDREN_RUNNING.fetch_sub(1, Ordering::AcqRel);
    }
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

/// Make a call of the program's from inside the hook as a passed-on call
/// is made: a signal whose handler runs while it blocks (an accept) is
/// hooked as usual, and a handler that jumps out leaves the thread armed.
/// The hook then goes on with what it returned.
pub(crate) fn call_as_program(nr: i64, args: [u64; 6]) -> i64 {
    sud::call_as_program(nr, args)
}

/// Make a system call the hook will not see (for the hook's own I/O).
pub fn raw_syscall(nr: i64, args: [u64; 6]) -> i64 {
    sud::raw_syscall(nr, args)
}

/// Whether this kernel has syscall user dispatch (Linux 5.11+ with
/// generic entry): switching it off for the calling thread, which changes
/// nothing, succeeds only where it exists.
pub fn dispatch_available() -> Result<(), InterceptError> {
    const PR_SET_SYSCALL_USER_DISPATCH: u64 = 59;
    const PR_SYS_DISPATCH_OFF: u64 = 0;
    let ret = raw_syscall(
        libc::SYS_prctl,
        [
            PR_SET_SYSCALL_USER_DISPATCH,
            PR_SYS_DISPATCH_OFF,
            0,
            0,
            0,
            0,
        ],
    );
    if ret < 0 {
        return Err(InterceptError::Unsupported(
            std::io::Error::from_raw_os_error(-ret as i32),
        ));
    }
    Ok(())
}
