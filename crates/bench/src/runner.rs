//! Orchestration: subjects x workloads x repetitions, interleaved.

use std::path::{Path, PathBuf};
use std::time::Duration;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};

use crate::engine;
use crate::peers::{LibfuseMode, LibfuseSource};
use crate::results::*;
use crate::subject::{Fusebox, Native, Subject};
use crate::workload::{self, Target, Workload};

/// Where the backing directory lives.
#[derive(Clone, Debug)]
pub enum Backing {
    /// A tmpfs mounted for the run: on a memory backend the framework's own
    /// cost shows (the default).
    Tmpfs,
    /// A directory on a real filesystem (e.g. ext4 on the disk).
    Dir(PathBuf),
}

pub struct BenchOptions {
    pub suite: String,
    /// Where builds and mountpoints go (kept between runs: peer builds are cached).
    pub workdir: PathBuf,
    pub backing: Backing,
    pub repetitions: Option<u32>,
    /// Only workloads whose name contains one of these comma-separated
    /// words.
    pub filter: Option<String>,
    /// Build and run the peers (libfuse, fuser, go-fuse).
    pub peers: bool,
    /// A libfuse source tree (3.19 / master) to build passthrough_hp from,
    /// for the libfuse io_uring peers; without one they are listed as
    /// unavailable.
    pub libfuse_src: Option<PathBuf>,
    /// The `fusebox` binary that serves fusebox subjects.
    pub fusebox_bin: PathBuf,
    /// Another fusebox build whose subjects run beside this one's, named
    /// with a `-base` suffix (a change shown against the code before it,
    /// in the same run).
    pub baseline_bin: Option<PathBuf>,
    pub progress: bool,
}

/// A subject and whether it could be prepared.
struct Prepared {
    subject: Box<dyn Subject>,
    info: SubjectInfo,
}

fn prepare(mut s: Box<dyn Subject>, workdir: &Path) -> Prepared {
    let mut info = s.info();
    if let Err(e) = s.prepare(workdir) {
        info.unavailable = Some(format!("{e:#}"));
    }
    Prepared { subject: s, info }
}

fn fusebox_subject(
    bin: &Path,
    name: &str,
    desc: &str,
    fs: &str,
    args: &[&str],
    source: bool,
) -> Box<dyn Subject> {
    Box::new(Fusebox {
        name: name.into(),
        description: desc.into(),
        matches: None,
        fs: fs.into(),
        args: args.iter().map(|s| s.to_string()).collect(),
        takes_source: source,
        needs_uring: args.contains(&"uring"),
        binary: bin.to_path_buf(),
        baseline: false,
    })
}

/// A stackfs subject of the peer suite, configured like the peer subject
/// `matches`: (name, description, `fusebox mount` arguments, matched peer).
type PeerSpec = (
    &'static str,
    &'static str,
    &'static [&'static str],
    LibfuseMode,
);

/// The peer suite's fusebox subjects over the backing directory. "hp" is
/// configured as passthrough_hp runs by default (a day of entry, attribute
/// and negative caching, the writeback cache; with passthrough, no
/// writeback, which the kernel refuses alongside it) with fusebox's own
/// serving defaults; "plain" serves the way libfuse does (threads of the
/// normal policy blocking in io_uring_enter, no polling), which isolates
/// the cost of the request loop itself (DESIGN.md, "Against libfuse's
/// io_uring").
const PEER_SUBJECTS: &[PeerSpec] = &[
    (
        "fusebox-uring-hp",
        "fusebox stackfs, io_uring, caching as passthrough_hp's default (--exclusive -o writeback_cache), fusebox's serving defaults (adaptive thread policy and polling)",
        &["--transport", "uring", "--exclusive", "-o", "allow_other,writeback_cache"],
        LibfuseMode::Uring,
    ),
    (
        "fusebox-uring-hp-plain",
        "the same served as libfuse serves: normal thread policy, no polling (--thread-policy normal --poll off)",
        &[
            "--transport", "uring", "--exclusive", "--thread-policy", "normal", "--poll", "off",
            "-o", "allow_other,writeback_cache",
        ],
        LibfuseMode::Uring,
    ),
    (
        "fusebox-uring-hp-pt",
        "fusebox stackfs, io_uring + passthrough, caching as passthrough_hp's (--exclusive), serving defaults",
        &["--transport", "uring", "--exclusive", "-o", "allow_other,passthrough"],
        LibfuseMode::UringPassthrough,
    ),
    (
        "fusebox-uring-nocache",
        "fusebox stackfs, io_uring, no caching as passthrough_hp --nocache (entry/attr/negative timeouts 0), serving defaults",
        &[
            "--transport", "uring",
            "-o", "allow_other,entry_timeout=0,attr_timeout=0,negative_timeout=0",
        ],
        LibfuseMode::UringNoCache,
    ),
];

