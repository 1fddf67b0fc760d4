//! What sftpfs remembers about the server's namespace, and for how long
//! (sshfs's directory cache, with its option names):
//!
//! - attributes of a path, from LSTAT or from a listing, and names known
//!   to be missing: `dcache_stat_timeout` (default `dcache_timeout`, 20 s);
//! - whole directory listings (names with attributes): a lookup in a
//!   listed directory costs no request, a name it lacks is missing;
//!   `dcache_dir_timeout`;
//! - symlink targets: `dcache_link_timeout`.
//!
//! Every change made through this mount updates what it touches before it
//! is answered: a name made is added to its directory's listing with its
//! attributes, a name removed is taken out and remembered as missing, a
//! directory made is known empty, attributes changed are forgotten. So the
//! mount's own changes are seen at once, and a program that creates many
//! files (tar, cp, git clone) pays no round trip to learn that each name
//! is free. A change made on the server by someone else is seen once the
//! entry expires. An answer that was on its way while a change was made is
//! not stored (the change epoch moved), so it cannot undo the change.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use moka::sync::Cache;

use crate::wire::Attrs;

/// One name of a listing: its attributes, and whether they are still
/// current (a change through the mount makes them stale; the file type
/// in them stays right).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListEntry {
    pub name: Vec<u8>,
    pub attrs: Attrs,
    pub current: bool,
}

/// A directory's entries ("." and ".." left out).
#[derive(Clone, Debug, Default)]
pub struct Listing {
    pub entries: Vec<ListEntry>,
    index: HashMap<Vec<u8>, usize, foldhash::fast::RandomState>,
}

impl Listing {
    pub fn new(entries: Vec<(Vec<u8>, Attrs)>) -> Listing {
        Listing::from_entries(
            entries
                .into_iter()
                .map(|(name, attrs)| ListEntry {
                    name,
                    attrs,
                    current: true,
                })
                .collect(),
        )
    }

    /// With sshfs's follow_symlinks, where a symlink is shown as what it
    /// points to: its entry's attributes (the link's own, from READDIR)
    /// are stale from the start, so a lookup asks STAT.
    pub fn following_symlinks(entries: Vec<(Vec<u8>, Attrs)>) -> Listing {
        Listing::from_entries(
            entries
                .into_iter()
                .map(|(name, attrs)| ListEntry {
                    current: attrs.perm.is_none_or(|p| p & libc::S_IFMT != libc::S_IFLNK),
                    name,
                    attrs,
                })
                .collect(),
        )
    }

    fn from_entries(entries: Vec<ListEntry>) -> Listing {
        let index = entries
            .iter()
            .enumerate()
            .map(|(i, e)| (e.name.clone(), i))
            .collect();
        Listing { entries, index }
    }

    /// Where `name` is among the entries.
    pub fn position(&self, name: &[u8]) -> Option<usize> {
        self.index.get(name).copied()
    }

    /// The entry called `name`, if the directory holds one.
    pub fn get(&self, name: &[u8]) -> Option<&ListEntry> {
        self.index.get(name).map(|&i| &self.entries[i])
    }

    /// A copy with `name` holding `attrs`.
    fn with(&self, name: &[u8], attrs: Attrs) -> Listing {
        let mut l = self.clone();
        let e = ListEntry {
            name: name.to_vec(),
            attrs,
            current: true,
        };
        match l.index.get(name) {
            Some(&i) => l.entries[i] = e,
            None => {
                l.index.insert(name.to_vec(), l.entries.len());
                l.entries.push(e);
            }
        }
        l
    }

    /// A copy with `name`'s attributes marked stale.
    fn stale(&self, name: &[u8]) -> Listing {
        let mut l = self.clone();
        if let Some(&i) = l.index.get(name) {
            l.entries[i].current = false;
        }
        l
    }

    /// A copy without `name`.
    fn without(&self, name: &[u8]) -> Listing {
        let entries = self
            .entries
            .iter()
            .filter(|e| e.name != name)
            .cloned()
            .collect();
        Listing::from_entries(entries)
    }
}

/// Listings larger than this are dropped rather than copied on a change.
const MOST_EDITED: usize = 4096;

