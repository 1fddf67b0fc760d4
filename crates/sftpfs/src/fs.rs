//! [`SftpFs`]: the remote directory as a [`PathFilesystem`].
//!
//! Every call becomes one batch of SFTP requests sent together, so a call
//! costs one round trip where the protocol allows: a create is OPEN and
//! LSTAT in one write (the attributes the kernel needs come back with the
//! handle), a chmod is SETSTAT and LSTAT, a listing keeps several READDIRs
//! in flight. What changes the namespace updates the cache (`cache`)
//! before it is answered.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fusebox::abi::flags::{fopen, init};
use fusebox::fs::ops::*;
use fusebox::fs::PlusFiller;
use fusebox::protocol::{Connection as FuseConnection, DataOut, Notifier};
use fusebox::recovery::HandleRecord;
use fusebox::stats::FsCounter;
use fusebox::{
    Errno, FileAttr, FileHandle, FileType, FsOptions, FsResult, Opened, PathFilesystem, Statfs,
    TimeOrNow, Timeouts, Timespec,
};
use moka::sync::Cache;

use crate::cache::{Listing, MetaCache};
use crate::client::{CallError, Client};
use crate::connection::{ConnError, Connection};
use crate::errors::status_errno;
use crate::files::{Io, OpenFile, RemoteHandle};
use crate::idmap::IdMapper;
use crate::listing::Lister;
use crate::options::{Remote, SftpOptions};
use crate::pages::{PageCache, PAGE};
use crate::smallfiles::SmallFiles;
use crate::wire::{self, pflags, status, Attrs, Reply, Request};
use crate::writelog::WriteLog;

/// Why a mount could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("connecting to {remote}: {why}")]
    Connect { remote: String, why: String },
    #[error("remote directory {dir:?} on {host}: {why}")]
    Root {
        host: String,
        dir: String,
        why: String,
    },
    #[error(transparent)]
    IdMap(#[from] crate::idmap::MapFileError),
    #[error("setting up the write log: {0}")]
    Log(std::io::Error),
}

/// The remote directory, served.
pub struct SftpFs {
    remote: Remote,
    opts: SftpOptions,
    io: Io,
    /// The remote directory as an absolute path (no trailing slash but
    /// for "/"), found at the first connection.
    base: RwLock<Option<Vec<u8>>>,
    cache: Arc<MetaCache>,
    lister: Lister,
    /// File data in this process's memory, when on (`pages`).
    pages: Option<PageCache>,
    /// Small files read ahead of a program reading them one by one.
    small: SmallFiles,
    ids: RwLock<IdMapper>,
    files: RwLock<HashMap<u64, Arc<OpenFile>>>,
    dirs: Mutex<HashMap<u64, Arc<Listing>>>,
    next_fh: AtomicU64,
    /// (mtime, size) of a file when it was last opened or closed here: the
    /// kernel's page cache of it is kept on the next open while they are
    /// unchanged.
    stamps: Cache<Vec<u8>, (u32, u64), foldhash::fast::RandomState>,
    timeouts: Timeouts,
    direct_io: bool,
    local_ids: (u32, u32),
}

fn now_secs() -> u32 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as u32)
}

/// The longest name a component may have (Linux's NAME_MAX).
const NAME_MAX: usize = 255;

/// A number that changes when a file's size, times, mode or owner do.
fn fingerprint(a: &Attrs) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0x5f7f).hash_one((a.size, a.times, a.perm, a.uid_gid)) | 1
}

fn parent_of(path: &[u8]) -> &[u8] {
    match path.iter().rposition(|&b| b == b'/') {
        Some(0) => b"/",
        Some(i) => &path[..i],
        None => b".",
    }
}

fn is_below(path: &[u8], dir: &[u8]) -> bool {
    path.len() > dir.len() && path.starts_with(dir) && path[dir.len()] == b'/'
}

/// open(2) flags as SFTP's.
fn pflags_of(flags: i32) -> u32 {
    let mut p = match flags & libc::O_ACCMODE {
        libc::O_WRONLY => pflags::WRITE,
        libc::O_RDWR => pflags::READ | pflags::WRITE,
        _ => pflags::READ,
    };
    if flags & libc::O_APPEND != 0 {
        p |= pflags::APPEND;
    }
    if flags & libc::O_CREAT != 0 {
        p |= pflags::CREAT;
    }
    if flags & libc::O_TRUNC != 0 {
        p |= pflags::TRUNC;
    }
    if flags & libc::O_EXCL != 0 {
        p |= pflags::EXCL;
    }
    p
}

fn ok_status(r: &Reply) -> Result<(), Errno> {
    match r {
        Reply::Status { code, .. } if *code == status::OK => Ok(()),
        Reply::Status { code, .. } => Err(status_errno(*code)),
        _ => Err(Errno::EPROTO),
    }
}

fn failure(r: &Reply) -> bool {
    matches!(r, Reply::Status { code, .. } if *code == status::FAILURE)
}

impl SftpFs {
    /// Connect (unless `delay_connect`) and check the remote directory:
    /// every reason a mount cannot work is found here, before anything is
    /// mounted.
    pub fn start(remote: Remote, opts: SftpOptions, fs: &FsOptions) -> Result<SftpFs, StartError> {
        // max_conns: one SSH connection each; the first carries every
        // request by path, open files spread over all of them.
        let clients: Vec<Arc<Client>> = (0..opts.max_conns.max(1))
            .map(|_| Client::new(opts.route(&remote), opts.timeout, opts.reconnect))
            .collect();
        let streams: Vec<Arc<Client>> = (1..opts.stream_conns.max(1))
            .map(|_| Client::new(opts.route(&remote), opts.timeout, opts.reconnect))
            .collect();
        let client = clients[0].clone();
        let log = WriteLog::anonymous(opts.write_behind).map_err(StartError::Log)?;
        let dcache = opts.dir_cache;
        let default_ttl = if dcache {
            opts.stat_timeout()
        } else {
            Duration::from_secs(1)
        };
        let cache = Arc::new(MetaCache::new(
            dcache,
            opts.dcache_max_size,
            opts.stat_timeout(),
            opts.dir_timeout(),
            opts.link_timeout(),
        ));
        let me = SftpFs {
            lister: Lister::new(
                client.clone(),
                cache.clone(),
                if dcache { opts.prefetch_dirs } else { 0 },
                opts.dcache_max_size,
                opts.follow_symlinks,
            ),
            small: SmallFiles::new(
                client.clone(),
                cache.clone(),
                if dcache { opts.prefetch_files } else { 0 },
                opts.stat_timeout(),
            ),
            cache,
            pages: opts
                .page_cache
                .filter(|&b| b > 0)
                .map(|b| PageCache::new(b, opts.stat_timeout())),
            ids: RwLock::new(IdMapper::new(&opts, None, (0, 0))?),
            io: Io::new(clients, streams, log, &opts),
            base: RwLock::new(None),
            files: RwLock::default(),
            dirs: Mutex::default(),
            next_fh: AtomicU64::new(1),
            stamps: Cache::builder()
                .max_capacity(opts.dcache_max_size.max(1000))
                .time_to_live(Duration::from_secs(24 * 3600))
                .build_with_hasher(foldhash::fast::RandomState::default()),
            timeouts: fs.timeouts_or(Timeouts {
                entry: default_ttl,
                attr: default_ttl,
                negative: if dcache { default_ttl } else { Duration::ZERO },
            }),
            direct_io: fs.direct_io,
            local_ids: (
                rustix::process::getuid().as_raw(),
                rustix::process::getgid().as_raw(),
            ),
            remote,
            opts,
        };
        if !me.opts.delay_connect {
            me.io.client.connect().map_err(|why| StartError::Connect {
                remote: me.remote.destination(),
                why,
            })?;
            me.resolve_base()?;
        }
        Ok(me)
    }

