//! Serving a driver as a block device: the FUSE mount with its one file,
//! the loop device over it, the registry entry, and who does what.
//!
//! With recovery (the default, over classic /dev/fuse) the process that
//! runs [`run`] first becomes the *supervisor* of fusebox's recovery
//! machinery (`fusebox::recovery`): it makes the mount, starts the driver
//! in a child process (this same program, found again through
//! `FUSEBOX_HANDOFF_FD`), and once that child serves, attaches the loop
//! device and holds it. When the driver process dies, the supervisor starts
//! another, which takes the same /dev/fuse fds and has the kernel resend
//! the requests left unanswered: block I/O waits for a few milliseconds and
//! goes on without an error. `fusebox blk replace` is the recovery
//! machinery's planned upgrade. A RAM disk's memory is a memfd the
//! supervisor keeps and every driver process inherits, so it survives its
//! driver.
//!
//! Block reads and writes are idempotent, so a resent one is simply done
//! again; the device's two nodes and stateless handles restore at once
//! ([`BlockFs`]).
//!
//! Over io_uring the supervisor also holds the rings the driver process
//! serves on (`fusebox::sys::ring_area`). Without recovery
//! (`recovery: false`) one process does it all.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fusebox::recovery::{Channel, RecoveryError, Supervisor, SupervisorConfig};
use fusebox::transport::TransportKind;
use fusebox::{Options, Session, SessionConfig};

use crate::driver::{BlkError, BlockDriver};
use crate::fs::{BlockFs, DISK_NAME};
use crate::loopdev::{AttachOptions, LoopDevice, LoopError};
use crate::registry::{self, Record};

