//! Small files read ahead of a program that reads a directory's files one
//! by one (`cat dir/*`, `grep -r`, a compiler reading headers, tests
//! reading fixtures). Each such file costs two round trips however well
//! its reads are pipelined: OPEN (with LSTAT), then READ. Once a program
//! has opened two files of one directory for reading, the directory's
//! small files it has not opened yet are opened, read whole and closed in
//! the background, many in flight at once: the ones that come next in the
//! order the program is seen to follow (the listing's, as `grep -r` and
//! `find` go; by name, numbers compared as numbers, as a shell's glob or a
//! numbered loop go; by name byte by byte). A program whose last two files
//! follow no such order gets nothing fetched. An
//! open that finds its file fetched, and the file as the metadata cache
//! knows it now (same mtime and size), costs no round trip: the file is
//! opened on the server only if something needs a handle, and its reads
//! are answered from what was fetched.
//!
//! The window of files asked for doubles each time the program takes one,
//! from 8 to `prefetch_files` (128); a program that stops taking them
//! stops the fetching. What was fetched is used for `dcache_timeout` at
//! most, as the listing that gave its mtime and size, and never once this
//! mount changed the file (`changed`). A program going through the
//! directory again (a file it read is opened again) starts a new pass,
//! fetched again. Memory: at most `MOST_BYTES`.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use moka::sync::Cache;

use crate::cache::{Listing, MetaCache};
use crate::client::Client;
use crate::wire::{pflags, status, Attrs, Reply, Request};

/// (mtime, size): what a file looked like when it was fetched.
pub type Stamp = (u32, u64);

pub fn stamp_of(a: &Attrs) -> Stamp {
    (a.times.map_or(0, |t| t.1), a.size.unwrap_or(0))
}

/// Read-only opens of one directory's files before the rest are fetched.
const OPENS_BEFORE_FETCHING: u32 = 2;
/// Files asked for at first.
const FIRST_WINDOW: usize = 8;
/// Bytes of fetched files kept, at most.
pub const MOST_BYTES: u64 = 32 << 20;
/// Batches waiting for a fetching thread, at most; more are dropped.
const QUEUE: usize = 64;
/// Threads fetching.
const THREADS: usize = 2;

/// A file fetched whole.
struct Fetched {
    stamp: Stamp,
    data: Arc<Vec<u8>>,
}

/// What is known of one directory a program reads files of.
#[derive(Default)]
struct DirReads {
    opens: u32,
    window: usize,
    /// Fetched or on their way, not taken yet.
    outstanding: usize,
    /// Names opened or asked for: not fetched (again) in this pass.
    seen: HashSet<Vec<u8>>,
    /// Names the program opened or took: one opened again starts a new
    /// pass over the directory.
    read: HashSet<Vec<u8>>,
    /// The last two names the program opened, the latest last.
    recent: [Vec<u8>; 2],
    /// The listing's entries by name, for the listing they were made of.
    by_name: Option<(Arc<Listing>, Orders)>,
}

/// Two orders of a listing's entries besides its own: positions in the
/// listing, and each entry's rank in them.
struct Orders {
    natural: Vec<u32>,
    natural_rank: Vec<u32>,
    bytes: Vec<u32>,
    bytes_rank: Vec<u32>,
}

impl Orders {
    fn of(l: &Listing) -> Orders {
        let ranks = |order: &[u32]| {
            let mut rank = vec![0u32; order.len()];
            for (r, &i) in order.iter().enumerate() {
                rank[i as usize] = r as u32;
            }
            rank
        };
        let mut natural: Vec<u32> = (0..l.entries.len() as u32).collect();
        natural.sort_by(|&a, &b| {
            natural_cmp(&l.entries[a as usize].name, &l.entries[b as usize].name)
        });
        let mut bytes: Vec<u32> = (0..l.entries.len() as u32).collect();
        bytes.sort_by(|&a, &b| l.entries[a as usize].name.cmp(&l.entries[b as usize].name));
        Orders {
            natural_rank: ranks(&natural),
            natural,
            bytes_rank: ranks(&bytes),
            bytes,
        }
    }
}