    /// The options in force.
    pub fn options(&self) -> &SftpOptions {
        &self.opts
    }

    pub fn client(&self) -> &Arc<Client> {
        &self.io.client
    }

    /// Find the remote directory (REALPATH: a relative one is below the
    /// login directory) and check it is a directory; learn the login
    /// user's ids for idmap=user.
    fn resolve_base(&self) -> Result<Vec<u8>, StartError> {
        if let Some(b) = self
            .base
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        {
            return Ok(b);
        }
        let root_err = |why: String| StartError::Root {
            host: self.remote.host.clone(),
            dir: self.remote.dir.clone(),
            why,
        };
        let dir = if self.remote.dir.is_empty() {
            "."
        } else {
            self.remote.dir.as_str()
        };
        let base = match self.io.client.call(&Request::Realpath {
            path: dir.as_bytes(),
        }) {
            Ok(Reply::Name(mut v)) if !v.is_empty() => {
                let mut p = v.swap_remove(0).name;
                while p.len() > 1 && p.ends_with(b"/") {
                    p.pop();
                }
                p
            }
            Ok(Reply::Status { code, .. }) if code == status::NO_SUCH_FILE => {
                return Err(root_err("no such directory".into()))
            }
            Ok(Reply::Status { code, message }) => {
                return Err(root_err(format!("{} ({message})", wire::StatusName(code))))
            }
            Ok(_) => return Err(root_err("the server answered REALPATH oddly".into())),
            Err(e) => return Err(root_err(e.to_string())),
        };
        if self.opts.check_root {
            match self.io.client.call(&Request::Stat { path: &base }) {
                Ok(Reply::Attrs(a)) => {
                    if a.perm.is_some_and(|p| p & libc::S_IFMT != libc::S_IFDIR) {
                        return Err(root_err("not a directory".into()));
                    }
                }
                Ok(Reply::Status { code, .. }) => {
                    return Err(root_err(format!("{}", wire::StatusName(code))))
                }
                Ok(_) => return Err(root_err("the server answered STAT oddly".into())),
                Err(e) => return Err(root_err(e.to_string())),
            }
        }
        if matches!(self.opts.idmap, crate::options::IdMap::User) {
            // The login directory's owner is the login user (sshfs's way).
            if let Ok(Reply::Attrs(a)) = self.io.client.call(&Request::Stat { path: b"." }) {
                let local = self.local_ids;
                *self.ids.write().unwrap_or_else(PoisonError::into_inner) =
                    IdMapper::new(&self.opts, a.uid_gid, local)?;
            }
        }
        *self.base.write().unwrap_or_else(PoisonError::into_inner) = Some(base.clone());
        Ok(base)
    }

    /// The remote path of a mount path.
    fn is_base(&self, rp: &[u8]) -> bool {
        self.base
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .as_deref()
            .is_none_or(|b| b == rp)
    }

    fn rpath(&self, path: &Path) -> FsResult<Vec<u8>> {
        let base = match self
            .base
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        {
            Some(b) => b,
            None => self.resolve_base().map_err(|e| {
                tracing::warn!(error = %e, "no remote directory");
                Errno::EIO
            })?,
        };
        let p = path.as_os_str().as_bytes();
        // What Linux refuses, refused here: the server would say only
        // "bad message" (OpenSSH folds ENAMETOOLONG into EINVAL's code).
        if p.len() >= libc::PATH_MAX as usize || p.split(|&b| b == b'/').any(|c| c.len() > NAME_MAX)
        {
            return Err(Errno::ENAMETOOLONG);
        }
        let rel = p.strip_prefix(b"/").unwrap_or(p);
        if rel.is_empty() {
            return Ok(base);
        }
        let mut out = base;
        if out != b"/" {
            out.push(b'/');
        }
        out.extend_from_slice(rel);
        Ok(out)
    }

    fn attr(&self, a: &Attrs) -> FileAttr {
        let mut mode = a.perm.unwrap_or(0o100644);
        if mode & libc::S_IFMT == 0 {
            mode |= libc::S_IFREG;
        }
        if let Some(mask) = self.opts.umask {
            mode &= !(mask & 0o7777);
        }
        let (uid, gid) = a.uid_gid.unwrap_or((0, 0));
        let (uid, gid) = self
            .ids
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .incoming(uid, gid);
        let (atime, mtime) = a.times.unwrap_or((0, 0));
        let t = |s: u32| Timespec {
            sec: s as i64,
            nsec: 0,
        };
        let size = a.size.unwrap_or(0);
        FileAttr {
            // SFTP has no inode numbers, and the kernel is shown node ids
            // (`node_ids_as_inos`); this number only lets recovery's
            // journal tell one file from another at a name (a rename
            // found applied: the source's file now under the target's).
            ino: fingerprint(a),
            size,
            blocks: size.div_ceil(512),
            atime: t(atime),
            mtime: t(mtime),
            ctime: t(mtime),
            mode,
            nlink: 1,
            uid,
            gid,
            rdev: 0,
            // Programs size their buffers by it (cp, stdio): large I/O is
            // what a remote file wants.
            blksize: 256 * 1024,
        }
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.io.client.timeout()
    }