/// The round-trip row's subjects: attributes never cached, so every stat
/// is one GETATTR the daemon answers with one fstat.
const PEER_NOCACHE_SUBJECTS: &[PeerSpec] = &[
    PEER_SUBJECTS[3],
    (
        "fusebox-uring-nocache-plain",
        "the same served as libfuse serves: normal thread policy, no polling",
        &[
            "--transport",
            "uring",
            "--thread-policy",
            "normal",
            "--poll",
            "off",
            "-o",
            "allow_other,entry_timeout=0,attr_timeout=0,negative_timeout=0",
        ],
        LibfuseMode::UringNoCache,
    ),
];

fn peer_subjects(o: &BenchOptions, specs: &[PeerSpec]) -> Vec<Box<dyn Subject>> {
    let mut v: Vec<Box<dyn Subject>> = vec![Box::new(Native)];
    let mut modes: Vec<LibfuseMode> = specs.iter().map(|s| s.3).collect();
    modes.dedup();
    if o.peers {
        for mode in modes {
            v.push(Box::new(LibfuseSource::new(o.libfuse_src.as_deref(), mode)));
        }
    }
    for (name, desc, args, peer) in specs {
        v.push(Box::new(Fusebox {
            name: (*name).into(),
            description: (*desc).into(),
            matches: Some(peer.subject_name().into()),
            fs: "stackfs".into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            takes_source: true,
            needs_uring: true,
            binary: o.fusebox_bin.clone(),
            baseline: false,
        }));
    }
    v
}

/// The fusebox stackfs subjects of backing-directory workloads:
/// (name, description, `fusebox mount` arguments).
const STACKFS_SUBJECTS: &[(&str, &str, &[&str])] = &[
    (
        "fusebox",
        "fusebox stackfs, classic /dev/fuse transport",
        &["--transport", "classic", "-o", "allow_other"],
    ),
    (
        "fusebox-uring",
        "fusebox stackfs, FUSE-over-io_uring",
        &["--transport", "uring", "-o", "allow_other"],
    ),
    (
        "fusebox-uring-idle",
        "fusebox stackfs, FUSE-over-io_uring, queue threads SCHED_IDLE (--thread-policy idle)",
        &["--transport", "uring", "--thread-policy", "idle", "-o", "allow_other"],
    ),
    (
        "fusebox-uring-2x1",
        "fusebox stackfs, FUSE-over-io_uring, two threads of one entry per queue (--queue-threads 2 --queue-depth 1)",
        &[
            "--transport", "uring", "--queue-threads", "2", "--queue-depth", "1",
            "-o", "allow_other",
        ],
    ),
    (
        "fusebox-uring-pt",
        "fusebox stackfs, io_uring + passthrough",
        &["--transport", "uring", "-o", "allow_other,passthrough"],
    ),
    // passthrough_hp's defaults: the source belongs to the mount, so names,
    // attributes and negatives are cached for a day.
    (
        "fusebox-uring-cached",
        "fusebox stackfs --exclusive (a day of entry/attr/negative caching) + writeback cache, io_uring, SCHED_IDLE queue threads",
        &[
            "--transport", "uring", "--thread-policy", "idle", "--exclusive",
            "-o", "allow_other,writeback_cache",
        ],
    ),
    (
        "fusebox-uring-cached-pt",
        "fusebox stackfs --exclusive + passthrough, io_uring, SCHED_IDLE queue threads",
        &[
            "--transport", "uring", "--thread-policy", "idle", "--exclusive",
            "-o", "allow_other,passthrough",
        ],
    ),
];

