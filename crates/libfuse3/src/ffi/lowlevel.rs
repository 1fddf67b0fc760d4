//! The low-level API: a program's `fuse_lowlevel_ops` served as a fusebox
//! [`Filesystem`].
//!
//! Every request a callback exists for becomes a `fuse_req_t` that owns
//! the request's [`ReplyToken`]: the callback answers through
//! `fuse_reply_*` at once or later, from any thread (the token carries
//! the answer to the transport either way). `fuse_ino_t` is the kernel's
//! node id, unchanged. A callback the program left NULL gets libfuse's
//! default answer.
//!
//! Soundness: the callbacks are the program's C functions, called with
//! the argument types fuse_lowlevel.h declares for each slot; every
//! pointer handed to them lives until the call returns (names, buffers,
//! `fuse_file_info`), and a `fuse_req_t` lives until its answer.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use fusebox::fs::ops::{self as fsops, Ctx};
use fusebox::protocol::{Connection, DataOut, DirEntries, Notifier};
use fusebox::{
    AttrReply, Entry, Errno, FileHandle, Filesystem, FsResult, InterruptHandle, LockInfo, NodeId,
    Opened, ReplyToken, Statfs,
};

use super::versioned;
use crate::abi::{
    file_info_bits as fib, FuseBufvec, FuseConnInfo, FuseCtx, FuseFileInfo, FuseForgetData,
    FuseLowlevelOps,
};
use crate::caps;
use crate::convert;

/// The program's side of a session: its operations and private data.
pub(crate) struct Shared {
    pub ops: FuseLowlevelOps,
    pub userdata: *mut c_void,
    /// Flags the user set with `-o` that override the program's `want`.
    pub force_on: u64,
    pub force_off: u64,
    /// `fuse_session_loop` promises one request at a time.
    pub serial: Mutex<()>,
    pub serialize: AtomicBool,
    pub initialized: AtomicBool,
    pub destroyed: AtomicBool,
    pub notifier: OnceLock<Notifier>,
    /// The INIT answer's protocol minor, for notifications.
    pub proto_minor: OnceLock<u32>,
}

// SAFETY: `userdata` is the program's pointer, which libfuse too hands to
// callbacks on every serving thread; the rest is Sync.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl Shared {
    pub fn new(ops: FuseLowlevelOps, userdata: *mut c_void) -> Shared {
        Shared {
            ops,
            userdata,
            force_on: 0,
            force_off: 0,
            serial: Mutex::new(()),
            serialize: AtomicBool::new(false),
            initialized: AtomicBool::new(false),
            destroyed: AtomicBool::new(false),
            notifier: OnceLock::new(),
            proto_minor: OnceLock::new(),
        }
    }

    /// Run a callback, one at a time if the loop promised that.
    fn call<T>(&self, f: impl FnOnce() -> T) -> T {
        if self.serialize.load(Ordering::Relaxed) {
            let _one = self.serial.lock().unwrap_or_else(PoisonError::into_inner);
            f()
        } else {
            f()
        }
    }

    /// The program's destroy callback, once, if init ran.
    pub fn destroy_once(&self) {
        if self.initialized.load(Ordering::Acquire) && !self.destroyed.swap(true, Ordering::AcqRel)
        {
            if let Some(f) = self.ops.destroy {
                // SAFETY: destroy(void *userdata).
                let f: unsafe extern "C" fn(*mut c_void) = unsafe { std::mem::transmute(f) };
                // SAFETY: the program's callback with its own pointer.
                self.call(|| unsafe { f(self.userdata) });
            }
        }
    }
}

/// What a `fuse_req_t` points to.
pub struct Request {
    shared: Arc<Shared>,
    ctx: FuseCtx,
    /// None once answered, and for FORGET (which has no answer).
    token: Mutex<Option<ReplyToken>>,
    interrupt: Option<InterruptHandle>,
}

pub type Req = *mut Request;

impl Request {
    fn into_raw(self) -> Req {
        Arc::into_raw(Arc::new(self)) as Req
    }
}

/// Take back a request handed to the program and its token: the answer is
/// being given. None (logged) when it was answered already or has none.
///
/// # Safety
/// `req` came from [`Request::into_raw`] and is answered once.
unsafe fn answer(req: Req, what: &str) -> Option<ReplyToken> {
    if req.is_null() {
        super::log_error(&format!("fuse: {what}: NULL request"));
        return None;
    }
    // SAFETY: the caller's contract.
    let token = unsafe { take_back(req) };
    if token.is_none() {
        super::log_error(&format!(
            "fuse: {what}: the request was already answered (or takes no answer)"
        ));
    }
    token
}

/// End the life of a request handed to the program (the one strong count
/// `into_raw` left) and take its token, if it still has one.
///
/// # Safety
/// `req` is non-NULL, came from [`Request::into_raw`], and is ended once.
unsafe fn take_back(req: Req) -> Option<ReplyToken> {
    // SAFETY: the caller's contract.
    let req = unsafe { Arc::from_raw(req as *const Request) };
    let token = req
        .token
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take();
    token
}

/// Bind the program's callback in slot `$slot` to its C type (a macro:
/// each slot has its own).
macro_rules! callback {
    ($shared:expr, $slot:ident, fn($($arg:ty),* $(,)?)) => {
        $shared.ops.$slot.map(|f| {
            // SAFETY: fuse_lowlevel.h declares this slot with this type;
            // the program stored a function of it.
            unsafe { std::mem::transmute::<unsafe extern "C" fn(), unsafe extern "C" fn($($arg),*)>(f) }
        })
    };
}

fn cname(name: &OsStr) -> CString {
    // The kernel never sends a name with a NUL inside.
    CString::new(name.as_bytes()).unwrap_or_default()
}

fn file_info(fh: FileHandle, flags: i32) -> FuseFileInfo {
    FuseFileInfo {
        flags,
        fh: fh.0,
        ..Default::default()
    }
}

pub(crate) fn opened_from(fi: &FuseFileInfo) -> Opened {
    use fusebox::abi::flags::fopen as fo;
    let mut flags = 0;
    for (bit, f) in [
        (fib::DIRECT_IO, fo::DIRECT_IO),
        (fib::KEEP_CACHE, fo::KEEP_CACHE),
        (fib::NONSEEKABLE, fo::NONSEEKABLE),
        (fib::CACHE_READDIR, fo::CACHE_DIR),
        (fib::NOFLUSH, fo::NOFLUSH),
    ] {
        if fi.has(bit) {
            flags |= f;
        }
    }
    Opened {
        fh: FileHandle(fi.fh),
        flags,
        backing_id: 0,
    }
}

fn entry_from(e: &crate::abi::FuseEntryParam) -> Entry {
    Entry {
        node: NodeId(e.ino),
        generation: e.generation,
        attr: convert::attr_from_stat(&e.attr),
        entry_ttl: convert::ttl(e.entry_timeout),
        attr_ttl: convert::ttl(e.attr_timeout),
    }
}

/// INIT as libfuse 3.14 settles it with a program: the program's init
/// callback sees what the kernel offers (`capable`) and libfuse's default
/// `want`, and changes `want` and the limits; a capability it wants that
/// the kernel lacks fails INIT (EPROTO), as in libfuse. `-o` options the
/// user gave (`forced`: on, off) win over the program.
pub(crate) fn negotiate(
    conn: &mut Connection,
    default_want: impl FnOnce(u32) -> u32,
    forced: (u64, u64),
    init: impl FnOnce(&mut FuseConnInfo),
) -> FsResult<()> {
    let capable = caps::capable(conn.kernel_flags, conn.proto_minor);
    let mut ci = FuseConnInfo {
        proto_major: 7,
        proto_minor: conn.proto_minor,
        max_write: conn.max_write,
        max_read: conn.max_read,
        max_readahead: conn.max_readahead,
        capable,
        want: default_want(capable) & capable,
        max_background: conn.max_background as u32,
        congestion_threshold: conn.congestion_threshold as u32,
        time_gran: conn.time_gran.max(1),
        reserved: [0; 22],
    };
    init(&mut ci);
    if ci.want & !capable != 0 {
        super::log_error(&format!(
            "fuse: error: filesystem requested capabilities 0x{:x} that are not supported by kernel, aborting.",
            ci.want & !capable
        ));
        return Err(Errno::EPROTO);
    }
    let covered = caps::kernel_flags_covered();
    let mut want = (conn.want & !covered) | caps::kernel_flags(ci.want);
    want |= forced.0 & conn.kernel_flags;
    want &= !forced.1;
    conn.want = want;
    if ci.max_write > 0 {
        conn.max_write = conn.max_write.min(ci.max_write);
    }
    conn.max_readahead = conn.max_readahead.min(ci.max_readahead);
    conn.max_background = ci.max_background.min(u16::MAX as u32) as u16;
    conn.congestion_threshold = ci.congestion_threshold.min(u16::MAX as u32) as u16;
    conn.time_gran = ci.time_gran;
    Ok(())
}

