//! Peer subjects: other FUSE frameworks' own passthrough filesystems, built
//! from their upstream sources at bench time and serving the same backing
//! directory as fusebox does, so "ratio to best peer" compares frameworks
//! rather than filesystem designs.
//!
//! Nothing here contains the peers' code: `prepare` builds each one from
//! where its project publishes it (the Debian package's example source, the
//! Go module proxy) into `WORKDIR/peers/`, and skips the build when a fresh
//! binary is already there, so only the first run pays for it. The one
//! exception is fuser, which publishes no directory passthrough: its peer is
//! a minimal one of ours on fuser's API, in `crates/bench/peers/`.

use std::ffi::OsString;
use std::fs;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::SystemTime;

use anyhow::{bail, Context, Result};

use crate::results::SubjectInfo;
use crate::subject::{spawn_daemon, Mounted, Subject};

/// Every peer, in the order the tables show them: libfuse's io_uring mode
/// built from `libfuse_src` (listed as unavailable without one), Debian's
/// libfuse, fuser, go-fuse.
pub fn all(libfuse_src: Option<&Path>) -> Vec<Box<dyn Subject>> {
    vec![
        Box::new(LibfuseSource::new(libfuse_src, LibfuseMode::Uring)),
        Box::new(LibfuseSource::new(
            libfuse_src,
            LibfuseMode::UringPassthrough,
        )),
        Box::new(Libfuse::default()),
        Box::new(Fuser::default()),
        Box::new(GoFuse::default()),
    ]
}

/// `WORKDIR/peers`, created and made absolute (GOBIN must be absolute, and
/// the daemons are started with paths that must not depend on our cwd).
fn peers_dir(workdir: &Path) -> Result<PathBuf> {
    let dir = workdir.join("peers");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    std::fs::canonicalize(&dir).with_context(|| format!("resolving {}", dir.display()))
}

/// Run a build step with its output captured: builds must not write to our
/// stdout (the bench prints its own table there). A failure carries the
/// tail of what the tool said, which is where compilers put the reason.
fn run_quiet(mut cmd: Command, what: &str) -> Result<Output> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("{what}: could not run {}", cmd.get_program().display()))?;
    if !out.status.success() {
        // Some tools (apt) report on stdout; fall back to it when stderr is empty.
        let text = if out.stderr.iter().any(|b| !b.is_ascii_whitespace()) {
            &out.stderr
        } else {
            &out.stdout
        };
        bail!(
            "{what} failed ({}):\n{}",
            out.status,
            last_lines(&String::from_utf8_lossy(text), 20)
        );
    }
    Ok(out)
}

fn last_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.trim_end().lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Is `bin` at least as new as `src`? A missing or unreadable file counts
/// as stale, so the caller rebuilds rather than running something unknown.
fn up_to_date(bin: &Path, src: &Path) -> bool {
    let mtime = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    matches!((mtime(bin), mtime(src)), (Some(b), Some(s)) if b >= s)
}

