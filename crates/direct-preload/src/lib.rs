//! The library `fusebox run --fs FS:SRC --at DIR -- PROGRAM` preloads
//! (`LD_PRELOAD`) into PROGRAM and every program it executes: before the
//! program's `main`, it builds the filesystem named in the environment and
//! serves it at DIR inside that process (`fusebox_direct::serve`). A
//! process started with the variables but unable to serve exits with a
//! message rather than run on without its files.
//!
//! | variable | meaning |
//! |---|---|
//! | `FUSEBOX_DIRECT_FS` | `FS[:SOURCE]`, a name from `fusebox_registry` |
//! | `FUSEBOX_DIRECT_AT` | the absolute path the filesystem appears at |
//! | `FUSEBOX_DIRECT_SERVER` | the door to the run's server (memfs, sftpfs): a descriptor number |
//!
//! Each process builds its own instance of a filesystem the registry
//! says is built per process: right for those whose state lives in the
//! kernel's files under SRC (stackfs, pathfs) or that have none (nullfs).
//! The others (memfs keeps its files in its process, sftpfs one SSH
//! connection and cache for the run) the launcher runs in a server of the
//! run's, and every process reaches that one instance through the door it
//! names (`fusebox_direct::shared`); this library never builds them.

#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::path::Path;
use std::sync::Arc;

use fusebox::fs::Filesystem;
use fusebox_direct::{MetaCache, VirtualMount};
use fusebox_examples::pathfs::PathPassthrough;
use fusebox_examples::stackfs::{StackFs, StackOptions};
use fusebox_examples::timingfs::{AsyncTimingFs, TimingFs, TimingProfile};
use fusebox_registry::{Direct, FsId};

mod constructor;

/// Descriptors stackfs may keep for nodes: the application shares the
/// process's descriptor table with it.
const FD_CACHE: u64 = 1024;

/// The filesystem `spec` names, and the page cache it gets by default:
/// none for stackfs and pathfs, whose reads reach the source's kernel page
/// cache (and whose source others may change behind a cache of ours).
pub fn build(spec: &str) -> Result<(Arc<dyn Filesystem>, u64), String> {
    let spec = fusebox_registry::parse_spec(spec).map_err(|e| e.to_string())?;
    let (fs, source) = (spec.fs, spec.source);
    let pages = match fs.direct {
        Direct::PerProcess { page_cache } | Direct::RunServer { page_cache } => page_cache,
    };
    if let Some(door) = std::env::var_os(fusebox_direct::shared::DOOR_VAR) {
        // The launcher serves this filesystem from a server of the run's:
        // every process reaches that one instance.
        let fd = door.to_str().and_then(|d| d.parse().ok()).unwrap_or(-1);
        let door = fusebox_direct::shared::adopt_door(fd).ok_or(format!(
            "{}={door:?} names no inherited socket: the run's server is unreachable (a program that closed it?)",
            fusebox_direct::shared::DOOR_VAR
        ))?;
        return Ok((fusebox_direct::shared::RemoteFs::connect(door), pages));
    }
    let source_dir = || -> Result<&Path, String> {
        source
            .map(Path::new)
            .ok_or(format!("{} needs a source: {}:DIR", fs.name, fs.name))
    };
    match fs.id {
        FsId::Stackfs => {
            let src = source_dir()?;
            let opts = StackOptions {
                fd_cache: FD_CACHE,
                ..StackOptions::default()
            };
            let f = StackFs::new(src, opts)
                .map_err(|e| format!("opening source {}: {e}", src.display()))?;
            Ok((Arc::new(f), pages))
        }
        FsId::Pathfs => {
            let src = source_dir()?;
            let f = PathPassthrough::new(src, Default::default())
                .map_err(|e| format!("opening source {}: {e}", src.display()))?;
            Ok((Arc::new(fusebox::PathAdapter::new(f)), pages))
        }
        FsId::Nullfs => Ok((
            Arc::new(fusebox_examples::nullfs::NullFs::new(Default::default())),
            pages,
        )),
        FsId::Timingfs | FsId::TimingfsAsync => {
            // One 1 GiB file, as `fusebox mount timingfs` by default.
            let profile = source.unwrap_or("ssd");
            let profile = TimingProfile::parse(profile)
                .ok_or(format!("unknown timingfs profile {profile:?} (pmem, ssd or NNus)"))?;
            let f = TimingFs::new(profile, 1, 1 << 30, Default::default());
            if fs.id == FsId::Timingfs {
                return Ok((Arc::new(f), pages));
            }
            // The same served through the async API: each call a task on
            // a tokio runtime, waited for by the calling thread.
            let f = fusebox::AsyncAdapter::new(AsyncTimingFs(f))
                .map_err(|e| format!("starting the tokio runtime: {e}"))?;
            Ok((Arc::new(f), pages))
        }
        FsId::Memfs | FsId::Sftpfs | FsId::Objfs => Err(format!(
            "{} is served to direct mode by the run's server (`fusebox run --fs {}`), which this process was not given",
            fs.name, fs.name
        )),
    }
}

