//! Subjects: the filesystems a workload runs on. Each mounts over the same
//! backing directory, so every subject sees the same dataset.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::results::SubjectInfo;

/// A subject mounted and ready for a workload. Dropping it unmounts.
pub struct Mounted {
    /// Where the workload runs.
    pub dir: PathBuf,
    /// The daemon's pid, for its CPU time (None for native).
    pub daemon_pid: Option<u32>,
    /// Set for fusebox subjects: `fusebox stats` reads this mountpoint.
    pub fusebox_mount: Option<PathBuf>,
    child: Option<Child>,
    unmount: Option<PathBuf>,
    /// Run first when dropped (block devices: detach, stop the server).
    cleanup: Option<Box<dyn FnOnce() + Send>>,
    /// Direct mode: nothing is mounted; the workload runs in a process
    /// started this way, which serves `dir` to itself.
    pub direct: Option<crate::direct::DirectLaunch>,
    /// Counters kept outside the subject, read before and after each run
    /// (the SFTP requests a server received, by type).
    pub counters: Option<Counters>,
    /// A subject that is no filesystem (a bench's own client of a remote
    /// store) runs the workload itself, given its dataset directory's
    /// path relative to the backing directory.
    pub runner: Option<SelfRunner>,
}

/// See [`Mounted::runner`].
pub type SelfRunner = std::sync::Arc<
    dyn Fn(&crate::workload::Workload, &Path) -> Result<crate::engine::Sample> + Send + Sync,
>;

/// Reads counters that only grow; the runner keeps each run's difference.
pub type Counters =
    std::sync::Arc<dyn Fn() -> std::collections::BTreeMap<String, f64> + Send + Sync>;

impl Mounted {
    pub fn native(dir: &Path) -> Mounted {
        Mounted {
            dir: dir.to_path_buf(),
            daemon_pid: None,
            fusebox_mount: None,
            child: None,
            unmount: None,
            cleanup: None,
            direct: None,
            counters: None,
            runner: None,
        }
    }

    /// Direct mode at `dir` (see `crate::direct`).
    pub fn direct(dir: &Path, launch: crate::direct::DirectLaunch) -> Mounted {
        let mut m = Mounted::native(dir);
        m.direct = Some(launch);
        m
    }

    /// Something set up outside the daemon model (a loop device over a
    /// served file): `cleanup` undoes it when dropped.
    pub fn with_cleanup(
        dir: &Path,
        daemon_pid: Option<u32>,
        fusebox_mount: Option<PathBuf>,
        cleanup: impl FnOnce() + Send + 'static,
    ) -> Mounted {
        Mounted {
            dir: dir.to_path_buf(),
            daemon_pid,
            fusebox_mount,
            child: None,
            unmount: None,
            cleanup: Some(Box::new(cleanup)),
            direct: None,
            counters: None,
            runner: None,
        }
    }

    /// A daemon process serving `mnt`; it is unmounted and reaped on drop.
    pub fn daemon(mnt: &Path, child: Child) -> Mounted {
        Mounted {
            dir: mnt.to_path_buf(),
            daemon_pid: Some(child.id()),
            fusebox_mount: None,
            child: Some(child),
            unmount: Some(mnt.to_path_buf()),
            cleanup: None,
            direct: None,
            counters: None,
            runner: None,
        }
    }

    /// CPU seconds (user + system) the daemon has used so far.
    /// A supervised fusebox mount serves from a child of the process the
    /// bench started, so the daemon is that process and its descendants.
    pub fn daemon_cpu_seconds(&self) -> Option<f64> {
        let pid = self.daemon_pid?;
        Some(
            process_tree(pid)
                .into_iter()
                .filter_map(process_cpu_seconds)
                .sum(),
        )
    }

    /// The daemon's peak resident memory so far, in bytes: the sum over
    /// its processes of each one's high-water mark (VmHWM).
    pub fn daemon_peak_rss(&self) -> Option<u64> {
        let pid = self.daemon_pid?;
        Some(
            process_tree(pid)
                .into_iter()
                .filter_map(process_peak_rss)
                .sum(),
        )
    }

    /// Context switches of the daemon's threads so far.
    pub fn daemon_ctx_switches(&self) -> Option<u64> {
        let pid = self.daemon_pid?;
        Some(
            process_tree(pid)
                .into_iter()
                .filter_map(process_ctx_switches)
                .sum(),
        )
    }
}

/// A process's peak resident set (VmHWM of /proc/PID/status), in bytes.
pub fn process_peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kib * 1024)
}