/// A program's `fuse_lowlevel_ops` as a fusebox filesystem.
pub(crate) struct Bridge {
    pub shared: Arc<Shared>,
}

impl Bridge {
    /// A request for the program, owning `ctx`'s reply.
    fn request(&self, ctx: &Ctx, umask: u32) -> Result<Req, Errno> {
        Ok(self.request_with(ctx, ctx.reply_later()?, umask))
    }

    /// A request for the program owning `token`, `ctx`'s reply.
    fn request_with(&self, ctx: &Ctx, token: ReplyToken, umask: u32) -> Req {
        let interrupt = Some(token.interrupt_handle());
        Request {
            shared: self.shared.clone(),
            ctx: FuseCtx {
                uid: ctx.uid,
                gid: ctx.gid,
                pid: ctx.pid as i32,
                umask,
            },
            token: Mutex::new(Some(token)),
            interrupt,
        }
        .into_raw()
    }

    /// Default want, as libfuse 3.14 sets it before the init callback.
    fn default_want(&self, capable: u32) -> u32 {
        let ops = &self.shared.ops;
        caps::default_want(caps::Callbacks {
            write_buf: ops.write_buf.is_some(),
            posix_locks: ops.getlk.is_some() && ops.setlk.is_some(),
            flock: ops.flock.is_some(),
            readdirplus: ops.readdirplus.is_some(),
            readdir: ops.readdir.is_some(),
        }) & capable
    }
}

impl Filesystem for Bridge {
    fn init(&self, conn: &mut Connection, notifier: &Notifier) -> FsResult<()> {
        let _ = self.shared.notifier.set(notifier.clone());
        let _ = self.shared.proto_minor.set(conn.proto_minor);
        let init = callback!(self.shared, init, fn(*mut c_void, *mut FuseConnInfo));
        negotiate(
            conn,
            |capable| self.default_want(capable),
            (self.shared.force_on, self.shared.force_off),
            |ci| {
                if let Some(f) = init {
                    // SAFETY: init(void *userdata, struct fuse_conn_info *conn).
                    self.shared.call(|| unsafe { f(self.shared.userdata, ci) });
                }
            },
        )?;
        self.shared.initialized.store(true, Ordering::Release);
        Ok(())
    }

    fn destroy(&self) {
        self.shared.destroy_once();
    }

    fn lookup(&self, ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<Entry> {
        let f = callback!(self.shared, lookup, fn(Req, u64, *const c_char)).ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let name = cname(name);
        // SAFETY: lookup(req, parent, name).
        self.shared
            .call(|| unsafe { f(req, parent.0, name.as_ptr()) });
        Err(Errno::LATER)
    }

    fn forget(&self, node: NodeId, nlookup: u64) {
        let Some(f) = callback!(self.shared, forget, fn(Req, u64, u64)) else {
            return;
        };
        let req = Request {
            shared: self.shared.clone(),
            ctx: FuseCtx::default(),
            token: Mutex::new(None),
            interrupt: None,
        }
        .into_raw();
        // SAFETY: forget(req, ino, nlookup); answered with fuse_reply_none.
        self.shared.call(|| unsafe { f(req, node.0, nlookup) });
    }

    fn batch_forget(&self, nodes: &mut dyn Iterator<Item = (NodeId, u64)>) {
        let Some(f) = callback!(
            self.shared,
            forget_multi,
            fn(Req, usize, *mut FuseForgetData)
        ) else {
            for (node, n) in nodes {
                self.forget(node, n);
            }
            return;
        };
        let mut list: Vec<FuseForgetData> = nodes
            .map(|(node, nlookup)| FuseForgetData {
                ino: node.0,
                nlookup,
            })
            .collect();
        let req = Request {
            shared: self.shared.clone(),
            ctx: FuseCtx::default(),
            token: Mutex::new(None),
            interrupt: None,
        }
        .into_raw();
        // SAFETY: forget_multi(req, count, forgets); the list outlives the call.
        self.shared
            .call(|| unsafe { f(req, list.len(), list.as_mut_ptr()) });
    }

    fn getattr(&self, ctx: &Ctx, node: NodeId, fh: Option<FileHandle>) -> FsResult<AttrReply> {
        let f = callback!(self.shared, getattr, fn(Req, u64, *mut FuseFileInfo))
            .ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let mut fi = fh.map(|fh| file_info(fh, 0));
        let fip = fi.as_mut().map_or(std::ptr::null_mut(), |f| f as *mut _);
        // SAFETY: getattr(req, ino, fi or NULL).
        self.shared.call(|| unsafe { f(req, node.0, fip) });
        Err(Errno::LATER)
    }

    fn setattr(&self, ctx: &Ctx, node: NodeId, attr: &fsops::SetAttr) -> FsResult<AttrReply> {
        let f = callback!(
            self.shared,
            setattr,
            fn(Req, u64, *mut libc::stat, c_int, *mut FuseFileInfo)
        )
        .ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let mut st = super::zeroed_stat();
        let mut to_set = 0;
        if let Some(m) = attr.mode {
            st.st_mode = m;
            to_set |= SET_ATTR_MODE;
        }
        if let Some(u) = attr.uid {
            st.st_uid = u;
            to_set |= SET_ATTR_UID;
        }
        if let Some(g) = attr.gid {
            st.st_gid = g;
            to_set |= SET_ATTR_GID;
        }
        if let Some(s) = attr.size {
            st.st_size = s as i64;
            to_set |= SET_ATTR_SIZE;
        }
        match attr.atime {
            Some(fusebox::TimeOrNow::Specific(t)) => {
                st.st_atime = t.sec;
                st.st_atime_nsec = t.nsec as i64;
                to_set |= SET_ATTR_ATIME;
            }
            Some(fusebox::TimeOrNow::Now) => to_set |= SET_ATTR_ATIME | SET_ATTR_ATIME_NOW,
            None => {}
        }
        match attr.mtime {
            Some(fusebox::TimeOrNow::Specific(t)) => {
                st.st_mtime = t.sec;
                st.st_mtime_nsec = t.nsec as i64;
                to_set |= SET_ATTR_MTIME;
            }
            Some(fusebox::TimeOrNow::Now) => to_set |= SET_ATTR_MTIME | SET_ATTR_MTIME_NOW,
            None => {}
        }
        if let Some(t) = attr.ctime {
            st.st_ctime = t.sec;
            st.st_ctime_nsec = t.nsec as i64;
            to_set |= SET_ATTR_CTIME;
        }
        if attr.kill_suidgid {
            to_set |= SET_ATTR_KILL_SUID | SET_ATTR_KILL_SGID;
        }
        let mut fi = attr.fh.map(|fh| file_info(fh, 0));
        if let (Some(fi), Some(owner)) = (fi.as_mut(), attr.lock_owner) {
            fi.lock_owner = owner;
        }
        let fip = fi.as_mut().map_or(std::ptr::null_mut(), |f| f as *mut _);
        // SAFETY: setattr(req, ino, attr, to_set, fi or NULL).
        self.shared
            .call(|| unsafe { f(req, node.0, &mut st, to_set, fip) });
        Err(Errno::LATER)
    }

    fn readlink(&self, ctx: &Ctx, node: NodeId, _out: &mut DataOut) -> FsResult<()> {
        let f = callback!(self.shared, readlink, fn(Req, u64)).ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        // SAFETY: readlink(req, ino).
        self.shared.call(|| unsafe { f(req, node.0) });
        Err(Errno::LATER)
    }

    fn symlink(&self, ctx: &Ctx, parent: NodeId, name: &OsStr, target: &OsStr) -> FsResult<Entry> {
        let f = callback!(
            self.shared,
            symlink,
            fn(Req, *const c_char, u64, *const c_char)
        )
        .ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let (name, target) = (cname(name), cname(target));
        // SAFETY: symlink(req, link, parent, name).
        self.shared
            .call(|| unsafe { f(req, target.as_ptr(), parent.0, name.as_ptr()) });
        Err(Errno::LATER)
    }

    fn mknod(&self, ctx: &Ctx, parent: NodeId, name: &OsStr, a: &fsops::Mknod) -> FsResult<Entry> {
        let f = callback!(
            self.shared,
            mknod,
            fn(Req, u64, *const c_char, libc::mode_t, libc::dev_t)
        )
        .ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, a.umask)?;
        let name = cname(name);
        // SAFETY: mknod(req, parent, name, mode, rdev).
        self.shared
            .call(|| unsafe { f(req, parent.0, name.as_ptr(), a.mode, a.rdev as libc::dev_t) });
        Err(Errno::LATER)
    }

