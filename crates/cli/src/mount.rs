//! `fusebox mount`.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use fusebox::fs::{AsyncAdapter, ReadyPath};
use fusebox::{Filesystem, Options, PathAdapter, Session, SessionConfig, Timeouts};
use fusebox_examples::stackfs::StackOptions;
use fusebox_examples::{
    AsyncTimingFs, MemFs, NullFs, PathPassthrough, StackFs, TimingFs, TimingProfile,
};
use fusebox_registry::{FsId, Recovery};

/// The names `fusebox mount` takes, from the registry.
fn mountable() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        fusebox_registry::FILESYSTEMS
            .iter()
            .filter(|f| f.mounts)
            .map(|f| clap::builder::PossibleValue::new(f.name).help(f.about)),
    )
}

#[derive(Args)]
#[command(after_help = "\
OPTIONS for -o (comma-separated, as in libfuse):
  mount:   allow_other default_permissions ro nosuid/suid nodev/dev noexec noatime
           sync dirsync fsname=NAME subtype=NAME max_read=N blksize=N
           user_id=UID group_id=GID (whose mount it is; root only)
  kernel:  max_write=N max_readahead=N (above the kernel's 128 KiB: set in sysfs, root)
           max_background=N congestion_threshold=N
           writeback_cache/no_writeback_cache async_read/sync_read
           parallel_dirops/no_parallel_dirops readdirplus=yes|no|auto
           handle_killpriv_v2/no_handle_killpriv_v2 splice_read splice_write
           async_dio/no_async_dio atomic_o_trunc (O_TRUNC inside OPEN; see DESIGN.md)
           (a no_ option wins over the filesystem's own preference)
  caching: attr_timeout=SECS entry_timeout=SECS negative_timeout=SECS
           direct_io keep_cache flush (FLUSH on close; default noflush)
           passthrough noxattr

EXAMPLES:
  fusebox mount stackfs /srv/data /mnt/data -o allow_other,default_permissions
  fusebox mount stackfs --exclusive /srv/data /mnt/data -o writeback_cache
  fusebox mount pathfs /srv/data /mnt/data -o default_permissions
  fusebox mount memfs /mnt/mem -f
  fusebox mount timingfs /mnt/t --profile ssd --files 4 --size 1G
  fusebox mount timingfs /mnt/t --profile pmem --latency 5ms --waiting token")]
pub struct MountArgs {
    /// Which filesystem to run.
    #[arg(value_parser = mountable())]
    pub fs: String,
    /// SOURCE directory (stackfs, pathfs), [user@]host:[dir] (sftpfs) or
    /// s3://BUCKET[/PREFIX] (objfs), then MOUNTPOINT; just MOUNTPOINT
    /// otherwise.
    #[arg(num_args = 1..=2, required = true)]
    pub paths: Vec<PathBuf>,
    /// Mount options, comma-separated (may repeat).
    #[arg(short = 'o', value_name = "OPTS")]
    pub options: Vec<String>,
    /// Stay in the foreground (logs go to stderr).
    #[arg(short, long)]
    pub foreground: bool,
    /// Worker threads (default: number of CPUs, at least 2).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Pin classic worker threads to CPUs.
    #[arg(long)]
    pub pin: bool,
    /// classic (/dev/fuse), uring (FUSE-over-io_uring) or auto.
    #[arg(long, default_value = "classic")]
    pub transport: fusebox::transport::TransportKind,
    /// io_uring: ring entries per queue thread (default 8; 1 for a network
    /// filesystem, whose handlers wait out round trips: see
    /// --queue-threads).
    #[arg(long)]
    pub queue_depth: Option<usize>,
    /// io_uring: how queue threads wait: off, spin=US, adaptive[=US]
    /// (spin up to US, 10 by default, only while recent waits were that
    /// short; with the adaptive thread policy a spinning thread is
    /// SCHED_IDLE and gives way to any other work at once). On a
    /// supervised io_uring mount, adaptive means off: the supervisor's SQ
    /// thread polls on the queue's CPU.
    #[arg(long, default_value = "adaptive", value_parser = parse_poll)]
    pub poll: fusebox::transport::uring::PollPolicy,
    /// io_uring: do not pin queue thread q to CPU q.
    #[arg(long)]
    pub no_pin_queues: bool,
    /// io_uring: threads per CPU queue, each with --queue-depth entries;
    /// the first is pinned, the rest are not. 2 with --queue-depth 1 lets
    /// one application thread's readahead be served two READs at a time.
    /// Default 1; 8 for a network filesystem (sftpfs), whose handlers
    /// wait out round trips, as its classic workers do.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub queue_threads: Option<u16>,
    /// Scheduling of the serving threads: adaptive (SCHED_IDLE while they
    /// never wait for a CPU, so an application woken by a reply stays on
    /// its CPU instead of waking a halted one; normal while they do wait
    /// and while the mount is idle; needs root or CAP_SYS_NICE, else
    /// normal); normal; or idle (always SCHED_IDLE: CPU-bound processes
    /// then starve the daemon); adaptive is normal for the queue threads of
    /// a supervised io_uring mount. See DESIGN.md.
    #[arg(long, default_value = "adaptive")]
    pub thread_policy: fusebox::session::ThreadPolicy,
    /// timingfs: latency profile (pmem, ssd, or NNus per 4 KiB).
    #[arg(long, default_value = "ssd")]
    pub profile: String,
    /// timingfs: number of files.
    #[arg(long, default_value_t = 1)]
    pub files: u64,
    /// timingfs: size of each file (bytes; K, M, G suffixes).
    #[arg(long, default_value = "1G")]
    pub size: String,
    /// timingfs: latency added to every request, e.g. 5ms or 500us (a
    /// remote server's round trip).
    #[arg(long, default_value = "0ms", value_parser = parse_duration)]
    pub latency: Duration,
    /// timingfs: how a request waits out --latency: block (holds its
    /// serving thread), token (answered later by a timer thread) or async
    /// (a tokio task, through the async API).
    #[arg(long, default_value = "block", value_parser = parse_waiting)]
    pub waiting: fusebox_examples::Waiting,
    /// Serve the filesystem through the async API (a tokio task per
    /// request, answered later), to try that path with any filesystem;
    /// pathfs goes through the path-level async API.
    #[arg(long)]
    pub async_api: bool,
    /// Most requests answered later at once; a classic worker stops
    /// reading at the limit until one is answered.
    #[arg(long, default_value_t = fusebox::later::LaterLimits::default().max_pending)]
    pub max_pending: usize,
    /// Most bytes (as the kernel sent them: WRITE data counts) held by
    /// requests answered later (K, M, G suffixes).
    #[arg(long, default_value = "256M")]
    pub max_pending_bytes: String,
    /// stackfs: most O_PATH fds kept open for nodes (default: the fd limit
    /// less a fifth of it, at least 1,024 spared; the soft limit is first
    /// raised to the hard one).
    #[arg(long)]
    pub fd_cache: Option<u64>,
    /// stackfs: SOURCE changes only through this mount, so names,
    /// attributes and failed lookups are cached for a day (passthrough_hp's
    /// default) instead of a second; `-o *_timeout=` still wins.
    #[arg(long)]
    pub exclusive: bool,
    /// Where a background daemon writes its log (default: discarded).
    #[arg(long)]
    pub log_file: Option<PathBuf>,
    /// Internal: tells a background child to report readiness on stdout.
    #[arg(long, hide = true)]
    pub notify_ready: bool,
    /// Serve without a supervisor: a server that dies takes the mount with
    /// it (ENOTCONN until unmounted). By default stackfs and pathfs over
    /// classic /dev/fuse run under a supervisor that holds the mount and
    /// starts a new server when one dies, with no failed request; memfs
    /// runs under one too, for `fusebox upgrade` (its files go to the next
    /// server), but a crash loses its files: its requests then fail (EIO).
    #[arg(long)]
    pub no_recovery: bool,
    /// Recovery: most server deaths within --restart-window before the
    /// supervisor stops starting servers (requests then fail with EIO).
    /// Only servers that die before --settled-after count: a crash loop,
    /// not a server killed after it served.
    #[arg(long, default_value_t = 5)]
    pub max_restarts: usize,
    /// Recovery: the window --max-restarts counts deaths in (e.g. 30s).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub restart_window: Duration,
    /// Recovery: a server that had served this long when it died is not
    /// counted against --max-restarts (e.g. 500ms).
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    pub settled_after: Duration,
    /// Recovery over io_uring: how long the kernel thread that issues the
    /// supervisor's ring commands polls after work before it sleeps
    /// (e.g. 1ms; a sleeping one costs a wake-up per request).
    #[arg(long, default_value = "1ms", value_parser = parse_duration)]
    pub sq_idle: Duration,
}

/// Why a mount runs without a supervisor, if it does.
fn recovery_off_because(
    args: &MountArgs,
    fs: &fusebox_registry::Filesystem,
) -> Option<&'static str> {
    if args.no_recovery {
        return Some("--no-recovery");
    }
    if fs.recovery == Recovery::Unsupervised {
        return Some("this filesystem does not hand its nodes to a next server");
    }
    if args.async_api {
        return Some("--async-api: answers given later are not recorded for recovery yet");
    }
    None
}

fn parse_poll(s: &str) -> Result<fusebox::transport::uring::PollPolicy, String> {
    fusebox::transport::uring::PollPolicy::parse(s)
        .ok_or_else(|| format!("{s:?}: use off, spin=US or adaptive[=US]"))
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("{s:?}: use a number with ms or us, e.g. 5ms");
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, ""), |i| s.split_at(i));
    let n: u64 = num.parse().map_err(|_| bad())?;
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "us" => Ok(Duration::from_micros(n)),
        "s" => Ok(Duration::from_secs(n)),
        _ => Err(bad()),
    }
}