pub struct MetaCache {
    attrs: Cache<Vec<u8>, Option<Attrs>, foldhash::fast::RandomState>,
    listings: Cache<Vec<u8>, Arc<Listing>, foldhash::fast::RandomState>,
    links: Cache<Vec<u8>, Arc<Vec<u8>>, foldhash::fast::RandomState>,
    epoch: AtomicU64,
    /// Held to change the cache for a change of the mount, and to store an
    /// answer after checking the epoch: the two never interleave.
    edit: Mutex<()>,
    enabled: bool,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// A stamp taken before asking the server; an answer is stored only if no
/// change was made meanwhile.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Epoch(u64);

impl Epoch {
    pub fn value(self) -> u64 {
        self.0
    }
}

fn parent(path: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = path.iter().rposition(|&b| b == b'/')?;
    Some((if i == 0 { b"/" } else { &path[..i] }, &path[i + 1..]))
}

fn below(path: &[u8]) -> Vec<u8> {
    let mut p = path.to_vec();
    if p != b"/" {
        p.push(b'/');
    }
    p
}

impl MetaCache {
    pub fn new(
        enabled: bool,
        max_entries: u64,
        stat_ttl: Duration,
        dir_ttl: Duration,
        link_ttl: Duration,
    ) -> MetaCache {
        let hasher = foldhash::fast::RandomState::default;
        MetaCache {
            attrs: Cache::builder()
                .max_capacity(max_entries)
                .time_to_live(stat_ttl.max(Duration::from_millis(1)))
                .support_invalidation_closures()
                .build_with_hasher(hasher()),
            // Weighed by entries, so a huge directory counts as what it holds.
            listings: Cache::builder()
                .max_capacity(max_entries)
                .weigher(|_, l: &Arc<Listing>| l.entries.len().max(1) as u32)
                .time_to_live(dir_ttl.max(Duration::from_millis(1)))
                .support_invalidation_closures()
                .build_with_hasher(hasher()),
            links: Cache::builder()
                .max_capacity(max_entries / 4 + 1)
                .time_to_live(link_ttl.max(Duration::from_millis(1)))
                .support_invalidation_closures()
                .build_with_hasher(hasher()),
            epoch: AtomicU64::new(0),
            edit: Mutex::new(()),
            enabled: enabled && !stat_ttl.is_zero() && max_entries > 0,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        self.edit.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn epoch(&self) -> Epoch {
        Epoch(self.epoch.load(Ordering::Acquire))
    }

    /// Under the edit lock: no change since `e`.
    fn current(&self, e: Epoch) -> bool {
        self.enabled && self.epoch.load(Ordering::Acquire) == e.0
    }

    fn bump(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// What is known of `path`: `Some(Some(attrs))`, `Some(None)` for a
    /// name known to be missing, `None` if the server must be asked.
    pub fn lookup(&self, path: &[u8]) -> Option<Option<Attrs>> {
        if !self.enabled {
            return None;
        }
        let found = self.attrs.get(path).or_else(|| {
            let (dir, name) = parent(path)?;
            let l = self.listings.get(dir)?;
            match l.get(name) {
                None => Some(None),
                Some(e) if e.current => Some(Some(e.attrs)),
                // There, but its attributes changed since the listing.
                Some(_) => None,
            }
        });
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Keep what the server said of `path` (None: missing), unless a change
    /// was made since `e`.
    pub fn put(&self, path: &[u8], attrs: Option<Attrs>, e: Epoch) {
        let _g = self.lock();
        if self.current(e) {
            self.attrs.insert(path.to_vec(), attrs);
        }
    }

    pub fn listing(&self, dir: &[u8]) -> Option<Arc<Listing>> {
        self.enabled.then(|| self.listings.get(dir)).flatten()
    }

    pub fn put_listing(&self, dir: &[u8], l: Arc<Listing>, e: Epoch) {
        let _g = self.lock();
        if self.current(e) {
            self.listings.insert(dir.to_vec(), l);
        }
    }

    pub fn link(&self, path: &[u8]) -> Option<Arc<Vec<u8>>> {
        self.enabled.then(|| self.links.get(path)).flatten()
    }

    pub fn put_link(&self, path: &[u8], target: Arc<Vec<u8>>, e: Epoch) {
        let _g = self.lock();
        if self.current(e) {
            self.links.insert(path.to_vec(), target);
        }
    }

    /// Edit the listing of `path`'s directory, if one is kept: `f` gives
    /// the new one (a large one is dropped instead).
    fn edit_parent(&self, path: &[u8], f: impl FnOnce(&Listing, &[u8]) -> Listing) {
        let Some((dir, name)) = parent(path) else {
            return;
        };
        if let Some(l) = self.listings.get(dir) {
            if l.entries.len() < MOST_EDITED {
                self.listings.insert(dir.to_vec(), Arc::new(f(&l, name)));
            } else {
                self.listings.invalidate(dir);
            }
        }
    }

    /// This mount made `path` (create, symlink, link) or set its
    /// attributes (chmod, utimes): it is there, with `attrs`.
    pub fn made(&self, path: &[u8], attrs: Attrs) {
        let _g = self.lock();
        self.bump();
        if !self.enabled {
            return;
        }
        self.attrs.insert(path.to_vec(), Some(attrs));
        self.links.invalidate(path);
        self.edit_parent(path, |l, name| l.with(name, attrs));
    }

    /// The server just said what `path` is (an open answered with its
    /// attributes): kept, and its listing entry too. Nothing was changed,
    /// so what is in flight stays good (no new epoch): a listing fetched
    /// meanwhile is as fresh, and these attributes, looked up first, win.
    pub fn seen(&self, path: &[u8], attrs: Attrs) {
        let _g = self.lock();
        if !self.enabled {
            return;
        }
        self.attrs.insert(path.to_vec(), Some(attrs));
        let differs = parent(path).is_some_and(|(dir, name)| {
            self.listings
                .get(dir)
                .is_some_and(|l| l.get(name).is_some_and(|e| !e.current || e.attrs != attrs))
        });
        if differs {
            self.edit_parent(path, |l, name| l.with(name, attrs));
        }
    }

    /// This mount made directory `path` (the epoch `before` was read
    /// before it asked): it is there, and empty, unless some other change
    /// went through the cache meanwhile (a create inside it, say), which
    /// an empty listing would hide.
    pub fn made_dir(&self, path: &[u8], attrs: Attrs, before: Epoch) {
        let _g = self.lock();
        let quiet = self.current(before);
        self.bump();
        if !self.enabled {
            return;
        }
        self.attrs.insert(path.to_vec(), Some(attrs));
        self.links.invalidate(path);
        self.edit_parent(path, |l, name| l.with(name, attrs));
        if quiet {
            self.listings
                .insert(path.to_vec(), Arc::new(Listing::default()));
        }
    }

    /// This mount removed `path`, which may have been a directory (rmdir,
    /// rename's source): it is missing now, and so is all that was below.
    pub fn removed_tree(&self, path: &[u8]) {
        {
            let _g = self.lock();
            self.forget_below(path);
        }
        self.removed(path);
    }

    /// `path` is there (a rename put something at it, maybe a directory
    /// with its tree), its type and attributes unknown: forgotten, with its
    /// directory's listing.
    pub fn there(&self, path: &[u8]) {
        let _g = self.lock();
        self.bump();
        self.attrs.invalidate(path);
        self.links.invalidate(path);
        self.listings.invalidate(path);
        self.forget_below(path);
        if let Some((dir, _)) = parent(path) {
            self.listings.invalidate(dir);
        }
    }

    /// This mount removed file `path` (unlink): it is missing now.
    pub fn removed(&self, path: &[u8]) {
        let _g = self.lock();
        self.bump();
        self.links.invalidate(path);
        self.listings.invalidate(path);
        if self.enabled {
            self.attrs.insert(path.to_vec(), None);
        }
        self.edit_parent(path, |l, name| l.without(name));
    }

    /// `path`'s attributes changed (a write, a truncate): forget them; its
    /// name stays.
    pub fn attrs_changed(&self, path: &[u8]) {
        let _g = self.lock();
        self.bump();
        self.attrs.invalidate(path);
        // Only the first change of a stream of writes edits the listing.
        let current = parent(path).is_some_and(|(dir, name)| {
            self.listings
                .get(dir)
                .is_some_and(|l| l.get(name).is_some_and(|e| e.current))
        });
        if current {
            self.edit_parent(path, |l, name| l.stale(name));
        }
    }

    /// Forget `path`, its parent's listing and what was below it: for
    /// changes whose result is not known (a failed or interrupted one).
    pub fn changed(&self, path: &[u8]) {
        let _g = self.lock();
        self.bump();
        self.attrs.invalidate(path);
        self.links.invalidate(path);
        self.listings.invalidate(path);
        if let Some((dir, _)) = parent(path) {
            self.listings.invalidate(dir);
        }
        self.forget_below(path);
    }

    fn forget_below(&self, path: &[u8]) {
        let prefix = below(path);
        let p = prefix.clone();
        let _ = self
            .attrs
            .invalidate_entries_if(move |k, _| k.starts_with(&p));
        let p = prefix.clone();
        let _ = self
            .listings
            .invalidate_entries_if(move |k, _| k.starts_with(&p));
        let _ = self
            .links
            .invalidate_entries_if(move |k, _| k.starts_with(&prefix));
    }

    /// (hits, misses) of lookups, for statistics.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.hits.load(Ordering::Relaxed),
            self.misses.load(Ordering::Relaxed),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache() -> MetaCache {
        let t = Duration::from_secs(60);
        MetaCache::new(true, 1000, t, t, t)
    }

    fn file(size: u64) -> Attrs {
        Attrs {
            size: Some(size),
            perm: Some(0o100644),
            ..Attrs::default()
        }
    }

    #[test]
    fn a_listing_answers_lookups_and_missing_names() {
        let c = cache();
        c.put_listing(
            b"/d",
            Arc::new(Listing::new(vec![(b"a".to_vec(), file(1))])),
            c.epoch(),
        );
        assert_eq!(c.lookup(b"/d/a"), Some(Some(file(1))));
        assert_eq!(c.lookup(b"/d/b"), Some(None));
        assert_eq!(c.lookup(b"/e/a"), None);
    }

    #[test]
    fn the_mounts_own_changes_keep_listings_right() {
        let c = cache();
        c.put_listing(b"/d", Arc::new(Listing::default()), c.epoch());
        c.made(b"/d/new", file(0));
        assert_eq!(c.lookup(b"/d/new"), Some(Some(file(0))));
        assert_eq!(c.listing(b"/d").unwrap().entries.len(), 1);
        c.attrs_changed(b"/d/new");
        assert_eq!(c.lookup(b"/d/new"), None, "there, attributes unknown");
        assert_eq!(c.lookup(b"/d/other"), Some(None), "still known missing");
        c.removed(b"/d/new");
        assert_eq!(c.lookup(b"/d/new"), Some(None));
        assert!(c.listing(b"/d").unwrap().entries.is_empty());
        let before = c.epoch();
        c.made_dir(b"/d/sub", file(0), before);
        assert_eq!(
            c.lookup(b"/d/sub/x"),
            Some(None),
            "a new directory is empty"
        );
        let before = c.epoch();
        c.made(b"/d/sub2/f", file(1));
        c.made_dir(b"/d/sub2", file(0), before);
        assert!(
            c.listing(b"/d/sub2").is_none(),
            "a change meanwhile: not known empty"
        );
        c.there(b"/d/moved");
        assert_eq!(c.lookup(b"/d/moved"), None);
        assert!(
            c.listing(b"/d").is_none(),
            "a rename's target: listing forgotten"
        );
    }

    #[test]
    fn an_answer_older_than_a_change_is_not_kept() {
        let c = cache();
        let e = c.epoch();
        c.changed(b"/x");
        c.put(b"/x", Some(file(2)), e);
        assert_eq!(c.lookup(b"/x"), None);
        let e = c.epoch();
        c.put(b"/x", Some(file(3)), e);
        assert_eq!(c.lookup(b"/x"), Some(Some(file(3))));
    }

    #[test]
    fn a_removed_tree_is_forgotten_below() {
        let c = cache();
        let e = c.epoch();
        c.put(b"/d/sub/f", Some(file(1)), e);
        c.put(b"/dx", Some(file(1)), e);
        c.removed_tree(b"/d");
        c.attrs.run_pending_tasks();
        assert_eq!(c.lookup(b"/d/sub/f"), None);
        assert_eq!(c.lookup(b"/d"), Some(None));
        assert_eq!(c.lookup(b"/dx"), Some(Some(file(1))));
    }
}