/// Names the memfd a supervisor keeps for a RAM-backed driver.
pub const MEMORY_ENV: &str = "FUSEBOX_BLK_MEMORY_FD";

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("{0}")]
    Invalid(String),
    #[error("a device named {0:?} exists already (`fusebox blk list`)")]
    Exists(String),
    #[error("the driver: {0}")]
    Driver(#[from] BlkError),
    #[error("the loop device: {0}")]
    Loop(#[from] LoopError),
    #[error("serving: {0}")]
    Serve(#[from] fusebox::Error),
    #[error("supervising: {0}")]
    Recovery(#[from] RecoveryError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> DeviceError {
    let what = what.into();
    move |source| DeviceError::Io { what, source }
}

#[derive(Clone, Debug)]
pub struct DeviceConfig {
    /// The device's name: /dev/fusebox/NAME.
    pub name: String,
    /// How `fusebox blk list` describes the driver.
    pub driver_label: String,
    pub session: SessionConfig,
    /// Serve under a supervisor (replaceable; survives the driver's death).
    pub recovery: bool,
    pub max_restarts: usize,
    pub restart_window: Duration,
    /// Ask the loop device for direct I/O on the file.
    pub direct_io: bool,
    /// A RAM-backed driver: bytes of memory the supervisor keeps for it
    /// (a memfd) and hands every driver process ([`kept_memory`]).
    pub kept_memory: Option<u64>,
}

impl DeviceConfig {
    pub fn new(name: &str, driver_label: &str) -> DeviceConfig {
        DeviceConfig {
            name: name.to_string(),
            driver_label: driver_label.to_string(),
            session: SessionConfig::default(),
            recovery: true,
            max_restarts: 5,
            restart_window: Duration::from_secs(30),
            direct_io: true,
            kept_memory: None,
        }
    }

    fn supervised(&self) -> bool {
        self.recovery
    }
}

/// The memory a supervisor keeps for this driver process, if it keeps any
/// (named by [`MEMORY_ENV`]); None outside a supervised server.
pub fn kept_memory() -> Option<OwnedFd> {
    let v = std::env::var(MEMORY_ENV).ok()?;
    // Taken once: the variable goes with the first call.
    std::env::remove_var(MEMORY_ENV);
    let fd = crate::sys::own_inherited(v.parse().ok()?)
        .inspect_err(|e| tracing::error!(error = %e, "{MEMORY_ENV}={v}: not an open fd"))
        .ok()?;
    let stat = rustix::fs::fstat(&fd).ok()?;
    rustix::fs::FileType::from_raw_mode(stat.st_mode)
        .is_file()
        .then_some(fd)
}

/// Serve the driver `make` builds as block device `cfg.name`: as the
/// supervisor (which starts this program again as the driver process), as
/// that driver process, or alone without recovery. `ready` is called in
/// the process holding the device once it is attached.
pub fn run<D: BlockDriver>(
    cfg: &DeviceConfig,
    make: impl FnOnce(Option<OwnedFd>) -> Result<D, BlkError>,
    ready: impl FnOnce(&Record),
) -> Result<(), DeviceError> {
    registry::check_name(&cfg.name).map_err(DeviceError::Invalid)?;
    if let Some(channel) = Channel::from_env()
        .transpose()
        .map_err(io_err("the supervisor's handoff socket"))?
    {
        return serve_driver(cfg, make(kept_memory())?, channel);
    }
    claim_name(&cfg.name)?;
    if cfg.supervised() {
        return supervise(cfg, ready);
    }
    let memory = match cfg.kept_memory {
        Some(size) => Some(crate::drivers::create_memory(size)?),
        None => None,
    };
    serve_alone(cfg, make(memory)?, ready)
}

/// Refuse a name that a live device has; forget one whose process died.
fn claim_name(name: &str) -> Result<(), DeviceError> {
    if let Some(old) = registry::get(name) {
        if old.alive() {
            return Err(DeviceError::Exists(name.to_string()));
        }
        teardown_dead(&old);
    }
    Ok(())
}

fn mount_options(cfg: &DeviceConfig) -> Options {
    let mut opts = Options::default();
    opts.mount.fsname = Some(format!("fusebox-blk:{}", cfg.name));
    opts.mount.subtype = Some("fusebox-blk".into());
    opts
}

fn make_mountpoint(name: &str) -> Result<PathBuf, DeviceError> {
    let mnt = registry::mountpoint_for(name);
    std::fs::create_dir_all(&mnt).map_err(io_err(format!("creating {}", mnt.display())))?;
    Ok(mnt)
}

/// Attach the loop device to the served file and publish the record.
fn attach(
    cfg: &DeviceConfig,
    mountpoint: &Path,
    pid: u32,
) -> Result<(LoopDevice, Record), DeviceError> {
    let disk = mountpoint.join(DISK_NAME);
    let meta = std::fs::metadata(&disk).map_err(io_err(format!("{}", disk.display())))?;
    // BlockFs reports the logical block size as the mount's block size and
    // a read-only driver's file as not writable.
    let vfs = rustix::fs::statvfs(mountpoint).map_err(|e| DeviceError::Io {
        what: format!("statfs {}", mountpoint.display()),
        source: e.into(),
    })?;
    let block_size = vfs.f_bsize as u32;
    let read_only = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o200 == 0;
    let dev = LoopDevice::attach(
        &disk,
        AttachOptions {
            block_size,
            read_only,
            direct_io: cfg.direct_io,
        },
    )?;
    let record = Record {
        name: cfg.name.clone(),
        device: dev.path(),
        loop_number: dev.number(),
        mountpoint: mountpoint.to_path_buf(),
        pid,
        pid_start: registry::process_start(pid).unwrap_or(0),
        driver: cfg.driver_label.clone(),
        size: std::os::unix::fs::MetadataExt::size(&meta),
        logical_block_size: block_size,
        read_only,
        supervised: cfg.supervised(),
        direct_io: dev.direct_io(),
        transport: format!("{:?}", cfg.session.transport.resolve()).to_lowercase(),
    };
    record
        .publish()
        .map_err(io_err("writing the device registry"))?;
    Ok((dev, record))
}

/// What a stop signal does: detach the loop device, then unmount. A
/// device still mounted or held exclusively is left attached and served
/// (the signal is logged and ignored); `fusebox blk destroy` checks first.
fn stop_on_signals(
    attached: Arc<Mutex<Option<LoopDevice>>>,
    unmount: impl Fn() + Send + 'static,
) -> Result<(), DeviceError> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(io_err("installing signal handlers"))?;
    std::thread::Builder::new()
        .name("fusebox-blk-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                let mut slot = attached.lock().unwrap_or_else(PoisonError::into_inner);
                // Checked before giving up the device's fd: a device still
                // mounted stays held (and attached) by this process.
                if slot.as_ref().is_some_and(|d| crate::loopdev::in_use(&d.path())) {
                    tracing::error!(signal = sig, "the device is in use (mounted?); not stopping");
                    continue;
                }
                if let Some(dev) = slot.take() {
                    let number = dev.number();
                    match dev.detach(Duration::from_secs(10)) {
                        Ok(true) => {}
                        Ok(false) => {
                            tracing::error!(signal = sig, "loop{number} is still open elsewhere; serving it until it is closed");
                            continue;
                        }
                        Err(e) => {
                            tracing::error!(signal = sig, error = %e, "not stopping");
                            // The device was not detached: put it back.
                            if let Ok(f) = LoopDevice::open(number) {
                                *slot = Some(f);
                            }
                            continue;
                        }
                    }
                }
                tracing::info!(signal = sig, "device detached; unmounting");
                unmount();
                return;
            }
        })
        .map_err(io_err("starting the signal thread"))?;
    Ok(())
}