fn backing_subjects(o: &BenchOptions) -> Vec<Box<dyn Subject>> {
    let mut v: Vec<Box<dyn Subject>> = vec![Box::new(Native)];
    if o.peers {
        v.extend(crate::peers::all(o.libfuse_src.as_deref()));
    }
    for (name, desc, args) in STACKFS_SUBJECTS {
        v.push(fusebox_subject(
            &o.fusebox_bin,
            name,
            desc,
            "stackfs",
            args,
            true,
        ));
    }
    v
}

/// stackfs over io_uring with one round-trip setting changed at a time:
/// (name, what changes, extra `fusebox mount` arguments).
const KNOBS: &[(&str, &str, &[&str])] = &[
    (
        "defaults",
        "defaults: 1 s entry/attr timeouts, no negative caching, FOPEN_NOFLUSH, handle_killpriv_v2, readdirplus auto, max_write 1 MiB, O_TRUNC by SETATTR, adaptive thread policy, adaptive polling",
        &[],
    ),
    ("flush", "FLUSH sent on every close (-o flush)", &["-o", "flush"]),
    (
        "no-killpriv",
        "without handle_killpriv_v2 (-o no_handle_killpriv_v2)",
        &["-o", "no_handle_killpriv_v2"],
    ),
    (
        "negative",
        "negative lookups cached for a day (-o negative_timeout=86400)",
        &["-o", "negative_timeout=86400"],
    ),
    (
        "exclusive",
        "names, attributes and negatives cached for a day (--exclusive)",
        &["--exclusive"],
    ),
    (
        "writeback",
        "--exclusive plus the writeback cache (-o writeback_cache)",
        &["--exclusive", "-o", "writeback_cache"],
    ),
    (
        "no-readdirplus",
        "plain READDIR, a LOOKUP per entry (-o readdirplus=no)",
        &["-o", "readdirplus=no"],
    ),
    (
        "atomic-o-trunc",
        "O_TRUNC carried inside OPEN (-o atomic_o_trunc; off by default, see DESIGN.md)",
        &["-o", "atomic_o_trunc"],
    ),
    (
        "max-write-128k",
        "writes of at most 128 KiB (-o max_write=131072)",
        &["-o", "max_write=131072"],
    ),
    (
        "policy-normal",
        "serving threads of the normal policy, never SCHED_IDLE (--thread-policy normal)",
        &["--thread-policy", "normal"],
    ),
    (
        "poll-off",
        "queue threads block in io_uring_enter at once, no polling (--poll off)",
        &["--poll", "off"],
    ),
    (
        "readahead-1m",
        "a 1 MiB readahead window instead of the kernel's 128 KiB (-o max_readahead=1048576, set through sysfs)",
        &["-o", "max_readahead=1048576"],
    ),
];

fn knob_subjects(o: &BenchOptions) -> Vec<Box<dyn Subject>> {
    let mut v: Vec<Box<dyn Subject>> = vec![Box::new(Native)];
    for (knob, desc, extra) in KNOBS {
        let mut args = vec!["--transport", "uring", "-o", "allow_other"];
        args.extend_from_slice(extra);
        v.push(fusebox_subject(
            &o.fusebox_bin,
            &format!("knob-{knob}"),
            &format!("fusebox stackfs, io_uring; {desc}"),
            "stackfs",
            &args,
            true,
        ));
    }
    v
}

