//! `fusebox blk`: block devices served by user-space drivers.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use fusebox::SessionConfig;
use fusebox_blk::device::{self, DeviceConfig};
use fusebox_blk::drivers::{FileDriver, NullDriver, RamDriver, TimingDriver, TimingProfile};
use fusebox_blk::registry::{self, Record};
use fusebox_blk::{BlkError, BlockDriver, Geometry};

#[derive(Subcommand)]
pub enum BlkCommand {
    /// Create a block device served by a driver; prints the device
    /// (/dev/loopN, also /dev/fusebox/NAME) once it is ready.
    Create(CreateArgs),
    /// The devices fusebox serves.
    List {
        /// As JSON.
        #[arg(long)]
        json: bool,
    },
    /// Detach a device and stop its driver (refused while it is mounted).
    Destroy {
        /// NAME, /dev/fusebox/NAME or /dev/loopN.
        device: String,
    },
    /// Replace the driver process without an I/O error: a new one takes
    /// over once the old one has answered what it holds (or, with --kill,
    /// the old one is killed and the supervisor recovers).
    Replace {
        device: String,
        /// The binary to serve from now on (default: the one serving).
        #[arg(long)]
        binary: Option<PathBuf>,
        /// Kill the driver process (SIGKILL) instead of a planned handover:
        /// what a crash does.
        #[arg(long)]
        kill: bool,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DriverKind {
    /// Memory (kept by the supervisor: survives the driver process).
    Ram,
    /// An image file or a partition (--path), O_DIRECT where possible.
    File,
    /// Reads zeros, drops writes: what the framework costs.
    Null,
    /// A simulated SSD or HDD over memory (--profile).
    Timing,
}

#[derive(Args, Clone)]
#[command(after_help = "\
EXAMPLES:
  fusebox blk create --driver ram --size 4G
  fusebox blk create --driver file --path /srv/disk.img --size 20G --name data
  fusebox blk create --driver timing --profile hdd --size 1G
  mkfs.ext4 /dev/fusebox/data && mount /dev/fusebox/data /mnt
  fusebox blk replace data; fusebox stats data; fusebox blk destroy data")]
pub struct CreateArgs {
    #[arg(long, value_enum)]
    pub driver: DriverKind,
    /// Size (bytes; K, M, G, T suffixes); a multiple of the block size.
    /// The file driver's default is the file's size.
    #[arg(long)]
    pub size: Option<String>,
    /// The device's name (default: the driver's, numbered).
    #[arg(long)]
    pub name: Option<String>,
    /// Logical block size: 512 or 4096 (any power of two in between).
    #[arg(long, default_value_t = 512)]
    pub block_size: u32,
    /// file: the image or partition.
    #[arg(long)]
    pub path: Option<PathBuf>,
    /// file: serve it read-only.
    #[arg(long)]
    pub read_only: bool,
    /// timing: ssd, hdd, or a fixed latency per request (e.g. 200us).
    #[arg(long, default_value = "ssd")]
    pub profile: String,
    /// classic (/dev/fuse; replaceable, recovers from a crash) or uring
    /// (FUSE-over-io_uring; not replaceable on this kernel).
    #[arg(long, default_value = "classic")]
    pub transport: fusebox::transport::TransportKind,
    /// Serving threads (classic; default: CPUs, at least 2) or threads
    /// per CPU queue (uring; default 1: a second one took 4 KiB reads at
    /// queue depth 1 from ~31,000 to ~27,000 per second, for no gain at
    /// depth 32).
    #[arg(long)]
    pub threads: Option<usize>,
    /// io_uring: ring entries per queue thread (16 served queue depth 32
    /// better than 32 or 64 did).
    #[arg(long, default_value_t = 16)]
    pub queue_depth: usize,
    /// Serve without a supervisor: the device dies with its driver.
    #[arg(long)]
    pub no_recovery: bool,
    /// Recovery: most driver deaths within --restart-window before the
    /// supervisor stops starting drivers (I/O then fails with EIO).
    #[arg(long, default_value_t = 5)]
    pub max_restarts: usize,
    /// Recovery: the window --max-restarts counts deaths in, in seconds.
    #[arg(long, default_value_t = 30)]
    pub restart_window: u64,
    /// Let the loop device go through the page cache of the file instead
    /// of direct I/O (the file is direct either way).
    #[arg(long)]
    pub buffered: bool,
    /// Stay in the foreground (logs to stderr).
    #[arg(short, long)]
    pub foreground: bool,
    /// Where the background daemon writes its log (default: discarded).
    #[arg(long)]
    pub log_file: Option<PathBuf>,
    #[arg(long, hide = true)]
    pub notify_ready: bool,
}

pub fn run(cmd: BlkCommand) -> Result<()> {
    match cmd {
        BlkCommand::Create(args) => create(args),
        BlkCommand::List { json } => list(json),
        BlkCommand::Destroy { device } => destroy(&device),
        BlkCommand::Replace {
            device,
            binary,
            kill,
        } => replace(&device, binary, kill),
    }
}

fn parse_size(s: &str) -> Result<u64> {
    let (num, shift) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 30),
        Some('T' | 't') => (&s[..s.len() - 1], 40),
        _ => (s, 0),
    };
    let n: u64 = num.parse().with_context(|| format!("bad size {s:?}"))?;
    n.checked_mul(1 << shift)
        .with_context(|| format!("size {s:?} is too large"))
}

