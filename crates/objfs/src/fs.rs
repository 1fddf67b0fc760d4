//! objfs as a [`PathFilesystem`]: paths are keys under the mount's
//! prefix, open files for writing are staged (`staging`), everything else
//! is asked of the store and cached for the mount's timeouts.
//!
//! Consistency, as users see it:
//! - close-to-open: close(2) and fsync(2) of a changed file put it whole
//!   (one PUT, or one multipart upload completed at once); the store never
//!   holds part of a write. With `upload=close` (the default) close
//!   returns once it is there; another client opening the key after that
//!   (and after its own metadata timeout) reads the new bytes.
//! - the last complete upload of a key wins; two writers never mix.
//! - names and attributes are trusted for `attr_timeout`/`entry_timeout`,
//!   absent names for `negative_timeout`; changes made through this mount
//!   are seen at once by it.
//! - a listing gives sizes and Last-Modified but no user metadata (S3
//!   lists none). With `attrs=listing` (the default) `ls -l` and a lookup
//!   by name both answer from it, with the metadata this mount knows for
//!   that version of the object, else the mount's defaults: a stat of
//!   every name in a directory costs its listing, not a request each.
//!   With `attrs=head` a lookup reads the object's metadata (HEAD) once
//!   per attribute timeout.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use fusebox::fs::ops::*;
use fusebox::fs::PlusFiller;
use fusebox::protocol::{Connection, DataOut, Notifier};
use fusebox::recovery::HandleRecord;
use fusebox::stats::FsCounter;
use fusebox::*;
use tokio::runtime::Runtime;
use tokio::sync::Semaphore;

use crate::meta::{Meta, DIRECTORY_TYPE};
use crate::options::{Attrs, BucketUrl, ObjOptions, Upload};
use crate::reader::{ReadConfig, Reader};
use crate::staging::{Record, Staging};
use crate::store::{Body, ObjectInfo, Store, StoreError};
use crate::stream::PartStream;

/// Why objfs could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The staging directory could not be made or read.
    #[error("staging area {0}: {1}")]
    Staging(PathBuf, std::io::Error),
    /// The async runtime could not start.
    #[error("starting the runtime: {0}")]
    Runtime(std::io::Error),
    /// The bucket could not be opened.
    #[error("{url}: {error}")]
    Store {
        /// The bucket.
        url: String,
        /// What the store said.
        error: StoreError,
    },
}

/// What a name is, as far as objfs knows.
#[derive(Clone, Debug)]
enum Known {
    /// An object: its size, tag and metadata; `exact` once the metadata
    /// was read (HEAD) or written by this mount, not guessed from a
    /// listing.
    File {
        size: u64,
        etag: Option<String>,
        meta: Meta,
        exact: bool,
    },
    /// A prefix (with or without a marker object).
    Dir { meta: Meta },
    /// Nothing there.
    Missing,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EntryKind {
    File,
    Dir,
}

/// The most LIST requests a lookup spends listing a directory whole
/// (1,000 names each): past that, a lookup asks about its own name only.
const LOOKUP_LISTING_PAGES: usize = 10;

/// The most names the cached listings hold together (about 150 bytes
/// each).
const LISTED_NAMES: u64 = 400_000;

/// How long an unmounted server waits for the store to take one more
/// pending upload, while uploads fail, before leaving the rest in the
/// journal and exiting.
const DRAIN_STALL: Duration = Duration::from_secs(30);

/// How long a server paused for an upgrade waits for its uploads under
/// way to finish before it gives the upgrade up.
const QUIESCE_WAIT: Duration = Duration::from_secs(20);

/// What lookups learned of a directory's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DirSize {
    /// Not listed yet: one name was asked about.
    Unknown,
    /// Listed by a lookup already.
    Listed,
    /// More than [`LOOKUP_LISTING_PAGES`] pages.
    Large,
}

/// A directory's listing: names with what the listing said of them.
struct Listing {
    at: Instant,
    entries: Mutex<BTreeMap<String, (EntryKind, Option<ObjectInfo>)>>,
}

/// A file staged on local disk: open for writing, or closed and waiting
/// for its upload.
struct Staged {
    id: u64,
    file: Arc<File>,
    meta: Meta,
    /// Handles open for writing on it.
    writers: u32,
    /// Changed since it was last sealed for upload.
    dirty: bool,
    /// A journal record is waiting for its upload.
    pending: bool,
    /// When the background uploader may send it: `write_back` after its
    /// last close, so a file written and then renamed, chmodded or
    /// rewritten at once (editors, tar, git, build tools) goes up once,
    /// under its final name.
    upload_after: Instant,
    /// The store may hold an object under this key: it did when the file
    /// was staged, or an upload of it has started. A rename of a file it
    /// never held (a temp file renamed into place before its upload)
    /// sends no DELETE.
    in_store: bool,
    /// The multipart upload following a file written from its end
    /// (`upload=close`): its close sends only what is left.
    stream: Option<PartStream>,
    /// Written out of order since its last upload: not streamed.
    no_stream: bool,
}

enum Handle {
    /// Reading an object in the store, with its attributes when opened
    /// (close-to-open: an open file's attributes are those it was opened
    /// with).
    Remote(Reader, FileAttr),
    /// Reading or writing a staged file (by id; the staged entry may have
    /// moved to another key by rename, or been unlinked).
    Staged {
        id: u64,
        file: Arc<File>,
        writes: bool,
    },
    /// A directory being listed: a snapshot taken when opened.
    Dir(DirList),
}

/// A handle and how many opens the kernel holds on it: the writers of a
/// staged file share one handle (its id, which names its data file and
/// survives a restart), and the kernel releases each open on its own,
/// possibly after the next open of the same file has begun.
struct OpenHandle {
    handle: Arc<Handle>,
    opens: u32,
}

/// A directory's entries: name, type, attributes where known.
type DirList = Vec<(OsString, FileType, Option<FileAttr>)>;

/// The staged files, by key and by id.
#[derive(Default)]
struct StagedTable {
    by_key: HashMap<String, Staged>,
    key_of: HashMap<u64, String>,
    /// Data files whose key was unlinked while handles still use them.
    orphans: HashMap<u64, u32>,
    /// When pending uploads fall due, earliest first, by id: the
    /// uploader takes what is due without looking at every staged file
    /// (a tar of thousands of files wakes it at every close). Every
    /// change of a pending file's `upload_after` adds an entry; entries
    /// that no longer match (uploaded, unlinked, rescheduled later) are
    /// dropped when they come up.
    due: BinaryHeap<Reverse<(Instant, u64)>>,
}

impl StagedTable {
    fn insert(&mut self, key: String, s: Staged) {
        if s.pending {
            self.schedule(s.id, s.upload_after);
        }
        self.key_of.insert(s.id, key.clone());
        self.by_key.insert(key, s);
    }

    fn schedule(&mut self, id: u64, at: Instant) {
        self.due.push(Reverse((at, id)));
    }

    /// The keys of the pending uploads due at `now`, each once.
    fn take_due(&mut self, now: Instant) -> Vec<String> {
        let mut keys = Vec::new();
        let mut seen = HashSet::new();
        while let Some(&Reverse((at, id))) = self.due.peek() {
            if at > now {
                break;
            }
            self.due.pop();
            let Some(key) = self.key_of.get(&id) else {
                continue;
            };
            let s = &self.by_key[key];
            if s.pending && s.upload_after <= now && seen.insert(id) {
                keys.push(key.clone());
            }
        }
        keys
    }

    /// When the earliest upload may fall due (maybe one already done).
    fn next_due(&self) -> Option<Instant> {
        self.due.peek().map(|Reverse((at, _))| *at)
    }

    fn remove(&mut self, key: &str) -> Option<Staged> {
        let s = self.by_key.remove(key)?;
        self.key_of.remove(&s.id);
        Some(s)
    }
}

/// Counters for `fusebox stats`.
#[derive(Default)]
struct Counts {
    uploads: AtomicU64,
    upload_bytes: AtomicU64,
    upload_retries: AtomicU64,
    /// Uploads sent in parts while their file was written.
    streamed: AtomicU64,
    cache_hits: AtomicU64,
    cache_misses: AtomicU64,
}

/// An S3 bucket (or a prefix of one) as a filesystem.
pub struct ObjFs {
    rt: Runtime,
    store: Arc<Store>,
    url: BucketUrl,
    o: ObjOptions,
    owner: (u32, u32),
    staging: Arc<Staging>,
    staged: Arc<Mutex<StagedTable>>,
    handles: RwLock<HashMap<u64, OpenHandle>>,
    known: moka::sync::Cache<String, (Instant, Known)>,
    /// The metadata last read or written for each key, by entity tag: a
    /// listing that shows the same tag shows these attributes (a listing
    /// carries no metadata), after the attribute timeout too.
    metas: Metas,
    listings: moka::sync::Cache<String, Arc<Listing>>,
    /// Directories a lookup asked the store about within the entry
    /// timeout: `Unknown` once (the next lookup there lists it whole),
    /// `Listed` after that, `Large` when that listing would take more
    /// than [`LOOKUP_LISTING_PAGES`] requests (lookups there ask by name).
    looked_in: moka::sync::Cache<String, DirSize>,
    link_targets: moka::sync::Cache<String, Vec<u8>>,
    /// The entity tag each key had when last opened for reading: the
    /// kernel keeps its cached pages of a file whose tag is unchanged.
    seen_tags: moka::sync::Cache<String, String>,
    read: ReadConfig,
    key_locks: KeyLocks,
    /// One lock per staged data file: held by its upload while the bytes
    /// stream, and by each write to it, so an upload never sends a file
    /// half old and half new.
    file_locks: Locks<u64>,
    /// The root's attributes: a bucket has no object for them, so they
    /// last as long as the mount.
    root: Mutex<Meta>,
    next_fh: AtomicU64,
    counts: Arc<Counts>,
    /// Wakes the background uploader.
    wake: Arc<tokio::sync::Notify>,
    /// Parts of streamed uploads in flight, across the mount:
    /// `concurrency` at most.
    stream_slots: Arc<Semaphore>,
    /// The metadata of journal records not resumed because their data
    /// changed after close (by id): a writer's restored handle takes it.
    unsealed_meta: Mutex<HashMap<u64, Meta>>,
    /// The staging area's lock while this server owns its journal.
    journal_lock: Mutex<Option<File>>,
    /// The background uploader runs (started at the first take-over).
    uploader_started: std::sync::atomic::AtomicBool,
    /// Held (shared) by every upload; held whole by a server paused for
    /// an upgrade, so none runs while the next server takes the journal.
    upload_gate: Arc<tokio::sync::RwLock<()>>,
    quiesced: Mutex<Option<tokio::sync::OwnedRwLockWriteGuard<()>>>,
}

fn now() -> Timespec {
    Timespec::now()
}

fn errno(e: StoreError) -> Errno {
    tracing::debug!("store: {e}");
    e.errno()
}

fn io_errno(e: std::io::Error) -> Errno {
    Errno(e.raw_os_error().unwrap_or(libc::EIO))
}

