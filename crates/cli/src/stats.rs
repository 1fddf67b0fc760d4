//! `fusebox stats`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use fusebox::stats::{Snapshot, BINS};

#[derive(Args)]
pub struct StatsArgs {
    /// A mountpoint, or a block device fusebox serves (NAME, /dev/fusebox/NAME, /dev/loopN).
    pub mountpoint: PathBuf,
    /// Print the raw snapshot as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also print each type's latency histogram.
    #[arg(long)]
    pub histogram: bool,
}

fn fmt_ns(ns: u64) -> String {
    match ns {
        0..=9_999 => format!("{ns}ns"),
        10_000..=9_999_999 => format!("{:.1}us", ns as f64 / 1e3),
        _ => format!("{:.1}ms", ns as f64 / 1e6),
    }
}

pub fn run(mut args: StatsArgs) -> Result<()> {
    // A block device (NAME, /dev/fusebox/NAME, /dev/loopN): its mount.
    if !args.mountpoint.is_dir() {
        if let Some(r) = fusebox_blk::registry::find(&args.mountpoint.to_string_lossy()) {
            args.mountpoint = r.mountpoint;
        }
    }
    let snap = fusebox::stats::fetch(&args.mountpoint).with_context(|| {
        format!(
            "reading stats of {} (is a fusebox daemon serving it?)",
            args.mountpoint.display()
        )
    })?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&snap)?);
        return Ok(());
    }
    print!("{}", render(&snap, args.histogram));
    Ok(())
}

pub fn render(snap: &Snapshot, histogram: bool) -> String {
    let mut s = format!(
        "{}  pid {}  transport {} ({} workers)  protocol 7.{}  up {:.1}s\n\n",
        snap.mountpoint,
        snap.pid,
        snap.transport,
        snap.workers.len(),
        snap.proto_minor,
        snap.uptime_ms as f64 / 1e3
    );
    s += &format!(
        "{:<18} {:>12} {:>8} {:>10} {:>10} {:>10}\n",
        "REQUEST", "COUNT", "ERRORS", "MEAN", "P50<", "P99<"
    );
    let mut ops = snap.ops.clone();
    ops.sort_by_key(|o| std::cmp::Reverse(o.count));
    for o in &ops {
        s += &format!(
            "{:<18} {:>12} {:>8} {:>10} {:>10} {:>10}\n",
            o.name,
            o.count,
            o.errors,
            fmt_ns(o.mean_ns()),
            fmt_ns(o.quantile_ns(0.5)),
            fmt_ns(o.quantile_ns(0.99))
        );
        if histogram {
            let max = o.bins.iter().copied().max().unwrap_or(0).max(1);
            for (i, &n) in o.bins.iter().enumerate().take(BINS) {
                if n > 0 {
                    let bar = "#".repeat(((n * 40).div_ceil(max)) as usize);
                    s += &format!(
                        "    {:>9}..{:<9} {:>10} {}\n",
                        fmt_ns(1 << (i + 1)),
                        fmt_ns(1 << (i + 2)),
                        n,
                        bar
                    );
                }
            }
        }
    }
    let per: Vec<String> = snap
        .workers
        .iter()
        .map(|w| format!("{} {}", w.label, w.requests))
        .collect();
    s += &format!("\nserved by: {}\n", per.join(", "));
    let l = &snap.later;
    s += &format!(
        "in flight: {} now, {} at peak; answered later: {} taken, {} pending, {} dropped (EIO){}\n",
        l.in_flight,
        l.in_flight_peak,
        l.taken,
        l.pending,
        l.dropped,
        if l.mismatched > 0 {
            format!(", {} of the wrong kind (EIO)", l.mismatched)
        } else {
            String::new()
        }
    );
    if let Some(r) = &snap.recovery {
        s += &format!(
            "recovery: server generation {}, {} restarts, {} replays answered, last pause {:.1} ms, {} nodes recorded\n",
            r.generation,
            r.restarts,
            r.replays,
            r.last_pause_us as f64 / 1e3,
            r.nodes
        );
        if !r.status.is_empty() {
            s += &format!("recovery status: {}\n", r.status);
        }
    }
    for line in fusebox::stats::counter_lines(&snap.filesystem) {
        s += &format!("filesystem {line}\n");
    }
    s += &format!(
        "total {} requests{}; flags: {}\n",
        snap.total_requests(),
        if snap.recovery.is_some() {
            " (every server generation; a crash may lose its last second)"
        } else {
            ""
        },
        snap.flags.join(" ")
    );
    s
}