fn default_name(kind: DriverKind) -> String {
    let base = format!("{kind:?}").to_lowercase();
    (0..)
        .map(|i| format!("{base}{i}"))
        .find(|n| registry::get(n).is_none_or(|r| !r.alive()))
        .expect("a free name")
}

/// Everything that can be checked before a daemon starts, so the user
/// sees the error here.
fn validate(args: &CreateArgs) -> Result<Option<u64>> {
    let size = args.size.as_deref().map(parse_size).transpose()?;
    let bs = args.block_size;
    if let Some(s) = size {
        Geometry::new(s, bs)
            .check()
            .map_err(|e| anyhow::anyhow!("--size {}: {e}", args.size.as_deref().unwrap_or("")))?;
    } else {
        Geometry::new(u64::from(bs), bs).check()?;
    }
    match (args.driver, &args.path) {
        (DriverKind::File, None) => bail!("the file driver needs --path FILE"),
        (DriverKind::File, Some(p)) => {
            // What the driver process would find, said here.
            let creatable = size.is_some()
                && !args.read_only
                && p.parent()
                    .is_some_and(|d| d.as_os_str().is_empty() || d.is_dir());
            if !p.exists() && !creatable {
                bail!(
                    "--path {}: no such file (give --size to create one)",
                    p.display()
                );
            }
        }
        (_, Some(_)) => bail!("--path is for the file driver"),
        _ if size.is_none() => bail!("--size is needed for the {:?} driver", args.driver),
        _ => {}
    }
    if args.read_only && args.driver != DriverKind::File {
        bail!("--read-only is for the file driver");
    }
    if args.driver == DriverKind::Timing && TimingProfile::parse(&args.profile).is_none() {
        bail!(
            "unknown --profile {:?} (ssd, hdd, or a latency such as 200us)",
            args.profile
        );
    }
    if !std::path::Path::new("/dev/loop-control").exists() {
        bail!("no /dev/loop-control: this kernel has no loop device support (CONFIG_BLK_DEV_LOOP), which fusebox block devices need");
    }
    Ok(size)
}