fn supervise(cfg: &DeviceConfig, ready: impl FnOnce(&Record)) -> Result<(), DeviceError> {
    let mountpoint = make_mountpoint(&cfg.name)?;
    let opts = mount_options(cfg);
    let supervisor = Supervisor::for_new_mount(
        &mountpoint,
        &opts.mount,
        match cfg.session.transport.resolve() {
            // The supervisor holds the rings; one classic worker remains
            // for FORGET and INTERRUPT.
            TransportKind::Uring => SupervisorConfig {
                clones: 1,
                rings: Some(fusebox::recovery::RingPlan {
                    per_queue: cfg.session.uring.threads_per_queue.max(1),
                    depth: cfg.session.uring.depth.max(1),
                    payload_len: fusebox::transport::uring::payload_len_for(opts.init.max_write),
                    sq_idle: Duration::from_millis(1),
                }),
                max_restarts: cfg.max_restarts,
                restart_window: cfg.restart_window,
                ..SupervisorConfig::default()
            },
            _ => SupervisorConfig {
                clones: cfg.session.workers.max(1),
                max_restarts: cfg.max_restarts,
                restart_window: cfg.restart_window,
                ..SupervisorConfig::default()
            },
        },
    )?;
    // The memory of a RAM disk belongs to the supervisor; each driver
    // process inherits the fd (no CLOEXEC) and is told its number.
    let memory = match cfg.kept_memory {
        Some(size) => {
            let fd = crate::drivers::create_memory(size)?;
            rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::empty())
                .map_err(|e| io_err("keeping the device memory")(e.into()))?;
            Some(fd)
        }
        None => None,
    };
    let attached: Arc<Mutex<Option<LoopDevice>>> = Arc::new(Mutex::new(None));
    let mount = supervisor.mount().clone();
    stop_on_signals(attached.clone(), move || {
        if let Err(e) = mount.unmount() {
            tracing::warn!(error = %e, "unmount failed");
        }
    })?;
    let mut this_program =
        fusebox::recovery::this_program_again().map_err(io_err("locating this program"))?;
    let mut failure = None;
    let mut record = None;
    let memory_fd = memory.as_ref().map(|m| m.as_raw_fd());
    let result = supervisor.run(
        |binary| {
            let mut c = this_program(binary);
            if let Some(fd) = memory_fd {
                c.env(MEMORY_ENV, fd.to_string());
            }
            c
        },
        |_pid| match attach(cfg, &mountpoint, std::process::id()) {
            Ok((dev, rec)) => {
                *attached.lock().unwrap_or_else(PoisonError::into_inner) = Some(dev);
                ready(&rec);
                record = Some(rec);
            }
            Err(e) => {
                // Nothing is attached: take the mount down, so `run` ends.
                failure = Some(e);
                let _ = supervisor.mount().unmount();
            }
        },
    );
    if result.is_err() {
        // The first driver never served: nothing holds the mount up.
        let _ = supervisor.mount().unmount();
    }
    finish(&attached, record.as_ref(), &mountpoint);
    drop(memory);
    if let Some(e) = failure {
        return Err(e);
    }
    result.map(drop).map_err(Into::into)
}