impl ObjFs {
    /// Opens the bucket (one listing, so a wrong bucket, key or endpoint
    /// fails here, before anything is mounted) and the staging area. The
    /// journal is taken over later, by [`Self::take_over_journal`]: at
    /// INIT on a mount, when the previous server of an upgrade has
    /// stopped using it.
    pub fn start(url: BucketUrl, o: ObjOptions, staging_dir: &Path) -> Result<ObjFs, StartError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("objfs-io")
            .enable_all()
            .build()
            .map_err(StartError::Runtime)?;
        let store = Arc::new(rt.block_on(Store::connect(&url, &o)));
        rt.block_on(store.check())
            .map_err(|error| StartError::Store {
                url: url.to_string(),
                error,
            })?;
        let staging =
            Staging::open(staging_dir).map_err(|e| StartError::Staging(staging_dir.into(), e))?;
        let ttl = o.attr_timeout.max(o.entry_timeout).max(o.negative_timeout);
        let chunks = (o.read_memory / o.part_size).max(1);
        let fs = ObjFs {
            read: ReadConfig {
                chunk: o.part_size,
                max_ahead: (o.readahead / o.part_size).clamp(1, o.concurrency as u64),
                budget: Arc::new(Semaphore::new(chunks as usize)),
            },
            rt,
            store,
            owner: (
                rustix::process::getuid().as_raw(),
                rustix::process::getgid().as_raw(),
            ),
            staging: Arc::new(staging),
            staged: Arc::default(),
            handles: RwLock::default(),
            known: moka::sync::Cache::builder()
                .max_capacity(200_000)
                .time_to_live(ttl.max(Duration::from_millis(1)))
                .build(),
            metas: moka::sync::Cache::new(200_000),
            // Weighed by names, least recently used out: a listing just
            // made must be kept (a frequency-based admission would refuse
            // a new directory's and have the next lookup list it again).
            listings: moka::sync::Cache::builder()
                .max_capacity(LISTED_NAMES)
                .weigher(|_, l: &Arc<Listing>| {
                    let n = l
                        .entries
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .len();
                    u32::try_from(n + 1).unwrap_or(u32::MAX)
                })
                .eviction_policy(moka::policy::EvictionPolicy::lru())
                .time_to_live(ttl.max(Duration::from_millis(1)))
                .build(),
            looked_in: moka::sync::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(o.entry_timeout.max(Duration::from_millis(1)))
                .build(),
            link_targets: moka::sync::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(o.attr_timeout.max(Duration::from_millis(1)))
                .build(),
            seen_tags: moka::sync::Cache::new(100_000),
            key_locks: KeyLocks::default(),
            file_locks: Locks::default(),
            root: Mutex::new(Meta {
                mode: libc::S_IFDIR | (0o777 & !o.umask),
                uid: rustix::process::getuid().as_raw(),
                gid: rustix::process::getgid().as_raw(),
                mtime: now(),
                ctime: now(),
            }),
            next_fh: AtomicU64::new(1),
            counts: Arc::default(),
            wake: Arc::default(),
            stream_slots: Arc::new(Semaphore::new(o.concurrency)),
            unsealed_meta: Mutex::default(),
            journal_lock: Mutex::default(),
            uploader_started: Default::default(),
            upload_gate: Arc::default(),
            quiesced: Mutex::default(),
            url,
            o,
        };
        Ok(fs)
    }

    /// Makes the staging area's journal this server's: its lock taken
    /// (waiting while another server holds it), its records staged files
    /// waiting for upload, the background uploader started. Called at
    /// INIT, or by a direct-mode run before it serves; again after an
    /// abandoned upgrade. Not earlier: an upgrade's next server is built
    /// while the old one still serves, and two servers must never upload,
    /// forget or remove the same staged files (nor hand out the same ids).
    pub fn take_over_journal(&self) -> std::io::Result<()> {
        let mut held = self
            .journal_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if held.is_some() {
            return Ok(());
        }
        let lock = self.staging.lock()?;
        let (records, ids) = self.staging.scan()?;
        if let Some(last) = ids.iter().max() {
            self.next_fh.fetch_max(last + 1, Ordering::Relaxed);
        }
        self.resume(records);
        *held = Some(lock);
        Ok(())
    }

    fn resume(&self, records: Vec<Record>) {
        let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
        // Taken again after an abandoned upgrade: what the other server
        // uploaded meanwhile (its record gone) is no longer pending here.
        let recorded: std::collections::HashSet<u64> = records.iter().map(|r| r.id).collect();
        let uploaded: Vec<String> = t
            .by_key
            .iter()
            .filter(|(_, s)| s.pending && s.writers == 0 && !recorded.contains(&s.id))
            .map(|(k, _)| k.clone())
            .collect();
        for key in uploaded {
            t.remove(&key);
        }
        for r in records {
            if t.key_of.contains_key(&r.id) {
                continue; // already staged here
            }
            let file = match self.staging.reopen(r.id) {
                Ok(f) => Arc::new(f),
                Err(e) => {
                    tracing::error!(
                        "objfs: journal record {} ({}) has no data: {e}",
                        r.id,
                        r.key
                    );
                    continue;
                }
            };
            match r.matches(&file) {
                Ok(true) => {}
                Ok(false) => {
                    // A writer still open when the server stopped seals
                    // it again once its handle is restored; otherwise the
                    // machine stopped before a file closed without fsync
                    // reached the disk.
                    tracing::warn!(
                        "objfs: {}: its staged data is not the size recorded at close, so it is \
                         not uploaded from that record (a writer still open seals it again; \
                         after a crash of the machine, the store keeps its last version)",
                        r.key
                    );
                    let _ = self.staging.forget(r.id);
                    self.unsealed_meta
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(r.id, r.meta());
                    continue;
                }
                Err(e) => {
                    tracing::error!("objfs: journal record {} ({}): {e}", r.id, r.key);
                    continue;
                }
            }
            // Two records for one key: the later one (higher id) wins.
            if let Some(old) = t.remove(&r.key) {
                let _ = self.staging.forget(old.id);
                self.staging.remove(old.id);
            }
            tracing::info!("objfs: resuming the upload of {}", r.key);
            t.insert(
                r.key.clone(),
                Staged {
                    id: r.id,
                    file,
                    meta: r.meta(),
                    writers: 0,
                    dirty: false,
                    pending: true,
                    upload_after: Instant::now(),
                    in_store: true,
                    stream: None,
                    no_stream: false,
                },
            );
        }
        drop(t);
        if !self.uploader_started.swap(true, Ordering::AcqRel) {
            let uploader = self.uploader();
            let wake = self.wake.clone();
            self.rt.spawn(async move { uploader.run(wake).await });
        }
        self.wake.notify_one();
    }

    fn uploader(&self) -> Uploader {
        Uploader {
            store: self.store.clone(),
            staging: self.staging.clone(),
            staged: self.staged.clone(),
            part_size: self.o.part_size,
            concurrency: self.o.concurrency,
            counts: self.counts.clone(),
            known: self.known.clone(),
            metas: self.metas.clone(),
            listings: self.listings.clone(),
            prefix: self.url.prefix.clone(),
            locks: self.key_locks.clone(),
            gate: self.upload_gate.clone(),
            file_locks: self.file_locks.clone(),
        }
    }

    fn key(&self, path: &Path) -> String {
        let rel = path.as_os_str().as_bytes();
        let rel = rel.strip_prefix(b"/").unwrap_or(rel);
        format!("{}{}", self.url.prefix, String::from_utf8_lossy(rel))
    }

    /// The prefix a directory's children share.
    fn dir_prefix(&self, key: &str) -> String {
        if key.len() == self.url.prefix.len() {
            key.to_string()
        } else {
            format!("{key}/")
        }
    }

    fn is_root(&self, key: &str) -> bool {
        key.len() == self.url.prefix.len()
    }

    fn parent_and_name<'k>(&self, key: &'k str) -> (String, &'k str) {
        parent_and_name(&self.url.prefix, key)
    }

    fn default_meta(&self, kind: u32, modified: i64) -> Meta {
        let perm = if kind == libc::S_IFDIR { 0o777 } else { 0o666 };
        let t = Timespec {
            sec: modified,
            nsec: 0,
        };
        Meta {
            mode: kind | (perm & !self.o.umask),
            uid: self.owner.0,
            gid: self.owner.1,
            mtime: t,
            ctime: t,
        }
    }

    fn attr(&self, kind: u32, size: u64, meta: &Meta) -> FileAttr {
        let mut a = FileAttr::synthetic(0, kind | (meta.mode & 0o7777), size, meta.mtime);
        a.ctime = meta.ctime;
        a.uid = meta.uid;
        a.gid = meta.gid;
        a.blksize = 1 << 20;
        a
    }

    fn attr_of(&self, k: &Known) -> Option<FileAttr> {
        match k {
            Known::File { size, meta, .. } => Some(self.attr(meta.kind(), *size, meta)),
            Known::Dir { meta, .. } => Some(self.attr(libc::S_IFDIR, 0, meta)),
            Known::Missing => None,
        }
    }

    fn remember(&self, key: &str, k: Known) {
        note_meta(&self.metas, key, &k);
        self.known.insert(key.to_string(), (Instant::now(), k));
    }

    /// The metadata of an object a listing shows, if this mount read or
    /// wrote that version of it.
    fn listed_meta(&self, key: &str, info: &ObjectInfo) -> Option<Meta> {
        let (tag, meta) = self.metas.get(key)?;
        (info.etag.as_ref() == Some(&tag)).then_some(meta)
    }

    fn cached(&self, key: &str) -> Option<Known> {
        let (at, k) = self.known.get(key)?;
        let ttl = match k {
            Known::Missing => self.o.negative_timeout,
            _ => self.o.attr_timeout,
        };
        (at.elapsed() < ttl).then_some(k)
    }

    fn staged_attr(&self, key: &str) -> Option<FileAttr> {
        let t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
        let s = t.by_key.get(key)?;
        let size = s.file.metadata().map_or(0, |m| m.len());
        Some(self.attr(s.meta.kind(), size, &s.meta))
    }

    /// Changes made through this mount: the parent's cached listing
    /// follows them.
    fn listed(&self, key: &str, entry: Option<(EntryKind, Option<ObjectInfo>)>) {
        let (parent, name) = self.parent_and_name(key);
        if let Some(l) = self.listings.get(&parent) {
            let mut e = l.entries.lock().unwrap_or_else(PoisonError::into_inner);
            match entry {
                Some(v) => e.insert(name.to_string(), v),
                None => e.remove(name),
            };
        }
    }

    fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// Whether a cached answer stands: with `attrs=head`, a file's
    /// metadata must have been read, not guessed from a listing.
    fn settled(&self, k: &Known) -> bool {
        self.o.attrs == Attrs::Listing || !matches!(k, Known::File { exact: false, .. })
    }

    /// What `key` is, and not a request while the answer is cached.
    /// Otherwise from its directory's listing: a cached one, or, for the
    /// second name asked about in a directory within the entry timeout,
    /// the directory listed whole (what `ls`, a build or a stat of many
    /// names asks next), up to [`LOOKUP_LISTING_PAGES`] requests. The
    /// first name, and names in larger directories, cost one listing
    /// that answers for a file and a directory of that name at once;
    /// with `attrs=head` a file's metadata costs a HEAD besides.
    fn lookup(&self, key: &str) -> FsResult<Known> {
        if let Some(k) = self.cached(key) {
            if self.settled(&k) {
                self.counts.cache_hits.fetch_add(1, Ordering::Relaxed);
                return Ok(k);
            }
        }
        self.counts.cache_misses.fetch_add(1, Ordering::Relaxed);
        if let Some(meta) = self.staged_marker(key) {
            let k = Known::Dir { meta };
            self.remember(key, k.clone());
            return Ok(k);
        }
        let (parent, name) = self.parent_and_name(key);
        // A listing answers for absence, presence and attributes at once.
        let fresh = self
            .o
            .negative_timeout
            .min(self.o.entry_timeout)
            .min(self.o.attr_timeout);
        let listing = match self.listings.get(&parent) {
            Some(l) if l.at.elapsed() < fresh => Some(l),
            // Nothing cached may be trusted: each lookup asks by name.
            _ if fresh.is_zero() => None,
            _ => match self.looked_in.get(&parent) {
                Some(DirSize::Unknown) => {
                    let l = self.listing(&parent, fresh, Some(LOOKUP_LISTING_PAGES))?;
                    self.looked_in.insert(
                        parent.clone(),
                        if l.is_some() {
                            DirSize::Listed
                        } else {
                            DirSize::Large
                        },
                    );
                    l
                }
                // Listed once this entry timeout, and the listing has
                // expired or was evicted: by name, not a listing storm.
                Some(DirSize::Listed | DirSize::Large) => None,
                None => {
                    self.looked_in.insert(parent.clone(), DirSize::Unknown);
                    None
                }
            },
        };
        let listed = listing.map(|l| {
            let e = l.entries.lock().unwrap_or_else(PoisonError::into_inner);
            e.get(name).cloned()
        });
        let found = match listed {
            Some(None) => Known::Missing,
            Some(Some((EntryKind::Dir, _))) => Known::Dir {
                meta: self.default_meta(libc::S_IFDIR, 0),
            },
            Some(Some((EntryKind::File, Some(info)))) => self.listed_file(key, info)?,
            Some(Some((EntryKind::File, None))) => self.head(key)?,
            None => self.probe(key)?,
        };
        self.remember(key, found.clone());
        Ok(found)
    }

    /// A file as a listing shows it: with the metadata this mount knows
    /// for that version, else (`attrs=listing`) the mount's defaults, or
    /// (`attrs=head`) the object's own, read by a HEAD.
    fn listed_file(&self, key: &str, info: ObjectInfo) -> FsResult<Known> {
        if let Some(meta) = self.listed_meta(key, &info) {
            return Ok(Known::File {
                size: info.size,
                etag: info.etag,
                meta,
                exact: true,
            });
        }
        match self.o.attrs {
            Attrs::Head => self.head(key),
            Attrs::Listing => Ok(Known::File {
                meta: self.default_meta(libc::S_IFREG, info.modified),
                size: info.size,
                etag: info.etag,
                exact: false,
            }),
        }
    }

    /// `key` as [`Self::lookup`] has it, with its metadata read where
    /// a listing only guessed it: what a write or a metadata change
    /// keeps must be the object's own, or a `touch` would reset another
    /// client's mode and owner to the mount's defaults.
    fn lookup_exact(&self, key: &str) -> FsResult<Known> {
        match self.lookup(key)? {
            Known::File { exact: false, .. } => {
                let k = self.head(key)?;
                self.remember(key, k.clone());
                Ok(k)
            }
            k => Ok(k),
        }
    }

    fn head(&self, key: &str) -> FsResult<Known> {
        match self.block_on(self.store.head(key)) {
            Ok(info) => Ok(self.known_file(info)),
            Err(StoreError::NotFound) => Ok(Known::Missing),
            Err(e) => Err(errno(e)),
        }
    }

    fn known_file(&self, info: ObjectInfo) -> Known {
        let meta = Meta::from_headers(
            info.metadata.as_ref(),
            self.default_meta(libc::S_IFREG, info.modified),
        );
        Known::File {
            size: info.size,
            etag: info.etag,
            meta,
            exact: true,
        }
    }

    /// One listing from `key`: a key equal to it is a file, a prefix
    /// `key/` a directory (which wins, as its subtree would otherwise be
    /// out of reach).
    fn probe(&self, key: &str) -> FsResult<Known> {
        let dir = format!("{key}/");
        let mut token = None;
        let mut file = None;
        loop {
            let page = self
                .block_on(self.store.list(key, Some("/"), 1000, token))
                .map_err(errno)?;
            let marker = page.objects.iter().find(|(k, _)| *k == dir);
            if page.prefixes.contains(&dir) || marker.is_some() {
                return Ok(Known::Dir {
                    meta: self.default_meta(libc::S_IFDIR, marker.map_or(0, |m| m.1.modified)),
                });
            }
            if let Some((_, info)) = page.objects.iter().find(|(k, _)| k == key) {
                file = Some(info.clone());
            }
            // Keys sort as bytes: once past `key/`, neither can follow.
            let past = page
                .objects
                .last()
                .map(|(k, _)| k.as_str())
                .into_iter()
                .chain(page.prefixes.last().map(String::as_str))
                .any(|k| k > dir.as_str());
            match page.next {
                Some(t) if !past => token = Some(t),
                _ => break,
            }
        }
        match file {
            Some(info) => self.listed_file(key, info),
            None => Ok(Known::Missing),
        }
    }

    /// Every entry of a directory, from the cache if listed less than
    /// `fresh` ago, or by listing its prefix (`ceil(N/1000)` requests, no
    /// HEAD); `None` if that would take more than `max_pages` requests.
    fn listing(
        &self,
        prefix: &str,
        fresh: Duration,
        max_pages: Option<usize>,
    ) -> FsResult<Option<Arc<Listing>>> {
        if let Some(l) = self.listings.get(prefix) {
            if l.at.elapsed() < fresh {
                return Ok(Some(l));
            }
        }
        let mut entries = BTreeMap::new();
        let mut token = None;
        for page_number in 1.. {
            if max_pages.is_some_and(|m| page_number > m) {
                return Ok(None);
            }
            let page = self
                .block_on(self.store.list(prefix, Some("/"), 1000, token))
                .map_err(errno)?;
            for (k, info) in page.objects {
                let name = &k[prefix.len()..];
                // A directory's marker, where a store lists it as an
                // object rather than folding it into a prefix.
                if let Some(dir) = name.strip_suffix('/') {
                    if usable_name(dir) {
                        entries.insert(dir.to_string(), (EntryKind::Dir, None));
                    }
                } else if usable_name(name) {
                    entries
                        .entry(name.to_string())
                        .or_insert((EntryKind::File, Some(info)));
                }
            }
            for p in page.prefixes {
                let name = p[prefix.len()..].trim_end_matches('/');
                if usable_name(name) {
                    entries.insert(name.to_string(), (EntryKind::Dir, None));
                }
            }
            match page.next {
                Some(t) => token = Some(t),
                None => break,
            }
        }
        let l = Arc::new(Listing {
            at: Instant::now(),
            entries: Mutex::new(entries),
        });
        self.listings.insert(prefix.to_string(), l.clone());
        Ok(Some(l))
    }

    fn new_fh(&self) -> u64 {
        self.next_fh.fetch_add(1, Ordering::Relaxed)
    }

    fn handle(&self, fh: FileHandle) -> FsResult<Arc<Handle>> {
        self.handles
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&fh.0)
            .map(|o| o.handle.clone())
            .ok_or(Errno::EBADF)
    }

    /// One more open of `fh`: a handle already there (a staged file's,
    /// shared by its writers) is kept and counted.
    fn add_handle(&self, fh: u64, h: Handle) {
        self.handles
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(fh)
            .and_modify(|o| o.opens += 1)
            .or_insert_with(|| OpenHandle {
                handle: Arc::new(h),
                opens: 1,
            });
    }

    /// One open of `fh` released: the handle, which leaves the table with
    /// its last open.
    fn release_handle(&self, fh: u64) -> Option<Arc<Handle>> {
        let mut handles = self.handles.write().unwrap_or_else(PoisonError::into_inner);
        let o = handles.get_mut(&fh)?;
        o.opens -= 1;
        let h = o.handle.clone();
        if o.opens == 0 {
            handles.remove(&fh);
        }
        Some(h)
    }

    /// A staged copy of `key` to change: the one already staged, or a new
    /// one (`contents`: download the object first; else empty;
    /// `in_store`: the store may hold the key).
    fn stage(
        &self,
        key: &str,
        meta: Meta,
        contents: bool,
        in_store: bool,
    ) -> FsResult<(u64, Arc<File>)> {
        if let Some(s) = self
            .staged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_key
            .get_mut(key)
        {
            s.writers += 1;
            return Ok((s.id, s.file.clone()));
        }
        let id = self.new_fh();
        let file = self.staging.create(id).map_err(io_errno)?;
        if contents {
            if let Err(e) = self.block_on(self.store.download(key, &file)) {
                self.staging.remove(id);
                return Err(errno(e));
            }
        }
        let file = Arc::new(file);
        let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
        // Another thread staged it meanwhile: use theirs.
        if let Some(s) = t.by_key.get_mut(key) {
            s.writers += 1;
            let out = (s.id, s.file.clone());
            drop(t);
            self.staging.remove(id);
            return Ok(out);
        }
        t.insert(
            key.to_string(),
            Staged {
                id,
                file: file.clone(),
                meta,
                writers: 1,
                dirty: !contents,
                pending: false,
                upload_after: Instant::now(),
                in_store: in_store || contents,
                stream: None,
                no_stream: false,
            },
        );
        Ok((id, file))
    }

    /// A changed staged file becomes an upload: journaled, then (with
    /// `wait`) uploaded before this returns. A store that cannot be
    /// reached leaves it in the journal for the background uploader, and
    /// this still succeeds: the data is safe.
    fn seal(&self, id: u64, wait: bool) -> FsResult<()> {
        let record = {
            let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(key) = t.key_of.get(&id).cloned() else {
                return Ok(()); // unlinked while open: nothing to upload
            };
            let s = t.by_key.get_mut(&key).expect("key_of and by_key agree");
            if !(s.dirty || wait && s.pending) {
                return Ok(());
            }
            if s.dirty {
                s.dirty = false;
                s.pending = true;
                s.upload_after = Instant::now() + self.o.write_back;
                let at = s.upload_after;
                self.journal(&key, s)?;
                t.schedule(id, at);
            }
            key
        };
        if !wait {
            self.wake.notify_one();
            return Ok(());
        }
        let uploader = self.uploader();
        match self.block_on(uploader.upload(&record)) {
            Ok(()) => Ok(()),
            Err(e) if e.is_transient() => {
                tracing::warn!("objfs: {record} stays in the journal: {e}");
                self.wake.notify_one();
                Ok(())
            }
            Err(e) => {
                tracing::error!("objfs: uploading {record}: {e}");
                Err(errno(e))
            }
        }
    }

    /// Records `s`, staged for `key`, in the journal: its metadata and
    /// its size now.
    fn journal(&self, key: &str, s: &Staged) -> FsResult<()> {
        let size = s.file.metadata().map_err(io_errno)?.len();
        let r = Record::new(s.id, key, &s.meta, size);
        self.staging.journal(&r).map_err(io_errno)
    }

    /// fsync(2) of a file whose upload has not finished (`upload=behind`,
    /// or the store is down): its data and record go to the disk, as a
    /// local filesystem's would.
    fn sync_if_pending(&self, id: u64) -> FsResult<()> {
        let t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(s) = t.key_of.get(&id).and_then(|k| t.by_key.get(k)) else {
            return Ok(());
        };
        if s.pending {
            let file = s.file.clone();
            drop(t);
            self.staging.sync(id, &file).map_err(io_errno)?;
        }
        Ok(())
    }

    /// A write of `offset..end` to `s`, staged for `key` in `file`: its
    /// stream sends the parts the write completes, or is dropped if the
    /// write went below what was sent. A file that the write extended
    /// past one part, written in order so far, is to begin one: its key,
    /// metadata and size.
    fn follow(
        &self,
        key: &str,
        s: &mut Staged,
        file: &File,
        offset: u64,
        end: u64,
    ) -> FsResult<Option<(String, Meta, u64)>> {
        if let Some(stream) = &s.stream {
            if offset < stream.sent() || stream.key() != key {
                s.stream = None;
                s.no_stream = true;
            }
        }
        // Only a file past one part can stream: smaller ones cost no fstat.
        if s.no_stream || end <= self.o.part_size {
            return Ok(None);
        }
        let size = file.metadata().map_err(io_errno)?.len();
        Ok(match &mut s.stream {
            Some(stream) => {
                stream.advance(size);
                None
            }
            None if end == size => Some((key.to_string(), s.meta, size)),
            None => None,
        })
    }

    /// Begins the multipart upload that follows staged file `id`; a store
    /// that refuses leaves the file to go up whole at close.
    fn begin_stream(&self, id: u64, key: &str, meta: Meta, size: u64) {
        let begun = self.block_on(PartStream::begin(
            self.store.clone(),
            key,
            meta,
            self.staging.path(id),
            self.o.part_size,
            self.stream_slots.clone(),
        ));
        let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
        let mut stream = match begun {
            Ok(stream) => stream,
            Err(e) => {
                // Not asked again before its upload: a store that is down
                // must not cost every later write a round trip.
                tracing::debug!("objfs: {key} goes up whole at close: {e}");
                if let Some(s) = t.by_key.get_mut(key).filter(|s| s.id == id) {
                    s.no_stream = true;
                }
                return;
            }
        };
        match t.by_key.get_mut(key) {
            // Still the same file, still written in order: the caller
            // holds its lock, so no write came between.
            Some(s) if s.id == id && s.stream.is_none() && !s.no_stream => {
                stream.advance(size);
                s.stream = Some(stream);
            }
            _ => {} // dropped: the store forgets the upload
        }
    }

    /// Uploads every pending file now, `write_back` or not, while the
    /// store takes them; what it does not take within [`DRAIN_STALL`] of
    /// the last progress stays in the journal for the next mount.
    fn drain_uploads(&self) {
        let pending = || {
            let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
            let now = Instant::now();
            let ids: Vec<u64> = t
                .by_key
                .values_mut()
                .filter(|s| s.pending)
                .map(|s| {
                    s.upload_after = s.upload_after.min(now);
                    s.id
                })
                .collect();
            for &id in &ids {
                t.schedule(id, now);
            }
            ids.len()
        };
        let mut left = pending();
        if left == 0 {
            return;
        }
        tracing::info!("objfs: unmounted; sending {left} pending uploads");
        // A large upload takes long without failing: only failures since
        // the last upload done count as a stall.
        let retries = || self.counts.upload_retries.load(Ordering::Relaxed);
        let (mut progress, mut failed_before) = (Instant::now(), retries());
        self.wake.notify_one();
        while left > 0 {
            std::thread::sleep(Duration::from_millis(50));
            let now_left = pending();
            if now_left < left {
                progress = Instant::now();
                failed_before = retries();
            } else if progress.elapsed() > DRAIN_STALL && retries() > failed_before {
                tracing::warn!(
                    "objfs: the store took no upload for {} s; {now_left} stay in the journal \
                     for the next mount of this bucket at this mount point",
                    DRAIN_STALL.as_secs()
                );
                return;
            }
            left = now_left;
        }
        tracing::info!("objfs: every pending upload is in the store");
    }

    /// The file's handle is gone: a staged file nobody writes and nothing
    /// waits to upload leaves the staging area.
    fn unstage_if_idle(&self, id: u64) {
        let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = t.orphans.get_mut(&id) {
            *n -= 1;
            if *n == 0 {
                t.orphans.remove(&id);
                self.staging.remove(id);
            }
            return;
        }
        let Some(key) = t.key_of.get(&id).cloned() else {
            return;
        };
        let s = t.by_key.get_mut(&key).expect("key_of and by_key agree");
        s.writers = s.writers.saturating_sub(1);
        if s.writers == 0 && !s.dirty && !s.pending {
            t.remove(&key);
            self.staging.remove(id);
        }
    }

    /// With `upload=behind`, a directory's marker object (made by mkdir,
    /// changed by a chmod, chown or utime of the directory) goes through
    /// the staging area and the journal as a file does: staged empty under
    /// `KEY/` and put `write_back` after its last change. tar makes four
    /// requests of each directory (mkdir, then chown, chmod and utimes
    /// once its files are out), each a round trip the extraction waited
    /// for; now one PUT, after it.
    fn stage_marker(&self, key: &str, meta: Meta, in_store: bool) -> FsResult<()> {
        let marker = format!("{key}/");
        let (id, _) = self.stage(&marker, meta, false, in_store)?;
        if let Some(s) = self
            .staged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_key
            .get_mut(&marker)
        {
            s.meta = meta;
            s.dirty = true;
        }
        let sealed = self.seal(id, false);
        self.unstage_if_idle(id);
        sealed
    }

    /// Forgets the staged marker `marker` (`KEY/`) of a directory that
    /// goes: nothing of it is put.
    fn drop_staged_marker(&self, marker: &str) {
        let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(m) = t.remove(marker) {
            let _ = self.staging.forget(m.id);
            self.staging.remove(m.id);
        }
    }

    /// Whether anything is staged below the directory `prefix` (`KEY/`),
    /// its own marker aside.
    fn staged_below(&self, prefix: &str) -> bool {
        self.staged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_key
            .keys()
            .any(|k| k.starts_with(prefix) && k != prefix)
    }

    /// The metadata of `key`'s directory marker, while it waits in the
    /// staging area.
    fn staged_marker(&self, key: &str) -> Option<Meta> {
        let t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
        t.by_key.get(&format!("{key}/")).map(|s| s.meta)
    }

    /// A new file's metadata: `kind`, `mode` less `umask`, the caller's
    /// ids, times now.
    fn new_meta(&self, ctx: &Ctx, kind: u32, mode: u32, umask: u32) -> Meta {
        let t = now();
        Meta {
            mode: kind | (mode & 0o7777 & !umask),
            uid: ctx.uid,
            gid: ctx.gid,
            mtime: t,
            ctime: t,
        }
    }

    /// A small object put whole (a symlink's target, an empty file), the
    /// key made a file of `meta`.
    fn put_small(&self, key: &str, body: Vec<u8>, meta: Meta) -> FsResult<FileAttr> {
        let size = body.len() as u64;
        let etag = self
            .with_key(
                key,
                self.store
                    .put(key, Body::Bytes(body), meta.to_headers(), None, false),
            )
            .map_err(errno)?;
        let k = Known::File {
            size,
            etag,
            meta,
            exact: true,
        };
        let a = self.attr_of(&k).expect("a file");
        self.remember(key, k);
        self.listed(key, Some((EntryKind::File, None)));
        Ok(a)
    }

    /// Waits out any upload of `key` in flight, runs `f`.
    fn with_key<T>(&self, key: &str, f: impl std::future::Future<Output = T>) -> T {
        let lock = self.key_locks.of(key.to_string());
        self.block_on(async {
            let _g = lock.lock().await;
            f.await
        })
    }

    /// Every key under `prefix` and its size, all pages.
    fn all_keys(&self, prefix: &str) -> FsResult<Vec<(String, u64)>> {
        let mut keys = Vec::new();
        let mut token = None;
        loop {
            let page = self
                .block_on(self.store.list(prefix, None, 1000, token))
                .map_err(errno)?;
            keys.extend(page.objects.into_iter().map(|(k, info)| (k, info.size)));
            match page.next {
                Some(t) => token = Some(t),
                None => return Ok(keys),
            }
        }
    }

    fn rename_dir(&self, from: &str, to: &str) -> FsResult<()> {
        let (fp, tp) = (format!("{from}/"), format!("{to}/"));
        if !self.all_keys(&tp)?.iter().all(|(k, _)| *k == tp) || self.staged_below(&tp) {
            return Err(Errno::ENOTEMPTY);
        }
        // An empty directory replaced: its marker, if staged, is not put.
        self.drop_staged_marker(&tp);
        // Staged files under the directory move with it, locally, once
        // any upload of theirs in flight has landed (and is copied below).
        let moving: Vec<String> = {
            let t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
            let mut m: Vec<String> = t
                .by_key
                .keys()
                .filter(|k| k.starts_with(&fp))
                .cloned()
                .collect();
            m.sort();
            m
        };
        let locks: Vec<_> = moving
            .iter()
            .map(|k| self.key_locks.of(k.clone()))
            .collect();
        let _held = self.block_on(async {
            let mut held = Vec::new();
            for l in &locks {
                held.push(l.clone().lock_owned().await);
            }
            held
        });
        {
            let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
            for k in moving {
                let Some(mut s) = t.remove(&k) else { continue };
                let nk = format!("{tp}{}", &k[fp.len()..]);
                s.dirty = true;
                if s.pending {
                    let _ = self.staging.forget(s.id);
                    s.pending = false;
                }
                t.insert(nk, s);
            }
        }
        let keys = self.all_keys(&fp)?;
        let store = self.store.clone();
        let concurrency = self.o.concurrency;
        let copied = self.block_on(async {
            let sem = Arc::new(Semaphore::new(concurrency));
            let mut set = tokio::task::JoinSet::new();
            for (k, size) in keys.clone() {
                let (store, sem) = (store.clone(), sem.clone());
                let nk = format!("{tp}{}", &k[fp.len()..]);
                set.spawn(async move {
                    let _p = sem.acquire_owned().await;
                    store.copy(&k, &nk, size, None).await
                });
            }
            let mut first_error = None;
            while let Some(r) = set.join_next().await {
                if let Ok(Err(e)) | Err(e) = r.map_err(|e| StoreError::Other(e.to_string())) {
                    first_error.get_or_insert(e);
                }
            }
            first_error.map_or(Ok(()), Err)
        });
        // A failed copy leaves the source whole: nothing was deleted yet.
        copied.map_err(errno)?;
        let ids: Vec<u64> = {
            let t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
            t.by_key
                .iter()
                .filter(|(k, _)| k.starts_with(&tp))
                .map(|(_, s)| s.id)
                .collect()
        };
        for id in ids {
            self.seal(id, self.o.upload == Upload::OnClose)?;
        }
        self.block_on(async {
            let sem = Arc::new(Semaphore::new(concurrency));
            let mut set = tokio::task::JoinSet::new();
            for (k, _) in keys {
                let (store, sem) = (store.clone(), sem.clone());
                set.spawn(async move {
                    let _p = sem.acquire_owned().await;
                    store.delete(&k).await
                });
            }
            let mut first_error = None;
            while let Some(r) = set.join_next().await {
                if let Ok(Err(e)) = r {
                    first_error.get_or_insert(e);
                }
            }
            first_error.map_or(Ok(()), Err)
        })
        .map_err(errno)?;
        self.known.invalidate_all();
        self.listings.invalidate_all();
        Ok(())
    }

    /// Stores `meta` for `key`; the object's new tag where it was copied.
    fn set_meta(&self, key: &str, known: &Known, meta: Meta) -> FsResult<Option<String>> {
        {
            let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(s) = t.by_key.get_mut(key) {
                s.meta = meta;
                if let Some(stream) = &mut s.stream {
                    stream.meta_changed = true;
                }
                if s.pending && s.writers == 0 {
                    // Rewritten in place: the upload carries the change.
                    self.journal(key, s)?;
                } else {
                    s.dirty = true;
                }
                return Ok(None);
            }
        }
        match known {
            Known::File { size, .. } => {
                return self
                    .with_key(
                        key,
                        self.store.copy(key, key, *size, Some(meta.to_headers())),
                    )
                    .map_err(errno)
            }
            Known::Dir { .. } if self.o.upload == Upload::Behind => {
                self.stage_marker(key, meta, true)?;
            }
            Known::Dir { .. } => {
                let marker = format!("{key}/");
                self.block_on(self.store.put(
                    &marker,
                    Body::Bytes(Vec::new()),
                    meta.to_headers(),
                    Some(DIRECTORY_TYPE),
                    false,
                ))
                .map_err(errno)?;
            }
            Known::Missing => return Err(Errno::ENOENT),
        }
        Ok(None)
    }

    /// A directory's entries for one open handle: the listing, with what
    /// this mount knows better, and the files staged under it.
    fn dir_snapshot(&self, path: &Path) -> FsResult<DirList> {
        let key = self.key(path);
        let prefix = self.dir_prefix(&key);
        // Staged files first: one uploaded (and unstaged) while the store
        // is listed is then in one of the two.
        let staged: Vec<(String, FileAttr)> = {
            let t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
            t.by_key
                .iter()
                .filter_map(|(k, s)| {
                    let rel = k.strip_prefix(&prefix)?;
                    // A directory's staged marker names the directory.
                    let name = rel.strip_suffix('/').unwrap_or(rel);
                    if name.is_empty() || name.contains('/') {
                        return None;
                    }
                    let size = s.file.metadata().map_or(0, |m| m.len());
                    Some((name.to_string(), self.attr(s.meta.kind(), size, &s.meta)))
                })
                .collect()
        };
        let listing = self
            .listing(&prefix, self.o.entry_timeout, None)?
            .expect("no page limit");
        let mut entries: BTreeMap<String, (FileType, Option<FileAttr>)> = listing
            .entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(name, (kind, info))| {
                let full = format!("{prefix}{name}");
                let known = self
                    .cached(&full)
                    .filter(|k| !matches!(k, Known::Missing) && self.settled(k));
                let attr = match (known, kind, info) {
                    (Some(k), _, _) => self.attr_of(&k),
                    (None, EntryKind::Dir, _) => {
                        Some(self.attr(libc::S_IFDIR, 0, &self.default_meta(libc::S_IFDIR, 0)))
                    }
                    (None, EntryKind::File, Some(i)) => match self.listed_meta(&full, i) {
                        Some(meta) => Some(self.attr(meta.kind(), i.size, &meta)),
                        // The kernel looks the name up: a HEAD.
                        None if self.o.attrs == Attrs::Head => None,
                        None => {
                            let meta = self.default_meta(libc::S_IFREG, i.modified);
                            Some(self.attr(meta.kind(), i.size, &meta))
                        }
                    },
                    (None, EntryKind::File, None) => None,
                };
                let ft = match attr.map(|a| a.mode & libc::S_IFMT) {
                    Some(libc::S_IFDIR) => FileType::Directory,
                    Some(libc::S_IFLNK) => FileType::Symlink,
                    _ if *kind == EntryKind::Dir => FileType::Directory,
                    _ => FileType::RegularFile,
                };
                (name.clone(), (ft, attr))
            })
            .collect();
        for (name, attr) in staged {
            let ft = if attr.mode & libc::S_IFMT == libc::S_IFDIR {
                FileType::Directory
            } else {
                FileType::RegularFile
            };
            entries.insert(name, (ft, Some(attr)));
        }
        let mut list = vec![
            (OsString::from("."), FileType::Directory, None),
            (OsString::from(".."), FileType::Directory, None),
        ];
        list.extend(
            entries
                .into_iter()
                .map(|(n, (ft, a))| (OsString::from(n), ft, a)),
        );
        Ok(list)
    }

    fn meta_of(&self, k: &Known) -> Meta {
        match k {
            Known::File { meta, .. } | Known::Dir { meta, .. } => *meta,
            Known::Missing => self.default_meta(libc::S_IFREG, 0),
        }
    }
}