/// Is `program` on PATH? Checked by running it, since that is exactly what
/// the build will do next.
fn have(program: &str, probe_arg: &str) -> bool {
    Command::new(program)
        .arg(probe_arg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

// ---------------------------------------------------------------- libfuse

/// Where Debian's libfuse3-dev installs the upstream example sources.
const LIBFUSE_EXAMPLE: &str = "/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c";
const LIBFUSE_APT: &str = "apt-get install libfuse3-dev pkg-config gcc";

/// libfuse's low-level passthrough example, `passthrough_ll`, compiled
/// against the system libfuse3. Run in its default configuration: the
/// multithreaded session loop, the default cache mode (1 s timeouts).
#[derive(Default)]
pub struct Libfuse {
    /// Let `prepare` run `apt-get install -y` for the build's needs when they
    /// are missing. Off by default: installing packages is the user's call.
    pub install: bool,
    binary: Option<PathBuf>,
}

impl Libfuse {
    fn installed_version() -> Option<String> {
        let out = Command::new("pkg-config")
            .args(["--modversion", "fuse3"])
            .stdin(Stdio::null())
            .output()
            .ok()?;
        let v = String::from_utf8_lossy(&out.stdout).trim().to_string();
        (out.status.success() && !v.is_empty()).then_some(v)
    }

    fn apt_install() -> Result<()> {
        let install = || {
            let mut cmd = Command::new("apt-get");
            cmd.args(["install", "-y", "libfuse3-dev", "pkg-config", "gcc"])
                .env("DEBIAN_FRONTEND", "noninteractive");
            run_quiet(cmd, "apt-get install -y libfuse3-dev pkg-config gcc").map(drop)
        };
        // A fresh container often has no package lists yet: refresh them
        // once and retry rather than fail on the first attempt.
        if install().is_err() {
            let mut update = Command::new("apt-get");
            update.arg("update");
            run_quiet(update, "apt-get update")?;
            install()?;
        }
        Ok(())
    }
}

impl Subject for Libfuse {
    fn info(&self) -> SubjectInfo {
        // The runner records info before prepare, so the version comes from
        // pkg-config here rather than from the build; "major.minor" matches
        // how libfuse names its releases.
        let version = Self::installed_version()
            .map(|v| v.split('.').take(2).collect::<Vec<_>>().join("."))
            .unwrap_or_else(|| "3".into());
        SubjectInfo {
            name: "libfuse".into(),
            description: format!(
                "libfuse {version} passthrough_ll (Debian package example), multithreaded"
            ),
            is_peer: true,
            ..Default::default()
        }
    }

    fn prepare(&mut self, workdir: &Path) -> Result<()> {
        let src = Path::new(LIBFUSE_EXAMPLE);
        let missing =
            !src.exists() || Self::installed_version().is_none() || !have("gcc", "--version");
        if missing {
            if !self.install {
                bail!("{LIBFUSE_EXAMPLE}, pkg-config's fuse3 or gcc is missing: {LIBFUSE_APT}");
            }
            Self::apt_install()?;
            if !src.exists() {
                bail!("{LIBFUSE_EXAMPLE} is still missing after installing libfuse3-dev");
            }
        }
        let bin = peers_dir(workdir)?.join("passthrough_ll");
        if !up_to_date(&bin, src) {
            let flags = run_quiet(
                {
                    let mut c = Command::new("pkg-config");
                    c.args(["fuse3", "--cflags", "--libs"]);
                    c
                },
                "pkg-config fuse3 --cflags --libs",
            )?;
            let flags = String::from_utf8_lossy(&flags.stdout).into_owned();
            // Build beside the target and rename, so an interrupted build
            // never leaves a fresh-looking broken binary for the next run.
            let tmp = bin.with_extension("tmp");
            let mut cc = Command::new("gcc");
            cc.args(["-O2", "-Wall", "-o"])
                .arg(&tmp)
                .arg(src)
                .args(flags.split_whitespace());
            run_quiet(cc, "building passthrough_ll")?;
            std::fs::rename(&tmp, &bin).with_context(|| format!("installing {}", bin.display()))?;
        }
        self.binary = Some(bin);
        Ok(())
    }

    fn mount(&self, backing: &Path, mnt: &Path) -> Result<Mounted> {
        let bin = self
            .binary
            .as_ref()
            .context("libfuse peer used before prepare")?;
        let mut cmd = Command::new(bin);
        // -f keeps it in the foreground so the child we hold is the daemon.
        cmd.arg("-f").arg("-o").arg(libfuse_opts(backing)).arg(mnt);
        spawn_daemon(cmd, mnt)
    }
}

/// `source=BACKING,allow_other`. libfuse splits -o on commas and lets a
/// backslash escape the next character, so both are escaped in the path.
fn libfuse_opts(backing: &Path) -> OsString {
    let mut v = b"source=".to_vec();
    for &b in backing.as_os_str().as_bytes() {
        if b == b',' || b == b'\\' {
            v.push(b'\\');
        }
        v.push(b);
    }
    v.extend_from_slice(b",allow_other");
    OsString::from_vec(v)
}

// ------------------------------------------------- libfuse from source

/// The environment variable naming a libfuse source tree, for when
/// `--libfuse-src` is not given.
pub const LIBFUSE_SRC_ENV: &str = "FUSEBOX_LIBFUSE_SRC";

const LIBFUSE_SRC_HINT: &str =
    "no libfuse source tree given (--libfuse-src DIR or FUSEBOX_LIBFUSE_SRC; \
     a clone of https://github.com/libfuse/libfuse, see the README)";

/// How passthrough_hp runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LibfuseMode {
    /// `--nopassthrough -o io_uring`: every read and write goes through the
    /// daemon. passthrough_hp's default caching: a day of entry and
    /// attribute timeouts, writeback cache, keep_cache.
    Uring,
    /// `-o io_uring` with passthrough: the kernel reads and writes the
    /// backing files itself (passthrough_hp turns the writeback cache off,
    /// as the kernel refuses both).
    UringPassthrough,
    /// `--nocache --nopassthrough -o io_uring`: timeouts 0, no writeback.
    UringNoCache,
}

impl LibfuseMode {
    pub fn subject_name(self) -> &'static str {
        match self {
            LibfuseMode::Uring => "libfuse-uring",
            LibfuseMode::UringPassthrough => "libfuse-uring-pt",
            LibfuseMode::UringNoCache => "libfuse-uring-nocache",
        }
    }

    fn args(self) -> &'static [&'static str] {
        match self {
            LibfuseMode::Uring => &["--nopassthrough"],
            LibfuseMode::UringPassthrough => &[],
            LibfuseMode::UringNoCache => &["--nocache", "--nopassthrough"],
        }
    }
}

