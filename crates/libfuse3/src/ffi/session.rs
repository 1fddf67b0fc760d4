//! `struct fuse_session`: creating, mounting, serving and ending a
//! low-level session, the signal handlers that end it, and
//! `fuse_daemonize`.
//!
//! Mounting makes no thread (libfuse programs mount, then fork into the
//! background, then serve). Serving is fusebox's: `fuse_session_loop` and
//! the `_mt` loops start a [`Session`] on the mount (the transport and
//! threads the `FUSEBOX_*` environment picks; `fuse_session_loop`
//! promises the program one request at a time and keeps that promise),
//! and wait until the filesystem is unmounted or the session is exited;
//! `fuse_session_receive_buf`/`process_buf` serve through a
//! [`DrivenSession`] for programs that run their own loop.
//!
//! Soundness: a `struct fuse_session *` is a `Box<FuseSession>` made by
//! `fuse_session_new` and freed by `fuse_session_destroy`; the program
//! passes it back unchanged, and uses it only between the two.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fusebox::fs::PathAdapter;
use fusebox::mount::Mount;
use fusebox::session::DrivenSession;
use fusebox::{Options, Session, SessionConfig, ShutdownHandle};

use super::highlevel::{HighFs, HighShared};
use super::lowlevel::{Bridge, Shared};
use super::{log_error, versioned};
use crate::abi::{FuseArgs, FuseBuf, FuseLoopConfigV1, FuseLowlevelOps};

/// The program a session serves: low-level operations, or high-level
/// ones through fusebox's path layer.
pub(crate) enum Program {
    Low(Arc<Shared>),
    High(Arc<HighShared>),
}

/// A running fusebox session of either kind.
enum Served {
    Low(Session<Bridge>),
    High(Session<PathAdapter<HighFs>>),
}

impl Served {
    fn shutdown_handle(&self) -> ShutdownHandle {
        match self {
            Served::Low(s) => s.shutdown_handle(),
            Served::High(s) => s.shutdown_handle(),
        }
    }

    fn wait(self) -> Result<(), fusebox::Error> {
        match self {
            Served::Low(s) => s.wait(),
            Served::High(s) => s.wait(),
        }
    }
}

