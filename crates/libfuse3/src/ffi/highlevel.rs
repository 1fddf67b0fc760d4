//! The high-level API: a program's path-based `fuse_operations`, served
//! by fusebox's own path layer ([`PathAdapter`]: node ids, lookup counts,
//! paths, renames), which this module feeds through [`HighFs`], a
//! [`PathFilesystem`] that calls the program's C callbacks.
//!
//! `struct fuse` wraps a low-level `struct fuse_session` (mounting,
//! loops, signals and exit are the session's, shared with the low-level
//! API). `struct fuse_config` semantics: timeouts, `set_uid/gid/mode`,
//! `use_ino` (otherwise st_ino is the node id, as in libfuse),
//! `kernel_cache`, `auto_cache`, `direct_io`, `no_rofd_flush`,
//! `nullpath_ok`. Where this differs from libfuse 3.14 (DESIGN.md, "The
//! libfuse3 drop-in"): an open file that is unlinked is removed at once
//! (no `.fuse_hidden` rename: its handle keeps working, as under
//! `hard_remove`); `remember`/`noforget` and modules are not supported
//! (`modules=` is refused, loudly); `bmap` is not routed (ENOSYS).
//!
//! Soundness: callbacks are the program's functions, called with the
//! types fuse.h declares per slot; every pointer handed to them lives
//! for the call. `fuse_get_context` points at a thread-local that lives
//! as long as its thread.

use std::cell::{Cell, UnsafeCell};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use fusebox::fs::ops::{self as fsops, Ctx};
use fusebox::fs::PathFilesystem;
use fusebox::protocol::{Connection, DataOut, Notifier};
use fusebox::{
    Errno, FileAttr, FileHandle, FileType, FsResult, LockInfo, Opened, Statfs, Timeouts, Timespec,
};

use super::lowlevel::negotiate;
use super::session::{self, FuseSession, Program};
use super::{log_error, versioned};
use crate::abi::{
    file_info_bits as fib, FuseArgs, FuseBuf, FuseBufvec, FuseConfig, FuseConnInfo, FuseContext,
    FuseFileInfo, FuseLoopConfigV1, FuseOperations,
};
use crate::caps::cap;
use crate::convert;
use crate::hl_opts::LibOptions;

/// What a `struct fuse *` points to.
pub struct Fuse {
    se: *mut FuseSession,
}

/// The program's side: its operations, private data and configuration.
pub(crate) struct HighShared {
    ops: FuseOperations,
    /// `private_data`: the user_data given to fuse_new, then what init
    /// returned.
    private_data: AtomicPtr<c_void>,
    /// Handed to init by pointer, which may change it; read only after
    /// init returned (no request is served before).
    conf: Box<UnsafeCell<FuseConfig>>,
    pub(crate) fuse: AtomicPtr<Fuse>,
    pub(crate) force_on: u64,
    pub(crate) force_off: u64,
    pub(crate) serialize: AtomicBool,
    serial: Mutex<()>,
    initialized: AtomicBool,
    destroyed: AtomicBool,
    pub(crate) notifier: OnceLock<Notifier>,
    dirs: Mutex<HashMap<u64, Arc<Mutex<DirHandle>>>>,
    next_dir: AtomicU64,
    /// auto_cache: each path's mtime and size when last opened.
    seen: Mutex<HashMap<PathBuf, (Timespec, u64)>>,
    /// `FUSEBOX_READDIRPLUS_LOOKUPS`: entries of a READDIRPLUS the program
    /// listed without attributes may be looked up by its getattr.
    lookups_in_readdirplus: bool,
}

// SAFETY: the raw pointers are the program's (private data) or ours
// (fuse, conf: written only during init, before any request); libfuse
// hands them to every serving thread the same way.
unsafe impl Send for HighShared {}
// SAFETY: as above.
unsafe impl Sync for HighShared {}

/// An open directory: the program's handle, and its listing when the
/// program lists everything at once (every filler offset 0).
struct DirHandle {
    fs_fh: u64,
    listing: Option<Vec<Listed>>,
}

struct Listed {
    name: CString,
    kind: Option<FileType>,
    ino: u64,
    /// What the program gave with FUSE_FILL_DIR_PLUS, in a listing asked
    /// with FUSE_READDIR_PLUS.
    attr: Option<FileAttr>,
}

thread_local! {
    /// `fuse_get_context()`'s answer on this thread.
    static CONTEXT: UnsafeCell<FuseContext> = const { UnsafeCell::new(FuseContext {
        fuse: std::ptr::null_mut(),
        uid: 0,
        gid: 0,
        pid: 0,
        private_data: std::ptr::null_mut(),
        umask: 0,
    }) };
    /// Whether the request this thread serves was interrupted.
    static INTERRUPTED: Cell<Option<*const dyn Fn() -> bool>> = const { Cell::new(None) };
}

macro_rules! op {
    ($hs:expr, $slot:ident, fn($($arg:ty),* $(,)?) -> $ret:ty) => {
        $hs.ops.$slot.map(|f| {
            // SAFETY: fuse.h declares this slot with this type; the
            // program stored a function of it.
            unsafe { std::mem::transmute::<unsafe extern "C" fn(), unsafe extern "C" fn($($arg),*) -> $ret>(f) }
        })
    };
}

fn cpath(p: &Path) -> CString {
    CString::new(p.as_os_str().as_bytes()).unwrap_or_default()
}

/// A negative errno from the program as an error.
fn check(r: c_int) -> FsResult<c_int> {
    if r < 0 {
        Err(Errno(-r))
    } else {
        Ok(r)
    }
}

impl HighShared {
    pub(crate) fn new(
        ops: FuseOperations,
        user_data: *mut c_void,
        lib: LibOptions,
        forced: (u64, u64),
    ) -> HighShared {
        let conf = FuseConfig {
            set_gid: lib.gid.is_some() as c_int,
            gid: lib.gid.unwrap_or(0),
            set_uid: lib.uid.is_some() as c_int,
            uid: lib.uid.unwrap_or(0),
            set_mode: lib.umask.is_some() as c_int,
            umask: lib.umask.unwrap_or(0),
            entry_timeout: lib.entry_timeout,
            negative_timeout: lib.negative_timeout,
            attr_timeout: lib.attr_timeout,
            intr: 0,
            intr_signal: libc::SIGUSR1,
            remember: lib.remember,
            hard_remove: 0,
            use_ino: 0,
            readdir_ino: 0,
            direct_io: 0,
            kernel_cache: lib.kernel_cache as c_int,
            auto_cache: lib.auto_cache as c_int,
            no_rofd_flush: lib.no_rofd_flush as c_int,
            ac_attr_timeout_set: lib.ac_attr_timeout.is_some() as c_int,
            ac_attr_timeout: lib.ac_attr_timeout.unwrap_or(lib.attr_timeout),
            nullpath_ok: 0,
            show_help: 0,
            modules: std::ptr::null_mut(),
            debug: lib.debug as c_int,
        };
        HighShared {
            ops,
            private_data: AtomicPtr::new(user_data),
            conf: Box::new(UnsafeCell::new(conf)),
            fuse: AtomicPtr::new(std::ptr::null_mut()),
            force_on: forced.0,
            force_off: forced.1,
            serialize: AtomicBool::new(false),
            serial: Mutex::new(()),
            initialized: AtomicBool::new(false),
            destroyed: AtomicBool::new(false),
            notifier: OnceLock::new(),
            dirs: Mutex::new(HashMap::new()),
            next_dir: AtomicU64::new(1),
            seen: Mutex::new(HashMap::new()),
            lookups_in_readdirplus: crate::env::readdirplus_lookups(|k| std::env::var(k).ok()),
        }
    }

    fn conf(&self) -> FuseConfig {
        // SAFETY: written by the program's init only, before any request
        // (and so before any reader on another thread).
        unsafe { *self.conf.get() }
    }

    /// Run a callback with `fuse_get_context()` describing `ctx`'s caller,
    /// one at a time if the loop promised that.
    fn call<T>(&self, ctx: Option<&Ctx>, umask: u32, f: impl FnOnce() -> T) -> T {
        CONTEXT.with(|c| {
            // SAFETY: this thread's own context, not borrowed elsewhere
            // while we write it (callbacks only read it through the
            // pointer fuse_get_context returns).
            let c = unsafe { &mut *c.get() };
            c.fuse = self.fuse.load(Ordering::Acquire) as *mut c_void;
            c.uid = ctx.map_or(0, |x| x.uid);
            c.gid = ctx.map_or(0, |x| x.gid);
            c.pid = ctx.map_or(0, |x| x.pid as i32);
            c.umask = umask;
            c.private_data = self.private_data.load(Ordering::Acquire);
        });
        let check_interrupt = |ctx: Option<&Ctx>| -> bool { ctx.is_some_and(|c| c.interrupted()) };
        let probe: &dyn Fn() -> bool = &|| check_interrupt(ctx);
        // SAFETY: the pointer is cleared before `probe` goes out of scope.
        let erased: *const dyn Fn() -> bool =
            unsafe { std::mem::transmute(probe as *const dyn Fn() -> bool) };
        INTERRUPTED.with(|i| i.set(Some(erased)));
        let r = if self.serialize.load(Ordering::Relaxed) {
            let _one = self.serial.lock().unwrap_or_else(PoisonError::into_inner);
            f()
        } else {
            f()
        };
        INTERRUPTED.with(|i| i.set(None));
        r
    }

