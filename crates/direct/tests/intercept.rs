//! Interception seen from the application's side: each case runs in a
//! forked child (dispatch is per process and cannot be undone for the
//! threads it reached), armed with a hook that answers `getppid` with 4242
//! and `chdir` with EACCES and counts everything else it passes on.

#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Where the last getppid came from (the address after its instruction).
static GETPPID_SITE: AtomicUsize = AtomicUsize::new(0);

use fusebox_direct::intercept::{self, Action, Mechanism, Syscall};

const ANSWER: i32 = 4242;
static SEEN: [AtomicU64; 512] = [const { AtomicU64::new(0) }; 512];

fn hook(call: &Syscall) -> Action {
    if let Some(n) = SEEN.get(call.nr as usize) {
        n.fetch_add(1, Ordering::Relaxed);
    }
    match call.nr {
        libc::SYS_getppid => {
            GETPPID_SITE.store(call.call_addr, Ordering::Relaxed);
            // Vector work in the hook, as a real one does (copies, hashes).
            let v = std::hint::black_box([1.5f64, 2.5, 3.5, 4.5]);
            std::hint::black_box(v.iter().map(|x| x * 1.25).sum::<f64>());
            Action::Return(ANSWER as i64)
        }
        libc::SYS_chdir => Action::Return(-(libc::EACCES as i64)),
        _ => Action::Pass,
    }
}

fn seen(nr: i64) -> u64 {
    SEEN[nr as usize].load(Ordering::Relaxed)
}

fn getppid() -> i32 {
    // SAFETY: getppid has no preconditions.
    unsafe { libc::getppid() }
}

/// getppid through a `syscall` instruction of this test's own, not libc's.
fn getppid_raw() -> i64 {
    let ret: i64;
    // SAFETY: getppid takes no arguments and touches no memory; rcx and
    // r11 are clobbered by the instruction.
    unsafe {
        std::arch::asm!("syscall", inlateout("rax") libc::SYS_getppid => ret,
            out("rcx") _, out("r11") _, options(nostack));
    }
    ret
}

fn libc_and_raw_system_calls_are_answered_by_the_hook() -> Result<(), String> {
    check(getppid() == ANSWER, "libc getppid")?;
    check(getppid_raw() == ANSWER as i64, "raw getppid")?;
    let e = std::env::set_current_dir("/").unwrap_err();
    check(
        e.raw_os_error() == Some(libc::EACCES),
        &format!("chdir: {e}"),
    )
}

