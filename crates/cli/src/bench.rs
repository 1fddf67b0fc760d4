//! `fusebox bench`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use fusebox_bench::results::BenchResults;
use fusebox_bench::runner::{self, Backing, BenchOptions};

#[derive(Args)]
#[command(after_help = "\
SUITES: quick (about 5 minutes; the README's demo), vangoor, rfuse, xfuse, macro,
fastpath (the io_uring/passthrough targets), knobs (each round-trip setting on and
off, stackfs only), peer (fusebox against libfuse's own io_uring mode, matched and
best configurations, about 15 minutes), later, recovery, compat (unchanged
sshfs, squashfuse and fuse-overlayfs on Debian's libfuse3 and on fusebox's
drop-in), blk (block devices: fusebox's null and ram drivers beside a loop
device over tmpfs, nbdkit through nbdfuse and qemu-storage-daemon), direct (native vs stackfs through
the kernel vs stackfs in direct mode, `fusebox run --fs`), sftp (sftpfs vs Debian's
sshfs and rclone mount over OpenSSH on loopback behind a proxy adding 0, 10 and 50 ms
of round trip, SFTP requests counted at the server; about 2 hours), objfs (objfs vs
s3fs and rclone mount on a three-node Garage cluster, with the bench's own S3 client
as the limit, S3 requests counted at the cluster; needs Garage: scripts/objfs-cluster.sh), all.
SUBJECTS: native (the backing directory), libfuse's passthrough_hp over io_uring
with and without passthrough (built from --libfuse-src), libfuse 3.14 passthrough_ll,
fuser and go-fuse passthroughs (built on first use, cached in the work dir), fusebox stackfs
over classic, io_uring (normal and SCHED_IDLE queue threads), io_uring+passthrough,
and --exclusive caching with writeback or passthrough; nullfs and timingfs where a
workload calls for them. A subject that cannot be built or mounted is listed with
the reason. Results: a table here, and results.json + report.md + charts/ in --out.")]
pub struct BenchArgs {
    /// Which suite to run.
    #[arg(long, default_value = "quick")]
    pub suite: String,
    /// Shorthand for --suite quick.
    #[arg(long)]
    pub quick: bool,
    /// Repetitions per workload and subject (default: the suite's).
    #[arg(long)]
    pub reps: Option<u32>,
    /// Only workloads whose name contains one of these (comma-separated, e.g. objfs/stat,objfs/create)
    #[arg(long)]
    pub filter: Option<String>,
    /// Backing store: "tmpfs" (default) or a directory, e.g. one on ext4.
    #[arg(long, default_value = "tmpfs")]
    pub backing: String,
    /// Skip building and running libfuse, fuser and go-fuse.
    #[arg(long)]
    pub no_peers: bool,
    /// A libfuse source tree (a clone of libfuse, 3.19 or master) to build
    /// passthrough_hp from for the libfuse io_uring peers; built into the
    /// work dir. Without it those peers are listed as unavailable.
    #[arg(long, env = "FUSEBOX_LIBFUSE_SRC", value_name = "DIR")]
    pub libfuse_src: Option<PathBuf>,
    /// Where results.json, report.md and charts/ go.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Builds, mountpoints and the tmpfs backing live here.
    /// Another fusebox build (a binary) to run beside this one: each
    /// fusebox subject again, served by it, named with a `-base` suffix and
    /// counted as a peer, so the report compares the two builds in one run.
    #[arg(long, value_name = "FUSEBOX_BIN")]
    pub baseline: Option<PathBuf>,
    #[arg(long, default_value = "/var/tmp/fusebox-bench")]
    pub workdir: PathBuf,
    /// Also write the report into this source tree's docs/: benchmarks.md
    /// (+ benchmarks/) for the `all` suite, benchmarks-SUITE.md otherwise.
    #[arg(long)]
    pub publish: bool,
    /// Run nothing: render the report of a saved run (its results.json)
    /// again, e.g. after the report's text changed; with --publish, into
    /// docs/ under the saved run's suite.
    #[arg(long, value_name = "RESULTS_JSON", conflicts_with_all = ["quick", "reps", "filter", "libfuse_src"])]
    pub report_from: Option<PathBuf>,
}

pub fn run(args: BenchArgs) -> Result<()> {
    let results = match &args.report_from {
        Some(json) => {
            let text = std::fs::read_to_string(json)
                .with_context(|| format!("reading {}", json.display()))?;
            serde_json::from_str::<BenchResults>(&text).with_context(|| {
                format!("{} is not a fusebox bench results file", json.display())
            })?
        }
        None => run_suite(&args)?,
    };
    let suite = results.suite.clone();
    print!("{}", fusebox_bench::report::terminal_table(&results));
    write_reports(args, &results, &suite)
}

fn run_suite(args: &BenchArgs) -> Result<BenchResults> {
    let suite = if args.quick {
        "quick".to_string()
    } else {
        args.suite.clone()
    };
    let opts = BenchOptions {
        suite,
        workdir: args.workdir.clone(),
        backing: if args.backing == "tmpfs" {
            Backing::Tmpfs
        } else {
            Backing::Dir(args.backing.clone().into())
        },
        repetitions: args.reps,
        filter: args.filter.clone(),
        peers: !args.no_peers,
        libfuse_src: args.libfuse_src.clone(),
        fusebox_bin: std::env::current_exe().context("locating the fusebox binary")?,
        baseline_bin: args.baseline.clone(),
        progress: true,
    };
    runner::run(&opts).context("running the benchmark")
}

fn write_reports(args: BenchArgs, results: &BenchResults, suite: &str) -> Result<()> {
    let out = args.out.unwrap_or_else(|| {
        args.workdir
            .join("results")
            .join(format!("{suite}-{}", results.started.replace(':', "")))
    });
    let report = fusebox_bench::report::write_report(results, &out)
        .with_context(|| format!("writing the report to {}", out.display()))?;
    println!(
        "\nreport: {}\ndata:   {}",
        report.display(),
        out.join("results.json").display()
    );
    if args.publish {
        // `all` is the reference report; another suite gets a page of its
        // own beside it instead of replacing it.
        let name = match suite {
            "all" => "benchmarks".to_string(),
            other => format!("benchmarks-{other}"),
        };
        let docs = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs");
        let dir = docs.join(&name);
        let md = fusebox_bench::report::write_report(results, &dir)?;
        let text = std::fs::read_to_string(&md)?.replace("](charts/", &format!("]({name}/charts/"));
        let page = docs.join(format!("{name}.md"));
        std::fs::write(&page, text)?;
        std::fs::remove_file(md)?;
        println!("published: {}", page.display());
    }
    Ok(())
}
