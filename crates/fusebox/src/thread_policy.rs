//! How the kernel schedules the threads that serve requests, and the guard
//! that makes SCHED_IDLE safe to use.
//!
//! Why SCHED_IDLE at all: a synchronous request wakes a serving thread on
//! the application's CPU, and the reply wakes the application. At that
//! second wake-up the scheduler sees the serving thread still running
//! there, and places the application on the other CPU if it is idle (and
//! once it moved, `recent_used_cpu` keeps it alternating). Every such move
//! is a wake-up of a halted CPU: 20-70 us on the VMs this was measured on,
//! against ~10 us for the whole round trip on one CPU. A CPU running only
//! SCHED_IDLE threads counts as idle for that decision, so the application
//! is woken where it was and preempts the serving thread at once.
//!
//! Why a guard: a SCHED_IDLE thread gets a CPU only when nothing else wants
//! it. With CPU-bound work on the CPU a request waits for (the caller's own
//! queue over io_uring), requests would wait hundreds of milliseconds. So
//! [`ThreadPolicy::Adaptive`] runs the serving threads SCHED_IDLE only
//! while nothing makes them wait: a watchdog thread looks at their run
//! delay (time spent runnable but not running, from
//! /proc/self/task/TID/schedstat) every [`TICK`] while the mount is busy,
//! and at the first sign of waiting whole slices for a CPU puts them back
//! to SCHED_OTHER for [`COOLDOWN`] before trying again. An idle mount costs
//! nothing: after [`IDLE_TICKS`] ticks without requests the threads go back
//! to SCHED_OTHER and the watchdog sleeps until a serving thread sees a
//! request again.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// How the kernel schedules the threads that serve requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ThreadPolicy {
    /// SCHED_OTHER, like any thread.
    #[default]
    Normal,
    /// SCHED_IDLE, always (see the module documentation). CPU-bound
    /// processes on every CPU leave these threads almost no time, so
    /// requests crawl while the machine is saturated. For measurements and
    /// dedicated machines.
    Idle,
    /// io_uring queue threads SCHED_IDLE while they do not wait for a CPU,
    /// SCHED_OTHER while they do or while the mount is idle. Classic
    /// /dev/fuse workers stay SCHED_OTHER: unpinned, any of them serves any
    /// CPU's requests, so keeping the caller on its CPU gains nothing, and
    /// as SCHED_IDLE threads they lost to the callers themselves (2-thread
    /// 4 KiB O_DIRECT reads halved on a 2-core VM).
    Adaptive,
}

impl ThreadPolicy {
    /// Apply the thread's starting policy to the calling thread.
    pub(crate) fn enter(self) -> io::Result<()> {
        match self {
            ThreadPolicy::Normal | ThreadPolicy::Adaptive => Ok(()),
            ThreadPolicy::Idle => crate::sys::set_sched_policy(0, true),
        }
    }
}

impl std::str::FromStr for ThreadPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "normal" => Ok(ThreadPolicy::Normal),
            "idle" => Ok(ThreadPolicy::Idle),
            "adaptive" => Ok(ThreadPolicy::Adaptive),
            _ => Err(format!(
                "unknown thread policy {s:?} (normal, idle or adaptive)"
            )),
        }
    }
}

impl std::fmt::Display for ThreadPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ThreadPolicy::Normal => "normal",
            ThreadPolicy::Idle => "idle",
            ThreadPolicy::Adaptive => "adaptive",
        })
    }
}

/// How often the watchdog looks while the mount is busy.
pub const TICK: Duration = Duration::from_millis(20);
/// How long the threads stay SCHED_OTHER after waiting for a CPU.
pub const COOLDOWN: Duration = Duration::from_secs(1);
/// Ticks without a request before the watchdog goes to sleep.
pub const IDLE_TICKS: u32 = 5;
/// A thread that waited this long for a CPU within one tick...
const WAITED: Duration = Duration::from_millis(4);
/// ...at least this long on average each time it got one, was kept off the
/// CPU by other work. The ping-pong with the application it serves makes
/// short waits (microseconds, the caller running until it blocks again),
/// many of them; a CPU-bound neighbour makes long ones.
const WAITED_PER_SLICE: Duration = Duration::from_micros(500);

/// Where the serving threads' policy is decided. Serving threads register
/// themselves and call [`Guarded::touch`] after each batch of requests.
pub struct Guard {
    shared: Arc<Shared>,
    watchdog: Option<JoinHandle<()>>,
}