/// Names compared with their runs of digits as numbers ("f9" < "f10").
fn natural_cmp(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i].is_ascii_digit() && b[j].is_ascii_digit() {
            let run =
                |s: &[u8], k: usize| k + s[k..].iter().take_while(|c| c.is_ascii_digit()).count();
            let (ei, ej) = (run(a, i), run(b, j));
            let strip = |s: &[u8]| {
                let z = s.iter().take_while(|&&c| c == b'0').count();
                s[z..].to_vec()
            };
            let (na, nb) = (strip(&a[i..ei]), strip(&b[j..ej]));
            let by_value = na.len().cmp(&nb.len()).then_with(|| na.cmp(&nb));
            if by_value != Ordering::Equal {
                return by_value;
            }
            (i, j) = (ei, ej);
        } else {
            if a[i] != b[j] {
                return a[i].cmp(&b[j]);
            }
            i += 1;
            j += 1;
        }
    }
    (a.len() - i).cmp(&(b.len() - j)).then_with(|| a.cmp(b))
}

/// How far apart two files the program opened one after the other may be,
/// in an order, for it to be following that order (files it skips, such
/// as ones too large to fetch or not regular, in between).
const MOST_GAP: usize = 4;

impl DirReads {
    fn record(&mut self, name: &[u8]) {
        self.recent.swap(0, 1);
        self.recent[1] = name.to_vec();
    }

    /// The positions in `l` of the entries after the program's latest
    /// file, in the order its last two files followed; None if they
    /// followed none.
    fn next_in_order(&mut self, l: &Arc<Listing>) -> Option<Vec<u32>> {
        let (prev, last) = (l.position(&self.recent[0])?, l.position(&self.recent[1])?);
        if !self
            .by_name
            .as_ref()
            .is_some_and(|(kept, _)| Arc::ptr_eq(kept, l))
        {
            self.by_name = Some((l.clone(), Orders::of(l)));
        }
        let (_, o) = self.by_name.as_ref()?;
        let gap = |a: usize, b: usize| b.checked_sub(a).filter(|g| (1..=MOST_GAP).contains(g));
        // The order in which the two are closest; the listing's on a tie.
        let listing = gap(prev, last).map(|g| (g, 0, last));
        let natural = gap(o.natural_rank[prev] as usize, o.natural_rank[last] as usize)
            .map(|g| (g, 1, o.natural_rank[last] as usize));
        let bytes = gap(o.bytes_rank[prev] as usize, o.bytes_rank[last] as usize)
            .map(|g| (g, 2, o.bytes_rank[last] as usize));
        let (_, which, at) = [listing, natural, bytes].into_iter().flatten().min()?;
        Some(match which {
            0 => (at as u32 + 1..l.entries.len() as u32).collect(),
            1 => o.natural[at + 1..].to_vec(),
            _ => o.bytes[at + 1..].to_vec(),
        })
    }
}

struct Batch {
    dir: Vec<u8>,
    files: Vec<(Vec<u8>, Stamp)>,
    reads: Arc<Mutex<DirReads>>,
    /// `changes` when the batch was made.
    since: u64,
}

struct Shared {
    client: Arc<Client>,
    fetched: Cache<Vec<u8>, Arc<Fetched>, foldhash::fast::RandomState>,
    /// Paths this mount changed, with the value of `changes` then: a
    /// fetch that started before must not keep its (old) data.
    changed: Cache<Vec<u8>, u64, foldhash::fast::RandomState>,
    changes: AtomicU64,
    /// Held while a fetched file is checked and kept, and while a change
    /// is recorded: a change cannot fall between the two.
    keeping: Mutex<()>,
    fetched_count: AtomicU64,
    taken_count: AtomicU64,
}

