//! `fusebox doctor`: what this kernel and machine offer fusebox, and what
//! to do about each missing piece. The kernel's own answer comes from a
//! short probe mount (nullfs in a scratch directory, unmounted at once):
//! its INIT says which protocol and capabilities the kernel offers.

use std::fmt;
use std::path::{Path, PathBuf};

use anyhow::Result;
use clap::Args;
use fusebox::abi::flags::init;
use fusebox::protocol::Connection;

#[derive(Args)]
pub struct DoctorArgs {
    /// Do not mount anything: report only what files and sysfs say (the
    /// protocol version and the capabilities INIT offers stay unknown).
    #[arg(long)]
    pub no_probe: bool,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Status {
    Ok,
    /// Works, with a caveat.
    Note,
    /// Missing or off: a feature will not work until fixed.
    Missing,
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Status::Ok => "ok",
            Status::Note => "note",
            Status::Missing => "missing",
        })
    }
}

struct Check {
    what: &'static str,
    status: Status,
    detail: String,
    /// What to do, when not ok.
    fix: Option<String>,
}

fn check(what: &'static str, status: Status, detail: impl Into<String>) -> Check {
    Check {
        what,
        status,
        detail: detail.into(),
        fix: None,
    }
}

impl Check {
    fn fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }
}

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";
const FUSECTL: &str = "/sys/fs/fuse/connections";

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

pub fn run(args: DoctorArgs) -> Result<()> {
    let root = rustix::process::geteuid().is_root();
    let mut checks = Vec::new();

    let uname = rustix::system::uname();
    checks.push(check(
        "kernel",
        Status::Ok,
        format!(
            "Linux {} ({})",
            uname.release().to_string_lossy(),
            uname.machine().to_string_lossy()
        ),
    ));

    let device = device_check();
    let device_ok = device.status == Status::Ok;
    checks.push(device);

    let probe = if args.no_probe || !device_ok {
        None
    } else {
        Some(probe_mount())
    };
    checks.extend(protocol_checks(probe.as_ref(), root));
    checks.push(fusectl_check());
    checks.push(user_mount_check());
    checks.push(fd_limit_check());
    checks.push(stackfs_check());
    checks.extend(direct_mode_checks(root));
    checks.push(library_check(
        "libfuse3 drop-in",
        crate::run::find_library(None),
        "fusebox run -- PROGRAM runs unchanged libfuse programs on it",
    ));
    checks.push(library_check(
        "direct-mode library",
        crate::run::find_preload(),
        "fusebox run --fs FS --at DIR -- PROGRAM serves in-process",
    ));

    let width = checks.iter().map(|c| c.what.len()).max().unwrap_or(0);
    for c in &checks {
        println!(
            "{:<7} {:<width$}  {}",
            c.status.to_string(),
            c.what,
            c.detail
        );
        if let Some(fix) = &c.fix {
            println!("{:<7} {:<width$}  -> {fix}", "", "");
        }
    }
    let missing = checks
        .iter()
        .filter(|c| c.status == Status::Missing)
        .count();
    println!(
        "{}",
        if missing == 0 {
            "everything fusebox uses is here".to_string()
        } else {
            format!("{missing} missing (see the -> lines)")
        }
    );
    if !device_ok || matches!(probe, Some(Err(_))) {
        // FUSE itself does not work here: a script asking should know.
        std::process::exit(1);
    }
    Ok(())
}

fn device_check() -> Check {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    match std::fs::metadata("/dev/fuse") {
        Ok(m) if m.file_type().is_char_device() => {
            let mode = m.permissions().mode() & 0o777;
            let c = check(
                "/dev/fuse",
                Status::Ok,
                format!("character device, mode {mode:o}"),
            );
            if mode & 0o006 == 0 && !rustix::process::geteuid().is_root() {
                return check(
                    "/dev/fuse",
                    Status::Missing,
                    format!("mode {mode:o}: this user cannot open it"),
                )
                .fix("chmod 666 /dev/fuse (Debian's default), or mount as root");
            }
            c
        }
        Ok(_) => check(
            "/dev/fuse",
            Status::Missing,
            "exists but is not a character device",
        )
        .fix("mknod -m 666 /dev/fuse c 10 229"),
        Err(e) => check("/dev/fuse", Status::Missing, format!("{e}"))
            .fix("modprobe fuse (CONFIG_FUSE_FS), or in a container pass --device /dev/fuse"),
    }
}

