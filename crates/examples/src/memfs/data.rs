//! Sparse file content: 4 KiB pages in an ordered map.
//!
//! Only pages that were written (or reserved by fallocate) take memory, so a
//! write at 5 GiB costs one page. The page size matches tmpfs on the usual
//! 4 KiB-page machines, which makes `st_blocks` and SEEK_DATA/SEEK_HOLE answer
//! exactly as a native tmpfs does.
//!
//! Invariant: bytes of a page past `size` are always zero, so growing the
//! file (truncate up, a write past EOF) never exposes stale data.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use fusebox::error::{Errno, FsResult};

pub(super) const PAGE: u64 = 4096;
const PAGE_BYTES: usize = PAGE as usize;

/// The largest file size, as on tmpfs (`MAX_LFS_FILESIZE` on 64-bit).
pub(super) const MAX_FILE_SIZE: u64 = i64::MAX as u64;

type Page = Box<[u8; PAGE_BYTES]>;

/// Page accounting shared by all files of one filesystem, so that statfs can
/// report free space and a runaway writer gets ENOSPC instead of exhausting
/// the daemon's memory.
#[derive(Debug)]
pub(super) struct Usage {
    used: AtomicU64,
    capacity: u64,
}

impl Usage {
    pub(super) fn new(capacity_pages: u64) -> Usage {
        Usage {
            used: AtomicU64::new(0),
            capacity: capacity_pages,
        }
    }

    pub(super) fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    pub(super) fn capacity(&self) -> u64 {
        self.capacity
    }

    fn reserve(&self, pages: u64) -> FsResult<()> {
        if pages == 0 {
            return Ok(());
        }
        self.used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                u.checked_add(pages).filter(|&v| v <= self.capacity)
            })
            .map(drop)
            .map_err(|_| Errno::ENOSPC)
    }

    fn release(&self, pages: u64) {
        // fetch_update with a closure that always returns Some cannot fail.
        let _ = self
            .used
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |u| {
                Some(u.saturating_sub(pages))
            });
    }
}

/// The bytes of one regular file.
#[derive(Debug)]
pub(super) struct Content {
    /// Page index → page. `None` is a page fallocate reserved but nobody
    /// wrote: it counts toward st_blocks and capacity and reads as zeros,
    /// yet SEEK_DATA treats it as a hole, as tmpfs does with its
    /// not-yet-uptodate fallocated pages.
    pages: BTreeMap<u64, Option<Page>>,
    size: u64,
    usage: Arc<Usage>,
}

impl Drop for Content {
    fn drop(&mut self) {
        // The last reference can be an in-flight write that outlived the
        // inode, so the pages are given back here rather than when the inode
        // leaves the table.
        self.usage.release(self.pages.len() as u64);
    }
}

fn zero_page() -> Page {
    Box::new([0u8; PAGE_BYTES])
}

impl Content {
    pub(super) fn new(usage: Arc<Usage>) -> Content {
        Content {
            pages: BTreeMap::new(),
            size: 0,
            usage,
        }
    }

    pub(super) fn size(&self) -> u64 {
        self.size
    }

    /// For an upgrade (`super::saved`): the size, then each page's index,
    /// whether it holds bytes (fallocate reserves pages that do not), and
    /// its bytes.
    pub(super) fn save(&self, out: &mut dyn Write) -> io::Result<()> {
        out.write_all(&self.size.to_le_bytes())?;
        out.write_all(&(self.pages.len() as u64).to_le_bytes())?;
        for (idx, page) in &self.pages {
            out.write_all(&idx.to_le_bytes())?;
            match page {
                Some(p) => {
                    out.write_all(&[1])?;
                    out.write_all(&p[..])?;
                }
                None => out.write_all(&[0])?,
            }
        }
        Ok(())
    }

    /// What `save` wrote, with its pages charged to `usage`.
    pub(super) fn load(input: &mut dyn Read, usage: Arc<Usage>) -> io::Result<Content> {
        let mut word = [0u8; 8];
        input.read_exact(&mut word)?;
        let size = u64::from_le_bytes(word);
        input.read_exact(&mut word)?;
        let count = u64::from_le_bytes(word);
        let mut c = Content::new(usage);
        c.size = size;
        for _ in 0..count {
            input.read_exact(&mut word)?;
            let idx = u64::from_le_bytes(word);
            let mut present = [0u8; 1];
            input.read_exact(&mut present)?;
            c.usage
                .reserve(1)
                .map_err(|_| io::Error::other("the saved files exceed this server's capacity"))?;
            // Inserted before the bytes are read, so Drop gives the page
            // back if the read fails.
            let slot = c.pages.entry(idx).or_insert(None);
            if present[0] == 1 {
                let mut p = zero_page();
                input.read_exact(&mut p[..])?;
                *slot = Some(p);
            }
        }
        Ok(c)
    }