    pub(crate) fn destroy_once(&self) {
        if self.initialized.load(Ordering::Acquire) && !self.destroyed.swap(true, Ordering::AcqRel)
        {
            if let Some(f) = op!(self, destroy, fn(*mut c_void) -> ()) {
                let data = self.private_data.load(Ordering::Acquire);
                // SAFETY: destroy(private_data).
                self.call(None, 0, || unsafe { f(data) });
            }
        }
    }

    /// The path a call hands the program: NULL for calls on an open file
    /// when the program said it copes (nullpath_ok).
    fn path_for(&self, path: &Path, has_fh: bool) -> Option<CString> {
        if has_fh && self.conf().nullpath_ok != 0 {
            None
        } else {
            Some(cpath(path))
        }
    }

    fn getattr_c(
        &self,
        ctx: Option<&Ctx>,
        path: &Path,
        fh: Option<FileHandle>,
    ) -> FsResult<FileAttr> {
        let f = op!(
            self,
            getattr,
            fn(*const c_char, *mut libc::stat, *mut FuseFileInfo) -> c_int
        )
        .ok_or(Errno::ENOSYS)?;
        let mut st = super::zeroed_stat();
        let mut fi = fh.map(|fh| FuseFileInfo {
            fh: fh.0,
            ..Default::default()
        });
        let fip = fi.as_mut().map_or(std::ptr::null_mut(), |f| f as *mut _);
        let p = self.path_for(path, fh.is_some());
        let pp = p.as_ref().map_or(std::ptr::null(), |p| p.as_ptr());
        // SAFETY: getattr(path, stbuf, fi).
        check(self.call(ctx, 0, || unsafe { f(pp, &mut st, fip) }))?;
        Ok(self.adjust(convert::attr_from_stat(&st)))
    }

    /// set_uid, set_gid and set_mode (umask) of fuse_config.
    fn adjust(&self, mut a: FileAttr) -> FileAttr {
        let c = self.conf();
        if c.set_uid != 0 {
            a.uid = c.uid;
        }
        if c.set_gid != 0 {
            a.gid = c.gid;
        }
        if c.set_mode != 0 {
            a.mode = (a.mode & libc::S_IFMT) | (0o777 & !c.umask);
        }
        a
    }

    fn fi(&self, fh: FileHandle, flags: i32) -> FuseFileInfo {
        FuseFileInfo {
            flags,
            fh: fh.0,
            ..Default::default()
        }
    }

