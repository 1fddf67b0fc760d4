//! `fusebox`: mount example filesystems, read live statistics, unmount.

mod bench;
mod blk;
mod daemon;
mod doctor;
mod generated;
mod helper;
mod mount;
mod run;
mod stats;

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "fusebox", version = VERSION, about = "Run filesystems in user space with fusebox", long_about = None)]
pub(crate) struct Cli {
    /// More log output (-v info, -vv debug, -vvv trace); RUST_LOG overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

/// The package version and the commit it was built from (build.rs).
pub(crate) const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("FUSEBOX_COMMIT"),
    ")"
);

#[derive(Subcommand)]
enum Command {
    /// Mount an example filesystem (runs in the background unless -f).
    Mount(mount::MountArgs),
    /// Unmount a fusebox (or any FUSE) mount.
    Umount {
        mountpoint: PathBuf,
        /// Abort the connection instead: pending requests fail with ENOTCONN.
        /// The way out when the daemon hangs.
        #[arg(long)]
        abort: bool,
    },
    /// Replace the server of a supervised mount without unmounting: the new
    /// one (this binary, or --binary) takes over once the old one has
    /// answered what it holds; if it fails, the old one goes on serving.
    Upgrade {
        mountpoint: PathBuf,
        /// The fusebox binary to serve from now on (default: the one
        /// serving now).
        #[arg(long)]
        binary: Option<PathBuf>,
    },
    /// Per-request-type counts and latency histograms of a running mount.
    Stats(stats::StatsArgs),
    /// List the FUSE mounts of this machine.
    List,
    /// Run an unchanged libfuse 3 program (sshfs, squashfuse, ...) on
    /// fusebox's drop-in libfuse3.so.3: `fusebox run -- sshfs host:/ /mnt`.
    Run(run::RunArgs),
    /// Block devices served by user-space drivers (ram, file, null,
    /// timing): create, list, replace, destroy.
    #[command(subcommand)]
    Blk(blk::BlkCommand),
    /// Run the papers' workloads on native, fusebox and peer frameworks
    /// side by side, and write a report.
    Bench(bench::BenchArgs),
    /// What this kernel and machine offer fusebox (protocol, io_uring,
    /// passthrough, fusectl, user mounts, ...) and what to do about each
    /// missing piece.
    Doctor(doctor::DoctorArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish,
    /// powershell) to stdout.
    Completions { shell: clap_complete::Shell },
    /// Write the man pages (fusebox.1 and one per command) into DIR.
    #[command(hide = true)]
    Man { dir: PathBuf },
    /// The server of a direct-mode run whose filesystem keeps its state in
    /// its process (`fusebox run --fs memfs` starts it).
    #[command(hide = true)]
    DirectServer {
        /// FS[:SOURCE], as `fusebox run --fs` took it.
        #[arg(long)]
        fs: String,
        /// The filesystem's -o options.
        #[arg(short = 'o')]
        options: Vec<String>,
        /// The door's descriptor, inherited.
        #[arg(long)]
        door: i32,
        /// Start the server in a process group of its own and return.
        #[arg(long)]
        detach: bool,
    },
    /// An OpenSSH server on loopback with throwaway keys in DIR, for
    /// scripts that test sftpfs (tests/pjdfstest.sh): writes DIR/ssh-options
    /// (the -o options that reach it) once it listens, and runs until
    /// stopped (SIGTERM, SIGINT), taking sshd with it.
    #[command(hide = true)]
    TestSshd {
        dir: PathBuf,
        /// Reach it through the bench's delay proxy adding this many
        /// milliseconds of round trip.
        #[arg(long, value_name = "MS")]
        added_rtt_ms: Option<u64>,
    },
    /// An sshd's `Subsystem sftp` for the sftp bench: runs SERVER, passing
    /// its stream through and counting the requests by type into
    /// DIR/PID.counts.
    #[command(hide = true)]
    SftpRelay {
        dir: PathBuf,
        #[arg(trailing_var_arg = true, required = true, num_args = 1..)]
        server: Vec<String>,
    },
    /// One workload of a suite, run in this process (the bench starts it
    /// under `fusebox run --fs` for the direct-mode subjects).
    #[command(hide = true)]
    BenchWorker {
        #[arg(long)]
        suite: String,
        #[arg(long)]
        workload: String,
        #[arg(long)]
        dir: PathBuf,
    },
}

fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
}

/// Errors are one line, `fusebox: what: why: ...` (anyhow's chain joined),
/// whatever RUST_BACKTRACE says: a backtrace is for developers, who can
/// ask for one with -vvv's logs or a debugger.
fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fusebox: {}", one_line(&e));
            std::process::ExitCode::FAILURE
        }
    }
}