fn nullfs_subjects(o: &BenchOptions) -> Vec<Box<dyn Subject>> {
    let b = &o.fusebox_bin;
    vec![
        Box::new(Native),
        fusebox_subject(
            b,
            "fusebox-nullfs",
            "fusebox nullfs, classic, attr timeout 0",
            "nullfs",
            &[
                "--transport",
                "classic",
                "-o",
                "attr_timeout=0,entry_timeout=0",
            ],
            false,
        ),
        fusebox_subject(
            b,
            "fusebox-nullfs-uring",
            "fusebox nullfs, io_uring, attr timeout 0",
            "nullfs",
            &[
                "--transport",
                "uring",
                "-o",
                "attr_timeout=0,entry_timeout=0",
            ],
            false,
        ),
        fusebox_subject(
            b,
            "fusebox-nullfs-uring-adaptive",
            "fusebox nullfs, io_uring, adaptive polling",
            "nullfs",
            &[
                "--transport",
                "uring",
                "--poll",
                "adaptive",
                "-o",
                "attr_timeout=0,entry_timeout=0",
            ],
            false,
        ),
        // The same two with SCHED_IDLE serving threads: a caller woken by
        // a reply then stays on its CPU (DESIGN.md, "Where a woken
        // application runs").
        fusebox_subject(
            b,
            "fusebox-nullfs-idle",
            "fusebox nullfs, classic, SCHED_IDLE workers",
            "nullfs",
            &[
                "--transport",
                "classic",
                "--thread-policy",
                "idle",
                "-o",
                "attr_timeout=0,entry_timeout=0",
            ],
            false,
        ),
        fusebox_subject(
            b,
            "fusebox-nullfs-uring-adaptive-idle",
            "fusebox nullfs, io_uring, adaptive polling, SCHED_IDLE queue threads",
            "nullfs",
            &[
                "--transport",
                "uring",
                "--poll",
                "adaptive",
                "--thread-policy",
                "idle",
                "-o",
                "attr_timeout=0,entry_timeout=0",
            ],
            false,
        ),
    ]
}

fn timingfs_subjects(o: &BenchOptions, profile: &str) -> Vec<Box<dyn Subject>> {
    let b = &o.fusebox_bin;
    let common = ["--profile", profile, "--files", "1", "--size", "256M"];
    let with = |t: &'static str| -> Vec<&str> {
        common.iter().copied().chain(["--transport", t]).collect()
    };
    vec![
        fusebox_subject(
            b,
            &format!("timingfs-{profile}"),
            &format!("fusebox timingfs {profile}, classic"),
            "timingfs",
            &with("classic"),
            false,
        ),
        fusebox_subject(
            b,
            &format!("timingfs-{profile}-uring"),
            &format!("fusebox timingfs {profile}, io_uring"),
            "timingfs",
            &with("uring"),
            false,
        ),
    ]
}

/// timingfs with `latency_ms` on every request, per transport and per way
/// of waiting: `block` (the handler holds its thread: 2 classic workers or
/// 2 queue threads, one per CPU), `token` (a reply token answered by a
/// timer thread) and `async` (a tokio task). Enough queue entries and
/// background requests for 256 in flight (io_uring routes a request to the
/// caller's CPU's queue, so one queue may get most of them). Attributes
/// are cached for an hour and atime is off: otherwise the kernel checks
/// the file's size (a GETATTR, 5 ms here) before reads now and then, and
/// the libaio job's io_submit waits for it.
/// Supervised stackfs and pathfs (the default for `fusebox mount`), over
/// classic /dev/fuse and over io_uring (the supervisor holds the rings:
/// DESIGN.md, "Recovery over io_uring").
fn recovery_subjects(o: &BenchOptions) -> Vec<Box<dyn Subject>> {
    vec![
        fusebox_subject(
            &o.fusebox_bin,
            "recovery-classic",
            "fusebox stackfs under its supervisor, classic /dev/fuse",
            "stackfs",
            &["--transport", "classic", "--max-restarts", "1000000"],
            true,
        ),
        fusebox_subject(
            &o.fusebox_bin,
            "recovery-pathfs",
            "fusebox pathfs (the path-level API) under its supervisor, classic /dev/fuse",
            "pathfs",
            &["--transport", "classic", "--max-restarts", "1000000"],
            true,
        ),
        fusebox_subject(
            &o.fusebox_bin,
            "recovery-uring",
            "fusebox stackfs under its supervisor, io_uring (rings the supervisor holds)",
            "stackfs",
            &["--transport", "uring", "--max-restarts", "1000000"],
            true,
        ),
        fusebox_subject(
            &o.fusebox_bin,
            "recovery-pathfs-uring",
            "fusebox pathfs under its supervisor, io_uring (rings the supervisor holds)",
            "pathfs",
            &["--transport", "uring", "--max-restarts", "1000000"],
            true,
        ),
    ]
}