    /// Send `reqs` together on the live connection; each reply in order.
    /// A connection that drops under them is retried as a whole (callers
    /// use this only for batches that are harmless to send again).
    fn batch(&self, reqs: &[Request<'_>]) -> Result<Vec<Reply>, Errno> {
        let deadline = self.deadline();
        loop {
            let (conn, _) = self.io.client.current(deadline)?;
            match self.batch_on(&conn, reqs, deadline) {
                Ok(v) => return Ok(v),
                Err(CallError::Unknown) => continue,
                Err(CallError::Errno(e)) => return Err(e),
            }
        }
    }

    fn batch_on(
        &self,
        conn: &Connection,
        reqs: &[Request<'_>],
        deadline: Instant,
    ) -> Result<Vec<Reply>, CallError> {
        let waiters = conn.call_many(reqs);
        let mut out = Vec::with_capacity(reqs.len());
        for (w, r) in waiters.iter().zip(reqs) {
            match w.wait(deadline) {
                Ok(reply) => out.push(reply),
                Err(ConnError::Lost(_)) => return Err(CallError::Unknown),
                Err(ConnError::TimedOut(_)) => {
                    conn.die(format!(
                        "no reply to {} within {:?}",
                        r.name(),
                        self.io.client.timeout()
                    ));
                    return Err(CallError::Errno(Errno::EIO));
                }
            }
        }
        Ok(out)
    }

    /// LSTAT (STAT with follow_symlinks), through the cache.
    fn stat_path(&self, rp: &[u8]) -> FsResult<Attrs> {
        if let Some(known) = self.cache.lookup(rp) {
            return known.ok_or(Errno::ENOENT);
        }
        // The remote root's parent is outside the mount: never listed
        // ahead (its entries could include this very mountpoint, when the
        // server is this machine, whose stat would wait on this server).
        if !self.is_base(rp) {
            self.lister.missed(parent_of(rp));
        }
        let e = self.cache.epoch();
        let req = if self.opts.follow_symlinks {
            Request::Stat { path: rp }
        } else {
            Request::Lstat { path: rp }
        };
        match self.io.client.call(&req)? {
            Reply::Attrs(a) => {
                self.cache.put(rp, Some(a), e);
                Ok(a)
            }
            Reply::Status { code, .. } if code == status::NO_SUCH_FILE => {
                self.cache.put(rp, None, e);
                Err(Errno::ENOENT)
            }
            Reply::Status { code, .. } => Err(status_errno(code)),
            _ => Err(Errno::EPROTO),
        }
    }

    /// Attributes straight from the server (no cache).
    fn fresh_lstat(&self, rp: &[u8]) -> Option<Attrs> {
        match self.io.client.call(&Request::Lstat { path: rp }) {
            Ok(Reply::Attrs(a)) => Some(a),
            _ => None,
        }
    }

    fn kind(a: &Attrs) -> u32 {
        a.perm.unwrap_or(0) & libc::S_IFMT
    }

    /// FAILURE says nothing of why: look at the names involved and say
    /// what Linux would have said.
    fn diagnose_create(&self, rp: &[u8], excl: bool) -> Errno {
        match self.fresh_lstat(rp) {
            Some(a) if Self::kind(&a) == libc::S_IFDIR => Errno::EISDIR,
            Some(_) if excl => Errno::EEXIST,
            Some(_) => Errno::EACCES,
            None => self.diagnose_parent(rp),
        }
    }

    fn diagnose_parent(&self, rp: &[u8]) -> Errno {
        match self.fresh_lstat(parent_of(rp)) {
            None => Errno::ENOENT,
            Some(a) if Self::kind(&a) != libc::S_IFDIR => Errno::ENOTDIR,
            Some(_) => Errno::EPERM,
        }
    }

    fn diagnose_exists(&self, rp: &[u8]) -> Errno {
        match self.fresh_lstat(rp) {
            Some(_) => Errno::EEXIST,
            None => self.diagnose_parent(rp),
        }
    }

    /// Whether a directory holds anything besides . and ..
    fn dir_nonempty(&self, rp: &[u8]) -> bool {
        self.list(rp).is_ok_and(|l| !l.entries.is_empty())
    }

    fn open_files(&self) -> Vec<Arc<OpenFile>> {
        self.files
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    fn file(&self, fh: FileHandle) -> FsResult<Arc<OpenFile>> {
        self.files
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    /// Wait for every open file of `rp` to have its writes confirmed, so
    /// a change by path (truncate, rename, chmod) lands after them.
    fn settle(&self, rp: &[u8]) -> FsResult<()> {
        for f in self.open_files() {
            if f.has_pending() && (f.path() == rp || is_below(&f.path(), rp)) {
                f.drain(&self.io)?;
            }
        }
        Ok(())
    }

    /// The size the file will have once its writes land, if any are on
    /// their way.
    fn unconfirmed_end(&self, rp: &[u8], fh: Option<FileHandle>) -> Option<u64> {
        self.open_files()
            .iter()
            .filter(|f| fh.is_some_and(|h| h.0 == f.fh) || f.path() == rp)
            .filter_map(|f| f.unconfirmed_end())
            .max()
    }

    /// The whole listing of a directory (see `listing`).
    fn list(&self, rp: &[u8]) -> FsResult<Arc<Listing>> {
        self.lister.list(rp)
    }

    /// SETSTAT's attributes for a FUSE setattr (times need both fields:
    /// the one not given is read first).
    fn set_attrs(&self, rp: &[u8], attr: &SetAttr) -> FsResult<Attrs> {
        let ids = self
            .ids
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut a = Attrs {
            size: attr.size,
            perm: attr.mode.map(|m| m & 0o7777),
            ..Attrs::default()
        };
        if attr.uid.is_some() || attr.gid.is_some() {
            let cur = if attr.uid.is_none() || attr.gid.is_none() {
                self.stat_path(rp)?.uid_gid.unwrap_or((0, 0))
            } else {
                (0, 0)
            };
            let uid = match attr.uid {
                Some(u) => ids.outgoing_uid(u).map_err(|_| Errno::EPERM)?,
                None => cur.0,
            };
            let gid = match attr.gid {
                Some(g) => ids.outgoing_gid(g).map_err(|_| Errno::EPERM)?,
                None => cur.1,
            };
            a.uid_gid = Some((uid, gid));
        }
        if attr.atime.is_some() || attr.mtime.is_some() {
            let secs = |t: &TimeOrNow| match t {
                TimeOrNow::Now => now_secs(),
                TimeOrNow::Specific(ts) => ts.sec.clamp(0, u32::MAX as i64) as u32,
            };
            let cur = if attr.atime.is_none() || attr.mtime.is_none() {
                self.stat_path(rp)?.times.unwrap_or((0, 0))
            } else {
                (0, 0)
            };
            a.times = Some((
                attr.atime.as_ref().map_or(cur.0, secs),
                attr.mtime.as_ref().map_or(cur.1, secs),
            ));
        }
        Ok(a)
    }

    fn new_fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    /// Open flags for the kernel: keep its page cache when the file is
    /// as it was when last seen here (or always, with kernel_cache).
    fn open_flags(&self, rp: &[u8], a: &Attrs) -> u32 {
        if self.direct_io {
            return fopen::DIRECT_IO;
        }
        let stamp = (a.times.map_or(0, |t| t.1), a.size.unwrap_or(0));
        let same = self.stamps.get(rp) == Some(stamp);
        self.stamps.insert(rp.to_vec(), stamp);
        if self.opts.kernel_cache || same {
            fopen::KEEP_CACHE
        } else {
            0
        }
    }

    fn register(&self, f: OpenFile) -> u64 {
        let fh = f.fh;
        self.files
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(fh, Arc::new(f));
        fh
    }

    /// OPEN plus LSTAT in one round trip.
    fn open_remote(
        &self,
        rp: &[u8],
        pf: u32,
        perm: Option<u32>,
    ) -> Result<(RemoteHandle, Attrs), OpenFailure> {
        let deadline = self.deadline();
        let (conn, _) = self
            .io
            .client_for(rp)
            .current(deadline)
            .map_err(OpenFailure::Errno)?;
        let attrs = Attrs {
            perm: if self.opts.workaround_createmode {
                None
            } else {
                perm
            },
            ..Attrs::default()
        };
        let replies = self
            .batch_on(
                &conn,
                &[
                    Request::Open {
                        path: rp,
                        pflags: pf,
                        attrs,
                    },
                    Request::Lstat { path: rp },
                ],
                deadline,
            )
            .map_err(|e| match e {
                CallError::Unknown => OpenFailure::Unknown,
                CallError::Errno(e) => OpenFailure::Errno(e),
            })?;
        let handle = match &replies[0] {
            Reply::Handle(h) => h.clone(),
            r if failure(r) => return Err(OpenFailure::Failure),
            r => {
                return Err(OpenFailure::Errno(
                    ok_status(r).err().unwrap_or(Errno::EPROTO),
                ))
            }
        };
        let rh = RemoteHandle {
            conn,
            handle: handle.into(),
        };
        match &replies[1] {
            Reply::Attrs(a) => Ok((rh, *a)),
            r => {
                rh.conn
                    .call_back(&Request::Close { handle: &rh.handle }, |_| {});
                Err(OpenFailure::Errno(
                    ok_status(r).err().unwrap_or(Errno::EPROTO),
                ))
            }
        }
    }

    /// A read through the page cache: pages it holds are copied, missing
    /// ones are read (with those after them the read covers, up to 1 MiB)
    /// through the file's readahead and kept. A page shorter than PAGE is
    /// the file's end.
    fn read_paged(
        &self,
        pc: &PageCache,
        f: &Arc<OpenFile>,
        offset: u64,
        size: u32,
        out: &mut DataOut,
    ) -> FsResult<()> {
        const MOST_PAGES: u64 = 8;
        let generation = pc.generation(&f.path());
        let end = offset + size as u64;
        let mut pos = offset;
        while pos < end {
            let page = pos / PAGE;
            let data = match pc.get(generation, page) {
                Some(d) => d,
                None => {
                    let count = (end.div_ceil(PAGE) - page).clamp(1, MOST_PAGES);
                    let mut buf = DataOut::with_capacity((count * PAGE) as usize);
                    f.read(&self.io, page * PAGE, (count * PAGE) as u32, &mut buf)?;
                    let got = buf.as_slice();
                    let mut first = None;
                    for i in 0..count {
                        let from = (i * PAGE) as usize;
                        if from > got.len() {
                            break;
                        }
                        let chunk = got[from..got.len().min(from + PAGE as usize)].to_vec();
                        let short = chunk.len() < PAGE as usize;
                        if i == 0 {
                            first = Some(Arc::new(chunk.clone()));
                        }
                        pc.put(generation, page + i, chunk);
                        if short {
                            break;
                        }
                    }
                    first.unwrap_or_default()
                }
            };
            let within = (pos - page * PAGE) as usize;
            if within >= data.len() {
                break;
            }
            let n = (data.len() - within).min((end - pos) as usize);
            out.extend_from_slice(&data[within..within + n]);
            pos += n as u64;
            if data.len() < PAGE as usize {
                break;
            }
        }
        Ok(())
    }

    /// File data this mount changed, or moved: stale in the page cache.
    fn data_changed(&self, path: &[u8], tree: bool) {
        self.small.changed(path, tree);
        if let Some(pc) = &self.pages {
            if tree {
                pc.tree_changed(path);
            } else {
                pc.changed(path);
            }
        }
    }

    /// A remote mode differs from the one asked for (the server's umask):
    /// set it.
    fn fix_mode(&self, rh: &RemoteHandle, a: &mut Attrs, want: u32) {
        let want = want & 0o7777;
        if a.perm.is_some_and(|p| p & 0o7777 != want) {
            let req = Request::Fsetstat {
                handle: &rh.handle,
                attrs: Attrs {
                    perm: Some(want),
                    ..Attrs::default()
                },
            };
            if let Ok(r) = self.io.client.call_on(&rh.conn, &req, self.deadline()) {
                if ok_status(&r).is_ok() {
                    a.perm = Some((a.perm.unwrap_or(0) & libc::S_IFMT) | want);
                }
            }
        }
    }

    /// Apply a path-changing request that must not be sent twice; if the
    /// connection drops under it, `applied` looks at the server (on the
    /// next connection) to say whether it was.
    fn once(&self, req: &Request<'_>, applied: impl FnOnce() -> bool) -> Result<Reply, Errno> {
        match self.io.client.call_once(req) {
            Ok(r) => Ok(r),
            Err(CallError::Errno(e)) => Err(e),
            Err(CallError::Unknown) => {
                if applied() {
                    tracing::info!(
                        request = req.name(),
                        "the connection dropped under a change that was applied"
                    );
                    Ok(Reply::Status {
                        code: status::OK,
                        message: String::new(),
                    })
                } else {
                    // Not applied: now it can be sent again.
                    self.io.client.call_once(req).map_err(|e| match e {
                        CallError::Errno(e) => e,
                        CallError::Unknown => Errno::EIO,
                    })
                }
            }
        }
    }

    /// `once`, with an LSTAT of `rp` sent right behind the request (the
    /// server answers in order: the attributes after the change), so a
    /// mkdir or symlink costs one round trip, not two.
    fn once_stat(
        &self,
        req: &Request<'_>,
        rp: &[u8],
        applied: impl FnOnce() -> bool,
    ) -> Result<(Reply, Option<Attrs>, Answered), Errno> {
        let deadline = self.deadline();
        let (conn, _) = self.io.client.current(deadline)?;
        match self.batch_on(&conn, &[*req, Request::Lstat { path: rp }], deadline) {
            Ok(mut v) => {
                let st = match v.pop() {
                    Some(Reply::Attrs(a)) => Some(a),
                    _ => None,
                };
                Ok((v.pop().ok_or(Errno::EPROTO)?, st, Answered::ByServer))
            }
            Err(CallError::Errno(e)) => Err(e),
            Err(CallError::Unknown) => {
                // Look first: sent again after it was applied, it would
                // fail (EEXIST for the directory just made).
                let r = if applied() {
                    Reply::Status {
                        code: status::OK,
                        message: String::new(),
                    }
                } else {
                    self.once(req, || false)?
                };
                Ok((r, self.fresh_lstat(rp), Answered::AfterReconnect))
            }
        }
    }

    fn exists(&self, rp: &[u8]) -> bool {
        self.fresh_lstat(rp).is_some()
    }

    /// Paths of open files below or at `from` follow a rename.
    fn moved(&self, from: &[u8], to: &[u8]) {
        for f in self.open_files() {
            let p = f.path();
            if p == from {
                f.set_path(to);
            } else if is_below(&p, from) {
                let mut n = to.to_vec();
                n.extend_from_slice(&p[from.len()..]);
                f.set_path(&n);
            }
        }
    }

    fn statvfs(&self, rp: &[u8]) -> FsResult<Statfs> {
        match self.io.client.call(&Request::Statvfs { path: rp })? {
            Reply::Extended(body) => {
                let s = wire::Statvfs::decode(&body).map_err(|_| Errno::EPROTO)?;
                Ok(Statfs {
                    blocks: s.blocks,
                    bfree: s.bfree,
                    bavail: s.bavail,
                    files: s.files,
                    ffree: s.ffree,
                    bsize: s.bsize as u32,
                    namelen: s.namemax as u32,
                    frsize: s.frsize as u32,
                })
            }
            r => Err(ok_status(&r).err().unwrap_or(Errno::EPROTO)),
        }
    }

    fn target_out(&self, rp: &[u8], target: &[u8]) -> FsResult<Vec<u8>> {
        if self.opts.contain_symlinks
            && (target.starts_with(b"/") || target.split(|&b| b == b'/').any(|c| c == b".."))
        {
            return Err(Errno::EPERM);
        }
        if self.opts.transform_symlinks && target.starts_with(b"/") {
            // An absolute target below the remote root becomes relative
            // to the link, so it resolves inside the mount.
            let base = self.rpath(Path::new("/"))?;
            if target == base.as_slice() || is_below(target, &base) {
                let dir = parent_of(rp);
                let depth = dir[base.len()..]
                    .split(|&b| b == b'/')
                    .filter(|c| !c.is_empty())
                    .count();
                let mut rel = b"../".repeat(depth);
                let rest = target[base.len()..].strip_prefix(b"/").unwrap_or(&[]);
                rel.extend_from_slice(rest);
                if rel.is_empty() {
                    rel.push(b'.');
                }
                return Ok(rel);
            }
        }
        Ok(target.to_vec())
    }

    /// Writes a previous server answered and the server never confirmed:
    /// send them again, oldest first across every file (two handles may
    /// have written the same bytes), before anything else is served.
    fn replay_orphans(&self) {
        let log = self.io.log();
        let orphans = log.unconfirmed();
        if orphans.is_empty() {
            return;
        }
        tracing::info!(
            writes = orphans.len(),
            "sending the writes a previous server left unconfirmed"
        );
        let files = self
            .files
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let mut temporary: HashMap<u64, Arc<OpenFile>> = HashMap::new();
        let mut order: Vec<(Arc<OpenFile>, crate::writelog::Pending)> = Vec::new();
        for p in orphans {
            let f = match files.get(&p.fh) {
                Some(f) => f.clone(),
                None => temporary
                    .entry(p.fh)
                    .or_insert_with(|| {
                        Arc::new(OpenFile::new(p.fh, log.path(&p), pflags::WRITE, 0))
                    })
                    .clone(),
            };
            f.adopt_pending(p.clone());
            order.push((f, p));
        }
        // Reopen each file first (nothing is sent by a reopen: the pending
        // writes were adopted after... see `resend_adopted`), then send in
        // sequence order.
        for (f, p) in &order {
            if let Err(e) = f.resend_adopted(&self.io, p) {
                tracing::error!(fh = f.fh, path = %String::from_utf8_lossy(&f.path()), error = %e, "a write a previous server answered could not be sent again");
                f.abandon(&self.io, e);
            }
        }
        let mut seen = std::collections::HashSet::new();
        for (f, _) in &order {
            if seen.insert(f.fh) {
                if let Err(e) = f.drain(&self.io) {
                    tracing::error!(fh = f.fh, error = %e, "writes a previous server answered stay unconfirmed");
                    f.abandon(&self.io, e);
                }
            }
        }
        for f in temporary.values() {
            f.close();
        }
    }
}

/// Who said a change was made: the server, in answer to it, or a look
/// at the server after the connection dropped with it in flight (then
/// what was found may predate it: someone else's directory, say).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answered {
    ByServer,
    AfterReconnect,
}

/// Why an OPEN failed.
enum OpenFailure {
    /// FAILURE: the caller diagnoses.
    Failure,
    /// The connection dropped with it in flight.
    Unknown,
    Errno(Errno),
}

impl PathFilesystem for SftpFs {
    fn init(&self, conn: &mut FuseConnection, _notifier: &Notifier) -> FsResult<()> {
        // Page cache dropped by the kernel when a getattr shows the file
        // changed (mtime or size), and kept across opens otherwise.
        conn.enable(init::AUTO_INVAL_DATA);
        conn.enable(init::DO_READDIRPLUS);
        conn.enable(init::READDIRPLUS_AUTO);
        conn.enable(init::PARALLEL_DIROPS);
        conn.enable(init::ASYNC_READ);
        Ok(())
    }

    fn destroy(&self) {
        for f in self.open_files() {
            if let Err(e) = f.drain(&self.io) {
                tracing::error!(fh = f.fh, error = %e, "writes lost at unmount");
            }
            f.close();
        }
        for c in self.io.all_clients() {
            c.close();
        }
    }

    fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    fn node_ids_as_inos(&self) -> bool {
        true
    }

    fn getattr(&self, _ctx: &Ctx, path: &Path, fh: Option<FileHandle>) -> FsResult<FileAttr> {
        let rp = self.rpath(path)?;
        let file = fh.and_then(|h| self.file(h).ok());
        let mut a = match &file {
            // (A file read ahead whole has no handle to ask: by path.)
            Some(f) if !self.opts.workaround_fstat && !f.has_whole() => {
                let rh = f.handle(&self.io)?;
                match self.io.client.call_on(
                    &rh.conn,
                    &Request::Fstat { handle: &rh.handle },
                    self.deadline(),
                ) {
                    Ok(Reply::Attrs(a)) => a,
                    Ok(r) => return Err(ok_status(&r).err().unwrap_or(Errno::EPROTO)),
                    Err(CallError::Errno(e)) => return Err(e),
                    Err(CallError::Unknown) => self.stat_path(&rp)?,
                }
            }
            _ => self.stat_path(&rp)?,
        };
        if let Some(end) = self.unconfirmed_end(&rp, fh) {
            a.size = Some(a.size.unwrap_or(0).max(end));
        }
        let mut attr = self.attr(&a);
        if let Some(f) = &file {
            f.set_size_hint(a.size.unwrap_or(0));
            if f.is_gone() {
                // Unlinked while open (fstat after unlink): no name left.
                attr.nlink = 0;
            }
        }
        Ok(attr)
    }

    fn setattr(&self, _ctx: &Ctx, path: &Path, attr: &SetAttr) -> FsResult<FileAttr> {
        let rp = self.rpath(path)?;
        if attr.size.is_some() {
            self.settle(&rp)?;
        }
        let a = self.set_attrs(&rp, attr)?;
        let file = attr.fh.and_then(|h| self.file(h).ok());
        if attr.size.is_some() {
            self.data_changed(&rp, false);
            for f in self.open_files() {
                if f.path() == rp {
                    f.forget_readahead();
                }
            }
        }
        let replies = match &file {
            Some(f) => {
                let rh = f.handle(&self.io)?;
                self.batch_on(
                    &rh.conn,
                    &[
                        Request::Fsetstat {
                            handle: &rh.handle,
                            attrs: a,
                        },
                        Request::Fstat { handle: &rh.handle },
                    ],
                    self.deadline(),
                )
                .map_err(|e| match e {
                    CallError::Errno(e) => e,
                    CallError::Unknown => Errno::EIO,
                })?
            }
            None => {
                // Times and modes of a symlink itself need lsetstat
                // (setstat follows it); where the server has it, it is
                // used for everything but a size (it takes none), and no
                // look at the file is needed first.
                let lsetstat = self.io.client.info()?.lsetstat;
                let req = if a.size.is_none() && lsetstat {
                    Request::Lsetstat {
                        path: &rp,
                        attrs: a,
                    }
                } else {
                    let link = a.size.is_none()
                        && self
                            .stat_path(&rp)
                            .is_ok_and(|cur| Self::kind(&cur) == libc::S_IFLNK);
                    if link {
                        return Err(Errno::EOPNOTSUPP);
                    }
                    Request::Setstat {
                        path: &rp,
                        attrs: a,
                    }
                };
                self.batch(&[req, Request::Lstat { path: &rp }])?
            }
        };
        if let Err(e) = ok_status(&replies[0]) {
            self.cache.attrs_changed(&rp);
            return Err(if failure(&replies[0]) && a.uid_gid.is_some() {
                Errno::EPERM
            } else {
                e
            });
        }
        let mut got = match &replies[1] {
            Reply::Attrs(a) => *a,
            r => return Err(ok_status(r).err().unwrap_or(Errno::EPROTO)),
        };
        if let Some(end) = self.unconfirmed_end(&rp, attr.fh) {
            got.size = Some(got.size.unwrap_or(0).max(end));
            self.cache.attrs_changed(&rp);
        } else {
            self.cache.made(&rp, got);
        }
        Ok(self.attr(&got))
    }

    fn readlink(&self, _ctx: &Ctx, path: &Path, out: &mut DataOut) -> FsResult<()> {
        let rp = self.rpath(path)?;
        let target = match self.cache.link(&rp) {
            Some(t) => t,
            None => {
                let e = self.cache.epoch();
                match self.io.client.call(&Request::Readlink { path: &rp })? {
                    Reply::Name(mut v) if !v.is_empty() => {
                        let t = Arc::new(v.swap_remove(0).name);
                        self.cache.put_link(&rp, t.clone(), e);
                        t
                    }
                    r => return Err(ok_status(&r).err().unwrap_or(Errno::EPROTO)),
                }
            }
        };
        out.extend_from_slice(&self.target_out(&rp, &target)?);
        Ok(())
    }

    fn symlink(&self, _ctx: &Ctx, target: &OsStr, link_path: &Path) -> FsResult<FileAttr> {
        let rp = self.rpath(link_path)?;
        let openssh_order = self.io.client.info()?.openssh_symlink;
        let req = Request::Symlink {
            link: &rp,
            target: target.as_bytes(),
            openssh_order,
        };
        let (r, st, _) = self.once_stat(&req, &rp, || {
            self.fresh_lstat(&rp)
                .is_some_and(|a| Self::kind(&a) == libc::S_IFLNK)
        })?;
        if failure(&r) {
            self.cache.changed(&rp);
            return Err(self.diagnose_exists(&rp));
        }
        ok_status(&r)?;
        let a = st.or_else(|| self.fresh_lstat(&rp)).ok_or(Errno::EIO)?;
        self.cache.made(&rp, a);
        Ok(self.attr(&a))
    }

    fn mknod(&self, ctx: &Ctx, path: &Path, args: &Mknod) -> FsResult<FileAttr> {
        // SFTP creates regular files only (no FIFOs, sockets or devices).
        if args.mode & libc::S_IFMT != libc::S_IFREG {
            return Err(Errno::EPERM);
        }
        let (attr, opened) = self.create(
            ctx,
            path,
            &Create {
                flags: libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
                mode: args.mode,
                umask: args.umask,
                kill_suidgid: false,
            },
        )?;
        let _ = self.release(
            ctx,
            path,
            &Release {
                fh: opened.fh,
                flags: 0,
                flush: false,
                flock_unlock: false,
                lock_owner: 0,
                forget_follows: false,
            },
        );
        Ok(attr)
    }

    fn mkdir(&self, _ctx: &Ctx, path: &Path, args: &Mkdir) -> FsResult<FileAttr> {
        let rp = self.rpath(path)?;
        let want = args.mode & 0o7777;
        let before = self.cache.epoch();
        let req = Request::Mkdir {
            path: &rp,
            attrs: Attrs {
                perm: Some(want),
                ..Attrs::default()
            },
        };
        let (r, st, answered) = self.once_stat(&req, &rp, || {
            self.fresh_lstat(&rp)
                .is_some_and(|a| Self::kind(&a) == libc::S_IFDIR)
        })?;
        if failure(&r) {
            self.cache.changed(&rp);
            return Err(self.diagnose_exists(&rp));
        }
        ok_status(&r)?;
        let mut a = st.or_else(|| self.fresh_lstat(&rp)).ok_or(Errno::EIO)?;
        if a.perm.is_some_and(|p| p & 0o7777 != want) {
            // The server's umask took bits the caller asked for.
            let fix = Request::Setstat {
                path: &rp,
                attrs: Attrs {
                    perm: Some(want),
                    ..Attrs::default()
                },
            };
            if self
                .io
                .client
                .call(&fix)
                .is_ok_and(|r| ok_status(&r).is_ok())
            {
                a.perm = Some(libc::S_IFDIR | want);
            }
        }
        if answered == Answered::ByServer {
            self.cache.made_dir(&rp, a, before);
        } else {
            self.cache.changed(&rp);
        }
        Ok(self.attr(&a))
    }

    fn unlink(&self, _ctx: &Ctx, path: &Path) -> FsResult<()> {
        let rp = self.rpath(path)?;
        let r = self.once(&Request::Remove { path: &rp }, || !self.exists(&rp))?;
        if ok_status(&r).is_err() {
            self.cache.changed(&rp);
        }
        if failure(&r)
            || matches!(r, Reply::Status { code, .. } if code == status::PERMISSION_DENIED)
        {
            if let Some(a) = self.fresh_lstat(&rp) {
                if Self::kind(&a) == libc::S_IFDIR {
                    return Err(Errno::EISDIR);
                }
            }
        }
        ok_status(&r)?;
        for f in self.open_files() {
            if f.path() == rp {
                f.mark_gone();
            }
        }
        self.cache.removed(&rp);
        self.stamps.invalidate(&rp);
        self.data_changed(&rp, false);
        Ok(())
    }

    fn rmdir(&self, _ctx: &Ctx, path: &Path) -> FsResult<()> {
        let rp = self.rpath(path)?;
        let r = self.once(&Request::Rmdir { path: &rp }, || !self.exists(&rp))?;
        if ok_status(&r).is_err() {
            self.cache.changed(&rp);
        }
        if failure(&r) {
            return Err(match self.fresh_lstat(&rp) {
                Some(a) if Self::kind(&a) != libc::S_IFDIR => Errno::ENOTDIR,
                Some(_) if self.dir_nonempty(&rp) => Errno::ENOTEMPTY,
                Some(_) => Errno(libc::EBUSY),
                None => Errno::ENOENT,
            });
        }
        if matches!(r, Reply::Status { code, .. } if code == status::NO_SUCH_FILE) {
            if let Some(a) = self.fresh_lstat(&rp) {
                if Self::kind(&a) != libc::S_IFDIR {
                    return Err(Errno::ENOTDIR);
                }
            }
        }
        ok_status(&r)?;
        self.cache.removed_tree(&rp);
        Ok(())
    }

    fn rename(&self, _ctx: &Ctx, from: &Path, to: &Path, flags: u32) -> FsResult<()> {
        if flags & libc::RENAME_EXCHANGE != 0 {
            return Err(Errno::EINVAL);
        }
        let rf = self.rpath(from)?;
        let rt = self.rpath(to)?;
        if rf == rt {
            return Ok(());
        }
        self.settle(&rf)?;
        let noreplace = flags & libc::RENAME_NOREPLACE != 0;
        let info = self.io.client.info()?;
        // Whether a drop mid-rename left it done: the source is gone and
        // something is at the target.
        let applied = || !self.exists(&rf) && self.exists(&rt);
        let r = if noreplace || !info.posix_rename {
            let plain = Request::Rename { from: &rf, to: &rt };
            let r = self.once(&plain, applied)?;
            if failure(&r) && !noreplace && self.opts.workaround_rename && self.exists(&rt) {
                // The server cannot replace: remove, then rename (not
                // atomic; sshfs's workaround=rename).
                let _ = self.io.client.call(&Request::Remove { path: &rt });
                self.once(&plain, applied)?
            } else {
                r
            }
        } else {
            self.once(&Request::PosixRename { from: &rf, to: &rt }, applied)?
        };
        if ok_status(&r).is_err() {
            self.cache.changed(&rf);
            self.cache.changed(&rt);
        }
        // Only a failure needs a look at the names (no round trip else).
        let from_attrs = if ok_status(&r).is_err() {
            self.fresh_lstat(&rf)
        } else {
            None
        };
        if failure(&r)
            || matches!(r, Reply::Status { code, .. } if code == status::NO_SUCH_FILE && from_attrs.is_some())
        {
            let to_attrs = self.fresh_lstat(&rt);
            return Err(match (from_attrs, to_attrs) {
                (None, _) => Errno::ENOENT,
                (Some(_), Some(_)) if noreplace => Errno::EEXIST,
                (Some(f), Some(t))
                    if Self::kind(&f) == libc::S_IFDIR && Self::kind(&t) != libc::S_IFDIR =>
                {
                    Errno::ENOTDIR
                }
                (Some(f), Some(t))
                    if Self::kind(&f) != libc::S_IFDIR && Self::kind(&t) == libc::S_IFDIR =>
                {
                    Errno::EISDIR
                }
                (Some(_), Some(t)) if Self::kind(&t) == libc::S_IFDIR && self.dir_nonempty(&rt) => {
                    Errno::ENOTEMPTY
                }
                (Some(f), _) if Self::kind(&f) == libc::S_IFDIR && is_below(&rt, &rf) => {
                    Errno::EINVAL
                }
                (Some(_), None) if self.fresh_lstat(parent_of(&rt)).is_none() => Errno::ENOENT,
                _ if self.opts.workaround_renamexdev => Errno::EXDEV,
                _ if !info.posix_rename => Errno::EEXIST,
                _ => Errno::EPERM,
            });
        }
        ok_status(&r)?;
        // Files open at the target lost their name to the source's file:
        // they must never be reopened by it.
        for f in self.open_files() {
            let p = f.path();
            if p == rt || is_below(&p, &rt) {
                f.mark_gone();
            }
        }
        self.moved(&rf, &rt);
        self.data_changed(&rf, true);
        self.data_changed(&rt, true);
        if let Some(s) = self.stamps.remove(&rf) {
            self.stamps.insert(rt.clone(), s);
        }
        self.cache.removed_tree(&rf);
        self.cache.there(&rt);
        Ok(())
    }

    fn link(&self, _ctx: &Ctx, existing: &Path, new: &Path) -> FsResult<FileAttr> {
        if self.opts.disable_hardlink {
            return Err(Errno::ENOSYS);
        }
        if !self.io.client.info()?.hardlink {
            return Err(Errno::EOPNOTSUPP);
        }
        let re = self.rpath(existing)?;
        let rn = self.rpath(new)?;
        let (r, st, _) = self.once_stat(
            &Request::Hardlink {
                existing: &re,
                new: &rn,
            },
            &rn,
            || self.exists(&rn),
        )?;
        if failure(&r) {
            self.cache.changed(&rn);
            return Err(self.diagnose_exists(&rn));
        }
        ok_status(&r)?;
        let a = st.or_else(|| self.fresh_lstat(&rn)).ok_or(Errno::EIO)?;
        self.cache.attrs_changed(&re);
        self.cache.made(&rn, a);
        Ok(self.attr(&a))
    }

    fn open(&self, _ctx: &Ctx, path: &Path, args: &Open) -> FsResult<Opened> {
        let rp = self.rpath(path)?;
        let pf = pflags_of(args.flags) & !(pflags::CREAT | pflags::EXCL);
        if pf & pflags::TRUNC != 0 {
            self.settle(&rp)?;
            self.cache.attrs_changed(&rp);
            self.data_changed(&rp, false);
        }
        let read_only = pf & (pflags::WRITE | pflags::APPEND | pflags::TRUNC) == 0;
        if read_only {
            if let Some((data, a)) = self.small.take(&rp) {
                // Read ahead with its directory, and unchanged since: no
                // round trip (opened on the server only if a handle is
                // needed).
                if let Some(pc) = &self.pages {
                    pc.opened(&rp, (a.times.map_or(0, |t| t.1), a.size.unwrap_or(0)));
                }
                let f = OpenFile::new(self.new_fh(), rp.clone(), pf, a.size.unwrap_or(0))
                    .with_whole(data);
                let flags = self.open_flags(&rp, &a);
                return Ok(Opened {
                    fh: FileHandle(self.register(f)),
                    flags,
                    backing_id: 0,
                });
            }
        }
        let (rh, a) = loop {
            match self.open_remote(&rp, pf, None) {
                Ok(x) => break x,
                Err(OpenFailure::Unknown) => continue,
                Err(OpenFailure::Failure) => return Err(self.diagnose_create(&rp, false)),
                Err(OpenFailure::Errno(e)) => return Err(e),
            }
        };
        if pf & pflags::TRUNC != 0 {
            self.cache.made(&rp, a);
        } else {
            self.cache.seen(&rp, a);
        }
        if let Some(pc) = &self.pages {
            pc.opened(&rp, (a.times.map_or(0, |t| t.1), a.size.unwrap_or(0)));
        }
        let f = OpenFile::new(self.new_fh(), rp.clone(), pf, a.size.unwrap_or(0));
        f.set_remote(rh);
        let flags = self.open_flags(&rp, &a);
        if read_only && a.perm.is_some_and(|p| p & libc::S_IFMT == libc::S_IFREG) {
            self.small.opened(&rp);
        }
        Ok(Opened {
            fh: FileHandle(self.register(f)),
            flags,
            backing_id: 0,
        })
    }

    fn read(&self, _ctx: &Ctx, _path: &Path, args: &Read, out: &mut DataOut) -> FsResult<()> {
        let f = self.file(args.fh)?;
        match &self.pages {
            Some(pc) => self.read_paged(pc, &f, args.offset, args.size, out),
            None => f.read(&self.io, args.offset, args.size, out),
        }
    }

    fn write(&self, _ctx: &Ctx, _path: &Path, args: &Write) -> FsResult<u32> {
        let f = self.file(args.fh)?;
        let path = f.path();
        self.data_changed(&path, false);
        let n = f.write(&self.io, args.offset, args.data)?;
        self.cache.attrs_changed(&path);
        Ok(n)
    }

    fn flush(&self, _ctx: &Ctx, _path: &Path, fh: FileHandle, _lock_owner: u64) -> FsResult<()> {
        self.file(fh)?.drain(&self.io)
    }

    fn release(&self, _ctx: &Ctx, _path: &Path, args: &Release) -> FsResult<()> {
        let Some(f) = self
            .files
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&args.fh.0)
        else {
            return Ok(());
        };
        if let Err(e) = f.drain(&self.io) {
            tracing::error!(fh = f.fh, path = %String::from_utf8_lossy(&f.path()), error = %e, "writes not confirmed at release");
            // Nothing will send them again once the handle is gone.
            f.abandon(&self.io, e);
        }
        if f.written.load(Ordering::Relaxed) {
            // The page cache holds what was written: keep it on the next
            // open if nobody else changes the file meanwhile. Ask before
            // the CLOSE, on the same connection (answered in order).
            let rp = f.path();
            self.cache.attrs_changed(&rp);
            if let Ok(rh) = f.handle(&self.io) {
                let stamps = self.stamps.clone();
                rh.conn
                    .call_back(&Request::Fstat { handle: &rh.handle }, move |r| {
                        if let Ok(Reply::Attrs(a)) = r {
                            stamps.insert(rp, (a.times.map_or(0, |t| t.1), a.size.unwrap_or(0)));
                        }
                    });
            }
        }
        f.close();
        Ok(())
    }

    fn fsync(&self, _ctx: &Ctx, _path: &Path, fh: FileHandle, _datasync: bool) -> FsResult<()> {
        let f = self.file(fh)?;
        f.drain(&self.io)?;
        if self.io.client.info()?.fsync {
            let rh = f.handle(&self.io)?;
            let r = self
                .io
                .client
                .call_on(
                    &rh.conn,
                    &Request::Fsync { handle: &rh.handle },
                    self.deadline(),
                )
                .map_err(|e| match e {
                    CallError::Errno(e) => e,
                    CallError::Unknown => Errno::EIO,
                })?;
            ok_status(&r)?;
        }
        Ok(())
    }

    fn opendir(&self, _ctx: &Ctx, path: &Path, _args: &Open) -> FsResult<Opened> {
        let rp = self.rpath(path)?;
        let l = self.list(&rp)?;
        self.lister.opened(&rp, &l);
        let fh = self.new_fh();
        self.dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(fh, l);
        Ok(Opened::handle(fh))
    }

    fn readdir(
        &self,
        ctx: &Ctx,
        path: &Path,
        fh: FileHandle,
        offset: u64,
        filler: &mut dyn FnMut(&OsStr, FileType, u64, u64) -> bool,
    ) -> FsResult<()> {
        self.readdirplus(ctx, path, fh, offset, &mut |n, k, i, o, _| {
            filler(n, k, i, o)
        })
    }

    fn readdirplus(
        &self,
        _ctx: &Ctx,
        _path: &Path,
        fh: FileHandle,
        offset: u64,
        filler: &mut PlusFiller<'_>,
    ) -> FsResult<()> {
        let l = self
            .dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)?;
        // Offsets: 1 and 2 for . and .., then 3 + the entry's index.
        for (i, dot) in [".", ".."].iter().enumerate() {
            if offset <= i as u64
                && !filler(OsStr::new(dot), FileType::Directory, 0, i as u64 + 1, None)
            {
                return Ok(());
            }
        }
        let start = offset.saturating_sub(2) as usize;
        for (i, e) in l.entries.iter().enumerate().skip(start) {
            let attr = self.attr(&e.attrs);
            let kind = attr.kind().unwrap_or(FileType::RegularFile);
            // Stale attributes (changed through the mount since the
            // listing) are not handed out; the kernel looks the name up.
            let given = e.current.then_some(&attr);
            if !filler(OsStr::from_bytes(&e.name), kind, 0, i as u64 + 3, given) {
                break;
            }
        }
        Ok(())
    }

    fn releasedir(&self, _ctx: &Ctx, _path: &Path, args: &Release) -> FsResult<()> {
        self.dirs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&args.fh.0);
        Ok(())
    }