/// libfuse's `example/passthrough_hp` with libfuse's own FUSE-over-io_uring
/// (3.19 / master), built with meson from a source tree the user points at.
/// The build goes to `WORKDIR/peers/libfuse-build`, reused until a source
/// file changes or another tree is named; nothing of it is in this
/// repository. Run as libfuse documents it: one pinned ring thread per CPU,
/// queue depth 8 (its default).
pub struct LibfuseSource {
    src: Option<PathBuf>,
    mode: LibfuseMode,
    /// Let `prepare` run `apt-get install -y` for meson, ninja, g++ and
    /// liburing when they are missing.
    pub install: bool,
    binary: Option<PathBuf>,
}

/// What the build needs beyond a C toolchain: meson and ninja, a C++
/// compiler (passthrough_hp is C++), and liburing, without which libfuse
/// builds without io_uring and this peer would not be what it says.
const LIBFUSE_BUILD_APT: &[&str] = &["meson", "ninja-build", "g++", "liburing-dev", "pkg-config"];

impl LibfuseSource {
    pub fn new(src: Option<&Path>, mode: LibfuseMode) -> LibfuseSource {
        LibfuseSource {
            src: src.map(Path::to_path_buf),
            mode,
            install: false,
            binary: None,
        }
    }

    /// `version: 'X'` of the tree's meson.build, and the commit if it is a
    /// git checkout.
    fn version(src: &Path) -> Option<String> {
        let meson = fs::read_to_string(src.join("meson.build")).ok()?;
        let v = meson
            .split("version:")
            .nth(1)?
            .split('\'')
            .nth(1)?
            .to_string();
        let commit = Command::new("git")
            .arg("-C")
            .arg(src)
            .args(["rev-parse", "--short=12", "HEAD"])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
        Some(match commit {
            Some(c) => format!("{v} (git {c})"),
            None => v,
        })
    }

    fn missing_tools() -> Vec<&'static str> {
        let mut missing = vec![];
        for (tool, arg, pkg) in [
            ("meson", "--version", "meson"),
            ("ninja", "--version", "ninja-build"),
            ("g++", "--version", "g++"),
            ("pkg-config", "--version", "pkg-config"),
        ] {
            if !have(tool, arg) {
                missing.push(pkg);
            }
        }
        let liburing = Command::new("pkg-config")
            .args(["--exists", "liburing"])
            .stdin(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !liburing {
            missing.push("liburing-dev");
        }
        missing
    }