/// What a `struct fuse_session *` points to.
pub struct FuseSession {
    pub(crate) program: Program,
    options: Options,
    cfg: SessionConfig,
    /// Mounted, not yet served.
    mount: Mutex<Option<Mount>>,
    /// Mounted by the caller and handed over as /dev/fd/N: never
    /// unmounted here (libfuse does not know the mountpoint either).
    adopted: AtomicBool,
    fd: AtomicI32,
    serving: Mutex<Option<Served>>,
    driven: Mutex<Option<Arc<DrivenSession<Bridge>>>>,
    exited: AtomicBool,
    /// The signal that ended the loop (what the loop returns), or -errno.
    error: AtomicI32,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Fusebox's own log on stderr: `FUSEBOX_LOG` (a tracing filter), or
/// debug with `-d`, warnings otherwise.
fn init_logging(debug: bool) {
    let filter = std::env::var("FUSEBOX_LOG").unwrap_or_else(|_| {
        if debug {
            "fusebox=debug,fuse3=debug".into()
        } else {
            "warn".into()
        }
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .try_init();
}

/// The argument vector as strings, argv[0] left out.
///
/// # Safety
/// `args` is a valid `struct fuse_args`.
pub(crate) unsafe fn arg_strings(args: &FuseArgs) -> Vec<String> {
    (1..args.argc.max(0) as usize)
        .filter_map(|i| {
            // SAFETY: argc entries, each NULL or NUL-terminated.
            let p = unsafe { *args.argv.add(i) };
            // SAFETY: as above.
            (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        })
        .collect()
}

/// `struct fuse_session *fuse_session_new(struct fuse_args *args, const
/// struct fuse_lowlevel_ops *op, size_t op_size, void *userdata)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_session_new(
    args: *mut FuseArgs,
    op: *const FuseLowlevelOps,
    op_size: usize,
    userdata: *mut c_void,
) -> *mut FuseSession {
    // SAFETY: the caller's args, valid per the header.
    let Some(a) = (unsafe { args.as_ref() }) else {
        log_error("fuse: empty argv passed to fuse_session_new().");
        return std::ptr::null_mut();
    };
    if a.argc == 0 {
        log_error("fuse: empty argv passed to fuse_session_new().");
        return std::ptr::null_mut();
    }
    // SAFETY: as above.
    let strings = unsafe { arg_strings(a) };
    let mut ops = FuseLowlevelOps::default();
    let size = std::mem::size_of::<FuseLowlevelOps>();
    if op_size > size {
        log_error("fuse: warning: library too old, some operations may not work");
    }
    if !op.is_null() {
        // SAFETY: the program's ops, at least `op_size` bytes; only what
        // both sides have is copied, the rest stays NULL.
        unsafe {
            std::ptr::copy_nonoverlapping(
                op as *const u8,
                &mut ops as *mut FuseLowlevelOps as *mut u8,
                op_size.min(size),
            )
        };
    }
    match FuseSession::create(&strings, |forced| {
        let mut shared = Shared::new(ops, userdata);
        (shared.force_on, shared.force_off) = forced;
        Program::Low(Arc::new(shared))
    }) {
        Ok(se) => Box::into_raw(se),
        Err(CreateError::Unknown(msg)) => {
            log_error(&msg);
            // libfuse frees the caller's arguments on this error.
            // SAFETY: the caller's args, freed as fuse_opt_free_args does.
            unsafe { super::opt::fuse_opt_free_args(args) };
            std::ptr::null_mut()
        }
        Err(CreateError::Other(msg)) => {
            log_error(&msg);
            std::ptr::null_mut()
        }
    }
}
versioned!(fuse_session_new, "FUSE_3.0");

/// Why a session could not be made.
pub(crate) enum CreateError {
    /// Arguments nobody knows (libfuse then frees the caller's vector).
    Unknown(String),
    /// The environment's settings are wrong.
    Other(String),
}

impl FuseSession {
    /// A session for `args` (argv[0] left out) serving the program
    /// `make` builds from the flags the user forced on and off.
    pub(crate) fn create(
        args: &[String],
        make: impl FnOnce((u64, u64)) -> Program,
    ) -> Result<Box<FuseSession>, CreateError> {
        let mut strings = args.to_vec();
        // FUSEBOX_OPTIONS go after the program's, so they win.
        let extra = std::env::var("FUSEBOX_OPTIONS")
            .ok()
            .filter(|e| !e.is_empty());
        let from_program = strings.len();
        if let Some(extra) = &extra {
            strings.push("-o".into());
            strings.push(extra.clone());
        }
        let parsed = match crate::session_opts::parse(&strings) {
            Ok(p) => p,
            Err(msg) if crate::session_opts::parse(&strings[..from_program]).is_ok() => {
                return Err(CreateError::Other(format!(
                    "fusebox: FUSEBOX_OPTIONS: {msg}"
                )));
            }
            Err(msg) => return Err(CreateError::Unknown(msg)),
        };
        init_logging(parsed.debug);
        if !parsed.ignored.is_empty() {
            tracing::info!(options = ?parsed.ignored, "options accepted with no effect on fusebox");
        }
        let cfg = crate::env::session_config(|k| std::env::var(k).ok())
            .map_err(|e| CreateError::Other(format!("fusebox: {e}")))?;
        if parsed.debug {
            eprintln!("FUSE library version: {}", crate::PKG_VERSION);
        }
        let mut options = parsed.options;
        // The mount's source, as libfuse names it: fsname, else the
        // subtype (fuse_parse_cmdline adds the program's name), else
        // /dev/fuse.
        if options.mount.fsname.is_none() {
            options.mount.fsname = Some(
                options
                    .mount
                    .subtype
                    .clone()
                    .unwrap_or_else(|| "/dev/fuse".into()),
            );
        }
        Ok(Box::new(FuseSession {
            program: make((parsed.force_on, parsed.force_off)),
            options,
            cfg,
            mount: Mutex::new(None),
            adopted: AtomicBool::new(false),
            fd: AtomicI32::new(-1),
            serving: Mutex::new(None),
            driven: Mutex::new(None),
            exited: AtomicBool::new(false),
            error: AtomicI32::new(0),
        }))
    }

    /// Where notifications go, once INIT has been answered.
    pub(crate) fn notifier(&self) -> Option<fusebox::protocol::Notifier> {
        match &self.program {
            Program::Low(s) => s.notifier.get().cloned(),
            Program::High(h) => h.notifier.get().cloned(),
        }
    }

    /// The program's side of a low-level session.
    pub(crate) fn low_level(&self) -> Option<Arc<Shared>> {
        match &self.program {
            Program::Low(s) => Some(s.clone()),
            Program::High(_) => None,
        }
    }

    /// The node a high-level session's path has in the kernel.
    pub(crate) fn node_of_path(&self, path: &std::path::Path) -> Option<fusebox::NodeId> {
        match lock(&self.serving).as_ref() {
            Some(Served::High(s)) => s.filesystem().node_of(path),
            _ => None,
        }
    }

    fn destroy_program(&self) {
        match &self.program {
            Program::Low(s) => s.destroy_once(),
            Program::High(h) => h.destroy_once(),
        }
    }

    fn set_serialized(&self, one_at_a_time: bool) {
        match &self.program {
            Program::Low(s) => s.serialize.store(one_at_a_time, Ordering::Release),
            Program::High(h) => h.serialize.store(one_at_a_time, Ordering::Release),
        }
    }
}

/// The session behind a pointer the program holds.
///
/// # Safety
/// `se` is NULL or from `fuse_session_new`, not yet destroyed.
unsafe fn session<'a>(se: *mut FuseSession) -> Option<&'a FuseSession> {
    // SAFETY: the caller's contract.
    unsafe { se.as_ref() }
}

/// `int fuse_session_mount(struct fuse_session *se, const char
/// *mountpoint)`: 0, or -1 with the reason logged.
pub unsafe extern "C" fn fuse_session_mount(
    se: *mut FuseSession,
    mountpoint: *const c_char,
) -> c_int {
    // SAFETY: the program's session.
    let Some(s) = (unsafe { session(se) }) else {
        return -1;
    };
    if mountpoint.is_null() {
        log_error("fuse: no mount point");
        return -1;
    }
    // SAFETY: a NUL-terminated path.
    let path = PathBuf::from(
        unsafe { CStr::from_ptr(mountpoint) }
            .to_string_lossy()
            .into_owned(),
    );
    // A mount made by the caller (mount.fuse3 with drop_privileges, a
    // container runtime) arrives as /dev/fd/N.
    if let Some(n) = path
        .to_str()
        .and_then(|p| p.strip_prefix("/dev/fd/"))
        .and_then(|n| n.parse::<i32>().ok())
    {
        // SAFETY: fcntl on a number; no memory involved.
        if unsafe { libc::fcntl(n, libc::F_GETFD) } == -1 {
            log_error(&format!("fuse: Invalid file descriptor /dev/fd/{n}"));
            return -1;
        }
        // SAFETY: the caller hands this open /dev/fuse fd to the session,
        // which owns it from now on (libfuse closes it at destroy too).
        let fd = unsafe { OwnedFd::from_raw_fd(n) };
        *lock(&s.mount) = Some(Mount::adopt(&path, fd));
        s.adopted.store(true, Ordering::Release);
        s.fd.store(n, Ordering::Release);
        return 0;
    }
    match Mount::new(&path, &s.options.mount) {
        Ok(m) => {
            s.fd.store(m.device().as_raw_fd(), Ordering::Release);
            *lock(&s.mount) = Some(m);
            0
        }
        Err(e) => {
            log_error(&format!("fuse: mounting {}: {e}", path.display()));
            -1
        }
    }
}

/// `fuse_session_mount` as exported (see the note in mod.rs).
#[export_name = "fuse_session_mount"]
pub unsafe extern "C" fn export_fuse_session_mount(
    se: *mut FuseSession,
    mountpoint: *const c_char,
) -> c_int {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_session_mount(se, mountpoint) }
}
versioned!(fuse_session_mount, "FUSE_3.0");

/// libfuse 3.14's default max_threads for its multi-threaded loop.
const LIBFUSE_MAX_THREADS: usize = 10;

/// Serve on fusebox's threads until unmounted or exited: the loops.
pub(crate) fn serve(s: &FuseSession, one_at_a_time: bool, max_threads: Option<usize>) -> c_int {
    let Some(mount) = lock(&s.mount).take() else {
        log_error("fuse: the session is not mounted (or is served already)");
        return -libc::EINVAL;
    };
    let mut cfg = s.cfg.clone();
    if one_at_a_time {
        cfg.workers = 1;
    } else {
        // libfuse's multi-threaded loop grows to max_threads (10 unless
        // the program says) while callbacks block (sshfs waits for its
        // server in every read): as many serving threads here, unless the
        // environment chose. Over io_uring they are spread over the
        // CPUs' queues.
        let max = max_threads
            .filter(|&m| m > 0)
            .unwrap_or(LIBFUSE_MAX_THREADS);
        if std::env::var_os("FUSEBOX_WORKERS").is_none() {
            cfg.workers = max;
        }
        if std::env::var_os("FUSEBOX_QUEUE_THREADS").is_none() {
            let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
            cfg.uring.threads_per_queue = cfg.workers.div_ceil(cpus).max(1);
        }
        // One entry per thread: the kernel gives a request to the free
        // entry of the caller's queue re-armed last, and an entry of a
        // thread stuck in a blocking callback would hold its request
        // while the queue's other threads idle (sshfs listed 10,000
        // files at 0.6x Debian's speed with 8 entries per thread).
        if std::env::var_os("FUSEBOX_QUEUE_DEPTH").is_none() {
            cfg.uring.depth = 1;
        }
    }
    s.set_serialized(one_at_a_time);
    let served = match &s.program {
        Program::Low(shared) => {
            let bridge = Bridge {
                shared: shared.clone(),
            };
            Session::serve_mount(bridge, mount, &s.options, cfg).map(Served::Low)
        }
        Program::High(hs) => {
            let adapter = PathAdapter::new(HighFs(hs.clone()));
            Session::serve_mount(adapter, mount, &s.options, cfg).map(Served::High)
        }
    };
    let session = match served {
        Ok(session) => session,
        Err(e) => {
            log_error(&format!("fuse: cannot serve the mount: {e}"));
            return -libc::EIO;
        }
    };
    let handle = session.shutdown_handle();
    *lock(&s.serving) = Some(session);
    // Exit comes from a signal handler (an atomic store, nothing to wake
    // a waiter with): looked at, with the workers, 20 times a second.
    while !s.exited.load(Ordering::Acquire) {
        if handle.wait_workers(Duration::ZERO) {
            // Unmounted, or the connection was aborted.
            s.exited.store(true, Ordering::Release);
        } else {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    let error = s.error.load(Ordering::Acquire);
    // As libfuse's loops end: with fuse_session_reset.
    s.exited.store(false, Ordering::Release);
    s.error.store(0, Ordering::Release);
    error
}

/// `int fuse_session_loop(struct fuse_session *se)`: one request at a
/// time, as the program was promised.
#[no_mangle]
pub unsafe extern "C" fn fuse_session_loop(se: *mut FuseSession) -> c_int {
    // SAFETY: the program's session.
    match unsafe { session(se) } {
        Some(s) => serve(s, true, None),
        None => -libc::EINVAL,
    }
}
versioned!(fuse_session_loop, "FUSE_3.0");

/// `fuse_session_loop_mt` before 3.2: `(se, int clone_fd)`. Every fusebox
/// worker reads through its own cloned fd anyway.
#[no_mangle]
pub unsafe extern "C" fn fuse_session_loop_mt_31(se: *mut FuseSession, _clone_fd: c_int) -> c_int {
    // SAFETY: the program's session.
    match unsafe { session(se) } {
        Some(s) => serve(s, false, None),
        None => -libc::EINVAL,
    }
}
versioned!(fuse_session_loop_mt_31, "FUSE_3.2");
versioned!(fuse_session_loop_mt_31 as "fuse_session_loop_mt@FUSE_3.0");

/// `fuse_session_loop_mt` of 3.2 to 3.11: `(se, struct
/// fuse_loop_config_v1 *)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_session_loop_mt_32(
    se: *mut FuseSession,
    _config: *const FuseLoopConfigV1,
) -> c_int {
    // SAFETY: the program's session.
    match unsafe { session(se) } {
        Some(s) => serve(s, false, None),
        None => -libc::EINVAL,
    }
}
versioned!(fuse_session_loop_mt_32, "FUSE_3.2");
versioned!(fuse_session_loop_mt_32 as "fuse_session_loop_mt@FUSE_3.2");

/// 3.12's opaque `struct fuse_loop_config`, laid out as libfuse keeps it
/// (programs only reach it through the fuse_loop_cfg_* functions).
#[repr(C)]
pub(crate) struct LoopConfig {
    version_id: c_int,
    clone_fd: c_int,
    max_idle_threads: c_int,
    max_threads: c_uint,
}

const LOOP_CONFIG_VERSION: c_int = c_int::MAX - 2;
const MAX_IDLE_THREADS_LIMIT: c_uint = 100_000;

/// `int fuse_session_loop_mt(struct fuse_session *se, struct
/// fuse_loop_config *config)` (3.12).
pub unsafe extern "C" fn fuse_session_loop_mt_312(
    se: *mut FuseSession,
    config: *const LoopConfig,
) -> c_int {
    // SAFETY: NULL or a config from fuse_loop_cfg_create.
    let max_threads = match unsafe { config.as_ref() } {
        Some(c) if c.version_id != LOOP_CONFIG_VERSION => return -libc::EINVAL,
        Some(c) => Some(c.max_threads as usize),
        None => None,
    };
    // SAFETY: the program's session.
    match unsafe { session(se) } {
        Some(s) => serve(s, false, max_threads),
        None => -libc::EINVAL,
    }
}

/// `fuse_session_loop_mt_312` as exported (see the note in mod.rs).
#[export_name = "fuse_session_loop_mt_312"]
pub unsafe extern "C" fn export_fuse_session_loop_mt_312(
    se: *mut FuseSession,
    config: *const LoopConfig,
) -> c_int {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_session_loop_mt_312(se, config) }
}
versioned!(fuse_session_loop_mt_312, "FUSE_3.12");
versioned!(fuse_session_loop_mt_312 as "fuse_session_loop_mt@@FUSE_3.12");

/// `struct fuse_loop_config *fuse_loop_cfg_create(void)`.
#[no_mangle]
pub extern "C" fn fuse_loop_cfg_create() -> *mut LoopConfig {
    Box::into_raw(Box::new(LoopConfig {
        version_id: LOOP_CONFIG_VERSION,
        clone_fd: 0,
        max_idle_threads: -1,
        max_threads: 10,
    }))
}
versioned!(fuse_loop_cfg_create, "FUSE_3.12");

/// `void fuse_loop_cfg_destroy(struct fuse_loop_config *config)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_loop_cfg_destroy(config: *mut LoopConfig) {
    if !config.is_null() {
        // SAFETY: made by fuse_loop_cfg_create, destroyed once.
        drop(unsafe { Box::from_raw(config) });
    }
}
versioned!(fuse_loop_cfg_destroy, "FUSE_3.12");

/// `void fuse_loop_cfg_set_idle_threads(struct fuse_loop_config *config,
/// unsigned int value)`.
pub unsafe extern "C" fn fuse_loop_cfg_set_idle_threads(config: *mut LoopConfig, value: c_uint) {
    if value > MAX_IDLE_THREADS_LIMIT {
        log_error(&format!(
            "Ignoring invalid max threads value {value} > max ({MAX_IDLE_THREADS_LIMIT})."
        ));
        return;
    }
    // SAFETY: a config from fuse_loop_cfg_create.
    if let Some(c) = unsafe { config.as_mut() } {
        c.max_idle_threads = value as c_int;
    }
}

/// `fuse_loop_cfg_set_idle_threads` as exported (see the note in mod.rs).
#[export_name = "fuse_loop_cfg_set_idle_threads"]
pub unsafe extern "C" fn export_fuse_loop_cfg_set_idle_threads(
    config: *mut LoopConfig,
    value: c_uint,
) {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_loop_cfg_set_idle_threads(config, value) }
}
versioned!(fuse_loop_cfg_set_idle_threads, "FUSE_3.12");