    /// Allocated space in 512-byte units, like `st_blocks`.
    pub(super) fn blocks(&self) -> u64 {
        self.pages.len() as u64 * (PAGE / 512)
    }

    /// Pages a range `[off, end)` touches that are not allocated yet.
    fn missing(&self, first: u64, last: u64) -> u64 {
        (last - first + 1) - self.pages.range(first..=last).count() as u64
    }

    /// Append at most `len` bytes starting at `off` to `out`; fewer at EOF.
    pub(super) fn read(&self, off: u64, len: usize, out: &mut impl ReadInto) -> usize {
        if len == 0 || off >= self.size {
            return 0;
        }
        let end = off.saturating_add(len as u64).min(self.size);
        let mut pos = off;
        for (&idx, page) in self.pages.range(off / PAGE..=(end - 1) / PAGE) {
            let start = idx * PAGE;
            if start > pos {
                // A hole before this page.
                out.zeroes((start - pos) as usize);
                pos = start;
            }
            let stop = (start + PAGE).min(end);
            match page {
                Some(p) => out.bytes(&p[(pos - start) as usize..(stop - start) as usize]),
                None => out.zeroes((stop - pos) as usize),
            }
            pos = stop;
        }
        out.zeroes((end - pos) as usize);
        (end - off) as usize
    }

    /// Write all of `data` at `off`, growing the file as needed.
    pub(super) fn write(&mut self, off: u64, data: &[u8]) -> FsResult<()> {
        if data.is_empty() {
            return Ok(());
        }
        let end = off
            .checked_add(data.len() as u64)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(Errno::EFBIG)?;
        let (first, last) = (off / PAGE, (end - 1) / PAGE);
        // Reserve up front so a full filesystem fails the write as a whole
        // instead of leaving half of it behind.
        self.usage.reserve(self.missing(first, last))?;
        let mut pos = off;
        for idx in first..=last {
            let start = idx * PAGE;
            let stop = (start + PAGE).min(end);
            let page = self
                .pages
                .entry(idx)
                .or_insert(None)
                .get_or_insert_with(zero_page);
            page[(pos - start) as usize..(stop - start) as usize]
                .copy_from_slice(&data[(pos - off) as usize..(stop - off) as usize]);
            pos = stop;
        }
        self.size = self.size.max(end);
        Ok(())
    }

    /// Set the size; shrinking frees whole pages past the end and zeroes the
    /// tail of the last one (the invariant above).
    pub(super) fn truncate(&mut self, size: u64) {
        if size < self.size {
            let keep = size.div_ceil(PAGE);
            let gone = self.pages.split_off(&keep);
            self.usage.release(gone.len() as u64);
            drop(gone);
            self.zero_range(size, keep * PAGE);
        }
        self.size = size;
    }

    fn zero_range(&mut self, from: u64, to: u64) {
        if from >= to {
            return;
        }
        for (&idx, page) in self.pages.range_mut(from / PAGE..=(to - 1) / PAGE) {
            if let Some(p) = page {
                let start = idx * PAGE;
                let a = (from.max(start) - start) as usize;
                let b = (to.min(start + PAGE) - start) as usize;
                p[a..b].fill(0);
            }
        }
    }

    /// fallocate mode 0 or KEEP_SIZE: reserve the pages of the range.
    pub(super) fn allocate(&mut self, off: u64, len: u64, keep_size: bool) -> FsResult<()> {
        if len == 0 {
            return Err(Errno::EINVAL);
        }
        let end = off
            .checked_add(len)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(Errno::EFBIG)?;
        let (first, last) = (off / PAGE, (end - 1) / PAGE);
        // The capacity check bounds the loop below: a huge range fails here.
        self.usage.reserve(self.missing(first, last))?;
        for idx in first..=last {
            self.pages.entry(idx).or_insert(None);
        }
        if !keep_size {
            self.size = self.size.max(end);
        }
        Ok(())
    }