fn calls_the_hook_passes_run_as_made() -> Result<(), String> {
    let dir = std::env::temp_dir().join(format!("fusebox-direct-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let file = dir.join("f");
    std::fs::write(&file, b"through the hook").map_err(|e| e.to_string())?;
    let back = std::fs::read(&file).map_err(|e| e.to_string())?;
    std::fs::remove_dir_all(&dir).map_err(|e| e.to_string())?;
    check(back == b"through the hook", "read back")?;
    check(seen(libc::SYS_openat) >= 2, "openat seen by the hook")?;
    check(seen(libc::SYS_write) >= 1, "write seen by the hook")
}

fn mxcsr() -> u32 {
    let mut v = 0u32;
    // SAFETY: stores MXCSR into a local.
    unsafe { std::arch::asm!("stmxcsr [{}]", in(reg) &mut v, options(nostack)) };
    v
}

fn set_mxcsr(v: u32) {
    // SAFETY: loads MXCSR from a local holding a valid value (rounding
    // mode bits changed from the current one).
    unsafe { std::arch::asm!("ldmxcsr [{}]", in(reg) &v, options(nostack)) };
}

fn new_threads_inherit_the_floating_point_environment() -> Result<(), String> {
    let before = mxcsr();
    // Round toward +infinity (MXCSR bits 13-14 = 10).
    let up = (before & !(3 << 13)) | (2 << 13);
    set_mxcsr(up);
    let seen = std::thread::spawn(mxcsr)
        .join()
        .map_err(|_| "thread panicked")?;
    set_mxcsr(before);
    check(
        seen == up,
        &format!("MXCSR in the new thread {seen:#x}, creator's {up:#x}"),
    )
}

fn threads_started_after_install_are_hooked() -> Result<(), String> {
    let workers: Vec<_> = (0..8)
        .map(|i| {
            std::thread::spawn(move || {
                let mut v = std::thread::current().name().map(|_| 0).unwrap_or(0);
                for _ in 0..100 {
                    v += getppid() - ANSWER;
                }
                (i, v, getppid_raw())
            })
        })
        .collect();
    for w in workers {
        let (i, v, raw) = w.join().map_err(|_| "a thread panicked".to_string())?;
        check(v == 0 && raw == ANSWER as i64, &format!("thread {i}"))?;
    }
    Ok(())
}

fn forked_and_spawned_children_are_hooked() -> Result<(), String> {
    // SAFETY: fork in a process whose other threads (none here) hold no
    // locks the child needs; the child only makes system calls and exits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let ok = getppid() == ANSWER && getppid_raw() == ANSWER as i64;
        // SAFETY: ends the child without running the parent's atexit work.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    check(wait_for(pid) == Ok(0), "forked child")?;
    // SAFETY: a raw vfork, which the layer turns into a copying clone (the
    // parent still waits for the child's exit): the child may run Rust.
    let pid = unsafe { libc::syscall(libc::SYS_vfork) } as i32;
    if pid == 0 {
        let ok = getppid() == ANSWER;
        // SAFETY: as above.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    check(wait_for(pid) == Ok(0), "vforked child")?;
    // posix_spawn: a clone with CLONE_VM and a stack of its own.
    let out = std::process::Command::new("sh")
        .args(["-c", "echo spawned; exit 3"])
        .output()
        .map_err(|e| e.to_string())?;
    check(out.status.code() == Some(3), "spawned exit status")?;
    check(out.stdout == b"spawned\n", "spawned output")
}

static IN_HANDLER: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_usr1(_: i32) {
    IN_HANDLER.store(getppid() as usize, Ordering::SeqCst);
}

fn application_signal_handlers_are_hooked_and_return() -> Result<(), String> {
    // SAFETY: installs a handler that only makes a system call and stores.
    unsafe {
        check(
            libc::signal(libc::SIGUSR1, on_usr1 as *const () as usize) != libc::SIG_ERR,
            "signal",
        )?;
        libc::raise(libc::SIGUSR1);
    }
    check(
        IN_HANDLER.load(Ordering::SeqCst) == ANSWER as usize,
        "getppid in the handler",
    )?;
    for _ in 0..1000 {
        // SAFETY: as above.
        unsafe { libc::raise(libc::SIGUSR1) };
    }
    check(getppid() == ANSWER, "after 1000 handler returns")
}

extern "C" fn on_sigsys(_: i32) {}

fn sigsys_stays_interceptions_own() -> Result<(), String> {
    // SAFETY: sigset and signal calls on this thread's own mask and table.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        check(
            libc::sigprocmask(libc::SIG_BLOCK, &all, std::ptr::null_mut()) == 0,
            "block all",
        )?;
        check(getppid() == ANSWER, "getppid with every signal blocked")?;
        check(
            libc::signal(libc::SIGSYS, on_sigsys as *const () as usize) != libc::SIG_ERR,
            "take SIGSYS",
        )?;
        check(getppid() == ANSWER, "getppid after taking SIGSYS")?;
        libc::sigprocmask(libc::SIG_UNBLOCK, &all, std::ptr::null_mut());
    }
    Ok(())
}

static USR2: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_usr2(_: i32) {
    USR2.fetch_add(1, Ordering::SeqCst);
}

fn signal_masks_and_alternate_stacks_the_application_sets_hold() -> Result<(), String> {
    // SAFETY: mask, pending-set and sigaltstack calls on this thread's own
    // state; the alternate stack is leaked, so it outlives its use.
    unsafe {
        check(
            libc::signal(libc::SIGUSR2, on_usr2 as *const () as usize) != libc::SIG_ERR,
            "signal",
        )?;
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR2);
        check(
            libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) == 0,
            "block",
        )?;
        let mut now: libc::sigset_t = std::mem::zeroed();
        libc::sigprocmask(libc::SIG_BLOCK, std::ptr::null(), &mut now);
        check(
            libc::sigismember(&now, libc::SIGUSR2) == 1,
            "SIGUSR2 blocked after the call",
        )?;
        libc::raise(libc::SIGUSR2);
        check(
            USR2.load(Ordering::SeqCst) == 0,
            "blocked signal not delivered",
        )?;
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigpending(&mut pending);
        check(
            libc::sigismember(&pending, libc::SIGUSR2) == 1,
            "SIGUSR2 pending",
        )?;
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        check(USR2.load(Ordering::SeqCst) == 1, "delivered once unblocked")?;
        let stack = vec![0u8; 64 << 10].leak();
        let alt = libc::stack_t {
            ss_sp: stack.as_mut_ptr().cast(),
            ss_flags: 0,
            ss_size: stack.len(),
        };
        check(
            libc::sigaltstack(&alt, std::ptr::null_mut()) == 0,
            "sigaltstack",
        )?;
        let mut cur: libc::stack_t = std::mem::zeroed();
        libc::sigaltstack(std::ptr::null(), &mut cur);
        check(
            cur.ss_sp == alt.ss_sp && cur.ss_size == alt.ss_size,
            "alternate stack kept",
        )?;
    }
    Ok(())
}

