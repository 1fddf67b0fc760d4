//! What one synchronous round trip between two processes costs on this
//! machine: a byte through a pipe to a child that echoes it back (`cat`),
//! with both on one CPU and on two. A FUSE request that the kernel cannot
//! answer itself (no cache hit, no passthrough) is such a round trip
//! between the application and the daemon, plus the work on both sides, so
//! this bounds from below what any FUSE framework can reach here; on a
//! virtual machine it is dominated by context switches and by waking a
//! halted virtual CPU. Measured, never assumed: the report shows it next to
//! the machine.

use std::io::{Read, Write};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use rustix::process::Pid;
use rustix::thread::{sched_getaffinity, sched_setaffinity, CpuSet};

use crate::results::{median, RoundTrip};

/// Round trips per timed batch, and batches per placement (median taken).
const PER_BATCH: u32 = 20_000;
const BATCHES: usize = 5;

/// Measure on a thread of its own, so pinning it leaves the caller alone.
pub fn measure() -> Result<RoundTrip> {
    std::thread::spawn(measure_here)
        .join()
        .map_err(|_| anyhow::anyhow!("the round-trip probe panicked"))?
}

fn measure_here() -> Result<RoundTrip> {
    let allowed = sched_getaffinity(None).context("reading this thread's CPUs")?;
    let cpus: Vec<usize> = (0..CpuSet::MAX_CPU)
        .filter(|&c| allowed.is_set(c))
        .collect();
    let Some(&first) = cpus.first() else {
        bail!("this thread may run on no CPU");
    };
    let mut echo = Echo::spawn()?;
    let same_cpu_us = echo.median_us(first, first)?;
    let cross_cpu_us = match cpus.get(1) {
        Some(&second) => Some(echo.median_us(first, second)?),
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
    fn median_us(&mut self, here: usize, there: usize) -> Result<f64> {
        pin(None, here)?;
        pin(Some(self.child.id()), there)?;
        let stdin = self.child.stdin.as_mut().context("cat's stdin")?;
        let stdout = self.child.stdout.as_mut().context("cat's stdout")?;
        let mut byte = [0u8; 1];
        let mut once = || -> Result<()> {
            stdin.write_all(&byte)?;
            stdout.read_exact(&mut byte)?;
            Ok(())
        };
        // Warm up: both processes scheduled where asked, caches hot.
        for _ in 0..PER_BATCH / 10 {
            once()?;
        }
        let mut means = Vec::with_capacity(BATCHES);
        for _ in 0..BATCHES {
            let t = Instant::now();
            for _ in 0..PER_BATCH {
                once()?;
            }
            means.push(t.elapsed().as_secs_f64() * 1e6 / f64::from(PER_BATCH));
        }
        median(&means).context("no batches")
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        // cat ends at end of input; kill only if it does not.
        drop(self.child.stdin.take());
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            std::thread::sleep(std::time::Duration::from_millis(20));
            if !matches!(self.child.try_wait(), Ok(Some(_))) {
                let _ = self.child.kill();
            }
        }
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
        let r = super::measure().expect("probe");
        // A round trip needs two context switches: never free, and on no
        // machine anywhere near a second.
        let plausible = |us: f64| us > 0.05 && us < 10_000.0;
        assert!(plausible(r.same_cpu_us), "{r:?}");
        assert!(r.cross_cpu_us.is_none_or(plausible), "{r:?}");
    }
}
