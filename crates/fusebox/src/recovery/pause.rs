//! Pausing a server's classic workers for a planned upgrade: every worker
//! finishes the request it holds and parks before reading another, so the
//! kernel holds every request not yet answered and the next server reads
//! them. A parked server can resume (the upgrade failed) or exit.
//!
//! A worker blocked in read(2) is woken by a signal whose handler does
//! nothing and whose action lacks SA_RESTART (`sys::install_wake_handler`):
//! the read returns EINTR and the worker sees the pause. The signal is sent
//! again every millisecond until every worker is parked, since one that
//! arrives while a worker is between its check and its read is lost.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Parks a server's classic workers between requests for a planned upgrade,
/// and lets them go again.
#[derive(Default)]
pub struct PauseControl {
    paused: AtomicBool,
    state: Mutex<Parking>,
    changed: Condvar,
}

#[derive(Default)]
struct Parking {
    /// Thread ids of the workers, registered as they start.
    tids: Vec<i32>,
    parked: usize,
}

impl PauseControl {
    /// A worker thread starts (call on that thread).
    pub fn register_current(&self) {
        let tid = rustix::thread::gettid().as_raw_nonzero().get();
        self.lock().tids.push(tid);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Parking> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Called by a worker between requests (and on EINTR): parks while
    /// paused. One relaxed load when not.
    #[inline]
    pub fn checkpoint(&self) {
        if self.paused.load(Ordering::Acquire) {
            self.park();
        }
    }

    #[cold]
    fn park(&self) {
        let mut st = self.lock();
        st.parked += 1;
        self.changed.notify_all();
        while self.paused.load(Ordering::Acquire) {
            st = self
                .changed
                .wait(st)
                .unwrap_or_else(PoisonError::into_inner);
        }
        st.parked -= 1;
        self.changed.notify_all();
    }

    /// Park every worker; true once all are parked within `timeout`.
    pub fn pause(&self, timeout: Duration) -> bool {
        self.paused.store(true, Ordering::Release);
        let deadline = Instant::now() + timeout;
        loop {
            let st = self.lock();
            if st.parked >= st.tids.len() {
                return true;
            }
            let tids = st.tids.clone();
            drop(st);
            if Instant::now() >= deadline {
                return false;
            }
            for tid in tids {
                // ESRCH: that worker has exited (the mount is going away).
                let _ = crate::sys::wake_thread(tid);
            }
            let st = self.lock();
            let _ = self
                .changed
                .wait_timeout(st, Duration::from_millis(1))
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Let parked workers read again (the upgrade failed).
    pub fn resume(&self) {
        let _st = self.lock();
        self.paused.store(false, Ordering::Release);
        self.changed.notify_all();
    }
}