    fn dir(&self, fh: FileHandle) -> FsResult<Arc<Mutex<DirHandle>>> {
        self.dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    fn flush_c(&self, ctx: &Ctx, path: &Path, fh: FileHandle, lock_owner: u64) -> FsResult<()> {
        let mut fi = self.fi(fh, 0);
        fi.lock_owner = lock_owner;
        fi.set(fib::FLUSH, true);
        let p = self.path_for(path, true);
        let pp = p.as_ref().map_or(std::ptr::null(), |p| p.as_ptr());
        let mut r = match op!(self, flush, fn(*const c_char, *mut FuseFileInfo) -> c_int) {
            // SAFETY: flush(path, fi).
            Some(f) => self.call(Some(ctx), 0, || unsafe { f(pp, &mut fi) }),
            None => -libc::ENOSYS,
        };
        // The owner's POSIX locks go with the close, as libfuse does it.
        if let Some(lock) = op!(
            self,
            lock,
            fn(*const c_char, *mut FuseFileInfo, c_int, *mut libc::flock) -> c_int
        ) {
            let mut fl = super::zeroed_flock();
            fl.l_type = libc::F_UNLCK as i16;
            fl.l_whence = libc::SEEK_SET as i16;
            // SAFETY: lock(path, fi, F_SETLK, unlock-all).
            self.call(Some(ctx), 0, || unsafe {
                lock(pp, &mut fi, libc::F_SETLK, &mut fl)
            });
            if r == -libc::ENOSYS {
                r = 0;
            }
        }
        check(r).map(|_| ())
    }
}

/// A program's `fuse_operations` as a fusebox path filesystem.
pub(crate) struct HighFs(pub Arc<HighShared>);

extern "C" fn fill_dir(
    buf: *mut c_void,
    name: *const c_char,
    st: *const libc::stat,
    off: libc::off_t,
    flags: c_int,
) -> c_int {
    // SAFETY: `buf` is the Fill we handed to the program's readdir, alive
    // for that call, which is when the program calls this.
    let fill = unsafe { &mut *(buf as *mut Fill<'_>) };
    if name.is_null() {
        return 1;
    }
    // FUSE_FILL_DIR_PLUS is the only flag there is.
    if flags & !2 != 0 {
        fill.error = Some(Errno::EIO);
        return 1;
    }
    // SAFETY: a NUL-terminated name; the stat NULL or valid, for the call.
    let (name, st) = unsafe { (CStr::from_ptr(name), st.as_ref()) };
    let kind = st.and_then(|s| FileType::from_mode(s.st_mode));
    let ino = if fill.use_ino {
        st.map_or(0, |s| s.st_ino)
    } else {
        0
    };
    // "Plus" mode: the program says every attribute is valid; taken only
    // when they were asked for (libfuse's rule too).
    let attr = st
        .filter(|_| fill.plus && flags & FUSE_FILL_DIR_PLUS != 0)
        .map(convert::attr_from_stat);
    match (&mut fill.mode, off) {
        (FillMode::Start, 0) | (FillMode::All(_), 0) => {
            if let FillMode::Start = fill.mode {
                fill.mode = FillMode::All(Vec::new());
            }
            if let FillMode::All(v) = &mut fill.mode {
                v.push(Listed {
                    name: name.to_owned(),
                    kind,
                    ino,
                    attr,
                });
            }
            0
        }
        (FillMode::Start | FillMode::Offsets, off) if off != 0 => {
            fill.mode = FillMode::Offsets;
            let kind = kind.unwrap_or(if matches!(name.to_bytes(), b"." | b"..") {
                FileType::Directory
            } else {
                FileType::RegularFile
            });
            let attr = attr.map(|a| (fill.adjust)(a));
            let name = OsStr::from_bytes(name.to_bytes());
            if (fill.push)(name, kind, ino, off as u64, attr.as_ref()) {
                0
            } else {
                1
            }
        }
        _ => {
            // Offsets and none mixed in one listing: libfuse fails it too.
            fill.error = Some(Errno::EIO);
            1
        }
    }
}

/// fuse_fill_dir_flags: the entry's attributes are all valid.
const FUSE_FILL_DIR_PLUS: c_int = 2;
/// fuse_readdir_flags: the kernel would like attributes with the entries.
const FUSE_READDIR_PLUS: c_int = 1;

enum FillMode {
    Start,
    /// Every offset 0: the whole listing, kept in the handle.
    All(Vec<Listed>),
    /// The program's own offsets: entries go straight to the reply.
    Offsets,
}

struct Fill<'a> {
    mode: FillMode,
    use_ino: bool,
    /// The listing was asked with FUSE_READDIR_PLUS.
    plus: bool,
    /// fuse_config's set_uid/set_gid/umask, applied to given attributes.
    adjust: &'a dyn Fn(FileAttr) -> FileAttr,
    push: &'a mut fusebox::fs::PlusFiller<'a>,
    error: Option<Errno>,
}

type FillDirFn =
    extern "C" fn(*mut c_void, *const c_char, *const libc::stat, libc::off_t, c_int) -> c_int;

impl HighFs {
    /// The program's readdir, for READDIR (`plus` false) and READDIRPLUS.
    fn list(
        &self,
        ctx: &Ctx,
        path: &Path,
        fh: FileHandle,
        offset: u64,
        plus: bool,
        filler: &mut fusebox::fs::PlusFiller<'_>,
    ) -> FsResult<()> {
        let hs = &self.0;
        let f = op!(
            hs,
            readdir,
            fn(
                *const c_char,
                *mut c_void,
                FillDirFn,
                libc::off_t,
                *mut FuseFileInfo,
                c_int,
            ) -> c_int
        )
        .ok_or(Errno::ENOSYS)?;
        let dir = hs.dir(fh)?;
        let mut dir = dir.lock().unwrap_or_else(PoisonError::into_inner);
        // A listing kept from an earlier call serves the rest of it; a
        // read from the start (rewinddir) asks the program again.
        if offset == 0 || dir.listing.is_none() {
            let mut fi = hs.fi(FileHandle(dir.fs_fh), 0);
            let flags = if plus { FUSE_READDIR_PLUS } else { 0 };
            let p = hs.path_for(path, true);
            let pp = p.as_ref().map_or(std::ptr::null(), |p| p.as_ptr());
            let adjust = |a| hs.adjust(a);
            let mut fill = Fill {
                mode: FillMode::Start,
                use_ino: hs.conf().use_ino != 0,
                plus,
                adjust: &adjust,
                push: filler,
                error: None,
            };
            let fillp = &mut fill as *mut Fill<'_> as *mut c_void;
            // SAFETY: readdir(path, buf, filler, offset, fi, flags): `buf`
            // is our Fill, alive for the call, read back by fill_dir only.
            let r = hs.call(Some(ctx), 0, || unsafe {
                f(pp, fillp, fill_dir, offset as i64, &mut fi, flags)
            });
            check(r)?;
            if let Some(e) = fill.error {
                return Err(e);
            }
            match fill.mode {
                FillMode::Offsets => return Ok(()),
                FillMode::Start => {
                    dir.listing = Some(Vec::new());
                }
                FillMode::All(mut entries) => {
                    // Types the program left out (a NULL stat): asked now,
                    // after its readdir returned, never from inside it.
                    for e in entries.iter_mut().filter(|e| e.kind.is_none()) {
                        e.kind = match e.name.to_bytes() {
                            b"." | b".." => Some(FileType::Directory),
                            name => hs
                                .getattr_c(Some(ctx), &path.join(OsStr::from_bytes(name)), None)
                                .ok()
                                .and_then(|a| a.kind()),
                        };
                    }
                    dir.listing = Some(entries);
                }
            }
        }
        // The kept listing from `offset` on (a first call at a non-zero
        // offset lists from the start and skips what the kernel has, as
        // libfuse does).
        let listing = dir.listing.as_deref().unwrap_or_default();
        for (i, e) in listing.iter().enumerate().skip(offset as usize) {
            let kind = e.kind.unwrap_or(FileType::RegularFile);
            // Attributes kept from a plain listing's call are none; from a
            // plus one they are as old as the listing, as in libfuse.
            let attr = e.attr.filter(|_| plus).map(|a| hs.adjust(a));
            if !filler(
                OsStr::from_bytes(e.name.to_bytes()),
                kind,
                e.ino,
                i as u64 + 1,
                attr.as_ref(),
            ) {
                break;
            }
        }
        Ok(())
    }
}

impl PathFilesystem for HighFs {
    fn init(&self, conn: &mut Connection, notifier: &Notifier) -> FsResult<()> {
        let hs = &self.0;
        let _ = hs.notifier.set(notifier.clone());
        let init = op!(
            hs,
            init,
            fn(*mut FuseConnInfo, *mut FuseConfig) -> *mut c_void
        );
        let ops = &hs.ops;
        negotiate(
            conn,
            |capable| {
                // The high-level library also wants EXPORT_SUPPORT (its
                // lookup answers "." and ".."); READDIRPLUS as libfuse's,
                // which always has it.
                let has = crate::caps::Callbacks {
                    readdirplus: true,
                    readdir: true,
                    write_buf: ops.write_buf.is_some(),
                    posix_locks: ops.lock.is_some(),
                    flock: ops.flock.is_some(),
                };
                (crate::caps::default_want(has) | cap::EXPORT_SUPPORT) & capable
            },
            (hs.force_on, hs.force_off),
            |ci| {
                if let Some(f) = init {
                    let conf = hs.conf.get();
                    // SAFETY: init(conn, cfg): the config lives in the
                    // shared state; no request is served yet.
                    let data = hs.call(None, 0, || unsafe { f(ci, conf) });
                    hs.private_data.store(data, Ordering::Release);
                }
            },
        )?;
        hs.initialized.store(true, Ordering::Release);
        Ok(())
    }

    fn destroy(&self) {
        self.0.destroy_once();
    }

    fn node_ids_as_inos(&self) -> bool {
        self.0.conf().use_ino == 0
    }

    fn timeouts(&self) -> Timeouts {
        let c = self.0.conf();
        Timeouts {
            entry: convert::ttl(c.entry_timeout),
            attr: convert::ttl(c.attr_timeout),
            negative: convert::ttl(c.negative_timeout),
        }
    }

    fn getattr(&self, ctx: &Ctx, path: &Path, fh: Option<FileHandle>) -> FsResult<FileAttr> {
        self.0.getattr_c(Some(ctx), path, fh)
    }

    fn setattr(&self, ctx: &Ctx, path: &Path, a: &fsops::SetAttr) -> FsResult<FileAttr> {
        let hs = &self.0;
        let mut fi = a.fh.map(|fh| hs.fi(fh, 0));
        let fip = fi
            .as_mut()
            .map_or(std::ptr::null_mut(), |f| f as *mut FuseFileInfo);
        let p = hs.path_for(path, a.fh.is_some());
        let pp = p.as_ref().map_or(std::ptr::null(), |p| p.as_ptr());
        if let Some(mode) = a.mode {
            let f = op!(
                hs,
                chmod,
                fn(*const c_char, libc::mode_t, *mut FuseFileInfo) -> c_int
            )
            .ok_or(Errno::ENOSYS)?;
            // SAFETY: chmod(path, mode, fi).
            check(hs.call(Some(ctx), 0, || unsafe { f(pp, mode, fip) }))?;
        }
        if a.uid.is_some() || a.gid.is_some() {
            let f = op!(
                hs,
                chown,
                fn(*const c_char, libc::uid_t, libc::gid_t, *mut FuseFileInfo) -> c_int
            )
            .ok_or(Errno::ENOSYS)?;
            let (uid, gid) = (a.uid.unwrap_or(u32::MAX), a.gid.unwrap_or(u32::MAX));
            // SAFETY: chown(path, uid, gid, fi); -1 leaves one unchanged.
            check(hs.call(Some(ctx), 0, || unsafe { f(pp, uid, gid, fip) }))?;
        }
        if let Some(size) = a.size {
            let f = op!(
                hs,
                truncate,
                fn(*const c_char, libc::off_t, *mut FuseFileInfo) -> c_int
            )
            .ok_or(Errno::ENOSYS)?;
            // SAFETY: truncate(path, size, fi).
            check(hs.call(Some(ctx), 0, || unsafe { f(pp, size as i64, fip) }))?;
        }
        if a.atime.is_some() || a.mtime.is_some() {
            let f = op!(
                hs,
                utimens,
                fn(*const c_char, *const libc::timespec, *mut FuseFileInfo) -> c_int
            )
            .ok_or(Errno::ENOSYS)?;
            let ts = |t: Option<fusebox::TimeOrNow>| match t {
                None => libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_OMIT,
                },
                Some(fusebox::TimeOrNow::Now) => libc::timespec {
                    tv_sec: 0,
                    tv_nsec: libc::UTIME_NOW,
                },
                Some(fusebox::TimeOrNow::Specific(t)) => libc::timespec {
                    tv_sec: t.sec,
                    tv_nsec: t.nsec as i64,
                },
            };
            let tv = [ts(a.atime), ts(a.mtime)];
            // SAFETY: utimens(path, tv[2], fi).
            check(hs.call(Some(ctx), 0, || unsafe { f(pp, tv.as_ptr(), fip) }))?;
        }
        hs.getattr_c(Some(ctx), path, a.fh)
    }

    fn readlink(&self, ctx: &Ctx, path: &Path, out: &mut DataOut) -> FsResult<()> {
        let hs = &self.0;
        let f = op!(hs, readlink, fn(*const c_char, *mut c_char, usize) -> c_int)
            .ok_or(Errno::ENOSYS)?;
        let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
        let p = cpath(path);
        // SAFETY: readlink(path, buf, size).
        check(hs.call(Some(ctx), 0, || unsafe {
            f(p.as_ptr(), buf.as_mut_ptr() as *mut c_char, buf.len())
        }))?;
        let len = buf
            .iter()
            .take(libc::PATH_MAX as usize)
            .position(|&b| b == 0)
            .unwrap_or(libc::PATH_MAX as usize);
        out.extend_from_slice(&buf[..len]);
        Ok(())
    }

    fn symlink(&self, ctx: &Ctx, target: &OsStr, link_path: &Path) -> FsResult<FileAttr> {
        let hs = &self.0;
        let f = op!(hs, symlink, fn(*const c_char, *const c_char) -> c_int).ok_or(Errno::ENOSYS)?;
        let (t, p) = (
            CString::new(target.as_bytes()).unwrap_or_default(),
            cpath(link_path),
        );
        // SAFETY: symlink(target, linkpath).
        check(hs.call(Some(ctx), 0, || unsafe { f(t.as_ptr(), p.as_ptr()) }))?;
        hs.getattr_c(Some(ctx), link_path, None)
    }

    fn mknod(&self, ctx: &Ctx, path: &Path, a: &fsops::Mknod) -> FsResult<FileAttr> {
        let hs = &self.0;
        let p = cpath(path);
        // A regular file through create + release where the program has
        // create, as libfuse does (a create-only filesystem works).
        if a.mode & libc::S_IFMT == libc::S_IFREG {
            if let Some(create) = op!(
                hs,
                create,
                fn(*const c_char, libc::mode_t, *mut FuseFileInfo) -> c_int
            ) {
                let mut fi = hs.fi(FileHandle(0), libc::O_CREAT | libc::O_EXCL | libc::O_WRONLY);
                // SAFETY: create(path, mode, fi).
                let r = hs.call(Some(ctx), a.umask, || unsafe {
                    create(p.as_ptr(), a.mode, &mut fi)
                });
                if r != -libc::ENOSYS {
                    check(r)?;
                    let attr = hs.getattr_c(Some(ctx), path, Some(FileHandle(fi.fh)));
                    if let Some(rel) =
                        op!(hs, release, fn(*const c_char, *mut FuseFileInfo) -> c_int)
                    {
                        // SAFETY: release(path, fi).
                        hs.call(Some(ctx), 0, || unsafe { rel(p.as_ptr(), &mut fi) });
                    }
                    return attr;
                }
            }
        }
        let f = op!(
            hs,
            mknod,
            fn(*const c_char, libc::mode_t, libc::dev_t) -> c_int
        )
        .ok_or(Errno::ENOSYS)?;
        // SAFETY: mknod(path, mode, rdev).
        check(hs.call(Some(ctx), a.umask, || unsafe {
            f(p.as_ptr(), a.mode, a.rdev as libc::dev_t)
        }))?;
        hs.getattr_c(Some(ctx), path, None)
    }

    fn mkdir(&self, ctx: &Ctx, path: &Path, a: &fsops::Mkdir) -> FsResult<FileAttr> {
        let hs = &self.0;
        let f = op!(hs, mkdir, fn(*const c_char, libc::mode_t) -> c_int).ok_or(Errno::ENOSYS)?;
        let p = cpath(path);
        // SAFETY: mkdir(path, mode).
        check(hs.call(Some(ctx), a.umask, || unsafe { f(p.as_ptr(), a.mode) }))?;
        hs.getattr_c(Some(ctx), path, None)
    }

    fn unlink(&self, ctx: &Ctx, path: &Path) -> FsResult<()> {
        let hs = &self.0;
        let f = op!(hs, unlink, fn(*const c_char) -> c_int).ok_or(Errno::ENOSYS)?;
        let p = cpath(path);
        // SAFETY: unlink(path).
        check(hs.call(Some(ctx), 0, || unsafe { f(p.as_ptr()) })).map(|_| ())
    }

    fn rmdir(&self, ctx: &Ctx, path: &Path) -> FsResult<()> {
        let hs = &self.0;
        let f = op!(hs, rmdir, fn(*const c_char) -> c_int).ok_or(Errno::ENOSYS)?;
        let p = cpath(path);
        // SAFETY: rmdir(path).
        check(hs.call(Some(ctx), 0, || unsafe { f(p.as_ptr()) })).map(|_| ())
    }

    fn rename(&self, ctx: &Ctx, from: &Path, to: &Path, flags: u32) -> FsResult<()> {
        let hs = &self.0;
        let f = op!(
            hs,
            rename,
            fn(*const c_char, *const c_char, c_uint) -> c_int
        )
        .ok_or(Errno::ENOSYS)?;
        let (a, b) = (cpath(from), cpath(to));
        // SAFETY: rename(from, to, flags).
        check(hs.call(Some(ctx), 0, || unsafe { f(a.as_ptr(), b.as_ptr(), flags) })).map(|_| ())
    }

    fn link(&self, ctx: &Ctx, existing: &Path, new: &Path) -> FsResult<FileAttr> {
        let hs = &self.0;
        let f = op!(hs, link, fn(*const c_char, *const c_char) -> c_int).ok_or(Errno::ENOSYS)?;
        let (a, b) = (cpath(existing), cpath(new));
        // SAFETY: link(from, to).
        check(hs.call(Some(ctx), 0, || unsafe { f(a.as_ptr(), b.as_ptr()) }))?;
        hs.getattr_c(Some(ctx), new, None)
    }

    fn open(&self, ctx: &Ctx, path: &Path, a: &fsops::Open) -> FsResult<Opened> {
        let hs = &self.0;
        let mut fi = hs.fi(FileHandle(0), a.flags);
        if let Some(f) = op!(hs, open, fn(*const c_char, *mut FuseFileInfo) -> c_int) {
            let p = cpath(path);
            // SAFETY: open(path, fi).
            check(hs.call(Some(ctx), 0, || unsafe { f(p.as_ptr(), &mut fi) }))?;
        }
        let c = hs.conf();
        if c.direct_io != 0 {
            fi.set(fib::DIRECT_IO, true);
        }
        if c.kernel_cache != 0 {
            fi.set(fib::KEEP_CACHE, true);
        }
        if c.auto_cache != 0 {
            // Keep the page cache only while mtime and size stay as they
            // were at the last open.
            if let Ok(now) = hs.getattr_c(Some(ctx), path, Some(FileHandle(fi.fh))) {
                let mut seen = hs.seen.lock().unwrap_or_else(PoisonError::into_inner);
                let same = seen.get(path) == Some(&(now.mtime, now.size));
                seen.insert(path.to_path_buf(), (now.mtime, now.size));
                if same {
                    fi.set(fib::KEEP_CACHE, true);
                }
            }
        }
        if c.no_rofd_flush != 0 && a.flags & libc::O_ACCMODE == libc::O_RDONLY {
            fi.set(fib::NOFLUSH, true);
        }
        Ok(super::lowlevel::opened_from(&fi))
    }

    fn read(&self, ctx: &Ctx, path: &Path, a: &fsops::Read, out: &mut DataOut) -> FsResult<()> {
        let hs = &self.0;
        let mut fi = hs.fi(a.fh, a.flags);
        fi.lock_owner = a.lock_owner.unwrap_or(0);
        let p = hs.path_for(path, true);
        let pp = p.as_ref().map_or(std::ptr::null(), |p| p.as_ptr());
        if let Some(f) = op!(
            hs,
            read,
            fn(*const c_char, *mut c_char, usize, libc::off_t, *mut FuseFileInfo) -> c_int
        ) {
            // Straight into the reply's buffer.
            return out
                .fill_with(a.size as usize, |buf| {
                    // SAFETY: read(path, buf, size, off, fi) into `buf`.
                    check(hs.call(Some(ctx), 0, || unsafe {
                        f(
                            pp,
                            buf.as_mut_ptr() as *mut c_char,
                            buf.len(),
                            a.offset as i64,
                            &mut fi,
                        )
                    }))
                    .map(|n| n as usize)
                })
                .map(|_| ());
        }
        let f = op!(
            hs,
            read_buf,
            fn(*const c_char, *mut *mut FuseBufvec, usize, libc::off_t, *mut FuseFileInfo) -> c_int
        )
        .ok_or(Errno::ENOSYS)?;
        let mut v: *mut FuseBufvec = std::ptr::null_mut();
        // SAFETY: read_buf(path, &bufv, size, off, fi): the program
        // allocates the vector (malloc) and hands it to us.
        check(hs.call(Some(ctx), 0, || unsafe {
            f(pp, &mut v, a.size as usize, a.offset as i64, &mut fi)
        }))?;
        if v.is_null() {
            return Ok(());
        }
        // SAFETY: the program's vector, ours to copy and free.
        let data = unsafe { super::lowlevel::flatten(v, 0, a.size as usize) };
        // SAFETY: malloc'd by the program, as libfuse frees it: memory
        // buffers' data and the vector itself.
        unsafe { free_bufvec(v) };
        out.extend_from_slice(&data.map_err(|e| Errno(-e))?);
        Ok(())
    }

    fn write(&self, ctx: &Ctx, path: &Path, a: &fsops::Write) -> FsResult<u32> {
        let hs = &self.0;
        let mut fi = hs.fi(a.fh, a.flags);
        fi.set(fib::WRITEPAGE, a.from_cache);
        fi.lock_owner = a.lock_owner.unwrap_or(0);
        let p = hs.path_for(path, true);
        let pp = p.as_ref().map_or(std::ptr::null(), |p| p.as_ptr());
        if let Some(f) = op!(
            hs,
            write_buf,
            fn(*const c_char, *mut FuseBufvec, libc::off_t, *mut FuseFileInfo) -> c_int
        ) {
            let mut v = FuseBufvec {
                count: 1,
                idx: 0,
                off: 0,
                buf: [FuseBuf {
                    size: a.data.len(),
                    flags: 0,
                    mem: a.data.as_ptr() as *mut c_void,
                    fd: -1,
                    pos: 0,
                }],
            };
            // SAFETY: write_buf(path, bufv, off, fi); the data lives for the call.
            return check(hs.call(Some(ctx), 0, || unsafe {
                f(pp, &mut v, a.offset as i64, &mut fi)
            }))
            .map(|n| n as u32);
        }
        let f = op!(
            hs,
            write,
            fn(*const c_char, *const c_char, usize, libc::off_t, *mut FuseFileInfo) -> c_int
        )
        .ok_or(Errno::ENOSYS)?;
        // SAFETY: write(path, buf, size, off, fi).
        check(hs.call(Some(ctx), 0, || unsafe {
            f(
                pp,
                a.data.as_ptr() as *const c_char,
                a.data.len(),
                a.offset as i64,
                &mut fi,
            )
        }))
        .map(|n| n as u32)
    }

    fn flush(&self, ctx: &Ctx, path: &Path, fh: FileHandle, lock_owner: u64) -> FsResult<()> {
        self.0.flush_c(ctx, path, fh, lock_owner)
    }

    fn release(&self, ctx: &Ctx, path: &Path, a: &fsops::Release) -> FsResult<()> {
        let hs = &self.0;
        let mut result = Ok(());
        if a.flush {
            result = match hs.flush_c(ctx, path, a.fh, a.lock_owner) {
                Err(Errno::ENOSYS) => Ok(()),
                r => r,
            };
        }
        if let Some(f) = op!(hs, release, fn(*const c_char, *mut FuseFileInfo) -> c_int) {
            let mut fi = hs.fi(a.fh, a.flags);
            fi.lock_owner = a.lock_owner;
            fi.set(fib::FLUSH, a.flush);
            fi.set(fib::FLOCK_RELEASE, a.flock_unlock);
            let p = hs.path_for(path, true);
            let pp = p.as_ref().map_or(std::ptr::null(), |p| p.as_ptr());
            // SAFETY: release(path, fi); its result is ignored, as in libfuse.
            hs.call(Some(ctx), 0, || unsafe { f(pp, &mut fi) });
        }
        result
    }

    fn fsync(&self, ctx: &Ctx, path: &Path, fh: FileHandle, datasync: bool) -> FsResult<()> {
        let hs = &self.0;
        let f = op!(
            hs,
            fsync,
            fn(*const c_char, c_int, *mut FuseFileInfo) -> c_int
        )
        .ok_or(Errno::ENOSYS)?;
        let mut fi = hs.fi(fh, 0);
        let p = hs.path_for(path, true);
        let pp = p.as_ref().map_or(std::ptr::null(), |p| p.as_ptr());
        // SAFETY: fsync(path, datasync, fi).
        check(hs.call(Some(ctx), 0, || unsafe {
            f(pp, datasync as c_int, &mut fi)
        }))
        .map(|_| ())
    }

    fn opendir(&self, ctx: &Ctx, path: &Path, a: &fsops::Open) -> FsResult<Opened> {
        let hs = &self.0;
        let mut fi = hs.fi(FileHandle(0), a.flags);
        if let Some(f) = op!(hs, opendir, fn(*const c_char, *mut FuseFileInfo) -> c_int) {
            let p = cpath(path);
            // SAFETY: opendir(path, fi).
            check(hs.call(Some(ctx), 0, || unsafe { f(p.as_ptr(), &mut fi) }))?;
        }
        let id = hs.next_dir.fetch_add(1, Ordering::Relaxed);
        hs.dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(
                id,
                Arc::new(Mutex::new(DirHandle {
                    fs_fh: fi.fh,
                    listing: None,
                })),
            );
        Ok(Opened::handle(id))
    }

    fn readdir(
        &self,
        ctx: &Ctx,
        path: &Path,
        fh: FileHandle,
        offset: u64,
        filler: &mut dyn FnMut(&OsStr, FileType, u64, u64) -> bool,
    ) -> FsResult<()> {
        self.list(
            ctx,
            path,
            fh,
            offset,
            false,
            &mut |name, kind, ino, next, _| filler(name, kind, ino, next),
        )
    }

    fn readdirplus(
        &self,
        ctx: &Ctx,
        path: &Path,
        fh: FileHandle,
        offset: u64,
        filler: &mut fusebox::fs::PlusFiller<'_>,
    ) -> FsResult<()> {
        self.list(ctx, path, fh, offset, true, filler)
    }

    fn lookups_in_readdirplus(&self) -> bool {
        self.0.lookups_in_readdirplus
    }

    fn releasedir(&self, ctx: &Ctx, path: &Path, a: &fsops::Release) -> FsResult<()> {
        let hs = &self.0;
        let dir = hs
            .dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&a.fh.0);
        let Some(dir) = dir else {
            return Ok(());
        };
        let fs_fh = dir.lock().unwrap_or_else(PoisonError::into_inner).fs_fh;
        if let Some(f) = op!(
            hs,
            releasedir,
            fn(*const c_char, *mut FuseFileInfo) -> c_int
        ) {
            let mut fi = hs.fi(FileHandle(fs_fh), a.flags);
            let p = hs.path_for(path, true);
            let pp = p.as_ref().map_or(std::ptr::null(), |p| p.as_ptr());
            // SAFETY: releasedir(path, fi); libfuse ignores its result.
            hs.call(Some(ctx), 0, || unsafe { f(pp, &mut fi) });
        }
        Ok(())
    }