    fn mkdir(&self, ctx: &Ctx, parent: NodeId, name: &OsStr, a: &fsops::Mkdir) -> FsResult<Entry> {
        let f = callback!(
            self.shared,
            mkdir,
            fn(Req, u64, *const c_char, libc::mode_t)
        )
        .ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, a.umask)?;
        let name = cname(name);
        // SAFETY: mkdir(req, parent, name, mode).
        self.shared
            .call(|| unsafe { f(req, parent.0, name.as_ptr(), a.mode) });
        Err(Errno::LATER)
    }

    fn unlink(&self, ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<()> {
        let f = callback!(self.shared, unlink, fn(Req, u64, *const c_char)).ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let name = cname(name);
        // SAFETY: unlink(req, parent, name).
        self.shared
            .call(|| unsafe { f(req, parent.0, name.as_ptr()) });
        Err(Errno::LATER)
    }

    fn rmdir(&self, ctx: &Ctx, parent: NodeId, name: &OsStr) -> FsResult<()> {
        let f = callback!(self.shared, rmdir, fn(Req, u64, *const c_char)).ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let name = cname(name);
        // SAFETY: rmdir(req, parent, name).
        self.shared
            .call(|| unsafe { f(req, parent.0, name.as_ptr()) });
        Err(Errno::LATER)
    }

    fn rename(&self, ctx: &Ctx, a: &fsops::Rename) -> FsResult<()> {
        let f = callback!(
            self.shared,
            rename,
            fn(Req, u64, *const c_char, u64, *const c_char, c_uint)
        )
        .ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let (name, new_name) = (cname(a.name), cname(a.new_name));
        // SAFETY: rename(req, parent, name, newparent, newname, flags).
        self.shared.call(|| unsafe {
            f(
                req,
                a.parent.0,
                name.as_ptr(),
                a.new_parent.0,
                new_name.as_ptr(),
                a.flags,
            )
        });
        Err(Errno::LATER)
    }

    fn link(
        &self,
        ctx: &Ctx,
        node: NodeId,
        new_parent: NodeId,
        new_name: &OsStr,
    ) -> FsResult<Entry> {
        let f =
            callback!(self.shared, link, fn(Req, u64, u64, *const c_char)).ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let name = cname(new_name);
        // SAFETY: link(req, ino, newparent, newname).
        self.shared
            .call(|| unsafe { f(req, node.0, new_parent.0, name.as_ptr()) });
        Err(Errno::LATER)
    }

    fn open(&self, ctx: &Ctx, node: NodeId, a: &fsops::Open) -> FsResult<Opened> {
        let Some(f) = callback!(self.shared, open, fn(Req, u64, *mut FuseFileInfo)) else {
            // libfuse: no open callback, every open succeeds with handle 0.
            return Ok(Opened::handle(0));
        };
        let req = self.request(ctx, 0)?;
        let mut fi = file_info(FileHandle(0), a.flags);
        // SAFETY: open(req, ino, fi).
        self.shared.call(|| unsafe { f(req, node.0, &mut fi) });
        Err(Errno::LATER)
    }

    fn read(&self, ctx: &Ctx, node: NodeId, a: &fsops::Read, _out: &mut DataOut) -> FsResult<()> {
        let f = callback!(
            self.shared,
            read,
            fn(Req, u64, usize, libc::off_t, *mut FuseFileInfo)
        )
        .ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let mut fi = file_info(a.fh, a.flags);
        if let Some(o) = a.lock_owner {
            fi.lock_owner = o;
        }
        // SAFETY: read(req, ino, size, off, fi).
        self.shared
            .call(|| unsafe { f(req, node.0, a.size as usize, a.offset as i64, &mut fi) });
        Err(Errno::LATER)
    }

    fn write(&self, ctx: &Ctx, node: NodeId, a: &fsops::Write) -> FsResult<u32> {
        let mut fi = file_info(a.fh, a.flags);
        fi.set(fib::WRITEPAGE, a.from_cache);
        if let Some(o) = a.lock_owner {
            fi.lock_owner = o;
        }
        if let Some(f) = callback!(
            self.shared,
            write_buf,
            fn(Req, u64, *mut FuseBufvec, libc::off_t, *mut FuseFileInfo)
        ) {
            let req = self.request(ctx, 0)?;
            let mut v = FuseBufvec {
                count: 1,
                idx: 0,
                off: 0,
                buf: [crate::abi::FuseBuf {
                    size: a.data.len(),
                    flags: 0,
                    mem: a.data.as_ptr() as *mut c_void,
                    fd: -1,
                    pos: 0,
                }],
            };
            // SAFETY: write_buf(req, ino, bufv, off, fi); the data lives
            // for the call (libfuse's does too, no longer).
            self.shared
                .call(|| unsafe { f(req, node.0, &mut v, a.offset as i64, &mut fi) });
            return Err(Errno::LATER);
        }
        let f = callback!(
            self.shared,
            write,
            fn(Req, u64, *const c_char, usize, libc::off_t, *mut FuseFileInfo)
        )
        .ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        // SAFETY: write(req, ino, buf, size, off, fi).
        self.shared.call(|| unsafe {
            f(
                req,
                node.0,
                a.data.as_ptr() as *const c_char,
                a.data.len(),
                a.offset as i64,
                &mut fi,
            )
        });
        Err(Errno::LATER)
    }

    fn flush(&self, ctx: &Ctx, node: NodeId, fh: FileHandle, lock_owner: u64) -> FsResult<()> {
        let f =
            callback!(self.shared, flush, fn(Req, u64, *mut FuseFileInfo)).ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let mut fi = file_info(fh, 0);
        fi.lock_owner = lock_owner;
        fi.set(fib::FLUSH, true);
        // SAFETY: flush(req, ino, fi).
        self.shared.call(|| unsafe { f(req, node.0, &mut fi) });
        Err(Errno::LATER)
    }

    fn release(&self, ctx: &Ctx, node: NodeId, a: &fsops::Release) -> FsResult<()> {
        let Some(f) = callback!(self.shared, release, fn(Req, u64, *mut FuseFileInfo)) else {
            return Ok(());
        };
        let req = self.request(ctx, 0)?;
        let mut fi = release_info(a);
        // SAFETY: release(req, ino, fi).
        self.shared.call(|| unsafe { f(req, node.0, &mut fi) });
        Err(Errno::LATER)
    }

    fn fsync(&self, ctx: &Ctx, node: NodeId, fh: FileHandle, datasync: bool) -> FsResult<()> {
        let f = callback!(self.shared, fsync, fn(Req, u64, c_int, *mut FuseFileInfo))
            .ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let mut fi = file_info(fh, 0);
        // SAFETY: fsync(req, ino, datasync, fi).
        self.shared
            .call(|| unsafe { f(req, node.0, datasync as c_int, &mut fi) });
        Err(Errno::LATER)
    }

    fn opendir(&self, ctx: &Ctx, node: NodeId, a: &fsops::Open) -> FsResult<Opened> {
        let Some(f) = callback!(self.shared, opendir, fn(Req, u64, *mut FuseFileInfo)) else {
            return Ok(Opened::handle(0));
        };
        let req = self.request(ctx, 0)?;
        let mut fi = file_info(FileHandle(0), a.flags);
        // SAFETY: opendir(req, ino, fi).
        self.shared.call(|| unsafe { f(req, node.0, &mut fi) });
        Err(Errno::LATER)
    }

    fn readdir(
        &self,
        ctx: &Ctx,
        node: NodeId,
        a: &fsops::Read,
        _out: &mut DirEntries,
    ) -> FsResult<()> {
        let f = callback!(
            self.shared,
            readdir,
            fn(Req, u64, usize, libc::off_t, *mut FuseFileInfo)
        )
        .ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let mut fi = file_info(a.fh, a.flags);
        // SAFETY: readdir(req, ino, size, off, fi).
        self.shared
            .call(|| unsafe { f(req, node.0, a.size as usize, a.offset as i64, &mut fi) });
        Err(Errno::LATER)
    }

    fn readdirplus(
        &self,
        ctx: &Ctx,
        node: NodeId,
        a: &fsops::Read,
        out: &mut DirEntries,
    ) -> FsResult<()> {
        let Some(f) = callback!(
            self.shared,
            readdirplus,
            fn(Req, u64, usize, libc::off_t, *mut FuseFileInfo)
        ) else {
            return self.readdir(ctx, node, a, out);
        };
        let req = self.request(ctx, 0)?;
        let mut fi = file_info(a.fh, a.flags);
        // SAFETY: readdirplus(req, ino, size, off, fi).
        self.shared
            .call(|| unsafe { f(req, node.0, a.size as usize, a.offset as i64, &mut fi) });
        Err(Errno::LATER)
    }

    fn releasedir(&self, ctx: &Ctx, node: NodeId, a: &fsops::Release) -> FsResult<()> {
        let Some(f) = callback!(self.shared, releasedir, fn(Req, u64, *mut FuseFileInfo)) else {
            return Ok(());
        };
        let req = self.request(ctx, 0)?;
        let mut fi = release_info(a);
        // SAFETY: releasedir(req, ino, fi).
        self.shared.call(|| unsafe { f(req, node.0, &mut fi) });
        Err(Errno::LATER)
    }

    fn fsyncdir(&self, ctx: &Ctx, node: NodeId, fh: FileHandle, datasync: bool) -> FsResult<()> {
        let f = callback!(
            self.shared,
            fsyncdir,
            fn(Req, u64, c_int, *mut FuseFileInfo)
        )
        .ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let mut fi = file_info(fh, 0);
        // SAFETY: fsyncdir(req, ino, datasync, fi).
        self.shared
            .call(|| unsafe { f(req, node.0, datasync as c_int, &mut fi) });
        Err(Errno::LATER)
    }

    fn statfs(&self, ctx: &Ctx, node: NodeId) -> FsResult<Statfs> {
        let Some(f) = callback!(self.shared, statfs, fn(Req, u64)) else {
            return Ok(Statfs {
                namelen: 255,
                bsize: 512,
                ..Default::default()
            });
        };
        let req = self.request(ctx, 0)?;
        // SAFETY: statfs(req, ino).
        self.shared.call(|| unsafe { f(req, node.0) });
        Err(Errno::LATER)
    }

    fn setxattr(&self, ctx: &Ctx, node: NodeId, a: &fsops::Setxattr) -> FsResult<()> {
        let f = callback!(
            self.shared,
            setxattr,
            fn(Req, u64, *const c_char, *const c_char, usize, c_int)
        )
        .ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let name = cname(a.name);
        // SAFETY: setxattr(req, ino, name, value, size, flags).
        self.shared.call(|| unsafe {
            f(
                req,
                node.0,
                name.as_ptr(),
                a.value.as_ptr() as *const c_char,
                a.value.len(),
                a.flags,
            )
        });
        Err(Errno::LATER)
    }

    fn getxattr(&self, ctx: &Ctx, node: NodeId, name: &OsStr, _out: &mut DataOut) -> FsResult<()> {
        let f = callback!(self.shared, getxattr, fn(Req, u64, *const c_char, usize))
            .ok_or(Errno::ENOSYS)?;
        let token = ctx.reply_later()?;
        let size = token.xattr_size_asked().unwrap_or(0) as usize;
        let req = self.request_with(ctx, token, 0);
        let name = cname(name);
        // SAFETY: getxattr(req, ino, name, size).
        self.shared
            .call(|| unsafe { f(req, node.0, name.as_ptr(), size) });
        Err(Errno::LATER)
    }

    fn listxattr(&self, ctx: &Ctx, node: NodeId, _out: &mut DataOut) -> FsResult<()> {
        let f = callback!(self.shared, listxattr, fn(Req, u64, usize)).ok_or(Errno::ENOSYS)?;
        let token = ctx.reply_later()?;
        let size = token.xattr_size_asked().unwrap_or(0) as usize;
        let req = self.request_with(ctx, token, 0);
        // SAFETY: listxattr(req, ino, size).
        self.shared.call(|| unsafe { f(req, node.0, size) });
        Err(Errno::LATER)
    }

    fn removexattr(&self, ctx: &Ctx, node: NodeId, name: &OsStr) -> FsResult<()> {
        let f = callback!(self.shared, removexattr, fn(Req, u64, *const c_char))
            .ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let name = cname(name);
        // SAFETY: removexattr(req, ino, name).
        self.shared
            .call(|| unsafe { f(req, node.0, name.as_ptr()) });
        Err(Errno::LATER)
    }

    fn access(&self, ctx: &Ctx, node: NodeId, mask: i32) -> FsResult<()> {
        let f = callback!(self.shared, access, fn(Req, u64, c_int)).ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        // SAFETY: access(req, ino, mask).
        self.shared.call(|| unsafe { f(req, node.0, mask) });
        Err(Errno::LATER)
    }

    fn create(
        &self,
        ctx: &Ctx,
        parent: NodeId,
        name: &OsStr,
        a: &fsops::Create,
    ) -> FsResult<(Entry, Opened)> {
        let f = callback!(
            self.shared,
            create,
            fn(Req, u64, *const c_char, libc::mode_t, *mut FuseFileInfo)
        )
        .ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, a.umask)?;
        let name = cname(name);
        let mut fi = file_info(FileHandle(0), a.flags);
        // SAFETY: create(req, parent, name, mode, fi).
        self.shared
            .call(|| unsafe { f(req, parent.0, name.as_ptr(), a.mode, &mut fi) });
        Err(Errno::LATER)
    }

    fn getlk(&self, ctx: &Ctx, node: NodeId, lock: &fsops::Lock) -> FsResult<LockInfo> {
        let f = callback!(
            self.shared,
            getlk,
            fn(Req, u64, *mut FuseFileInfo, *mut libc::flock)
        )
        .ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let mut fi = file_info(lock.fh, 0);
        fi.lock_owner = lock.owner;
        let mut fl = flock_from(lock);
        // SAFETY: getlk(req, ino, fi, lock).
        self.shared
            .call(|| unsafe { f(req, node.0, &mut fi, &mut fl) });
        Err(Errno::LATER)
    }

    fn setlk(&self, ctx: &Ctx, node: NodeId, lock: &fsops::Lock, sleep: bool) -> FsResult<()> {
        let mut fi = file_info(lock.fh, 0);
        fi.lock_owner = lock.owner;
        if lock.flock {
            let f = callback!(self.shared, flock, fn(Req, u64, *mut FuseFileInfo, c_int))
                .ok_or(Errno::ENOSYS)?;
            let op = crate::convert::flock_operation(lock.typ, sleep);
            let req = self.request(ctx, 0)?;
            // SAFETY: flock(req, ino, fi, op).
            self.shared.call(|| unsafe { f(req, node.0, &mut fi, op) });
            return Err(Errno::LATER);
        }
        let f = callback!(
            self.shared,
            setlk,
            fn(Req, u64, *mut FuseFileInfo, *mut libc::flock, c_int)
        )
        .ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let mut fl = flock_from(lock);
        // SAFETY: setlk(req, ino, fi, lock, sleep).
        self.shared
            .call(|| unsafe { f(req, node.0, &mut fi, &mut fl, sleep as c_int) });
        Err(Errno::LATER)
    }

    fn bmap(&self, ctx: &Ctx, node: NodeId, block: u64, blocksize: u32) -> FsResult<u64> {
        let f = callback!(self.shared, bmap, fn(Req, u64, usize, u64)).ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        // SAFETY: bmap(req, ino, blocksize, idx).
        self.shared
            .call(|| unsafe { f(req, node.0, blocksize as usize, block) });
        Err(Errno::LATER)
    }

    fn ioctl(
        &self,
        ctx: &Ctx,
        node: NodeId,
        a: &fsops::Ioctl,
        _out: &mut DataOut,
    ) -> FsResult<i32> {
        let f = callback!(
            self.shared,
            ioctl,
            fn(
                Req,
                u64,
                c_uint,
                *mut c_void,
                *mut FuseFileInfo,
                c_uint,
                *const c_void,
                usize,
                usize,
            )
        )
        .ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let mut fi = file_info(a.fh, 0);
        let input = if a.input.is_empty() {
            std::ptr::null()
        } else {
            a.input.as_ptr() as *const c_void
        };
        // SAFETY: ioctl(req, ino, cmd, arg, fi, flags, in_buf, in_bufsz,
        // out_bufsz).
        self.shared.call(|| unsafe {
            f(
                req,
                node.0,
                a.cmd,
                a.arg as *mut c_void,
                &mut fi,
                a.flags,
                input,
                a.input.len(),
                a.out_size as usize,
            )
        });
        Err(Errno::LATER)
    }

    fn poll(&self, ctx: &Ctx, node: NodeId, a: &fsops::Poll) -> FsResult<u32> {
        let f = callback!(
            self.shared,
            poll,
            fn(Req, u64, *mut FuseFileInfo, *mut PollHandle)
        )
        .ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let mut fi = file_info(a.fh, 0);
        fi.poll_events = a.events;
        let ph = if a.schedule_notify {
            Box::into_raw(Box::new(PollHandle {
                kh: a.kh,
                notifier: self.shared.notifier.get().cloned(),
            }))
        } else {
            std::ptr::null_mut()
        };
        // SAFETY: poll(req, ino, fi, ph); ph is the program's to destroy.
        self.shared.call(|| unsafe { f(req, node.0, &mut fi, ph) });
        Err(Errno::LATER)
    }

    fn fallocate(&self, ctx: &Ctx, node: NodeId, a: &fsops::Fallocate) -> FsResult<()> {
        let f = callback!(
            self.shared,
            fallocate,
            fn(Req, u64, c_int, libc::off_t, libc::off_t, *mut FuseFileInfo)
        )
        .ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let mut fi = file_info(a.fh, 0);
        // SAFETY: fallocate(req, ino, mode, offset, length, fi).
        self.shared.call(|| unsafe {
            f(
                req,
                node.0,
                a.mode,
                a.offset as i64,
                a.length as i64,
                &mut fi,
            )
        });
        Err(Errno::LATER)
    }

    fn lseek(&self, ctx: &Ctx, node: NodeId, a: &fsops::Lseek) -> FsResult<u64> {
        let f = callback!(
            self.shared,
            lseek,
            fn(Req, u64, libc::off_t, c_int, *mut FuseFileInfo)
        )
        .ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let mut fi = file_info(a.fh, 0);
        // SAFETY: lseek(req, ino, off, whence, fi).
        self.shared
            .call(|| unsafe { f(req, node.0, a.offset as i64, a.whence, &mut fi) });
        Err(Errno::LATER)
    }

    fn copy_file_range(&self, ctx: &Ctx, a: &fsops::CopyFileRange) -> FsResult<u64> {
        let f = callback!(
            self.shared,
            copy_file_range,
            fn(
                Req,
                u64,
                libc::off_t,
                *mut FuseFileInfo,
                u64,
                libc::off_t,
                *mut FuseFileInfo,
                usize,
                c_int,
            )
        )
        .ok_or(Errno::ENOSYS)?;
        let req = self.request(ctx, 0)?;
        let mut fi_in = file_info(a.fh_in, 0);
        let mut fi_out = file_info(a.fh_out, 0);
        // SAFETY: copy_file_range(req, ino_in, off_in, fi_in, ino_out,
        // off_out, fi_out, len, flags).
        self.shared.call(|| unsafe {
            f(
                req,
                a.node_in.0,
                a.off_in as i64,
                &mut fi_in,
                a.node_out.0,
                a.off_out as i64,
                &mut fi_out,
                a.len as usize,
                a.flags as c_int,
            )
        });
        Err(Errno::LATER)
    }
}