/// The prefix of `key`'s directory under the mount's `prefix`, and its
/// name there.
fn parent_and_name<'k>(prefix: &str, key: &'k str) -> (String, &'k str) {
    let rel = &key[prefix.len()..];
    match rel.rfind('/') {
        Some(i) => (format!("{prefix}{}/", &rel[..i]), &rel[i + 1..]),
        None => (prefix.to_string(), rel),
    }
}

/// A name a listing may show: not empty, `.` or `..` (keys such as
/// `a//b` or `a/./b` are out of reach of a path).
fn usable_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['\0', '/'])
}

/// Metadata by key: (entity tag, metadata).
type Metas = moka::sync::Cache<String, (String, Meta)>;

fn note_meta(metas: &Metas, key: &str, k: &Known) {
    if let Known::File {
        etag: Some(tag),
        meta,
        exact: true,
        ..
    } = k
    {
        metas.insert(key.to_string(), (tag.clone(), *meta));
    }
}

/// One async lock per thing being changed, made on first use and
/// dropped once nobody holds it: per key (an upload, a delete or a copy
/// of a key waits for the one in flight, so a slow upload cannot land
/// after the unlink or rename that followed it) and per staged data file.
#[derive(Clone)]
struct Locks<K>(Arc<Mutex<HashMap<K, Arc<tokio::sync::Mutex<()>>>>>);

