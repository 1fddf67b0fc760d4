//! Always-on request statistics (Vangoor et al.'s per-type latency
//! histograms): per opcode, a count and a log2 histogram of service time.
//!
//! Each worker thread owns one [`WorkerStats`] and is its only writer, so an
//! update is a relaxed load+store pair on a cache line nobody else writes: no
//! lock, no contended atomic. Readers sum all workers' tables.

mod server;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fusebox_abi::Opcode;
use serde::{Deserialize, Serialize};

pub use server::{
    connect_first, ensure_runtime_dir, fetch, runtime_dir_for, socket_path_for,
    socket_paths_to_try, StatsServer, StatsSocket,
};

/// Histogram bins: bin N counts requests that took 2^(N+1)..2^(N+2) ns.
pub const BINS: usize = 32;

/// The bin for a latency of `ns` nanoseconds.
#[inline]
pub fn bin_for(ns: u64) -> usize {
    // floor(log2(ns)) - 1, clamped: 0..3 ns fall into bin 0, >= 2^33 ns into bin 31.
    let log2 = 63u32.saturating_sub(ns.max(1).leading_zeros());
    (log2.saturating_sub(1) as usize).min(BINS - 1)
}

#[repr(align(64))]
#[derive(Default)]
struct OpCounters {
    count: AtomicU64,
    errors: AtomicU64,
    total_ns: AtomicU64,
    bins: [AtomicU64; BINS],
}

/// One worker's counters. Written by that worker only.
pub struct WorkerStats {
    ops: Box<[OpCounters]>,
    /// Label shown by `fusebox stats` (e.g. "dev/0").
    pub label: String,
}

impl WorkerStats {
    /// An empty table, shown under `label`.
    pub fn new(label: impl Into<String>) -> WorkerStats {
        WorkerStats {
            ops: (0..Opcode::TABLE_LEN)
                .map(|_| OpCounters::default())
                .collect(),
            label: label.into(),
        }
    }

    /// Record one request. Single writer: load+store instead of fetch_add
    /// keeps this to plain moves on x86.
    #[inline]
    pub fn record(&self, op: Opcode, elapsed: Duration, failed: bool) {
        let c = &self.ops[op.table_index()];
        let ns = elapsed.as_nanos().min(u64::MAX as u128) as u64;
        bump(&c.count, 1);
        bump(&c.total_ns, ns);
        bump(&c.bins[bin_for(ns)], 1);
        if failed {
            bump(&c.errors, 1);
        }
    }
}

impl WorkerStats {
    /// Record one request on a table several threads write (answers given
    /// later, from whichever thread answers): atomic adds.
    pub fn record_shared(&self, op: Opcode, elapsed: Duration, failed: bool) {
        let c = &self.ops[op.table_index()];
        let ns = elapsed.as_nanos().min(u64::MAX as u128) as u64;
        c.count.fetch_add(1, Ordering::Relaxed);
        c.total_ns.fetch_add(ns, Ordering::Relaxed);
        c.bins[bin_for(ns)].fetch_add(1, Ordering::Relaxed);
        if failed {
            c.errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[inline]
fn bump(a: &AtomicU64, by: u64) {
    a.store(
        a.load(Ordering::Relaxed).wrapping_add(by),
        Ordering::Relaxed,
    );
}

/// Totals for one request type.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct OpSnapshot {
    /// The request type's opcode.
    pub opcode: u32,
    /// Its name without `FUSE_` ("READ").
    pub name: String,
    /// Requests served.
    pub count: u64,
    /// Of those, how many were answered with an error.
    pub errors: u64,
    /// Service time of them all, in nanoseconds.
    pub total_ns: u64,
    /// `bins[n]` = requests that took 2^(n+1)..2^(n+2) ns.
    pub bins: Vec<u64>,
}

impl OpSnapshot {
    /// Mean service time in nanoseconds; 0 for a type never served.
    pub fn mean_ns(&self) -> u64 {
        self.total_ns.checked_div(self.count).unwrap_or(0)
    }

    /// Upper bound of the bin holding quantile `q` (0..=1), in ns.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        let target = ((self.count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &n) in self.bins.iter().enumerate() {
            seen += n;
            if seen >= target {
                return 1u64 << (i + 2);
            }
        }
        0
    }
}