/// After serving: the loop device (normally detached already) and the
/// record go.
fn finish(attached: &Mutex<Option<LoopDevice>>, record: Option<&Record>, mountpoint: &Path) {
    if let Some(dev) = attached
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take()
    {
        let n = dev.number();
        if !matches!(dev.detach(Duration::from_secs(5)), Ok(true)) {
            tracing::warn!("loop{n} not detached yet; it goes when its last user closes it");
        }
    }
    if let Some(r) = record {
        r.withdraw();
    }
    let _ = std::fs::remove_dir(mountpoint);
}

/// A supervised driver process: serve the mount the supervisor hands over.
fn serve_driver<D: BlockDriver>(
    cfg: &DeviceConfig,
    driver: D,
    channel: Channel,
) -> Result<(), DeviceError> {
    become_io_flusher();
    let fs = BlockFs::new(driver)?;
    let session = Session::take_over(fs, channel, &mount_options(cfg), cfg.session.clone())?;
    // The supervisor ends the device; a signal here just ends this process
    // (the supervisor then starts another).
    session.wait()?;
    Ok(())
}

fn serve_alone<D: BlockDriver>(
    cfg: &DeviceConfig,
    driver: D,
    ready: impl FnOnce(&Record),
) -> Result<(), DeviceError> {
    become_io_flusher();
    let mountpoint = make_mountpoint(&cfg.name)?;
    let fs = BlockFs::new(driver)?;
    let session = Session::mount(fs, &mountpoint, &mount_options(cfg), cfg.session.clone())?;
    let attached: Arc<Mutex<Option<LoopDevice>>> = Arc::new(Mutex::new(None));
    let handle = session.shutdown_handle();
    stop_on_signals(attached.clone(), move || {
        handle.shutdown(Duration::from_secs(3))
    })?;
    let record = match attach(cfg, &mountpoint, std::process::id()) {
        Ok((dev, rec)) => {
            *attached.lock().unwrap_or_else(PoisonError::into_inner) = Some(dev);
            ready(&rec);
            Some(rec)
        }
        Err(e) => {
            session.shutdown_handle().shutdown(Duration::from_secs(3));
            let _ = session.wait();
            let _ = std::fs::remove_dir(&mountpoint);
            return Err(e);
        }
    };
    let r = session.wait();
    finish(&attached, record.as_ref(), &mountpoint);
    r.map_err(Into::into)
}

/// A process that serves a block device must not wait on its own device
/// to free memory: PR_SET_IO_FLUSHER makes its allocations avoid I/O
/// reclaim (the kernel's rule for user-space block and filesystem
/// daemons). Needs CAP_SYS_RESOURCE; without it the device works but
/// could deadlock under memory pressure, so it is said.
fn become_io_flusher() {
    if let Err(e) = rustix::process::configure_io_flusher_behavior(true) {
        tracing::warn!(error = %e, "PR_SET_IO_FLUSHER refused: writeback to this device under memory pressure could deadlock");
    }
}

/// Remove what a device whose process died left: its loop device, mount,
/// link and record.
pub fn teardown_dead(rec: &Record) {
    if crate::loopdev::backing_file(rec.loop_number).is_some_and(|b| b.starts_with(&rec.mountpoint))
    {
        if let Err(e) = crate::loopdev::detach_number(rec.loop_number, Duration::from_secs(5)) {
            tracing::warn!(error = %e, "detaching the dead device's loop device");
        }
    }
    if is_mountpoint(&rec.mountpoint) {
        let _ = fusebox::mount::unmount_path(&rec.mountpoint, false);
    }
    rec.withdraw();
    let _ = std::fs::remove_dir(&rec.mountpoint);
}

fn is_mountpoint(p: &Path) -> bool {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mounts") else {
        return false;
    };
    let want = p.to_string_lossy();
    mounts
        .lines()
        .any(|l| l.split(' ').nth(1).is_some_and(|m| m == want))
}

/// The pids of the driver processes a supervisor runs (its children).
pub fn driver_pids(supervisor: u32) -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{supervisor}/task")) else {
        return Vec::new();
    };
    let mut pids: Vec<u32> = tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
        .flat_map(|s| {
            s.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}