fn check(ok: bool, what: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("{what}: not as expected"))
    }
}

fn wait_for(pid: i32) -> Result<i32, String> {
    let mut status = 0;
    // SAFETY: waits for this process's own child.
    if unsafe { libc::waitpid(pid, &mut status, 0) } != pid {
        return Err(std::io::Error::last_os_error().to_string());
    }
    if libc::WIFEXITED(status) {
        Ok(libc::WEXITSTATUS(status))
    } else {
        Err(format!("killed by signal {}", libc::WTERMSIG(status)))
    }
}

/// getppid twice from one `syscall` instruction with all sixteen xmm
/// registers holding values: the first call is caught by dispatch (which,
/// when rewriting, rewrites the site), the second by the rewritten call.
/// Returns the registers after.
fn getppid_twice_keeping_xmm(before: &[[u64; 2]; 16]) -> ([[u64; 2]; 16], [i64; 2]) {
    let mut after = [[0u64; 2]; 16];
    let mut results = [0i64; 2];
    for r in &mut results {
        // SAFETY: loads and stores the xmm registers from and to the
        // arrays given (16 x 16 bytes each) around a getppid, which
        // touches no memory; every register used is declared clobbered.
        unsafe {
            std::arch::asm!(
                "movdqu xmm0, [{b}]", "movdqu xmm1, [{b} + 16]", "movdqu xmm2, [{b} + 32]",
                "movdqu xmm3, [{b} + 48]", "movdqu xmm4, [{b} + 64]", "movdqu xmm5, [{b} + 80]",
                "movdqu xmm6, [{b} + 96]", "movdqu xmm7, [{b} + 112]", "movdqu xmm8, [{b} + 128]",
                "movdqu xmm9, [{b} + 144]", "movdqu xmm10, [{b} + 160]", "movdqu xmm11, [{b} + 176]",
                "movdqu xmm12, [{b} + 192]", "movdqu xmm13, [{b} + 208]", "movdqu xmm14, [{b} + 224]",
                "movdqu xmm15, [{b} + 240]",
                // A fixed number right before: a site that may be rewritten.
                "mov eax, 110",
                "syscall",
                "movdqu [{a}], xmm0", "movdqu [{a} + 16], xmm1", "movdqu [{a} + 32], xmm2",
                "movdqu [{a} + 48], xmm3", "movdqu [{a} + 64], xmm4", "movdqu [{a} + 80], xmm5",
                "movdqu [{a} + 96], xmm6", "movdqu [{a} + 112], xmm7", "movdqu [{a} + 128], xmm8",
                "movdqu [{a} + 144], xmm9", "movdqu [{a} + 160], xmm10", "movdqu [{a} + 176], xmm11",
                "movdqu [{a} + 192], xmm12", "movdqu [{a} + 208], xmm13", "movdqu [{a} + 224], xmm14",
                "movdqu [{a} + 240], xmm15",
                b = in(reg) before.as_ptr(),
                a = in(reg) after.as_mut_ptr(),
                out("rax") *r,
                out("rcx") _, out("r11") _,
                out("xmm0") _, out("xmm1") _, out("xmm2") _, out("xmm3") _,
                out("xmm4") _, out("xmm5") _, out("xmm6") _, out("xmm7") _,
                out("xmm8") _, out("xmm9") _, out("xmm10") _, out("xmm11") _,
                out("xmm12") _, out("xmm13") _, out("xmm14") _, out("xmm15") _,
                options(nostack),
            );
        }
    }
    (after, results)
}

fn rewritten_sites_answer_and_keep_registers() -> Result<(), String> {
    let before: [[u64; 2]; 16] =
        std::array::from_fn(|i| [0x0101_0101_0101_0101 * (i as u64 + 1), !(i as u64)]);
    let (after, results) = getppid_twice_keeping_xmm(&before);
    check(
        results == [ANSWER as i64; 2],
        &format!("answers {results:?}"),
    )?;
    check(
        after == before,
        "xmm registers changed across a hooked call",
    )?;
    let site = GETPPID_SITE.load(Ordering::Relaxed) - 2;
    // SAFETY: the two bytes of the instruction that just ran.
    let bytes = unsafe { std::ptr::read_unaligned(site as *const [u8; 2]) };
    let want = if intercept::rewriting() {
        [0xff, 0xd0]
    } else {
        [0x0f, 0x05]
    };
    check(
        bytes == want,
        &format!("site holds {bytes:02x?}, expected {want:02x?}"),
    )
}

