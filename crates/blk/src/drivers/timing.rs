//! A simulated disk: blocks in memory (as `ram`), each request answered
//! after the time a real device would take (BDUS's and TimingFS's way of
//! studying a storage stack without the storage). Requests are answered
//! later from a timer thread, so the device has many in flight, as an SSD
//! does; the HDD model serves one at a time and pays a seek for every
//! request that does not start where the previous one ended.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::driver::{
    BlkError, BlockDriver, Capabilities, Geometry, ReadCompletion, WriteCompletion,
};
use crate::drivers::RamDriver;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TimingProfile {
    /// NVMe-like: 80 us per read and 20 us per write plus transfer at
    /// 2 GB/s read, 1 GB/s write; requests overlap.
    Ssd,
    /// 7,200 rpm: 8 ms seek and rotation unless sequential, then 150 MB/s;
    /// one request at a time.
    Hdd,
    /// A fixed latency per request; requests overlap.
    Fixed(Duration),
}

impl TimingProfile {
    /// `ssd`, `hdd`, or a latency such as `200us` or `2ms`.
    pub fn parse(s: &str) -> Option<TimingProfile> {
        match s {
            "ssd" => Some(TimingProfile::Ssd),
            "hdd" => Some(TimingProfile::Hdd),
            _ => {
                let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit())?);
                let n: u64 = num.parse().ok()?;
                let d = match unit {
                    "us" => Duration::from_micros(n),
                    "ms" => Duration::from_millis(n),
                    "ns" => Duration::from_nanos(n),
                    _ => return None,
                };
                Some(TimingProfile::Fixed(d))
            }
        }
    }

    fn serial(&self) -> bool {
        matches!(self, TimingProfile::Hdd)
    }

    fn service(&self, write: bool, len: usize, sequential: bool) -> Duration {
        let transfer = |bytes_per_sec: f64| Duration::from_secs_f64(len as f64 / bytes_per_sec);
        match self {
            TimingProfile::Ssd if write => Duration::from_micros(20) + transfer(1e9),
            TimingProfile::Ssd => Duration::from_micros(80) + transfer(2e9),
            TimingProfile::Hdd => {
                let seek = if sequential {
                    Duration::ZERO
                } else {
                    Duration::from_millis(8)
                };
                seek + transfer(150e6)
            }
            TimingProfile::Fixed(d) => *d,
        }
    }
}

type Answer = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct Queue {
    due: BinaryHeap<Reverse<(Instant, u64)>>,
    answers: HashMap<u64, Answer>,
    next: u64,
    /// HDD: when the head is free again, and where it stopped.
    busy_until: Option<Instant>,
    head: u64,
    stopping: bool,
}

struct Timer {
    queue: Mutex<Queue>,
    wake: Condvar,
}

impl Timer {
    fn start() -> Arc<Timer> {
        let t = Arc::new(Timer {
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
        });
        let run = t.clone();
        std::thread::Builder::new()
            .name("fusebox-blk-timing".into())
            .spawn(move || run.run())
            .expect("starting the timing thread");
        t
    }

    fn run(&self) {
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if q.stopping {
                return;
            }
            let now = Instant::now();
            match q.due.peek().copied() {
                Some(Reverse((at, id))) if at <= now => {
                    q.due.pop();
                    let answer = q.answers.remove(&id);
                    drop(q);
                    if let Some(a) = answer {
                        a();
                    }
                    q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
                }
                Some(Reverse((at, _))) => {
                    q = self
                        .wake
                        .wait_timeout(q, at - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                None => q = self.wake.wait(q).unwrap_or_else(PoisonError::into_inner),
            }
        }
    }

    /// Answer with `answer` once the request would have completed.
    fn schedule(
        &self,
        profile: TimingProfile,
        write: bool,
        offset: u64,
        len: usize,
        answer: Answer,
    ) {
        let now = Instant::now();
        let mut q = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let sequential = q.head == offset;
        let service = profile.service(write, len, sequential);
        let at = if profile.serial() {
            let start = q.busy_until.map_or(now, |b| b.max(now));
            let done = start + service;
            q.busy_until = Some(done);
            q.head = offset + len as u64;
            done
        } else {
            now + service
        };
        let id = q.next;
        q.next += 1;
        q.answers.insert(id, answer);
        q.due.push(Reverse((at, id)));
        drop(q);
        self.wake.notify_one();
    }

    fn stop(&self) {
        self.queue
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stopping = true;
        self.wake.notify_one();
    }
}

pub struct TimingDriver {
    store: RamDriver,
    profile: TimingProfile,
    timer: Arc<Timer>,
}

impl TimingDriver {
    pub fn new(store: RamDriver, profile: TimingProfile) -> TimingDriver {
        TimingDriver {
            store,
            profile,
            timer: Timer::start(),
        }
    }
}

impl Drop for TimingDriver {
    fn drop(&mut self) {
        self.timer.stop();
    }
}

impl BlockDriver for TimingDriver {
    fn geometry(&self) -> Geometry {
        self.store.geometry()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            answers_later: true,
            ..self.store.capabilities()
        }
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), BlkError> {
        std::thread::sleep(self.profile.service(false, buf.len(), false));
        self.store.read(offset, buf)
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), BlkError> {
        std::thread::sleep(self.profile.service(true, data.len(), false));
        self.store.write(offset, data)
    }

    fn trim(&self, offset: u64, len: u64) -> Result<(), BlkError> {
        self.store.trim(offset, len)
    }

    fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), BlkError> {
        self.store.write_zeroes(offset, len)
    }

    fn submit_read(&self, offset: u64, len: usize, done: ReadCompletion) {
        let mut buf = vec![0u8; len];
        match self.store.read(offset, &mut buf) {
            Ok(()) => self.timer.schedule(
                self.profile,
                false,
                offset,
                len,
                Box::new(move || done.complete(Ok(&buf))),
            ),
            Err(e) => done.complete(Err(e)),
        }
    }

    fn submit_write(&self, offset: u64, data: &[u8], done: WriteCompletion) {
        match self.store.write(offset, data) {
            Ok(()) => self.timer.schedule(
                self.profile,
                true,
                offset,
                data.len(),
                Box::new(move || done.complete(Ok(()))),
            ),
            Err(e) => done.complete(Err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_parse() {
        assert_eq!(TimingProfile::parse("ssd"), Some(TimingProfile::Ssd));
        assert_eq!(
            TimingProfile::parse("250us"),
            Some(TimingProfile::Fixed(Duration::from_micros(250)))
        );
        assert_eq!(TimingProfile::parse("fast"), None);
        assert_eq!(TimingProfile::parse("3 ms"), None);
    }

    #[test]
    fn an_hdd_pays_a_seek_only_off_the_track() {
        let p = TimingProfile::Hdd;
        assert!(p.service(false, 4096, false) > Duration::from_millis(8));
        assert!(p.service(false, 4096, true) < Duration::from_micros(100));
    }
}