/// What `fusebox stats` prints: per-type totals across all workers.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct Snapshot {
    /// Where the filesystem is mounted.
    pub mountpoint: String,
    /// The serving process.
    pub pid: u32,
    /// Which transport serves: "classic" or "uring".
    pub transport: String,
    /// Requests served by each worker or io_uring queue ("dev/0", "uring/q1").
    pub workers: Vec<WorkerTotal>,
    /// The protocol minor version in use.
    pub proto_minor: u32,
    /// The INIT flags in force, by name.
    pub flags: Vec<String>,
    /// Time since the session started serving, in milliseconds.
    pub uptime_ms: u64,
    /// Per request type, those served at least once, in opcode order.
    pub ops: Vec<OpSnapshot>,
    /// Requests in flight, and those answered later.
    #[serde(default)]
    pub later: LaterTotals,
    /// Generations, restarts and replays of a supervised mount.
    #[serde(default)]
    pub recovery: Option<RecoveryTotals>,
    /// The filesystem's own figures, as they are now (`since` keeps them
    /// whole: some are levels, not counts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filesystem: Vec<FsCounter>,
}

impl Snapshot {
    /// The totals of the request type called `name` ("READ"), if served.
    pub fn op(&self, name: &str) -> Option<&OpSnapshot> {
        self.ops.iter().find(|o| o.name == name)
    }

    /// Requests of every type served.
    pub fn total_requests(&self) -> u64 {
        self.ops.iter().map(|o| o.count).sum()
    }

    /// What happened after `earlier` (a snapshot of the same mount): the
    /// requests of one phase of a run. Types with no request since are left
    /// out.
    pub fn since(&self, earlier: &Snapshot) -> Snapshot {
        let ops = self
            .ops
            .iter()
            .filter_map(|op| {
                let Some(old) = earlier.ops.iter().find(|o| o.opcode == op.opcode) else {
                    return Some(op.clone());
                };
                let count = op.count.saturating_sub(old.count);
                (count > 0).then(|| OpSnapshot {
                    count,
                    errors: op.errors.saturating_sub(old.errors),
                    total_ns: op.total_ns.saturating_sub(old.total_ns),
                    bins: op
                        .bins
                        .iter()
                        .zip(old.bins.iter().chain(std::iter::repeat(&0)))
                        .map(|(a, b)| a.saturating_sub(*b))
                        .collect(),
                    ..op.clone()
                })
            })
            .collect();
        let workers = self
            .workers
            .iter()
            .map(|w| WorkerTotal {
                label: w.label.clone(),
                requests: w.requests.saturating_sub(
                    earlier
                        .workers
                        .iter()
                        .find(|o| o.label == w.label)
                        .map_or(0, |o| o.requests),
                ),
            })
            .collect();
        Snapshot {
            ops,
            workers,
            ..self.clone()
        }
    }
}

/// One figure a filesystem gives about itself ([`Filesystem::counters`]):
/// requests it sent on, cache hits and misses, memory it holds.
///
/// [`Filesystem::counters`]: crate::fs::Filesystem::counters
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct FsCounter {
    /// Dotted, the first part a group: "sftp.READ", "pages.hits".
    pub name: String,
    /// A count or a level (bytes held), as the name says.
    pub value: u64,
}

impl FsCounter {
    /// `name` (dotted: "group.item") at `value`.
    pub fn new(name: impl Into<String>, value: u64) -> FsCounter {
        FsCounter {
            name: name.into(),
            value,
        }
    }
}

/// Counters as lines of text, one per group in the order first seen:
/// `sftp: READ 12, WRITE 3`.
pub fn counter_lines(counters: &[FsCounter]) -> Vec<String> {
    let mut groups: Vec<(&str, Vec<String>)> = Vec::new();
    for c in counters {
        let (group, name) = c.name.split_once('.').unwrap_or(("", &c.name));
        let item = format!("{name} {}", c.value);
        match groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, items)) => items.push(item),
            None => groups.push((group, vec![item])),
        }
    }
    groups
        .into_iter()
        .map(|(g, items)| match g {
            "" => items.join(", "),
            g => format!("{g}: {}", items.join(", ")),
        })
        .collect()
}

/// How many requests one worker (or io_uring queue) served.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct WorkerTotal {
    /// The worker's or queue's label ("dev/0", "uring/q1").
    pub label: String,
    /// Requests it served.
    pub requests: u64,
}

impl WorkerStats {
    /// How many requests this worker served, under its label.
    pub fn total(&self) -> WorkerTotal {
        WorkerTotal {
            label: self.label.clone(),
            requests: self
                .ops
                .iter()
                .map(|c| c.count.load(Ordering::Relaxed))
                .sum(),
        }
    }
}

