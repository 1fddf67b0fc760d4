//! The long versions of the tests' "replace the server during writes": a
//! supervised mount's server is killed (SIGKILL) and upgraded (`fusebox
//! upgrade`) in turn, every few seconds, for a minute, while a load runs.
//! - Copies: files are copied in a loop; once the mount says nothing is
//!   waiting to be stored, every file is read back and compared.
//! - fio verify: fio's write-then-verify runs one after another, each
//!   block's crc32c checked.
//!
//! A request that fails, a replacement that does not come back, or a byte
//! that is wrong fails the run: the figure is the load's rate while the
//! server kept being replaced.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use fusebox::stats::Snapshot;

use crate::engine::Sample;
use crate::workload::SoakLoad;

/// Different files, so a file put together from the wrong pieces, or
/// under another's name, is told apart.
const SOURCES: usize = 6;

/// The writer's pace at most: a mount that closes files before they
/// are stored (objfs's `upload=behind`) would otherwise take gigabytes a
/// minute into its staging area and spend minutes storing them after.
const MAX_FILES_PER_SECOND: f64 = 10.0;

/// How long a new server may take to come up after a replacement.
const REPLACED_WITHIN: Duration = Duration::from_secs(20);

/// How long the mount may take, after the writes, to store what waits.
const STORED_WITHIN: Duration = Duration::from_secs(300);

/// `fusebox stats --json` of the mount, if its server answers.
pub fn server_stats(fusebox: &Path, mnt: &Path) -> Option<Snapshot> {
    let out = Command::new(fusebox)
        .args(["stats", "--json"])
        .arg(mnt)
        .output()
        .ok()?;
    serde_json::from_slice(&out.stdout).ok()
}

/// `len` bytes that differ from file to file (`seed`) and from run to run.
fn source(seed: u64, len: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    let mut out = Vec::with_capacity(len as usize + 8);
    while (out.len() as u64) < len {
        // xorshift64: enough to make every file and part of it distinct.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len as usize);
    out
}

/// The soak in `work` (a directory of the mount at `mnt`).
pub fn run(
    duration: Duration,
    every: Duration,
    load: SoakLoad,
    mnt: &Path,
    work: &Path,
) -> Result<Sample> {
    let fusebox = std::env::current_exe().context("locating the fusebox binary")?;
    std::fs::create_dir_all(work)?;
    let first = server_stats(&fusebox, mnt).context("reading the mount's stats")?;
    first
        .recovery
        .as_ref()
        .context("the mount is not supervised (no recovery)")?;
    match load {
        SoakLoad::Copies { file_bytes } => copies(&fusebox, duration, every, file_bytes, mnt, work),
        SoakLoad::FioVerify => fio_verify(&fusebox, duration, every, mnt, work),
    }
}

/// Replaces the server every `every` until `duration` has passed or
/// `load` has ended (failed), then stops `load` and returns what it
/// returned, or the first failed replacement.
fn replacing_during<T: Send + 'static>(
    fusebox: &Path,
    mnt: &Path,
    duration: Duration,
    every: Duration,
    load: impl FnOnce(Arc<AtomicBool>) -> Result<T> + Send + 'static,
) -> Result<(T, u32, Duration)> {
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let stop = stop.clone();
        std::thread::spawn(move || load(stop))
    };
    let start = Instant::now();
    let mut replacements = 0u32;
    let mut failure = None;
    loop {
        // On a fixed schedule: a slow replacement does not stretch the
        // next interval.
        let due = start + every * (replacements + 1);
        if due >= start + duration || worker.is_finished() {
            break;
        }
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        if let Err(e) = replace(fusebox, mnt, replacements.is_multiple_of(2)) {
            failure = Some(e.context(format!("replacement {}", replacements + 1)));
            break;
        }
        replacements += 1;
    }
    stop.store(true, Ordering::Release);
    let elapsed = start.elapsed();
    let done = worker
        .join()
        .map_err(|_| anyhow::anyhow!("the load's thread panicked"))??;
    if let Some(e) = failure {
        return Err(e);
    }
    if replacements == 0 {
        bail!("the server was never replaced");
    }
    Ok((done, replacements, elapsed))
}

