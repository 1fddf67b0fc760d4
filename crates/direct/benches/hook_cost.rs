//! The cost of one hooked system call: getppid made N times natively and
//! then N times through interception (hook passing it on, and hook
//! answering it), by each mechanism, in a forked child so the bench
//! process stays unhooked.
//! Prints nanoseconds per call, medians of 5 rounds.

use std::time::Instant;

use fusebox_direct::intercept::{self, Action, Mechanism, Syscall};

const CALLS: u32 = 200_000;

fn hook(call: &Syscall) -> Action {
    if call.nr == libc::SYS_getpid {
        Action::Return(1)
    } else {
        Action::Pass
    }
}

fn per_call(f: impl Fn()) -> f64 {
    let mut rounds: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..CALLS {
                f();
            }
            t.elapsed().as_nanos() as f64 / CALLS as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[2]
}

#[allow(unsafe_code)]
fn main() {
    // glibc's own wrappers (a fixed number at the site, so rewritable;
    // its generic syscall() is not).
    // SAFETY: getppid/getpid have no preconditions.
    let getppid = || unsafe {
        libc::getppid();
    };
    // SAFETY: as above.
    let getpid = || unsafe {
        libc::getpid();
    };
    let native = per_call(getppid);
    println!("native syscall:                      {native:8.1} ns/call");
    let mut failed = false;
    for (name, mechanism) in [
        ("syscall user dispatch", Mechanism::Dispatch),
        ("rewritten site", Mechanism::Rewrite),
    ] {
        // SAFETY: the bench is single-threaded here; the child measures
        // and exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            if let Err(e) = intercept::install(hook, mechanism) {
                eprintln!("hook_cost ({name}): {e}");
                // SAFETY: ends the child.
                unsafe { libc::_exit(1) };
            }
            let passed = per_call(getppid);
            let answered = per_call(getpid);
            println!(
                "{name}, passed on:{:pad$} {passed:8.1} ns/call ({:.1} ns over native)",
                "",
                passed - native,
                pad = 24 - name.len()
            );
            println!(
                "{name}, answered by hook:{:pad$} {answered:8.1} ns/call",
                "",
                pad = 17 - name.len().min(17)
            );
            // SAFETY: ends the child.
            unsafe { libc::_exit(0) };
        }
        let mut status = 0;
        // SAFETY: waits for the child forked above.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        failed |= !(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    }
    std::process::exit(i32::from(failed));
}
