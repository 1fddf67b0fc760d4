//! Directory listings: one READDIR stream per directory, its names and
//! attributes kept in the cache (`cache`), so that `ls -l` costs no stat
//! per entry and a lookup in a listed directory costs no request at all.
//!
//! Listings are also fetched ahead, in the background, where a program is
//! about to need them (`prefetch_dirs=N` threads, 0 for none):
//! - the subdirectories of a directory just opened for listing: a walk
//!   (`ls -R`, `find`, `du`, `rsync`, `git status`) opens them next;
//! - a directory in which lookups keep missing the cache (a program
//!   stating its files one by one): one listing answers them all.
//!
//! A listing in flight is shared: whoever needs the same directory meanwhile
//! waits for it instead of asking the server again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Instant;

use fusebox::{Errno, FsResult};

use crate::cache::{Listing, MetaCache};
use crate::client::{CallError, Client};
use crate::connection::{ConnError, Connection};
use crate::errors::status_errno;
use crate::wire::{status, Reply, Request};

/// Lookups that miss in one directory before it is listed ahead.
const MISSES_BEFORE_LISTING: u64 = 3;
/// Directories waiting to be listed ahead, at most; more are dropped.
const QUEUE: usize = 4096;
/// READDIRs in flight at first; doubled each round up to the most.
const FIRST_READDIRS: usize = 4;
const MOST_READDIRS: usize = 32;

/// A listing being fetched, and the cache's epoch when it was asked for:
/// a caller who changed something since does not take it.
struct InFlight {
    epoch: u64,
    result: Mutex<Option<FsResult<Arc<Listing>>>>,
    done: Condvar,
}

struct Shared {
    client: Arc<Client>,
    cache: Arc<MetaCache>,
    inflight: Mutex<HashMap<Vec<u8>, Arc<InFlight>>>,
    /// Recent lookup misses per directory.
    misses: moka::sync::Cache<Vec<u8>, Arc<AtomicU64>, foldhash::fast::RandomState>,
    /// Most entries a listing fetched ahead may hold (the cache's size):
    /// a larger one is not worth keeping.
    max_entries: u64,
    fetched_ahead: AtomicU64,
    /// sshfs's follow_symlinks: symlinks show as their targets.
    follow_symlinks: bool,
}

pub struct Lister {
    shared: Arc<Shared>,
    /// None: listing ahead is off.
    queue: Option<SyncSender<Vec<u8>>>,
}