impl<K> Default for Locks<K> {
    fn default() -> Self {
        Locks(Arc::default())
    }
}

impl<K: std::hash::Hash + Eq> Locks<K> {
    fn of(&self, key: K) -> Arc<tokio::sync::Mutex<()>> {
        let mut m = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if m.len() > 4096 {
            m.retain(|_, l| Arc::strong_count(l) > 1);
        }
        m.entry(key).or_default().clone()
    }
}

/// Locks by key.
type KeyLocks = Locks<String>;

/// Uploads staged files: one key at a time per caller, in the background
/// for the journal's leftovers and for `upload=behind`.
#[derive(Clone)]
struct Uploader {
    store: Arc<Store>,
    staging: Arc<Staging>,
    staged: Arc<Mutex<StagedTable>>,
    part_size: u64,
    concurrency: usize,
    counts: Arc<Counts>,
    /// What this mount knows of names: an upload makes the key a file of
    /// the uploaded size, tag and metadata.
    known: moka::sync::Cache<String, (Instant, Known)>,
    metas: Metas,
    /// Listings cached by the mount: an upload puts its key in its
    /// directory's, so a listing made while the file was staged still
    /// shows it once it is not.
    listings: moka::sync::Cache<String, Arc<Listing>>,
    /// The mount's key prefix.
    prefix: String,
    locks: KeyLocks,
    /// [`ObjFs::upload_gate`].
    gate: Arc<tokio::sync::RwLock<()>>,
    file_locks: Locks<u64>,
}

