//! TimingFS (XFUSE): files whose reads take as long as a storage device's.
//!
//! The root holds `files` regular files `file0`, `file1`, ... of `size`
//! bytes each. Their content is a fixed pattern, never stored. A read
//! replies after the profile's delay: "pmem" at once, "ssd" 100 us per
//! 4 KiB, as XFUSE used to show where framework overhead starts to matter.
//!
//! A latency for every request ([`TimingFs::with_latency`]) makes it a
//! stand-in for a remote server, waited out three ways ([`Waiting`]):
//! blocking the serving thread, a reply token answered by a timer thread,
//! or the async API, so what answering later buys can be measured.

use std::collections::BinaryHeap;
use std::ffi::{OsStr, OsString};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use fusebox::fs::ops::*;
use fusebox::protocol::{DataOut, DirEntries};
use fusebox::*;

/// How long a read of `n` bytes takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimingProfile {
    /// Persistent memory: no added latency.
    Pmem,
    /// A fast SSD: 100 us per 4 KiB.
    Ssd,
    /// Custom: this much per 4 KiB.
    PerBlock(Duration),
}

impl TimingProfile {
    pub fn parse(s: &str) -> Option<TimingProfile> {
        match s {
            "pmem" => Some(TimingProfile::Pmem),
            "ssd" => Some(TimingProfile::Ssd),
            other => other
                .strip_suffix("us")
                .and_then(|n| n.parse().ok())
                .map(|us| TimingProfile::PerBlock(Duration::from_micros(us))),
        }
    }

    fn delay(self, bytes: u64) -> Duration {
        let per_block = match self {
            TimingProfile::Pmem => return Duration::ZERO,
            TimingProfile::Ssd => Duration::from_micros(100),
            TimingProfile::PerBlock(d) => d,
        };
        per_block * bytes.div_ceil(4096) as u32
    }
}

/// How a request waits out its latency ([`TimingFs::with_latency`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Waiting {
    /// The serving thread sleeps: a request holds its thread (what every
    /// synchronous FUSE library does).
    #[default]
    Block,
    /// The handler takes its reply token and a timer thread answers: no
    /// thread is held, so requests overlap however many threads serve.
    Token,
    /// Served through the async API ([`fusebox::AsyncAdapter`]): each
    /// request is a tokio task that sleeps, then answers.
    Async,
}

impl Waiting {
    pub fn parse(s: &str) -> Option<Waiting> {
        match s {
            "block" => Some(Waiting::Block),
            "token" => Some(Waiting::Token),
            "async" => Some(Waiting::Async),
            _ => None,
        }
    }
}

/// The files and their content: everything but the waiting.
struct Files {
    profile: TimingProfile,
    files: u64,
    size: u64,
    timeouts: Timeouts,
    created: Timespec,
}

pub struct TimingFs {
    files: Arc<Files>,
    /// Added to every request (lookup, getattr, open, read, readdir, ...).
    latency: Duration,
    waiting: Waiting,
    timer: Option<Timer>,
}

const FIRST_FILE_NODE: u64 = 2;

impl TimingFs {
    pub fn new(profile: TimingProfile, files: u64, size: u64, timeouts: Timeouts) -> TimingFs {
        TimingFs {
            files: Arc::new(Files {
                profile,
                files,
                size,
                timeouts,
                created: Timespec::now(),
            }),
            latency: Duration::ZERO,
            waiting: Waiting::Block,
            timer: None,
        }
    }

    /// Every request takes `latency` (a remote server's round trip, say),
    /// waited out as `waiting` says. With [`Waiting::Async`] serve it with
    /// `AsyncAdapter::new(AsyncTimingFs(fs))`; served directly it answers
    /// with tokens.
    pub fn with_latency(mut self, latency: Duration, waiting: Waiting) -> TimingFs {
        self.latency = latency;
        self.waiting = waiting;
        self.timer = (waiting != Waiting::Block && !latency.is_zero()).then(Timer::start);
        self
    }