/// Add `base` (what earlier server generations of a supervised mount
/// served) into `ops`, keeping them in opcode order.
pub fn add_ops(ops: &mut Vec<OpSnapshot>, base: &[OpSnapshot]) {
    for b in base {
        match ops.iter_mut().find(|o| o.opcode == b.opcode) {
            Some(o) => {
                o.count += b.count;
                o.errors += b.errors;
                o.total_ns += b.total_ns;
                if o.bins.len() < b.bins.len() {
                    o.bins.resize(b.bins.len(), 0);
                }
                for (x, y) in o.bins.iter_mut().zip(&b.bins) {
                    *x += y;
                }
            }
            None => ops.push(b.clone()),
        }
    }
    ops.sort_by_key(|o| o.opcode);
}

/// Sum the workers' tables into per-type totals (types never seen are left out).
pub fn collect(workers: &[std::sync::Arc<WorkerStats>]) -> Vec<OpSnapshot> {
    let mut out = Vec::new();
    for idx in 0..Opcode::TABLE_LEN {
        let mut s = OpSnapshot {
            opcode: idx as u32,
            bins: vec![0; BINS],
            ..Default::default()
        };
        for w in workers {
            let c = &w.ops[idx];
            s.errors += c.errors.load(Ordering::Relaxed);
            s.total_ns += c.total_ns.load(Ordering::Relaxed);
            for (b, a) in s.bins.iter_mut().zip(&c.bins) {
                *b += a.load(Ordering::Relaxed);
            }
        }
        // The count is the bins' sum, not the count counter read a moment
        // earlier: a request recorded between the two reads would leave a
        // snapshot whose histogram disagrees with its count.
        s.count = s.bins.iter().sum();
        if s.count > 0 {
            s.name = if idx == 0 {
                "UNKNOWN".into()
            } else {
                Opcode(idx as u32).name().into()
            };
            out.push(s);
        }
    }
    out
}

/// Requests in flight and answered later, for `fusebox stats`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LaterTotals {
    /// Requests read and not yet answered: being served plus pending.
    pub in_flight: u64,
    /// The most in flight at once (sampled whenever a token is taken).
    pub in_flight_peak: u64,
    /// Taken for later and not answered yet.
    pub pending: u64,
    /// Taken for later since the mount.
    pub taken: u64,
    /// Tokens dropped without an answer (each answered EIO).
    pub dropped: u64,
    /// Answers of the wrong kind for their request (each answered EIO).
    pub mismatched: u64,
}

/// The recovery counters, as `fusebox stats` shows them.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecoveryTotals {
    /// 1 for the first server, one more for each restart or upgrade.
    pub generation: u64,
    /// Servers started again after one died.
    pub restarts: u64,
    /// Resent requests answered from the journal or found already applied.
    pub replays: u64,
    /// From a server's death (or an upgrade's start) to the next serving.
    pub last_pause_us: u64,
    /// Nodes the kernel holds references to, as recorded.
    pub nodes: u64,
    /// Why the mount is no longer served, if it is not.
    pub status: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn bins_follow_the_log2_layout() {
        assert_eq!(bin_for(0), 0);
        assert_eq!(bin_for(3), 0);
        assert_eq!(bin_for(4), 1); // 2^2..2^3
        assert_eq!(bin_for(7), 1);
        assert_eq!(bin_for(1000), 8); // 2^9 = 512 <= 1000 < 1024
        assert_eq!(bin_for(u64::MAX), BINS - 1);
    }

    #[test]
    fn counters_print_by_group_in_the_order_given() {
        let c = [
            FsCounter::new("sftp.READ", 12),
            FsCounter::new("pages.hits", 5),
            FsCounter::new("sftp.WRITE", 3),
            FsCounter::new("connections", 1),
        ];
        assert_eq!(
            counter_lines(&c),
            ["sftp: READ 12, WRITE 3", "pages: hits 5", "connections 1"]
        );
    }

    #[test]
    fn workers_are_summed_per_type() {
        let a = Arc::new(WorkerStats::new("a"));
        let b = Arc::new(WorkerStats::new("b"));
        a.record(Opcode::LOOKUP, Duration::from_nanos(1000), false);
        b.record(Opcode::LOOKUP, Duration::from_nanos(3000), true);
        b.record(Opcode(9999), Duration::from_nanos(10), false);
        let s = collect(&[a, b]);
        let lookup = s.iter().find(|o| o.name == "LOOKUP").unwrap();
        assert_eq!((lookup.count, lookup.errors, lookup.total_ns), (2, 1, 4000));
        assert_eq!(lookup.bins[8] + lookup.bins[10], 2);
        assert_eq!(lookup.quantile_ns(0.5), 1 << 10);
        assert!(s.iter().any(|o| o.name == "UNKNOWN"));
    }
}