impl Uploader {
    /// Uploads what is staged for `key` now, if anything is pending; the
    /// record is forgotten only if no newer one replaced it meanwhile.
    async fn upload(&self, key: &str) -> Result<(), StoreError> {
        let _open = self.gate.read().await;
        let lock = self.locks.of(key.to_string());
        let _held = lock.lock().await;
        let (id, meta, file) = {
            let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
            match t.by_key.get_mut(key) {
                Some(s) if s.pending => {
                    // Marked before a byte is sent: a rename that moves
                    // the file from now on deletes what this leaves.
                    s.in_store = true;
                    (s.id, s.meta, s.file.clone())
                }
                _ => return Ok(()),
            }
        };
        let file_lock = self.file_locks.of(id);
        let _bytes_held = file_lock.lock().await;
        let size = file
            .metadata()
            .map_err(|e| StoreError::Other(format!("staging: {e}")))?
            .len();
        let stream = {
            let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
            t.by_key.get_mut(key).and_then(|s| {
                s.no_stream = false;
                s.stream.take()
            })
        };
        let path = self.staging.path(id);
        let headers = meta.to_headers();
        let sealed_meta = meta;
        // What the object carries: a streamed upload took its metadata
        // when it began, so its mtime is then, not the last write's.
        let mut meta = meta;
        let stream =
            stream.filter(|st| st.key() == key && st.sent() <= size && size > self.part_size);
        let streamed = match stream {
            Some(stream) => {
                let copy_meta = stream.meta_changes(&meta);
                let began = stream.meta().mtime;
                match stream.finish(size).await {
                    Ok(etag) => {
                        self.counts.streamed.fetch_add(1, Ordering::Relaxed);
                        Some(if copy_meta {
                            self.store
                                .copy(key, key, size, Some(headers.clone()))
                                .await?
                        } else {
                            meta.mtime = began;
                            etag
                        })
                    }
                    Err(e) if e.is_transient() => return Err(e),
                    // The store gave the upload up (aborted by a lifecycle
                    // rule, say): the file goes up whole instead.
                    Err(e) => {
                        tracing::warn!(
                            "objfs: the streamed upload of {key} failed ({e}); sending it whole"
                        );
                        None
                    }
                }
            }
            None => None,
        };
        let etag = if let Some(etag) = streamed {
            etag
        } else if size <= self.part_size {
            let content_type = key.ends_with('/').then_some(DIRECTORY_TYPE);
            self.store
                .put(
                    key,
                    Body::File {
                        path: &path,
                        offset: 0,
                        len: size,
                    },
                    headers,
                    content_type,
                    false,
                )
                .await?
        } else {
            self.multipart(key, &path, size, headers).await?
        };
        // A directory's marker is no file: the directory was listed and
        // remembered when it was made.
        if !key.ends_with('/') {
            let (parent, name) = parent_and_name(&self.prefix, key);
            if let Some(l) = self.listings.get(&parent) {
                let info = ObjectInfo {
                    size,
                    modified: meta.mtime.sec,
                    etag: etag.clone(),
                    metadata: None,
                };
                l.entries
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(name.to_string(), (EntryKind::File, Some(info)));
            }
            let k = Known::File {
                size,
                etag,
                meta,
                exact: true,
            };
            note_meta(&self.metas, key, &k);
            self.known.insert(key.to_string(), (Instant::now(), k));
        }
        self.counts.uploads.fetch_add(1, Ordering::Relaxed);
        self.counts.upload_bytes.fetch_add(size, Ordering::Relaxed);
        let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = t.by_key.get_mut(key) {
            // Still the same data, and not changed since it was sealed.
            if s.id == id && s.meta == sealed_meta && s.pending {
                s.meta = meta;
                s.pending = false;
                let _ = self.staging.forget(id);
                if s.writers == 0 && !s.dirty {
                    t.remove(key);
                    self.staging.remove(id);
                }
            }
        }
        Ok(())
    }

    async fn multipart(
        &self,
        key: &str,
        path: &Path,
        size: u64,
        headers: HashMap<String, String>,
    ) -> Result<Option<String>, StoreError> {
        let upload_id = self.store.create_multipart(key, headers).await?;
        let parts = size.div_ceil(self.part_size);
        let sem = Arc::new(Semaphore::new(self.concurrency));
        let mut set = tokio::task::JoinSet::new();
        for n in 0..parts {
            let (store, sem) = (self.store.clone(), sem.clone());
            let (key, upload_id, path) = (key.to_string(), upload_id.clone(), path.to_path_buf());
            let offset = n * self.part_size;
            let len = self.part_size.min(size - offset);
            set.spawn(async move {
                let _p = sem.acquire_owned().await;
                let body = Body::File {
                    path: &path,
                    offset,
                    len,
                };
                let tag = store
                    .upload_part(&key, &upload_id, n as i32 + 1, body)
                    .await?;
                Ok::<_, StoreError>((n as i32 + 1, tag))
            });
        }
        let mut done = Vec::with_capacity(parts as usize);
        let mut failed = None;
        while let Some(r) = set.join_next().await {
            match r {
                Ok(Ok(p)) => done.push(p),
                Ok(Err(e)) => {
                    failed.get_or_insert(e);
                }
                Err(e) => {
                    failed.get_or_insert(StoreError::Other(e.to_string()));
                }
            }
        }
        if let Some(e) = failed {
            let _ = self.store.abort_multipart(key, &upload_id).await;
            return Err(e);
        }
        done.sort_by_key(|(n, _)| *n);
        self.store.complete_multipart(key, &upload_id, done).await
    }