/// `void fuse_loop_cfg_set_max_threads(struct fuse_loop_config *config,
/// unsigned int value)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_loop_cfg_set_max_threads(config: *mut LoopConfig, value: c_uint) {
    // SAFETY: a config from fuse_loop_cfg_create.
    if let Some(c) = unsafe { config.as_mut() } {
        c.max_threads = value;
    }
}
versioned!(fuse_loop_cfg_set_max_threads, "FUSE_3.12");

/// `void fuse_loop_cfg_set_clone_fd(struct fuse_loop_config *config,
/// unsigned int value)`.
pub unsafe extern "C" fn fuse_loop_cfg_set_clone_fd(config: *mut LoopConfig, value: c_uint) {
    // SAFETY: a config from fuse_loop_cfg_create.
    if let Some(c) = unsafe { config.as_mut() } {
        c.clone_fd = value as c_int;
    }
}

/// `fuse_loop_cfg_set_clone_fd` as exported (see the note in mod.rs).
#[export_name = "fuse_loop_cfg_set_clone_fd"]
pub unsafe extern "C" fn export_fuse_loop_cfg_set_clone_fd(config: *mut LoopConfig, value: c_uint) {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_loop_cfg_set_clone_fd(config, value) }
}
versioned!(fuse_loop_cfg_set_clone_fd, "FUSE_3.12");