fn release_info(a: &fsops::Release) -> FuseFileInfo {
    let mut fi = file_info(a.fh, a.flags);
    fi.lock_owner = a.lock_owner;
    fi.set(fib::FLUSH, a.flush);
    fi.set(fib::FLOCK_RELEASE, a.flock_unlock);
    fi
}

pub(crate) fn flock_from(lock: &fsops::Lock) -> libc::flock {
    let mut fl = super::zeroed_flock();
    fl.l_type = lock.typ as i16;
    fl.l_whence = libc::SEEK_SET as i16;
    fl.l_start = lock.start as i64;
    fl.l_len = if lock.end >= i64::MAX as u64 {
        0
    } else {
        (lock.end - lock.start + 1) as i64
    };
    fl.l_pid = lock.pid as i32;
    fl
}

// setattr's `to_set` bits (fuse_lowlevel.h).
const SET_ATTR_MODE: c_int = 1 << 0;
const SET_ATTR_UID: c_int = 1 << 1;
const SET_ATTR_GID: c_int = 1 << 2;
const SET_ATTR_SIZE: c_int = 1 << 3;
const SET_ATTR_ATIME: c_int = 1 << 4;
const SET_ATTR_MTIME: c_int = 1 << 5;
const SET_ATTR_ATIME_NOW: c_int = 1 << 7;
const SET_ATTR_MTIME_NOW: c_int = 1 << 8;
const SET_ATTR_CTIME: c_int = 1 << 10;
const SET_ATTR_KILL_SUID: c_int = 1 << 11;
const SET_ATTR_KILL_SGID: c_int = 1 << 12;