pub struct SmallFiles {
    shared: Arc<Shared>,
    dirs: Cache<Vec<u8>, Arc<Mutex<DirReads>>, foldhash::fast::RandomState>,
    cache: Arc<MetaCache>,
    most_window: usize,
    /// None: off.
    queue: Option<SyncSender<Batch>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn split(path: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = path.iter().rposition(|&b| b == b'/')?;
    let dir = if i == 0 { &path[..1] } else { &path[..i] };
    Some((dir, &path[i + 1..]))
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if p != b"/" {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

impl SmallFiles {
    /// `most_window` files asked for at once at most (0: off); `ttl`: how
    /// long a fetched file may be used.
    pub fn new(
        client: Arc<Client>,
        cache: Arc<MetaCache>,
        most_window: usize,
        ttl: Duration,
    ) -> SmallFiles {
        let shared = Arc::new(Shared {
            client,
            fetched: Cache::builder()
                .max_capacity(MOST_BYTES)
                .weigher(|_, f: &Arc<Fetched>| f.data.len().max(64) as u32)
                .time_to_live(ttl.max(Duration::from_millis(1)))
                .build_with_hasher(foldhash::fast::RandomState::default()),
            changed: Cache::builder()
                .max_capacity(10_000)
                .time_to_live(Duration::from_secs(120))
                .build_with_hasher(foldhash::fast::RandomState::default()),
            changes: AtomicU64::new(1),
            keeping: Mutex::new(()),
            fetched_count: AtomicU64::new(0),
            taken_count: AtomicU64::new(0),
        });
        let queue = (most_window > 0).then(|| {
            let (tx, rx) = sync_channel::<Batch>(QUEUE);
            let rx = Arc::new(Mutex::new(rx));
            for i in 0..THREADS {
                let (s, rx) = (Arc::downgrade(&shared), rx.clone());
                let spawned = std::thread::Builder::new()
                    .name(format!("sftpfs-files-{i}"))
                    .spawn(move || loop {
                        let next = lock(&rx).recv();
                        let (Ok(batch), Some(s)) = (next, s.upgrade()) else {
                            return;
                        };
                        fetch(&s, batch);
                    });
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "no thread for reading small files ahead");
                    break;
                }
            }
            tx
        });
        SmallFiles {
            shared,
            dirs: Cache::builder()
                .max_capacity(1000)
                .time_to_live(ttl.max(Duration::from_secs(1)))
                .build_with_hasher(foldhash::fast::RandomState::default()),
            cache,
            most_window,
            queue,
        }
    }

    /// A read-only open of `path`: the file's data if it was fetched and
    /// the file is, as far as the metadata cache knows, unchanged since.
    pub fn take(&self, path: &[u8]) -> Option<(Arc<Vec<u8>>, Attrs)> {
        self.queue.as_ref()?;
        let f = self.shared.fetched.remove(path)?;
        let Some(Some(now)) = self.cache.lookup(path) else {
            return None;
        };
        if stamp_of(&now) != f.stamp {
            return None;
        }
        self.shared.taken_count.fetch_add(1, Ordering::Relaxed);
        if let Some((dir, name)) = split(path) {
            if let Some(d) = self.dirs.get(dir) {
                let more = {
                    let mut r = lock(&d);
                    r.record(name);
                    r.read.insert(name.to_vec());
                    r.outstanding = r.outstanding.saturating_sub(1);
                    r.window = (r.window * 2).min(self.most_window);
                    // Keep half a window ahead of the program.
                    (r.outstanding <= r.window / 2).then(|| r.window - r.outstanding)
                };
                if let Some(n) = more {
                    self.ask(dir, &d, n);
                }
            }
        }
        Some((f.data.clone(), now))
    }

    /// `path` was opened read-only on the server: after a few files of
    /// its directory, fetch the others.
    pub fn opened(&self, path: &[u8]) {
        if self.queue.is_none() {
            return;
        }
        let Some((dir, name)) = split(path) else {
            return;
        };
        let d = self.dirs.get_with(dir.to_vec(), || {
            Arc::new(Mutex::new(DirReads {
                window: FIRST_WINDOW.min(self.most_window),
                ..DirReads::default()
            }))
        });
        let more = {
            let mut r = lock(&d);
            if r.read.contains(name) {
                // Read again (its page cache dropped, or another program
                // going through the same files): a new pass, whose files
                // are fetched again; otherwise every one of them would
                // cost its round trips until this record expires.
                *r = DirReads {
                    window: FIRST_WINDOW.min(self.most_window),
                    ..DirReads::default()
                };
            }
            r.opens += 1;
            r.record(name);
            r.read.insert(name.to_vec());
            // Not asked for: the first files, or the program left the
            // order guessed (what was asked for is not waited for).
            let asked = !r.seen.insert(name.to_vec());
            if !asked {
                r.outstanding = 0;
            }
            (r.opens >= OPENS_BEFORE_FETCHING && r.outstanding == 0).then_some(r.window)
        };
        if let Some(n) = more {
            self.ask(dir, &d, n);
        }
    }

    /// Fetch up to `n` files of `dir` not seen yet, next in the program's
    /// order: regular files the server returns whole in one READ.
    fn ask(&self, dir: &[u8], d: &Arc<Mutex<DirReads>>, n: usize) {
        let (Some(q), Some(listing)) = (&self.queue, self.cache.listing(dir)) else {
            return;
        };
        let Ok(info) = self.shared.client.info() else {
            return;
        };
        let most = u64::from(info.max_read);
        let files: Vec<(Vec<u8>, Stamp)> = {
            let mut r = lock(d);
            let Some(next) = r.next_in_order(&listing) else {
                return;
            };
            let chosen: Vec<(Vec<u8>, Stamp)> = next
                .iter()
                .map(|&i| &listing.entries[i as usize])
                .filter(|e| {
                    e.current
                        && e.attrs
                            .perm
                            .is_some_and(|p| p & libc::S_IFMT == libc::S_IFREG)
                        && e.attrs.size.is_some_and(|s| s < most)
                        && !r.seen.contains(&e.name)
                        && !self.shared.fetched.contains_key(&join(dir, &e.name))
                })
                .take(n)
                .map(|e| (e.name.clone(), stamp_of(&e.attrs)))
                .collect();
            for (name, _) in &chosen {
                r.seen.insert(name.clone());
            }
            r.outstanding += chosen.len();
            chosen
        };
        if files.is_empty() {
            return;
        }
        let count = files.len();
        let batch = Batch {
            dir: dir.to_vec(),
            files,
            reads: d.clone(),
            since: self.shared.changes.load(Ordering::Acquire),
        };
        if q.try_send(batch).is_err() {
            let mut r = lock(d);
            r.outstanding = r.outstanding.saturating_sub(count);
        }
    }

    /// This mount changed `path` (written, truncated, renamed, removed),
    /// or everything below it (`tree`).
    pub fn changed(&self, path: &[u8], tree: bool) {
        let _keeping = lock(&self.shared.keeping);
        let n = self.shared.changes.fetch_add(1, Ordering::AcqRel) + 1;
        if tree {
            let p = path.to_vec();
            let _ = self.shared.fetched.invalidate_entries_if(move |k, _| {
                k == &p || (k.starts_with(&p) && k.get(p.len()) == Some(&b'/'))
            });
            // Whatever is on its way is older than the change.
            self.shared.changed.insert(b"/".to_vec(), n);
        } else {
            self.shared.fetched.invalidate(path);
            self.shared.changed.insert(path.to_vec(), n);
        }
    }

    /// (files fetched, files taken by an open), for statistics.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.shared.fetched_count.load(Ordering::Relaxed),
            self.shared.taken_count.load(Ordering::Relaxed),
        )
    }
}

