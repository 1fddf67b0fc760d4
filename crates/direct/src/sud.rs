//! Syscall user dispatch (SUD): the kernel's way of turning every system
//! call a thread makes from outside one code range into a SIGSYS, so the
//! handler can answer it instead (Documentation/admin-guide/
//! syscall-user-dispatch.rst; kernel/entry/syscall_user_dispatch.c).
//!
//! Everything unsafe in direct mode's interception is here:
//! - the exempt code range (`global_asm!` below): the only `syscall`
//!   instructions the process may run unhooked while a thread is armed —
//!   the hook's own raw system calls, the SIGSYS handler's return
//!   (rt_sigreturn) and the start of a new thread;
//! - the SIGSYS handler, which reads and writes the interrupted registers
//!   in the `ucontext_t` the kernel hands it;
//! - what a few calls need done around them so interception survives
//!   them: clone (a new thread starts with SUD off), fork, vfork,
//!   rt_sigreturn from an application's handler, and attempts to block or
//!   take over SIGSYS.
//!
//! The selector byte is per thread (a thread-local): one shared byte would
//! let the thread inside the hook open the gate for all the others.

#![allow(unsafe_code)]

use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::sync::OnceLock;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::appmem;
use crate::intercept::{Action, Hook, InterceptError, Syscall};
use crate::rewrite::{self, SavedRegs};

const PR_SET_SYSCALL_USER_DISPATCH: u64 = 59;
const PR_SYS_DISPATCH_OFF: u64 = 0;
/// Dispatch everything outside the given range (the original mode, `1`).
const PR_SYS_DISPATCH_EXCLUSIVE_ON: u64 = 1;
const SELECTOR_ALLOW: u8 = 0;
const SELECTOR_BLOCK: u8 = 1;
/// `si_code` of a SIGSYS raised by dispatch (uapi asm-generic/siginfo.h).
const SYS_USER_DISPATCH: i32 = 2;
/// From the uapi signal headers: the kernel's `struct sigaction` wants
/// SA_RESTORER on x86_64 (there is no vDSO sigreturn there).
const SA_RESTORER: u64 = 0x0400_0000;

const SIGSYS_BIT: u64 = 1 << (libc::SIGSYS - 1);

std::arch::global_asm!(
    ".text",
    ".p2align 4",
    ".globl fusebox_direct_exempt_start",
    ".hidden fusebox_direct_exempt_start",
    "fusebox_direct_exempt_start:",
    // i64 fusebox_direct_syscall6(nr, a1, a2, a3, a4, a5, a6): the SysV
    // argument registers moved to the system call's.
    ".globl fusebox_direct_syscall6",
    ".hidden fusebox_direct_syscall6",
    "fusebox_direct_syscall6:",
    "mov rax, rdi",
    "mov rdi, rsi",
    "mov rsi, rdx",
    "mov rdx, rcx",
    "mov r10, r8",
    "mov r8, r9",
    "mov r9, [rsp + 8]",
    "syscall",
    "ret",
    // The SIGSYS handler's sa_restorer.
    ".globl fusebox_direct_restorer",
    ".hidden fusebox_direct_restorer",
    "fusebox_direct_restorer:",
    "mov eax, 15",
    "syscall",
    "ud2",
    // rt_sigreturn with the stack pointer an application's handler
    // returned with: finishes that handler's return for it.
    ".globl fusebox_direct_sigreturn_at",
    ".hidden fusebox_direct_sigreturn_at",
    "fusebox_direct_sigreturn_at:",
    "mov rsp, rdi",
    "mov eax, 15",
    "syscall",
    "ud2",
    // A new thread starts here (see `clone_thread`): its stack holds the
    // application's signal mask, floating-point environment and registers
    // at its clone, then the address to go on at, just below the stack
    // pointer it asked for.
    ".globl fusebox_direct_thread_start",
    ".hidden fusebox_direct_thread_start",
    "fusebox_direct_thread_start:",
    "mov rdi, [rsp]",
    "mov rbp, rsp",
    "and rsp, -16",
    "call {arm}",
    // The creator's floating-point environment (MXCSR, x87 control).
    "ldmxcsr [rbp + 8]",
    "fldcw [rbp + 12]",
    "lea rsp, [rbp + 16]",
    "pop r15",
    "pop r14",
    "pop r13",
    "pop r12",
    "pop rbp",
    "pop rbx",
    "pop r11",
    "pop r10",
    "pop r9",
    "pop r8",
    "pop rdi",
    "pop rsi",
    "pop rdx",
    "pop rcx",
    "xor eax, eax",
    "ret",
    ".globl fusebox_direct_exempt_end",
    ".hidden fusebox_direct_exempt_end",
    "fusebox_direct_exempt_end:",
    arm = sym arm_new_thread,
);