    /// FALLOC_FL_PUNCH_HOLE: free whole pages, zero the partial ones at
    /// either end. The size does not change.
    pub(super) fn punch_hole(&mut self, off: u64, len: u64) {
        let end = off.saturating_add(len);
        let (full_first, full_end) = (off.div_ceil(PAGE), end / PAGE);
        if full_first < full_end {
            let doomed: Vec<u64> = self
                .pages
                .range(full_first..full_end)
                .map(|(&k, _)| k)
                .collect();
            for k in &doomed {
                self.pages.remove(k);
            }
            self.usage.release(doomed.len() as u64);
        }
        self.zero_range(off, end);
    }

    /// SEEK_DATA: the first written byte at or after `off`.
    pub(super) fn seek_data(&self, off: u64) -> FsResult<u64> {
        if off >= self.size {
            return Err(Errno::ENXIO);
        }
        let found = self.pages.range(off / PAGE..).find(|(_, p)| p.is_some());
        match found {
            Some((&idx, _)) if idx * PAGE < self.size => Ok((idx * PAGE).max(off)),
            _ => Err(Errno::ENXIO),
        }
    }

    /// SEEK_HOLE: the first hole at or after `off`; EOF counts as one.
    pub(super) fn seek_hole(&self, off: u64) -> FsResult<u64> {
        if off >= self.size {
            return Err(Errno::ENXIO);
        }
        let mut idx = off / PAGE;
        for (&i, p) in self.pages.range(idx..) {
            if i != idx || p.is_none() {
                break;
            }
            idx += 1;
        }
        Ok((idx * PAGE).max(off).min(self.size))
    }
}

/// Where file contents are read to: a reply's [`DataOut`], or a vector.
pub(super) trait ReadInto {
    fn bytes(&mut self, b: &[u8]);
    fn zeroes(&mut self, n: usize);
}

impl ReadInto for Vec<u8> {
    fn bytes(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
    fn zeroes(&mut self, n: usize) {
        self.resize(self.len() + n, 0);
    }
}

impl ReadInto for fusebox::protocol::DataOut<'_> {
    fn bytes(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
    fn zeroes(&mut self, n: usize) {
        self.extend_zeroed(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content() -> Content {
        Content::new(Arc::new(Usage::new(1 << 20)))
    }

    #[test]
    fn truncate_zeroes_the_tail_and_frees_pages() {
        let mut c = content();
        c.write(0, &[7u8; 10000]).unwrap();
        assert_eq!(c.blocks(), 3 * 8);
        c.truncate(5000);
        assert_eq!(c.blocks(), 2 * 8);
        c.truncate(10000);
        let mut out = Vec::new();
        assert_eq!(c.read(4990, 100, &mut out), 100);
        assert_eq!(&out[..10], &[7u8; 10]);
        assert!(out[10..].iter().all(|&b| b == 0));
        assert_eq!(c.usage.used(), 2);
        let usage = c.usage.clone();
        drop(c);
        assert_eq!(usage.used(), 0);
    }

    #[test]
    fn punch_and_seek() {
        let mut c = content();
        c.write(0, &[1u8; 4 * 4096]).unwrap();
        c.punch_hole(4096 + 100, 2 * 4096);
        // Page 1 keeps its first 100 bytes, page 2 is gone, page 3 loses 100.
        assert_eq!(c.blocks(), 3 * 8);
        assert_eq!(c.seek_hole(0).unwrap(), 2 * 4096);
        assert_eq!(c.seek_data(2 * 4096).unwrap(), 3 * 4096);
        assert_eq!(c.seek_data(4 * 4096), Err(Errno::ENXIO));
        let mut out = Vec::new();
        c.read(3 * 4096, 200, &mut out);
        assert!(out[..100].iter().all(|&b| b == 0));
        assert!(out[100..].iter().all(|&b| b == 1));
    }

    #[test]
    fn fallocate_reserves_without_data_and_respects_capacity() {
        let mut c = Content::new(Arc::new(Usage::new(4)));
        c.allocate(0, 3 * 4096, false).unwrap();
        assert_eq!((c.size(), c.blocks()), (3 * 4096, 24));
        assert_eq!(c.seek_data(0), Err(Errno::ENXIO));
        assert_eq!(c.allocate(0, 10 * 4096, true), Err(Errno::ENOSPC));
        c.write(1 << 40, b"x").unwrap();
        assert_eq!(c.write(2 << 40, b"x"), Err(Errno::ENOSPC));
        assert_eq!(c.write(MAX_FILE_SIZE, b"x"), Err(Errno::EFBIG));
    }
}