fn create(args: CreateArgs) -> Result<()> {
    let handoff = std::env::var_os(fusebox::recovery::HANDOFF_ENV).is_some();
    let size = validate(&args)?;
    let name = match &args.name {
        Some(n) => n.clone(),
        None if handoff || args.notify_ready => bail!("internal: a daemon needs --name"),
        None => default_name(args.driver),
    };
    if !handoff && !args.foreground && !args.notify_ready {
        return daemonize(&args, &name);
    }
    let label = match args.driver {
        DriverKind::File => format!("file:{}", args.path.as_ref().expect("validated").display()),
        DriverKind::Timing => format!("timing:{}", args.profile),
        k => format!("{k:?}").to_lowercase(),
    };
    let mut cfg = DeviceConfig::new(&name, &label);
    let defaults = SessionConfig::default();
    cfg.session = SessionConfig {
        transport: args.transport,
        workers: args.threads.unwrap_or(defaults.workers),
        uring: fusebox::transport::UringConfig {
            depth: args.queue_depth,
            threads_per_queue: args.threads.unwrap_or(1),
            ..Default::default()
        },
        ..defaults
    };
    cfg.recovery = !args.no_recovery;
    cfg.max_restarts = args.max_restarts;
    cfg.restart_window = Duration::from_secs(args.restart_window);
    cfg.direct_io = !args.buffered;
    if matches!(args.driver, DriverKind::Ram | DriverKind::Timing) {
        cfg.kept_memory = size;
    }
    let bs = args.block_size;
    let ready = |r: &Record| {
        if args.notify_ready {
            println!("ready {}", r.device.display());
            let _ = std::io::Write::flush(&mut std::io::stdout());
            detach_stderr(args.log_file.is_some());
        } else if !handoff {
            eprintln!(
                "fusebox: {} serves {} ({} bytes) as {}; Ctrl-C or `fusebox blk destroy {}` to stop",
                r.driver,
                registry::link_for(&r.name).display(),
                r.size,
                r.device.display(),
                r.name
            );
        }
    };
    let result = match args.driver {
        DriverKind::Ram => serve(
            &cfg,
            |mem| match mem {
                Some(m) => RamDriver::from_memfd(m, bs),
                None => RamDriver::create(size.expect("validated"), bs),
            },
            ready,
        ),
        DriverKind::File => serve(
            &cfg,
            |_| {
                FileDriver::open(
                    args.path.as_ref().expect("validated"),
                    size,
                    bs,
                    args.read_only,
                )
            },
            ready,
        ),
        DriverKind::Null => serve(
            &cfg,
            |_| Ok(NullDriver::new(Geometry::new(size.expect("validated"), bs))),
            ready,
        ),
        DriverKind::Timing => {
            let profile = TimingProfile::parse(&args.profile).expect("validated");
            serve(
                &cfg,
                |mem| {
                    let store = match mem {
                        Some(m) => RamDriver::from_memfd(m, bs)?,
                        None => RamDriver::create(size.expect("validated"), bs)?,
                    };
                    Ok(TimingDriver::new(store, profile))
                },
                ready,
            )
        }
    };
    result.with_context(|| format!("block device {name}"))
}

fn serve<D: BlockDriver>(
    cfg: &DeviceConfig,
    make: impl FnOnce(Option<std::os::fd::OwnedFd>) -> Result<D, BlkError>,
    ready: impl FnOnce(&Record),
) -> Result<()> {
    device::run(cfg, make, ready)?;
    Ok(())
}

/// The daemon's stderr was the pipe of a `fusebox blk create` that is
/// gone: later log lines go to the log file or nowhere.
fn detach_stderr(log_file: bool) {
    if log_file {
        return;
    }
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        let _ = rustix::stdio::dup2_stderr(&null);
    }
}

/// Start the device in a detached daemon and print the device once it is
/// ready, so errors still reach this terminal.
fn daemonize(args: &CreateArgs, name: &str) -> Result<()> {
    let extra: &[&str] = if args.name.is_none() {
        &["--name", name]
    } else {
        &[]
    };
    let device = crate::daemon::start(extra, args.log_file.as_deref())?;
    println!("{device}");
    Ok(())
}

fn find(what: &str) -> Result<Record> {
    registry::find(what).with_context(|| {
        format!("no fusebox block device {what:?} (`fusebox blk list` shows them)")
    })
}

