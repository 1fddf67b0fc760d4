//! File data kept in sftpfs's own memory (`page_cache=BYTES`): the
//! Prefuse thesis's user-space page cache, for where the kernel's page
//! cache is not in the way. Off on the kernel path (the kernel caches file
//! data itself); on in direct mode, where sftpfs runs in the run's server
//! and every process of the run reads through it, so a file one process
//! read is in memory for the next.
//!
//! Pages are 128 KiB, kept for `dcache_timeout` at most (a change made on
//! the server by someone else is seen after that), under a generation of
//! their file's: an open that finds the file's mtime or size changed, and
//! every write, truncate, rename or unlink through this mount, starts a new
//! generation, and the old pages are never read again (they age out).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use moka::sync::Cache;

/// Bytes per page.
pub const PAGE: u64 = 128 * 1024;

/// What a file looked like when its pages were read: (mtime, size).
pub type Stamp = (u32, u64);

struct FileState {
    generation: u64,
    stamp: Option<Stamp>,
}

pub struct PageCache {
    pages: Cache<(u64, u64), Arc<Vec<u8>>, foldhash::fast::RandomState>,
    files: Mutex<HashMap<Vec<u8>, FileState, foldhash::fast::RandomState>>,
    next: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl PageCache {
    pub fn new(bytes: u64, ttl: Duration) -> PageCache {
        PageCache {
            pages: Cache::builder()
                .max_capacity(bytes)
                .weigher(|_, v: &Arc<Vec<u8>>| v.len().max(1) as u32)
                .time_to_live(ttl.max(Duration::from_millis(1)))
                .build_with_hasher(foldhash::fast::RandomState::default()),
            files: Mutex::default(),
            next: AtomicU64::new(1),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    fn files(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<Vec<u8>, FileState, foldhash::fast::RandomState>> {
        self.files.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fresh(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// `path` was just opened and looks like `stamp`: the generation its
    /// pages live under (a new one if it changed since they were read).
    pub fn opened(&self, path: &[u8], stamp: Stamp) -> u64 {
        let mut f = self.files();
        let fresh = self.fresh();
        let st = f.entry(path.to_vec()).or_insert(FileState {
            generation: fresh,
            stamp: None,
        });
        if st.stamp != Some(stamp) {
            st.generation = fresh;
            st.stamp = Some(stamp);
        }
        st.generation
    }

    /// The generation pages of `path` are read and kept under now.
    pub fn generation(&self, path: &[u8]) -> u64 {
        let fresh = self.fresh();
        self.files()
            .entry(path.to_vec())
            .or_insert(FileState {
                generation: fresh,
                stamp: None,
            })
            .generation
    }

    /// `path` changed through this mount: its pages are stale.
    pub fn changed(&self, path: &[u8]) {
        let fresh = self.fresh();
        if let Some(st) = self.files().get_mut(path) {
            st.generation = fresh;
            st.stamp = None;
        }
    }

    /// A directory (or file) moved or went: everything at or below it.
    pub fn tree_changed(&self, path: &[u8]) {
        let mut f = self.files();
        f.retain(|p, _| {
            !(p == path || (p.len() > path.len() && p.starts_with(path) && p[path.len()] == b'/'))
        });
    }

    pub fn get(&self, generation: u64, page: u64) -> Option<Arc<Vec<u8>>> {
        let hit = self.pages.get(&(generation, page));
        let c = if hit.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        c.fetch_add(1, Ordering::Relaxed);
        hit
    }

    pub fn put(&self, generation: u64, page: u64, data: Vec<u8>) {
        self.pages.insert((generation, page), Arc::new(data));
    }

    /// (hits, misses) of page lookups.
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

    #[test]
    fn a_changed_file_reads_no_old_page() {
        let c = PageCache::new(1 << 20, Duration::from_secs(60));
        let g = c.opened(b"/f", (1, 10));
        c.put(g, 0, vec![1; 10]);
        assert_eq!(c.opened(b"/f", (1, 10)), g, "unchanged: same pages");
        assert!(c.get(g, 0).is_some());
        let g2 = c.opened(b"/f", (2, 10));
        assert_ne!(g2, g);
        assert!(c.get(g2, 0).is_none());
        c.put(g2, 0, vec![2; 10]);
        c.changed(b"/f");
        assert_ne!(c.generation(b"/f"), g2);
        let g3 = c.generation(b"/f");
        c.tree_changed(b"/f");
        assert_ne!(c.generation(b"/f"), g3);
    }
}