/// Mount nullfs on a scratch directory and keep what INIT said.
fn probe_mount() -> Result<Connection, String> {
    // A directory of our own: create_dir fails on anything already there.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!("fusebox-doctor-{}-{nanos}", std::process::id()));
    std::fs::create_dir(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let result = probe_at(&dir);
    let _ = std::fs::remove_dir(&dir);
    result
}

fn probe_at(dir: &Path) -> Result<Connection, String> {
    let mut opts = fusebox::Options::default();
    opts.mount.fsname = Some("fusebox-doctor".into());
    opts.mount.subtype = Some("fusebox-doctor".into());
    let cfg = fusebox::SessionConfig {
        workers: 1,
        transport: fusebox::transport::TransportKind::Classic,
        thread_policy: fusebox::session::ThreadPolicy::Normal,
        stats_socket: false,
        ..fusebox::SessionConfig::default()
    };
    let fs = fusebox_examples::NullFs::new(fusebox::Timeouts::default());
    let session = fusebox::Session::mount(fs, dir, &opts, cfg).map_err(|e| {
        let mut s = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(inner) = src {
            s.push_str(&format!(": {inner}"));
            src = inner.source();
        }
        s
    })?;
    let conn = session.connection().clone();
    drop(session);
    Ok(conn)
}

fn protocol_checks(probe: Option<&Result<Connection, String>>, root: bool) -> Vec<Check> {
    let uring_param = read_trimmed(ENABLE_URING);
    let io_uring_disabled = read_trimmed("/proc/sys/kernel/io_uring_disabled");
    let mut v = Vec::new();
    let conn = match probe {
        None => {
            v.push(check(
                "FUSE protocol",
                Status::Note,
                "not probed (--no-probe, or /dev/fuse unusable)",
            ));
            None
        }
        Some(Err(e)) => {
            v.push(
                check(
                    "FUSE protocol",
                    Status::Missing,
                    format!("a probe mount failed: {e}"),
                )
                .fix(if root {
                    "see the error; `fusebox mount nullfs DIR -f -v` shows more"
                } else {
                    "install fuse3 (fusermount3) or run as root"
                }),
            );
            None
        }
        Some(Ok(c)) => {
            v.push(check(
                "FUSE protocol",
                Status::Ok,
                format!(
                    "7.{} in use (fusebox speaks 7.{} to 7.{})",
                    c.proto_minor,
                    fusebox::abi::MIN_KERNEL_MINOR,
                    fusebox::abi::KERNEL_MINOR_VERSION
                ),
            ));
            Some(c)
        }
    };

    // io_uring transport.
    let uring = match (&uring_param, conn) {
        (None, _) => check(
            "io_uring transport",
            Status::Missing,
            format!("this kernel has no FUSE-over-io_uring ({ENABLE_URING} is absent)"),
        )
        .fix("Linux 6.14 or later built with CONFIG_FUSE_IO_URING=y; --transport classic works meanwhile"),
        (Some(p), _) if p != "Y" && p != "1" => check(
            "io_uring transport",
            Status::Missing,
            format!("built in, switched off (enable_uring={p})"),
        )
        .fix(format!("echo Y > {ENABLE_URING} (root; until reboot, or fuse.enable_uring=1 on the kernel command line)")),
        (Some(_), Some(c)) if !c.kernel_offers(init::OVER_IO_URING) => check(
            "io_uring transport",
            Status::Missing,
            "enable_uring=Y but the kernel did not offer FUSE_OVER_IO_URING in INIT",
        )
        .fix("check dmesg; --transport classic works meanwhile"),
        (Some(_), Some(_)) => check(
            "io_uring transport",
            Status::Ok,
            "enable_uring=Y and INIT offers FUSE_OVER_IO_URING (--transport uring)",
        ),
        (Some(_), None) => check(
            "io_uring transport",
            Status::Note,
            "enable_uring=Y (not confirmed by a probe mount)",
        ),
    };
    v.push(uring);
    if let Some(d) = io_uring_disabled.filter(|d| d != "0") {
        v.push(
            check(
                "io_uring syscalls",
                Status::Missing,
                format!(
                    "kernel.io_uring_disabled={d}: io_uring is refused{}",
                    if d == "1" {
                        " outside kernel.io_uring_group"
                    } else {
                        ""
                    }
                ),
            )
            .fix("sysctl kernel.io_uring_disabled=0"),
        );
    }

    // Passthrough.
    v.push(match conn {
        Some(c) if c.kernel_offers(init::PASSTHROUGH) => check(
            "passthrough",
            if root { Status::Ok } else { Status::Note },
            if root {
                "INIT offers FUSE_PASSTHROUGH (-o passthrough)".to_string()
            } else {
                "INIT offers FUSE_PASSTHROUGH, but registering backing files needs root (CAP_SYS_ADMIN)".to_string()
            },
        ),
        Some(_) => check("passthrough", Status::Missing, "INIT does not offer FUSE_PASSTHROUGH")
            .fix("Linux 6.9 or later built with CONFIG_FUSE_PASSTHROUGH=y"),
        None => check("passthrough", Status::Note, "not probed"),
    });
    v
}

fn fusectl_check() -> Check {
    let mounted = std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(2) == Some("fusectl"));
    if mounted {
        check("fusectl", Status::Ok, format!("mounted at {FUSECTL}"))
    } else if !Path::new(FUSECTL).exists() {
        check(
            "fusectl",
            Status::Missing,
            format!("{FUSECTL} does not exist"),
        )
        .fix("a kernel with CONFIG_FUSE_FS exposes it once the fuse module is loaded")
    } else if rustix::process::geteuid().is_root() {
        check(
            "fusectl",
            Status::Note,
            "not mounted: fusebox mounts a private one when it aborts a connection; other tools and users need the system's",
        )
        .fix(format!("mount -t fusectl none {FUSECTL}"))
    } else {
        check(
            "fusectl",
            Status::Missing,
            "not mounted: aborting a hung connection (`fusebox umount --abort`) needs it",
        )
        .fix(format!("mount -t fusectl none {FUSECTL} (root)"))
    }
}