    /// Uploads pending files whenever woken, and every few seconds while
    /// the store refuses (backing off to a minute).
    async fn run(self, wake: Arc<tokio::sync::Notify>) {
        let mut backoff = Duration::from_secs(1);
        loop {
            // Small files (one PUT each) go up `concurrency` at a time, a
            // round trip each being most of their cost; a large one sends
            // `concurrency` parts at once by itself, so those go one by one
            // (and the parts in flight stay within one file's bound).
            let mut small = Vec::new();
            let mut large = Vec::new();
            {
                let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
                for key in t.take_due(Instant::now()) {
                    match t.by_key[&key].file.metadata() {
                        Ok(m) if m.len() <= self.part_size => small.push(key),
                        _ => large.push(key),
                    }
                }
            }
            let batch: Vec<String> = small.iter().chain(&large).cloned().collect();
            let mut failed = false;
            let mut note = |key: &str, r: Result<(), StoreError>| {
                if let Err(e) = r {
                    tracing::warn!("objfs: upload of {key} waits: {e}");
                    self.counts.upload_retries.fetch_add(1, Ordering::Relaxed);
                    failed = true;
                }
            };
            let slots = Arc::new(Semaphore::new(self.concurrency));
            let mut set = tokio::task::JoinSet::new();
            for key in small {
                let slot = slots.clone().acquire_owned().await.expect("never closed");
                let me = self.clone();
                set.spawn(async move {
                    let _slot = slot;
                    let r = me.upload(&key).await;
                    (key, r)
                });
                while let Some(done) = set.try_join_next() {
                    if let Ok((key, r)) = done {
                        note(&key, r);
                    }
                }
            }
            while let Some(done) = set.join_next().await {
                if let Ok((key, r)) = done {
                    note(&key, r);
                }
            }
            for key in large {
                let r = self.upload(&key).await;
                note(&key, r);
            }
            // What is still pending after its turn (its upload failed, or
            // its metadata changed during it) goes round again.
            let next_due = {
                let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
                let now = Instant::now();
                for key in &batch {
                    if let Some(s) = t.by_key.get(key).filter(|s| s.pending) {
                        let (id, at) = (s.id, s.upload_after.max(now));
                        t.schedule(id, at);
                    }
                }
                t.next_due()
            };
            if failed {
                let _ = tokio::time::timeout(backoff, wake.notified()).await;
                backoff = (backoff * 2).min(Duration::from_secs(60));
            } else {
                backoff = Duration::from_secs(1);
                let idle = next_due.map_or(Duration::from_secs(5), |d| {
                    d.saturating_duration_since(Instant::now())
                        .min(Duration::from_secs(5))
                });
                let _ = tokio::time::timeout(idle, wake.notified()).await;
            }
        }
    }
}

impl PathFilesystem for ObjFs {
    fn init(&self, _conn: &mut Connection, _notifier: &Notifier) -> FsResult<()> {
        self.take_over_journal().map_err(|e| {
            tracing::error!("objfs: reading the staging area's journal: {e}");
            io_errno(e)
        })
    }

    fn quiesce(&self) -> std::io::Result<()> {
        // Streams of files still open go: the next server sends those
        // files whole at their close.
        let streams: Vec<PartStream> = self
            .staged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_key
            .values_mut()
            .filter_map(|s| s.stream.take())
            .collect();
        // Sent before this process exits, so no parts stay in the store.
        let aborts = async {
            for stream in streams {
                stream.abort().await;
            }
        };
        let _ = self.block_on(async { tokio::time::timeout(QUIESCE_WAIT, aborts).await });
        // Uploads under way finish (their records forgotten); no other
        // starts until the process exits or the upgrade is abandoned. The
        // mount is paused meanwhile: a long one fails the upgrade instead.
        let gate = self
            .block_on(async {
                tokio::time::timeout(QUIESCE_WAIT, self.upload_gate.clone().write_owned()).await
            })
            .map_err(|_| {
                std::io::Error::other(format!(
                    "uploads still under way after {} s (upgrade again when they are done)",
                    QUIESCE_WAIT.as_secs()
                ))
            })?;
        *self.quiesced.lock().unwrap_or_else(PoisonError::into_inner) = Some(gate);
        // The next server takes the journal (and this lock) at its INIT.
        self.journal_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        Ok(())
    }

    fn quiesce_abandoned(&self) {
        // The journal first (the next server may have taken it before it
        // was stopped: what it uploaded is dropped here), then uploads.
        if let Err(e) = self.take_over_journal() {
            tracing::error!("objfs: taking the journal back: {e}");
        }
        self.quiesced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        self.wake.notify_one();
    }

    fn timeouts(&self) -> Timeouts {
        Timeouts {
            entry: self.o.entry_timeout,
            attr: self.o.attr_timeout,
            negative: self.o.negative_timeout,
        }
    }

    fn node_ids_as_inos(&self) -> bool {
        true
    }

    fn getattr(&self, _ctx: &Ctx, path: &Path, fh: Option<FileHandle>) -> FsResult<FileAttr> {
        let key = self.key(path);
        if self.is_root(&key) {
            let meta = *self.root.lock().unwrap_or_else(PoisonError::into_inner);
            return Ok(self.attr(libc::S_IFDIR, 0, &meta));
        }
        if let Some(fh) = fh {
            if let Ok(h) = self.handle(fh) {
                if let Handle::Remote(_, attr) = &*h {
                    return Ok(*attr);
                }
                if let Handle::Staged { id, file, .. } = &*h {
                    let t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
                    let meta = t
                        .key_of
                        .get(id)
                        .and_then(|k| t.by_key.get(k))
                        .map_or(self.default_meta(libc::S_IFREG, now().sec), |s| s.meta);
                    let size = file.metadata().map_or(0, |m| m.len());
                    return Ok(self.attr(meta.kind(), size, &meta));
                }
            }
        }
        if let Some(a) = self.staged_attr(&key) {
            return Ok(a);
        }
        let k = self.lookup(&key)?;
        self.attr_of(&k).ok_or(Errno::ENOENT)
    }

    fn setattr(&self, ctx: &Ctx, path: &Path, attr: &SetAttr) -> FsResult<FileAttr> {
        let key = self.key(path);
        if self.is_root(&key) {
            let mut m = self.root.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(mode) = attr.mode {
                m.mode = libc::S_IFDIR | (mode & 0o7777);
            }
            m.uid = attr.uid.unwrap_or(m.uid);
            m.gid = attr.gid.unwrap_or(m.gid);
            match attr.mtime {
                Some(TimeOrNow::Specific(t)) => m.mtime = t,
                Some(TimeOrNow::Now) => m.mtime = now(),
                None => {}
            }
            m.ctime = now();
            return Ok(self.attr(libc::S_IFDIR, 0, &m));
        }
        let staged_meta = self
            .staged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_key
            .get(&key)
            .map(|s| s.meta);
        let known = match staged_meta {
            Some(meta) => Known::File {
                size: 0,
                etag: None,
                meta,
                exact: true,
            },
            None => self.lookup_exact(&key)?,
        };
        if matches!(known, Known::Missing) {
            return Err(Errno::ENOENT);
        }
        if let Some(size) = attr.size {
            if matches!(known, Known::Dir { .. }) {
                return Err(Errno::EISDIR);
            }
            let meta = Meta {
                mtime: now(),
                ctime: now(),
                ..self.meta_of(&known)
            };
            let (id, file) = self.stage(&key, meta, size > 0, true)?;
            let lock = self.file_locks.of(id);
            let held = self.block_on(lock.lock_owned());
            let r = file.set_len(size).map_err(io_errno);
            {
                // The stream goes under the file's lock, as the bytes did.
                let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(s) = t.by_key.get_mut(&key) {
                    s.dirty = true;
                    s.meta.mtime = meta.mtime;
                    s.meta.ctime = meta.ctime;
                    s.stream = None;
                }
            }
            drop(held);
            let sealed = r.and_then(|()| self.seal(id, self.o.upload == Upload::OnClose));
            self.unstage_if_idle(id);
            sealed?;
            self.listed(&key, Some((EntryKind::File, None)));
        }
        let changes_meta = attr.mode.is_some()
            || attr.uid.is_some()
            || attr.gid.is_some()
            || attr.atime.is_some()
            || attr.mtime.is_some();
        let known = match self.staged_attr(&key) {
            Some(_) => known,
            None if attr.size.is_some() => self.lookup_exact(&key)?,
            None => known,
        };
        if changes_meta {
            let mut meta = self
                .staged
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .by_key
                .get(&key)
                .map_or(self.meta_of(&known), |s| s.meta);
            if let Some(m) = attr.mode {
                meta.mode = meta.kind() | (m & 0o7777);
            }
            meta.uid = attr.uid.unwrap_or(meta.uid);
            meta.gid = attr.gid.unwrap_or(meta.gid);
            match attr.mtime {
                Some(TimeOrNow::Specific(t)) => meta.mtime = t,
                Some(TimeOrNow::Now) => meta.mtime = now(),
                None => {}
            }
            meta.ctime = now();
            let _ = ctx;
            let copied = self.set_meta(&key, &known, meta)?;
            let updated = match known {
                Known::File { size, etag, .. } => Known::File {
                    size,
                    etag: copied.or(etag),
                    meta,
                    exact: true,
                },
                Known::Dir { .. } => Known::Dir { meta },
                Known::Missing => Known::Missing,
            };
            // A staged file is its own truth (its upload tells the cache
            // its size); only a stored object's new metadata is noted here.
            if staged_meta.is_none() {
                self.remember(&key, updated);
            }
        }
        if let Some(a) = self.staged_attr(&key) {
            return Ok(a);
        }
        let k = self.lookup(&key)?;
        self.attr_of(&k).ok_or(Errno::ENOENT)
    }

    fn readlink(&self, _ctx: &Ctx, path: &Path, out: &mut DataOut) -> FsResult<()> {
        let key = self.key(path);
        let target = match self.link_targets.get(&key) {
            Some(t) => t,
            None => {
                let t = self
                    .block_on(self.store.get(&key, 0, None))
                    .map_err(errno)?;
                self.link_targets.insert(key, t.clone());
                t
            }
        };
        out.extend_from_slice(&target);
        Ok(())
    }

    fn symlink(&self, ctx: &Ctx, target: &OsStr, link_path: &Path) -> FsResult<FileAttr> {
        let key = self.key(link_path);
        let meta = self.new_meta(ctx, libc::S_IFLNK, 0o777, 0);
        let a = self.put_small(&key, target.as_bytes().to_vec(), meta)?;
        self.link_targets.insert(key, target.as_bytes().to_vec());
        Ok(a)
    }

    fn mknod(&self, ctx: &Ctx, path: &Path, args: &Mknod) -> FsResult<FileAttr> {
        if args.mode & libc::S_IFMT != libc::S_IFREG {
            // Objects are files, directories and links only.
            return Err(Errno::EPERM);
        }
        let meta = self.new_meta(ctx, libc::S_IFREG, args.mode, args.umask);
        self.put_small(&self.key(path), Vec::new(), meta)
    }