struct Shared {
    threads: Mutex<Vec<Served>>,
    /// The watchdog is awake and watching (not parked).
    watching: AtomicBool,
    stop: AtomicBool,
    watchdog: OnceLock<Thread>,
    /// Times the threads were put back to SCHED_OTHER because they waited.
    demotions: AtomicU64,
}

struct Served {
    tid: i32,
    /// Batches of requests the thread served (its own counter: no cache
    /// line shared between serving threads).
    batches: Arc<AtomicU64>,
    /// (run delay ns, time slices) at the last look.
    last: Option<(u64, u64)>,
}

/// A serving thread's side of the guard. The watchdog runs while any
/// serving thread (or the session) holds the guard.
pub struct Guarded {
    guard: Arc<Guard>,
    batches: Arc<AtomicU64>,
}

impl Guarded {
    /// The thread handled requests: count them, and wake the watchdog if
    /// it sleeps. Two uncontended atomics on the hot path.
    #[inline]
    pub fn touch(&self) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        let shared = &self.guard.shared;
        if !shared.watching.load(Ordering::Relaxed) && !shared.watching.swap(true, Ordering::AcqRel)
        {
            if let Some(t) = shared.watchdog.get() {
                t.unpark();
            }
        }
    }
}

impl Guard {
    /// A guard and its watchdog thread.
    pub fn start() -> io::Result<Arc<Guard>> {
        can_leave_sched_idle()?;
        let shared = Arc::new(Shared {
            threads: Mutex::new(Vec::new()),
            watching: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            watchdog: OnceLock::new(),
            demotions: AtomicU64::new(0),
        });
        let s = shared.clone();
        let watchdog = std::thread::Builder::new()
            .name("fusebox-policy".into())
            .spawn(move || watch(&s))?;
        let _ = shared.watchdog.set(watchdog.thread().clone());
        Ok(Arc::new(Guard {
            shared,
            watchdog: Some(watchdog),
        }))
    }

    /// Put the calling thread under the guard (it starts SCHED_OTHER).
    pub fn register_current(self: &Arc<Self>) -> Guarded {
        let tid = rustix::thread::gettid().as_raw_nonzero().get();
        let batches = Arc::new(AtomicU64::new(0));
        self.shared
            .threads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Served {
                tid,
                batches: batches.clone(),
                last: None,
            });
        Guarded {
            guard: self.clone(),
            batches,
        }
    }

    /// How often the threads were put back to SCHED_OTHER because something
    /// kept them from a CPU.
    pub fn demotions(&self) -> u64 {
        self.shared.demotions.load(Ordering::Relaxed)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(w) = self.watchdog.take() {
            w.thread().unpark();
            let _ = w.join();
        }
    }
}

/// Leaving SCHED_IDLE needs CAP_SYS_NICE (or an RLIMIT_NICE of 20): a
/// guard that could not take its threads back would be no guard. Tried on
/// a thread of its own.
fn can_leave_sched_idle() -> io::Result<()> {
    std::thread::spawn(|| {
        crate::sys::set_sched_policy(0, true)?;
        crate::sys::set_sched_policy(0, false).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("a thread cannot leave SCHED_IDLE here ({e}): the adaptive thread policy needs CAP_SYS_NICE"),
            )
        })
    })
    .join()
    .unwrap_or_else(|_| Err(io::Error::other("probe thread panicked")))
}

/// Batches served by every guarded thread so far.
fn batches(shared: &Shared) -> u64 {
    let threads = shared.threads.lock().unwrap_or_else(|p| p.into_inner());
    threads
        .iter()
        .map(|t| t.batches.load(Ordering::Relaxed))
        .sum()
}

fn set_all(shared: &Shared, idle: bool) {
    let threads = shared.threads.lock().unwrap_or_else(|p| p.into_inner());
    for t in threads.iter() {
        // A thread that exited (unmount) is gone: ESRCH is expected.
        if let Err(e) = crate::sys::set_sched_policy(t.tid, idle) {
            if e.raw_os_error() != Some(libc::ESRCH) {
                tracing::debug!(tid = t.tid, error = %e, "cannot change a serving thread's policy");
            }
        }
    }
}

/// Whether any serving thread waited for a CPU since the last look.
fn kept_waiting(shared: &Shared) -> bool {
    let mut threads = shared.threads.lock().unwrap_or_else(|p| p.into_inner());
    let mut waited = false;
    for t in threads.iter_mut() {
        let Some(now) = schedstat(t.tid) else {
            continue;
        };
        if let Some((delay0, slices0)) = t.last {
            let delay = now.0.saturating_sub(delay0);
            let slices = now.1.saturating_sub(slices0).max(1);
            if delay >= WAITED.as_nanos() as u64
                && delay / slices >= WAITED_PER_SLICE.as_nanos() as u64
            {
                waited = true;
            }
        }
        t.last = Some(now);
    }
    waited
}