    fn fsyncdir(&self, ctx: &Ctx, path: &Path, fh: FileHandle, datasync: bool) -> FsResult<()> {
        let hs = &self.0;
        let f = op!(
            hs,
            fsyncdir,
            fn(*const c_char, c_int, *mut FuseFileInfo) -> c_int
        )
        .ok_or(Errno::ENOSYS)?;
        let fs_fh = hs
            .dir(fh)?
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .fs_fh;
        let mut fi = hs.fi(FileHandle(fs_fh), 0);
        let p = hs.path_for(path, true);
        let pp = p.as_ref().map_or(std::ptr::null(), |p| p.as_ptr());
        // SAFETY: fsyncdir(path, datasync, fi).
        check(hs.call(Some(ctx), 0, || unsafe {
            f(pp, datasync as c_int, &mut fi)
        }))
        .map(|_| ())
    }

    fn statfs(&self, ctx: &Ctx, path: &Path) -> FsResult<Statfs> {
        let hs = &self.0;
        let Some(f) = op!(hs, statfs, fn(*const c_char, *mut libc::statvfs) -> c_int) else {
            return Ok(Statfs {
                namelen: 255,
                bsize: 512,
                ..Default::default()
            });
        };
        let mut st = super::zeroed_statvfs();
        let p = cpath(path);
        // SAFETY: statfs(path, stbuf).
        check(hs.call(Some(ctx), 0, || unsafe { f(p.as_ptr(), &mut st) }))?;
        Ok(convert::statfs_from_statvfs(&st))
    }