/// clap's usage errors, on one line like every other error (help and
/// --version are printed as clap prints them): the message and its
/// details, without the usage block (`--help` has it).
fn usage_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind::*;
    if matches!(
        e.kind(),
        DisplayHelp | DisplayVersion | DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        e.exit();
    }
    let rendered = e.render().to_string();
    let parts: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:"))
        .filter(|l| !l.is_empty() && !l.starts_with("For more information"))
        .collect();
    eprintln!("fusebox: {}", parts.join(" ").trim_start_matches("error: "));
    std::process::exit(2);
}

/// The error and its causes joined by ": ", each cause left out if the
/// text so far already says it (many library errors print their source
/// in their own message too).
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let cause = cause.to_string();
        if line.contains(&cause) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&cause);
    }
    line
}

fn run() -> Result<()> {
    // Called by mount(8) as mount.fusebox or mount.fuse.fusebox-FS.
    if let Some(kind) = helper::called_as() {
        init_logging(0);
        return helper::run(kind);
    }
    let cli = Cli::try_parse().unwrap_or_else(|e| usage_error(e));
    init_logging(cli.verbose);
    match cli.command {
        Command::Mount(args) => mount::run(args),
        Command::Run(args) => run::run(args),
        Command::Umount { mountpoint, abort } => {
            let mp = std::fs::canonicalize(&mountpoint).unwrap_or(mountpoint.clone());
            if !abort {
                return fusebox::mount::unmount_path(&mp, false)
                    .with_context(|| format!("unmounting {}", mp.display()));
            }
            let top = fusebox::mount::fuse_mount_at;
            let m = top(&mp).with_context(|| format!("{} is not a FUSE mount", mp.display()))?;
            // The daemon may unmount on its way out at any moment (before
            // the abort, the connection's fusectl directory goes with it):
            // a step that fails because the mount is already gone is done.
            let still_ours = || top(&mp).is_some_and(|now| now.connection == m.connection);
            if let Err(e) = fusebox::mount::abort_connection(m.connection) {
                if still_ours() {
                    return Err(e).with_context(|| {
                        format!(
                            "aborting FUSE connection {} of {}",
                            m.connection,
                            mp.display()
                        )
                    });
                }
            }
            fusebox::mount::unmount_path(&mp, false).or_else(|e| {
                if still_ours() {
                    Err(e).with_context(|| format!("unmounting {}", mp.display()))
                } else {
                    Ok(())
                }
            })
        }
        Command::Upgrade { mountpoint, binary } => {
            let mp = std::fs::canonicalize(&mountpoint).unwrap_or(mountpoint.clone());
            let binary = binary
                .map(|b| {
                    std::fs::canonicalize(&b).with_context(|| format!("--binary {}", b.display()))
                })
                .transpose()?;
            match fusebox::recovery::request_upgrade(&mp, binary.as_deref()) {
                Ok(report) => {
                    println!("{report}");
                    Ok(())
                }
                Err(e) => anyhow::bail!("upgrading {}: {e}", mp.display()),
            }
        }
        Command::Stats(args) => stats::run(args),
        Command::Doctor(args) => doctor::run(args),
        Command::Completions { shell } => {
            generated::completions(shell, &mut std::io::stdout());
            Ok(())
        }
        Command::Man { dir } => generated::man_pages(&dir),
        Command::Bench(args) => bench::run(args),
        Command::DirectServer {
            fs,
            options,
            door,
            detach,
        } => run::direct_server(&fs, &options, door, detach),
        Command::SftpRelay { dir, server } => fusebox_bench::remote::sftp_relay(&dir, &server),
        Command::TestSshd { dir, added_rtt_ms } => {
            // Caught before the options say it is up: a script that stops
            // it at once still takes sshd down with it.
            let mut signals = signal_hook::iterator::Signals::new([
                signal_hook::consts::SIGTERM,
                signal_hook::consts::SIGINT,
            ])?;
            let sshd = fusebox_bench::remote::Sshd::start(
                &dir,
                &fusebox_bench::remote::SshdConfig::default(),
            )?;
            let proxy = added_rtt_ms
                .map(|ms| {
                    fusebox_bench::remote::DelayProxy::start(
                        sshd.port(),
                        std::time::Duration::from_millis(ms),
                    )
                })
                .transpose()?;
            let port = proxy.as_ref().map_or(sshd.port(), |p| p.port());
            let opts = dir.join("ssh-options");
            std::fs::write(dir.join(".ssh-options"), sshd.ssh_options(port))?;
            std::fs::rename(dir.join(".ssh-options"), &opts)?;
            signals.forever().next();
            drop(proxy);
            drop(sshd);
            Ok(())
        }
        Command::BenchWorker {
            suite,
            workload,
            dir,
        } => fusebox_bench::direct::worker(&suite, &workload, &dir),
        Command::Blk(cmd) => blk::run(cmd),
        Command::List => {
            for m in fusebox::mount::fuse_mounts() {
                println!(
                    "{}\t{}\t{}\tconnection {}",
                    m.mountpoint.display(),
                    m.fstype,
                    m.source,
                    m.connection
                );
            }
            Ok(())
        }
    }
}
