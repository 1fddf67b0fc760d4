//! Workload definitions and the named, versioned suites.
//!
//! Scaled to a 2-core machine and seconds per run, keeping each paper's
//! shape (operation mix, I/O size, thread count, file count). Names are
//! stable: a result is only comparable with the same suite name and version.

use std::time::Duration;

/// What kind of filesystem a workload runs on.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    /// Every passthrough subject over the shared backing directory
    /// (native, peers, fusebox stackfs variants).
    Backing,
    /// stackfs over the backing directory through the kernel (both
    /// transports) and in direct mode (`fusebox run --fs`, the workload
    /// inside the process that serves it), against native.
    Direct,
    /// fusebox's nullfs (framework cost only), per transport; native
    /// tmpfs as the baseline.
    NullFs,
    /// fusebox's timingfs with a latency profile, per transport.
    TimingFs { profile: &'static str },
    /// fusebox stackfs over the backing directory with one round-trip
    /// setting changed at a time, against native and the defaults.
    Knobs,
    /// libfuse's io_uring mode (passthrough_hp) and fusebox configured
    /// like it, over the backing directory.
    Peer,
    /// The same with no attribute caching, for the GETATTR round trip.
    PeerNoCache,
    /// timingfs with a latency on every request, waited out by blocking,
    /// by a reply token or by the async API, per transport.
    Later { latency_ms: u32 },
    /// Supervised stackfs over the backing directory, whose server is
    /// replaced while a probe runs.
    Recovery,
    /// What supervision costs while nothing fails: stackfs and pathfs
    /// over classic /dev/fuse, supervised (the default) and with
    /// `--no-recovery`.
    Supervision,
    /// An unchanged Debian libfuse 3 program over the backing directory,
    /// on Debian's libfuse3 and on fusebox's drop-in (per transport).
    Compat(CompatProgram),
    /// A block device with this driver: fusebox's `blk` beside a loop
    /// device over tmpfs, nbdkit through nbdfuse and qemu-storage-daemon's
    /// FUSE export. Fio runs on the device itself.
    Blk(BlkDriver),
    /// The backing directory over SFTP from an OpenSSH server on loopback,
    /// through a proxy adding `delay_ms` of round trip: Debian's sshfs,
    /// rclone mount and sftpfs (kernel path and direct mode).
    Sftp { delay_ms: u32 },
    /// An S3 bucket on a three-node Garage cluster (replication factor 3)
    /// on loopback, mirroring what each workload reads from the backing
    /// directory: objfs beside s3fs and rclone mount, and the bench's own
    /// S3 client as the limit where a workload is plain transfers.
    Objfs,
}

/// The drivers the blk suite compares.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BlkDriver {
    /// Reads zeros, drops writes: the cost of the path alone.
    Null,
    /// Memory.
    Ram,
}

/// The Debian programs the compat suite runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CompatProgram {
    /// sshfs against an OpenSSH server on loopback, serving the backing
    /// directory.
    Sshfs,
    /// squashfuse over a squashfs image of the backing directory.
    Squashfuse,
    /// fuse-overlayfs with the backing directory as its lower layer.
    Overlay,
}