fn parse_waiting(s: &str) -> Result<fusebox_examples::Waiting, String> {
    fusebox_examples::Waiting::parse(s).ok_or_else(|| format!("{s:?}: use block, token or async"))
}

fn parse_size(s: &str) -> Result<u64> {
    let (num, mult) = match s.chars().last() {
        Some('K' | 'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&s[..s.len() - 1], 1 << 20),
        Some('G' | 'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    Ok(num
        .parse::<u64>()
        .with_context(|| format!("bad size {s:?}"))?
        * mult)
}

pub fn run(args: MountArgs) -> Result<()> {
    // A server a supervisor started: serve the mount it hands over.
    let handoff = fusebox::recovery::Channel::from_env()
        .transpose()
        .context("taking the supervisor's handoff socket")?;
    if handoff.is_none() && !args.foreground && !args.notify_ready {
        return daemonize(&args);
    }
    let mut opts = Options::default();
    // sftpfs takes sshfs's options and ssh's; the rest are fusebox's.
    let fs_info = fusebox_registry::find_mountable(&args.fs)?;
    let mut obj_opts = None;
    let (sftp_opts, fuse_opts) = match fs_info.id {
        FsId::Sftpfs => {
            let (mut o, rest) = fusebox_sftpfs::SftpOptions::parse(&args.options)?;
            o.interactive = args.foreground && std::io::stdin().is_terminal();
            (Some(o), rest)
        }
        FsId::Objfs => {
            let (o, rest) = fusebox_objfs::ObjOptions::parse(&args.options)?;
            obj_opts = Some(o);
            (None, rest)
        }
        _ => (None, args.options.clone()),
    };
    for o in &fuse_opts {
        opts.apply(o).context("parsing -o")?;
    }
    let name = fs_info.name.to_string();
    let (source, mountpoint) = match (fs_info.needs_source(), args.paths.as_slice()) {
        (true, [src, mnt]) => (Some(src.clone()), mnt.clone()),
        (true, _) => {
            let (_, what) = fs_info.source_words().expect("needs a source");
            bail!("{name} needs {what} and MOUNTPOINT")
        }
        (false, [mnt]) => (None, mnt.clone()),
        (false, _) => bail!("{name} takes only MOUNTPOINT"),
    };
    opts.mount.subtype.get_or_insert(name.clone());
    opts.mount.fsname.get_or_insert(
        source
            .as_ref()
            .map_or(name.clone(), |s| s.display().to_string()),
    );
    let remote = match (fs_info.id, &source) {
        (FsId::Sftpfs, Some(src)) => Some(fusebox_sftpfs::Remote::parse(&src.to_string_lossy())?),
        _ => None,
    };
    let bucket = match (fs_info.id, &source) {
        (FsId::Objfs, Some(src)) => Some(fusebox_objfs::BucketUrl::parse(&src.to_string_lossy())?),
        _ => None,
    };
    // A network filesystem's worker waits out a round trip to the server:
    // more of them keep more requests in flight (metadata of parallel
    // programs; sftpfs pipelines reads and writes by itself either way).
    let default_workers = fs_info
        .workers
        .map_or(SessionConfig::default().workers, |w| {
            w.max(SessionConfig::default().workers)
        });
    // A network filesystem's handlers wait out round trips: 8 threads of
    // one entry per queue, as its classic workers are many.
    let network = fs_info.workers.is_some();
    let queue_threads = args.queue_threads.unwrap_or(if network { 8 } else { 1 });
    let queue_depth = args.queue_depth.unwrap_or(if network { 1 } else { 8 });
    let cfg = SessionConfig {
        workers: args.threads.unwrap_or(default_workers),
        pin_workers: args.pin,
        transport: args.transport,
        uring: fusebox::transport::UringConfig {
            depth: queue_depth,
            pin: !args.no_pin_queues,
            threads_per_queue: queue_threads.into(),
            poll: args.poll,
            ..Default::default()
        },
        thread_policy: args.thread_policy,
        later: fusebox::later::LaterLimits {
            max_pending: args.max_pending.max(1),
            max_pending_bytes: parse_size(&args.max_pending_bytes).context("--max-pending-bytes")?
                as usize,
        },
        ..SessionConfig::default()
    };
    if args.waiting != fusebox_examples::Waiting::Block && fs_info.id != FsId::Timingfs {
        bail!("--waiting applies to timingfs only (--async-api serves any filesystem through the async API)");
    }
    if handoff.is_none() && recovery_off_because(&args, fs_info).is_none() {
        // Checked here too: the server would find it, but only
        // after the mount is made.
        if let Some(src) = source
            .as_ref()
            .filter(|s| remote.is_none() && bucket.is_none() && !s.is_dir())
        {
            bail!("opening source {}: not a directory", src.display());
        }
        // sftpfs keeps its unconfirmed writes where the next
        // server finds them.
        let held_area = sftp_opts.as_ref().map_or(0, |o| {
            fusebox_sftpfs::writelog::WriteLog::size_for(o.write_behind)
        });
        let rings =
            (args.transport.resolve() == fusebox::transport::TransportKind::Uring).then(|| {
                fusebox::recovery::RingPlan {
                    per_queue: cfg.uring.threads_per_queue,
                    depth: cfg.uring.depth,
                    payload_len: fusebox::transport::uring::payload_len_for(opts.init.max_write),
                    sq_idle: args.sq_idle,
                }
            });
        return supervise(&args, &mountpoint, &opts, cfg.workers, held_area, rings);
    }
    let mut handoff = handoff;
    macro_rules! serve {
        ($fs:expr) => {
            serve(
                $fs,
                &mountpoint,
                &opts,
                cfg,
                if handoff.is_some() {
                    Ready::Supervisor {
                        background: args.notify_ready && args.log_file.is_none(),
                    }
                } else {
                    ready(&args)
                },
                args.async_api,
                handoff.take(),
            )
        };
    }
    if args.exclusive && fs_info.id != FsId::Stackfs {
        bail!("--exclusive applies to stackfs only");
    }
    let t = opts.fs.timeouts_or(Timeouts::default());
    match fs_info.id {
        FsId::Stackfs => {
            let src = source.expect("checked above");
            let fs = StackFs::new(
                &src,
                StackOptions {
                    fs: opts.fs,
                    fd_cache: args.fd_cache.unwrap_or_else(|| {
                        raise_fd_limit();
                        fusebox_examples::stackfs::default_fd_cache()
                    }),
                    exclusive: args.exclusive,
                    ..StackOptions::default()
                },
            )
            .with_context(|| format!("opening source {}", src.display()))?;
            serve!(fs)
        }
        FsId::Pathfs => {
            let src = source.expect("checked above");
            let fs = PathPassthrough::new(&src, opts.fs)
                .with_context(|| format!("opening source {}", src.display()))?;
            if args.async_api {
                // The path-level async API, not the inode-level one over a
                // synchronous path table.
                let fs = AsyncAdapter::new(PathAdapter::new(ReadyPath(fs)))
                    .context("starting the tokio runtime")?;
                return serve_session(fs, &mountpoint, &opts, cfg, ready(&args), None);
            }
            serve!(PathAdapter::new(fs))
        }
        FsId::Memfs => {
            // Every change to memfs passes through the kernel, so nothing can
            // go stale behind its caches.
            let t = opts.fs.timeouts_or(Timeouts::DAY);
            serve!(MemFs::new(t))
        }
        FsId::Nullfs => serve!(NullFs::new(t)),
        FsId::Sftpfs => {
            let remote = remote.expect("parsed above");
            let o = sftp_opts.expect("parsed above");
            if args.async_api {
                let e =
                    anyhow::anyhow!("--async-api: sftpfs serves through the path-level API only");
                return Err(tell_supervisor(handoff.as_ref(), e));
            }
            let fs = match fusebox_sftpfs::SftpFs::start(remote, o, &opts.fs) {
                Ok(fs) => fs,
                Err(e) => return Err(tell_supervisor(handoff.as_ref(), e.into())),
            };
            serve!(PathAdapter::new(fs))
        }
        FsId::Objfs => {
            let url = bucket.expect("parsed above");
            let o = obj_opts.expect("parsed above");
            if args.async_api {
                let e =
                    anyhow::anyhow!("--async-api: objfs serves through the path-level API only");
                return Err(tell_supervisor(handoff.as_ref(), e));
            }
            let staging = objfs_staging(&o, &url, &mountpoint);
            let fs = match fusebox_objfs::ObjFs::start(url, o, &staging) {
                Ok(fs) => fs,
                Err(e) => return Err(tell_supervisor(handoff.as_ref(), e.into())),
            };
            serve!(PathAdapter::new(fs))
        }
        FsId::Timingfs | FsId::TimingfsAsync => {
            let profile = TimingProfile::parse(&args.profile).with_context(|| {
                format!("unknown profile {:?} (use pmem, ssd or NNus)", args.profile)
            })?;
            let fs = TimingFs::new(profile, args.files, parse_size(&args.size)?, t)
                .with_latency(args.latency, args.waiting);
            if args.waiting == fusebox_examples::Waiting::Async {
                let fs =
                    AsyncAdapter::new(AsyncTimingFs(fs)).context("starting the tokio runtime")?;
                return serve_session(fs, &mountpoint, &opts, cfg, ready(&args), None);
            }
            serve!(fs)
        }
    }
}

/// objfs's staging area: `-o staging=DIR`, else one per bucket, prefix
/// and mount point under the user's cache directory, so a server that
/// replaces a crashed one (same arguments) finds the journal it left.
fn objfs_staging(
    o: &fusebox_objfs::ObjOptions,
    url: &fusebox_objfs::BucketUrl,
    mountpoint: &std::path::Path,
) -> PathBuf {
    if let Some(s) = &o.staging {
        return s.clone();
    }
    // The user's cache directory, or (a user without a writable home,
    // such as nobody) one of their own under /var/tmp, which survives a
    // reboot as the journal must.
    let own = PathBuf::from(format!(
        "/var/tmp/fusebox-{}",
        rustix::process::getuid().as_raw()
    ));
    let base = [
        std::env::var_os("XDG_CACHE_HOME").map(PathBuf::from),
        std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")),
    ]
    .into_iter()
    .flatten()
    .find(|b| std::fs::create_dir_all(b.join("fusebox/objfs")).is_ok())
    .unwrap_or(own);
    // Not canonicalize: the mount point may be this mount, whose server is
    // the one starting.
    let mnt = std::path::absolute(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    let escape = |s: &str| s.replace('%', "%25").replace('/', "%2F");
    let name = format!(
        "{}@{}@{}",
        escape(o.endpoint.as_deref().unwrap_or("aws")),
        escape(&url.to_string()),
        escape(&mnt.to_string_lossy())
    );
    base.join("fusebox").join("objfs").join(name)
}

/// A server that cannot build its filesystem says why to its supervisor,
/// which reports it (the server's own stderr may be gone by then).
fn tell_supervisor(
    handoff: Option<&fusebox::recovery::Channel>,
    e: anyhow::Error,
) -> anyhow::Error {
    if let Some(ch) = handoff {
        let error = e
            .chain()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(": ");
        let _ = ch.send(&fusebox::recovery::ToSupervisor::Failed { error }, &[]);
    }
    e
}

/// Who learns that the mount is served.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ready {
    /// A person at a terminal (foreground).
    Terminal,
    /// The `fusebox mount` that started this background daemon, which
    /// reads stderr until then (unless it went to --log-file).
    Stdout { log_file: bool },
    /// The supervisor that started this server (through the handoff);
    /// `background`: its stderr is the pipe of a `fusebox mount` that
    /// is gone (see `report_ready`).
    Supervisor { background: bool },
}

fn ready(args: &MountArgs) -> Ready {
    if args.notify_ready {
        Ready::Stdout {
            log_file: args.log_file.is_some(),
        }
    } else {
        Ready::Terminal
    }
}

/// Tell the waiting `fusebox mount` that the mount is served. Its stderr
/// pipe closes when it exits; a later log line would then fail (and the
/// log writer panics on EPIPE), so without a log file stderr goes to
/// /dev/null from here on.
fn report_ready(log_file: bool) -> Result<()> {
    println!("ready {}", std::process::id());
    std::io::stdout().flush()?;
    if !log_file {
        detach_stderr()?;
    }
    Ok(())
}

fn detach_stderr() -> Result<()> {
    let null = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .context("opening /dev/null")?;
    rustix::stdio::dup2_stderr(&null).context("detaching stderr")?;
    Ok(())
}

fn serve<F: Filesystem>(
    fs: F,
    mountpoint: &std::path::Path,
    opts: &Options,
    cfg: SessionConfig,
    ready: Ready,
    async_api: bool,
    handoff: Option<fusebox::recovery::Channel>,
) -> Result<()> {
    if async_api {
        let fs = AsyncAdapter::new(fusebox::fs::Ready(fs)).context("starting the tokio runtime")?;
        return serve_session(fs, mountpoint, opts, cfg, ready, handoff);
    }
    serve_session(fs, mountpoint, opts, cfg, ready, handoff)
}

fn serve_session<F: Filesystem>(
    fs: F,
    mountpoint: &std::path::Path,
    opts: &Options,
    cfg: SessionConfig,
    ready: Ready,
    handoff: Option<fusebox::recovery::Channel>,
) -> Result<()> {
    let session = match handoff {
        Some(channel) => Session::take_over(fs, channel, opts, cfg)
            .with_context(|| format!("taking over {}", mountpoint.display()))?,
        None => Session::mount(fs, mountpoint, opts, cfg)
            .with_context(|| format!("mounting {}", mountpoint.display()))?,
    };
    session.unmount_on_signals(Duration::from_secs(3))?;
    if let Ready::Stdout { log_file } = ready {
        report_ready(log_file)?;
    } else if let Ready::Supervisor { background: true } = ready {
        detach_stderr()?;
    } else if ready == Ready::Terminal {
        eprintln!(
            "fusebox: serving {} (protocol 7.{}); Ctrl-C or `fusebox umount {}` to stop",
            session.mountpoint().display(),
            session.connection().proto_minor,
            session.mountpoint().display()
        );
    }
    session.wait().context("serving")
}

/// Hold the mount in this process and serve it from child processes,
/// started again when one dies (fusebox::recovery).
fn supervise(
    args: &MountArgs,
    mountpoint: &std::path::Path,
    opts: &Options,
    workers: usize,
    held_area: usize,
    rings: Option<fusebox::recovery::RingPlan>,
) -> Result<()> {
    use fusebox::recovery::{this_program_again, Supervisor, SupervisorConfig};
    // Over io_uring one classic worker remains, for FORGET and INTERRUPT.
    let workers = if rings.is_some() { 1 } else { workers };
    let supervisor = Supervisor::for_new_mount(
        mountpoint,
        &opts.mount,
        SupervisorConfig {
            clones: workers.max(1),
            max_restarts: args.max_restarts,
            restart_window: args.restart_window,
            settled_after: args.settled_after,
            held_area,
            rings,
            ..SupervisorConfig::default()
        },
    )
    .with_context(|| format!("mounting {} under a supervisor", mountpoint.display()))?;
    supervisor.unmount_on_signals()?;
    let server = this_program_again().context("locating the fusebox binary")?;
    let notify = args.notify_ready;
    let log_file = args.log_file.is_some();
    let shown = mountpoint.display().to_string();
    supervisor
        .run(server, |pid| {
                if notify {
                    if let Err(e) = report_ready(log_file) {
                        tracing::warn!(error = %e, "reporting readiness");
                    }
                } else {
                    eprintln!(
                        "fusebox: serving {shown} (server pid {pid}, supervisor pid {}); Ctrl-C or `fusebox umount {shown}` to stop",
                        std::process::id()
                    );
                }
            },
        )
        .context("supervising the mount")?;
    Ok(())
}

/// Run the same command in a detached child and return once it is mounted,
/// so that errors (bad source, busy mountpoint) still reach this terminal.
fn daemonize(args: &MountArgs) -> Result<()> {
    let pid = crate::daemon::start(&[], args.log_file.as_deref())?;
    println!("fusebox daemon pid {pid}");
    Ok(())
}

/// Raise the soft fd limit to the hard one, as Go's runtime does for every
/// program: the soft limit (often 1,024) only protects programs that
/// select(2) on fd numbers, and the stackfs node cache is sized from it.
pub(crate) fn raise_fd_limit() {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut l = getrlimit(Resource::Nofile);
    if l.current < l.maximum {
        l.current = l.maximum;
        if let Err(e) = setrlimit(Resource::Nofile, l) {
            tracing::debug!(error = %e, "cannot raise the soft fd limit");
        }
    }
}