    fn statfs(&self, _ctx: &Ctx, path: &Path) -> FsResult<Statfs> {
        let rp = self.rpath(path)?;
        if self.io.client.info()?.statvfs {
            return self.statvfs(&rp);
        }
        // No statvfs@openssh.com: numbers df(1) shows as unknown.
        Ok(Statfs {
            namelen: 255,
            bsize: 4096,
            frsize: 4096,
            blocks: 0,
            bfree: 0,
            bavail: 0,
            files: 0,
            ffree: 0,
        })
    }

    fn create(&self, _ctx: &Ctx, path: &Path, args: &Create) -> FsResult<(FileAttr, Opened)> {
        let rp = self.rpath(path)?;
        let pf = pflags_of(args.flags) | pflags::CREAT;
        let excl = pf & pflags::EXCL != 0;
        let want = args.mode & 0o7777;
        let (rh, mut a) = loop {
            match self.open_remote(&rp, pf, Some(want)) {
                Ok(x) => break x,
                Err(OpenFailure::Failure) => {
                    self.cache.changed(&rp);
                    return Err(self.diagnose_create(&rp, excl));
                }
                Err(OpenFailure::Errno(e)) => return Err(e),
                Err(OpenFailure::Unknown) if !excl => continue,
                Err(OpenFailure::Unknown) => {
                    // An exclusive create whose answer was lost: if the
                    // file is there now, it is ours (exact while nobody
                    // else creates the same name at that moment).
                    if self.exists(&rp) {
                        match self.open_remote(
                            &rp,
                            pf & !(pflags::EXCL | pflags::TRUNC | pflags::CREAT),
                            None,
                        ) {
                            Ok(x) => break x,
                            Err(OpenFailure::Errno(e)) => return Err(e),
                            Err(_) => return Err(Errno::EIO),
                        }
                    }
                    continue;
                }
            }
        };
        // The server's umask (or workaround=createmode's mode 0) may have
        // taken bits the caller asked for.
        self.fix_mode(&rh, &mut a, want);
        self.cache.made(&rp, a);
        if pf & pflags::TRUNC != 0 {
            self.data_changed(&rp, false);
        }
        let f = OpenFile::new(self.new_fh(), rp.clone(), pf, 0);
        f.set_remote(rh);
        let flags = self.open_flags(&rp, &a);
        let fh = self.register(f);
        Ok((
            self.attr(&a),
            Opened {
                fh: FileHandle(fh),
                flags,
                backing_id: 0,
            },
        ))
    }