    fn build(src: &Path, build: &Path) -> Result<PathBuf> {
        let bin = build.join("example").join("passthrough_hp");
        // A build of another tree, or of an older state of this one, is
        // redone from scratch: meson keeps absolute source paths.
        let stamp = build.join("fusebox-source");
        let canon =
            fs::canonicalize(src).with_context(|| format!("resolving {}", src.display()))?;
        let same_tree = fs::read(&stamp).is_ok_and(|b| b == canon.as_os_str().as_bytes());
        let fresh = same_tree
            && ["lib", "include", "example"]
                .iter()
                .all(|d| built_after_sources(&bin, &canon.join(d)))
            && up_to_date(&bin, &canon.join("meson.build"));
        if fresh {
            return Ok(bin);
        }
        if build.exists() {
            fs::remove_dir_all(build).with_context(|| format!("removing {}", build.display()))?;
        }
        let mut setup = Command::new("meson");
        setup.arg("setup").arg(build).arg(&canon).args([
            "--buildtype=release",
            "-Dtests=false",
            "-Dutils=false",
            "-Duseroot=false",
            "-Dexamples=true",
            "-Denable-io-uring=true",
        ]);
        run_quiet(setup, "meson setup of the libfuse source tree")?;
        // libfuse's meson quietly drops io_uring when liburing is missing or
        // too old: a peer without it would be mislabelled, so refuse.
        let config = fs::read_to_string(build.join("fuse_config.h")).unwrap_or_default();
        if !config.lines().any(|l| l.trim() == "#define HAVE_URING") {
            bail!("libfuse was configured without io_uring support (liburing-dev missing or lacking SQE128?)");
        }
        let mut ninja = Command::new("ninja");
        ninja.arg("-C").arg(build).arg("example/passthrough_hp");
        run_quiet(ninja, "building libfuse's passthrough_hp (ninja)")?;
        if !bin.exists() {
            bail!("ninja finished but {} is missing", bin.display());
        }
        fs::write(&stamp, canon.as_os_str().as_bytes())?;
        Ok(bin)
    }

    /// Whether `pid` runs libfuse's ring threads: passthrough_hp falls back
    /// to /dev/fuse when the kernel refuses io_uring, and a peer measured
    /// that way would be labelled wrongly.
    fn has_ring_threads(pid: u32) -> bool {
        let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
            return false;
        };
        tasks.flatten().any(|t| {
            fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with("fuse-ring-"))
        })
    }
}

impl Subject for LibfuseSource {
    fn info(&self) -> SubjectInfo {
        let version = self
            .src
            .as_deref()
            .and_then(Self::version)
            .unwrap_or_else(|| "3.19+ (master)".into());
        let how = match self.mode {
            LibfuseMode::Uring => {
                "passthrough_hp --nopassthrough -o io_uring (default caching: a day of timeouts, writeback cache)"
            }
            LibfuseMode::UringPassthrough => {
                "passthrough_hp -o io_uring with passthrough (a day of timeouts)"
            }
            LibfuseMode::UringNoCache => {
                "passthrough_hp --nocache --nopassthrough -o io_uring (timeouts 0)"
            }
        };
        SubjectInfo {
            name: self.mode.subject_name().into(),
            description: format!(
                "libfuse {version} {how}; one pinned ring thread per CPU, queue depth 8"
            ),
            is_peer: true,
            ..Default::default()
        }
    }

    fn prepare(&mut self, workdir: &Path) -> Result<()> {
        let Some(src) = self.src.clone() else {
            bail!("{LIBFUSE_SRC_HINT}");
        };
        if !src.join("example").join("passthrough_hp.cc").exists() {
            bail!(
                "{} is not a libfuse source tree (no example/passthrough_hp.cc)",
                src.display()
            );
        }
        fusebox::transport::uring::availability().map_err(anyhow::Error::msg)?;
        let missing = Self::missing_tools();
        if !missing.is_empty() {
            if !self.install {
                bail!(
                    "building libfuse needs: apt-get install {}",
                    missing.join(" ")
                );
            }
            let mut cmd = Command::new("apt-get");
            cmd.args(["install", "-y"])
                .args(LIBFUSE_BUILD_APT)
                .env("DEBIAN_FRONTEND", "noninteractive");
            run_quiet(cmd, "apt-get install of libfuse's build tools")?;
        }
        let build = peers_dir(workdir)?.join("libfuse-build");
        self.binary = Some(Self::build(&src, &build)?);
        Ok(())
    }