/// (run delay ns, time slices) of thread `tid` of this process.
fn schedstat(tid: i32) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    let mut f = s.split_whitespace().skip(1);
    Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
}

fn watch(shared: &Shared) {
    while !shared.stop.load(Ordering::Acquire) {
        if !shared.watching.load(Ordering::Acquire) {
            std::thread::park();
            continue;
        }
        // Busy: serve SCHED_IDLE, unless the last look found waiting.
        set_all(shared, true);
        kept_waiting(shared);
        let mut normal_until: Option<Instant> = None;
        let mut quiet = 0;
        let mut seen = batches(shared);
        while !shared.stop.load(Ordering::Acquire) {
            std::thread::park_timeout(TICK);
            let now = Instant::now();
            if kept_waiting(shared) && normal_until.is_none() {
                shared.demotions.fetch_add(1, Ordering::Relaxed);
                tracing::debug!("serving threads waited for a CPU: SCHED_OTHER for a while");
                set_all(shared, false);
                normal_until = Some(now + COOLDOWN);
            } else if normal_until.is_some_and(|t| now >= t) {
                normal_until = None;
                set_all(shared, true);
                kept_waiting(shared);
            }
            let b = batches(shared);
            quiet = if b == seen { quiet + 1 } else { 0 };
            seen = b;
            if quiet >= IDLE_TICKS {
                break;
            }
        }
        // Idle (or stopping): back to SCHED_OTHER, so a request that comes
        // while CPU-bound work runs is never left to SCHED_IDLE's mercy.
        set_all(shared, false);
        shared.watching.store(false, Ordering::Release);
        // A touch between the last look and the store above found
        // `watching` still true and woke nobody: look again.
        if batches(shared) != seen {
            shared.watching.store(true, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy_of(tid: i32) -> i32 {
        crate::sys::sched_policy(tid).unwrap()
    }

    fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn policies_parse_and_print() {
        for p in [
            ThreadPolicy::Normal,
            ThreadPolicy::Idle,
            ThreadPolicy::Adaptive,
        ] {
            assert_eq!(p.to_string().parse::<ThreadPolicy>(), Ok(p));
        }
        assert!("fast".parse::<ThreadPolicy>().is_err());
    }

    #[test]
    fn busy_threads_go_idle_and_back_when_the_mount_is_quiet() {
        let guard = Guard::start().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let g = guard.clone();
        let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
        let server = std::thread::spawn(move || {
            let g = g.register_current();
            tx.send(rustix::thread::gettid().as_raw_nonzero().get())
                .unwrap();
            // Requests keep coming for a while, then stop.
            let until = Instant::now() + Duration::from_millis(300);
            while Instant::now() < until {
                g.touch();
                std::thread::sleep(Duration::from_millis(2));
            }
            stop_rx.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        wait_for("SCHED_IDLE while busy", || {
            policy_of(tid) == libc::SCHED_IDLE
        });
        // Quiet: back to SCHED_OTHER after IDLE_TICKS ticks.
        wait_for("SCHED_OTHER once quiet", || {
            policy_of(tid) == libc::SCHED_OTHER
        });
        stop_tx.send(()).unwrap();
        server.join().unwrap();
    }

    #[test]
    fn a_thread_kept_from_its_cpu_goes_back_to_normal() {
        // One CPU, a busy-looping neighbour: a SCHED_IDLE thread there gets
        // almost no time, which is the case the guard exists for.
        let cpu = 0;
        let guard = Guard::start().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let hog = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                crate::transport::dev::pin_to_cpu(cpu).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            })
        };
        let (tx, rx) = std::sync::mpsc::channel();
        let g = guard.clone();
        let stop2 = stop.clone();
        let server = std::thread::spawn(move || {
            crate::transport::dev::pin_to_cpu(cpu).unwrap();
            let g = g.register_current();
            tx.send(rustix::thread::gettid().as_raw_nonzero().get())
                .unwrap();
            // A serving thread with steady work that wants the CPU.
            while !stop2.load(Ordering::Relaxed) {
                g.touch();
                let t = Instant::now();
                while t.elapsed() < Duration::from_micros(200) {
                    std::hint::spin_loop();
                }
                std::thread::sleep(Duration::from_micros(100));
            }
        });
        let tid = rx.recv().unwrap();
        wait_for("a demotion", || guard.demotions() > 0);
        assert_eq!(policy_of(tid), libc::SCHED_OTHER);
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap();
        hog.join().unwrap();
    }
}