    fn setxattr(&self, ctx: &Ctx, path: &Path, a: &fsops::Setxattr) -> FsResult<()> {
        let hs = &self.0;
        let f = op!(
            hs,
            setxattr,
            fn(*const c_char, *const c_char, *const c_char, usize, c_int) -> c_int
        )
        .ok_or(Errno::ENOSYS)?;
        let (p, n) = (
            cpath(path),
            CString::new(a.name.as_bytes()).unwrap_or_default(),
        );
        // SAFETY: setxattr(path, name, value, size, flags).
        check(hs.call(Some(ctx), 0, || unsafe {
            f(
                p.as_ptr(),
                n.as_ptr(),
                a.value.as_ptr() as *const c_char,
                a.value.len(),
                a.flags,
            )
        }))
        .map(|_| ())
    }

    fn getxattr(&self, ctx: &Ctx, path: &Path, name: &OsStr, out: &mut DataOut) -> FsResult<()> {
        let hs = &self.0;
        let f = op!(
            hs,
            getxattr,
            fn(*const c_char, *const c_char, *mut c_char, usize) -> c_int
        )
        .ok_or(Errno::ENOSYS)?;
        let (p, n) = (
            cpath(path),
            CString::new(name.as_bytes()).unwrap_or_default(),
        );
        // Its size first, then the value (the adapter answers size probes
        // and ERANGE from the whole value).
        // SAFETY: getxattr(path, name, NULL, 0) asks the size.
        let size = check(hs.call(Some(ctx), 0, || unsafe {
            f(p.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0)
        }))?;
        let mut buf = vec![0u8; size as usize];
        // SAFETY: getxattr(path, name, buf, size).
        let got = check(hs.call(Some(ctx), 0, || unsafe {
            f(
                p.as_ptr(),
                n.as_ptr(),
                buf.as_mut_ptr() as *mut c_char,
                buf.len(),
            )
        }))?;
        out.extend_from_slice(&buf[..(got as usize).min(buf.len())]);
        Ok(())
    }

    fn listxattr(&self, ctx: &Ctx, path: &Path, out: &mut DataOut) -> FsResult<()> {
        let hs = &self.0;
        let f = op!(
            hs,
            listxattr,
            fn(*const c_char, *mut c_char, usize) -> c_int
        )
        .ok_or(Errno::ENOSYS)?;
        let p = cpath(path);
        // SAFETY: listxattr(path, NULL, 0) asks the size.
        let size = check(hs.call(Some(ctx), 0, || unsafe {
            f(p.as_ptr(), std::ptr::null_mut(), 0)
        }))?;
        let mut buf = vec![0u8; size as usize];
        // SAFETY: listxattr(path, buf, size).
        let got = check(hs.call(Some(ctx), 0, || unsafe {
            f(p.as_ptr(), buf.as_mut_ptr() as *mut c_char, buf.len())
        }))?;
        out.extend_from_slice(&buf[..(got as usize).min(buf.len())]);
        Ok(())
    }

    fn removexattr(&self, ctx: &Ctx, path: &Path, name: &OsStr) -> FsResult<()> {
        let hs = &self.0;
        let f =
            op!(hs, removexattr, fn(*const c_char, *const c_char) -> c_int).ok_or(Errno::ENOSYS)?;
        let (p, n) = (
            cpath(path),
            CString::new(name.as_bytes()).unwrap_or_default(),
        );
        // SAFETY: removexattr(path, name).
        check(hs.call(Some(ctx), 0, || unsafe { f(p.as_ptr(), n.as_ptr()) })).map(|_| ())
    }

    fn access(&self, ctx: &Ctx, path: &Path, mask: i32) -> FsResult<()> {
        let hs = &self.0;
        let f = op!(hs, access, fn(*const c_char, c_int) -> c_int).ok_or(Errno::ENOSYS)?;
        let p = cpath(path);
        // SAFETY: access(path, mask).
        check(hs.call(Some(ctx), 0, || unsafe { f(p.as_ptr(), mask) })).map(|_| ())
    }