/// Open every file of `b` at once, then read each whole and close it as
/// its handle comes back: about two round trips for the batch.
fn fetch(s: &Shared, b: Batch) {
    let deadline = Instant::now() + s.client.timeout();
    let done_without = |k: usize| {
        let mut r = lock(&b.reads);
        r.outstanding = r.outstanding.saturating_sub(k);
    };
    let Ok((conn, _)) = s.client.current(deadline) else {
        return done_without(b.files.len());
    };
    let paths: Vec<Vec<u8>> = b.files.iter().map(|(n, _)| join(&b.dir, n)).collect();
    let opens: Vec<Request<'_>> = paths
        .iter()
        .map(|p| Request::Open {
            path: p,
            pflags: pflags::READ,
            attrs: Attrs::default(),
        })
        .collect();
    let opened = conn.call_many(&opens);
    let mut reads = Vec::with_capacity(paths.len());
    let mut failed = 0;
    for (i, w) in opened.iter().enumerate() {
        match w.wait(deadline) {
            Ok(Reply::Handle(h)) => {
                // One byte more than the size: a file that grew since
                // the listing shows it, and is not kept.
                let size = b.files[i].1 .1;
                let ws = conn.call_many(&[
                    Request::Read {
                        handle: &h,
                        offset: 0,
                        len: (size + 1) as u32,
                    },
                    Request::Close { handle: &h },
                ]);
                reads.push((i, ws[0].clone()));
            }
            _ => failed += 1,
        }
    }
    for (i, w) in reads {
        let (path, (_, stamp)) = (&paths[i], b.files[i].clone());
        let data = match w.wait(deadline) {
            Ok(Reply::Data(d)) if d.len() as u64 == stamp.1 => d,
            Ok(Reply::Status { code, .. }) if code == status::EOF && stamp.1 == 0 => Vec::new(),
            _ => {
                failed += 1;
                continue;
            }
        };
        // Not if this mount changed it since the batch was made.
        let _keeping = lock(&s.keeping);
        let changed_since = |p: &[u8]| s.changed.get(p).is_some_and(|n| n > b.since);
        if changed_since(path) || changed_since(b"/") {
            failed += 1;
            continue;
        }
        s.fetched.insert(
            path.clone(),
            Arc::new(Fetched {
                stamp,
                data: Arc::new(data),
            }),
        );
        s.fetched_count.fetch_add(1, Ordering::Relaxed);
    }
    if failed > 0 {
        done_without(failed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listing(names: &[&str]) -> Arc<Listing> {
        Arc::new(Listing::new(
            names
                .iter()
                .map(|n| (n.as_bytes().to_vec(), Attrs::default()))
                .collect(),
        ))
    }

    fn names(l: &Listing, next: &[u32]) -> Vec<String> {
        next.iter()
            .map(|&i| String::from_utf8_lossy(&l.entries[i as usize].name).into_owned())
            .collect()
    }

    #[test]
    fn numbers_in_names_compare_as_numbers() {
        let mut v = vec!["f10", "f9", "f010", "g1", "f1", "f", "f2a", "f2"];
        v.sort_by(|a, b| natural_cmp(a.as_bytes(), b.as_bytes()));
        assert_eq!(v, ["f", "f1", "f2", "f2a", "f9", "f010", "f10", "g1"]);
    }

    #[test]
    fn the_order_the_last_two_files_followed_is_the_one_fetched_in() {
        // A listing in the server's (hash) order.
        let l = listing(&["f3", "f10", "f1", "f11", "f20", "f2", "f4"]);
        let after = |a: &str, b: &str| {
            let mut r = DirReads::default();
            r.record(a.as_bytes());
            r.record(b.as_bytes());
            r.next_in_order(&l).map(|next| names(&l, &next))
        };
        // Numbered (a loop): f1 then f2.
        assert_eq!(
            after("f1", "f2").unwrap(),
            ["f3", "f4", "f10", "f11", "f20"]
        );
        // By bytes (a glob in the C locale): f1 then f10.
        assert_eq!(
            after("f1", "f10").unwrap(),
            ["f11", "f2", "f20", "f3", "f4"]
        );
        // The listing's own order (grep -r): f3 then f10.
        assert_eq!(
            after("f3", "f10").unwrap(),
            ["f1", "f11", "f20", "f2", "f4"]
        );
        // A file skipped (too large, say): still in order.
        assert_eq!(after("f2", "f10").unwrap(), ["f11", "f20"]);
        // Backwards in every order: nothing.
        assert!(after("f20", "f1").is_none());
    }
}