/// Voluntary and involuntary context switches of every thread of `pid`,
/// from /proc/PID/task/*/status. Threads that exited are not counted, which
/// is fine for daemons whose serving threads live as long as the mount.
pub fn process_ctx_switches(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0;
    for t in tasks.flatten() {
        let Ok(status) = std::fs::read_to_string(t.path().join("status")) else {
            continue;
        };
        for line in status.lines() {
            if let Some(v) = line
                .strip_prefix("voluntary_ctxt_switches:")
                .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
            {
                total += v.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    Some(total)
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(cleanup) = self.cleanup.take() {
            cleanup();
        }
        if let Some(mnt) = self.unmount.take() {
            let _ = fusebox::mount::unmount_path(&mnt, false);
        }
        if let Some(mut child) = self.child.take() {
            // A lazily unmounted daemon exits by itself; give it a moment.
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// user+system CPU seconds of a process, from /proc/PID/stat.
/// `pid` and its live descendants (from /proc/PID/task/*/children).
pub fn process_tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        let p = all[i];
        if let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) {
            for t in tasks.flatten() {
                if let Ok(c) = std::fs::read_to_string(t.path().join("children")) {
                    all.extend(c.split_whitespace().filter_map(|x| x.parse::<u32>().ok()));
                }
            }
        }
        i += 1;
    }
    all
}

pub fn process_cpu_seconds(pid: u32) -> Option<f64> {
    // utime and stime are fields 14 and 15 of the whole line.
    stat_seconds(pid, 11)
}

/// CPU seconds of the children `pid` has waited for (cutime + cstime).
pub fn children_cpu_seconds(pid: u32) -> Option<f64> {
    stat_seconds(pid, 13)
}

/// Two clock-tick fields of /proc/PID/stat, from `at` counted after the
/// ")" that closes the command name, in seconds.
fn stat_seconds(pid: u32, at: usize) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(at)?.parse::<f64>().ok()? + f.get(at + 1)?.parse::<f64>().ok()?;
    Some(ticks / clock_ticks_per_second())
}

fn clock_ticks_per_second() -> f64 {
    // Linux has used USER_HZ = 100 on every architecture for decades.
    100.0
}

/// Wait until `mnt` shows up in mountinfo (a FUSE mount), or the daemon dies.
pub fn wait_for_mount(mnt: &Path, child: &mut Child, timeout: Duration) -> Result<()> {
    let canon = std::fs::canonicalize(mnt).unwrap_or(mnt.to_path_buf());
    let deadline = Instant::now() + timeout;
    loop {
        if fusebox::mount::fuse_mounts()
            .iter()
            .any(|m| m.mountpoint == canon)
        {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!("the daemon exited before mounting ({status})");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("{} did not mount within {timeout:?}", mnt.display());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Start `cmd` as a daemon serving `mnt` and wait for the mount.
pub fn spawn_daemon(mut cmd: Command, mnt: &Path) -> Result<Mounted> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))?;
    wait_for_mount(mnt, &mut child, Duration::from_secs(20))?;
    Ok(Mounted::daemon(mnt, child))
}

/// `rclone mount REMOTE MNT` with a fresh cache and an empty config in
/// `workdir` (each run starts cold, as the other subjects do), the
/// given VFS cache mode, errors only in its log; the caller adds the
/// backend's flags.
pub fn rclone_mount(workdir: &Path, remote: &str, mnt: &Path, cache_mode: &str) -> Result<Command> {
    let cache = workdir.join("rclone-cache");
    if cache.exists() {
        std::fs::remove_dir_all(&cache)?;
    }
    let conf = workdir.join("rclone.conf");
    std::fs::write(&conf, "")?;
    let mut c = Command::new("rclone");
    c.arg("mount")
        .arg(remote)
        .arg(mnt)
        .args(["--vfs-cache-mode", cache_mode, "--log-level", "ERROR"])
        .arg("--cache-dir")
        .arg(&cache)
        .arg("--config")
        .arg(&conf);
    Ok(c)
}

/// `program`'s path on `PATH`, if it is installed.
pub fn which(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// A filesystem under test.
pub trait Subject: Send {
    fn info(&self) -> SubjectInfo;
    /// Build or locate what the subject needs, once per run. An error makes
    /// the subject unavailable, with the error as the reason shown.
    fn prepare(&mut self, workdir: &Path) -> Result<()>;
    /// Serve `backing` at `mnt` (native ignores `mnt`).
    fn mount(&self, backing: &Path, mnt: &Path) -> Result<Mounted>;
    /// The same subject served by another fusebox build, its name with
    /// `suffix` (fusebox subjects only). It counts as a peer in the report,
    /// so the ratios compare this build with that one.
    fn on_binary(&self, _bin: &Path, _suffix: &str) -> Option<Box<dyn Subject>> {
        None
    }
    /// Whether the subject runs workload `w` at all (a client that is no
    /// filesystem runs only transfers); a row shows "-" where not.
    fn runs(&self, _w: &crate::workload::Workload) -> bool {
        true
    }
    /// Brings what the subject serves up to date with the backing
    /// directory's `paths` (see [`crate::engine::dataset_paths`]) before
    /// each run, untimed: for subjects serving a copy of it (an object
    /// store), not the directory itself.
    fn before_run(&self, _backing: &Path, _paths: &[PathBuf]) -> Result<()> {
        Ok(())
    }
}

/// A subject that cannot run here, and why (shown in the report).
pub struct Unavailable {
    pub name: String,
    pub description: String,
    pub reason: String,
}

impl Subject for Unavailable {
    fn info(&self) -> SubjectInfo {
        SubjectInfo {
            name: self.name.clone(),
            description: self.description.clone(),
            is_fusebox: true,
            ..Default::default()
        }
    }
    fn prepare(&mut self, _: &Path) -> Result<()> {
        anyhow::bail!("{}", self.reason)
    }
    fn mount(&self, _: &Path, _: &Path) -> Result<Mounted> {
        anyhow::bail!("{}", self.reason)
    }
}

/// The backing directory itself.
pub struct Native;

impl Subject for Native {
    fn info(&self) -> SubjectInfo {
        SubjectInfo {
            name: "native".into(),
            description: "the backing directory, no FUSE".into(),
            ..Default::default()
        }
    }
    fn prepare(&mut self, _: &Path) -> Result<()> {
        Ok(())
    }
    fn mount(&self, backing: &Path, _: &Path) -> Result<Mounted> {
        Ok(Mounted::native(backing))
    }
}

/// A fusebox example filesystem served by the `fusebox` binary.
#[derive(Clone)]
pub struct Fusebox {
    pub name: String,
    pub description: String,
    /// The peer subject configured like this one, if any.
    pub matches: Option<String>,
    /// `stackfs`, `nullfs`, `timingfs`, ...
    pub fs: String,
    /// Extra `fusebox mount` arguments (transport, -o options).
    pub args: Vec<String>,
    /// The fs takes the backing directory as its source.
    pub takes_source: bool,
    pub needs_uring: bool,
    pub binary: PathBuf,
    /// Another build's, run beside this one (`BenchOptions::baseline_bin`).
    pub baseline: bool,
}

impl Subject for Fusebox {
    fn info(&self) -> SubjectInfo {
        SubjectInfo {
            name: self.name.clone(),
            description: self.description.clone(),
            is_fusebox: !self.baseline,
            matches: self.matches.clone(),
            ..Default::default()
        }
    }
    fn on_binary(&self, bin: &Path, suffix: &str) -> Option<Box<dyn Subject>> {
        Some(Box::new(Fusebox {
            name: format!("{}{suffix}", self.name),
            description: format!("{} (baseline build {})", self.description, bin.display()),
            matches: None,
            binary: bin.to_path_buf(),
            baseline: true,
            ..self.clone()
        }))
    }
    fn prepare(&mut self, _: &Path) -> Result<()> {
        if self.needs_uring {
            fusebox::transport::uring::availability().map_err(anyhow::Error::msg)?;
        }
        if !self.binary.exists() {
            bail!("fusebox binary {} not found", self.binary.display());
        }
        Ok(())
    }
    fn mount(&self, backing: &Path, mnt: &Path) -> Result<Mounted> {
        let mut cmd = Command::new(&self.binary);
        cmd.args(["mount", &self.fs, "-f"]);
        if self.takes_source {
            cmd.arg(backing);
        }
        cmd.arg(mnt).args(&self.args);
        let mut m = spawn_daemon(cmd, mnt)?;
        m.fusebox_mount = Some(mnt.to_path_buf());
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_of_this_process_is_readable() {
        let t = process_cpu_seconds(std::process::id()).unwrap();
        assert!(t >= 0.0);
    }

    #[test]
    fn context_switches_of_a_process_grow_when_it_sleeps() {
        // Another process, single-threaded: this test process's threads
        // (other tests') come and go, and exited threads are not counted.
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                "read _ ; for i in 1 2 3 4 5 6 7 8; do sleep 0.01; done; read _",
            ])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let before = process_ctx_switches(child.id()).unwrap();
        use std::io::Write;
        stdin.write_all(b"go\n").unwrap();
        std::thread::sleep(Duration::from_millis(400));
        let after = process_ctx_switches(child.id()).unwrap();
        stdin.write_all(b"done\n").unwrap();
        child.wait().unwrap();
        // Waiting for each sleep is a voluntary switch at least.
        assert!(after >= before + 8, "{before} -> {after}");
    }

    #[test]
    fn a_process_tree_holds_its_children() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let tree = process_tree(std::process::id());
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(tree[0], std::process::id());
        assert!(tree.contains(&child.id()), "{tree:?}");
    }
}