/// `void fuse_loop_cfg_convert(struct fuse_loop_config *config, struct
/// fuse_loop_config_v1 *v1_conf)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_loop_cfg_convert(
    config: *mut LoopConfig,
    v1: *const FuseLoopConfigV1,
) {
    // SAFETY: the caller's v1 struct.
    if let Some(v1) = unsafe { v1.as_ref() } {
        // SAFETY: a config from fuse_loop_cfg_create.
        unsafe {
            fuse_loop_cfg_set_idle_threads(config, v1.max_idle_threads);
            fuse_loop_cfg_set_clone_fd(config, v1.clone_fd as c_uint);
        }
    }
}
versioned!(fuse_loop_cfg_convert, "FUSE_3.12");

/// `void fuse_session_exit(struct fuse_session *se)`: async-signal-safe
/// (one atomic store).
pub unsafe extern "C" fn fuse_session_exit(se: *mut FuseSession) {
    // SAFETY: the program's session.
    if let Some(s) = unsafe { session(se) } {
        s.exited.store(true, Ordering::Release);
    }
}

/// `fuse_session_exit` as exported (see the note in mod.rs).
#[export_name = "fuse_session_exit"]
pub unsafe extern "C" fn export_fuse_session_exit(se: *mut FuseSession) {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_session_exit(se) }
}
versioned!(fuse_session_exit, "FUSE_3.0");