    fn copy_file_range(
        &self,
        _ctx: &Ctx,
        _path_in: &Path,
        _path_out: &Path,
        args: &CopyFileRange,
    ) -> FsResult<u64> {
        if !self.io.client.info()?.copy_data {
            return Err(Errno::EOPNOTSUPP);
        }
        let fin = self.file(args.fh_in)?;
        let fout = self.file(args.fh_out)?;
        fin.drain(&self.io)?;
        fout.drain(&self.io)?;
        let hin = fin.handle(&self.io)?;
        let hout = fout.handle(&self.io)?;
        if !Arc::ptr_eq(&hin.conn, &hout.conn) {
            return Err(Errno::EXDEV);
        }
        // copy-data copies what there is without saying how much: the
        // source's size says.
        let size = match self.io.client.call_on(
            &hin.conn,
            &Request::Fstat {
                handle: &hin.handle,
            },
            self.deadline(),
        ) {
            Ok(Reply::Attrs(a)) => a.size.unwrap_or(0),
            _ => return Err(Errno::EIO),
        };
        let len = args.len.min(size.saturating_sub(args.off_in));
        if len == 0 {
            return Ok(0);
        }
        let r = self
            .io
            .client
            .call_on(
                &hin.conn,
                &Request::CopyData {
                    from: &hin.handle,
                    from_offset: args.off_in,
                    len,
                    to: &hout.handle,
                    to_offset: args.off_out,
                },
                self.deadline(),
            )
            .map_err(|e| match e {
                CallError::Errno(e) => e,
                CallError::Unknown => Errno::EIO,
            })?;
        ok_status(&r)?;
        fout.forget_readahead();
        self.data_changed(&fout.path(), false);
        self.cache.attrs_changed(&fout.path());
        Ok(len)
    }