/// Supervised and unsupervised stackfs and pathfs over both transports,
/// for what supervision costs when nothing fails.
fn supervision_subjects(o: &BenchOptions) -> Vec<Box<dyn Subject>> {
    let mut v: Vec<Box<dyn Subject>> = vec![Box::new(Native)];
    for fs in ["stackfs", "pathfs"] {
        for transport in ["classic", "uring"] {
            v.push(fusebox_subject(
                &o.fusebox_bin,
                &format!("{fs}-{transport}-supervised"),
                &format!("fusebox {fs}, {transport}, under its supervisor (the default)"),
                fs,
                &["--transport", transport],
                true,
            ));
            v.push(fusebox_subject(
                &o.fusebox_bin,
                &format!("{fs}-{transport}-unsupervised"),
                &format!("fusebox {fs}, {transport}, --no-recovery"),
                fs,
                &["--transport", transport, "--no-recovery"],
                true,
            ));
        }
    }
    v
}

fn later_subjects(o: &BenchOptions, latency_ms: u32) -> Vec<Box<dyn Subject>> {
    let b = &o.fusebox_bin;
    let latency = format!("{latency_ms}ms");
    let mut v = vec![];
    for transport in ["classic", "uring"] {
        for waiting in ["block", "token", "async"] {
            let args: Vec<String> = [
                "--profile",
                "pmem",
                "--files",
                "1",
                "--size",
                "64M",
                "--latency",
                &latency,
                "--waiting",
                waiting,
                "--transport",
                transport,
                "--threads",
                "2",
                "--queue-depth",
                "256",
                "-o",
                "max_background=1024,congestion_threshold=768,async_dio,attr_timeout=3600,entry_timeout=3600,noatime",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let t = if transport == "uring" {
                "io_uring"
            } else {
                "classic"
            };
            v.push(fusebox_subject(
                b,
                &format!("later-{waiting}-{transport}"),
                &format!("fusebox timingfs, {latency} per request, {waiting}, {t}"),
                "timingfs",
                &args,
                false,
            ));
        }
    }
    v
}

fn machine(backing: &str, round_trip: Option<RoundTrip>) -> Machine {
    let uname = rustix::system::uname();
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_default();
    let mem_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<f64>().ok())
        })
        .unwrap_or(0.0);
    let commit = std::process::Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "describe",
            "--always",
            "--dirty",
            "--abbrev=12",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    Machine {
        kernel: uname.release().to_string_lossy().into_owned(),
        cpu_model,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        memory_gib: (mem_kib / 1024.0 / 1024.0 * 10.0).round() / 10.0,
        backing: backing.into(),
        fusebox_commit: commit,
        round_trip,
    }
}

fn now_rfc3339() -> String {
    let out = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// A tmpfs for the backing directory, unmounted on drop.
struct TmpfsGuard(PathBuf);
impl Drop for TmpfsGuard {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(&self.0, rustix::mount::UnmountFlags::DETACH);
    }
}

fn drop_caches() {
    rustix::fs::sync();
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
}

fn merge_stats(into: &mut Option<fusebox::stats::Snapshot>, s: fusebox::stats::Snapshot) {
    match into {
        None => *into = Some(s),
        Some(acc) => {
            for op in s.ops {
                match acc.ops.iter_mut().find(|o| o.opcode == op.opcode) {
                    Some(a) => {
                        a.count += op.count;
                        a.errors += op.errors;
                        a.total_ns += op.total_ns;
                        for (x, y) in a.bins.iter_mut().zip(&op.bins) {
                            *x += y;
                        }
                    }
                    None => acc.ops.push(op),
                }
            }
        }
    }
}