    fn mkdir(&self, ctx: &Ctx, path: &Path, args: &Mkdir) -> FsResult<FileAttr> {
        let key = self.key(path);
        let meta = self.new_meta(ctx, libc::S_IFDIR, args.mode, args.umask);
        if self.o.upload == Upload::Behind {
            self.stage_marker(&key, meta, false)?;
        } else {
            self.block_on(self.store.put(
                &format!("{key}/"),
                Body::Bytes(Vec::new()),
                meta.to_headers(),
                Some(DIRECTORY_TYPE),
                false,
            ))
            .map_err(errno)?;
        }
        let k = Known::Dir { meta };
        let a = self.attr_of(&k).expect("a directory");
        self.remember(&key, k);
        self.listed(&key, Some((EntryKind::Dir, None)));
        // An empty directory lists as empty without asking.
        self.listings.insert(
            format!("{key}/"),
            Arc::new(Listing {
                at: Instant::now(),
                entries: Mutex::default(),
            }),
        );
        Ok(a)
    }

    fn unlink(&self, _ctx: &Ctx, path: &Path) -> FsResult<()> {
        let key = self.key(path);
        let staged = {
            let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
            let s = t.remove(&key);
            if let Some(s) = &s {
                let _ = self.staging.forget(s.id);
                if s.writers > 0 {
                    t.orphans.insert(s.id, s.writers);
                } else {
                    self.staging.remove(s.id);
                }
            }
            s.is_some()
        };
        let r = self.with_key(&key, self.store.delete(&key));
        self.link_targets.invalidate(&key);
        self.remember(&key, Known::Missing);
        self.listed(&key, None);
        match r {
            Ok(()) => Ok(()),
            Err(StoreError::NotFound) if staged => Ok(()),
            Err(e) => Err(errno(e)),
        }
    }

    fn rmdir(&self, _ctx: &Ctx, path: &Path) -> FsResult<()> {
        let key = self.key(path);
        let prefix = format!("{key}/");
        // An upload of the marker in flight lands before the DELETE.
        let marker_lock = self.key_locks.of(prefix.clone());
        let _marker_held = self.block_on(marker_lock.lock_owned());
        if self.staged_below(&prefix) {
            return Err(Errno::ENOTEMPTY);
        }
        let page = self
            .block_on(self.store.list(&prefix, None, 2, None))
            .map_err(errno)?;
        if page.objects.iter().any(|(k, _)| *k != prefix) {
            return Err(Errno::ENOTEMPTY);
        }
        self.drop_staged_marker(&prefix);
        if page.objects.is_empty() {
            // A directory without a marker and without files is gone.
            self.remember(&key, Known::Missing);
            self.listed(&key, None);
            return Ok(());
        }
        self.block_on(self.store.delete(&prefix)).map_err(errno)?;
        self.remember(&key, Known::Missing);
        self.listings.invalidate(&prefix);
        self.listed(&key, None);
        Ok(())
    }

    fn rename(&self, _ctx: &Ctx, from: &Path, to: &Path, flags: u32) -> FsResult<()> {
        if flags & libc::RENAME_EXCHANGE != 0 {
            // Two keys cannot trade places at once in S3.
            return Err(Errno::EINVAL);
        }
        let (fk, tk) = (self.key(from), self.key(to));
        let from_staged = self
            .staged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_key
            .contains_key(&fk);
        let source = if from_staged {
            Known::File {
                size: 0,
                etag: None,
                meta: self.default_meta(libc::S_IFREG, 0),
                exact: false,
            }
        } else {
            self.lookup(&fk)?
        };
        let target_exists =
            self.staged_attr(&tk).is_some() || !matches!(self.lookup(&tk)?, Known::Missing);
        if flags & libc::RENAME_NOREPLACE != 0 && target_exists {
            return Err(Errno::EEXIST);
        }
        let source_size = match source {
            Known::Missing => return Err(Errno::ENOENT),
            Known::Dir { .. } => {
                self.rename_dir(&fk, &tk)?;
                return Ok(());
            }
            Known::File { size, .. } => size,
        };
        // The target's own staged copy (a file open under that name) is
        // replaced: its handles keep their data, unlinked.
        {
            let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(old) = t.remove(&tk) {
                let _ = self.staging.forget(old.id);
                if old.writers > 0 {
                    t.orphans.insert(old.id, old.writers);
                } else {
                    self.staging.remove(old.id);
                }
            }
        }
        let moved = {
            let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
            match t.remove(&fk) {
                Some(mut s) => {
                    if s.pending {
                        let _ = self.staging.forget(s.id);
                        s.pending = false;
                    }
                    s.dirty = true;
                    let from_in_store = s.in_store;
                    s.in_store = target_exists;
                    let id = s.id;
                    t.insert(tk.clone(), s);
                    Some((id, from_in_store))
                }
                None => None,
            }
        };
        match moved {
            // Staged data goes up under its new name; the old key goes,
            // if the store ever had it.
            Some((id, from_in_store)) => {
                self.seal(id, self.o.upload == Upload::OnClose)?;
                if from_in_store {
                    let r = self.with_key(&fk, self.store.delete(&fk));
                    if let Err(e) = r {
                        if !matches!(e, StoreError::NotFound) {
                            return Err(errno(e));
                        }
                    }
                }
            }
            None => {
                let store = self.store.clone();
                self.with_key(&fk, async {
                    store.copy(&fk, &tk, source_size, None).await?;
                    store.delete(&fk).await
                })
                .map_err(errno)?;
            }
        }
        if let Some(t) = self.link_targets.remove(&fk) {
            self.link_targets.insert(tk.clone(), t);
        }
        // A copied object keeps what was known of it; a staged one's
        // upload has just told the cache what it is.
        let moved_known = self.cached(&fk).filter(|_| moved.is_none());
        self.remember(&fk, Known::Missing);
        self.listed(&fk, None);
        match moved_known {
            Some(k @ Known::File { exact: true, .. }) => self.remember(&tk, k),
            _ if moved.is_some() => {}
            _ => self.known.invalidate(&tk),
        }
        self.listed(&tk, Some((EntryKind::File, None)));
        Ok(())
    }

    fn link(&self, _ctx: &Ctx, _existing: &Path, _new: &Path) -> FsResult<FileAttr> {
        // An object has one key: there is no second name for it.
        Err(Errno::EPERM)
    }

    fn open(&self, _ctx: &Ctx, path: &Path, args: &Open) -> FsResult<Opened> {
        let key = self.key(path);
        let acc = args.flags & libc::O_ACCMODE;
        let writes = acc != libc::O_RDONLY;
        let truncate = args.flags & libc::O_TRUNC != 0;
        let staged = self
            .staged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_key
            .get(&key)
            .map(|s| (s.id, s.file.clone()));
        let fh;
        if writes || truncate {
            // The staged file, if it is still there: taken under the table's
            // lock, since the release of its last writer may remove it (it
            // was uploaded) between a look and the take.
            let reused = self
                .staged
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .by_key
                .get_mut(&key)
                .map(|s| {
                    s.writers += 1;
                    (s.id, s.file.clone())
                });
            let (id, file) = match reused {
                Some(taken) => taken,
                None => {
                    let known = self.lookup_exact(&key)?;
                    let in_store = !matches!(known, Known::Missing);
                    let meta = self.meta_of(&known);
                    self.stage(&key, meta, !truncate && in_store, in_store)?
                }
            };
            if truncate {
                let lock = self.file_locks.of(id);
                let held = self.block_on(lock.lock_owned());
                file.set_len(0).map_err(io_errno)?;
                let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
                if let Some(s) = t.by_key.get_mut(&key) {
                    s.dirty = true;
                    s.meta.mtime = now();
                    // Written anew from nothing: it may stream again.
                    s.stream = None;
                    s.no_stream = false;
                }
                drop(t);
                drop(held);
            }
            fh = id;
            self.add_handle(
                fh,
                Handle::Staged {
                    id,
                    file,
                    writes: true,
                },
            );
            // Writes change the object: the kernel's pages of it stay ours.
            return Ok(Opened {
                fh: FileHandle(fh),
                flags: 0,
                backing_id: 0,
            });
        }
        if let Some((id, file)) = staged {
            fh = self.new_fh();
            self.add_handle(
                fh,
                Handle::Staged {
                    id,
                    file,
                    writes: false,
                },
            );
            return Ok(Opened::handle(fh));
        }
        // A reader sees the object as its listing or HEAD showed it within
        // the attribute timeout (close-to-open across clients: within it).
        let known = self.lookup(&key)?;
        let attr = self.attr_of(&known);
        let (size, etag) = match known {
            Known::File { size, etag, .. } => (size, etag),
            Known::Dir { .. } => return Err(Errno::EISDIR),
            Known::Missing => return Err(Errno::ENOENT),
        };
        let keep = match (&etag, self.seen_tags.get(&key)) {
            (Some(now), Some(before)) => *now == before,
            _ => false,
        };
        if let Some(t) = etag {
            self.seen_tags.insert(key.clone(), t);
        }
        fh = self.new_fh();
        let attr = attr.expect("a file");
        self.add_handle(fh, Handle::Remote(Reader::new(key, size), attr));
        Ok(Opened {
            fh: FileHandle(fh),
            flags: if keep {
                abi::flags::fopen::KEEP_CACHE
            } else {
                0
            },
            backing_id: 0,
        })
    }

    fn read(&self, _ctx: &Ctx, _path: &Path, args: &Read, out: &mut DataOut) -> FsResult<()> {
        match &*self.handle(args.fh)? {
            Handle::Remote(r, _) => self
                .block_on(r.read(&self.store, &self.read, args.offset, args.size, out))
                .map_err(errno),
            Handle::Staged { file, .. } => {
                use std::os::fd::AsFd;
                out.pread(file.as_fd(), args.offset, args.size as usize)
                    .map_err(io_errno)?;
                Ok(())
            }
            Handle::Dir(_) => Err(Errno::EISDIR),
        }
    }

    fn write(&self, _ctx: &Ctx, _path: &Path, args: &Write) -> FsResult<u32> {
        let h = self.handle(args.fh)?;
        let Handle::Staged {
            id,
            file,
            writes: true,
        } = &*h
        else {
            return Err(Errno::EBADF);
        };
        let lock = self.file_locks.of(*id);
        let _held = self.block_on(lock.lock_owned());
        // The open's own flags, not the handle's: writers of one staged
        // file share its handle, and only some of them may append.
        let offset = if args.flags & libc::O_APPEND != 0 && !args.from_cache {
            file.metadata().map_err(io_errno)?.len()
        } else {
            args.offset
        };
        file.write_all_at(args.data, offset).map_err(io_errno)?;
        let end = offset + args.data.len() as u64;
        let begin = {
            let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
            let Some(key) = t.key_of.get(id).cloned() else {
                return Ok(args.data.len() as u32);
            };
            let s = t.by_key.get_mut(&key).expect("key_of and by_key agree");
            s.dirty = true;
            s.meta.mtime = now();
            if self.o.upload == Upload::OnClose {
                self.follow(&key, s, file, offset, end)?
            } else {
                None
            }
        };
        if let Some((key, meta, size)) = begin {
            self.begin_stream(*id, &key, meta, size);
        }
        Ok(args.data.len() as u32)
    }

    fn flush(&self, _ctx: &Ctx, _path: &Path, fh: FileHandle, _lock_owner: u64) -> FsResult<()> {
        match &*self.handle(fh)? {
            Handle::Staged {
                id, writes: true, ..
            } => self.seal(*id, self.o.upload == Upload::OnClose),
            _ => Ok(()),
        }
    }