/// Files copied in while the server is replaced, then read back.
fn copies(
    fusebox: &Path,
    duration: Duration,
    every: Duration,
    file_bytes: u64,
    mnt: &Path,
    work: &Path,
) -> Result<Sample> {
    let sources: Arc<Vec<Vec<u8>>> =
        Arc::new((0..SOURCES as u64).map(|i| source(i, file_bytes)).collect());
    let writer = {
        let (work, sources) = (work.to_path_buf(), sources.clone());
        move |stop: Arc<AtomicBool>| -> Result<Vec<(PathBuf, usize)>> {
            let mut written = Vec::new();
            let mut round = 0;
            let began = Instant::now();
            while !stop.load(Ordering::Acquire) {
                round += 1;
                for (i, data) in sources.iter().enumerate() {
                    let due = began
                        + Duration::from_secs_f64(written.len() as f64 / MAX_FILES_PER_SECOND);
                    std::thread::sleep(due.saturating_duration_since(Instant::now()));
                    let p = work.join(format!("r{round}-{i}"));
                    std::fs::write(&p, data)
                        .with_context(|| format!("writing {} (a failed request)", p.display()))?;
                    written.push((p, i));
                }
            }
            Ok(written)
        }
    };
    let (written, replacements, elapsed) = replacing_during(fusebox, mnt, duration, every, writer)?;
    wait_until_stored(fusebox, mnt)?;
    // Read back from the store, not from the kernel's copy of the pages
    // just written (where the caches can be dropped: root).
    let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
    for (p, i) in &written {
        let got = std::fs::read(p).with_context(|| format!("reading {} back", p.display()))?;
        if got != sources[*i] {
            bail!(
                "{} is not what was written ({} bytes, {} expected)",
                p.display(),
                got.len(),
                sources[*i].len()
            );
        }
    }
    let listed = std::fs::read_dir(work)?.count();
    if listed != written.len() {
        bail!("{listed} files listed, {} written", written.len());
    }
    tracing::info!(
        "soak: {} files in {:.1} s, {replacements} replacements, all read back whole",
        written.len(),
        elapsed.as_secs_f64()
    );
    Ok(Sample {
        value: written.len() as f64 / elapsed.as_secs_f64(),
        workload_cpu_s: 0.0,
        ops: Some(written.len() as f64),
    })
}

/// fio's write-then-verify runs, one after another, while the server is
/// replaced: every run must end with no I/O error and every block's
/// crc32c as written.
fn fio_verify(
    fusebox: &Path,
    duration: Duration,
    every: Duration,
    mnt: &Path,
    work: &Path,
) -> Result<Sample> {
    let work = work.to_path_buf();
    let runs = move |stop: Arc<AtomicBool>| -> Result<(u64, u32)> {
        let (mut writes, mut runs) = (0u64, 0u32);
        while !stop.load(Ordering::Acquire) {
            writes += fio_verify_once(&work).with_context(|| {
                format!("fio run {} (after {writes} verified writes)", runs + 1)
            })?;
            runs += 1;
        }
        Ok((writes, runs))
    };
    let ((writes, runs), replacements, _) = replacing_during(fusebox, mnt, duration, every, runs)?;
    tracing::info!(
        "soak: {runs} fio runs, {writes} 4 KiB writes verified, {replacements} replacements"
    );
    // The last run ends after the replacements stop: the rate counts it
    // whole, over the whole time.
    Ok(Sample {
        value: writes as f64 / duration.as_secs_f64().max(1.0),
        workload_cpu_s: 0.0,
        ops: Some(writes as f64),
    })
}

/// One fio run of random 4 KiB writes by 4 jobs with every block read back
/// and its crc32c checked; returns the writes it verified.
fn fio_verify_once(dir: &Path) -> Result<u64> {
    let out = Command::new("fio")
        .args([
            "--name=verify",
            "--rw=randwrite",
            "--bs=4k",
            "--size=16M",
            "--numjobs=4",
            "--ioengine=psync",
            "--verify=crc32c",
            // No verify-state files left in the working directory.
            "--verify_state_save=0",
            "--do_verify=1",
            "--verify_fatal=1",
            "--group_reporting",
            "--output-format=json",
        ])
        .arg(format!("--directory={}", dir.display()))
        .output()
        .context("running fio (install it with: apt-get install fio)")?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let job = &v["jobs"][0];
    let error = job["error"].as_i64().unwrap_or(-1);
    if !out.status.success() || error != 0 {
        bail!(
            "fio failed (error {error}): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let writes = job["write"]["total_ios"]
        .as_u64()
        .context("fio reported no writes")?;
    Ok(writes)
}

/// Kills the server (`kill`) or upgrades it, and waits for the next.
fn replace(fusebox: &Path, mnt: &Path, kill: bool) -> Result<()> {
    let before = server_stats(fusebox, mnt).context("reading the mount's stats")?;
    let generation = before.recovery.as_ref().map_or(0, |r| r.generation);
    if kill {
        let pid = rustix::process::Pid::from_raw(before.pid as i32).context("server pid")?;
        rustix::process::kill_process(pid, rustix::process::Signal::KILL)
            .context("killing the server")?;
    } else {
        let out = Command::new(fusebox).arg("upgrade").arg(mnt).output()?;
        if !out.status.success() {
            bail!("fusebox upgrade: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
    let deadline = Instant::now() + REPLACED_WITHIN;
    while server_stats(fusebox, mnt)
        .and_then(|s| s.recovery)
        .is_none_or(|r| r.generation <= generation)
    {
        if Instant::now() > deadline {
            bail!("no new server within {} s", REPLACED_WITHIN.as_secs());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Waits until the filesystem reports no upload pending (its
/// `uploads.pending` counter; a filesystem without one has none).
fn wait_until_stored(fusebox: &Path, mnt: &Path) -> Result<()> {
    let deadline = Instant::now() + STORED_WITHIN;
    loop {
        let pending = server_stats(fusebox, mnt)
            .context("reading the mount's stats")?
            .filesystem
            .iter()
            .find(|c| c.name == "uploads.pending")
            .map_or(0, |c| c.value);
        if pending == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{pending} uploads still pending {} s after the writes",
                STORED_WITHIN.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