extern "C" {
    fn fusebox_direct_syscall6(
        nr: i64,
        a1: u64,
        a2: u64,
        a3: u64,
        a4: u64,
        a5: u64,
        a6: u64,
    ) -> i64;
    fn fusebox_direct_restorer();
    fn fusebox_direct_sigreturn_at(rsp: u64) -> !;
    fn fusebox_direct_thread_start();
    static fusebox_direct_exempt_start: u8;
    static fusebox_direct_exempt_end: u8;
}

thread_local! {
    // Const-initialised and without a destructor: reading its address is
    // plain TLS arithmetic, safe in a signal handler and in a thread whose
    // TLS was set up by its creator before the clone.
    static SELECTOR: UnsafeCell<u8> = const { UnsafeCell::new(SELECTOR_ALLOW) };
}

static HOOK: OnceLock<Hook> = OnceLock::new();

fn selector() -> *mut u8 {
    SELECTOR.with(|s| s.get())
}

fn set_selector(v: u8) {
    // SAFETY: the byte is this thread's own; volatile so the store is not
    // moved across the system calls the kernel checks it at.
    unsafe { selector().write_volatile(v) }
}

/// A system call from the exempt range: never dispatched.
pub(crate) fn raw_syscall(nr: i64, a: [u64; 6]) -> i64 {
    // SAFETY: performs exactly the system call asked for, with the caller's
    // arguments, as libc's syscall(2) would; what the call does to memory
    // is the caller's responsibility, as with any raw system call.
    unsafe { fusebox_direct_syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5]) }
}

fn exempt_range() -> (u64, u64) {
    let (start, end) = (
        std::ptr::addr_of!(fusebox_direct_exempt_start) as u64,
        std::ptr::addr_of!(fusebox_direct_exempt_end) as u64,
    );
    (start, end - start)
}

fn errno_of(ret: i64) -> Option<i32> {
    (-4095..0).contains(&ret).then_some(-ret as i32)
}

/// Arm dispatch for the calling thread.
pub(crate) fn arm_current_thread() -> Result<(), InterceptError> {
    let (start, len) = exempt_range();
    set_selector(SELECTOR_BLOCK);
    let ret = raw_syscall(
        libc::SYS_prctl,
        [
            PR_SET_SYSCALL_USER_DISPATCH,
            PR_SYS_DISPATCH_EXCLUSIVE_ON,
            start,
            len,
            selector() as u64,
            0,
        ],
    );
    if let Some(e) = errno_of(ret) {
        set_selector(SELECTOR_ALLOW);
        return Err(InterceptError::Unsupported(
            std::io::Error::from_raw_os_error(e),
        ));
    }
    Ok(())
}

/// Run `f`, this library's own work outside any hook (a report at the
/// program's exit), with its system calls let through as a hook's are:
/// intercepted, they would be routed as the program's, and could wait for
/// a lock `f` holds.
pub(crate) fn as_our_own<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: this thread's own byte.
    let before = unsafe { selector().read_volatile() };
    set_selector(SELECTOR_ALLOW);
    let r = f();
    set_selector(before);
    r
}