/// Where the figures go at exit: the program's standard error as it was at
/// the start, kept clear of the program (which may close its own at exit,
/// as coreutils' programs do, before this library's handler runs).
static REPORT_TO: std::sync::OnceLock<std::fs::File> = std::sync::OnceLock::new();

/// At the exit of the run's first process, with FUSEBOX_DIRECT_STATS set:
/// the metadata cache's figures for the whole run.
fn at_exit() {
    // A forked child inherits the registration.
    if std::env::var(fusebox_direct::STATS_VAR).ok() != Some(std::process::id().to_string()) {
        return;
    }
    let Some(mut out) = REPORT_TO.get() else {
        return;
    };
    let mut lines = vec![match fusebox_direct::cache_stats() {
        Some(s) => {
            let pct = |h: u64, m: u64| 100.0 * h as f64 / (h + m).max(1) as f64;
            format!(
                "metadata cache: {} hits, {} misses ({:.1}% hits); page cache: {} hits, {} misses ({:.1}% hits)",
                s.hits,
                s.misses,
                pct(s.hits, s.misses),
                s.page_hits,
                s.page_misses,
                pct(s.page_hits, s.page_misses)
            )
        }
        None => "metadata cache: off".to_string(),
    }];
    lines.extend(
        fusebox::stats::counter_lines(&fusebox_direct::fs_counters())
            .into_iter()
            .map(|l| format!("filesystem {l}")),
    );
    let text: String = lines
        .iter()
        .map(|l| format!("fusebox direct mode: {l}\n"))
        .collect();
    use std::io::Write;
    let _ = out.write_all(text.as_bytes());
}

/// Called before `main` (see `constructor`).
fn start() {
    let (Some(spec), Some(at)) = (
        std::env::var_os("FUSEBOX_DIRECT_FS"),
        std::env::var_os("FUSEBOX_DIRECT_AT"),
    ) else {
        return;
    };
    let fail = |why: String| -> ! {
        eprintln!("fusebox direct mode: {why}");
        std::process::exit(127);
    };
    let spec = spec
        .into_string()
        .unwrap_or_else(|_| fail("FUSEBOX_DIRECT_FS is not UTF-8".into()));
    let at = Path::new(&at);
    if !at.is_absolute() {
        fail(format!(
            "FUSEBOX_DIRECT_AT must be an absolute path, not {}",
            at.display()
        ));
    }
    // A filesystem's constructor may set process-wide state for a daemon
    // (stackfs clears the umask: the kernel applies the caller's); here
    // the process is the application's.
    let umask = rustix::process::umask(rustix::fs::Mode::empty());
    // Its descriptors, its root's first, out of the application's way.
    fusebox_direct::keep_descriptors();
    let fs = build(&spec);
    rustix::process::umask(umask);
    let (fs, default_pages) = fs.unwrap_or_else(|e| fail(e));
    let mount = VirtualMount::new(at, fs);
    let entries = match std::env::var(fusebox_direct::cache::SIZE_VAR) {
        Ok(v) => v.parse().unwrap_or_else(|_| {
            fail(format!(
                "{}={v:?}: expected a number of entries",
                fusebox_direct::cache::SIZE_VAR
            ))
        }),
        Err(_) => fusebox_direct::cache::DEFAULT_ENTRIES,
    };
    if let Some(cache) = MetaCache::for_process(entries) {
        mount.set_metadata_cache(cache);
    }
    let pages = match std::env::var(fusebox_direct::cache::PAGES_VAR) {
        Ok(v) => v.parse().unwrap_or_else(|_| {
            fail(format!(
                "{}={v:?}: expected a number of pages",
                fusebox_direct::cache::PAGES_VAR
            ))
        }),
        Err(_) => default_pages,
    };
    let ttl = std::env::var(fusebox_direct::cache::PAGE_TTL_VAR)
        .ok()
        .map(|v| {
            v.parse::<f64>()
                .ok()
                .filter(|s| (0.0..1e9).contains(s))
                .map(std::time::Duration::from_secs_f64)
                .unwrap_or_else(|| {
                    fail(format!(
                        "{}={v:?}: expected seconds",
                        fusebox_direct::cache::PAGE_TTL_VAR
                    ))
                })
        });
    mount.set_page_cache(pages, ttl);
    // The launcher's process id: the program it executed, and whatever
    // that one executes in its place, reports at exit; other processes
    // of the run do not.
    if std::env::var(fusebox_direct::STATS_VAR).ok() == Some(std::process::id().to_string()) {
        if let Ok(err) = rustix::io::dup(rustix::stdio::stderr()) {
            let _ = REPORT_TO.set(std::fs::File::from(fusebox::descriptors::keep(err)));
            constructor::call_at_exit();
        }
    }
    mount.adopt_inherited();
    if let Some(cwd) = std::env::var_os(fusebox_direct::CWD_VAR) {
        use std::os::unix::ffi::OsStrExt;
        if let Err(e) = mount.set_cwd(cwd.as_bytes()) {
            fail(format!(
                "the working directory {} inside the mount is gone: {}",
                Path::new(&cwd).display(),
                std::io::Error::from_raw_os_error(e)
            ));
        }
    }
    if let Err(e) = fusebox_direct::serve(mount) {
        fail(e.to_string());
    }
}