    fn mount(&self, backing: &Path, mnt: &Path) -> Result<Mounted> {
        let bin = self
            .binary
            .as_ref()
            .context("libfuse (source) peer used before prepare")?;
        let mut cmd = Command::new(bin);
        // --foreground: the child we hold is the daemon. Options as
        // passthrough_hp takes them: flags, -o, then source and mountpoint.
        cmd.arg("--foreground")
            .args(self.mode.args())
            .arg("-o")
            .arg("io_uring,allow_other")
            .arg(backing)
            .arg(mnt);
        let mounted = spawn_daemon(cmd, mnt)?;
        let pid = mounted.daemon_pid.context("no daemon pid")?;
        // The ring threads start with INIT's answer, a moment after the
        // mount appears.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !Self::has_ring_threads(pid) {
            if std::time::Instant::now() > deadline {
                bail!(
                    "libfuse mounted without io_uring (no fuse-ring threads): is enable_uring on?"
                );
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        Ok(mounted)
    }
}

// ---------------------------------------------------------------- fuser

/// The fuser release line our passthrough is written against: its
/// Cargo.toml asks for this, and its Cargo.lock pins the exact release.
const FUSER_VERSION: &str = "0.18";

/// Our passthrough on fuser's API, relative to this crate's directory.
const FUSER_PROJECT: &str = "peers/fuser-passthrough";

/// The `fuser` crate. Its releases ship no directory passthrough (0.18.0's
/// `examples/passthrough.rs` serves one fixed file to demonstrate kernel
/// FUSE_PASSTHROUGH), so this peer runs a minimal passthrough of our own,
/// written against fuser's public API and kept to what libfuse's
/// `passthrough_ll` does: 1 s timeouts, a real fd per open file. It is
/// built from this repository by cargo, and run in fuser's default session
/// configuration: `Config::n_threads` unset, i.e. one event-loop thread.
#[derive(Default)]
pub struct Fuser {
    binary: Option<PathBuf>,
}

impl Fuser {
    fn project() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(FUSER_PROJECT)
    }

    /// A cargo command: the cargo running us (`cargo run` sets CARGO),
    /// else the one that built us, else whatever PATH offers.
    fn cargo() -> Command {
        let cargo = std::env::var_os("CARGO")
            .or_else(|| {
                option_env!("CARGO")
                    .filter(|p| Path::new(p).exists())
                    .map(OsString::from)
            })
            .unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(&cargo);
        // fuser's published crate carries a rust-toolchain file (1.85), and
        // rustup's rustc proxy obeys it for the build script it compiles in
        // that directory, failing unless that toolchain is installed. Only a
        // cargo started through rustup pins the toolchain for its children
        // (RUSTUP_TOOLCHAIN); a toolchain's own cargo, as CARGO names, does
        // not. So hand cargo the rustc installed beside it, unless the user
        // chose one.
        let beside = Path::new(&cargo).with_file_name("rustc");
        if std::env::var_os("RUSTC").is_none() && Path::new(&cargo).is_absolute() && beside.exists()
        {
            cmd.env("RUSTC", beside);
        }
        cmd
    }
}

/// The newest modification time among the files under `dir`. Build output
/// (`target`) is skipped: a build inside the project is not an edit.
fn newest_source(dir: &Path) -> std::io::Result<SystemTime> {
    let mut newest = SystemTime::UNIX_EPOCH;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let mtime = if entry.file_type()?.is_dir() {
            if entry.file_name() == "target" {
                continue;
            }
            newest_source(&entry.path())?
        } else {
            entry.metadata()?.modified()?
        };
        newest = newest.max(mtime);
    }
    Ok(newest)
}