fn list(json: bool) -> Result<()> {
    let all = registry::list();
    if json {
        println!("{}", serde_json::to_string_pretty(&all)?);
        return Ok(());
    }
    if all.is_empty() {
        println!("no fusebox block devices");
        return Ok(());
    }
    println!(
        "{:<12} {:<12} {:>12} {:>6} {:<22} {:<10} {:<9} STATE",
        "NAME", "DEVICE", "SIZE", "BLOCK", "DRIVER", "TRANSPORT", "RECOVERY"
    );
    for r in all {
        let state = if !r.alive() {
            "dead (`fusebox blk destroy` cleans up)".to_string()
        } else if r.supervised {
            let drivers = device::driver_pids(r.pid);
            format!("serving (supervisor {}, driver {:?})", r.pid, drivers)
        } else {
            format!("serving (pid {})", r.pid)
        };
        println!(
            "{:<12} {:<12} {:>12} {:>6} {:<22} {:<10} {:<9} {}",
            r.name,
            r.device.display(),
            r.size,
            r.logical_block_size,
            r.driver,
            r.transport,
            if r.supervised { "yes" } else { "no" },
            state
        );
    }
    Ok(())
}

fn destroy(what: &str) -> Result<()> {
    let r = find(what)?;
    if !r.alive() {
        device::teardown_dead(&r);
        println!("{}: its daemon had died; cleaned up", r.name);
        return Ok(());
    }
    // Checked here too, so the refusal is an error for this command; the
    // daemon checks again before detaching.
    if fusebox_blk::loopdev::in_use(&r.device) {
        bail!(
            "{} ({}) is in use (mounted, or held open exclusively): unmount it first",
            r.name,
            r.device.display()
        );
    }
    let pid = rustix::process::Pid::from_raw(r.pid as i32).context("bad pid in the registry")?;
    rustix::process::kill_process(pid, rustix::process::Signal::TERM)
        .with_context(|| format!("signalling the daemon (pid {})", r.pid))?;
    let until = Instant::now() + Duration::from_secs(20);
    while r.alive() {
        if Instant::now() > until {
            bail!(
                "{}: the daemon (pid {}) is still running after 20 s (see its log; another process may hold {} open)",
                r.name,
                r.pid,
                r.device.display()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if registry::get(&r.name).is_some() {
        device::teardown_dead(&r);
    }
    println!("{}: destroyed", r.name);
    Ok(())
}

fn replace(what: &str, binary: Option<PathBuf>, kill: bool) -> Result<()> {
    let r = find(what)?;
    if !r.alive() {
        bail!(
            "{}: its daemon has died (`fusebox blk destroy {}` cleans up)",
            r.name,
            r.name
        );
    }
    if !r.supervised {
        bail!(
            "{} runs without a supervisor (--no-recovery): it cannot be replaced",
            r.name
        );
    }
    if kill {
        if binary.is_some() {
            bail!("--binary is for a planned replacement, not --kill");
        }
        // Between a driver's death and the next one's start there is none:
        // wait a little for the supervisor to start it.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut pids = device::driver_pids(r.pid);
        while pids.is_empty() && std::time::Instant::now() < deadline && r.alive() {
            std::thread::sleep(std::time::Duration::from_millis(20));
            pids = device::driver_pids(r.pid);
        }
        if pids.is_empty() {
            bail!(
                "{}: no driver process is running (the supervisor is starting one)",
                r.name
            );
        }
        for p in &pids {
            if let Some(pid) = rustix::process::Pid::from_raw(*p as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        println!(
            "{}: killed driver process {pids:?}; the supervisor starts the next",
            r.name
        );
        return Ok(());
    }
    let report = fusebox::recovery::request_upgrade(&r.mountpoint, binary.as_deref())
        .map_err(|e| anyhow::anyhow!("replacing the driver of {}: {e}", r.name))?;
    println!("{}: {report}", r.name);
    Ok(())
}
