//! `fusebox run --fs FS:SRC --at DIR -- PROGRAM [ARGS]`: run PROGRAM
//! with the filesystem served inside its own process at DIR (direct mode:
//! nothing is mounted in the kernel; see crates/direct).
//!
//! `fusebox run -- PROGRAM [ARGS]`: run an unchanged libfuse 3 program
//! (sshfs, squashfuse, fuse-overlayfs, a pyfuse3 filesystem, ...) on
//! fusebox's drop-in libfuse3.so.3: the loader is pointed at it
//! (`LD_LIBRARY_PATH`) and the `FUSEBOX_*` environment carries the
//! session settings; then the program replaces this process (exec), so
//! its exit status, signals and terminal are its own.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use fusebox_registry::{Direct, FsId};

#[derive(clap::Args)]
pub struct RunArgs {
    /// Direct mode: serve this filesystem inside PROGRAM's own process
    /// (and the programs it runs) instead of running a libfuse program:
    /// stackfs:SRC, pathfs:SRC, nullfs, timingfs:PROFILE,
    /// timingfs-async:PROFILE (the same through the async API), memfs
    /// (its files live in its process: one instance in a server of the
    /// run's, which every process of the run reaches) or
    /// sftpfs:[user@]host:[dir] (one SSH connection and one cache for the
    /// run, in its server; -o takes its options, as `fusebox mount`'s) or
    /// objfs:s3://BUCKET[/PREFIX] (one S3 client, cache and staging area
    /// for the run, in its server; -o as for `fusebox mount`).
    #[arg(long, requires = "at", conflicts_with_all = ["transport", "workers", "poll", "no_stats", "no_readdirplus_lookups", "library"])]
    pub fs: Option<String>,
    /// Direct mode: where the filesystem appears to PROGRAM (need not
    /// exist).
    #[arg(long, requires = "fs")]
    pub at: Option<PathBuf>,
    /// Direct mode: how system calls are caught. rewrite: each call site
    /// is rewritten into a direct call after its first call (needs a page
    /// at address 0: root, or vm.mmap_min_addr=0); dispatch: syscall user
    /// dispatch for every call (any user, about 10x the cost per call).
    /// Default: rewrite where this user can, else dispatch, said in one
    /// line.
    #[arg(long, requires = "fs", value_enum)]
    pub intercept: Option<Intercept>,
    /// Direct mode: paths whose attributes the metadata cache keeps per
    /// process (0: no cache).
    #[arg(long, requires = "fs", value_name = "ENTRIES")]
    pub cache_entries: Option<u64>,
    /// Direct mode: 4 KiB pages of file data kept per process (0: none,
    /// and for sftpfs none in the run's server either unless -o
    /// page_cache= says; default 16384 for nullfs and timingfs, none for
    /// stackfs and pathfs, whose reads reach the kernel's page cache of
    /// their source).
    #[arg(long, requires = "fs", value_name = "PAGES")]
    pub page_cache: Option<u64>,
    /// Direct mode: print the metadata cache's hits and misses when
    /// PROGRAM exits.
    #[arg(long, requires = "fs")]
    pub stats: bool,
    /// Transport the program's mount is served over: classic, uring or
    /// auto (FUSEBOX_TRANSPORT).
    #[arg(long)]
    pub transport: Option<fusebox::transport::TransportKind>,
    /// Worker threads of a multi-threaded loop (FUSEBOX_WORKERS).
    #[arg(long)]
    pub workers: Option<usize>,
    /// io_uring wait: off, spin=US or adaptive[=US] (FUSEBOX_POLL).
    #[arg(long)]
    pub poll: Option<String>,
    /// No `fusebox stats` socket for the mount (FUSEBOX_STATS=0).
    #[arg(long)]
    pub no_stats: bool,
    /// Never call the program's getattr inside a READDIRPLUS (as libfuse):
    /// listings the program fills without attributes then cost the
    /// kernel a LOOKUP per entry (FUSEBOX_READDIRPLUS_LOOKUPS=0).
    #[arg(long)]
    pub no_readdirplus_lookups: bool,
    /// More `-o` options for the mount, after the program's own
    /// (FUSEBOX_OPTIONS); with --fs, the filesystem's options (sftpfs,
    /// objfs).
    #[arg(short = 'o', long = "options")]
    pub options: Option<String>,
    /// The drop-in library (default: beside this binary, or in
    /// ../lib/fusebox/; FUSEBOX_LIBFUSE3 names it too).
    #[arg(long)]
    pub library: Option<PathBuf>,
    /// The program and its arguments.
    #[arg(trailing_var_arg = true, required = true, num_args = 1.., value_name = "PROGRAM")]
    pub command: Vec<String>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Intercept {
    Rewrite,
    Dispatch,
}

/// Where the drop-in is: given, or found beside this binary.
pub(crate) fn find_library(given: Option<PathBuf>) -> Result<PathBuf> {
    find_beside(
        given.or_else(|| std::env::var_os("FUSEBOX_LIBFUSE3").map(PathBuf::from)),
        "libfuse3 drop-in",
        &[
            "libfuse3.so",
            "dropin/libfuse3.so.3",
            "../lib/fusebox/libfuse3.so.3",
        ],
        "build it with `cargo build --release -p fusebox-libfuse3` or name it with --library",
    )
}

/// A library of ours: `given`, or the first of `names` (relative to this
/// binary's directory) that exists; as an absolute path, since the
/// programs it is handed to change directories.
fn find_beside(given: Option<PathBuf>, what: &str, names: &[&str], hint: &str) -> Result<PathBuf> {
    let found = match given {
        Some(p) if !p.is_file() => bail!("the {what} {} does not exist", p.display()),
        Some(p) => p,
        None => {
            let exe = std::env::current_exe().context("locating this binary")?;
            let dir = exe.parent().context("this binary has no directory")?;
            let candidates: Vec<PathBuf> = names.iter().map(|n| dir.join(n)).collect();
            candidates
                .iter()
                .find(|p| p.is_file())
                .cloned()
                .with_context(|| {
                    let looked: Vec<String> =
                        candidates.iter().map(|p| p.display().to_string()).collect();
                    format!("no {what} found (looked for {}); {hint}", looked.join(", "))
                })?
        }
    };
    std::fs::canonicalize(&found).with_context(|| format!("resolving {}", found.display()))
}

/// A directory where the library answers to `libfuse3.so.3`, the name the
/// loader looks for.
fn loader_dir(lib: &Path) -> Result<PathBuf> {
    let lib = std::fs::canonicalize(lib).with_context(|| format!("resolving {}", lib.display()))?;
    if lib.file_name().is_some_and(|n| n == "libfuse3.so.3") {
        return Ok(lib.parent().expect("a file has a directory").to_path_buf());
    }
    let base = if rustix::process::geteuid().is_root() {
        PathBuf::from("/run/fusebox")
    } else {
        std::env::var_os("XDG_RUNTIME_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir)
    };
    let dir = base.join(format!("dropin-{}", rustix::process::getuid().as_raw()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let link = dir.join("libfuse3.so.3");
    if std::fs::read_link(&link).ok().as_deref() != Some(lib.as_path()) {
        let tmp = dir.join(format!(".libfuse3.so.3.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&lib, &tmp)
            .with_context(|| format!("linking {}", tmp.display()))?;
        std::fs::rename(&tmp, &link).with_context(|| format!("placing {}", link.display()))?;
    }
    Ok(dir)
}

/// Where the direct-mode library is: beside this binary, or installed.
pub(crate) fn find_preload() -> Result<PathBuf> {
    find_beside(
        std::env::var_os("FUSEBOX_DIRECT_PRELOAD").map(PathBuf::from),
        "direct-mode library",
        &[
            "libfusebox_direct_preload.so",
            "../lib/fusebox/libfusebox_direct_preload.so",
        ],
        "build it with `cargo build --release -p fusebox-direct-preload`",
    )
}

/// Run PROGRAM in direct mode.
fn run_direct(args: &RunArgs, spec: &str, at: &Path) -> Result<()> {
    let command = &args.command;
    let parsed = fusebox_registry::parse_spec(spec)?;
    let fs = parsed.fs;
    let mut page_ttl: Option<std::time::Duration> = None;
    let spec = match (fs.id, parsed.source) {
        (FsId::Stackfs | FsId::Pathfs, Some(src)) => {
            let src = std::fs::canonicalize(src).with_context(|| format!("source {src}"))?;
            if !src.is_dir() {
                bail!("source {} is not a directory", src.display());
            }
            format!("{}:{}", fs.name, src.display())
        }
        (FsId::Timingfs | FsId::TimingfsAsync, profile) => {
            let profile = profile.unwrap_or("ssd");
            if fusebox_examples::timingfs::TimingProfile::parse(profile).is_none() {
                bail!("unknown timingfs profile {profile:?} (pmem, ssd or NNus)");
            }
            format!("{}:{profile}", fs.name)
        }
        (FsId::Objfs, Some(src)) => {
            fusebox_objfs::BucketUrl::parse(src)?;
            let (o, _) = fusebox_objfs::ObjOptions::parse(args.options.as_slice())?;
            page_ttl = Some(o.attr_timeout);
            format!("{}:{src}", fs.name)
        }
        (FsId::Sftpfs, Some(src)) => {
            // Checked now, so that a typo is this command's error.
            fusebox_sftpfs::Remote::parse(src)?;
            let (o, _) = fusebox_sftpfs::SftpOptions::parse(args.options.as_slice())?;
            // Each process's page cache trusts a page as long as sftpfs
            // trusts what it knows of the file: its cache timeout.
            page_ttl = Some(if o.dir_cache {
                o.stat_timeout()
            } else {
                std::time::Duration::ZERO
            });
            format!("{}:{src}", fs.name)
        }
        (_, source) => {
            let mut s = fs.name.to_string();
            if let Some(src) = source {
                s.push(':');
                s.push_str(src);
            }
            s
        }
    };
    let run_server = matches!(fs.direct, Direct::RunServer { .. });
    if args.options.is_some() && !matches!(fs.id, FsId::Sftpfs | FsId::Objfs) {
        bail!(
            "-o with --fs {}: only sftpfs and objfs take options in direct mode",
            fs.name
        );
    }
    let at = if at.is_absolute() {
        at.to_path_buf()
    } else {
        std::env::current_dir()
            .context("reading the working directory")?
            .join(at)
    };
    if at == Path::new("/") {
        bail!("--at / would put the filesystem over the whole tree");
    }
    // Programs walk a path's ancestors (realpath, git's safe directories):
    // those are the kernel's and must exist; the mount point need not.
    let parent = at.parent().expect("not the root");
    if !parent.is_dir() {
        bail!(
            "--at {}: its parent {} is not a directory",
            at.display(),
            parent.display()
        );
    }
    let preload = find_preload()?;
    let (program, rest) = command.split_first().expect("clap requires one");
    let mut cmd = Command::new(program);
    cmd.args(rest);
    let mut value = preload.into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        value.push(":");
        value.push(old);
    }
    cmd.env("LD_PRELOAD", value)
        .env("FUSEBOX_DIRECT_FS", &spec)
        .env("FUSEBOX_DIRECT_AT", &at)
        .env(fusebox_direct::RUN_VAR, run_id())
        .env_remove("FUSEBOX_DIRECT_CWD");
    // A variable left from an outer run would name a page this run
    // does not share.
    cmd.env_remove("FUSEBOX_DIRECT_SHARED");
    if let Some(n) = args.cache_entries {
        cmd.env("FUSEBOX_DIRECT_CACHE", n.to_string());
    }
    if let Some(n) = args.page_cache {
        cmd.env("FUSEBOX_DIRECT_PAGE_CACHE", n.to_string());
    }
    match page_ttl {
        Some(t) => cmd.env(
            fusebox_direct::cache::PAGE_TTL_VAR,
            t.as_secs_f64().to_string(),
        ),
        None => cmd.env_remove(fusebox_direct::cache::PAGE_TTL_VAR),
    };
    if args.stats {
        // This process's id, which the program keeps: it reports.
        cmd.env("FUSEBOX_DIRECT_STATS", std::process::id().to_string());
    }
    match args.intercept {
        Some(Intercept::Rewrite) => cmd.env("FUSEBOX_DIRECT_INTERCEPT", "rewrite"),
        Some(Intercept::Dispatch) => cmd.env("FUSEBOX_DIRECT_INTERCEPT", "dispatch"),
        // Said once here; the library makes the same choice silently.
        None if std::env::var_os(fusebox_direct::intercept::MECHANISM_VAR).is_none() => {
            if let Some(why) = fusebox_direct::intercept::rewrite_unavailable() {
                eprintln!(
                    "fusebox run: {why}; catching calls with syscall user dispatch alone (slower)"
                );
                cmd.env(fusebox_direct::intercept::MECHANISM_VAR, "dispatch");
            }
            &mut cmd
        }
        None => &mut cmd,
    };
    cmd.env_remove(fusebox_direct::shared::DOOR_VAR);
    // Kept open until the exec, which the program inherits.
    let _door;
    if run_server {
        let door = start_server(&spec, server_options(args, fs.id).as_deref())?;
        cmd.env(
            fusebox_direct::shared::DOOR_VAR,
            door.as_raw_fd().to_string(),
        );
        _door = door;
    }
    let err = cmd.exec();
    Err(err).with_context(|| format!("running {program}"))
}

/// What tells this run from any other, for every process of it: this
/// process's id (the program's, after the exec) and the time it started.
fn run_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}-{}", std::process::id(), now.as_nanos())
}

/// The options the run's server gets: `-o`'s, and with `--page-cache 0`
/// no file data kept in the server either (sftpfs keeps 256 MiB there by
/// default, read by every process of the run), unless `-o` sizes it.
fn server_options(args: &RunArgs, fs: FsId) -> Option<String> {
    let given = args.options.as_deref().filter(|o| !o.is_empty());
    let sized = given.is_some_and(|o| o.split(',').any(|x| x.starts_with("page_cache=")));
    match (fs, args.page_cache, given) {
        (FsId::Sftpfs, Some(0), Some(o)) if !sized => Some(format!("{o},page_cache=0")),
        (FsId::Sftpfs, Some(0), None) => Some("page_cache=0".into()),
        _ => given.map(str::to_string),
    }
}

/// Start the run's server for `spec` (detached: it outlives this process,
/// which becomes the program, and ends when the run's last process has
/// closed the door) and wait until it serves. Returns the door's end the
/// program inherits.
fn start_server(spec: &str, options: Option<&str>) -> Result<OwnedFd> {
    let name = spec.split(':').next().unwrap_or(spec);
    use rustix::net::{socketpair, AddressFamily, SocketFlags, SocketType};
    let (ours, theirs) = socketpair(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )
    .context("making the door to the run's server")?;
    rustix::io::fcntl_setfd(&theirs, rustix::io::FdFlags::empty())
        .context("handing the door to the run's server")?;
    let exe = std::env::current_exe().context("finding this binary")?;
    let mut server = Command::new(&exe);
    server.args(["direct-server", "--detach", "--fs", spec]);
    if let Some(o) = options {
        server.arg("-o").arg(o);
    }
    let status = server
        .arg("--door")
        .arg(theirs.as_raw_fd().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .context("starting the run's server")?;
    drop(theirs);
    if !status.success() {
        bail!("the run's {name} server did not start ({status})");
    }
    // Its first word: ready, or why not. Nothing within 10 s: it hangs.
    let mut fds = [rustix::event::PollFd::new(
        &ours,
        rustix::event::PollFlags::IN,
    )];
    let ten = rustix::event::Timespec {
        tv_sec: 10,
        tv_nsec: 0,
    };
    let n = rustix::event::poll(&mut fds, Some(&ten)).context("waiting for the run's server")?;
    if n == 0 {
        bail!("the run's {name} server did not answer within 10 s");
    }
    let mut word = [0u8; 512];
    let got = rustix::net::recv(&ours, &mut word, rustix::net::RecvFlags::empty())
        .context("reading the run's server's first word")?
        .0;
    if &word[..got] != fusebox_direct::shared::READY {
        match got {
            0 => bail!("the run's {name} server exited before serving"),
            _ => bail!(
                "the run's {name} server: {}",
                String::from_utf8_lossy(&word[..got])
            ),
        }
    }
    // Out of the program's way where the limit allows, and inherited by
    // it (and its programs).
    let door = match rustix::io::fcntl_dupfd_cloexec(&ours, DOOR_FD) {
        Ok(high) => high,
        Err(_) => ours,
    };
    rustix::io::fcntl_setfd(&door, rustix::io::FdFlags::empty())
        .context("handing the door to the program")?;
    Ok(door)
}

/// Where the door goes in the program: high, below the placeholder pool
/// (1008) and the connections (1100).
const DOOR_FD: i32 = 1000;

/// `fusebox direct-server`: the run's server (see `start_server`). With
/// `detach`, start it as a process of its own group and return at once.
pub fn direct_server(spec: &str, options: &[String], door: i32, detach: bool) -> Result<()> {
    let door_fd = fusebox_direct::shared::adopt_door(door)
        .with_context(|| format!("--door {door}: not an inherited socket"))?;
    if detach {
        let exe = std::env::current_exe().context("finding this binary")?;
        // Not itself served by an outer run's direct mode.
        let mut server = Command::new(exe);
        server.args(["direct-server", "--fs", spec]);
        for o in options {
            server.arg("-o").arg(o);
        }
        server
            .arg("--door")
            .arg(door.to_string())
            .env_remove("LD_PRELOAD")
            .env_remove("FUSEBOX_DIRECT_FS")
            .env_remove("FUSEBOX_DIRECT_AT")
            .env_remove(fusebox_direct::shared::DOOR_VAR)
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting the run's server")?;
        return Ok(());
    }
    // The programs the filesystem might run must not hold the door.
    rustix::io::fcntl_setfd(&door_fd, rustix::io::FdFlags::CLOEXEC)
        .context("keeping the door to this process")?;
    // Two descriptors per process of the run (a connection, a pidfd).
    crate::mount::raise_fd_limit();
    // Holding no directory busy (a mount the user's shell started in).
    let _ = std::env::set_current_dir("/");
    let built = build_for_run(spec, options);
    let refused = |why: String| {
        fusebox_direct::shared::server::refuse(&door_fd, &why);
        anyhow::anyhow!(why)
    };
    match built.map_err(|e| refused(format!("{e:#}")))? {
        RunFs::Memfs(fs) => fusebox_direct::shared::serve(fs, door_fd).context("serving the run"),
        RunFs::Sftpfs(fs) => fusebox_direct::shared::serve(fs, door_fd).context("serving the run"),
        RunFs::Objfs(fs) => fusebox_direct::shared::serve(fs, door_fd).context("serving the run"),
    }
}

/// What a run's server serves.
enum RunFs {
    Memfs(std::sync::Arc<fusebox_examples::MemFs>),
    Sftpfs(std::sync::Arc<fusebox::PathAdapter<fusebox_sftpfs::SftpFs>>),
    Objfs(std::sync::Arc<fusebox::PathAdapter<fusebox_objfs::ObjFs>>),
}

fn build_for_run(spec: &str, options: &[String]) -> Result<RunFs> {
    let parsed = fusebox_registry::parse_spec(spec)?;
    match parsed.fs.id {
        FsId::Memfs => {
            // Every change reaches memfs through this server, and the
            // processes' caches are told of each by the run's shared
            // stamps: nothing can go stale behind a long TTL.
            Ok(RunFs::Memfs(std::sync::Arc::new(
                fusebox_examples::MemFs::new(fusebox::Timeouts::DAY),
            )))
        }
        FsId::Sftpfs => {
            let remote = fusebox_sftpfs::Remote::parse(parsed.source.unwrap_or_default())?;
            let (mut o, rest) = fusebox_sftpfs::SftpOptions::parse(options)?;
            // The run's processes read through this one server: its page
            // cache serves what one read to the next (the kernel's would
            // on a mount).
            o.page_cache.get_or_insert(256 << 20);
            let mut fuse = fusebox::Options::default();
            for r in &rest {
                fuse.apply(r).context("parsing -o")?;
            }
            let fs = fusebox_sftpfs::SftpFs::start(remote, o, &fuse.fs)?;
            Ok(RunFs::Sftpfs(std::sync::Arc::new(
                fusebox::PathAdapter::new(fs),
            )))
        }
        FsId::Objfs => {
            let url = fusebox_objfs::BucketUrl::parse(parsed.source.unwrap_or_default())?;
            let (o, rest) = fusebox_objfs::ObjOptions::parse(options)?;
            if let Some(r) = rest.first() {
                bail!("-o {r}: not an objfs option");
            }
            // The run's own staging area: a run is not restarted by a
            // supervisor, and two runs of one bucket must not share one.
            let staging = o.staging.clone().unwrap_or_else(|| {
                std::env::temp_dir().join(format!("fusebox-objfs-run-{}", std::process::id()))
            });
            let fs = fusebox_objfs::ObjFs::start(url, o, &staging)?;
            fs.take_over_journal()
                .with_context(|| format!("reading the journal in {}", staging.display()))?;
            Ok(RunFs::Objfs(std::sync::Arc::new(
                fusebox::PathAdapter::new(fs),
            )))
        }
        FsId::Stackfs | FsId::Pathfs | FsId::Nullfs | FsId::Timingfs | FsId::TimingfsAsync => {
            bail!(
                "{} is built by each process of a run, not by the run's server (served: {})",
                parsed.fs.name,
                fusebox_registry::names(|f| matches!(f.direct, Direct::RunServer { .. }))
            )
        }
    }
}

pub fn run(args: RunArgs) -> Result<()> {
    if let (Some(spec), Some(at)) = (&args.fs, &args.at) {
        return run_direct(&args, spec, at);
    }
    let lib = find_library(args.library)?;
    let dir = loader_dir(&lib)?;
    let (program, rest) = args.command.split_first().expect("clap requires one");
    let mut cmd = Command::new(program);
    cmd.args(rest);
    let path = match std::env::var_os("LD_LIBRARY_PATH") {
        Some(old) if !old.is_empty() => {
            let mut p = dir.clone().into_os_string();
            p.push(":");
            p.push(old);
            p
        }
        _ => dir.clone().into_os_string(),
    };
    cmd.env("LD_LIBRARY_PATH", path);
    if let Some(t) = args.transport {
        cmd.env("FUSEBOX_TRANSPORT", t.to_string());
    }
    if let Some(n) = args.workers {
        cmd.env("FUSEBOX_WORKERS", n.to_string());
    }
    if let Some(p) = args.poll {
        if fusebox::transport::uring::PollPolicy::parse(&p).is_none() {
            bail!("--poll {p:?}: use off, spin=US or adaptive[=US]");
        }
        cmd.env("FUSEBOX_POLL", p);
    }
    if args.no_stats {
        cmd.env("FUSEBOX_STATS", "0");
    }
    if args.no_readdirplus_lookups {
        cmd.env("FUSEBOX_READDIRPLUS_LOOKUPS", "0");
    }
    if let Some(o) = args.options {
        cmd.env("FUSEBOX_OPTIONS", o);
    }
    let err = cmd.exec();
    Err(err).with_context(|| format!("running {program}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn options_for(words: &[&str]) -> Option<String> {
        let mut argv = vec!["fusebox", "--fs", "sftpfs:h:/d", "--at", "/tmp/x"];
        argv.extend_from_slice(words);
        argv.extend(["--", "true"]);
        let cli = Cli::try_parse_from(argv).unwrap();
        server_options(&cli.run, FsId::Sftpfs)
    }

    #[test]
    fn no_page_cache_means_none_in_the_runs_server_either() {
        assert_eq!(options_for(&[]), None);
        assert_eq!(options_for(&["-o", "Port=2"]).as_deref(), Some("Port=2"));
        assert_eq!(
            options_for(&["--page-cache", "0"]).as_deref(),
            Some("page_cache=0")
        );
        assert_eq!(
            options_for(&["--page-cache", "0", "-o", "Port=2"]).as_deref(),
            Some("Port=2,page_cache=0")
        );
        // What -o says wins.
        assert_eq!(
            options_for(&["--page-cache", "0", "-o", "page_cache=1M"]).as_deref(),
            Some("page_cache=1M")
        );
        assert_eq!(
            options_for(&["--page-cache", "64", "-o", "Port=2"]).as_deref(),
            Some("Port=2")
        );
    }
}
