//! What one blocking round trip between two processes costs on this
//! machine: a byte through a pipe to a child that echoes it back (`cat`),
//! with both on one CPU and on two. A FUSE request that the kernel cannot
//! answer itself (no cache hit, no passthrough) is such an exchange between
//! the application and the daemon plus the work on both sides; when both
//! sides block, this is what it costs at least. (A daemon that spins needs
//! no wake-up of its own, so a request can come in under the two-CPU
//! figure, never under half of it.) On a virtual machine it is dominated by
//! context switches and by waking a halted virtual CPU. Measured before the
//! workloads, shown with the machine in the report.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rustix::process::{kill_process, Pid, Signal};
use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

use crate::results::{median, RoundTrip};

/// Batches per placement (the median of their means is kept).
const BATCHES: usize = 5;
/// Round trips per batch in a bench run.
pub const PER_BATCH: u32 = 20_000;
/// A probe that takes longer has a stuck echo: it is killed.
const DEADLINE: Duration = Duration::from_secs(60);

/// Measure on a thread of its own, so pinning it leaves the caller alone.
pub fn measure(per_batch: u32) -> Result<RoundTrip> {
    let (pid_tx, pid_rx) = mpsc::channel();
    let probe = std::thread::spawn(move || measure_here(per_batch, pid_tx));
    let started = Instant::now();
    let pid = pid_rx
        .recv_timeout(DEADLINE)
        .context("the round-trip probe did not start its echo")?;
    while !probe.is_finished() {
        if started.elapsed() > DEADLINE {
            // End of file on its stdout then ends the probe with an error.
            if let Some(pid) = Pid::from_raw(pid) {
                let _ = kill_process(pid, Signal::KILL);
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    probe
        .join()
        .map_err(|_| anyhow::anyhow!("the round-trip probe panicked"))?
}

fn measure_here(per_batch: u32, pid_tx: mpsc::Sender<i32>) -> Result<RoundTrip> {
    let allowed = sched_getaffinity(None).context("reading this thread's CPUs")?;
    let cpus: Vec<usize> = (0..CpuSet::MAX_CPU)
        .filter(|&c| allowed.is_set(c))
        .collect();
    let Some(&first) = cpus.first() else {
        bail!("this thread may run on no CPU");
    };
    let mut echo = Echo::spawn()?;
    let _ = pid_tx.send(i32::try_from(echo.child.id()).context("pid out of range")?);
    let same_cpu_us = echo.median_us(first, first, per_batch)?;
    let cross_cpu_us = match cpus.get(1) {
        Some(&second) => Some(echo.median_us(first, second, per_batch)?),
        None => None,
    };
    Ok(RoundTrip {
        same_cpu_us,
        cross_cpu_us,
    })
}

/// `cat` between two pipes: it reads whatever is there (one byte) and
/// writes it back at once.
struct Echo {
    child: Child,
}

impl Echo {
    fn spawn() -> Result<Echo> {
        let child = Command::new("cat")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("starting cat for the round-trip probe")?;
        Ok(Echo { child })
    }

    /// Median over batches of the mean round trip, with this thread on
    /// `here` and the echo on `there`.
    fn median_us(&mut self, here: usize, there: usize, per_batch: u32) -> Result<f64> {
        pin(None, here)?;
        pin(Some(self.child.id()), there)?;
        let stdin = self.child.stdin.as_mut().context("cat's stdin")?;
        let stdout = self.child.stdout.as_mut().context("cat's stdout")?;
        let mut byte = [0u8; 1];
        let mut once = || -> Result<()> {
            stdin.write_all(&byte)?;
            stdout
                .read_exact(&mut byte)
                .context("the echo stopped answering")
        };
        // Warm up: both processes scheduled where asked, caches hot.
        for _ in 0..per_batch / 10 {
            once()?;
        }
        let mut means = Vec::with_capacity(BATCHES);
        for _ in 0..BATCHES {
            let t = Instant::now();
            for _ in 0..per_batch {
                once()?;
            }
            means.push(t.elapsed().as_secs_f64() * 1e6 / f64::from(per_batch));
        }
        median(&means).context("no batches")
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn pin(pid: Option<u32>, cpu: usize) -> Result<()> {
    let mut set = CpuSet::new();
    set.set(cpu);
    let pid = match pid {
        Some(p) => {
            Some(Pid::from_raw(i32::try_from(p).context("pid out of range")?).context("pid 0")?)
        }
        None => None,
    };
    sched_setaffinity(pid, &set).with_context(|| format!("pinning to CPU {cpu}"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_round_trip_is_measured_on_one_cpu_and_across() {
        let r = super::measure(500).expect("probe");
        // A round trip needs two context switches: never free, and on no
        // machine anywhere near ten milliseconds.
        let plausible = |us: f64| us > 0.05 && us < 10_000.0;
        assert!(plausible(r.same_cpu_us), "{r:?}");
        assert!(r.cross_cpu_us.is_none_or(plausible), "{r:?}");
    }
}