    /// Answer `compute()` after the request's latency plus `extra`: here,
    /// after blocking; or later, from the timer thread (`Waiting::Token`).
    fn delayed<T: Send + 'static>(
        &self,
        ctx: &Ctx,
        extra: Duration,
        compute: impl FnOnce(&Files) -> FsResult<T> + Send + 'static,
        answer: fn(ReplyToken, T),
    ) -> FsResult<T> {
        let delay = self.latency + extra;
        let timer = match &self.timer {
            Some(t) if !delay.is_zero() => t,
            _ => {
                let start = Instant::now();
                let r = compute(&self.files);
                wait_until(start + delay);
                return r;
            }
        };
        // The timer and an INTERRUPT race for the token; the first answers.
        let token = ctx.reply_later()?;
        let interrupt = token.interrupt_handle();
        let token = Arc::new(Mutex::new(Some(token)));
        let on_interrupt = token.clone();
        // No lock held: the callback runs here if the INTERRUPT came first.
        interrupt.on_interrupt(move || {
            if let Some(t) = lock(&on_interrupt).take() {
                t.error(Errno::EINTR);
            }
        });
        let files = self.files.clone();
        timer.schedule(Instant::now() + delay, move || {
            if let Some(t) = lock(&token).take() {
                t.result(compute(&files), answer);
            }
        });
        Err(Errno::LATER)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Files {
    fn attr(&self, node: NodeId) -> Option<FileAttr> {
        let dir = node == NodeId::ROOT;
        if !dir && !(FIRST_FILE_NODE..FIRST_FILE_NODE + self.files).contains(&node.0) {
            return None;
        }
        let (mode, size) = if dir {
            (libc::S_IFDIR | 0o755, 0)
        } else {
            (libc::S_IFREG | 0o444, self.size)
        };
        Some(FileAttr::synthetic(node.0, mode, size, self.created))
    }

    fn name_of(i: u64) -> OsString {
        OsString::from(format!("file{i}"))
    }

    fn lookup(&self, parent: NodeId, name: &OsStr) -> FsResult<Entry> {
        if parent != NodeId::ROOT {
            return Err(Errno::ENOTDIR);
        }
        let idx = name
            .to_str()
            .and_then(|n| n.strip_prefix("file"))
            .and_then(|n| n.parse::<u64>().ok());
        match idx.filter(|i| *i < self.files && Self::name_of(*i) == name) {
            Some(i) => {
                let node = NodeId(FIRST_FILE_NODE + i);
                Ok(Entry::new(
                    node,
                    self.attr(node).ok_or(Errno::ENOENT)?,
                    &self.timeouts,
                ))
            }
            None => Err(Errno::ENOENT),
        }
    }

    fn getattr(&self, node: NodeId) -> FsResult<AttrReply> {
        Ok(AttrReply {
            attr: self.attr(node).ok_or(Errno::ENOENT)?,
            ttl: self.timeouts.attr,
        })
    }

    fn open(&self, node: NodeId, args: &Open) -> FsResult<Opened> {
        self.attr(node).ok_or(Errno::ENOENT)?;
        if args.flags & libc::O_ACCMODE != libc::O_RDONLY {
            return Err(Errno::EACCES);
        }
        Ok(Opened {
            flags: fusebox::abi::flags::fopen::NOFLUSH,
            ..Default::default()
        })
    }

    /// How many bytes a read returns.
    fn read_len(&self, node: NodeId, args: &Read) -> FsResult<u64> {
        let attr = self.attr(node).ok_or(Errno::ENOENT)?;
        Ok(attr.size.saturating_sub(args.offset).min(args.size as u64))
    }

    /// A deterministic pattern (byte = offset mod 251) lets tests check
    /// that reads return the right bytes for the right offsets.
    fn fill(offset: u64, len: u64, out: &mut DataOut) {
        let _ = out.fill_with(len as usize, |buf| {
            // Copied from a table in runs of up to 4 KiB: a division per
            // byte cost ~5 us per 4 KiB READ, as much as the rest of it.
            let mut done = 0;
            while done < buf.len() {
                let start = ((offset + done as u64) % PATTERN_PERIOD) as usize;
                let n = (buf.len() - done).min(PATTERN.len() - start).min(4096);
                buf[done..done + n].copy_from_slice(&PATTERN[start..start + n]);
                done += n;
            }
            Ok::<usize, std::convert::Infallible>(buf.len())
        });
    }

    fn opendir(&self, node: NodeId) -> FsResult<Opened> {
        if node != NodeId::ROOT {
            return Err(Errno::ENOTDIR);
        }
        Ok(Opened::default())
    }

    fn readdir(&self, args: &Read, out: &mut DirEntries) -> FsResult<()> {
        // Offsets: 1 = ".", 2 = "..", 3 + i = file i.
        let mut off = args.offset;
        while off < 2 + self.files {
            let (ino, kind, name) = match off {
                0 => (1, FileType::Directory, OsString::from(".")),
                1 => (1, FileType::Directory, OsString::from("..")),
                n => (
                    FIRST_FILE_NODE + n - 2,
                    FileType::RegularFile,
                    Self::name_of(n - 2),
                ),
            };
            if !out.push(ino, off + 1, kind, &name) {
                break;
            }
            off += 1;
        }
        Ok(())
    }

    fn statfs(&self) -> Statfs {
        let blocks = (self.files * self.size).div_ceil(4096);
        Statfs {
            blocks,
            files: self.files + 1,
            bsize: 4096,
            frsize: 4096,
            namelen: 255,
            ..Default::default()
        }
    }
}

const PATTERN_PERIOD: u64 = 251;

/// Bytes `i % 251` for i in 0..251 * 18 (at least 4 KiB past any start).
static PATTERN: [u8; 251 * 18] = {
    let mut p = [0u8; 251 * 18];
    let mut i = 0;
    while i < p.len() {
        p[i] = (i % 251) as u8;
        i += 1;
    }
    p
};

/// Sleep most of the delay and spin the rest: plain sleeps overshoot by
/// tens of microseconds, which would swamp a 100 us profile.
fn wait_until(deadline: Instant) {
    const SPIN: Duration = Duration::from_micros(60);
    let now = Instant::now();
    if deadline > now + SPIN {
        std::thread::sleep(deadline - now - SPIN);
    }
    while Instant::now() < deadline {
        std::hint::spin_loop();
    }
}

/// One thread that runs jobs at their deadlines, for answers given later
/// (`Waiting::Token`). A lock per request: this is an example filesystem's
/// timer, not part of the framework's path.
struct Timer {
    shared: Arc<TimerShared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

type Job = Box<dyn FnOnce() + Send>;

struct Due {
    at: Instant,
    seq: u64,
    job: Job,
}

impl PartialEq for Due {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Due {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // Reversed: BinaryHeap pops the greatest, the earliest must come first.
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

#[derive(Default)]
struct TimerState {
    heap: BinaryHeap<Due>,
    seq: u64,
    stop: bool,
}

#[derive(Default)]
struct TimerShared {
    state: Mutex<TimerState>,
    changed: Condvar,
}

impl Timer {
    fn start() -> Timer {
        let shared = Arc::new(TimerShared::default());
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("timingfs-timer".into())
            .spawn(move || Timer::run(&s))
            .expect("spawning the timer thread");
        Timer {
            shared,
            thread: Some(thread),
        }
    }

    fn schedule(&self, at: Instant, job: impl FnOnce() + Send + 'static) {
        let mut st = lock(&self.shared.state);
        st.seq += 1;
        let seq = st.seq;
        let earliest = st.heap.peek().is_none_or(|d| at < d.at);
        st.heap.push(Due {
            at,
            seq,
            job: Box::new(job),
        });
        drop(st);
        if earliest {
            self.shared.changed.notify_one();
        }
    }

    fn run(shared: &TimerShared) {
        let mut st = lock(&shared.state);
        loop {
            if st.stop {
                // Jobs left are dropped with their tokens: each answers EIO.
                st.heap.clear();
                return;
            }
            let now = Instant::now();
            match st.heap.peek().map(|d| d.at) {
                Some(at) if at <= now => {
                    let due = st.heap.pop().expect("peeked");
                    drop(st);
                    (due.job)();
                    st = lock(&shared.state);
                }
                Some(at) => {
                    st = shared
                        .changed
                        .wait_timeout(st, at - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                None => {
                    st = shared
                        .changed
                        .wait(st)
                        .unwrap_or_else(PoisonError::into_inner)
                }
            }
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        lock(&self.shared.state).stop = true;
        self.shared.changed.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn answer_read(token: ReplyToken, (offset, len): (u64, u64)) {
    let mut out = DataOut::with_capacity(len as usize);
    out.reset(len as usize);
    Files::fill(offset, len, &mut out);
    token.data_out(out)
}

fn answer_ok(token: ReplyToken, (): ()) {
    token.ok()
}

impl Filesystem for TimingFs {
    fn lookup(&self, ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<Entry> {
        let name = name.to_owned();
        self.delayed(
            ctx,
            Duration::ZERO,
            move |f| f.lookup(parent, &name),
            ReplyToken::entry,
        )
    }

    fn getattr(&self, ctx: &Ctx, node: NodeId, _: Option<FileHandle>) -> FsResult<AttrReply> {
        self.delayed(
            ctx,
            Duration::ZERO,
            move |f| f.getattr(node),
            ReplyToken::attr,
        )
    }

    fn open(&self, ctx: &Ctx, node: NodeId, args: &Open) -> FsResult<Opened> {
        let args = *args;
        self.delayed(
            ctx,
            Duration::ZERO,
            move |f| f.open(node, &args),
            ReplyToken::opened,
        )
    }

    fn read(&self, ctx: &Ctx, node: NodeId, args: &Read, out: &mut DataOut) -> FsResult<()> {
        let len = self.files.read_len(node, args)?;
        let extra = self.files.profile.delay(len);
        let offset = args.offset;
        if self.timer.is_some() && !(self.latency + extra).is_zero() {
            self.delayed(ctx, extra, move |_| Ok((offset, len)), answer_read)?;
            return Ok(());
        }
        let start = Instant::now();
        Files::fill(offset, len, out);
        wait_until(start + self.latency + extra);
        Ok(())
    }

    fn opendir(&self, ctx: &Ctx, node: NodeId, _: &Open) -> FsResult<Opened> {
        self.delayed(
            ctx,
            Duration::ZERO,
            move |f| f.opendir(node),
            ReplyToken::opened,
        )
    }

    fn readdir(&self, ctx: &Ctx, _: NodeId, args: &Read, out: &mut DirEntries) -> FsResult<()> {
        if self.timer.is_none() || self.latency.is_zero() {
            wait_until(Instant::now() + self.latency);
            return self.files.readdir(args, out);
        }
        let args = *args;
        self.delayed(
            ctx,
            Duration::ZERO,
            move |f| {
                let mut data = DataOut::with_capacity(args.size as usize);
                data.reset(args.size as usize);
                f.readdir(&args, &mut DirEntries::new(&mut data, false))?;
                Ok(data)
            },
            ReplyToken::data_out,
        )?;
        Ok(())
    }

    fn statfs(&self, ctx: &Ctx, _: NodeId) -> FsResult<Statfs> {
        self.delayed(ctx, Duration::ZERO, |f| Ok(f.statfs()), ReplyToken::statfs)
    }

    fn access(&self, ctx: &Ctx, _: NodeId, _: i32) -> FsResult<()> {
        self.delayed(ctx, Duration::ZERO, |_| Ok(()), answer_ok)
    }
}

impl TimingFs {
    /// Wait `d` without holding a thread. tokio's own timer rounds up to
    /// whole milliseconds (a 5 ms sleep takes 5-7), which would measure the
    /// timer, not the framework: the precise timer thread wakes the task.
    async fn sleep(&self, d: Duration) {
        let Some(timer) = self.timer.as_ref().filter(|_| !d.is_zero()) else {
            return tokio::time::sleep(d).await;
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        timer.schedule(Instant::now() + d, move || {
            let _ = tx.send(());
        });
        let _ = rx.await;
    }
}

/// The same filesystem through the async API (`Waiting::Async`): each
/// request sleeps on a timer, holding no thread. Serve it with
/// `AsyncAdapter::new(AsyncTimingFs(fs))`.
pub struct AsyncTimingFs(pub TimingFs);

impl AsyncFilesystem for AsyncTimingFs {
    async fn lookup(&self, _: &Ctx<'_>, parent: NodeId, name: &OsStr) -> FsResult<Entry> {
        self.0.sleep(self.0.latency).await;
        self.0.files.lookup(parent, name)
    }

    async fn getattr(
        &self,
        _: &Ctx<'_>,
        node: NodeId,
        _: Option<FileHandle>,
    ) -> FsResult<AttrReply> {
        self.0.sleep(self.0.latency).await;
        self.0.files.getattr(node)
    }

    async fn open(&self, _: &Ctx<'_>, node: NodeId, args: &Open) -> FsResult<Opened> {
        self.0.sleep(self.0.latency).await;
        self.0.files.open(node, args)
    }

    async fn read(
        &self,
        _: &Ctx<'_>,
        node: NodeId,
        args: &Read,
        out: &mut DataOut<'static>,
    ) -> FsResult<()> {
        let len = self.0.files.read_len(node, args)?;
        self.0
            .sleep(self.0.latency + self.0.files.profile.delay(len))
            .await;
        Files::fill(args.offset, len, out);
        Ok(())
    }

    async fn opendir(&self, _: &Ctx<'_>, node: NodeId, _: &Open) -> FsResult<Opened> {
        self.0.sleep(self.0.latency).await;
        self.0.files.opendir(node)
    }

    async fn readdir(
        &self,
        _: &Ctx<'_>,
        _: NodeId,
        args: &Read,
        out: &mut DirEntries<'_, 'static>,
    ) -> FsResult<()> {
        self.0.sleep(self.0.latency).await;
        self.0.files.readdir(args, out)
    }

    async fn statfs(&self, _: &Ctx<'_>, _: NodeId) -> FsResult<Statfs> {
        self.0.sleep(self.0.latency).await;
        Ok(self.0.files.statfs())
    }

    async fn access(&self, _: &Ctx<'_>, _: NodeId, _: i32) -> FsResult<()> {
        self.0.sleep(self.0.latency).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_scale_with_blocks() {
        assert_eq!(TimingProfile::Pmem.delay(1 << 20), Duration::ZERO);
        assert_eq!(TimingProfile::Ssd.delay(4096), Duration::from_micros(100));
        assert_eq!(TimingProfile::Ssd.delay(4097), Duration::from_micros(200));
        assert_eq!(
            TimingProfile::parse("30us"),
            Some(TimingProfile::PerBlock(Duration::from_micros(30)))
        );
        assert_eq!(TimingProfile::parse("hdd"), None);
    }

    #[test]
    fn ssd_reads_take_their_time_and_return_the_pattern() {
        let fs = TimingFs::new(TimingProfile::Ssd, 1, 1 << 20, Timeouts::default());
        let e = fs
            .lookup(&Ctx::internal(), NodeId::ROOT, OsStr::new("file0"))
            .unwrap();
        let mut out = DataOut::with_capacity(8192);
        out.reset(8192);
        let t = Instant::now();
        let args = Read {
            fh: FileHandle(0),
            offset: 300,
            size: 8192,
            flags: 0,
            lock_owner: None,
        };
        fs.read(&Ctx::internal(), e.node, &args, &mut out).unwrap();
        assert!(t.elapsed() >= Duration::from_micros(200));
        assert_eq!(out.len(), 8192);
        let expected = (0..8192).map(|i| ((300 + i) % 251) as u8);
        assert!(out.as_slice().iter().copied().eq(expected));
    }
}