/// `int fuse_session_exited(struct fuse_session *se)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_session_exited(se: *mut FuseSession) -> c_int {
    // SAFETY: the program's session.
    unsafe { session(se) }.is_some_and(|s| s.exited.load(Ordering::Acquire)) as c_int
}
versioned!(fuse_session_exited, "FUSE_3.0");

/// `void fuse_session_reset(struct fuse_session *se)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_session_reset(se: *mut FuseSession) {
    // SAFETY: the program's session.
    if let Some(s) = unsafe { session(se) } {
        s.exited.store(false, Ordering::Release);
        s.error.store(0, Ordering::Release);
    }
}
versioned!(fuse_session_reset, "FUSE_3.0");

/// `int fuse_session_fd(struct fuse_session *se)`: the /dev/fuse fd, -1
/// when not mounted.
#[no_mangle]
pub unsafe extern "C" fn fuse_session_fd(se: *mut FuseSession) -> c_int {
    // SAFETY: the program's session.
    unsafe { session(se) }.map_or(-1, |s| s.fd.load(Ordering::Acquire))
}
versioned!(fuse_session_fd, "FUSE_3.0");

/// `void fuse_session_unmount(struct fuse_session *se)`.
pub unsafe extern "C" fn fuse_session_unmount(se: *mut FuseSession) {
    // SAFETY: the program's session.
    let Some(s) = (unsafe { session(se) }) else {
        return;
    };
    if s.adopted.load(Ordering::Acquire) {
        return;
    }
    if let Some(session) = lock(&s.serving).as_ref() {
        // Unmount; requests the workers still hold after a second are
        // failed (the connection aborted), as closing libfuse's fd does.
        session.shutdown_handle().shutdown(Duration::from_secs(1));
    }
    if let Some(d) = lock(&s.driven).as_ref() {
        if let Err(e) = d.unmount() {
            log_error(&format!("fuse: unmounting: {e}"));
        }
    }
    if let Some(m) = lock(&s.mount).as_ref() {
        if let Err(e) = m.unmount() {
            log_error(&format!("fuse: unmounting: {e}"));
        }
    }
    s.fd.store(-1, Ordering::Release);
}