/// What a `struct fuse_pollhandle *` points to: the kernel's handle and
/// where to send its wake-up.
pub struct PollHandle {
    pub(crate) kh: u64,
    pub(crate) notifier: Option<Notifier>,
}

// ------------------------------------------------------------ fuse_req_*

/// `void *fuse_req_userdata(fuse_req_t req)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_req_userdata(req: Req) -> *mut c_void {
    // SAFETY: a live request (the program's contract).
    unsafe { req.as_ref() }.map_or(std::ptr::null_mut(), |r| r.shared.userdata)
}
versioned!(fuse_req_userdata, "FUSE_3.0");

/// `const struct fuse_ctx *fuse_req_ctx(fuse_req_t req)`: valid while the
/// request is.
#[no_mangle]
pub unsafe extern "C" fn fuse_req_ctx(req: Req) -> *const FuseCtx {
    // SAFETY: a live request.
    unsafe { req.as_ref() }.map_or(std::ptr::null(), |r| &r.ctx as *const FuseCtx)
}
versioned!(fuse_req_ctx, "FUSE_3.0");

/// `int fuse_req_getgroups(fuse_req_t req, int size, gid_t list[])`: the
/// caller's supplementary groups (from /proc), how many there are.
#[no_mangle]
pub unsafe extern "C" fn fuse_req_getgroups(
    req: Req,
    size: c_int,
    list: *mut libc::gid_t,
) -> c_int {
    // SAFETY: a live request.
    let Some(r) = (unsafe { req.as_ref() }) else {
        return -libc::EINVAL;
    };
    let groups = match crate::groups::of_process(r.ctx.pid as u32) {
        Ok(g) => g,
        Err(e) => return -e.raw_os_error().unwrap_or(libc::EIO),
    };
    if !list.is_null() && size > 0 {
        for (i, g) in groups.iter().take(size as usize).enumerate() {
            // SAFETY: the caller's array holds `size` entries.
            unsafe { *list.add(i) = *g };
        }
    }
    groups.len() as c_int
}
versioned!(fuse_req_getgroups, "FUSE_3.0");

pub type InterruptFn = unsafe extern "C" fn(Req, *mut c_void);

/// `void fuse_req_interrupt_func(fuse_req_t req, fuse_interrupt_func_t
/// func, void *data)`: `func(req, data)` when the request is interrupted;
/// at once if it already was.
#[no_mangle]
pub unsafe extern "C" fn fuse_req_interrupt_func(
    req: Req,
    func: Option<InterruptFn>,
    data: *mut c_void,
) {
    // SAFETY: a live request; its Arc stays alive while we hold a count.
    let Some(r) = (unsafe { req.as_ref() }) else {
        return;
    };
    let (Some(func), Some(handle)) = (func, r.interrupt.clone()) else {
        return;
    };
    // SAFETY: `req` came from Arc::into_raw and is live: one more count
    // for the weak reference's source.
    let arc = unsafe {
        Arc::increment_strong_count(req as *const Request);
        Arc::from_raw(req as *const Request)
    };
    let weak = Arc::downgrade(&arc);
    drop(arc);
    struct Data(*mut c_void);
    // SAFETY: the program's pointer, handed back to its own callback.
    unsafe impl Send for Data {}
    let data = Data(data);
    handle.on_interrupt(move || {
        let data = data;
        // Answered (and freed) meanwhile: nobody to tell.
        let Some(live) = weak.upgrade() else { return };
        let answered = live
            .token
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_none();
        if !answered {
            // SAFETY: the program's interrupt callback with the request
            // (kept alive by `live`) and its data.
            unsafe { func(Arc::as_ptr(&live) as Req, data.0) };
        }
    });
}
versioned!(fuse_req_interrupt_func, "FUSE_3.0");

/// `int fuse_req_interrupted(fuse_req_t req)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_req_interrupted(req: Req) -> c_int {
    // SAFETY: a live request.
    unsafe { req.as_ref() }
        .and_then(|r| r.interrupt.as_ref())
        .is_some_and(|h| h.interrupted()) as c_int
}
versioned!(fuse_req_interrupted, "FUSE_3.0");

// ------------------------------------------------------------ fuse_reply_*

/// Answer `req` through `answer_with` (given its token); -EINVAL to the
/// program when it cannot be answered (NULL, answered already).
///
/// # Safety
/// `req` came from [`Request::into_raw`] and is answered once.
unsafe fn reply(req: Req, what: &str, answer_with: impl FnOnce(ReplyToken) -> c_int) -> c_int {
    // SAFETY: the caller's contract.
    match unsafe { answer(req, what) } {
        Some(t) => answer_with(t),
        None => -libc::EINVAL,
    }
}

/// An answer built from a struct the program passes by pointer: EIO to
/// the kernel and -EINVAL to the program when it passed NULL.
fn from_struct<T: ?Sized>(
    t: ReplyToken,
    s: Option<&T>,
    build: impl FnOnce(ReplyToken, &T),
) -> c_int {
    match s {
        Some(s) => {
            build(t, s);
            0
        }
        None => {
            t.error(Errno::EIO);
            -libc::EINVAL
        }
    }
}