    fn create(&self, ctx: &Ctx, path: &Path, a: &fsops::Create) -> FsResult<(FileAttr, Opened)> {
        let hs = &self.0;
        let f = op!(
            hs,
            create,
            fn(*const c_char, libc::mode_t, *mut FuseFileInfo) -> c_int
        )
        .ok_or(Errno::ENOSYS)?;
        let mut fi = hs.fi(FileHandle(0), a.flags);
        let p = cpath(path);
        // SAFETY: create(path, mode, fi).
        check(hs.call(Some(ctx), a.umask, || unsafe {
            f(p.as_ptr(), a.mode, &mut fi)
        }))?;
        let attr = match hs.getattr_c(Some(ctx), path, Some(FileHandle(fi.fh))) {
            Ok(a) if a.mode & libc::S_IFMT == libc::S_IFREG => Ok(a),
            Ok(_) => Err(Errno::EIO),
            Err(e) => Err(e),
        };
        if let Err(e) = attr {
            if let Some(rel) = op!(hs, release, fn(*const c_char, *mut FuseFileInfo) -> c_int) {
                // SAFETY: release(path, fi) of what create opened.
                hs.call(Some(ctx), 0, || unsafe { rel(p.as_ptr(), &mut fi) });
            }
            return Err(e);
        }
        let c = hs.conf();
        if c.direct_io != 0 {
            fi.set(fib::DIRECT_IO, true);
        }
        if c.kernel_cache != 0 {
            fi.set(fib::KEEP_CACHE, true);
        }
        Ok((attr?, super::lowlevel::opened_from(&fi)))
    }

    fn ioctl(&self, ctx: &Ctx, path: &Path, a: &fsops::Ioctl, out: &mut DataOut) -> FsResult<i32> {
        use fusebox::abi::flags::ioctl as fl;
        let hs = &self.0;
        if a.flags & fl::UNRESTRICTED != 0 {
            return Err(Errno::EPERM);
        }
        let f = op!(
            hs,
            ioctl,
            fn(*const c_char, c_uint, *mut c_void, *mut FuseFileInfo, c_uint, *mut c_void) -> c_int
        )
        .ok_or(Errno::ENOSYS)?;
        // A directory's ioctl names our directory handle.
        let fh = if a.flags & fl::DIR != 0 {
            FileHandle(
                hs.dir(a.fh)?
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .fs_fh,
            )
        } else {
            a.fh
        };
        let mut fi = hs.fi(fh, 0);
        // The data buffer libfuse hands over: the input, in a buffer as
        // large as the output may be.
        let mut data = a.input.to_vec();
        data.resize(data.len().max(a.out_size as usize), 0);
        let dp = if data.is_empty() {
            std::ptr::null_mut()
        } else {
            data.as_mut_ptr() as *mut c_void
        };
        let p = hs.path_for(path, true);
        let pp = p.as_ref().map_or(std::ptr::null(), |p| p.as_ptr());
        // SAFETY: ioctl(path, cmd, arg, fi, flags, data): `data` holds
        // max(in, out) bytes for the call.
        let r = check(hs.call(Some(ctx), 0, || unsafe {
            f(pp, a.cmd, a.arg as *mut c_void, &mut fi, a.flags, dp)
        }))?;
        out.extend_from_slice(&data[..a.out_size as usize]);
        Ok(r)
    }

    fn poll(&self, ctx: &Ctx, path: &Path, a: &fsops::Poll) -> FsResult<u32> {
        let hs = &self.0;
        let f = op!(
            hs,
            poll,
            fn(
                *const c_char,
                *mut FuseFileInfo,
                *mut super::lowlevel::PollHandle,
                *mut c_uint,
            ) -> c_int
        )
        .ok_or(Errno::ENOSYS)?;
        let mut fi = hs.fi(a.fh, 0);
        fi.poll_events = a.events;
        let ph = if a.schedule_notify {
            Box::into_raw(Box::new(super::lowlevel::PollHandle {
                kh: a.kh,
                notifier: hs.notifier.get().cloned(),
            }))
        } else {
            std::ptr::null_mut()
        };
        let mut revents: c_uint = 0;
        let p = hs.path_for(path, true);
        let pp = p.as_ref().map_or(std::ptr::null(), |p| p.as_ptr());
        // SAFETY: poll(path, fi, ph, &revents); the handle is the
        // program's to keep and destroy (fuse_pollhandle_destroy).
        check(hs.call(Some(ctx), 0, || unsafe { f(pp, &mut fi, ph, &mut revents) }))?;
        Ok(revents)
    }

    fn getlk(&self, ctx: &Ctx, path: &Path, lock: &fsops::Lock) -> FsResult<LockInfo> {
        let hs = &self.0;
        let f = op!(
            hs,
            lock,
            fn(*const c_char, *mut FuseFileInfo, c_int, *mut libc::flock) -> c_int
        )
        .ok_or(Errno::ENOSYS)?;
        let mut fi = hs.fi(lock.fh, 0);
        fi.lock_owner = lock.owner;
        let mut fl = super::lowlevel::flock_from(lock);
        let p = hs.path_for(path, true);
        let pp = p.as_ref().map_or(std::ptr::null(), |p| p.as_ptr());
        // SAFETY: lock(path, fi, F_GETLK, flock).
        check(hs.call(Some(ctx), 0, || unsafe {
            f(pp, &mut fi, libc::F_GETLK, &mut fl)
        }))?;
        Ok(convert::lock_from_flock(&fl))
    }

    fn setlk(&self, ctx: &Ctx, path: &Path, lock: &fsops::Lock, sleep: bool) -> FsResult<()> {
        let hs = &self.0;
        let mut fi = hs.fi(lock.fh, 0);
        fi.lock_owner = lock.owner;
        let p = hs.path_for(path, true);
        let pp = p.as_ref().map_or(std::ptr::null(), |p| p.as_ptr());
        if lock.flock {
            let f = op!(
                hs,
                flock,
                fn(*const c_char, *mut FuseFileInfo, c_int) -> c_int
            )
            .ok_or(Errno::ENOSYS)?;
            let op = crate::convert::flock_operation(lock.typ, sleep);
            // SAFETY: flock(path, fi, op).
            return check(hs.call(Some(ctx), 0, || unsafe { f(pp, &mut fi, op) })).map(|_| ());
        }
        let f = op!(
            hs,
            lock,
            fn(*const c_char, *mut FuseFileInfo, c_int, *mut libc::flock) -> c_int
        )
        .ok_or(Errno::ENOSYS)?;
        let mut fl = super::lowlevel::flock_from(lock);
        let cmd = if sleep { libc::F_SETLKW } else { libc::F_SETLK };
        // SAFETY: lock(path, fi, cmd, flock).
        check(hs.call(Some(ctx), 0, || unsafe { f(pp, &mut fi, cmd, &mut fl) })).map(|_| ())
    }

    fn fallocate(&self, ctx: &Ctx, path: &Path, a: &fsops::Fallocate) -> FsResult<()> {
        let hs = &self.0;
        let f = op!(
            hs,
            fallocate,
            fn(*const c_char, c_int, libc::off_t, libc::off_t, *mut FuseFileInfo) -> c_int
        )
        .ok_or(Errno::ENOSYS)?;
        let mut fi = hs.fi(a.fh, 0);
        let p = hs.path_for(path, true);
        let pp = p.as_ref().map_or(std::ptr::null(), |p| p.as_ptr());
        // SAFETY: fallocate(path, mode, offset, length, fi).
        check(hs.call(Some(ctx), 0, || unsafe {
            f(pp, a.mode, a.offset as i64, a.length as i64, &mut fi)
        }))
        .map(|_| ())
    }

    fn lseek(&self, ctx: &Ctx, path: &Path, a: &fsops::Lseek) -> FsResult<u64> {
        let hs = &self.0;
        let f = op!(
            hs,
            lseek,
            fn(*const c_char, libc::off_t, c_int, *mut FuseFileInfo) -> libc::off_t
        )
        .ok_or(Errno::ENOSYS)?;
        let mut fi = hs.fi(a.fh, 0);
        let p = cpath(path);
        // SAFETY: lseek(path, off, whence, fi).
        let r = hs.call(Some(ctx), 0, || unsafe {
            f(p.as_ptr(), a.offset as i64, a.whence, &mut fi)
        });
        if r < 0 {
            Err(Errno(-r as i32))
        } else {
            Ok(r as u64)
        }
    }

    fn copy_file_range(
        &self,
        ctx: &Ctx,
        path_in: &Path,
        path_out: &Path,
        a: &fsops::CopyFileRange,
    ) -> FsResult<u64> {
        let hs = &self.0;
        let f = op!(
            hs,
            copy_file_range,
            fn(
                *const c_char,
                *mut FuseFileInfo,
                libc::off_t,
                *const c_char,
                *mut FuseFileInfo,
                libc::off_t,
                usize,
                c_int,
            ) -> isize
        )
        .ok_or(Errno::ENOSYS)?;
        let (mut fi_in, mut fi_out) = (hs.fi(a.fh_in, 0), hs.fi(a.fh_out, 0));
        let (pi, po) = (hs.path_for(path_in, true), hs.path_for(path_out, true));
        let pip = pi.as_ref().map_or(std::ptr::null(), |p| p.as_ptr());
        let pop = po.as_ref().map_or(std::ptr::null(), |p| p.as_ptr());
        // SAFETY: copy_file_range(path_in, fi_in, off_in, path_out, fi_out,
        // off_out, len, flags).
        let r = hs.call(Some(ctx), 0, || unsafe {
            f(
                pip,
                &mut fi_in,
                a.off_in as i64,
                pop,
                &mut fi_out,
                a.off_out as i64,
                a.len as usize,
                a.flags as c_int,
            )
        });
        if r < 0 {
            Err(Errno(-r as i32))
        } else {
            Ok(r as u64)
        }
    }
}