/// `fuse_session_unmount` as exported (see the note in mod.rs).
#[export_name = "fuse_session_unmount"]
pub unsafe extern "C" fn export_fuse_session_unmount(se: *mut FuseSession) {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_session_unmount(se) }
}
versioned!(fuse_session_unmount, "FUSE_3.0");

/// `void fuse_session_destroy(struct fuse_session *se)`.
pub unsafe extern "C" fn fuse_session_destroy(se: *mut FuseSession) {
    if se.is_null() {
        return;
    }
    // SAFETY: made by fuse_session_new; the program is done with it.
    let s = unsafe { Box::from_raw(se) };
    // The signal handlers must not reach a freed session.
    let _ = SIGNAL_SESSION.compare_exchange(
        se,
        std::ptr::null_mut(),
        Ordering::AcqRel,
        Ordering::Acquire,
    );
    if let Some(session) = lock(&s.serving).take() {
        let handle = session.shutdown_handle();
        if handle.wait_workers(Duration::from_millis(100)) {
            let _ = session.wait();
        } else {
            // Still serving (the program did not unmount): end it now.
            handle.shutdown(Duration::from_secs(1));
            if handle.wait_workers(Duration::from_secs(5)) {
                let _ = session.wait();
            } else {
                log_error("fuse: workers still busy in the filesystem at destroy; leaving them");
                std::mem::forget(session);
            }
        }
    }
    s.destroy_program();
    // Closed, not unmounted, as libfuse leaves it: a program that did not
    // call fuse_session_unmount leaves its mount for the user to remove.
    if let Some(d) = lock(&s.driven).take() {
        d.mount().disown();
    }
    let pending = lock(&s.mount).take();
    if let Some(m) = pending {
        m.disown();
    }
}

/// `fuse_session_destroy` as exported (see the note in mod.rs).
#[export_name = "fuse_session_destroy"]
pub unsafe extern "C" fn export_fuse_session_destroy(se: *mut FuseSession) {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_session_destroy(se) }
}
versioned!(fuse_session_destroy, "FUSE_3.0");

/// The driven session of a program that reads requests itself, made on
/// first use from the mount.
fn driven(s: &FuseSession) -> Result<Arc<DrivenSession<Bridge>>, c_int> {
    let mut d = lock(&s.driven);
    if let Some(d) = d.as_ref() {
        return Ok(d.clone());
    }
    let Some(mount) = lock(&s.mount).take() else {
        log_error("fuse: the session is not mounted (or is served already)");
        return Err(-libc::ENODEV);
    };
    let Program::Low(shared) = &s.program else {
        log_error("fuse: fuse_session_receive_buf on a high-level session is not supported; use fuse_loop");
        *lock(&s.mount) = Some(mount);
        return Err(-libc::ENOSYS);
    };
    let bridge = Bridge {
        shared: shared.clone(),
    };
    match DrivenSession::new(bridge, mount, &s.options, &s.cfg) {
        Ok(new) => {
            let new = Arc::new(new);
            *d = Some(new.clone());
            Ok(new)
        }
        Err(e) => {
            log_error(&format!("fuse: cannot serve the mount: {e}"));
            Err(-libc::EIO)
        }
    }
}