pub fn run(o: &BenchOptions) -> Result<BenchResults> {
    let Some(suite) = workload::suite(&o.suite) else {
        bail!(
            "unknown suite {:?}; choose one of {}",
            o.suite,
            workload::SUITES.join(", ")
        );
    };
    let workloads: Vec<Workload> = suite
        .workloads
        .into_iter()
        .filter(|w| {
            o.filter.as_ref().is_none_or(|f| {
                f.split(',')
                    .filter(|part| !part.is_empty())
                    .any(|part| w.name.contains(part))
            })
        })
        .collect();
    if workloads.is_empty() {
        bail!("no workload of suite {} matches the filter", o.suite);
    }
    let reps = o.repetitions.unwrap_or(suite.repetitions).max(1);
    let started = now_rfc3339();
    // Before the workloads: a stuck probe then costs no results.
    let round_trip = crate::floor::measure(crate::floor::PER_BATCH)
        .inspect_err(|e| tracing::warn!(error = %format!("{e:#}"), "round-trip probe failed"))
        .ok();
    std::fs::create_dir_all(&o.workdir)
        .with_context(|| format!("creating {}", o.workdir.display()))?;
    let (backing, _tmpfs, backing_desc) = match &o.backing {
        Backing::Tmpfs => {
            let dir = o.workdir.join("backing");
            std::fs::create_dir_all(&dir)?;
            let _ = rustix::mount::unmount(&dir, rustix::mount::UnmountFlags::DETACH);
            rustix::mount::mount(
                "tmpfs",
                &dir,
                "tmpfs",
                rustix::mount::MountFlags::empty(),
                Some(c"size=8g,mode=0755"),
            )
            .with_context(|| format!("mounting a tmpfs at {} (needs root)", dir.display()))?;
            (dir.clone(), Some(TmpfsGuard(dir)), "tmpfs".to_string())
        }
        Backing::Dir(d) => {
            std::fs::create_dir_all(d)?;
            (d.clone(), None, format!("directory {}", d.display()))
        }
    };

    // Subjects per target, prepared once.
    let mut groups: Vec<(Target, Vec<Prepared>)> = vec![];
    for w in &workloads {
        if groups.iter().any(|(t, _)| *t == w.target) {
            continue;
        }
        let subjects = match &w.target {
            Target::Backing => backing_subjects(o),
            Target::Direct => crate::direct::subjects(&o.fusebox_bin, &o.suite),
            Target::Knobs => knob_subjects(o),
            Target::NullFs => nullfs_subjects(o),
            Target::TimingFs { profile } => timingfs_subjects(o, profile),
            Target::Peer => peer_subjects(o, PEER_SUBJECTS),
            Target::PeerNoCache => peer_subjects(o, PEER_NOCACHE_SUBJECTS),
            Target::Later { latency_ms } => later_subjects(o, *latency_ms),
            Target::Recovery => recovery_subjects(o),
            Target::Supervision => supervision_subjects(o),
            Target::Compat(program) => crate::compat::subjects(*program, &o.fusebox_bin),
            Target::Blk(driver) => crate::blk::subjects(*driver, &o.fusebox_bin),
            Target::Sftp { delay_ms } => crate::sftp::subjects(*delay_ms, &o.fusebox_bin),
            Target::Objfs => crate::objfs::subjects(&o.fusebox_bin),
        };
        let baseline: Vec<Box<dyn Subject>> = match &o.baseline_bin {
            Some(bin) => subjects
                .iter()
                .filter_map(|s| s.on_binary(bin, "-base"))
                .collect(),
            None => vec![],
        };
        let subjects: Vec<Box<dyn Subject>> = subjects.into_iter().chain(baseline).collect();
        groups.push((
            w.target.clone(),
            subjects
                .into_iter()
                .map(|s| prepare(s, &o.workdir))
                .collect(),
        ));
    }
    let subjects_of = |t: &Target| -> &Vec<Prepared> {
        &groups
            .iter()
            .find(|(g, _)| g == t)
            .expect("prepared above")
            .1
    };

    let total: u64 = workloads
        .iter()
        .map(|w| {
            subjects_of(&w.target)
                .iter()
                .filter(|p| p.info.unavailable.is_none() && p.subject.runs(w))
                .count() as u64
        })
        .sum::<u64>()
        * reps as u64;
    let bar = if o.progress {
        ProgressBar::new(total)
    } else {
        ProgressBar::hidden()
    };
    bar.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );

    let mut results: Vec<WorkloadResult> = workloads
        .iter()
        .map(|w| WorkloadResult {
            name: w.name.clone(),
            group: w.group.into(),
            description: w.description.clone(),
            unit: w.unit().into(),
            threads: w.threads(),
            per_subject: subjects_of(&w.target)
                .iter()
                .filter(|p| p.info.unavailable.is_none() && p.subject.runs(w))
                .map(|p| SubjectRuns {
                    subject: p.info.name.clone(),
                    ..Default::default()
                })
                .collect(),
        })
        .collect();

    for w in &workloads {
        if w.target.uses_backing() {
            engine::prepare_dataset(w, &backing)
                .with_context(|| format!("preparing the dataset of {}", w.name))?;
        }
    }
    // Ctrl-C or SIGTERM ends the run after the current measurement, so
    // what it set up (mounts, loop devices, servers, the tmpfs) is
    // removed on the way out instead of left behind.
    let interrupted = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, interrupted.clone())
            .context("installing the interrupt handler")?;
    }
    // Interleaved: every repetition runs every subject once per workload
    // (A B C A B C ...), so slow drifts of a shared machine hit all alike.
    for rep in 0..reps {
        for (wi, w) in workloads.iter().enumerate() {
            for p in subjects_of(&w.target)
                .iter()
                .filter(|p| p.info.unavailable.is_none() && p.subject.runs(w))
            {
                if interrupted.load(Ordering::Relaxed) {
                    bar.finish_and_clear();
                    bail!("interrupted; what the run had set up is removed");
                }
                bar.set_message(format!(
                    "rep {}/{reps} {} on {}",
                    rep + 1,
                    w.name,
                    p.info.name
                ));
                let runs = results[wi]
                    .per_subject
                    .iter_mut()
                    .find(|r| r.subject == p.info.name)
                    .expect("listed");
                match run_one(w, p, &backing, &o.workdir) {
                    Ok(RunOutput {
                        sample,
                        daemon_cpu,
                        daemon_ctx_switches,
                        daemon_peak_rss,
                        stats,
                        counters,
                    }) => {
                        if let Some(b) = daemon_peak_rss {
                            runs.daemon_peak_rss_mib.push(b as f64 / (1024.0 * 1024.0));
                        }
                        for (k, v) in counters {
                            runs.requests.entry(k).or_default().push(v);
                        }
                        runs.values.push(sample.value);
                        runs.workload_cpu_s.push(sample.workload_cpu_s);
                        if let Some(c) = daemon_cpu {
                            runs.daemon_cpu_s.push(c);
                        }
                        if let Some(n) = sample.ops {
                            runs.ops.push(n);
                        }
                        if let Some(n) = daemon_ctx_switches {
                            runs.daemon_ctx_switches.push(n);
                        }
                        if let Some(s) = stats {
                            merge_stats(&mut runs.stats, s);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(workload = %w.name, subject = %p.info.name, error = %format!("{e:#}"), "run failed");
                        runs.error = Some(format!("{e:#}"));
                    }
                }
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();

    let mut subjects: Vec<SubjectInfo> = vec![];
    for (_, ps) in &groups {
        for p in ps {
            if !subjects.iter().any(|s| s.name == p.info.name) {
                subjects.push(p.info.clone());
            }
        }
    }
    Ok(BenchResults {
        schema: SCHEMA,
        suite: suite.name.into(),
        suite_version: suite.version,
        started,
        machine: machine(&backing_desc, round_trip),
        repetitions: reps,
        subjects,
        workloads: results,
    })
}

/// What one repetition of one workload on one subject measured.
struct RunOutput {
    sample: engine::Sample,
    daemon_cpu: Option<f64>,
    daemon_ctx_switches: Option<f64>,
    daemon_peak_rss: Option<u64>,
    stats: Option<fusebox::stats::Snapshot>,
    /// What the subject's counters grew by during the run.
    counters: std::collections::BTreeMap<String, f64>,
}

fn run_one(w: &Workload, p: &Prepared, backing: &Path, workdir: &Path) -> Result<RunOutput> {
    let dataset_paths = engine::dataset_paths(w, backing);
    if w.target.uses_backing() {
        // Workloads that consume their dataset (files-del) need it back
        // before every run; existing files are kept, so this is cheap.
        engine::prepare_dataset(w, backing)?;
        p.subject
            .before_run(backing, &dataset_paths)
            .with_context(|| {
                format!("bringing {}'s copy of the dataset up to date", p.info.name)
            })?;
    }
    let mnt = workdir.join(format!("mnt-{}", p.info.name));
    // A bench killed midway leaves its mounts (a dead one makes every
    // look at the mountpoint fail): the work dir is ours, so they go.
    let _ = rustix::mount::unmount(&mnt, rustix::mount::UnmountFlags::DETACH);
    std::fs::create_dir_all(&mnt)
        .with_context(|| format!("making the mountpoint {}", mnt.display()))?;
    let mounted = p
        .subject
        .mount(backing, &mnt)
        .with_context(|| format!("mounting {}", p.info.name))?;
    if mounted.direct.is_none() && mounted.runner.is_none() {
        engine::populate(w, &mounted.dir)
            .with_context(|| format!("populating {} for {}", p.info.name, w.name))?;
    }
    if w.drop_caches {
        drop_caches();
    }
    let fetch_stats = || {
        mounted
            .fusebox_mount
            .as_ref()
            .and_then(|m| fusebox::stats::fetch(m).ok())
    };
    // Only the measured phase: not the mount's INIT nor the population.
    let stats0 = fetch_stats();
    let counters0 = mounted.counters.as_ref().map(|c| c());
    let cpu0 = mounted.daemon_cpu_seconds();
    let switches0 = mounted.daemon_ctx_switches();
    let sample = match (&mounted.direct, &mounted.runner) {
        // Set-up and run in a direct-mode process of their own.
        (Some(launch), _) => crate::direct::run(launch, &w.name, &mounted.dir),
        (None, Some(run)) => {
            let dataset = dataset_paths[0]
                .strip_prefix(backing)
                .map(Path::to_path_buf)
                .unwrap_or_default();
            run(w, &dataset)
        }
        (None, None) => engine::run(w, &mounted.dir),
    };
    // A replaced server takes its CPU time and switches with it: no cost
    // per operation for those workloads.
    let replaced = matches!(
        w.kind,
        workload::Kind::Replacement { .. } | workload::Kind::ReplaceSoak { .. }
    );
    let daemon_cpu = match (cpu0, mounted.daemon_cpu_seconds()) {
        (Some(a), Some(b)) if !replaced => Some(b - a),
        _ => None,
    };
    let daemon_ctx_switches = match (switches0, mounted.daemon_ctx_switches()) {
        (Some(a), Some(b)) if !replaced => Some(b.saturating_sub(a) as f64),
        _ => None,
    };
    let daemon_peak_rss = mounted.daemon_peak_rss();
    let stats = match (fetch_stats(), stats0) {
        (Some(after), Some(before)) => Some(after.since(&before)),
        (after, _) => after,
    };
    let mut counters = std::collections::BTreeMap::new();
    if let (Some(read), Some(before)) = (&mounted.counters, counters0) {
        // Counters written by other processes now and then (every 100 ms):
        // give the last ones time to land.
        std::thread::sleep(Duration::from_millis(250));
        for (k, v) in read() {
            let d = v - before.get(&k).copied().unwrap_or(0.0);
            if d > 0.0 {
                counters.insert(k, d);
            }
        }
    }
    drop(mounted);
    // Give a lazily unmounted daemon's last requests time to land before
    // the backing directory is reset.
    std::thread::sleep(Duration::from_millis(20));
    if w.target.uses_backing() {
        engine::reset_after(w, backing)?;
    }
    Ok(RunOutput {
        sample: sample?,
        daemon_cpu,
        daemon_ctx_switches,
        daemon_peak_rss,
        stats,
        counters,
    })
}