/// Was `bin` built after every source file under `project` last changed?
/// Anything unreadable counts as stale, so the caller rebuilds.
fn built_after_sources(bin: &Path, project: &Path) -> bool {
    let Ok(built) = fs::metadata(bin).and_then(|m| m.modified()) else {
        return false;
    };
    newest_source(project).is_ok_and(|src| built > src)
}

impl Subject for Fuser {
    fn info(&self) -> SubjectInfo {
        SubjectInfo {
            name: "fuser".into(),
            description: format!(
                "fuser {FUSER_VERSION} passthrough (ours, on fuser's API), \
                 single-threaded (fuser's default)"
            ),
            is_peer: true,
            ..Default::default()
        }
    }

    fn prepare(&mut self, workdir: &Path) -> Result<()> {
        let project = Self::project();
        let manifest = project.join("Cargo.toml");
        if !manifest.exists() {
            bail!("{} is missing", manifest.display());
        }
        let target = peers_dir(workdir)?.join("fuser-target");
        let bin = target.join("release").join("fuser-passthrough");
        if !built_after_sources(&bin, &project) {
            let mut cmd = Self::cargo();
            // --locked: build exactly the committed Cargo.lock, and never
            // rewrite it in the repository.
            cmd.args(["build", "--release", "--locked", "--manifest-path"])
                .arg(&manifest)
                .arg("--target-dir")
                .arg(&target);
            run_quiet(cmd, "building the fuser passthrough (cargo build)")?;
            if !bin.exists() {
                bail!("cargo build finished but {} is missing", bin.display());
            }
        }
        self.binary = Some(bin);
        Ok(())
    }

    fn mount(&self, backing: &Path, mnt: &Path) -> Result<Mounted> {
        let bin = self
            .binary
            .as_ref()
            .context("fuser peer used before prepare")?;
        let mut cmd = Command::new(bin);
        // No --threads: fuser's default session (one event-loop thread).
        // allow_other and default_permissions are built in.
        cmd.arg(backing).arg(mnt);
        spawn_daemon(cmd, mnt)
    }
}

// ---------------------------------------------------------------- go-fuse

/// Pinned so every run measures the same code: the newest tag on the Go
/// module proxy (`go list -m -versions github.com/hanwen/go-fuse/v2`) when
/// this peer was written.
const GO_FUSE_MODULE: &str = "github.com/hanwen/go-fuse/v2";
const GO_FUSE_VERSION: &str = "v2.12.1";

/// go-fuse's `example/loopback`, the driver for its `fs.NewLoopbackRoot`.
/// It serves each request on its own goroutine, so it is multithreaded
/// without options.
#[derive(Default)]
pub struct GoFuse {
    binary: Option<PathBuf>,
}

impl GoFuse {
    /// Was `bin` built from the pinned go-fuse? Read from the binary's own
    /// build info, so a binary from another version is rebuilt.
    fn is_pinned_build(bin: &Path) -> bool {
        if !bin.exists() {
            return false;
        }
        let Ok(out) = Command::new("go")
            .args(["version", "-m"])
            .arg(bin)
            .stdin(Stdio::null())
            .output()
        else {
            return false;
        };
        String::from_utf8_lossy(&out.stdout).lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.len() >= 3 && f[0] == "mod" && f[1] == GO_FUSE_MODULE && f[2] == GO_FUSE_VERSION
        })
    }
}

impl Subject for GoFuse {
    fn info(&self) -> SubjectInfo {
        SubjectInfo {
            name: "go-fuse".into(),
            description: format!(
                "go-fuse {GO_FUSE_VERSION} example/loopback, multithreaded (goroutine per request), \
                 -allow-other (which also sets default_permissions)"
            ),
            is_peer: true,
            ..Default::default()
        }
    }