/// `int fuse_session_receive_buf(struct fuse_session *se, struct fuse_buf
/// *buf)`: one request into `buf` (its memory malloc'd here when NULL;
/// the caller frees it): its size, 0 once unmounted, -errno.
#[no_mangle]
pub unsafe extern "C" fn fuse_session_receive_buf(
    se: *mut FuseSession,
    buf: *mut FuseBuf,
) -> c_int {
    // SAFETY: the program's session and buffer.
    let (Some(s), Some(buf)) = (unsafe { session(se) }, unsafe { buf.as_mut() }) else {
        return -libc::EINVAL;
    };
    let d = match driven(s) {
        Ok(d) => d,
        Err(e) => return e,
    };
    let size = d.buffer_size();
    if buf.mem.is_null() {
        // SAFETY: plain allocation; the program frees it with free(3).
        buf.mem = unsafe { libc::malloc(size) };
        if buf.mem.is_null() {
            log_error("fuse: failed to allocate read buffer");
            return -libc::ENOMEM;
        }
    }
    // SAFETY: a buffer of `size` bytes: ours, or one the program had from
    // an earlier call (never smaller, as in libfuse).
    let mem = unsafe { std::slice::from_raw_parts_mut(buf.mem as *mut u8, size) };
    let r = d.receive(mem);
    if s.exited.load(Ordering::Acquire) {
        return 0;
    }
    match r {
        Ok(0) => {
            s.exited.store(true, Ordering::Release);
            0
        }
        Ok(n) if n < 40 => {
            log_error("short read on fuse device");
            -libc::EIO
        }
        Ok(n) => {
            buf.size = n;
            n as c_int
        }
        Err(e) => {
            let errno = e.raw_os_error().unwrap_or(libc::EIO);
            if errno != libc::EINTR && errno != libc::EAGAIN {
                log_error(&format!("fuse: reading device: {e}"));
            }
            -errno
        }
    }
}
versioned!(fuse_session_receive_buf, "FUSE_3.0");

/// `void fuse_session_process_buf(struct fuse_session *se, const struct
/// fuse_buf *buf)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_session_process_buf(se: *mut FuseSession, buf: *const FuseBuf) {
    // SAFETY: the program's session and buffer.
    let (Some(s), Some(buf)) = (unsafe { session(se) }, unsafe { buf.as_ref() }) else {
        return;
    };
    if buf.mem.is_null() || buf.flags & (1 << 1) != 0 {
        log_error("fuse: fuse_session_process_buf: only memory buffers from fuse_session_receive_buf are supported");
        return;
    }
    let d = match driven(s) {
        Ok(d) => d,
        Err(_) => return,
    };
    // SAFETY: `size` bytes of a request at `mem`.
    let request = unsafe { std::slice::from_raw_parts(buf.mem as *const u8, buf.size) };
    if let Err(e) = d.process(request) {
        log_error(&format!("fuse: {e}"));
        if matches!(e, fusebox::Error::Io(_)) {
            s.error.store(-libc::EPROTO, Ordering::Release);
            s.exited.store(true, Ordering::Release);
        }
    }
}
versioned!(fuse_session_process_buf, "FUSE_3.0");

/// `int fuse_session_custom_io(...)`: a transport other than /dev/fuse
/// (libfuse 3.14's hook for virtiofsd-like programs). Refused loudly.
#[no_mangle]
pub unsafe extern "C" fn fuse_session_custom_io(
    _se: *mut FuseSession,
    _io: *const c_void,
    _fd: c_int,
) -> c_int {
    log_error("fuse: fuse_session_custom_io is not supported by fusebox's libfuse3");
    -libc::ENOSYS
}
versioned!(fuse_session_custom_io, "FUSE_3.0");

// ------------------------------------------------------------ signals

/// The session the signal handlers end (libfuse's single instance).
static SIGNAL_SESSION: AtomicPtr<FuseSession> = AtomicPtr::new(std::ptr::null_mut());

extern "C" fn exit_handler(sig: c_int) {
    let se = SIGNAL_SESSION.load(Ordering::Acquire);
    // SAFETY: set by fuse_set_signal_handlers to a live session, cleared
    // before it is destroyed; only atomics are touched (async-signal-safe).
    if let Some(s) = unsafe { se.as_ref() } {
        s.error.store(sig, Ordering::Release);
        s.exited.store(true, Ordering::Release);
    }
}

extern "C" fn do_nothing(_sig: c_int) {}

/// Install `handler` for `sig` if the program left it at its default.
fn install_if_default(sig: c_int, handler: extern "C" fn(c_int)) -> Result<(), std::io::Error> {
    // SAFETY: sigaction with valid structs; the handler only does
    // async-signal-safe work.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, std::ptr::null(), &mut old) == -1 {
            return Err(std::io::Error::last_os_error());
        }
        if old.sa_sigaction != libc::SIG_DFL {
            return Ok(());
        }
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        // No SA_RESTART: a blocking read returns EINTR, as in libfuse.
        sa.sa_flags = 0;
        if libc::sigaction(sig, &sa, std::ptr::null_mut()) == -1 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Put `sig` back to its default if it is still `handler`.