/// `size` bytes at `buf`, nothing when NULL.
///
/// # Safety
/// `buf` is NULL or holds `size` readable bytes that outlive the borrow.
unsafe fn bytes<'a>(buf: *const c_void, size: usize) -> &'a [u8] {
    if buf.is_null() || size == 0 {
        &[]
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::slice::from_raw_parts(buf as *const u8, size) }
    }
}

/// `int fuse_reply_err(fuse_req_t req, int err)`: `err` is a positive
/// errno; 0 is success with no data; anything else is answered ERANGE,
/// as libfuse does.
#[no_mangle]
pub unsafe extern "C" fn fuse_reply_err(req: Req, err: c_int) -> c_int {
    // SAFETY: the request handed to the program, answered here.
    unsafe {
        reply(req, "fuse_reply_err", |t| {
            match err {
                0 => t.ok(),
                1..1000 => t.error(Errno(err)),
                _ => {
                    super::log_error(&format!("fuse: bad error value: {err}"));
                    t.error(Errno::ERANGE);
                }
            }
            0
        })
    }
}
versioned!(fuse_reply_err, "FUSE_3.0");

/// `void fuse_reply_none(fuse_req_t req)`: FORGET's answer (no reply).
#[no_mangle]
pub unsafe extern "C" fn fuse_reply_none(req: Req) {
    if req.is_null() {
        return;
    }
    // SAFETY: the request handed to the program, ending here.
    if let Some(t) = unsafe { take_back(req) } {
        // A request that needed an answer: the kernel would wait for it
        // forever. Answer EIO and say so.
        super::log_error(&format!(
            "fuse: fuse_reply_none on a request that needs an answer ({:?}); answering EIO",
            t.opcode()
        ));
        t.error(Errno::EIO);
    }
}
versioned!(fuse_reply_none, "FUSE_3.0");

/// `int fuse_reply_entry(fuse_req_t req, const struct fuse_entry_param *e)`:
/// an entry with ino 0 is "no such name", cached for entry_timeout.
#[no_mangle]
pub unsafe extern "C" fn fuse_reply_entry(req: Req, e: *const crate::abi::FuseEntryParam) -> c_int {
    // SAFETY: the request handed to the program, answered here; the
    // entry valid for the call.
    unsafe {
        reply(req, "fuse_reply_entry", |t| {
            from_struct(t, e.as_ref(), |t, e| {
                let entry = entry_from(e);
                if entry.node.0 == 0 {
                    t.entry(Entry::negative(entry.entry_ttl));
                } else {
                    t.entry(entry);
                }
            })
        })
    }
}
versioned!(fuse_reply_entry, "FUSE_3.0");

/// `int fuse_reply_create(fuse_req_t req, const struct fuse_entry_param
/// *e, const struct fuse_file_info *fi)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_reply_create(
    req: Req,
    e: *const crate::abi::FuseEntryParam,
    fi: *const FuseFileInfo,
) -> c_int {
    // SAFETY: the request handed to the program, answered here; both
    // structs valid for the call.
    unsafe {
        reply(req, "fuse_reply_create", |t| {
            let both = e.as_ref().zip(fi.as_ref());
            from_struct(t, both.as_ref(), |t, (e, fi)| {
                t.created(entry_from(e), opened_from(fi))
            })
        })
    }
}
versioned!(fuse_reply_create, "FUSE_3.0");

/// `int fuse_reply_attr(fuse_req_t req, const struct stat *attr, double
/// attr_timeout)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_reply_attr(req: Req, attr: *const libc::stat, timeout: f64) -> c_int {
    // SAFETY: the request handed to the program, answered here; the stat
    // valid for the call.
    unsafe {
        reply(req, "fuse_reply_attr", |t| {
            from_struct(t, attr.as_ref(), |t, st| {
                t.attr(AttrReply {
                    attr: convert::attr_from_stat(st),
                    ttl: convert::ttl(timeout),
                })
            })
        })
    }
}
versioned!(fuse_reply_attr, "FUSE_3.0");

/// `int fuse_reply_readlink(fuse_req_t req, const char *link)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_reply_readlink(req: Req, link: *const c_char) -> c_int {
    // SAFETY: the request handed to the program, answered here; a
    // NUL-terminated string (the header's contract).
    unsafe {
        reply(req, "fuse_reply_readlink", |t| {
            let target = (!link.is_null()).then(|| CStr::from_ptr(link));
            from_struct(t, target, |t, l| t.data(l.to_bytes()))
        })
    }
}
versioned!(fuse_reply_readlink, "FUSE_3.0");

/// `int fuse_reply_open(fuse_req_t req, const struct fuse_file_info *fi)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_reply_open(req: Req, fi: *const FuseFileInfo) -> c_int {
    // SAFETY: the request handed to the program, answered here; the
    // struct valid for the call.
    unsafe {
        reply(req, "fuse_reply_open", |t| {
            from_struct(t, fi.as_ref(), |t, fi| t.opened(opened_from(fi)))
        })
    }
}
versioned!(fuse_reply_open, "FUSE_3.0");

/// `int fuse_reply_write(fuse_req_t req, size_t count)`: also
/// copy_file_range's answer.
#[no_mangle]
pub unsafe extern "C" fn fuse_reply_write(req: Req, count: usize) -> c_int {
    use fusebox::abi::Opcode;
    // SAFETY: the request handed to the program, answered here.
    unsafe {
        reply(req, "fuse_reply_write", |t| {
            let op = t.opcode();
            if op == Opcode::COPY_FILE_RANGE || op == Opcode::COPY_FILE_RANGE_64 {
                t.copied(count as u64);
            } else {
                t.written(count.min(u32::MAX as usize) as u32);
            }
            0
        })
    }
}
versioned!(fuse_reply_write, "FUSE_3.0");

/// `int fuse_reply_buf(fuse_req_t req, const char *buf, size_t size)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_reply_buf(req: Req, buf: *const c_char, size: usize) -> c_int {
    // SAFETY: the request handed to the program, answered here; `size`
    // bytes at `buf`.
    unsafe {
        reply(req, "fuse_reply_buf", |t| {
            t.data(bytes(buf as *const c_void, size));
            0
        })
    }
}
versioned!(fuse_reply_buf, "FUSE_3.0");

/// Gather `count` iovecs into one buffer.
///
/// # Safety
/// `iov` holds `count` valid iovecs.
unsafe fn gather(iov: *const libc::iovec, count: c_int) -> Vec<u8> {
    let mut out = Vec::new();
    if iov.is_null() || count <= 0 {
        return out;
    }
    // SAFETY: the caller's contract.
    for v in unsafe { std::slice::from_raw_parts(iov, count as usize) } {
        // SAFETY: each iovec names readable memory.
        out.extend_from_slice(unsafe { bytes(v.iov_base, v.iov_len) });
    }
    out
}

/// `int fuse_reply_iov(fuse_req_t req, const struct iovec *iov, int count)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_reply_iov(req: Req, iov: *const libc::iovec, count: c_int) -> c_int {
    // SAFETY: the request handed to the program, answered here; its iovecs.
    unsafe {
        reply(req, "fuse_reply_iov", |t| {
            t.data(&gather(iov, count));
            0
        })
    }
}
versioned!(fuse_reply_iov, "FUSE_3.0");

/// Copy a buffer vector (memory or fds, read now) into memory, at most
/// `limit` bytes: the bytes, or -errno.
///
/// # Safety
/// `bufv` is a valid vector.
pub(crate) unsafe fn flatten(
    bufv: *mut FuseBufvec,
    flags: c_int,
    limit: usize,
) -> Result<Vec<u8>, c_int> {
    if bufv.is_null() {
        return Err(-libc::EINVAL);
    }
    // SAFETY: the caller's contract.
    let total = unsafe { super::buf::fuse_buf_size(bufv) }.min(limit);
    let mut out = vec![0u8; total];
    let mut dst = FuseBufvec {
        count: 1,
        idx: 0,
        off: 0,
        buf: [crate::abi::FuseBuf {
            size: total,
            flags: 0,
            mem: out.as_mut_ptr() as *mut c_void,
            fd: -1,
            pos: 0,
        }],
    };
    // SAFETY: `dst` is our buffer of `total` bytes; `bufv` the caller's.
    let n = unsafe { super::buf::fuse_buf_copy(&mut dst, bufv, flags as u32) };
    if n < 0 {
        return Err(n as c_int);
    }
    out.truncate(n as usize);
    Ok(out)
}