impl Lister {
    pub fn new(
        client: Arc<Client>,
        cache: Arc<MetaCache>,
        threads: usize,
        max_entries: u64,
        follow_symlinks: bool,
    ) -> Lister {
        let shared = Arc::new(Shared {
            client,
            cache,
            inflight: Mutex::default(),
            misses: moka::sync::Cache::builder()
                .max_capacity(10_000)
                .time_to_live(std::time::Duration::from_secs(20))
                .build_with_hasher(foldhash::fast::RandomState::default()),
            max_entries,
            fetched_ahead: AtomicU64::new(0),
            follow_symlinks,
        });
        let queue = (threads > 0).then(|| {
            let (tx, rx) = sync_channel::<Vec<u8>>(QUEUE);
            let rx = Arc::new(Mutex::new(rx));
            for i in 0..threads {
                let (s, rx) = (Arc::downgrade(&shared), rx.clone());
                let spawned = std::thread::Builder::new()
                    .name(format!("sftpfs-list-{i}"))
                    .spawn(move || loop {
                        let next = rx.lock().unwrap_or_else(PoisonError::into_inner).recv();
                        let (Ok(dir), Some(s)) = (next, s.upgrade()) else {
                            return;
                        };
                        if s.cache.listing(&dir).is_none() {
                            if let Ok(l) = list(&s, &dir, true) {
                                if l.entries.len() as u64 <= s.max_entries {
                                    s.fetched_ahead.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                    });
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "no listing thread; listing ahead is off");
                    return tx;
                }
            }
            tx
        });
        Lister { shared, queue }
    }

    /// The whole listing of directory `rp` (cached, in flight, or fetched).
    pub fn list(&self, rp: &[u8]) -> FsResult<Arc<Listing>> {
        list(&self.shared, rp, false)
    }

    /// A program opened `dir` to list it: list its subdirectories ahead.
    pub fn opened(&self, dir: &[u8], l: &Listing) {
        let Some(q) = &self.queue else { return };
        for e in &l.entries {
            if e.attrs
                .perm
                .is_some_and(|p| p & libc::S_IFMT == libc::S_IFDIR)
            {
                let mut p = dir.to_vec();
                if p != b"/" {
                    p.push(b'/');
                }
                p.extend_from_slice(&e.name);
                if self.shared.cache.listing(&p).is_none() && !self.in_flight(&p) {
                    if let Err(TrySendError::Full(_)) = q.try_send(p) {
                        return;
                    }
                }
            }
        }
    }

    /// A lookup in `dir` missed the cache: after a few, list it ahead.
    pub fn missed(&self, dir: &[u8]) {
        let Some(q) = &self.queue else { return };
        let n = self
            .shared
            .misses
            .get_with(dir.to_vec(), Arc::default)
            .fetch_add(1, Ordering::Relaxed)
            + 1;
        if n == MISSES_BEFORE_LISTING && !self.in_flight(dir) {
            let _ = q.try_send(dir.to_vec());
        }
    }

    fn in_flight(&self, dir: &[u8]) -> bool {
        self.shared
            .inflight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(dir)
    }

    /// Listings fetched ahead so far (for statistics).
    pub fn fetched_ahead(&self) -> u64 {
        self.shared.fetched_ahead.load(Ordering::Relaxed)
    }
}

/// Fetch (or wait for) the listing of `rp`; `ahead`: for no caller, so
/// one larger than the cache holds is dropped, not kept.
fn list(s: &Shared, rp: &[u8], ahead: bool) -> FsResult<Arc<Listing>> {
    if let Some(l) = s.cache.listing(rp) {
        return Ok(l);
    }
    let e = s.cache.epoch();
    let (flight, mine) = {
        let mut g = s.inflight.lock().unwrap_or_else(PoisonError::into_inner);
        match g.get(rp) {
            // Asked for before a change the caller may have made: not for
            // this caller (it fetches its own, not shared).
            Some(f) if f.epoch == e.value() => (f.clone(), false),
            Some(_) => (
                Arc::new(InFlight {
                    epoch: e.value(),
                    result: Mutex::new(None),
                    done: Condvar::new(),
                }),
                true,
            ),
            None => {
                let f = Arc::new(InFlight {
                    epoch: e.value(),
                    result: Mutex::new(None),
                    done: Condvar::new(),
                });
                g.insert(rp.to_vec(), f.clone());
                (f, true)
            }
        }
    };
    if !mine {
        let deadline = Instant::now() + s.client.timeout();
        let mut r = flight.result.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(res) = r.as_ref() {
                return res.clone();
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Errno::EIO);
            }
            r = flight
                .done
                .wait_timeout(r, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
    let res = fetch(&s.client, rp, s.follow_symlinks).map(Arc::new);
    if let Ok(l) = &res {
        if !ahead || l.entries.len() as u64 <= s.max_entries {
            s.cache.put_listing(rp, l.clone(), e);
        }
    }
    *flight.result.lock().unwrap_or_else(PoisonError::into_inner) = Some(res.clone());
    flight.done.notify_all();
    let mut g = s.inflight.lock().unwrap_or_else(PoisonError::into_inner);
    if g.get(rp).is_some_and(|f| Arc::ptr_eq(f, &flight)) {
        g.remove(rp);
    }
    res
}

/// OPENDIR, READDIRs until the end (a few in flight, more as the
/// directory proves large), CLOSE (not waited for).
fn fetch(client: &Client, rp: &[u8], follow_symlinks: bool) -> FsResult<Listing> {
    let deadline = Instant::now() + client.timeout();
    'connection: loop {
        let (conn, _) = client.current(deadline)?;
        let handle = match client.call_on(&conn, &Request::Opendir { path: rp }, deadline) {
            Ok(Reply::Handle(h)) => h,
            Ok(Reply::Status { code, .. }) => return Err(status_errno(code)),
            Ok(_) => return Err(Errno::EPROTO),
            Err(CallError::Unknown) => continue,
            Err(CallError::Errno(e)) => return Err(e),
        };
        let close = |conn: &Connection| conn.call_back(&Request::Close { handle: &handle }, |_| {});
        let mut entries = Vec::new();
        let mut in_flight = FIRST_READDIRS;
        loop {
            let reqs = vec![Request::Readdir { handle: &handle }; in_flight];
            let mut end = false;
            for w in conn.call_many(&reqs) {
                match w.wait(deadline) {
                    Ok(Reply::Name(v)) => entries.extend(
                        v.into_iter()
                            .filter(|n| n.name != b"." && n.name != b"..")
                            .map(|n| (n.name, n.attrs)),
                    ),
                    Ok(Reply::Status { code, .. }) if code == status::EOF => end = true,
                    Ok(Reply::Status { code, .. }) => {
                        close(&conn);
                        return Err(status_errno(code));
                    }
                    Ok(_) => {
                        close(&conn);
                        return Err(Errno::EPROTO);
                    }
                    Err(ConnError::Lost(_)) => continue 'connection,
                    Err(ConnError::TimedOut(_)) => {
                        conn.die(format!("no reply to READDIR within {:?}", client.timeout()));
                        return Err(Errno::EIO);
                    }
                }
            }
            if end {
                break;
            }
            in_flight = (in_flight * 2).min(MOST_READDIRS);
        }
        close(&conn);
        return Ok(if follow_symlinks {
            Listing::following_symlinks(entries)
        } else {
            Listing::new(entries)
        });
    }
}