fn remove_if_ours(sig: c_int, handler: extern "C" fn(c_int)) {
    // SAFETY: sigaction with valid structs.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(sig, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == handler as usize
        {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = libc::SIG_DFL;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

/// `int fuse_set_signal_handlers(struct fuse_session *se)`: SIGHUP,
/// SIGINT and SIGTERM end the session's loop; SIGPIPE is ignored.
pub unsafe extern "C" fn fuse_set_signal_handlers(se: *mut FuseSession) -> c_int {
    for (sig, h) in [
        (libc::SIGHUP, exit_handler as extern "C" fn(c_int)),
        (libc::SIGINT, exit_handler),
        (libc::SIGTERM, exit_handler),
        (libc::SIGPIPE, do_nothing),
    ] {
        if let Err(e) = install_if_default(sig, h) {
            log_error(&format!("fuse: cannot set signal handler: {e}"));
            return -1;
        }
    }
    SIGNAL_SESSION.store(se, Ordering::Release);
    0
}

/// `fuse_set_signal_handlers` as exported (see the note in mod.rs).
#[export_name = "fuse_set_signal_handlers"]
pub unsafe extern "C" fn export_fuse_set_signal_handlers(se: *mut FuseSession) -> c_int {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_set_signal_handlers(se) }
}
versioned!(fuse_set_signal_handlers, "FUSE_3.0");

/// `void fuse_remove_signal_handlers(struct fuse_session *se)`.
pub unsafe extern "C" fn fuse_remove_signal_handlers(se: *mut FuseSession) {
    if SIGNAL_SESSION
        .compare_exchange(
            se,
            std::ptr::null_mut(),
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .is_err()
    {
        log_error("fuse: fuse_remove_signal_handlers: unknown session");
    }
    for (sig, h) in [
        (libc::SIGHUP, exit_handler as extern "C" fn(c_int)),
        (libc::SIGINT, exit_handler),
        (libc::SIGTERM, exit_handler),
        (libc::SIGPIPE, do_nothing),
    ] {
        remove_if_ours(sig, h);
    }
}

/// `fuse_remove_signal_handlers` as exported (see the note in mod.rs).
#[export_name = "fuse_remove_signal_handlers"]
pub unsafe extern "C" fn export_fuse_remove_signal_handlers(se: *mut FuseSession) {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_remove_signal_handlers(se) }
}
versioned!(fuse_remove_signal_handlers, "FUSE_3.0");

// ------------------------------------------------------------ daemonize

/// `int fuse_daemonize(int foreground)`: unless `foreground`, continue in
/// a child in its own session with stdio on /dev/null (the parent exits
/// once the child is set up); either way the working directory becomes /.
pub extern "C" fn fuse_daemonize(foreground: c_int) -> c_int {
    if foreground == 0 {
        let mut pipe = [0 as c_int; 2];
        // SAFETY: fork/pipe/setsid/dup2 on our own descriptors; no thread
        // of this library runs yet (mounting made none), so the child is
        // whole.
        unsafe {
            if libc::pipe(pipe.as_mut_ptr()) == -1 {
                log_error(&format!(
                    "fuse_daemonize: pipe: {}",
                    std::io::Error::last_os_error()
                ));
                return -1;
            }
            match libc::fork() {
                -1 => {
                    log_error(&format!(
                        "fuse_daemonize: fork: {}",
                        std::io::Error::last_os_error()
                    ));
                    return -1;
                }
                0 => {}
                _ => {
                    // The parent: wait for the child to be set up, then go.
                    let mut b = 0u8;
                    libc::read(pipe[0], &mut b as *mut u8 as *mut c_void, 1);
                    libc::_exit(0);
                }
            }
            if libc::setsid() == -1 {
                log_error(&format!(
                    "fuse_daemonize: setsid: {}",
                    std::io::Error::last_os_error()
                ));
                return -1;
            }
            let _ = libc::chdir(c"/".as_ptr());
            let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
            if null != -1 {
                libc::dup2(null, 0);
                libc::dup2(null, 1);
                libc::dup2(null, 2);
                if null > 2 {
                    libc::close(null);
                }
            }
            let b = 0u8;
            libc::write(pipe[1], &b as *const u8 as *const c_void, 1);
            libc::close(pipe[0]);
            libc::close(pipe[1]);
        }
    } else {
        // SAFETY: chdir with a static path.
        let _ = unsafe { libc::chdir(c"/".as_ptr()) };
    }
    0
}

/// `fuse_daemonize` as exported (see the note in mod.rs).
#[export_name = "fuse_daemonize"]
pub extern "C" fn export_fuse_daemonize(foreground: c_int) -> c_int {
    fuse_daemonize(foreground)
}
versioned!(fuse_daemonize, "FUSE_3.0");
