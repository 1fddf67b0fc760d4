//! Running one workload once on one mounted subject: fio where fio can
//! express it, our own engine for the rest.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::workload::*;

/// What one repetition measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    /// ops/s, or microseconds for latency workloads.
    pub value: f64,
    /// CPU seconds the workload used (fio's or our own threads').
    pub workload_cpu_s: f64,
    /// Operations done in the measured phase, where known: what CPU time
    /// and context switches are divided by for per-operation costs.
    pub ops: Option<f64>,
}

/// Files a workload reads must exist before the run, identical for every
/// subject: they are laid out once on the backing directory.
pub fn prepare_dataset(w: &Workload, backing: &Path) -> Result<()> {
    match &w.kind {
        Kind::Fio(f) if f.rw.is_read() => {
            let dir = dataset_dir(backing, w);
            fs::create_dir_all(&dir)?;
            for i in 0..fio_files(f) {
                let p = dir.join(format!("f{i}"));
                if fs::metadata(&p).map(|m| m.len()).unwrap_or(0) != f.size {
                    write_pattern(&p, f.size)?;
                }
            }
            Ok(())
        }
        Kind::Files(f)
            if f.dataset == FilesDataset::Backing
                && matches!(
                    f.phase,
                    FilesPhase::Stat
                        | FilesPhase::Read
                        | FilesPhase::Delete
                        | FilesPhase::ListStat
                        | FilesPhase::Rewrite
                        | FilesPhase::RenameIntoPlace
                ) =>
        {
            make_files(&dataset_dir(backing, w), f.count, f.file_size)
        }
        Kind::Replacement { inodes, .. } => make_files(&dataset_dir(backing, w), *inodes, 4096),
        Kind::Tree { op, source, .. } => {
            let archive = tree_archive(backing, *source)?;
            let dir = dataset_dir(backing, w);
            match op {
                TreeOp::GitStatus if !dir.join(".git").exists() => {
                    fs::create_dir_all(&dir)?;
                    sh(&dir, &format!("tar xf {}", archive.display()))?;
                    sh(
                        &dir,
                        "git init -q && git add -A && git -c user.name=bench -c user.email=bench@localhost commit -q -m tree",
                    )?;
                }
                TreeOp::GitClone => {
                    let bare = git_source(backing, *source);
                    if !bare.exists() {
                        let work = backing.join(format!("{}.repo", source.archive()));
                        if work.exists() {
                            fs::remove_dir_all(&work)?;
                        }
                        fs::create_dir_all(&work)?;
                        sh(&work, &format!("tar xf {}", archive.display()))?;
                        sh(
                            &work,
                            "git init -q && git add -A && git -c user.name=bench -c user.email=bench@localhost commit -q -m tree",
                        )?;
                        let partial = bare.with_extension("partial");
                        sh(
                            backing,
                            &format!(
                                "rm -rf {p} && git clone -q --bare {} {p} && git -C {p} repack -adq",
                                work.display(),
                                p = partial.display()
                            ),
                        )?;
                        fs::rename(&partial, &bare)?;
                        fs::remove_dir_all(&work)?;
                    }
                }
                TreeOp::ListLong if !dir.join(".complete").exists() => {
                    fs::create_dir_all(&dir)?;
                    sh(
                        &dir,
                        &format!("tar xf {} && : > .complete", archive.display()),
                    )?;
                }
                _ => {}
            }
            Ok(())
        }
        Kind::ReadSteps { file_size, .. } => {
            let dir = dataset_dir(backing, w);
            fs::create_dir_all(&dir)?;
            let p = dir.join("f0");
            if fs::metadata(&p).map(|m| m.len()).unwrap_or(0) != *file_size {
                write_pattern(&p, *file_size)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// The tree a `Tree` workload uses, as an archive at the backing
/// directory's root, made once.
fn tree_archive(backing: &Path, source: TreeSource) -> Result<PathBuf> {
    let name = source.archive();
    let archive = backing.join(&name);
    if archive.exists() {
        return Ok(archive);
    }
    let partial = backing.join(format!("{name}.partial"));
    match source.path() {
        Some(path) => {
            if !Path::new(path).is_dir() {
                bail!(
                    "{path} is missing: the tree workloads archive it (apt-get install libc6-dev)"
                );
            }
            sh(
                backing,
                &format!("tar cf {} -C / {}", partial.display(), &path[1..]),
            )?;
        }
        None => {
            let TreeSource::Synthetic { files } = source else {
                unreachable!("only the synthetic tree has no path")
            };
            let staging = backing.join(format!("{name}.staging"));
            if staging.exists() {
                fs::remove_dir_all(&staging)?;
            }
            for i in 0..files {
                let dir = staging.join(format!("d{:03}", i / 100));
                if i % 100 == 0 {
                    fs::create_dir_all(&dir)?;
                }
                // 1 to 8 KiB, the sizes of a source tree's small files.
                let size = 1024 * (1 + (i as usize * 7919) % 8);
                fs::write(dir.join(format!("f{i:05}")), vec![b'x'; size])?;
            }
            sh(&staging, &format!("tar cf {} .", partial.display()))?;
            fs::remove_dir_all(&staging)?;
        }
    }
    fs::rename(&partial, &archive)?;
    Ok(archive)
}

/// The bare repository a `GitClone` workload clones, at the backing
/// directory's root.
fn git_source(root: &Path, source: TreeSource) -> PathBuf {
    root.join(format!("{}.git", source.archive()))
}

/// What of the backing directory workload `w` reads or changes: its own
/// directory, and the tree's archive or repository at the root. A subject
/// that keeps a copy of the backing directory elsewhere (an object store)
/// brings these up to date before each run.
pub fn dataset_paths(w: &Workload, backing: &Path) -> Vec<PathBuf> {
    let mut paths = vec![dataset_dir(backing, w)];
    if let Kind::Tree { op, source, .. } = &w.kind {
        paths.push(match op {
            TreeOp::GitClone => git_source(backing, *source),
            _ => backing.join(source.archive()),
        });
    }
    paths
}

/// Run a shell command in `dir`; its output is shown only if it fails.
fn sh(dir: &Path, command: &str) -> Result<()> {
    // A subject that hangs (a peer stuck on a page fault) fails its run
    // instead of the whole bench.
    let out = std::process::Command::new("timeout")
        .args(["-s", "KILL", "120", "sh", "-c", command])
        .current_dir(dir)
        .output()
        .with_context(|| format!("running {command}"))?;
    if !out.status.success() {
        if out.status.code().is_none() || out.status.code() == Some(137) {
            bail!("{command} in {}: killed after 120 s (hung)", dir.display());
        }
        bail!(
            "{command} in {}: {}{}",
            dir.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// CPU seconds of this process's children that have been waited for.
fn children_cpu() -> f64 {
    crate::subject::children_cpu_seconds(std::process::id()).unwrap_or(0.0)
}

fn run_tree(op: TreeOp, runs: u32, source: TreeSource, root: &Path, work: &Path) -> Result<Sample> {
    let archive = root.join(source.archive());
    let cpu0 = children_cpu();
    let start = Instant::now();
    let ops = match op {
        TreeOp::ListLong => {
            for _ in 0..runs {
                sh(work, "ls -lR . > /dev/null")?;
            }
            let secs = start.elapsed().as_secs_f64();
            let cpu = children_cpu() - cpu0;
            // Entries listed: what the rate is of (counted after timing).
            let entries = walk_count(work)? as f64 * runs as f64;
            return Ok(Sample {
                value: entries / secs,
                workload_cpu_s: cpu,
                ops: Some(entries),
            });
        }
        TreeOp::TarExtract => {
            fs::create_dir_all(work)?;
            sh(work, &format!("tar xf {}", archive.display()))?;
            // Entries extracted: what the rate is of.
            let out = std::process::Command::new("tar")
                .arg("tf")
                .arg(&archive)
                .output()?;
            let secs = start.elapsed().as_secs_f64();
            let entries = out.stdout.iter().filter(|&&c| c == b'\n').count() as f64;
            return Ok(Sample {
                value: entries / secs,
                workload_cpu_s: children_cpu() - cpu0,
                ops: Some(entries),
            });
        }
        TreeOp::GitStatus => {
            for _ in 0..runs {
                sh(work, "git status --porcelain >/dev/null")?;
            }
            runs as f64
        }
        TreeOp::GitClone => {
            fs::create_dir_all(work)?;
            let bare = git_source(root, source);
            for i in 0..runs {
                sh(
                    work,
                    &format!("git clone -q --no-local {} clone{i}", bare.display()),
                )?;
            }
            let secs = start.elapsed().as_secs_f64();
            // Files checked out: what the rate is of (counted after timing).
            let out = std::process::Command::new("git")
                .args(["ls-files"])
                .current_dir(work.join("clone0"))
                .output()?;
            let files = out.stdout.iter().filter(|&&c| c == b'\n').count() as f64 * runs as f64;
            return Ok(Sample {
                value: files / secs,
                workload_cpu_s: children_cpu() - cpu0,
                ops: Some(files),
            });
        }
    };
    let secs = start.elapsed().as_secs_f64();
    Ok(Sample {
        value: ops / secs,
        workload_cpu_s: children_cpu() - cpu0,
        ops: Some(ops),
    })
}

/// Entries below `dir` (what `ls -lR` lists, but for "." and "..").
fn walk_count(dir: &Path) -> Result<u64> {
    let mut n = 0;
    for e in fs::read_dir(dir)? {
        let e = e?;
        n += 1;
        if e.file_type()?.is_dir() {
            n += walk_count(&e.path())?;
        }
    }
    Ok(n)
}

/// The thesis's read experiment: `reads` preads of `size` bytes, each
/// starting `step` bytes after the last, on one open file; the time for
/// all of them, in microseconds.
fn run_read_steps(path: &Path, reads: u32, size: u64, step: u64) -> Result<Sample> {
    use std::os::unix::fs::FileExt;
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut buf = vec![0u8; size as usize];
    let cpu0 = self_cpu();
    let start = Instant::now();
    for i in 0..reads as u64 {
        let n = f.read_at(&mut buf, i * step)?;
        if n == 0 {
            bail!("{} ends before read {i}", path.display());
        }
    }
    let us = start.elapsed().as_secs_f64() * 1e6;
    Ok(Sample {
        value: us,
        workload_cpu_s: self_cpu() - cpu0,
        ops: Some(reads as f64),
    })
}

/// Undo what a run changed, so the next subject starts from the same state.
pub fn reset_after(w: &Workload, backing: &Path) -> Result<()> {
    let dir = dataset_dir(backing, w);
    match &w.kind {
        Kind::Fio(f) if f.rw.is_read() => Ok(()),
        // Replacing the server changes no file.
        Kind::Replacement { .. } => Ok(()),
        // The repository and the listed tree are made once; only the
        // index changes.
        Kind::Tree {
            op: TreeOp::GitStatus | TreeOp::ListLong,
            ..
        } => Ok(()),
        Kind::ReadSteps { .. } => Ok(()),
        Kind::Files(f)
            if f.dataset == FilesDataset::Backing
                && matches!(
                    f.phase,
                    FilesPhase::Stat | FilesPhase::Read | FilesPhase::ListStat
                ) =>
        {
            Ok(())
        }
        _ => {
            if dir.exists() {
                fs::remove_dir_all(&dir)?;
            }
            Ok(())
        }
    }
}

fn dataset_dir(root: &Path, w: &Workload) -> PathBuf {
    match &w.kind {
        // Read datasets are shared by every workload reading files of that
        // size (single-file ones use f0): one copy instead of one per
        // workload keeps the whole suite within a tmpfs.
        Kind::Fio(f) if f.rw.is_read() => root.join(format!("fio-data-{}", f.size)),
        _ => root.join(w.name.replace('/', "_")),
    }
}

fn fio_files(f: &Fio) -> u32 {
    if f.file_per_thread {
        f.threads
    } else {
        1
    }
}

fn write_pattern(p: &Path, size: u64) -> Result<()> {
    let mut f = File::create(p)?;
    let chunk: Vec<u8> = (0..1 << 20).map(|i: u32| (i % 251) as u8).collect();
    let mut left = size;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    Ok(())
}

fn make_files(dir: &Path, count: u32, size: u64) -> Result<()> {
    fs::create_dir_all(dir)?;
    let data = vec![b'x'; size as usize];
    for i in 0..count {
        let p = dir.join(format!("f{i}"));
        if !p.exists() {
            fs::write(&p, &data)?;
        }
    }
    Ok(())
}

/// Untimed set-up a run needs on the subject itself, before the measured
/// phase (and before its CPU time and request counts are taken): the files
/// of a "just created" phase are created through the mount.
pub fn populate(w: &Workload, dir: &Path) -> Result<()> {
    match &w.kind {
        Kind::Files(f) if f.dataset == FilesDataset::JustCreated => {
            let work = dataset_dir(dir, w);
            fs::create_dir_all(&work)?;
            match f.phase {
                FilesPhase::Create | FilesPhase::StatMissing => Ok(()),
                FilesPhase::Stat
                | FilesPhase::Read
                | FilesPhase::Delete
                | FilesPhase::Rewrite
                | FilesPhase::RenameIntoPlace => {
                    let data = vec![b'x'; f.file_size as usize];
                    let n = f.count / f.threads * f.threads;
                    (0..n).try_for_each(|i| create_file(&work.join(format!("f{i}")), &data))
                }
                FilesPhase::ListStat => bail!(
                    "{}: ls -l runs on a laid-out directory (FilesDataset::Backing)",
                    w.name
                ),
            }
        }
        // The index holds the backing directory's device and inode numbers:
        // one untimed status refreshes it for this mount.
        Kind::Tree {
            op: TreeOp::GitStatus,
            ..
        } => sh(&dataset_dir(dir, w), "git status --porcelain >/dev/null"),
        // The kernel learns every file (a LOOKUP each), so the server has
        // that many nodes to hand over.
        Kind::Replacement { inodes, .. } => {
            let work = dataset_dir(dir, w);
            for i in 0..*inodes {
                fs::metadata(work.join(format!("f{i}")))?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Run workload `w` once in `dir` (the subject's view of the backing dir);
/// [`populate`] first.
pub fn run(w: &Workload, dir: &Path) -> Result<Sample> {
    let work = dataset_dir(dir, w);
    match &w.kind {
        // timingfs serves its own read-only files at the root.
        Kind::Fio(f) if matches!(w.target, Target::TimingFs { .. } | Target::Later { .. }) => {
            run_fio_on(f, dir, Some("file0"))
        }
        // A block device: fio on the device node itself.
        Kind::Fio(f) if matches!(w.target, Target::Blk(_)) => {
            let (parent, name) = (dir.parent(), dir.file_name().and_then(|n| n.to_str()));
            match (parent, name) {
                (Some(p), Some(n)) => run_fio_on(f, p, Some(n)),
                _ => bail!("{} is not a device path", dir.display()),
            }
        }
        Kind::Fio(f) => run_fio(f, &work),
        Kind::Files(f) => run_files(f, &work),
        Kind::FxMark {
            bench,
            threads,
            runtime,
        } => run_fxmark(*bench, *threads, *runtime, &work),
        Kind::Latency { op, count } => run_latency(*op, *count, dir),
        Kind::Macro {
            personality,
            threads,
            files,
            runtime,
        } => crate::personality::run(*personality, *threads, *files, *runtime, &work),
        Kind::Replacement { how, probe, inodes } => {
            run_replacement(*how, *probe, *inodes, dir, &work)
        }
        Kind::Tree { op, runs, source } => run_tree(*op, *runs, *source, dir, &work),
        Kind::ReplaceSoak {
            duration,
            every,
            load,
        } => crate::soak::run(*duration, *every, *load, dir, &work),
        Kind::ReadSteps {
            reads, size, step, ..
        } => run_read_steps(&work.join("f0"), *reads, *size, *step),
    }
}

/// Run `probe` in a loop, replace the server once, and return the longest
/// gap between two completed probe calls, in microseconds.
fn run_replacement(
    how: Replacement,
    probe: Probe,
    inodes: u32,
    mnt: &Path,
    work: &Path,
) -> Result<Sample> {
    let fusebox = std::env::current_exe().context("locating the fusebox binary")?;
    let stats = |mnt: &Path| crate::soak::server_stats(&fusebox, mnt);
    let before = stats(mnt).context("reading the mount's stats")?;
    let generation = before
        .recovery
        .as_ref()
        .context("the mount is not supervised (no recovery)")?
        .generation;
    let stop = Arc::new(AtomicBool::new(false));
    let prober = {
        let (stop, work) = (stop.clone(), work.to_path_buf());
        std::thread::spawn(move || -> Result<(Vec<Instant>, u64)> {
            let mut done = Vec::with_capacity(1 << 20);
            let mut n = 0u64;
            let file = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(work.join("f0"))?;
            let mut buf = AlignedPage::new();
            while !stop.load(Ordering::Acquire) {
                match probe {
                    Probe::Stat => {
                        let p = work.join(format!("f{}", n % inodes as u64));
                        rustix::fs::statx(
                            rustix::fs::CWD,
                            &p,
                            rustix::fs::AtFlags::STATX_FORCE_SYNC,
                            rustix::fs::StatxFlags::BASIC_STATS,
                        )
                        .with_context(|| format!("statx {}", p.display()))?;
                    }
                    Probe::Read4k => {
                        let page: &mut [u8] = &mut buf.0;
                        rustix::io::pread(&file, page, 0).context("pread")?;
                    }
                }
                done.push(Instant::now());
                n += 1;
            }
            Ok((done, n))
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    match how {
        Replacement::Upgrade => {
            let out = Command::new(&fusebox).arg("upgrade").arg(mnt).output()?;
            if !out.status.success() {
                bail!("fusebox upgrade: {}", String::from_utf8_lossy(&out.stderr));
            }
        }
        Replacement::Crash => {
            rustix::process::kill_process(
                rustix::process::Pid::from_raw(before.pid as i32).context("server pid")?,
                rustix::process::Signal::KILL,
            )?;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while stats(mnt)
        .and_then(|s| s.recovery)
        .is_none_or(|r| r.generation <= generation)
    {
        if Instant::now() > deadline {
            bail!("no new server within 20 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Release);
    let (done, n) = prober
        .join()
        .map_err(|_| anyhow::anyhow!("probe thread panicked"))??;
    let longest = done
        .windows(2)
        .map(|w| w[1].duration_since(w[0]))
        .max()
        .unwrap_or_default();
    Ok(Sample {
        value: longest.as_secs_f64() * 1e6,
        workload_cpu_s: 0.0,
        ops: Some(n as f64),
    })
}

/// One page, aligned for O_DIRECT.
#[repr(C, align(4096))]
struct AlignedPage([u8; 4096]);

impl AlignedPage {
    fn new() -> Box<AlignedPage> {
        Box::new(AlignedPage([0; 4096]))
    }
}

fn run_fio(f: &Fio, dir: &Path) -> Result<Sample> {
    fs::create_dir_all(dir)?;
    run_fio_on(f, dir, None)
}

fn run_fio_on(f: &Fio, dir: &Path, file: Option<&str>) -> Result<Sample> {
    let names: Vec<String> = match file {
        Some(name) => vec![name.to_string()],
        None => (0..fio_files(f)).map(|i| format!("f{i}")).collect(),
    };
    let mut cmd = Command::new("fio");
    cmd.arg("--name=w")
        .arg(format!("--directory={}", dir.display()))
        .arg(format!("--rw={}", f.rw.fio_name()))
        .arg(format!("--bs={}", f.bs))
        .arg(format!("--size={}", f.size))
        .arg(format!("--numjobs={}", f.threads))
        .arg(format!("--runtime={}", f.runtime.as_secs_f64()))
        .arg("--group_reporting")
        .arg("--output-format=json")
        .arg(format!("--direct={}", u8::from(f.direct)));
    match f.async_depth {
        Some(depth) => cmd
            .arg("--ioengine=libaio")
            .arg(format!("--iodepth={depth}")),
        None => cmd.arg("--ioengine=psync"),
    };
    if f.once {
        // No preallocation either: on an object store it is a request or
        // a refusal, neither of which the workload asked for.
        cmd.arg("--fallocate=none");
    } else {
        cmd.arg("--time_based");
    }
    if f.rw.is_read() {
        cmd.arg("--readonly");
    }
    if f.file_per_thread && file.is_none() {
        // fio names a job's file <name>.<job>.0 by default; fix it to ours.
        cmd.arg("--filename_format=f$jobnum");
    } else {
        cmd.arg(format!("--filename={}", names[0]));
    }
    if f.fsync_at_end {
        cmd.arg("--end_fsync=1");
    }
    if f.fdatasync_every_write {
        cmd.arg("--fdatasync=1");
    }
    let start = Instant::now();
    let out = cmd
        .output()
        .context("running fio (install it with: apt-get install fio)")?;
    let wall = start.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "fio failed: {}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).context("parsing fio's JSON")?;
    let job = &v["jobs"][0];
    let side = if f.rw.is_read() { "read" } else { "write" };
    let ios = job[side]["total_ios"].as_f64();
    let iops = match (f.once, ios) {
        // Everything from the first request to the end fsync's return: an
        // upload at close counts.
        (true, Some(n)) => n / wall,
        _ => job[side]["iops"].as_f64().context("fio reported no iops")?,
    };
    let secs = job["job_runtime"].as_f64().unwrap_or(0.0) / 1000.0;
    let cpu = (job["usr_cpu"].as_f64().unwrap_or(0.0) + job["sys_cpu"].as_f64().unwrap_or(0.0))
        / 100.0
        * secs;
    Ok(Sample {
        value: iops,
        workload_cpu_s: cpu,
        ops: ios,
    })
}

/// CPU seconds this process has used, for in-process workloads.
fn self_cpu() -> f64 {
    crate::subject::process_cpu_seconds(std::process::id()).unwrap_or(0.0)
}

/// Run `per_thread(thread index)` on `threads` threads; returns the total
/// operations per second and CPU seconds.
pub(crate) fn parallel(
    threads: u32,
    per_thread: impl Fn(u32) -> Result<u64> + Sync,
) -> Result<Sample> {
    let cpu0 = self_cpu();
    let start = Instant::now();
    let ops = std::thread::scope(|s| {
        let per_thread = &per_thread;
        let handles: Vec<_> = (0..threads)
            .map(|t| s.spawn(move || per_thread(t)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("workload thread panicked"))
            .sum::<Result<u64>>()
    })?;
    let secs = start.elapsed().as_secs_f64();
    Ok(Sample {
        value: ops as f64 / secs,
        workload_cpu_s: self_cpu() - cpu0,
        ops: Some(ops as f64),
    })
}

/// The rewrite phase's operation: open O_WRONLY|O_TRUNC, one write, close.
/// No O_CREAT: a file missing from the population is an error, not a create.
fn rewrite_file(p: &Path, data: &[u8]) -> Result<()> {
    let mut file = OpenOptions::new()
        .truncate(true)
        .write(true)
        .open(p)
        .with_context(|| format!("rewriting {}", p.display()))?;
    file.write_all(data)?;
    Ok(())
}

/// The create phase's operation: open O_CREAT|O_TRUNC, one write, close.
fn create_file(p: &Path, data: &[u8]) -> Result<()> {
    let mut file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(p)?;
    file.write_all(data)?;
    Ok(())
}

fn run_files(f: &Files, dir: &Path) -> Result<Sample> {
    fs::create_dir_all(dir)?;
    let per = f.count / f.threads;
    let data = vec![b'x'; f.file_size as usize];
    if f.phase == FilesPhase::ListStat {
        return list_stat(dir);
    }
    parallel(f.threads, |t| {
        let mut buf = vec![0u8; f.file_size as usize + 1];
        for i in t * per..(t + 1) * per {
            let p = dir.join(format!("f{i}"));
            match f.phase {
                FilesPhase::Create => create_file(&p, &data)?,
                FilesPhase::Rewrite => rewrite_file(&p, &data)?,
                FilesPhase::Stat => {
                    fs::metadata(&p)?;
                }
                FilesPhase::Read => {
                    // One read of the whole (small) file, as Vangoor's files-rd.
                    let n = File::open(&p)?.read(&mut buf)?;
                    if n as u64 != f.file_size {
                        bail!("{}: read {n} bytes, expected {}", p.display(), f.file_size);
                    }
                }
                FilesPhase::Delete => fs::remove_file(&p)?,
                FilesPhase::RenameIntoPlace => {
                    let tmp = dir.join(format!("f{i}.tmp"));
                    let mut f = File::create(&tmp)?;
                    f.write_all(&data)?;
                    f.sync_all()?;
                    drop(f);
                    fs::rename(&tmp, &p)?;
                }
                FilesPhase::StatMissing => {
                    let missing = dir.join(format!("missing{}", i % 1000));
                    match fs::symlink_metadata(&missing) {
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        other => bail!("{}: expected ENOENT, got {other:?}", missing.display()),
                    }
                }
                FilesPhase::ListStat => unreachable!("handled above"),
            }
        }
        Ok(per as u64)
    })
}

/// `ls -l`: one listing, then an lstat of every entry; ops = entries.
fn list_stat(dir: &Path) -> Result<Sample> {
    parallel(1, |_| {
        let mut n = 0;
        for e in fs::read_dir(dir)? {
            fs::symlink_metadata(e?.path())?;
            n += 1;
        }
        Ok(n)
    })
}

/// FxMark: each thread repeats its operation until the runtime ends.
fn run_fxmark(bench: FxMark, threads: u32, runtime: Duration, dir: &Path) -> Result<Sample> {
    use FxMark::*;
    fs::create_dir_all(dir)?;
    let shared = dir.join("shared");
    fs::create_dir_all(&shared)?;
    let private = |t: u32| dir.join(format!("t{t}"));
    // Datasets for the read and unlink variants.
    const LIST_FILES: u32 = 1000;
    const UNLINK_FILES: u32 = 20_000;
    match bench {
        Mrdl => (0..threads).try_for_each(|t| make_files(&private(t), LIST_FILES, 0))?,
        Mrdm => make_files(&shared, LIST_FILES, 0)?,
        Mwul => {
            (0..threads).try_for_each(|t| make_files(&private(t), UNLINK_FILES / threads, 0))?
        }
        Mwum => make_files(&shared, UNLINK_FILES, 0)?,
        Mrpl => (0..threads).try_for_each(|t| make_files(&private(t).join("a/b/c"), 1, 0))?,
        Mrpm => make_files(&shared.join("a/b/c"), threads, 0)?,
        Mrph => make_files(&shared.join("a/b/c"), 1, 0)?,
        Mwcl => (0..threads).try_for_each(|t| fs::create_dir_all(private(t)))?,
        Mwcm => {}
    }
    let stop = Arc::new(AtomicBool::new(false));
    let timer = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            std::thread::sleep(runtime);
            stop.store(true, Ordering::Relaxed);
        })
    };
    let counter = AtomicU64::new(0);
    let r = parallel(threads, |t| {
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) {
            match bench {
                Mwcl => {
                    File::create(private(t).join(format!("n{n}")))?;
                }
                Mwcm => {
                    let id = counter.fetch_add(1, Ordering::Relaxed);
                    File::create(shared.join(format!("n{id}")))?;
                }
                Mrdl => {
                    fs::read_dir(private(t))?.count();
                }
                Mrdm => {
                    fs::read_dir(&shared)?.count();
                }
                Mwul => {
                    if fs::remove_file(private(t).join(format!("f{n}"))).is_err() {
                        break;
                    }
                }
                Mwum => {
                    let id = counter.fetch_add(1, Ordering::Relaxed);
                    if fs::remove_file(shared.join(format!("f{id}"))).is_err() {
                        break;
                    }
                }
                Mrpl => {
                    File::open(private(t).join("a/b/c/f0"))?;
                }
                Mrpm => {
                    File::open(shared.join(format!("a/b/c/f{t}")))?;
                }
                Mrph => {
                    File::open(shared.join("a/b/c/f0"))?;
                }
            }
            n += 1;
        }
        Ok(n)
    });
    stop.store(true, Ordering::Relaxed);
    let _ = timer.join();
    r
}

/// Median latency of one operation, in microseconds.
fn run_latency(op: LatencyOp, count: u32, dir: &Path) -> Result<Sample> {
    let cpu0 = self_cpu();
    let mut times = Vec::with_capacity(count as usize);
    for i in 0..count {
        let t = Instant::now();
        match op {
            LatencyOp::Create => {
                OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .write(true)
                    .mode(0o644)
                    .open(dir.join(format!("lat{i}")))?;
            }
            LatencyOp::Getattr => {
                fs::metadata(dir)?;
            }
        }
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    if op == LatencyOp::Create {
        for i in 0..count {
            let _ = fs::remove_file(dir.join(format!("lat{i}")));
        }
    }
    Ok(Sample {
        value: crate::results::median(&times).unwrap_or(0.0),
        workload_cpu_s: self_cpu() - cpu0,
        ops: Some(times.len() as f64),
    })
}