    fn fsync(&self, _ctx: &Ctx, _path: &Path, fh: FileHandle, _datasync: bool) -> FsResult<()> {
        match &*self.handle(fh)? {
            Handle::Staged {
                id, writes: true, ..
            } => {
                // upload=behind: the staging area is where a closed file
                // is safe, so fsync makes it safe there (on its disk); the
                // upload follows. upload=close: the store is.
                self.seal(*id, self.o.upload == Upload::OnClose)?;
                self.sync_if_pending(*id)
            }
            _ => Ok(()),
        }
    }

    fn release(&self, _ctx: &Ctx, _path: &Path, args: &Release) -> FsResult<()> {
        if let Some(h) = self.release_handle(args.fh.0) {
            if let Handle::Staged {
                id, writes: true, ..
            } = &*h
            {
                // Normally flushed already; a handle released without a
                // flush (the kernel's own, after a crash) still uploads.
                let r = self.seal(*id, self.o.upload == Upload::OnClose);
                self.unstage_if_idle(*id);
                r?;
            }
        }
        Ok(())
    }

    fn create(&self, ctx: &Ctx, path: &Path, args: &Create) -> FsResult<(FileAttr, Opened)> {
        let key = self.key(path);
        let meta = self.new_meta(ctx, libc::S_IFREG, args.mode, args.umask);
        // upload=close: exclusive across clients where the store honours
        // If-None-Match (AWS S3 does; Garage 2.5 does not), a round trip
        // per create. upload=behind: exclusive within this mount only (the
        // kernel found the name missing and holds the directory's lock),
        // as a write-back cache is: tar and git create every file with
        // O_EXCL, and a PUT per file would undo write-behind.
        let excl_in_store = args.flags & libc::O_EXCL != 0 && self.o.upload == Upload::OnClose;
        if excl_in_store {
            let etag = self
                .with_key(
                    &key,
                    self.store
                        .put(&key, Body::Bytes(Vec::new()), meta.to_headers(), None, true),
                )
                .map_err(errno)?;
            self.remember(
                &key,
                Known::File {
                    size: 0,
                    etag,
                    meta,
                    exact: true,
                },
            );
        }
        // The kernel creates a name it found missing; the store may hold
        // it unless this mount knows it does not.
        let in_store = excl_in_store || !matches!(self.cached(&key), Some(Known::Missing));
        let (id, file) = self.stage(&key, meta, false, in_store)?;
        {
            // Emptied under its lock, the stream dropped after: no write
            // of another handle can begin one in between.
            let lock = self.file_locks.of(id);
            let _held = self.block_on(lock.lock_owned());
            file.set_len(0).map_err(io_errno)?;
            let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(s) = t.by_key.get_mut(&key) {
                s.meta = meta;
                s.dirty = true;
                s.stream = None;
                s.no_stream = false;
            }
        }
        self.remember(
            &key,
            Known::File {
                size: 0,
                etag: None,
                meta,
                exact: true,
            },
        );
        self.add_handle(
            id,
            Handle::Staged {
                id,
                file,
                writes: true,
            },
        );
        self.listed(&key, Some((EntryKind::File, None)));
        Ok((self.attr(libc::S_IFREG, 0, &meta), Opened::handle(id)))
    }

    fn opendir(&self, _ctx: &Ctx, path: &Path, _args: &Open) -> FsResult<Opened> {
        let list = self.dir_snapshot(path)?;
        let fh = self.new_fh();
        self.add_handle(fh, Handle::Dir(list));
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
        self.readdirplus(ctx, path, fh, offset, &mut |n, t, i, o, _| {
            filler(n, t, i, o)
        })
    }

    fn readdirplus(
        &self,
        _ctx: &Ctx,
        path: &Path,
        fh: FileHandle,
        offset: u64,
        filler: &mut PlusFiller<'_>,
    ) -> FsResult<()> {
        let h = match self.handle(fh) {
            Ok(h) => h,
            // A directory handle restored after a crash: list afresh.
            Err(_) => {
                let h = Arc::new(Handle::Dir(self.dir_snapshot(path)?));
                self.handles
                    .write()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(
                        fh.0,
                        OpenHandle {
                            handle: h.clone(),
                            opens: 1,
                        },
                    );
                h
            }
        };
        let Handle::Dir(list) = &*h else {
            return Err(Errno::ENOTDIR);
        };
        tracing::debug!("objfs readdirplus {} @{offset}: {list:?}", path.display());
        for (i, (name, ft, attr)) in list.iter().enumerate().skip(offset as usize) {
            if !filler(name, *ft, 0, i as u64 + 1, attr.as_ref()) {
                break;
            }
        }
        Ok(())
    }

    fn lookups_in_readdirplus(&self) -> bool {
        // A lookup here is a HEAD per entry: the listing's attributes are
        // what `ls -l` gets.
        false
    }

    fn releasedir(&self, _ctx: &Ctx, _path: &Path, args: &Release) -> FsResult<()> {
        self.release_handle(args.fh.0);
        Ok(())
    }

    fn statfs(&self, _ctx: &Ctx, _path: &Path) -> FsResult<Statfs> {
        // A bucket has no size; say "plenty", as s3fs and rclone do.
        let blocks = 1u64 << 40;
        Ok(Statfs {
            blocks,
            bfree: blocks,
            bavail: blocks,
            files: 1 << 32,
            ffree: 1 << 32,
            bsize: 1 << 20,
            frsize: 4096,
            namelen: 1024,
        })
    }

    fn restore_handle(&self, path: &Path, handle: &HandleRecord) -> FsResult<()> {
        self.next_fh.fetch_max(handle.fh + 1, Ordering::Relaxed);
        if handle.dir {
            return Ok(()); // listed afresh on its next readdir
        }
        let key = self.key(path);
        let flags = handle.flags as i32;
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY;
        if writes {
            // The file's staged bytes survived the server: the handle
            // writes on where it left off.
            let file = Arc::new(self.staging.reopen(handle.fh).map_err(io_errno)?);
            let mut t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
            match t.by_key.get_mut(&key) {
                Some(s) if s.id == handle.fh => {
                    s.writers += 1;
                    s.dirty = true;
                }
                _ => {
                    let meta = self
                        .unsealed_meta
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .remove(&handle.fh)
                        .unwrap_or_else(|| self.default_meta(libc::S_IFREG, now().sec));
                    t.insert(
                        key,
                        Staged {
                            id: handle.fh,
                            file: file.clone(),
                            meta,
                            writers: 1,
                            dirty: true,
                            pending: false,
                            upload_after: Instant::now(),
                            in_store: true,
                            stream: None,
                            no_stream: false,
                        },
                    );
                }
            }
            drop(t);
            self.add_handle(
                handle.fh,
                Handle::Staged {
                    id: handle.fh,
                    file,
                    writes: true,
                },
            );
            return Ok(());
        }
        if let Some((id, file)) = self
            .staged
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .by_key
            .get(&key)
            .map(|s| (s.id, s.file.clone()))
        {
            self.add_handle(
                handle.fh,
                Handle::Staged {
                    id,
                    file,
                    writes: false,
                },
            );
            return Ok(());
        }
        let known = self.lookup(&key)?;
        let (Known::File { size, .. }, Some(attr)) = (&known, self.attr_of(&known)) else {
            return Err(Errno::ENOENT);
        };
        self.add_handle(handle.fh, Handle::Remote(Reader::new(key, *size), attr));
        Ok(())
    }

    fn restored(&self) {
        // Records no writer's handle came back for: their data goes too.
        self.unsealed_meta
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        // Data files neither journaled nor held by a restored handle were
        // open when a server died and never closed: nothing waits for them.
        let (referenced, handles): (Vec<u64>, Vec<u64>) = {
            let t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
            let h = self.handles.read().unwrap_or_else(PoisonError::into_inner);
            (
                t.key_of.keys().copied().collect(),
                h.keys().copied().collect(),
            )
        };
        if let Ok((_, ids)) = self.staging.scan() {
            for id in ids {
                if !referenced.contains(&id) && !handles.contains(&id) {
                    self.staging.remove(id);
                }
            }
        }
    }

    fn counters(&self) -> Vec<FsCounter> {
        let mut out: Vec<FsCounter> = self
            .store
            .counts()
            .snapshot()
            .into_iter()
            .map(|(k, n)| FsCounter::new(format!("s3.{k}"), n))
            .collect();
        let (pending, pending_bytes) = {
            let t = self.staged.lock().unwrap_or_else(PoisonError::into_inner);
            t.by_key
                .values()
                .filter(|s| s.pending || s.dirty)
                .fold((0, 0), |(n, b), s| {
                    (n + 1, b + s.file.metadata().map_or(0, |m| m.len()))
                })
        };
        let c = &self.counts;
        out.push(FsCounter::new("uploads.pending", pending));
        out.push(FsCounter::new("uploads.pending_bytes", pending_bytes));
        out.push(FsCounter::new(
            "uploads.done",
            c.uploads.load(Ordering::Relaxed),
        ));
        out.push(FsCounter::new(
            "uploads.bytes",
            c.upload_bytes.load(Ordering::Relaxed),
        ));
        out.push(FsCounter::new(
            "uploads.retries",
            c.upload_retries.load(Ordering::Relaxed),
        ));
        out.push(FsCounter::new(
            "uploads.streamed",
            c.streamed.load(Ordering::Relaxed),
        ));
        out.push(FsCounter::new(
            "metadata_cache.hits",
            c.cache_hits.load(Ordering::Relaxed),
        ));
        out.push(FsCounter::new(
            "metadata_cache.misses",
            c.cache_misses.load(Ordering::Relaxed),
        ));
        let held: u64 = self
            .handles
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .map(|o| match &*o.handle {
                Handle::Remote(r, _) => r.held(&self.read),
                _ => 0,
            })
            .sum();
        out.push(FsCounter::new("readahead.bytes_held", held));
        out
    }

    fn destroy(&self) {
        // Unmounted (an upgrade's old server exits without this): what is
        // pending goes up now rather than waiting for the next mount.
        self.drain_uploads();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staged(id: u64, pending: bool, upload_after: Instant) -> Staged {
        let t = Timespec { sec: 0, nsec: 0 };
        Staged {
            id,
            file: Arc::new(tempfile::tempfile().unwrap()),
            meta: Meta {
                mode: libc::S_IFREG | 0o644,
                uid: 0,
                gid: 0,
                mtime: t,
                ctime: t,
            },
            writers: 0,
            dirty: false,
            pending,
            upload_after,
            in_store: false,
            stream: None,
            no_stream: false,
        }
    }

    #[test]
    fn the_due_queue_gives_what_is_due_once_and_skips_what_changed() {
        let now = Instant::now();
        let later = now + Duration::from_secs(60);
        let mut t = StagedTable::default();
        t.insert("a".into(), staged(1, true, now));
        t.insert("b".into(), staged(2, true, now));
        t.insert("c".into(), staged(3, true, later));
        t.insert("open".into(), staged(4, false, now));
        // b is written again: due later now, its first entry stale.
        t.by_key.get_mut("b").unwrap().upload_after = later;
        t.schedule(2, later);
        // a twice in the queue (sealed twice): given once.
        t.schedule(1, now);
        // Renamed: found under its new key.
        let s = t.remove("a").unwrap();
        t.insert("a2".into(), s);
        // Gone (unlinked) before it came up.
        t.insert("gone".into(), staged(5, true, now));
        t.remove("gone");
        assert_eq!(t.take_due(now), vec!["a2".to_string()]);
        assert_eq!(t.take_due(now), Vec::<String>::new());
        assert_eq!(t.next_due(), Some(later));
        let mut due = t.take_due(later);
        due.sort();
        assert_eq!(due, ["b", "c"]);
        assert_eq!(t.next_due(), None);
    }
}