impl Target {
    /// Whether the workload runs in the shared backing directory (datasets
    /// laid out there, reset after each run).
    pub fn uses_backing(&self) -> bool {
        matches!(
            self,
            Target::Backing
                | Target::Direct
                | Target::Knobs
                | Target::Peer
                | Target::PeerNoCache
                | Target::Recovery
                | Target::Supervision
                | Target::Compat(_)
                | Target::Sftp { .. }
                | Target::Objfs
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FioRw {
    RandRead,
    RandWrite,
    SeqRead,
    SeqWrite,
}

impl FioRw {
    pub fn fio_name(self) -> &'static str {
        match self {
            FioRw::RandRead => "randread",
            FioRw::RandWrite => "randwrite",
            FioRw::SeqRead => "read",
            FioRw::SeqWrite => "write",
        }
    }
    pub fn is_read(self) -> bool {
        matches!(self, FioRw::RandRead | FioRw::SeqRead)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Fio {
    pub rw: FioRw,
    pub bs: u64,
    pub threads: u32,
    /// One file shared by all threads, or one file per thread.
    pub file_per_thread: bool,
    /// Bytes per file.
    pub size: u64,
    pub direct: bool,
    pub fsync_at_end: bool,
    pub fdatasync_every_write: bool,
    pub runtime: Duration,
    /// libaio with this many I/Os in flight per job, instead of psync.
    pub async_depth: Option<u32>,
    /// Once through each file (`runtime` only a limit), the rate over the
    /// whole fio run, end fsync included; else fio loops for `runtime`.
    /// For network filesystems, whose second pass would be a cache's.
    pub once: bool,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FilesPhase {
    Create,
    Stat,
    Read,
    Delete,
    /// stat of names that do not exist, each of 1,000 names looked up
    /// `count / 1000` times (a search path, an import system).
    StatMissing,
    /// `ls -l`: list the directory, then lstat every entry.
    ListStat,
    /// Overwrite existing files: open O_WRONLY|O_TRUNC (no O_CREAT), one
    /// write, close.
    Rewrite,
    /// Replace existing files the way editors and build tools do: write
    /// the new contents to `NAME.tmp`, fsync, rename over `NAME`.
    RenameIntoPlace,
}

/// Where the files a stat, read or delete phase works on come from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FilesDataset {
    /// Laid out on the backing directory before the mount: the phase starts
    /// with cold kernel caches (Vangoor's method).
    Backing,
    /// Created through the mount just before the timed phase, on the same
    /// mount: what the kernel remembers of the creation is what an
    /// application that just made the files gets (the fastpath targets'
    /// "stat of just-created files").
    JustCreated,
}

/// Vangoor's files-cr/rd/del: many small files.
#[derive(Clone, Debug, PartialEq)]
pub struct Files {
    pub phase: FilesPhase,
    pub count: u32,
    pub threads: u32,
    pub file_size: u64,
    pub dataset: FilesDataset,
}

/// FxMark metadata micro-benchmarks as RFUSE ran them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FxMark {
    /// Create empty files, each thread in its own directory.
    Mwcl,
    /// Create empty files, all threads in one directory.
    Mwcm,
    /// List a directory, each thread its own.
    Mrdl,
    /// List one shared directory.
    Mrdm,
    /// Unlink files, each thread in its own directory.
    Mwul,
    /// Unlink files in one shared directory.
    Mwum,
    /// Resolve (open+close) paths of private files.
    Mrpl,
    /// Resolve paths of files in a shared directory.
    Mrpm,
    /// Resolve the same path from every thread.
    Mrph,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LatencyOp {
    /// open(O_CREAT)+close of a new name.
    Create,
    /// stat of the root (attr timeout 0: a GETATTR each time).
    Getattr,
}

/// filebench personalities, implemented from their definitions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Personality {
    Fileserver,
    Webserver,
    Varmail,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    Fio(Fio),
    Files(Files),
    FxMark {
        bench: FxMark,
        threads: u32,
        runtime: Duration,
    },
    Latency {
        op: LatencyOp,
        count: u32,
    },
    Macro {
        personality: Personality,
        threads: u32,
        files: u32,
        runtime: Duration,
    },
    /// Real programs over a source tree (made into an archive at the
    /// backing directory's root).
    Tree {
        op: TreeOp,
        runs: u32,
        source: TreeSource,
    },
    /// `reads` reads of `size` bytes from one file of `file_size`, each
    /// starting `step` bytes after the last (the Prefuse thesis's read
    /// experiment): the time for all of them.
    ReadSteps {
        reads: u32,
        size: u64,
        step: u64,
        file_size: u64,
    },
    /// The longest a probe waits while the server is replaced once, with
    /// `inodes` files known to the kernel (looked up through the mount).
    Replacement {
        how: Replacement,
        probe: Probe,
        inodes: u32,
    },
    /// `load` kept up while the server is replaced every `every` (SIGKILL
    /// and `fusebox upgrade` in turn) for `duration` (`soak`); any failed
    /// request or wrong byte fails the run.
    ReplaceSoak {
        duration: Duration,
        every: Duration,
        load: SoakLoad,
    },
}

/// What a replacement soak keeps doing while the server is replaced.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SoakLoad {
    /// Files of `file_bytes` copied in, each read back and compared once
    /// nothing waits to be stored: files closed per second.
    Copies { file_bytes: u64 },
    /// fio runs one after another, each 4 jobs of random 4 KiB writes
    /// then every block read back with its crc32c checked: 4 KiB writes
    /// verified per second.
    FioVerify,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TreeOp {
    /// `tar xf` of the archive into an empty directory: files per second.
    TarExtract,
    /// `git status` in a repository of the tree (made on the backing
    /// directory, its index refreshed through the mount before timing):
    /// runs per second.
    GitStatus,
    /// `ls -lR` of the tree laid out on the backing directory: entries per
    /// second.
    ListLong,
    /// `git clone --no-local` of a bare repository of the tree (laid out
    /// at the backing directory's root, so read through the subject) into
    /// the subject: files checked out per second.
    GitClone,
}

/// Which tree a `Tree` workload works on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum TreeSource {
    /// /usr/include: about 8,000 headers in 900 directories.
    UsrInclude,
    /// /usr/include/linux: about 760 headers (a smaller project).
    UsrIncludeLinux,
    /// `files` small files (1 to 8 KiB), 100 to a directory.
    Synthetic { files: u32 },
}

impl TreeSource {
    /// The directory archived (None for the synthetic tree, made here).
    pub fn path(self) -> Option<&'static str> {
        match self {
            TreeSource::UsrInclude => Some("/usr/include"),
            TreeSource::UsrIncludeLinux => Some("/usr/include/linux"),
            TreeSource::Synthetic { .. } => None,
        }
    }

    /// Its archive's name at the backing directory's root.
    pub fn archive(self) -> String {
        match self {
            TreeSource::UsrInclude => "tree-usr-include.tar".into(),
            TreeSource::UsrIncludeLinux => "tree-usr-include-linux.tar".into(),
            TreeSource::Synthetic { files } => format!("tree-synthetic-{files}.tar"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Replacement {
    /// SIGKILL of the serving process; the supervisor starts the next.
    Crash,
    /// `fusebox upgrade`.
    Upgrade,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Probe {
    /// statx with AT_STATX_FORCE_SYNC, round robin over the files: every
    /// call is a GETATTR, whatever the attribute cache holds.
    Stat,
    /// 4 KiB O_DIRECT preads of one file: every call is a READ.
    Read4k,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Workload {
    pub name: String,
    pub group: &'static str,
    pub description: String,
    pub target: Target,
    pub kind: Kind,
    /// Drop the kernel's caches before each repetition (Vangoor did).
    pub drop_caches: bool,
}

impl Workload {
    pub fn unit(&self) -> &'static str {
        match self.kind {
            Kind::Latency { .. } | Kind::Replacement { .. } | Kind::ReadSteps { .. } => "us",
            _ => "ops/s",
        }
    }

    pub fn threads(&self) -> Option<u32> {
        match &self.kind {
            Kind::Fio(f) => Some(f.threads),
            Kind::Files(f) => Some(f.threads),
            Kind::FxMark { threads, .. } | Kind::Macro { threads, .. } => Some(*threads),
            Kind::Tree { .. } | Kind::ReadSteps { .. } | Kind::ReplaceSoak { .. } => Some(1),
            Kind::Latency { .. } | Kind::Replacement { .. } => None,
        }
    }
}

const KIB: u64 = 1024;
const MIB: u64 = 1024 * 1024;

fn size_name(bs: u64) -> String {
    if bs >= MIB {
        format!("{}m", bs / MIB)
    } else {
        format!("{}k", bs / KIB)
    }
}

fn fio(group: &'static str, name: String, desc: String, f: Fio) -> Workload {
    Workload {
        name,
        group,
        description: desc,
        target: Target::Backing,
        kind: Kind::Fio(f),
        drop_caches: true,
    }
}

/// Vangoor et al.: rnd/seq read/write with 1 and 32 threads (scaled to 1
/// and 4), one file or a file per thread, at 4K..1M; files-cr/rd/del.
fn vangoor(scale: &Scale) -> Vec<Workload> {
    let mut w = vec![];
    let t = scale.runtime;
    for bs in [4 * KIB, 32 * KIB, 128 * KIB, MIB] {
        for (rw, th, per) in [
            (FioRw::RandRead, 1, false),
            (FioRw::RandRead, scale.many, false),
            (FioRw::RandWrite, 1, false),
            (FioRw::RandWrite, scale.many, false),
            (FioRw::SeqRead, 1, false),
            (FioRw::SeqRead, scale.many, false),
            (FioRw::SeqRead, scale.many, true),
            (FioRw::SeqWrite, 1, false),
            (FioRw::SeqWrite, scale.many, true),
        ] {
            let kind = match rw {
                FioRw::RandRead => "rnd-rd",
                FioRw::RandWrite => "rnd-wr",
                FioRw::SeqRead => "seq-rd",
                FioRw::SeqWrite => "seq-wr",
            };
            let files = if per { th } else { 1 };
            let name = format!("vangoor/{kind}-{th}th-{files}f-{}", size_name(bs));
            let desc = format!(
                "fio {} bs={} {th} thread(s), {files} file(s)",
                rw.fio_name(),
                size_name(bs)
            );
            w.push(fio(
                "vangoor",
                name,
                desc,
                Fio {
                    rw,
                    bs,
                    threads: th,
                    file_per_thread: per,
                    size: scale.file_size,
                    direct: false,
                    fsync_at_end: false,
                    fdatasync_every_write: false,
                    runtime: t,
                    async_depth: None,
                    once: false,
                },
            ));
        }
    }
    for (phase, label) in [
        (FilesPhase::Create, "cr"),
        (FilesPhase::Read, "rd"),
        (FilesPhase::Delete, "del"),
    ] {
        for th in [1, scale.many] {
            w.push(Workload {
                name: format!("vangoor/files-{label}-{th}th"),
                group: "vangoor",
                description: format!("{} files of 4 KiB, {th} thread(s)", scale.files),
                target: Target::Backing,
                kind: Kind::Files(Files {
                    phase,
                    count: scale.files,
                    threads: th,
                    file_size: 4 * KIB,
                    dataset: FilesDataset::Backing,
                }),
                drop_caches: true,
            });
        }
    }
    w
}

/// RFUSE: fio 128 KiB sequential (fsync at the end) and 4 KiB random
/// (fdatasync after each write) with a thread sweep; FxMark; NullFS latency.
fn rfuse(scale: &Scale) -> Vec<Workload> {
    let mut w = vec![];
    for th in &scale.sweep {
        let th = *th;
        for (rw, bs, label) in [
            (FioRw::SeqRead, 128 * KIB, "seq-rd-128k"),
            (FioRw::SeqWrite, 128 * KIB, "seq-wr-128k"),
            (FioRw::RandRead, 4 * KIB, "rnd-rd-4k"),
            (FioRw::RandWrite, 4 * KIB, "rnd-wr-4k"),
        ] {
            let random_write = rw == FioRw::RandWrite;
            w.push(fio(
                "rfuse",
                format!("rfuse/{label}-{th}th"),
                format!(
                    "fio {} bs={} {th} thread(s), file per thread{}",
                    rw.fio_name(),
                    size_name(bs),
                    if random_write {
                        ", fdatasync per write"
                    } else {
                        ""
                    }
                ),
                Fio {
                    rw,
                    bs,
                    threads: th,
                    file_per_thread: true,
                    size: scale.sweep_file_size,
                    direct: false,
                    fsync_at_end: rw == FioRw::SeqWrite,
                    fdatasync_every_write: random_write,
                    runtime: scale.runtime,
                    async_depth: None,
                    once: false,
                },
            ));
        }
    }
    use FxMark::*;
    for (b, label) in [
        (Mwcl, "MWCL"),
        (Mwcm, "MWCM"),
        (Mrdl, "MRDL"),
        (Mrdm, "MRDM"),
        (Mwul, "MWUL"),
        (Mwum, "MWUM"),
        (Mrpl, "MRPL"),
        (Mrpm, "MRPM"),
        (Mrph, "MRPH"),
    ] {
        for th in [1, scale.many] {
            w.push(Workload {
                name: format!("rfuse/fxmark-{label}-{th}th"),
                group: "rfuse",
                description: format!("FxMark {label}, {th} thread(s)"),
                target: Target::Backing,
                kind: Kind::FxMark {
                    bench: b,
                    threads: th,
                    runtime: scale.runtime,
                },
                drop_caches: false,
            });
        }
    }
    w.extend(nullfs_latency(scale));
    w
}

fn nullfs_latency(scale: &Scale) -> Vec<Workload> {
    vec![
        Workload {
            name: "rfuse/nullfs-create-latency".into(),
            group: "rfuse",
            description: "median latency of open(O_CREAT)+close on nullfs (us)".into(),
            target: Target::NullFs,
            kind: Kind::Latency {
                op: LatencyOp::Create,
                count: scale.latency_ops,
            },
            drop_caches: false,
        },
        Workload {
            name: "rfuse/nullfs-getattr-latency".into(),
            group: "rfuse",
            description: "median latency of stat with attr timeout 0 on nullfs (us)".into(),
            target: Target::NullFs,
            kind: Kind::Latency {
                op: LatencyOp::Getattr,
                count: scale.latency_ops,
            },
            drop_caches: false,
        },
    ]
}

/// XFUSE: TimingFS pmem and ssd profiles under random 4 KiB reads.
fn xfuse(scale: &Scale) -> Vec<Workload> {
    let mut w = vec![];
    for profile in ["pmem", "ssd"] {
        for th in [1, scale.many] {
            w.push(Workload {
                name: format!("xfuse/timingfs-{profile}-rnd-rd-4k-{th}th"),
                group: "xfuse",
                description: format!(
                    "timingfs {profile} profile, fio randread 4 KiB direct, {th} thread(s)"
                ),
                target: Target::TimingFs { profile },
                kind: Kind::Fio(Fio {
                    rw: FioRw::RandRead,
                    bs: 4 * KIB,
                    threads: th,
                    file_per_thread: false,
                    size: 256 * MIB,
                    direct: true,
                    fsync_at_end: false,
                    fdatasync_every_write: false,
                    runtime: scale.runtime,
                    async_depth: None,
                    once: false,
                }),
                drop_caches: false,
            });
        }
    }
    w
}

/// filebench's fileserver, webserver and varmail personalities.
fn macro_suite(scale: &Scale) -> Vec<Workload> {
    [
        (Personality::Fileserver, "fileserver", 8),
        (Personality::Webserver, "webserver", 8),
        (Personality::Varmail, "varmail", 4),
    ]
    .into_iter()
    .map(|(p, name, threads)| Workload {
        name: format!("macro/{name}"),
        group: "macro",
        description: format!(
            "filebench {name} personality, {threads} threads, {} files",
            scale.macro_files
        ),
        target: Target::Backing,
        kind: Kind::Macro {
            personality: p,
            threads,
            files: scale.macro_files,
            runtime: scale.runtime,
        },
        drop_caches: false,
    })
    .collect()
}

/// Sizes that make a suite fit its time budget.
pub struct Scale {
    pub runtime: Duration,
    /// Per-thread file size in thread sweeps (up to 32 files at once).
    pub sweep_file_size: u64,
    pub many: u32,
    pub sweep: Vec<u32>,
    pub file_size: u64,
    pub files: u32,
    pub latency_ops: u32,
    pub macro_files: u32,
}

impl Scale {
    /// 1-second runs keep `all` (about 630 workload-subject pairs, three
    /// repetitions each) near 50 minutes on two cores.
    fn full() -> Scale {
        Scale {
            runtime: Duration::from_secs(1),
            sweep_file_size: 32 * MIB,
            many: 4,
            sweep: vec![1, 2, 4, 8, 16, 32],
            file_size: 256 * MIB,
            files: 10_000,
            latency_ops: 20_000,
            macro_files: 1_000,
        }
    }
}

/// A named, versioned set of workloads.
pub struct Suite {
    pub name: &'static str,
    pub version: u32,
    pub repetitions: u32,
    pub workloads: Vec<Workload>,
}

pub const SUITES: &[&str] = &[
    "quick", "vangoor", "rfuse", "xfuse", "macro", "fastpath", "knobs", "peer", "later",
    "recovery", "compat", "blk", "direct", "sftp", "objfs", "all",
];

pub fn suite(name: &str) -> Option<Suite> {
    let s = Scale::full();
    // A suite's version changes whenever what its workloads measure does.
    let (workloads, repetitions, version) = match name {
        "quick" => (quick(), 3, 1),
        // v2: stat and unlink run on files just created through the mount.
        "fastpath" => (fastpath(), 3, 2),
        // v2: the write workloads end with an fsync. v3: rewrite-5000 and
        // the atomic_o_trunc knob. v4: sequential reads and the readahead
        // knob. v5: the thread-policy and polling knobs (new defaults).
        "knobs" => (knobs(), 3, 5),
        "peer" => (peer(), 3, 1),
        "later" => (later(), 3, 1),
        // Each repetition replaces the server once: 7 give a median and a
        // max worth quoting.
        "recovery" => (recovery(), 7, 1),
        "compat" => (compat(), 3, 1),
        "blk" => (blk(), 3, 1),
        "direct" => (direct(), 3, 1),
        "sftp" => (sftp(), 3, 1),
        "objfs" => (objfs(), 3, 1),
        "vangoor" => (vangoor(&s), 3, 1),
        "rfuse" => (rfuse(&s), 3, 1),
        "xfuse" => (xfuse(&s), 3, 1),
        "macro" => (macro_suite(&s), 3, 1),
        "all" => (
            [vangoor(&s), rfuse(&s), xfuse(&s), macro_suite(&s)].concat(),
            3,
            1,
        ),
        _ => return None,
    };
    Some(Suite {
        name: SUITES.iter().find(|n| **n == name)?,
        version,
        repetitions,
        workloads,
    })
}

/// The fast-path targets: 4 KiB O_DIRECT random reads (1, 2 threads) and
/// writes, and create / stat / unlink of 15,000 files, psync, 5 s runs.
fn fastpath() -> Vec<Workload> {
    let direct = |rw: FioRw, th: u32| Fio {
        rw,
        bs: 4 * KIB,
        threads: th,
        file_per_thread: false,
        size: 256 * MIB,
        direct: true,
        fsync_at_end: false,
        fdatasync_every_write: false,
        runtime: Duration::from_secs(5),
        async_depth: None,
        once: false,
    };
    let mut w = vec![];
    for (rw, label, ths) in [
        (FioRw::RandRead, "rnd-rd", &[1u32, 2][..]),
        (FioRw::RandWrite, "rnd-wr", &[1u32][..]),
    ] {
        for &th in ths {
            w.push(fio(
                "fastpath",
                format!("fastpath/{label}-4k-direct-{th}th"),
                format!("fio {} 4 KiB O_DIRECT psync, {th} thread(s)", rw.fio_name()),
                direct(rw, th),
            ));
        }
    }
    w.extend(metadata_rates(
        "fastpath",
        Target::Backing,
        15_000,
        "15,000",
    ));
    w
}

/// Create, stat and unlink of `count` 16-byte files, one thread; stat and
/// unlink on the files just created through the same mount.
fn metadata_rates(group: &'static str, target: Target, count: u32, spelled: &str) -> Vec<Workload> {
    [
        (FilesPhase::Create, "create"),
        (FilesPhase::Stat, "stat"),
        (FilesPhase::Delete, "unlink"),
    ]
    .into_iter()
    .map(|(phase, label)| Workload {
        name: format!("{group}/{label}-{count}"),
        group,
        description: format!("{spelled} files (create: open O_CREAT, 16-byte write, close); stat and unlink run on files just created through the same mount"),
        target: target.clone(),
        kind: Kind::Files(Files {
            phase,
            count,
            threads: 1,
            file_size: 16,
            dataset: FilesDataset::JustCreated,
        }),
        drop_caches: false,
    })
    .collect()
}

/// Direct mode (issue 18's targets), native vs the kernel path vs direct
/// mode, all stackfs over the backing tmpfs: create, stat and unlink rates
/// (on files just created through the same mount), 4 KiB O_DIRECT random
/// reads, filebench's fileserver, and tar x / git status of a source tree.
fn direct() -> Vec<Workload> {
    let mut w = metadata_rates("direct", Target::Direct, 10_000, "10,000");
    w.push(fio(
        "direct",
        "direct/rnd-rd-4k-direct-1th".into(),
        "fio randread 4 KiB O_DIRECT psync, 1 thread, 5 s".into(),
        Fio {
            rw: FioRw::RandRead,
            bs: 4 * KIB,
            threads: 1,
            file_per_thread: false,
            size: 256 * MIB,
            direct: true,
            fsync_at_end: false,
            fdatasync_every_write: false,
            runtime: Duration::from_secs(5),
            async_depth: None,
            once: false,
        },
    ));
    if let Some(last) = w.last_mut() {
        last.target = Target::Direct;
        last.drop_caches = false;
    }
    w.push(Workload {
        name: "direct/fileserver".into(),
        group: "direct",
        description: "filebench fileserver personality (Prefuse's workload), 2 threads, 1,000 files, 5 s; every flowop an operation".into(),
        target: Target::Direct,
        kind: Kind::Macro {
            personality: Personality::Fileserver,
            threads: 2,
            files: 1_000,
            runtime: Duration::from_secs(5),
        },
        drop_caches: false,
    });
    for (op, label, runs, description) in [
        (TreeOp::TarExtract, "tar-x", 1, "tar xf of /usr/include (about 8,000 files, archive read through the mount): files per second"),
        (TreeOp::GitStatus, "git-status", 5, "git status in a repository of /usr/include (index refreshed through the mount first), 5 runs: runs per second"),
    ] {
        w.push(Workload {
            name: format!("direct/{label}"),
            group: "direct",
            description: description.into(),
            target: Target::Direct,
            kind: Kind::Tree {
                op,
                runs,
                source: TreeSource::UsrInclude,
            },
            drop_caches: false,
        });
    }
    w
}

/// The added round trips the sftp suite runs at, in milliseconds.
pub const SFTP_DELAYS_MS: [u32; 3] = [0, 10, 50];

/// sftpfs (issue 34) beside Debian's sshfs and rclone mount, every one
/// over the same OpenSSH server on loopback behind a proxy that adds 0, 10
/// or 50 ms of round trip; the SFTP requests each sent are counted at the
/// server. What takes one round trip per file is scaled down as the delay
/// grows (the rates stay comparable); every name says its delay.
fn sftp() -> Vec<Workload> {
    let mut w = vec![];
    for d in SFTP_DELAYS_MS {
        let target = Target::Sftp { delay_ms: d };
        // Files touched one by one, and the tree for git and tar.
        let (stat_n, read_n, fs_files, tree) = match d {
            0 => (10_000, 1_000, 200, TreeSource::UsrInclude),
            10 => (2_000, 300, 100, TreeSource::UsrIncludeLinux),
            _ => (500, 100, 50, TreeSource::UsrIncludeLinux),
        };
        let seq_size = if d >= 50 { 256 * MIB } else { 1024 * MIB };
        let mut add = |label: &str, description: String, kind: Kind, drop_caches: bool| {
            w.push(Workload {
                name: format!("sftp/{label}-{d}ms"),
                group: "sftp",
                description: format!("{description}; {d} ms added round trip"),
                target: target.clone(),
                kind,
                drop_caches,
            })
        };
        add(
            "ls-lR",
            "ls -lR of a tree of 10,000 files (100 directories of 100), cold caches: entries per second".into(),
            Kind::Tree {
                op: TreeOp::ListLong,
                runs: 1,
                source: TreeSource::Synthetic { files: 10_000 },
            },
            true,
        );
        add(
            "stat",
            format!("stat of {stat_n} files in one directory, cold caches"),
            Kind::Files(Files {
                phase: FilesPhase::Stat,
                count: stat_n,
                threads: 1,
                file_size: 16,
                dataset: FilesDataset::Backing,
            }),
            true,
        );
        add(
            "read-small",
            format!("open, read whole and close {read_n} files of 4 KiB, cold caches"),
            Kind::Files(Files {
                phase: FilesPhase::Read,
                count: read_n,
                threads: 1,
                file_size: 4 * KIB,
                dataset: FilesDataset::Backing,
            }),
            true,
        );
        for (rw, label) in [(FioRw::SeqRead, "seq-read"), (FioRw::SeqWrite, "seq-write")] {
            add(
                label,
                format!(
                    "fio {} of a {} MiB file in 1 MiB requests, psync, 10 s{}; MiB/s",
                    if rw.is_read() {
                        "sequential read"
                    } else {
                        "sequential write"
                    },
                    seq_size / MIB,
                    if rw.is_read() {
                        ", cold caches"
                    } else {
                        ", fsync at the end"
                    }
                ),
                Kind::Fio(Fio {
                    rw,
                    bs: MIB,
                    threads: 1,
                    file_per_thread: false,
                    size: seq_size,
                    direct: false,
                    fsync_at_end: !rw.is_read(),
                    fdatasync_every_write: false,
                    runtime: Duration::from_secs(10),
                    async_depth: None,
                    once: false,
                }),
                rw.is_read(),
            );
        }
        let tree_name = match tree {
            TreeSource::UsrInclude => "/usr/include (8,000 files)",
            _ => "/usr/include/linux (760 files)",
        };
        add(
            "git-status",
            format!("git status in a repository of {tree_name} (index refreshed through the mount first), 3 runs: runs per second"),
            Kind::Tree {
                op: TreeOp::GitStatus,
                runs: 3,
                source: tree,
            },
            false,
        );
        // No /usr/include: it holds symlinks, whose times sshfs cannot
        // set (its tar fails: "Cannot utime"). At 50 ms a file costs sshfs
        // about nine round trips: 200 files keep a run near a minute.
        let (untar, untar_name) = match d {
            0 | 10 => (
                TreeSource::UsrIncludeLinux,
                "/usr/include/linux (760 files)",
            ),
            _ => (
                TreeSource::Synthetic { files: 200 },
                "a tree of 200 files of 1 to 8 KiB",
            ),
        };
        add(
            "untar",
            format!(
                "tar xf of {untar_name} into the mount (archive read through it): files per second"
            ),
            Kind::Tree {
                op: TreeOp::TarExtract,
                runs: 1,
                source: untar,
            },
            false,
        );
        add(
            "fileserver",
            format!("filebench fileserver personality (the thesis's workload), 4 threads, {fs_files} files, 5 s; every flowop an operation"),
            Kind::Macro {
                personality: Personality::Fileserver,
                threads: 4,
                files: fs_files,
                runtime: Duration::from_secs(5),
            },
            false,
        );
        add(
            "read-steps",
            "the thesis's read experiment: 100 reads of 1 MiB from a 1 GiB file, each 1 KiB after the last, cold caches: microseconds for all 100 (SFTP READs counted at the server)".into(),
            Kind::ReadSteps {
                reads: 100,
                size: MIB,
                step: KIB,
                file_size: 1024 * MIB,
            },
            true,
        );
    }
    w
}

/// objfs (issue 36) beside s3fs 1.90 and rclone 1.60 mount on one
/// three-node Garage cluster, and the bench's own S3 client where a
/// workload is plain transfers (listing, sequential read and write). The
/// S3 requests each subject sends are counted at the cluster. What costs
/// a round trip per file is scaled so a run stays near a minute on s3fs.
fn objfs() -> Vec<Workload> {
    let mut w = vec![];
    let mut add = |label: &str, description: String, kind: Kind, drop_caches: bool| {
        w.push(Workload {
            name: format!("objfs/{label}"),
            group: "objfs",
            description,
            target: Target::Objfs,
            kind,
            drop_caches,
        })
    };
    let files = |phase: FilesPhase, count: u32, file_size: u64| {
        Kind::Files(Files {
            phase,
            count,
            threads: 1,
            file_size,
            dataset: FilesDataset::Backing,
        })
    };
    for n in [100u32, 10_000, 100_000] {
        add(
            &format!("ls-l-{n}"),
            format!("ls -l of a directory of {n} objects (a listing, then an lstat of each), cold caches: entries per second"),
            files(FilesPhase::ListStat, n, 16),
            true,
        );
    }
    add(
        "stat",
        "stat of 2,000 objects in one directory, cold caches".into(),
        files(FilesPhase::Stat, 2_000, 16),
        true,
    );
    add(
        "stat-missing",
        "stat of names that do not exist: 1,000 names, each looked up twice (a search path)".into(),
        Kind::Files(Files {
            phase: FilesPhase::StatMissing,
            count: 2_000,
            threads: 1,
            file_size: 0,
            dataset: FilesDataset::Backing,
        }),
        true,
    );
    for (rw, label) in [(FioRw::SeqRead, "seq-read"), (FioRw::SeqWrite, "seq-write")] {
        for jobs in [1u32, 4] {
            add(
                &format!("{label}-{jobs}job"),
                format!(
                    "fio {} of 1 GiB in 1 MiB requests, {jobs} job(s) ({}), psync{}: MiB/s",
                    if rw.is_read() {
                        "sequential read"
                    } else {
                        "sequential write"
                    },
                    if jobs == 1 {
                        "one file".to_string()
                    } else {
                        format!("a file of {} MiB each", 1024 / jobs)
                    },
                    if rw.is_read() {
                        ", cold caches"
                    } else {
                        ", fsync at the end (for objfs and s3fs: the upload done; for objfs-behind and rclone: the local copy)"
                    }
                ),
                Kind::Fio(Fio {
                    rw,
                    bs: MIB,
                    threads: jobs,
                    file_per_thread: true,
                    size: 1024 * MIB / jobs as u64,
                    direct: false,
                    fsync_at_end: !rw.is_read(),
                    fdatasync_every_write: false,
                    runtime: Duration::from_secs(60),
                    async_depth: None,
                    once: true,
                }),
                rw.is_read(),
            );
        }
    }
    add(
        "create",
        "create, write 4 KiB and close 2,000 files in one directory".into(),
        Kind::Files(Files {
            phase: FilesPhase::Create,
            count: 2_000,
            threads: 1,
            file_size: 4 * KIB,
            dataset: FilesDataset::Backing,
        }),
        false,
    );
    add(
        "untar",
        "tar xf of /usr/include/linux (760 files) into the mount (archive read through it): files per second".into(),
        Kind::Tree {
            op: TreeOp::TarExtract,
            runs: 1,
            source: TreeSource::UsrIncludeLinux,
        },
        false,
    );
    add(
        "git-clone",
        "git clone --no-local of a repository of /usr/include/linux (760 files; a bare repository on the same mount) into the mount: files checked out per second".into(),
        Kind::Tree {
            op: TreeOp::GitClone,
            runs: 1,
            source: TreeSource::UsrIncludeLinux,
        },
        false,
    );
    add(
        "rename-into-place",
        "replace 500 files of 4 KiB the way editors do: write NAME.tmp, fsync, rename over NAME"
            .into(),
        files(FilesPhase::RenameIntoPlace, 500, 4 * KIB),
        false,
    );
    add(
        "write-64-files",
        "64 files open for writing at once: fio sequential write, 64 jobs of 16 MiB each in 1 MiB requests, fsync at the end: MiB/s (and the daemon's peak memory, in the memory section)".into(),
        Kind::Fio(Fio {
            rw: FioRw::SeqWrite,
            bs: MIB,
            threads: 64,
            file_per_thread: true,
            size: 16 * MIB,
            direct: false,
            fsync_at_end: true,
            fdatasync_every_write: false,
            runtime: Duration::from_secs(120),
            async_depth: None,
            once: true,
        }),
        false,
    );
    add(
        "replace-soak",
        "the server replaced every 2 s for 60 s (SIGKILL and fusebox upgrade in turn: 29 replacements) while files of 3 MB are copied in (at most 10 a second): files closed per second; every file read back once nothing waits to be stored, and any failed write or wrong file fails the run (supervised mounts only)".into(),
        Kind::ReplaceSoak {
            duration: Duration::from_secs(60),
            every: Duration::from_secs(2),
            load: SoakLoad::Copies {
                file_bytes: 3_000_000,
            },
        },
        false,
    );
    w
}

/// Block devices (issue 17's targets): fio on the device, 4 KiB random
/// reads and writes at queue depth 1 and 32, 1 MiB sequential reads and
/// writes at depth 8, libaio, O_DIRECT, with the null and ram drivers.
fn blk() -> Vec<Workload> {
    let mut w = vec![];
    for driver in [BlkDriver::Null, BlkDriver::Ram] {
        let d = match driver {
            BlkDriver::Null => "null",
            BlkDriver::Ram => "ram",
        };
        for (rw, bs, depth) in [
            (FioRw::RandRead, 4 * KIB, 1),
            (FioRw::RandRead, 4 * KIB, 32),
            (FioRw::RandWrite, 4 * KIB, 1),
            (FioRw::RandWrite, 4 * KIB, 32),
            (FioRw::SeqRead, MIB, 8),
            (FioRw::SeqWrite, MIB, 8),
        ] {
            let kind = if rw.is_read() { "rd" } else { "wr" };
            let pattern = if matches!(rw, FioRw::RandRead | FioRw::RandWrite) {
                "rnd"
            } else {
                "seq"
            };
            w.push(Workload {
                name: format!("blk/{d}-{pattern}-{kind}-{}-qd{depth}", size_name(bs)),
                group: "blk",
                description: format!(
                    "{d} device: fio {} {} libaio O_DIRECT, queue depth {depth}, 4 s",
                    rw.fio_name(),
                    size_name(bs)
                ),
                target: Target::Blk(driver),
                kind: Kind::Fio(Fio {
                    rw,
                    bs,
                    threads: 1,
                    file_per_thread: false,
                    size: crate::blk::DEVICE_SIZE,
                    direct: true,
                    fsync_at_end: false,
                    fdatasync_every_write: false,
                    runtime: Duration::from_secs(4),
                    async_depth: Some(depth),
                    once: false,
                }),
                drop_caches: false,
            });
        }
    }
    w
}

/// Unchanged Debian programs on Debian's libfuse3 and on fusebox's drop-in
/// (issue 16's targets): sshfs lists a 10,000-file tree, reads 1,000 small
/// files and copies a 1 GiB file; squashfuse does random 4 KiB reads and a
/// tree walk; fuse-overlayfs creates, stats and unlinks 10,000 files.
fn compat() -> Vec<Workload> {
    let files = |phase, count, size, dataset| {
        Kind::Files(Files {
            phase,
            count,
            threads: 1,
            file_size: size,
            dataset,
        })
    };
    let mut w = vec![];
    let mut add = |name: &str, program, description: &str, kind, drop_caches| {
        w.push(Workload {
            name: format!("compat/{name}"),
            group: "compat",
            description: description.into(),
            target: Target::Compat(program),
            kind,
            drop_caches,
        })
    };
    use CompatProgram::*;
    use FilesDataset::{Backing as Laid, JustCreated};
    add(
        "sshfs-list-10000",
        Sshfs,
        "sshfs: list a directory of 10,000 files and lstat each (ls -l), cold caches",
        files(FilesPhase::ListStat, 10_000, 0, Laid),
        true,
    );
    add(
        "sshfs-read-1000",
        Sshfs,
        "sshfs: open, read whole and close 1,000 files of 4 KiB, cold caches",
        files(FilesPhase::Read, 1_000, 4 * KIB, Laid),
        true,
    );
    add(
        "sshfs-copy-1g",
        Sshfs,
        "sshfs: read a 1 GiB file front to back in 1 MiB requests (the reading half of cp), cold caches",
        Kind::Fio(Fio {
            rw: FioRw::SeqRead,
            bs: MIB,
            threads: 1,
            file_per_thread: false,
            size: 1024 * MIB,
            direct: false,
            fsync_at_end: false,
            fdatasync_every_write: false,
            runtime: Duration::from_secs(30),
            async_depth: None,
            once: false,
        }),
        true,
    );
    add(
        "squashfuse-rnd-rd-4k",
        Squashfuse,
        "squashfuse: fio randread 4 KiB O_DIRECT psync of a 256 MiB file in the image",
        Kind::Fio(Fio {
            rw: FioRw::RandRead,
            bs: 4 * KIB,
            threads: 1,
            file_per_thread: false,
            size: 256 * MIB,
            direct: true,
            fsync_at_end: false,
            fdatasync_every_write: false,
            runtime: Duration::from_secs(5),
            async_depth: None,
            once: false,
        }),
        true,
    );
    add(
        "squashfuse-walk-10000",
        Squashfuse,
        "squashfuse: list a directory of 10,000 files in the image and lstat each, cold caches",
        files(FilesPhase::ListStat, 10_000, 0, Laid),
        true,
    );
    for (phase, label) in [
        (FilesPhase::Create, "create"),
        (FilesPhase::Stat, "stat"),
        (FilesPhase::Delete, "unlink"),
    ] {
        add(
            &format!("overlay-{label}-10000"),
            Overlay,
            "fuse-overlayfs over the backing directory: 10,000 files (create: open O_CREAT, 16-byte write, close); stat and unlink run on files just created through the same mount",
            files(phase, 10_000, 16, JustCreated),
            false,
        );
    }
    w
}

/// fusebox against libfuse's own io_uring mode (passthrough_hp), in the
/// matched and the best configurations: the fast-path workloads, and one
/// GETATTR round trip with nothing cached.
fn peer() -> Vec<Workload> {
    let mut w: Vec<Workload> = fastpath()
        .into_iter()
        .filter(|w| !w.name.contains("rnd-wr"))
        .map(|mut w| {
            w.name = w.name.replace("fastpath/", "peer/");
            w.group = "peer";
            w.target = Target::Peer;
            w
        })
        .collect();
    w.push(Workload {
        name: "peer/getattr-latency".into(),
        group: "peer",
        description: "median latency of stat of the mount's root, attribute timeout 0: one GETATTR answered with one fstat (us)".into(),
        target: Target::PeerNoCache,
        kind: Kind::Latency {
            op: LatencyOp::Getattr,
            count: 20_000,
        },
        drop_caches: false,
    });
    w
}

/// Answering later: a filesystem whose every request takes 5 ms, with N
/// requests at once from N psync jobs, and from one libaio job N deep
/// (O_DIRECT 4 KiB random reads of one file, so each read is a request).
/// The blocking subjects are what a handler that holds its thread gives.
fn later() -> Vec<Workload> {
    let mut w = vec![];
    for n in [1u32, 16, 64, 256] {
        for (label, jobs, depth) in [("psync", n, None), ("libaio", 1, Some(n))] {
            if label == "libaio" && n == 1 {
                continue;
            }
            let f = Fio {
                rw: FioRw::RandRead,
                bs: 4 * KIB,
                threads: jobs,
                file_per_thread: false,
                size: 64 * MIB,
                direct: true,
                fsync_at_end: false,
                fdatasync_every_write: false,
                runtime: Duration::from_secs(3),
                async_depth: depth,
                once: false,
            };
            let desc = match depth {
                None => format!("fio randread 4 KiB O_DIRECT psync, {n} job(s); every request takes 5 ms"),
                Some(d) => format!("fio randread 4 KiB O_DIRECT libaio, 1 job, iodepth {d}; every request takes 5 ms"),
            };
            let mut wl = fio("later", format!("later/{label}-{n}"), desc, f);
            wl.target = Target::Later { latency_ms: 5 };
            w.push(wl);
        }
    }
    w
}

/// The pause applications see while the server is replaced (crash or
/// upgrade), by a stat loop and a 4 KiB reader, with 10 and 100,000 inodes
/// known to the kernel.
fn recovery() -> Vec<Workload> {
    let mut w = vec![];
    for (how, how_name) in [
        (Replacement::Upgrade, "upgrade"),
        (Replacement::Crash, "crash"),
    ] {
        for (probe, probe_name, probe_desc) in [
            (Probe::Stat, "stat", "a statx loop (forced GETATTR)"),
            (Probe::Read4k, "read4k", "a 4 KiB O_DIRECT pread loop"),
        ] {
            for inodes in [10u32, 100_000] {
                let what = match how {
                    Replacement::Upgrade => "`fusebox upgrade`",
                    Replacement::Crash => "SIGKILL of the server (the supervisor starts the next)",
                };
                w.push(Workload {
                    name: format!("recovery/{how_name}-{probe_name}-{inodes}"),
                    group: "recovery",
                    description: format!(
                        "longest wait of {probe_desc} while the server is replaced by {what}; {inodes} inodes known to the kernel"
                    ),
                    target: Target::Recovery,
                    kind: Kind::Replacement { how, probe, inodes },
                    drop_caches: false,
                });
            }
        }
    }
    // The long version of the tests' replacements under load, for each
    // recovery subject (both transports): one repetition of a minute.
    w.push(Workload {
        name: "recovery/replace-soak".into(),
        group: "recovery",
        description: "the server replaced every 2 s for 60 s (SIGKILL and fusebox upgrade in turn: 29 replacements) while files of 3 MB are copied in (at most 10 a second): files closed per second; every file read back and compared at the end, and any failed write or wrong file fails the run".into(),
        target: Target::Recovery,
        kind: Kind::ReplaceSoak {
            duration: Duration::from_secs(60),
            every: Duration::from_secs(2),
            load: SoakLoad::Copies {
                file_bytes: 3_000_000,
            },
        },
        drop_caches: false,
    });
    // The long version of the tests' fio verify through replacements.
    w.push(Workload {
        name: "recovery/replace-fio-verify".into(),
        group: "recovery",
        description: "the server replaced every 2 s for 60 s (SIGKILL and fusebox upgrade in turn) while fio runs one after another: 4 jobs of random 4 KiB writes to 16 MiB files, then every block read back with its crc32c checked (verify_fatal): 4 KiB writes verified per second; any I/O error or verify failure fails the run".into(),
        target: Target::Recovery,
        kind: Kind::ReplaceSoak {
            duration: Duration::from_secs(60),
            every: Duration::from_secs(2),
            load: SoakLoad::FioVerify,
        },
        drop_caches: false,
    });
    // The ledger's and the journal's cost on the fast path: a supervised
    // server records every lookup, open and release, and probes each
    // create and unlink once more.
    w.extend(
        fastpath()
            .into_iter()
            .filter(|w| !w.name.contains("-2th"))
            .map(|mut w| {
                w.name = w.name.replace("fastpath/", "recovery/steady-");
                w.group = "recovery";
                w.target = Target::Supervision;
                w
            }),
    );
    w
}

/// Each round-trip setting on and off: the metadata and write workloads
/// the settings act on, over stackfs variants (`Target::Knobs`).
fn knobs() -> Vec<Workload> {
    let files = |phase, label: &str, count, dataset, desc: &str| Workload {
        name: format!("knobs/{label}"),
        group: "knobs",
        description: desc.into(),
        target: Target::Knobs,
        kind: Kind::Files(Files {
            phase,
            count,
            threads: 1,
            file_size: 16,
            dataset,
        }),
        drop_caches: false,
    };
    // Buffered, one thread. Writes are timed until the data is out of the
    // page cache: otherwise the writeback cache would look faster by leaving
    // its work undone.
    let sequential = |rw: FioRw, bs: u64, label: &str| {
        let write = !rw.is_read();
        let f = Fio {
            rw,
            bs,
            threads: 1,
            file_per_thread: false,
            size: if write { 256 * MIB } else { 512 * MIB },
            direct: false,
            fsync_at_end: write,
            fdatasync_every_write: false,
            runtime: Duration::from_secs(3),
            async_depth: None,
            once: false,
        };
        let (name, desc) = if write {
            (
                format!("knobs/write-{label}"),
                format!("fio sequential write {label} buffered, psync, 1 thread, fsync at the end"),
            )
        } else {
            (
                format!("knobs/read-{label}"),
                format!("fio sequential read {label} buffered (readahead), psync, 1 thread"),
            )
        };
        let mut w = fio("knobs", name, desc, f);
        w.target = Target::Knobs;
        w
    };
    use FilesDataset::{Backing, JustCreated};
    vec![
        files(
            FilesPhase::Create,
            "create-5000",
            5000,
            Backing,
            "5,000 files: open O_CREAT, 16-byte write, close",
        ),
        files(
            FilesPhase::Stat,
            "stat-5000",
            5000,
            JustCreated,
            "stat of 5,000 files just created through the mount",
        ),
        files(
            FilesPhase::Delete,
            "unlink-5000",
            5000,
            JustCreated,
            "unlink of 5,000 files just created through the mount",
        ),
        files(
            FilesPhase::Rewrite,
            "rewrite-5000",
            5000,
            JustCreated,
            "5,000 files just created through the mount, overwritten: open O_WRONLY|O_TRUNC, 16-byte write, close",
        ),
        files(
            FilesPhase::StatMissing,
            "stat-missing-20000",
            20_000,
            Backing,
            "20,000 stats of 1,000 names that do not exist",
        ),
        files(
            FilesPhase::ListStat,
            "ls-l-5000",
            5000,
            Backing,
            "ls -l of a directory of 5,000 files, cold",
        ),
        sequential(FioRw::SeqWrite, 4 * KIB, "4k"),
        sequential(FioRw::SeqWrite, MIB, "1m"),
        sequential(FioRw::SeqRead, 4 * KIB, "4k"),
        sequential(FioRw::SeqRead, 128 * KIB, "128k"),
    ]
}

/// The README's demo: one workload of each kind, short runs.
fn quick() -> Vec<Workload> {
    // 1-second runs: eight subjects, three repetitions, about 5 minutes.
    let s = Scale {
        runtime: Duration::from_secs(1),
        sweep_file_size: 32 * MIB,
        many: 2,
        sweep: vec![1, 2],
        file_size: 128 * MIB,
        files: 2_000,
        latency_ops: 5_000,
        macro_files: 200,
    };
    let mut w = vec![];
    for th in [1, 2] {
        w.push(fio(
            "quick",
            format!("quick/rnd-rd-4k-direct-{th}th"),
            format!("fio randread 4 KiB O_DIRECT, {th} thread(s)"),
            Fio {
                rw: FioRw::RandRead,
                bs: 4 * KIB,
                threads: th,
                file_per_thread: false,
                size: s.file_size,
                direct: true,
                fsync_at_end: false,
                fdatasync_every_write: false,
                runtime: s.runtime,
                async_depth: None,
                once: false,
            },
        ));
    }
    w.push(fio(
        "quick",
        "quick/seq-wr-128k-1th".into(),
        "fio sequential write 128 KiB, fsync at end".into(),
        Fio {
            rw: FioRw::SeqWrite,
            bs: 128 * KIB,
            threads: 1,
            file_per_thread: true,
            size: s.file_size,
            direct: false,
            fsync_at_end: true,
            fdatasync_every_write: false,
            runtime: s.runtime,
            async_depth: None,
            once: false,
        },
    ));
    for (phase, label) in [
        (FilesPhase::Create, "cr"),
        (FilesPhase::Stat, "stat"),
        (FilesPhase::Delete, "del"),
    ] {
        w.push(Workload {
            name: format!("quick/files-{label}-1th"),
            group: "quick",
            description: format!("{} files of 16 bytes", s.files),
            target: Target::Backing,
            kind: Kind::Files(Files {
                phase,
                count: s.files,
                threads: 1,
                file_size: 16,
                dataset: FilesDataset::Backing,
            }),
            drop_caches: false,
        });
    }
    w.push(Workload {
        name: "quick/fxmark-MWCM-2th".into(),
        group: "quick",
        description: "FxMark MWCM: 2 threads create in one directory".into(),
        target: Target::Backing,
        kind: Kind::FxMark {
            bench: FxMark::Mwcm,
            threads: 2,
            runtime: s.runtime,
        },
        drop_caches: false,
    });
    w.extend(nullfs_latency(&s).into_iter().map(|mut w| {
        w.name = w.name.replace("rfuse/", "quick/");
        w.group = "quick";
        w
    }));
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suites_are_named_versioned_and_unique() {
        for name in SUITES {
            let s = suite(name).unwrap();
            assert!(s.version >= 1, "{name}");
            assert!(!s.workloads.is_empty(), "{name}");
            let mut names: Vec<&str> = s.workloads.iter().map(|w| w.name.as_str()).collect();
            names.sort();
            let n = names.len();
            names.dedup();
            assert_eq!(n, names.len(), "duplicate workload names in {name}");
        }
        assert!(suite("nope").is_none());
    }

    #[test]
    fn papers_shapes_are_kept() {
        let v = suite("vangoor").unwrap();
        assert!(v
            .workloads
            .iter()
            .any(|w| w.name == "vangoor/seq-wr-4th-4f-1m"));
        assert!(v
            .workloads
            .iter()
            .any(|w| w.name == "vangoor/files-del-1th"));
        let r = suite("rfuse").unwrap();
        let sweep: Vec<u32> = r
            .workloads
            .iter()
            .filter(|w| w.name.starts_with("rfuse/rnd-wr-4k-"))
            .filter_map(|w| w.threads())
            .collect();
        assert_eq!(sweep, vec![1, 2, 4, 8, 16, 32]);
        let Kind::Fio(f) = &r
            .workloads
            .iter()
            .find(|w| w.name == "rfuse/rnd-wr-4k-1th")
            .unwrap()
            .kind
        else {
            panic!()
        };
        assert!(f.fdatasync_every_write && f.bs == 4096);
        assert_eq!(
            r.workloads
                .iter()
                .filter(|w| w.name.contains("fxmark"))
                .count(),
            18
        );
        assert!(suite("xfuse")
            .unwrap()
            .workloads
            .iter()
            .all(|w| matches!(w.target, Target::TimingFs { .. })));
        assert_eq!(suite("macro").unwrap().workloads.len(), 3);
        assert_eq!(
            suite("quick")
                .unwrap()
                .workloads
                .iter()
                .find(|w| w.name.ends_with("getattr-latency"))
                .unwrap()
                .unit(),
            "us"
        );
    }
}