/// `int fuse_reply_data(fuse_req_t req, struct fuse_bufvec *bufv, enum
/// fuse_buf_copy_flags flags)`: the vector's data as the answer.
#[no_mangle]
pub unsafe extern "C" fn fuse_reply_data(req: Req, bufv: *mut FuseBufvec, flags: c_int) -> c_int {
    // SAFETY: the request handed to the program, answered here; its vector.
    unsafe {
        reply(req, "fuse_reply_data", |t| {
            match flatten(bufv, flags, t.size_limit().max(1 << 20)) {
                Ok(data) => {
                    t.data(&data);
                    0
                }
                Err(e) => {
                    t.error(Errno(-e));
                    e
                }
            }
        })
    }
}
versioned!(fuse_reply_data, "FUSE_3.0");

/// `int fuse_reply_statfs(fuse_req_t req, const struct statvfs *stbuf)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_reply_statfs(req: Req, st: *const libc::statvfs) -> c_int {
    // SAFETY: the request handed to the program, answered here; the
    // struct valid for the call.
    unsafe {
        reply(req, "fuse_reply_statfs", |t| {
            from_struct(t, st.as_ref(), |t, s| {
                t.statfs(convert::statfs_from_statvfs(s))
            })
        })
    }
}
versioned!(fuse_reply_statfs, "FUSE_3.0");

/// `int fuse_reply_xattr(fuse_req_t req, size_t count)`: the size a
/// GETXATTR/LISTXATTR asked for with size 0.
#[no_mangle]
pub unsafe extern "C" fn fuse_reply_xattr(req: Req, count: usize) -> c_int {
    // SAFETY: the request handed to the program, answered here.
    unsafe {
        reply(req, "fuse_reply_xattr", |t| {
            t.xattr_size(count.min(u32::MAX as usize) as u32);
            0
        })
    }
}
versioned!(fuse_reply_xattr, "FUSE_3.0");

/// `int fuse_reply_lock(fuse_req_t req, const struct flock *lock)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_reply_lock(req: Req, lock: *const libc::flock) -> c_int {
    // SAFETY: the request handed to the program, answered here; the
    // struct valid for the call.
    unsafe {
        reply(req, "fuse_reply_lock", |t| {
            from_struct(t, lock.as_ref(), |t, l| t.lock(convert::lock_from_flock(l)))
        })
    }
}
versioned!(fuse_reply_lock, "FUSE_3.0");

/// `int fuse_reply_bmap(fuse_req_t req, uint64_t idx)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_reply_bmap(req: Req, idx: u64) -> c_int {
    // SAFETY: the request handed to the program, answered here.
    unsafe {
        reply(req, "fuse_reply_bmap", |t| {
            t.bmap(idx);
            0
        })
    }
}
versioned!(fuse_reply_bmap, "FUSE_3.0");

/// `int fuse_reply_ioctl(fuse_req_t req, int result, const void *buf,
/// size_t size)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_reply_ioctl(
    req: Req,
    result: c_int,
    buf: *const c_void,
    size: usize,
) -> c_int {
    // SAFETY: the request handed to the program, answered here; `size`
    // bytes at `buf`.
    unsafe {
        reply(req, "fuse_reply_ioctl", |t| {
            t.ioctl(result, bytes(buf, size));
            0
        })
    }
}
versioned!(fuse_reply_ioctl, "FUSE_3.0");

/// `int fuse_reply_ioctl_iov(fuse_req_t req, int result, const struct
/// iovec *iov, int count)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_reply_ioctl_iov(
    req: Req,
    result: c_int,
    iov: *const libc::iovec,
    count: c_int,
) -> c_int {
    // SAFETY: the request handed to the program, answered here; its iovecs.
    unsafe {
        reply(req, "fuse_reply_ioctl_iov", |t| {
            t.ioctl(result, &gather(iov, count));
            0
        })
    }
}
versioned!(fuse_reply_ioctl_iov, "FUSE_3.0");

/// `int fuse_reply_ioctl_retry(...)`: only unrestricted ioctls (CUSE) may
/// retry, and a FUSE mount's never are; answered EIO, loudly.
#[no_mangle]
pub unsafe extern "C" fn fuse_reply_ioctl_retry(
    req: Req,
    _in_iov: *const libc::iovec,
    _in_count: usize,
    _out_iov: *const libc::iovec,
    _out_count: usize,
) -> c_int {
    // SAFETY: the request handed to the program, answered here.
    unsafe {
        reply(req, "fuse_reply_ioctl_retry", |t| {
            super::log_error(
                "fuse: fuse_reply_ioctl_retry: unrestricted ioctls are not supported on a FUSE mount (fusebox's libfuse3 has no CUSE); answering EIO",
            );
            t.error(Errno::EIO);
            -libc::ENOSYS
        })
    }
}
versioned!(fuse_reply_ioctl_retry, "FUSE_3.0");

/// `int fuse_reply_poll(fuse_req_t req, unsigned revents)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_reply_poll(req: Req, revents: c_uint) -> c_int {
    // SAFETY: the request handed to the program, answered here.
    unsafe {
        reply(req, "fuse_reply_poll", |t| {
            t.poll(revents);
            0
        })
    }
}
versioned!(fuse_reply_poll, "FUSE_3.0");

/// `int fuse_reply_lseek(fuse_req_t req, off_t off)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_reply_lseek(req: Req, off: libc::off_t) -> c_int {
    // SAFETY: the request handed to the program, answered here.
    unsafe {
        reply(req, "fuse_reply_lseek", |t| {
            t.offset(off.max(0) as u64);
            0
        })
    }
}
versioned!(fuse_reply_lseek, "FUSE_3.0");

// ------------------------------------------------------------ directories

/// Add one entry to a program's directory buffer in the kernel's format
/// (fusebox's own encoder over the buffer): its size, written only if it
/// fits (`buf` may be NULL to ask).
///
/// # Safety
/// `buf` is NULL or has `bufsize` writable bytes.
unsafe fn add_entry(
    buf: *mut c_char,
    bufsize: usize,
    name: &[u8],
    entry: &Entry,
    off: u64,
    plus: bool,
) -> usize {
    let name = OsStr::from_bytes(name);
    if !buf.is_null() {
        // SAFETY: the caller's contract.
        let slice = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, bufsize) };
        let mut out = DataOut::lent(slice, bufsize);
        // Nothing is written when it does not fit.
        DirEntries::new(&mut out, plus).push_plus(entry, off, name);
    }
    DirEntries::record_len(plus, name)
}

/// `size_t fuse_add_direntry(fuse_req_t req, char *buf, size_t bufsize,
/// const char *name, const struct stat *stbuf, off_t off)`: the entry's
/// size; written only if it fits in `bufsize` (`buf` may be NULL to ask).
/// Only the stat's inode number and file type are used.
#[no_mangle]
pub unsafe extern "C" fn fuse_add_direntry(
    _req: Req,
    buf: *mut c_char,
    bufsize: usize,
    name: *const c_char,
    stbuf: *const libc::stat,
    off: libc::off_t,
) -> usize {
    if name.is_null() {
        return 0;
    }
    // SAFETY: a NUL-terminated name; the stat NULL or valid.
    let (name, st) = unsafe { (CStr::from_ptr(name).to_bytes(), stbuf.as_ref()) };
    let mut entry = Entry::negative(std::time::Duration::ZERO);
    if let Some(st) = st {
        entry.attr.ino = st.st_ino;
        entry.attr.mode = st.st_mode;
    }
    // SAFETY: the program's buffer per the header.
    unsafe { add_entry(buf, bufsize, name, &entry, off as u64, false) }
}
versioned!(fuse_add_direntry, "FUSE_3.0");

/// `size_t fuse_add_direntry_plus(fuse_req_t req, char *buf, size_t
/// bufsize, const char *name, const struct fuse_entry_param *e, off_t
/// off)`: a READDIRPLUS record (the entry's lookup answer, then the
/// dirent).
#[no_mangle]
pub unsafe extern "C" fn fuse_add_direntry_plus(
    _req: Req,
    buf: *mut c_char,
    bufsize: usize,
    name: *const c_char,
    e: *const crate::abi::FuseEntryParam,
    off: libc::off_t,
) -> usize {
    if name.is_null() || e.is_null() {
        return 0;
    }
    // SAFETY: a NUL-terminated name and the program's entry.
    let (name, e) = unsafe { (CStr::from_ptr(name).to_bytes(), &*e) };
    // SAFETY: the program's buffer per the header.
    unsafe { add_entry(buf, bufsize, name, &entry_from(e), off as u64, true) }
}
versioned!(fuse_add_direntry_plus, "FUSE_3.0");

// ------------------------------------------------------------ notifications

fn notifier_of(se: *mut super::session::FuseSession) -> Option<Notifier> {
    // SAFETY: the program's live session.
    unsafe { se.as_ref() }.and_then(|s| s.notifier())
}

fn notify_result(r: std::io::Result<()>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => -e.raw_os_error().unwrap_or(libc::EIO),
    }
}