/// Free a vector a program's read_buf allocated: each memory buffer's
/// data, then the vector.
///
/// # Safety
/// `v` and its memory buffers were malloc'd and are not used after.
unsafe fn free_bufvec(v: *mut FuseBufvec) {
    // SAFETY: the caller's contract.
    unsafe {
        let bufs = std::slice::from_raw_parts((*v).buf.as_ptr(), (*v).count);
        for b in bufs {
            if b.flags & (1 << 1) == 0 {
                libc::free(b.mem);
            }
        }
        libc::free(v as *mut c_void);
    }
}

// ------------------------------------------------------------ C API

/// The session of a `struct fuse *`.
///
/// # Safety
/// `f` is NULL or from fuse_new, not yet destroyed.
unsafe fn session_of(f: *mut Fuse) -> *mut FuseSession {
    // SAFETY: the caller's contract.
    unsafe { f.as_ref() }.map_or(std::ptr::null_mut(), |f| f.se)
}

/// Serve `f`'s session: one request at a time, or with up to
/// `max_threads` threads; -1 for a NULL handle, as libfuse answers.
///
/// # Safety
/// `f` is NULL or from fuse_new, not yet destroyed.
unsafe fn serve(f: *mut Fuse, one_at_a_time: bool, max_threads: Option<usize>) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { session_of(f).as_ref() } {
        Some(s) => session::serve(s, one_at_a_time, max_threads),
        None => -1,
    }
}

/// `struct fuse *fuse_new(struct fuse_args *args, const struct
/// fuse_operations *op, size_t op_size, void *user_data)` (3.1).
pub unsafe extern "C" fn fuse_new_31(
    args: *mut FuseArgs,
    op: *const FuseOperations,
    op_size: usize,
    user_data: *mut c_void,
) -> *mut Fuse {
    // SAFETY: the caller's args.
    let Some(a) = (unsafe { args.as_ref() }) else {
        log_error("fuse: empty argv passed to fuse_new().");
        return std::ptr::null_mut();
    };
    // SAFETY: as above.
    let strings = unsafe { session::arg_strings(a) };
    let (lib, rest) = match crate::hl_opts::split(&strings) {
        Ok(x) => x,
        Err(msg) => {
            log_error(&msg);
            return std::ptr::null_mut();
        }
    };
    if let Some(m) = lib.modules.as_deref().filter(|m| !m.is_empty()) {
        log_error(&format!(
            "fuse: modules=`{m}': filesystem modules (subdir, iconv) are not supported by fusebox's libfuse3"
        ));
        return std::ptr::null_mut();
    }
    if lib.remember != 0 {
        tracing::info!(
            remember = lib.remember,
            "remember/noforget: nodes live as long as the kernel holds them"
        );
    }
    let mut ops = FuseOperations::default();
    let size = std::mem::size_of::<FuseOperations>();
    if op_size > size {
        log_error("fuse: warning: library too old, some operations may not work");
    }
    if !op.is_null() {
        // SAFETY: the program's ops, at least `op_size` bytes; only what
        // both sides have is copied, the rest stays NULL.
        unsafe {
            std::ptr::copy_nonoverlapping(
                op as *const u8,
                &mut ops as *mut FuseOperations as *mut u8,
                op_size.min(size),
            )
        };
    }
    let se = match FuseSession::create(&rest, |forced| {
        Program::High(Arc::new(HighShared::new(
            ops,
            user_data,
            lib.clone(),
            forced,
        )))
    }) {
        Ok(se) => se,
        Err(session::CreateError::Unknown(msg) | session::CreateError::Other(msg)) => {
            log_error(&msg);
            return std::ptr::null_mut();
        }
    };
    let se = Box::into_raw(se);
    let fuse = Box::into_raw(Box::new(Fuse { se }));
    // SAFETY: just made.
    if let Program::High(hs) = &unsafe { &*se }.program {
        hs.fuse.store(fuse, Ordering::Release);
    }
    fuse
}

/// `fuse_new_31` as exported (see the note in mod.rs).
#[export_name = "fuse_new_31"]
pub unsafe extern "C" fn export_fuse_new_31(
    args: *mut FuseArgs,
    op: *const FuseOperations,
    op_size: usize,
    user_data: *mut c_void,
) -> *mut Fuse {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_new_31(args, op, op_size, user_data) }
}
versioned!(fuse_new_31, "FUSE_3.1");
versioned!(fuse_new_31 as "fuse_new@@FUSE_3.1");

/// `fuse_new` of 3.0: the same, except that `-h`/`--help` prints the
/// library's options and returns NULL.
#[no_mangle]
pub unsafe extern "C" fn fuse_new_30(
    args: *mut FuseArgs,
    op: *const FuseOperations,
    op_size: usize,
    user_data: *mut c_void,
) -> *mut Fuse {
    // SAFETY: the caller's args.
    if let Some(a) = unsafe { args.as_ref() } {
        // SAFETY: as above.
        let strings = unsafe { session::arg_strings(a) };
        if strings.iter().any(|s| s == "-h" || s == "--help") {
            // SAFETY: the caller's args.
            unsafe { fuse_lib_help(args) };
            return std::ptr::null_mut();
        }
    }
    // SAFETY: forwarded as given.
    unsafe { fuse_new_31(args, op, op_size, user_data) }
}
versioned!(fuse_new_30, "FUSE_3.1");
versioned!(fuse_new_30 as "fuse_new@FUSE_3.0");

/// `void fuse_lib_help(struct fuse_args *args)`.
pub unsafe extern "C" fn fuse_lib_help(_args: *mut FuseArgs) {
    print!("{}", crate::help::LIB_HELP);
    super::cmdline::fuse_lowlevel_help();
}

/// `fuse_lib_help` as exported (see the note in mod.rs).
#[export_name = "fuse_lib_help"]
pub unsafe extern "C" fn export_fuse_lib_help(_args: *mut FuseArgs) {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_lib_help(_args) }
}
versioned!(fuse_lib_help, "FUSE_3.1");

/// `int fuse_mount(struct fuse *f, const char *mountpoint)`.
pub unsafe extern "C" fn fuse_mount(f: *mut Fuse, mountpoint: *const c_char) -> c_int {
    // SAFETY: the program's handle.
    unsafe { session::fuse_session_mount(session_of(f), mountpoint) }
}

/// `fuse_mount` as exported (see the note in mod.rs).
#[export_name = "fuse_mount"]
pub unsafe extern "C" fn export_fuse_mount(f: *mut Fuse, mountpoint: *const c_char) -> c_int {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_mount(f, mountpoint) }
}
versioned!(fuse_mount, "FUSE_3.0");

/// `void fuse_unmount(struct fuse *f)`.
pub unsafe extern "C" fn fuse_unmount(f: *mut Fuse) {
    // SAFETY: the program's handle.
    unsafe { session::fuse_session_unmount(session_of(f)) }
}

/// `fuse_unmount` as exported (see the note in mod.rs).
#[export_name = "fuse_unmount"]
pub unsafe extern "C" fn export_fuse_unmount(f: *mut Fuse) {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_unmount(f) }
}
versioned!(fuse_unmount, "FUSE_3.0");

/// `void fuse_destroy(struct fuse *f)`.
pub unsafe extern "C" fn fuse_destroy(f: *mut Fuse) {
    if f.is_null() {
        return;
    }
    // SAFETY: made by fuse_new; the program is done with it.
    let f = unsafe { Box::from_raw(f) };
    // SAFETY: its session, destroyed with it.
    unsafe { session::fuse_session_destroy(f.se) };
}

/// `fuse_destroy` as exported (see the note in mod.rs).
#[export_name = "fuse_destroy"]
pub unsafe extern "C" fn export_fuse_destroy(f: *mut Fuse) {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_destroy(f) }
}
versioned!(fuse_destroy, "FUSE_3.0");

/// `int fuse_loop(struct fuse *f)`: one request at a time.
pub unsafe extern "C" fn fuse_loop(f: *mut Fuse) -> c_int {
    // SAFETY: the program's handle.
    unsafe { serve(f, true, None) }
}

/// `fuse_loop` as exported (see the note in mod.rs).
#[export_name = "fuse_loop"]
pub unsafe extern "C" fn export_fuse_loop(f: *mut Fuse) -> c_int {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_loop(f) }
}
versioned!(fuse_loop, "FUSE_3.0");

/// `fuse_loop_mt` before 3.2: `(f, int clone_fd)`.
pub unsafe extern "C" fn fuse_loop_mt_31(f: *mut Fuse, _clone_fd: c_int) -> c_int {
    // SAFETY: the program's handle.
    unsafe { serve(f, false, None) }
}

/// `fuse_loop_mt_31` as exported (see the note in mod.rs).
#[export_name = "fuse_loop_mt_31"]
pub unsafe extern "C" fn export_fuse_loop_mt_31(f: *mut Fuse, _clone_fd: c_int) -> c_int {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_loop_mt_31(f, _clone_fd) }
}
versioned!(fuse_loop_mt_31, "FUSE_3.2");
versioned!(fuse_loop_mt_31 as "fuse_loop_mt@FUSE_3.0");