fn user_mount_check() -> Check {
    use std::os::unix::fs::PermissionsExt;
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<PathBuf>>())
        .unwrap_or_default()
        .into_iter()
        .map(|d| d.join("fusermount3"))
        .find(|p| p.is_file());
    let Some(path) = found else {
        return check(
            "user mounts",
            Status::Missing,
            "no fusermount3 in PATH: only root can mount",
        )
        .fix("apt-get install fuse3");
    };
    let setuid = std::fs::metadata(&path)
        .map(|m| m.permissions().mode() & 0o4000 != 0)
        .unwrap_or(false);
    if !setuid {
        return check(
            "user mounts",
            Status::Missing,
            format!("{} is not setuid root: users cannot mount", path.display()),
        )
        .fix(format!("chmod u+s {}", path.display()));
    }
    let allow_other = std::fs::read_to_string("/etc/fuse.conf")
        .map(|s| s.lines().any(|l| l.trim() == "user_allow_other"))
        .unwrap_or(false);
    let c = check(
        "user mounts",
        Status::Ok,
        format!("through {} (setuid)", path.display()),
    );
    if allow_other {
        c
    } else {
        Check {
            status: Status::Note,
            detail: format!(
                "through {} (setuid); users may not use -o allow_other",
                path.display()
            ),
            ..c
        }
        .fix("add user_allow_other to /etc/fuse.conf to let them")
    }
}

/// How this user's stackfs reopens files its fd cache let go (tried on
/// the home directory, else the working directory).
fn stackfs_check() -> Check {
    use fusebox_examples::stackfs::{auto_reopen, Reopen};
    let dir = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_dir())
        .unwrap_or_else(|| PathBuf::from("."));
    match auto_reopen(&dir) {
        Ok(Reopen::ByPath) => check(
            "stackfs",
            Status::Note,
            "reopens files by parent and name: this user may not open them by kernel \
             file handle (CAP_DAC_READ_SEARCH); a file renamed in the source behind the \
             mount's back is found again at its next lookup",
        ),
        Ok(_) => check(
            "stackfs",
            Status::Ok,
            "reopens files by kernel file handle (CAP_DAC_READ_SEARCH)",
        ),
        Err(e) => check(
            "stackfs",
            Status::Note,
            format!("not probed ({}: {e})", dir.display()),
        ),
    }
}

fn fd_limit_check() -> Check {
    let l = rustix::process::getrlimit(rustix::process::Resource::Nofile);
    let show = |v: Option<u64>| v.map_or("unlimited".to_string(), |v| v.to_string());
    let hard = l.maximum.unwrap_or(u64::MAX);
    let c = check(
        "open files",
        Status::Ok,
        format!(
            "soft {} / hard {} (stackfs keeps a node cache of fds below the hard limit)",
            show(l.current),
            show(l.maximum)
        ),
    );
    if hard < 4096 {
        Check {
            status: Status::Note,
            ..c
        }
        .fix("raise the hard limit (ulimit -Hn, LimitNOFILE=) for large trees on stackfs")
    } else {
        c
    }
}

fn direct_mode_checks(root: bool) -> Vec<Check> {
    let mut v = Vec::new();
    let sud = fusebox_direct::intercept::dispatch_available();
    v.push(match sud {
        Ok(()) => check(
            "syscall user dispatch",
            Status::Ok,
            "available (direct mode)",
        ),
        Err(e) => check("syscall user dispatch", Status::Missing, format!("{e}"))
            .fix("Linux 5.11+ with CONFIG_GENERIC_ENTRY (x86-64)"),
    });
    let min_addr = read_trimmed("/proc/sys/vm/mmap_min_addr");
    v.push(match (min_addr.as_deref(), root) {
        (Some("0"), _) => check("call-site rewriting", Status::Ok, "vm.mmap_min_addr=0"),
        (m, true) => check(
            "call-site rewriting",
            Status::Ok,
            format!(
                "vm.mmap_min_addr={}; direct mode sets 0 while it maps its trampoline (root)",
                m.unwrap_or("?")
            ),
        ),
        (m, false) => check(
            "call-site rewriting",
            Status::Note,
            format!(
                "vm.mmap_min_addr={}: only root may map the trampoline at address 0",
                m.unwrap_or("?")
            ),
        )
        .fix("fusebox run uses syscall user dispatch alone here (slower); root or vm.mmap_min_addr=0 rewrites call sites"),
    });
    v
}

fn library_check(what: &'static str, found: Result<PathBuf>, use_: &str) -> Check {
    match found {
        Ok(p) => check(what, Status::Ok, format!("{} ({use_})", p.display())),
        Err(e) => check(what, Status::Note, format!("{e:#}")),
    }
}