    fn prepare(&mut self, workdir: &Path) -> Result<()> {
        if !have("go", "version") {
            bail!("go is not installed (needed to build go-fuse's loopback example)");
        }
        let dir = peers_dir(workdir)?;
        let bin = dir.join("loopback");
        if !Self::is_pinned_build(&bin) {
            let mut cmd = Command::new("go");
            cmd.arg("install")
                .arg(format!(
                    "{GO_FUSE_MODULE}/example/loopback@{GO_FUSE_VERSION}"
                ))
                .env("GOBIN", &dir);
            run_quiet(cmd, "go install go-fuse example/loopback")?;
            if !Self::is_pinned_build(&bin) {
                bail!(
                    "go install finished but {} is not go-fuse {GO_FUSE_VERSION}",
                    bin.display()
                );
            }
        }
        self.binary = Some(bin);
        Ok(())
    }

    fn mount(&self, backing: &Path, mnt: &Path) -> Result<Mounted> {
        let bin = self
            .binary
            .as_ref()
            .context("go-fuse peer used before prepare")?;
        let mut cmd = Command::new(bin);
        // Flags go before the positionals: Go's flag parsing stops at the
        // first non-flag argument.
        cmd.arg("-allow-other").arg(mnt).arg(backing);
        spawn_daemon(cmd, mnt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libfuse_source_option_escapes_commas_and_backslashes() {
        assert_eq!(
            libfuse_opts(Path::new("/a,b\\c")),
            OsString::from("source=/a\\,b\\\\c,allow_other")
        );
    }

    #[test]
    fn last_lines_keeps_the_tail() {
        assert_eq!(last_lines("1\n2\n3\n", 2), "2\n3");
        assert_eq!(last_lines("1", 5), "1");
    }

    #[test]
    fn every_peer_is_a_peer() {
        let names: Vec<String> = all(None)
            .iter()
            .map(|s| s.info())
            .inspect(|i| assert!(i.is_peer))
            .map(|i| i.name)
            .collect();
        assert_eq!(
            names,
            [
                "libfuse-uring",
                "libfuse-uring-pt",
                "libfuse",
                "fuser",
                "go-fuse"
            ]
        );
    }

    #[test]
    fn libfuse_from_source_without_a_tree_is_unavailable_with_the_fix() {
        let work = tempfile::tempdir().unwrap();
        let mut peer = LibfuseSource::new(None, LibfuseMode::Uring);
        let e = format!("{:#}", peer.prepare(work.path()).unwrap_err());
        assert!(e.contains("--libfuse-src"), "{e}");
        let mut peer = LibfuseSource::new(Some(work.path()), LibfuseMode::Uring);
        let e = format!("{:#}", peer.prepare(work.path()).unwrap_err());
        assert!(e.contains("not a libfuse source tree"), "{e}");
    }

    #[test]
    fn libfuse_version_comes_from_the_tree() {
        let src = tempfile::tempdir().unwrap();
        fs::write(
            src.path().join("meson.build"),
            "project('libfuse3', ['c'],\n        version: '3.19.0-rc0',\n",
        )
        .unwrap();
        assert_eq!(
            LibfuseSource::version(src.path()).as_deref(),
            Some("3.19.0-rc0")
        );
    }

    #[test]
    fn fuser_build_is_cached_until_a_source_changes() {
        let dir = std::env::temp_dir().join(format!("peers-cache-test-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let project = dir.join("project");
        fs::create_dir_all(project.join("src")).unwrap();
        fs::create_dir_all(project.join("target")).unwrap();
        let bin = dir.join("bin");
        let at = |path: &Path, secs: u64| {
            let f = fs::File::create(path).unwrap();
            f.set_modified(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs))
                .unwrap();
        };
        at(&project.join("Cargo.toml"), 100);
        at(&project.join("src/main.rs"), 200);
        assert!(!built_after_sources(&bin, &project), "no binary yet");
        at(&bin, 300);
        assert!(built_after_sources(&bin, &project));
        // Build output inside the project is not a source.
        at(&project.join("target/out"), 400);
        assert!(built_after_sources(&bin, &project));
        at(&project.join("src/main.rs"), 500);
        assert!(
            !built_after_sources(&bin, &project),
            "a nested source changed"
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