    fn drop_cached_data(&self, path: &Path) {
        if let Ok(rp) = self.rpath(path) {
            self.data_changed(&rp, false);
        }
    }

    fn adopt_held_area(&self, area: fusebox::sys::shared_map::SharedMap) {
        // Before any write is served: the anonymous log has nothing yet.
        let log = WriteLog::open(area);
        tracing::debug!(bytes_in_use = log.used(), "write log adopted");
        // A handle number a logged write names is never given to another
        // file (its writes are sent again by that number).
        if let Some(max) = log.unconfirmed().iter().map(|p| p.fh).max() {
            self.next_fh.fetch_max(max + 1, Ordering::Relaxed);
        }
        self.io.set_log(log);
    }

    fn restored(&self) {
        self.replay_orphans();
    }

    fn counters(&self) -> Vec<FsCounter> {
        let mut sent: Vec<(&'static str, u64)> = Vec::new();
        for c in self.io.all_clients() {
            for (name, n) in c.counts().snapshot() {
                match sent.iter_mut().find(|(s, _)| *s == name) {
                    Some((_, total)) => *total += n,
                    None => sent.push((name, n)),
                }
            }
        }
        let mut out: Vec<FsCounter> = sent
            .into_iter()
            .map(|(name, n)| FsCounter::new(format!("sftp.{name}"), n))
            .collect();
        let made: u64 = self.io.all_clients().map(|c| c.connections_made()).sum();
        // A connection's first is not a reconnect (one never needed made
        // none).
        let reconnects: u64 = self
            .io
            .all_clients()
            .map(|c| c.connections_made().saturating_sub(1))
            .sum();
        out.push(FsCounter::new("connections.made", made));
        out.push(FsCounter::new("connections.reconnects", reconnects));
        let (hits, misses) = self.cache.counts();
        out.push(FsCounter::new("metadata_cache.hits", hits));
        out.push(FsCounter::new("metadata_cache.misses", misses));
        out.push(FsCounter::new(
            "metadata_cache.listings_fetched_ahead",
            self.lister.fetched_ahead(),
        ));
        if let Some(p) = &self.pages {
            let (hits, misses) = p.counts();
            out.push(FsCounter::new("page_cache.hits", hits));
            out.push(FsCounter::new("page_cache.misses", misses));
        }
        let (fetched, taken) = self.small.counts();
        out.push(FsCounter::new("small_files_ahead.fetched", fetched));
        out.push(FsCounter::new("small_files_ahead.taken", taken));
        out.push(FsCounter::new("memory.readahead_bytes", self.io.held()));
        out.push(FsCounter::new(
            "memory.unconfirmed_write_bytes",
            self.io.log().used(),
        ));
        out
    }

    fn quiesce(&self) -> std::io::Result<()> {
        // The next server reads the same log: nothing may still be on its
        // way on this server's connection when it does.
        for f in self.open_files() {
            f.drain(&self.io).map_err(|e| {
                std::io::Error::other(format!("writes of an open file stayed unconfirmed: {e}"))
            })?;
        }
        Ok(())
    }

    fn restore_handle(&self, path: &Path, handle: &HandleRecord) -> FsResult<()> {
        let rp = self.rpath(path)?;
        self.next_fh.fetch_max(handle.fh + 1, Ordering::Relaxed);
        if handle.dir {
            let l = self.list(&rp)?;
            self.dirs
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(handle.fh, l);
            return Ok(());
        }
        // Reopened on its first use (`OpenFile::handle`), on whatever
        // connection is live then.
        let pf = pflags_of(handle.flags as i32) & !(pflags::CREAT | pflags::EXCL | pflags::TRUNC);
        self.register(OpenFile::new(handle.fh, rp, pf, 0));
        Ok(())
    }
}