/// Disarm dispatch for the calling thread.
pub(crate) fn disarm_current_thread() {
    raw_syscall(
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
    set_selector(SELECTOR_ALLOW);
}

/// A new thread's first act (from `fusebox_direct_thread_start`): arm,
/// then take the signal mask the application had at its clone (the thread
/// was created from inside the SIGSYS handler, where every signal is held,
/// and never returns through it).
extern "C" fn arm_new_thread(app_mask: u64) {
    // Nothing to report to: the thread is the application's. It runs on
    // unhooked if the kernel refuses, which it cannot here (its parent was
    // armed by the same call).
    let _ = arm_current_thread();
    let mask = app_mask & !SIGSYS_BIT;
    raw_syscall(
        libc::SYS_rt_sigprocmask,
        [
            libc::SIG_SETMASK as u64,
            &mask as *const u64 as u64,
            0,
            8,
            0,
            0,
        ],
    );
}

/// The kernel's `struct sigaction` (x86_64 rt_sigaction).
#[repr(C)]
#[derive(Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
struct KernelSigaction {
    handler: u64,
    flags: u64,
    restorer: u64,
    mask: u64,
}

pub(crate) fn install(hook: Hook) -> Result<(), InterceptError> {
    if !std::ptr::fn_addr_eq(*HOOK.get_or_init(|| hook), hook) {
        return Err(InterceptError::AlreadyInstalled);
    }
    let act = KernelSigaction {
        handler: on_sigsys as *const () as usize as u64,
        // NODEFER: a call the application's signal handler makes while a
        // passed-on call of ours blocks (a read on a pipe) is hooked too,
        // in a nested SIGSYS.
        flags: libc::SA_SIGINFO as u64 | SA_RESTORER | libc::SA_NODEFER as u64,
        restorer: fusebox_direct_restorer as *const () as usize as u64,
        // Nothing more held than the application holds: a passed-on call
        // that blocks must be interruptible by the signals it would be
        // interrupted by without us (Ctrl-C during a read).
        mask: 0,
    };
    let ret = raw_syscall(
        libc::SYS_rt_sigaction,
        [libc::SIGSYS as u64, &act as *const _ as u64, 0, 8, 0, 0],
    );
    if let Some(e) = errno_of(ret) {
        return Err(InterceptError::Unsupported(
            std::io::Error::from_raw_os_error(e),
        ));
    }
    arm_current_thread()
}

extern "C" fn on_sigsys(_: i32, info: *mut libc::siginfo_t, context: *mut c_void) {
    // SAFETY: this thread's own byte.
    let before = unsafe { selector().read_volatile() };
    set_selector(SELECTOR_ALLOW);
    // SAFETY: the kernel passes a valid siginfo and ucontext to an
    // SA_SIGINFO handler, both ours for the handler's duration; the three
    // borrows of the ucontext are of disjoint fields.
    let (code, call_addr, frame) = unsafe {
        let uc = context as *mut libc::ucontext_t;
        (
            (*info).si_code,
            (*info).si_addr() as usize,
            Frame {
                gregs: &mut (*uc).uc_mcontext.gregs,
                // The kernel's sigset is the first 64 bits of glibc's.
                mask: &mut *std::ptr::addr_of_mut!((*uc).uc_sigmask).cast::<u64>(),
                stack: &mut (*uc).uc_stack,
                fp_env: {
                    let fp = (*uc).uc_mcontext.fpregs;
                    if fp.is_null() {
                        0x1f80 | 0x37f << 32
                    } else {
                        u64::from((*fp).mxcsr) | u64::from((*fp).cwd) << 32
                    }
                },
            },
        )
    };
    if code != SYS_USER_DISPATCH {
        // A SIGSYS someone sent or seccomp raised: not a call to answer.
        set_selector(before);
        return;
    }
    let g = &frame.gregs;
    let call = Syscall {
        nr: g[libc::REG_RAX as usize],
        args: [
            g[libc::REG_RDI as usize] as u64,
            g[libc::REG_RSI as usize] as u64,
            g[libc::REG_RDX as usize] as u64,
            g[libc::REG_R10 as usize] as u64,
            g[libc::REG_R8 as usize] as u64,
            g[libc::REG_R9 as usize] as u64,
        ],
        call_addr,
    };
    // The next call from this site goes straight to `on_trampoline`.
    rewrite::patch_site(call_addr);
    let mut frame = frame;
    let ret = dispatch(&call, &mut Caller::Signal(&mut frame));
    frame.gregs[libc::REG_RAX as usize] = ret;
    set_selector(before);
}

/// A call from a rewritten site (`rewrite.rs`): the registers as the
/// application had them, on its stack; the result goes back in `rax`.
pub(crate) extern "C" fn on_trampoline(regs: &mut SavedRegs) {
    let nr = regs.rax as i64;
    let args = [regs.rdi, regs.rsi, regs.rdx, regs.r10, regs.r8, regs.r9];
    // SAFETY: this thread's own byte.
    if unsafe { selector().read_volatile() } != SELECTOR_BLOCK {
        // Our own code (the hook's libc calls, a handler interrupting the
        // hook), or a thread that is not armed: what dispatch would let
        // through.
        if appmem::changes_mappings(nr, &args) {
            appmem::mappings_may_change();
        }
        regs.rax = raw_syscall(nr, args) as u64;
        return;
    }
    set_selector(SELECTOR_ALLOW);
    let call = Syscall {
        nr,
        args,
        call_addr: regs.resume as usize,
    };
    let ret = dispatch(&call, &mut Caller::Direct(regs));
    regs.rax = ret as u64;
    set_selector(SELECTOR_BLOCK);
}

/// Where a call came from, which decides how the calls that act on the
/// caller's own state (mask, stack, registers) are made.
enum Caller<'f, 'a> {
    /// SIGSYS: the state is on the signal frame, and what is changed there
    /// takes effect at the handler's return.
    Signal(&'f mut Frame<'a>),
    /// A rewritten site: the thread's state is live.
    Direct(&'f mut SavedRegs),
}

impl Caller<'_, '_> {
    /// The registers in `ucontext` order, the signal mask and the
    /// floating-point environment the application has at this call.
    fn app_state(&self) -> ([i64; 23], u64, u64) {
        match self {
            Caller::Signal(f) => (*f.gregs, *f.mask, f.fp_env),
            Caller::Direct(r) => {
                use libc::*;
                let mut g = [0i64; 23];
                for (reg, v) in [
                    (REG_RAX, r.rax),
                    (REG_RCX, r.rcx),
                    (REG_RDX, r.rdx),
                    (REG_RSI, r.rsi),
                    (REG_RDI, r.rdi),
                    (REG_R8, r.r8),
                    (REG_R9, r.r9),
                    (REG_R10, r.r10),
                    (REG_R11, r.r11),
                    (REG_RBX, r.rbx),
                    (REG_RBP, r.rbp),
                    (REG_R12, r.r12),
                    (REG_R13, r.r13),
                    (REG_R14, r.r14),
                    (REG_R15, r.r15),
                    (REG_RIP, r.resume),
                    (REG_RSP, r.site_rsp()),
                ] {
                    g[reg as usize] = v as i64;
                }
                let mut mask = 0u64;
                raw_syscall(
                    libc::SYS_rt_sigprocmask,
                    [
                        libc::SIG_BLOCK as u64,
                        0,
                        &mut mask as *mut u64 as u64,
                        8,
                        0,
                        0,
                    ],
                );
                (g, mask, live_fp_env())
            }
        }
    }
}

/// MXCSR and the x87 control word now: the application's, as nothing on
/// the rewritten path changes them.
fn live_fp_env() -> u64 {
    let mut mxcsr = 0u32;
    let mut cw = 0u16;
    // SAFETY: both store into the locals given, nothing else.
    unsafe {
        std::arch::asm!("stmxcsr [{}]", "fnstcw [{}]", in(reg) &mut mxcsr, in(reg) &mut cw,
            options(nostack, preserves_flags));
    }
    u64::from(mxcsr) | u64::from(cw) << 32
}

/// What the handler's return (rt_sigreturn) restores: the application's
/// registers, signal mask and alternate signal stack. Calls that change the
/// last two are made here, on the frame, or rt_sigreturn would undo them.
struct Frame<'a> {
    gregs: &'a mut [i64; 23],
    mask: &'a mut u64,
    stack: &'a mut libc::stack_t,
    /// MXCSR (low 32 bits) and the x87 control word (next 16) the
    /// application had: a thread it creates inherits them.
    fp_env: u64,
}

/// Make the application's call for it. The gate is shut first: a signal
/// handler of the application that runs while the call blocks is the
/// application's code, and its calls are hooked.
fn pass_on(nr: i64, a: [u64; 6]) -> i64 {
    set_selector(SELECTOR_BLOCK);
    raw_syscall(nr, a)
}

/// `pass_on`, from inside the hook, which goes on afterwards: its own
/// calls must not be dispatched again.
pub(crate) fn call_as_program(nr: i64, a: [u64; 6]) -> i64 {
    let ret = pass_on(nr, a);
    set_selector(SELECTOR_ALLOW);
    ret
}

/// A signal set the application passed, less SIGSYS (blocking it while a
/// call is dispatched kills the process), at a place of our own.
fn without_sigsys(addr: u64, copy: &mut u64) -> u64 {
    match appmem::get_u64(addr) {
        Ok(set) if addr != 0 => {
            *copy = set & !SIGSYS_BIT;
            copy as *mut u64 as u64
        }
        // Null, or unreadable: the kernel answers for it (EFAULT).
        _ => addr,
    }
}

/// Calls interception itself has to handle, then the hook.
fn dispatch(call: &Syscall, caller: &mut Caller<'_, '_>) -> i64 {
    let a = call.args;
    if rewrite::enabled() && rewrite::reads_page_zero(call.nr, &a) {
        return -(libc::EFAULT as i64);
    }
    if appmem::changes_mappings(call.nr, &a) {
        appmem::mappings_may_change();
    }
    match call.nr {
        libc::SYS_rt_sigreturn => {
            let Caller::Signal(frame) = caller else {
                // The trampoline's entry makes it (from the right stack)
                // before it gets here.
                return -(libc::ENOSYS as i64);
            };
            // An application's signal handler returning through libc's
            // restorer, outside the exempt range: return for it, with the
            // stack pointer it had (the kernel finds the frame from there).
            set_selector(SELECTOR_BLOCK);
            // SAFETY: exactly the rt_sigreturn the application made, from
            // its own stack pointer; this handler's frame is abandoned,
            // which is sound as nothing on it needs dropping.
            unsafe { fusebox_direct_sigreturn_at(frame.gregs[libc::REG_RSP as usize] as u64) }
        }
        libc::SYS_rt_sigaction if a[0] == libc::SIGSYS as u64 => {
            // SIGSYS is interception's own: the application's handler is
            // not installed; it is told the default was there.
            if a[2] != 0 && appmem::put(a[2], &KernelSigaction::default()).is_err() {
                return -(libc::EFAULT as i64);
            }
            0
        }
        libc::SYS_rt_sigprocmask => {
            let Caller::Signal(frame) = caller else {
                let mut copy = 0;
                let set = without_sigsys(a[1], &mut copy);
                return pass_on(call.nr, [a[0], set, a[2], a[3], 0, 0]);
            };
            // On the frame: the mask in force when the handler returns.
            if a[3] != 8 {
                return -(libc::EINVAL as i64);
            }
            let old = *frame.mask;
            if a[1] != 0 {
                let Ok(set) = appmem::get_u64(a[1]) else {
                    return -(libc::EFAULT as i64);
                };
                let unblockable = SIGSYS_BIT | 1 << (libc::SIGKILL - 1) | 1 << (libc::SIGSTOP - 1);
                *frame.mask = match a[0] as i32 {
                    libc::SIG_BLOCK => old | set,
                    libc::SIG_UNBLOCK => old & !set,
                    libc::SIG_SETMASK => set,
                    _ => return -(libc::EINVAL as i64),
                } & !unblockable;
            }
            if a[2] != 0 && appmem::put(a[2], &old).is_err() {
                return -(libc::EFAULT as i64);
            }
            0
        }
        libc::SYS_sigaltstack => {
            let ret = pass_on(call.nr, a);
            let Caller::Signal(frame) = caller else {
                return ret;
            };
            if ret == 0 && a[0] != 0 {
                // What is in force now goes on the frame too.
                let mut now: libc::stack_t = libc::stack_t {
                    ss_sp: std::ptr::null_mut(),
                    ss_flags: 0,
                    ss_size: 0,
                };
                raw_syscall(
                    libc::SYS_sigaltstack,
                    [0, &mut now as *mut _ as u64, 0, 0, 0, 0],
                );
                *frame.stack = now;
            }
            ret
        }
        libc::SYS_rt_sigsuspend
        | libc::SYS_ppoll
        | libc::SYS_epoll_pwait
        | libc::SYS_epoll_pwait2 => {
            // The signal mask argument (blocked set or temporary mask).
            let at = match call.nr {
                libc::SYS_rt_sigsuspend => 0,
                libc::SYS_ppoll => 3,
                _ => 4,
            };
            let mut args = a;
            let mut copy = 0;
            args[at] = without_sigsys(a[at], &mut copy);
            pass_on(call.nr, args)
        }
        libc::SYS_pselect6 if a[5] != 0 => {
            // The sixth argument is { const sigset_t *set; size_t size }.
            let mut raw = [0u8; 16];
            if appmem::read(a[5], &mut raw).is_err() {
                return pass_on(call.nr, a);
            }
            let pair = [
                u64::from_ne_bytes(raw[..8].try_into().expect("8 bytes")),
                u64::from_ne_bytes(raw[8..].try_into().expect("8 bytes")),
            ];
            let mut copy = 0;
            let own = [without_sigsys(pair[0], &mut copy), pair[1]];
            pass_on(call.nr, [a[0], a[1], a[2], a[3], a[4], own.as_ptr() as u64])
        }
        libc::SYS_rt_sigaction if a[1] != 0 => {
            // A handler whose mask holds SIGSYS would die at its first call.
            let mut act = KernelSigaction::default();
            if appmem::read(a[1], act.as_mut_bytes()).is_err() {
                return pass_on(call.nr, a);
            }
            act.mask &= !SIGSYS_BIT;
            pass_on(call.nr, [a[0], &act as *const _ as u64, a[2], a[3], 0, 0])
        }
        // glibc falls back to clone, whose thread start this layer knows.
        libc::SYS_clone3 => -(libc::ENOSYS as i64),
        libc::SYS_clone => clone(a, caller),
        libc::SYS_fork => {
            crate::intercept::descriptors_shared();
            fork_with(|| raw_syscall(libc::SYS_fork, [0; 6]))
        }
        libc::SYS_vfork => {
            // The child would run on (and overwrite) the stack this handler
            // is returning through; a copy of the memory instead, the
            // parent still waiting for the child's exec or exit.
            let flags = (libc::CLONE_VFORK | libc::SIGCHLD) as u64;
            crate::intercept::descriptors_shared();
            fork_with(|| raw_syscall(libc::SYS_clone, [flags, 0, 0, 0, 0, 0]))
        }
        _ => match HOOK.get().map(|hook| hook(call)) {
            Some(Action::Return(ret)) => ret,
            Some(Action::Pass) | None => pass_on(call.nr, a),
        },
    }
}

/// After a fork-like clone: the child starts with dispatch off, and gets
/// memory of its own (the hook's `after_fork` hears of it). Both sides now
/// share every descriptor open before (counted again after the call: one
/// another thread made while it ran may be in the child).
fn forked(ret: i64) -> i64 {
    crate::intercept::descriptors_shared();
    if ret == 0 {
        appmem::forget_pid();
        rewrite::after_fork();
        let _ = arm_current_thread();
        if let Some(f) = AFTER_FORK.get() {
            f();
        }
    }
    ret
}

static AFTER_FORK: OnceLock<fn()> = OnceLock::new();
/// What runs before a fork (in the parent) and after it (in the parent, with the result).
type ForkHooks = (fn(), fn(i64));
static AROUND_FORK: OnceLock<ForkHooks> = OnceLock::new();

/// A fork-like call: the hook's `around_fork` functions run before it and
/// after it in the parent; the child goes through `forked`.
fn fork_with(fork: impl FnOnce() -> i64) -> i64 {
    let around = AROUND_FORK.get();
    if let Some((before, _)) = around {
        before();
    }
    let ret = forked(fork());
    if ret != 0 {
        if let Some((_, after)) = around {
            after(ret);
        }
    }
    ret
}

/// Run `before` in a process about to fork (or vfork) and `after` with the
/// call's result in it once the call returns there.
pub(crate) fn around_fork(before: fn(), after: fn(i64)) {
    let _ = AROUND_FORK.set((before, after));
}

/// Run `f` in every child that gets a copy of this process's memory
/// (fork, vfork), before the child's code goes on.
pub(crate) fn after_fork(f: fn()) {
    let _ = AFTER_FORK.set(f);
}

fn clone(a: [u64; 6], caller: &Caller<'_, '_>) -> i64 {
    let flags = a[0];
    let vm = flags & libc::CLONE_VM as u64 != 0;
    let new_stack = a[1];
    if flags & libc::CLONE_FILES as u64 == 0 {
        crate::intercept::descriptors_shared();
    }
    if !vm {
        return fork_with(|| pass_on(libc::SYS_clone, a));
    }
    if new_stack == 0 {
        // Shared memory on the same stack (vfork-like): as for vfork.
        let flags = flags & !(libc::CLONE_VM as u64);
        return fork_with(|| raw_syscall(libc::SYS_clone, [flags, a[1], a[2], a[3], a[4], a[5]]));
    }
    let (gregs, app_mask, fp_env) = caller.app_state();
    crate::intercept::memory_sharing(flags);
    let ret = clone_thread(a, &gregs, app_mask, fp_env);
    // Only the parent comes back here (the child starts at its own code).
    crate::intercept::memory_shared(flags);
    if ret > 0 && flags & libc::CLONE_FILES as u64 == 0 {
        crate::intercept::descriptors_shared();
    }
    ret
}

/// A clone with its own stack (a thread, or posix_spawn's child): the
/// child would start inside this handler on a stack without its frames.
/// It starts at `fusebox_direct_thread_start` instead, with the
/// application's signal mask, floating-point environment, registers and resume address stored below
/// the stack pointer the application gave; it arms itself and goes on
/// there.
fn clone_thread(a: [u64; 6], gregs: &[i64; 23], app_mask: u64, fp_env: u64) -> i64 {
    use libc::*;
    const WORDS: usize = 18;
    let order = [
        REG_R15, REG_R14, REG_R13, REG_R12, REG_RBP, REG_RBX, REG_R11, REG_R10, REG_R9, REG_R8,
        REG_RDI, REG_RSI, REG_RDX, REG_RCX, REG_RIP,
    ];
    let mut frame = [0u64; WORDS];
    // `fusebox_direct_syscall6` returns (in the child) into this.
    frame[0] = fusebox_direct_thread_start as *const () as usize as u64;
    frame[1] = app_mask;
    frame[2] = fp_env;
    for (slot, reg) in frame[3..].iter_mut().zip(order) {
        *slot = gregs[reg as usize] as u64;
    }
    let top = a[1];
    let base = top - (WORDS * 8) as u64;
    // The application handed the memory below `top` to the new thread as
    // its stack; the thread's code expects nothing there yet.
    if appmem::write(base, frame.as_bytes()).is_err() {
        return -(libc::EFAULT as i64);
    }
    raw_syscall(libc::SYS_clone, [a[0], base, a[2], a[3], a[4], a[5]])
}