/// `fuse_loop_mt` of 3.2 to 3.11: `(f, struct fuse_loop_config_v1 *)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_loop_mt_32(f: *mut Fuse, _config: *const FuseLoopConfigV1) -> c_int {
    // SAFETY: the program's handle.
    unsafe { serve(f, false, None) }
}
versioned!(fuse_loop_mt_32, "FUSE_3.12");
versioned!(fuse_loop_mt_32 as "fuse_loop_mt@FUSE_3.2");

/// `int fuse_loop_mt(struct fuse *f, struct fuse_loop_config *config)` (3.12).
#[no_mangle]
pub unsafe extern "C" fn fuse_loop_mt_312(
    f: *mut Fuse,
    config: *const session::LoopConfig,
) -> c_int {
    // SAFETY: the program's handle and config.
    unsafe { session::fuse_session_loop_mt_312(session_of(f), config) }
}
versioned!(fuse_loop_mt_312, "FUSE_3.12");
versioned!(fuse_loop_mt_312 as "fuse_loop_mt@@FUSE_3.12");

/// `void fuse_exit(struct fuse *f)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_exit(f: *mut Fuse) {
    // SAFETY: the program's handle.
    unsafe { session::fuse_session_exit(session_of(f)) }
}
versioned!(fuse_exit, "FUSE_3.0");

/// `struct fuse_session *fuse_get_session(struct fuse *f)`.
pub unsafe extern "C" fn fuse_get_session(f: *mut Fuse) -> *mut FuseSession {
    // SAFETY: the program's handle.
    unsafe { session_of(f) }
}

/// `fuse_get_session` as exported (see the note in mod.rs).
#[export_name = "fuse_get_session"]
pub unsafe extern "C" fn export_fuse_get_session(f: *mut Fuse) -> *mut FuseSession {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_get_session(f) }
}
versioned!(fuse_get_session, "FUSE_3.0");

/// `struct fuse_context *fuse_get_context(void)`: this thread's caller.
#[no_mangle]
pub extern "C" fn fuse_get_context() -> *mut FuseContext {
    CONTEXT.with(|c| c.get())
}
versioned!(fuse_get_context, "FUSE_3.0");

/// `int fuse_getgroups(int size, gid_t list[])`.
#[no_mangle]
pub unsafe extern "C" fn fuse_getgroups(size: c_int, list: *mut libc::gid_t) -> c_int {
    let pid = CONTEXT.with(|c| {
        // SAFETY: this thread's context, read.
        unsafe { (*c.get()).pid }
    });
    if pid <= 0 {
        return -libc::EINVAL;
    }
    match crate::groups::of_process(pid as u32) {
        Ok(groups) => {
            if !list.is_null() {
                for (i, g) in groups.iter().take(size.max(0) as usize).enumerate() {
                    // SAFETY: the caller's array of `size` entries.
                    unsafe { *list.add(i) = *g };
                }
            }
            groups.len() as c_int
        }
        Err(e) => -e.raw_os_error().unwrap_or(libc::EIO),
    }
}
versioned!(fuse_getgroups, "FUSE_3.0");

/// `int fuse_interrupted(void)`: whether this thread's request was given up.
#[no_mangle]
pub extern "C" fn fuse_interrupted() -> c_int {
    INTERRUPTED.with(|i| match i.get() {
        // SAFETY: set only while the request's call runs on this thread.
        Some(probe) => (unsafe { (*probe)() }) as c_int,
        None => 0,
    })
}
versioned!(fuse_interrupted, "FUSE_3.0");

/// `int fuse_invalidate_path(struct fuse *f, const char *path)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_invalidate_path(f: *mut Fuse, path: *const c_char) -> c_int {
    // SAFETY: the program's handle and a NUL-terminated path.
    let (Some(s), false) = (unsafe { session_of(f).as_ref() }, path.is_null()) else {
        return -libc::EINVAL;
    };
    // SAFETY: as above.
    let path = Path::new(OsStr::from_bytes(
        unsafe { CStr::from_ptr(path) }.to_bytes(),
    ));
    match (s.node_of_path(path), s.notifier()) {
        (Some(node), Some(n)) => match n.inval_inode(node, 0, 0) {
            Ok(()) => 0,
            Err(e) => -e.raw_os_error().unwrap_or(libc::EIO),
        },
        (None, _) => -libc::ENOENT,
        (_, None) => -libc::ENOTCONN,
    }
}
versioned!(fuse_invalidate_path, "FUSE_3.1");

/// `int fuse_notify_poll(struct fuse_pollhandle *ph)`: wake the poller a
/// high-level poll callback was handed `ph` for.
#[no_mangle]
pub unsafe extern "C" fn fuse_notify_poll(ph: *mut super::lowlevel::PollHandle) -> c_int {
    // SAFETY: forwarded as given.
    unsafe { super::lowlevel::fuse_lowlevel_notify_poll(ph) }
}
versioned!(fuse_notify_poll, "FUSE_3.0");

/// `int fuse_start_cleanup_thread(struct fuse *f)`: nodes are dropped when
/// the kernel forgets them; there is nothing to clean.
#[no_mangle]
pub extern "C" fn fuse_start_cleanup_thread(_f: *mut Fuse) -> c_int {
    0
}
versioned!(fuse_start_cleanup_thread, "FUSE_3.0");

/// `void fuse_stop_cleanup_thread(struct fuse *f)`.
#[no_mangle]
pub extern "C" fn fuse_stop_cleanup_thread(_f: *mut Fuse) {}
versioned!(fuse_stop_cleanup_thread, "FUSE_3.0");

/// `int fuse_clean_cache(struct fuse *fuse)`: seconds until the next
/// clean-up; there never is one.
#[no_mangle]
pub extern "C" fn fuse_clean_cache(_f: *mut Fuse) -> c_int {
    3600
}
versioned!(fuse_clean_cache, "FUSE_3.0");

/// `int fuse_main_real(int argc, char *argv[], const struct
/// fuse_operations *op, size_t op_size, void *user_data)`: parse the
/// command line, mount, go to the background unless -f, serve until
/// unmounted or signalled. Exit codes as libfuse 3.14's: 1 bad command
/// line, 2 no mountpoint, 3 fuse_new failed, 4 mount, 5 daemonize, 6
/// signal handlers, 8 the loop ended in error (a signal included), 0
/// otherwise.
#[no_mangle]
pub unsafe extern "C" fn fuse_main_real(
    argc: c_int,
    argv: *mut *mut c_char,
    op: *const FuseOperations,
    op_size: usize,
    user_data: *mut c_void,
) -> c_int {
    let mut args = FuseArgs {
        argc,
        argv,
        allocated: 0,
    };
    // SAFETY: zeroed is valid for this struct of ints and a pointer.
    let mut opts: crate::abi::FuseCmdlineOpts = unsafe { std::mem::zeroed() };
    // SAFETY: main()'s argument vector and our options struct.
    if unsafe { super::cmdline::fuse_parse_cmdline_312(&mut args, &mut opts) } != 0 {
        return 1;
    }
    let result = 'run: {
        if opts.show_version != 0 {
            println!("FUSE library version {}", crate::PKG_VERSION);
            super::cmdline::fuse_lowlevel_version();
            break 'run 0;
        }
        if opts.show_help != 0 {
            // SAFETY: argv[0] is main()'s.
            let prog = unsafe {
                args.argv
                    .as_ref()
                    .and_then(|p| p.as_ref())
                    .map(|p| CStr::from_ptr(p))
            };
            if let Some(p) = prog.filter(|p| !p.to_bytes().is_empty()) {
                println!("usage: {} [options] <mountpoint>\n", p.to_string_lossy());
            }
            println!("FUSE options:");
            super::cmdline::fuse_cmdline_help();
            // SAFETY: the caller's args.
            unsafe { fuse_lib_help(&mut args) };
            break 'run 0;
        }
        if opts.mountpoint.is_null() {
            log_error("error: no mountpoint specified");
            break 'run 2;
        }
        // SAFETY: the parsed arguments and the program's operations.
        let fuse = unsafe { fuse_new_31(&mut args, op, op_size, user_data) };
        if fuse.is_null() {
            break 'run 3;
        }
        // SAFETY: our handle, used until destroyed below.
        unsafe {
            let code = 'mounted: {
                if fuse_mount(fuse, opts.mountpoint) != 0 {
                    break 'mounted 4;
                }
                let code = if session::fuse_daemonize(opts.foreground) != 0 {
                    5
                } else {
                    let se = fuse_get_session(fuse);
                    if session::fuse_set_signal_handlers(se) != 0 {
                        6
                    } else {
                        let r = if opts.singlethread != 0 {
                            fuse_loop(fuse)
                        } else {
                            // Debian's 3.14 passes -o max_threads on.
                            serve(fuse, false, Some(opts.max_threads as usize))
                        };
                        session::fuse_remove_signal_handlers(se);
                        if r != 0 {
                            8
                        } else {
                            0
                        }
                    }
                };
                fuse_unmount(fuse);
                code
            };
            fuse_destroy(fuse);
            code
        }
    };
    // SAFETY: strdup'd by fuse_parse_cmdline; the vector if it copied it.
    unsafe {
        libc::free(opts.mountpoint as *mut c_void);
        super::opt::fuse_opt_free_args(&mut args);
    }
    result
}
versioned!(fuse_main_real, "FUSE_3.0");