/// glibc's generic syscall() takes the number from a register: even after
/// it served ordinary calls, a number no trampoline covers gets ENOSYS, as
/// natively, and does not crash the program.
fn any_number_through_the_generic_wrapper_gets_enosys() -> Result<(), String> {
    for _ in 0..3 {
        // SAFETY: gettid has no preconditions.
        unsafe { libc::syscall(libc::SYS_gettid) };
    }
    for nr in [-1i64, 1000, 0x4000_0000 + 1, 100_000] {
        // SAFETY: an unknown number; the kernel answers ENOSYS.
        let r = unsafe { libc::syscall(nr) };
        let e = std::io::Error::last_os_error().raw_os_error();
        check(
            r == -1 && e == Some(libc::ENOSYS),
            &format!("syscall({nr}): {r} {e:?}"),
        )?;
    }
    Ok(())
}

fn a_null_path_is_still_efault() -> Result<(), String> {
    // With the trampoline at address 0, the kernel could read it as a path.
    // SAFETY: a null path is what is being tested; the kernel checks it.
    let r = unsafe { libc::syscall(libc::SYS_unlink, 0usize) };
    let e = std::io::Error::last_os_error().raw_os_error();
    check(
        r == -1 && e == Some(libc::EFAULT),
        &format!("unlink(NULL): {r} {e:?}"),
    )?;
    // SAFETY: as above, for a write's buffer.
    let r = unsafe { libc::write(2, std::ptr::null(), 4) };
    let e = std::io::Error::last_os_error().raw_os_error();
    check(
        r == -1 && e == Some(libc::EFAULT),
        &format!("write(NULL): {r} {e:?}"),
    )
}

type Case = fn() -> Result<(), String>;

fn main() {
    let cases: &[(&str, Case)] = &[
        (
            "libc_and_raw_system_calls_are_answered_by_the_hook",
            libc_and_raw_system_calls_are_answered_by_the_hook,
        ),
        (
            "calls_the_hook_passes_run_as_made",
            calls_the_hook_passes_run_as_made,
        ),
        (
            "threads_started_after_install_are_hooked",
            threads_started_after_install_are_hooked,
        ),
        (
            "forked_and_spawned_children_are_hooked",
            forked_and_spawned_children_are_hooked,
        ),
        (
            "application_signal_handlers_are_hooked_and_return",
            application_signal_handlers_are_hooked_and_return,
        ),
        (
            "sigsys_stays_interceptions_own",
            sigsys_stays_interceptions_own,
        ),
        (
            "new_threads_inherit_the_floating_point_environment",
            new_threads_inherit_the_floating_point_environment,
        ),
        (
            "signal_masks_and_alternate_stacks_the_application_sets_hold",
            signal_masks_and_alternate_stacks_the_application_sets_hold,
        ),
        (
            "rewritten_sites_answer_and_keep_registers",
            rewritten_sites_answer_and_keep_registers,
        ),
        ("a_null_path_is_still_efault", a_null_path_is_still_efault),
        (
            "any_number_through_the_generic_wrapper_gets_enosys",
            any_number_through_the_generic_wrapper_gets_enosys,
        ),
    ];
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let mut failed = 0;
    let mechanisms = [
        ("dispatch", Mechanism::Dispatch),
        ("rewrite", Mechanism::Rewrite),
    ];
    for ((name, case), (how, mechanism)) in cases
        .iter()
        .flat_map(|c| mechanisms.iter().map(move |m| (c, m)))
    {
        if filter.as_ref().is_some_and(|f| !name.contains(f.as_str())) {
            continue;
        }
        // SAFETY: this harness is single-threaded; the child runs the case
        // and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: a hung case is ended by the alarm, not the suite.
            unsafe { libc::alarm(30) };
            let code = match intercept::install(hook, *mechanism)
                .map_err(|e| e.to_string())
                .and_then(|()| case())
            {
                Ok(()) => 0,
                Err(e) => {
                    eprintln!("{name}: {e}");
                    1
                }
            };
            // SAFETY: ends the child here.
            unsafe { libc::_exit(code) };
        }
        match wait_for(pid) {
            Ok(0) => println!("test {name} ({how}) ... ok"),
            other => {
                failed += 1;
                println!("test {name} ({how}) ... FAILED ({other:?})");
            }
        }
    }
    if failed > 0 {
        eprintln!("{failed} failed");
        std::process::exit(1);
    }
}
