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
//! Every change made through this mount updates or drops what it touches
//! before it is answered, so the mount's own changes are seen at once; a
//! change made on the server by someone else is seen once the entry
//! expires. An answer that was on its way while a change was made is not
//! stored (the change epoch moved), so it cannot undo the change.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;

use crate::wire::Attrs;

/// A directory's entries as one listing gave them ("." and ".." left out).
#[derive(Debug, Default)]
pub struct Listing {
    pub entries: Vec<(Vec<u8>, Attrs)>,
    index: HashMap<Vec<u8>, usize, foldhash::fast::RandomState>,
}

impl Listing {
    pub fn new(entries: Vec<(Vec<u8>, Attrs)>) -> Listing {
        let index = entries
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (n.clone(), i))
            .collect();
        Listing { entries, index }
    }

    pub fn get(&self, name: &[u8]) -> Option<&Attrs> {
        self.index.get(name).map(|&i| &self.entries[i].1)
    }
}

pub struct MetaCache {
    attrs: Cache<Vec<u8>, Option<Attrs>, foldhash::fast::RandomState>,
    listings: Cache<Vec<u8>, Arc<Listing>, foldhash::fast::RandomState>,
    links: Cache<Vec<u8>, Arc<Vec<u8>>, foldhash::fast::RandomState>,
    epoch: AtomicU64,
    enabled: bool,
    hits: AtomicU64,
    misses: AtomicU64,
}

/// A stamp taken before asking the server; an answer is stored only if no
/// change was made meanwhile.
#[derive(Clone, Copy)]
pub struct Epoch(u64);

fn parent(path: &[u8]) -> Option<(&[u8], &[u8])> {
    let i = path.iter().rposition(|&b| b == b'/')?;
    Some((if i == 0 { b"/" } else { &path[..i] }, &path[i + 1..]))
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
            enabled: enabled && !stat_ttl.is_zero() && max_entries > 0,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub fn epoch(&self) -> Epoch {
        Epoch(self.epoch.load(Ordering::Acquire))
    }

    fn current(&self, e: Epoch) -> bool {
        self.enabled && self.epoch.load(Ordering::Acquire) == e.0
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
            Some(l.get(name).copied())
        });
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    pub fn put(&self, path: &[u8], attrs: Option<Attrs>, e: Epoch) {
        if self.current(e) {
            self.attrs.insert(path.to_vec(), attrs);
        }
    }

    pub fn listing(&self, dir: &[u8]) -> Option<Arc<Listing>> {
        self.enabled.then(|| self.listings.get(dir)).flatten()
    }

    pub fn put_listing(&self, dir: &[u8], l: Arc<Listing>, e: Epoch) {
        if self.current(e) {
            self.listings.insert(dir.to_vec(), l);
        }
    }

    pub fn link(&self, path: &[u8]) -> Option<Arc<Vec<u8>>> {
        self.enabled.then(|| self.links.get(path)).flatten()
    }

    pub fn put_link(&self, path: &[u8], target: Arc<Vec<u8>>, e: Epoch) {
        if self.current(e) {
            self.links.insert(path.to_vec(), target);
        }
    }

    /// `path` changed (its content or attributes, or the name itself):
    /// forget it and its parent's listing.
    pub fn changed(&self, path: &[u8]) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.attrs.invalidate(path);
        self.links.invalidate(path);
        if let Some((dir, _)) = parent(path) {
            self.listings.invalidate(dir);
        }
        self.listings.invalidate(path);
    }

    /// Only the attributes of `path` changed (its size by a write, its
    /// mode): its name stays, the parent's listing holds stale attributes
    /// for it, so both go.
    pub fn attrs_changed(&self, path: &[u8]) {
        self.changed(path);
    }

    /// A directory moved or went: everything below it too.
    pub fn tree_changed(&self, path: &[u8]) {
        self.changed(path);
        let mut prefix = path.to_vec();
        prefix.push(b'/');
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
        c.changed(b"/d/b");
        assert_eq!(c.lookup(b"/d/a"), None, "the parent's listing went");
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
    fn a_moved_tree_is_forgotten_below() {
        let c = cache();
        let e = c.epoch();
        c.put(b"/d/sub/f", Some(file(1)), e);
        c.put(b"/dx", Some(file(1)), e);
        c.tree_changed(b"/d");
        c.attrs.run_pending_tasks();
        assert_eq!(c.lookup(b"/d/sub/f"), None);
        assert_eq!(c.lookup(b"/dx"), Some(Some(file(1))));
    }
}