/// `int fuse_lowlevel_notify_poll(struct fuse_pollhandle *ph)`.
pub unsafe extern "C" fn fuse_lowlevel_notify_poll(ph: *mut PollHandle) -> c_int {
    // SAFETY: a handle given to the program's poll callback.
    let Some(ph) = (unsafe { ph.as_ref() }) else {
        return 0;
    };
    match &ph.notifier {
        Some(n) => notify_result(n.poll_wakeup(ph.kh)),
        None => -libc::ENOTCONN,
    }
}

/// `fuse_lowlevel_notify_poll` as exported (see the note in mod.rs).
#[export_name = "fuse_lowlevel_notify_poll"]
pub unsafe extern "C" fn export_fuse_lowlevel_notify_poll(ph: *mut PollHandle) -> c_int {
    // SAFETY: forwarded as the program gave it.
    unsafe { fuse_lowlevel_notify_poll(ph) }
}
versioned!(fuse_lowlevel_notify_poll, "FUSE_3.0");

/// `void fuse_pollhandle_destroy(struct fuse_pollhandle *ph)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_pollhandle_destroy(ph: *mut PollHandle) {
    if !ph.is_null() {
        // SAFETY: made by Box::into_raw in `poll`, destroyed once.
        drop(unsafe { Box::from_raw(ph) });
    }
}
versioned!(fuse_pollhandle_destroy, "FUSE_3.0");

/// `int fuse_lowlevel_notify_inval_inode(struct fuse_session *se,
/// fuse_ino_t ino, off_t off, off_t len)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_lowlevel_notify_inval_inode(
    se: *mut super::session::FuseSession,
    ino: u64,
    off: libc::off_t,
    len: libc::off_t,
) -> c_int {
    match notifier_of(se) {
        Some(n) => notify_result(n.inval_inode(NodeId(ino), off, len)),
        None => -libc::ENOTCONN,
    }
}
versioned!(fuse_lowlevel_notify_inval_inode, "FUSE_3.0");

/// # Safety
/// `name` is `namelen` bytes.
unsafe fn name_arg<'a>(name: *const c_char, namelen: usize) -> Option<&'a OsStr> {
    if name.is_null() {
        return None;
    }
    // SAFETY: `namelen` bytes at `name` (the caller's contract).
    let bytes = unsafe { std::slice::from_raw_parts(name as *const u8, namelen) };
    Some(OsStr::from_bytes(bytes))
}

/// `int fuse_lowlevel_notify_inval_entry(struct fuse_session *se,
/// fuse_ino_t parent, const char *name, size_t namelen)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_lowlevel_notify_inval_entry(
    se: *mut super::session::FuseSession,
    parent: u64,
    name: *const c_char,
    namelen: usize,
) -> c_int {
    // SAFETY: `namelen` bytes at `name`.
    let Some(name) = (unsafe { name_arg(name, namelen) }) else {
        return -libc::EINVAL;
    };
    match notifier_of(se) {
        Some(n) => notify_result(n.inval_entry(NodeId(parent), name, false)),
        None => -libc::ENOTCONN,
    }
}
versioned!(fuse_lowlevel_notify_inval_entry, "FUSE_3.0");

/// `int fuse_lowlevel_notify_expire_entry(struct fuse_session *se,
/// fuse_ino_t parent, const char *name, size_t namelen, enum
/// fuse_expire_flags flags)`: with FUSE_LL_EXPIRE_ONLY (1) the entry only
/// expires (a later lookup revalidates it), otherwise as inval_entry.
#[no_mangle]
pub unsafe extern "C" fn fuse_lowlevel_notify_expire_entry(
    se: *mut super::session::FuseSession,
    parent: u64,
    name: *const c_char,
    namelen: usize,
    flags: c_int,
) -> c_int {
    // SAFETY: `namelen` bytes at `name`.
    let Some(name) = (unsafe { name_arg(name, namelen) }) else {
        return -libc::EINVAL;
    };
    match notifier_of(se) {
        Some(n) => notify_result(n.inval_entry(NodeId(parent), name, flags & 1 != 0)),
        None => -libc::ENOTCONN,
    }
}
versioned!(fuse_lowlevel_notify_expire_entry, "FUSE_3.12");

/// `int fuse_lowlevel_notify_delete(struct fuse_session *se, fuse_ino_t
/// parent, fuse_ino_t child, const char *name, size_t namelen)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_lowlevel_notify_delete(
    se: *mut super::session::FuseSession,
    parent: u64,
    child: u64,
    name: *const c_char,
    namelen: usize,
) -> c_int {
    // SAFETY: `namelen` bytes at `name`.
    let Some(name) = (unsafe { name_arg(name, namelen) }) else {
        return -libc::EINVAL;
    };
    match notifier_of(se) {
        Some(n) => notify_result(n.delete(NodeId(parent), NodeId(child), name)),
        None => -libc::ENOTCONN,
    }
}
versioned!(fuse_lowlevel_notify_delete, "FUSE_3.0");

/// `int fuse_lowlevel_notify_store(struct fuse_session *se, fuse_ino_t
/// ino, off_t offset, struct fuse_bufvec *bufv, enum fuse_buf_copy_flags
/// flags)`.
#[no_mangle]
pub unsafe extern "C" fn fuse_lowlevel_notify_store(
    se: *mut super::session::FuseSession,
    ino: u64,
    offset: libc::off_t,
    bufv: *mut FuseBufvec,
    flags: c_int,
) -> c_int {
    let Some(n) = notifier_of(se) else {
        return -libc::ENOTCONN;
    };
    // SAFETY: the caller's valid vector.
    match unsafe { flatten(bufv, flags, 64 << 20) } {
        Ok(data) => notify_result(n.store(NodeId(ino), offset.max(0) as u64, &data)),
        Err(e) => e,
    }
}
versioned!(fuse_lowlevel_notify_store, "FUSE_3.0");

/// `int fuse_lowlevel_notify_retrieve(struct fuse_session *se, fuse_ino_t
/// ino, size_t size, off_t offset, void *cookie)`: ask the kernel for
/// what it caches of `ino`; its answer comes to the program's
/// retrieve_reply callback (from a thread of this library, as a request
/// the program ends with fuse_reply_none).
#[no_mangle]
pub unsafe extern "C" fn fuse_lowlevel_notify_retrieve(
    se: *mut super::session::FuseSession,
    ino: u64,
    size: usize,
    offset: libc::off_t,
    cookie: *mut c_void,
) -> c_int {
    // SAFETY: the program's live session.
    let Some(s) = (unsafe { se.as_ref() }) else {
        return -libc::EINVAL;
    };
    let Some(shared) = s.low_level() else {
        super::log_error("fuse: fuse_lowlevel_notify_retrieve needs a low-level session");
        return -libc::EINVAL;
    };
    let Some(n) = shared.notifier.get().cloned() else {
        return -libc::ENOTCONN;
    };
    let offset = offset.max(0) as u64;
    let rx = match n.retrieve(NodeId(ino), offset, size.min(u32::MAX as usize) as u32) {
        Ok(rx) => rx,
        Err(e) => return -e.raw_os_error().unwrap_or(libc::EIO),
    };
    struct Cookie(*mut c_void);
    // SAFETY: the program's pointer, handed back to its own callback.
    unsafe impl Send for Cookie {}
    let cookie = Cookie(cookie);
    let spawned = std::thread::Builder::new()
        .name("fuse3-retrieve".into())
        .spawn(move || {
            let cookie = cookie;
            // The kernel answers at once; no answer means the connection
            // went away.
            let Ok(mut data) = rx.recv() else { return };
            let Some(f) = callback!(
                shared,
                retrieve_reply,
                fn(Req, *mut c_void, u64, libc::off_t, *mut FuseBufvec)
            ) else {
                return;
            };
            let req = Request {
                shared: shared.clone(),
                ctx: FuseCtx::default(),
                token: Mutex::new(None),
                interrupt: None,
            }
            .into_raw();
            let mut v = FuseBufvec {
                count: 1,
                idx: 0,
                off: 0,
                buf: [crate::abi::FuseBuf {
                    size: data.len(),
                    flags: 0,
                    mem: data.as_mut_ptr() as *mut c_void,
                    fd: -1,
                    pos: 0,
                }],
            };
            // SAFETY: retrieve_reply(req, cookie, ino, offset, bufv); the
            // data lives for the call; the program ends `req` with
            // fuse_reply_none.
            shared.call(|| unsafe { f(req, cookie.0, ino, offset as i64, &mut v) });
        });
    match spawned {
        Ok(_) => 0,
        Err(e) => -e.raw_os_error().unwrap_or(libc::EAGAIN),
    }
}
versioned!(fuse_lowlevel_notify_retrieve, "FUSE_3.0");
