//! Reading an object that is only in the store: ranged GETs, and for a
//! sequential reader, chunks fetched ahead in parallel in a window that
//! doubles while the reader stays sequential.
//!
//! Memory: chunks fetched ahead hold permits of one semaphore shared by
//! every open file (`read_memory` / `part_size` permits); a chunk a reader
//! is waiting for is fetched even without one, so the bound is
//! `read_memory` plus one chunk per serving thread.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use fusebox::protocol::DataOut;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use crate::store::{Store, StoreError};

/// A random read fetches at least this much (a reader's next read is
/// often just after).
const MIN_RANGE: u64 = 128 << 10;

type Fetched = Option<Result<Arc<Vec<u8>>, StoreError>>;

struct Chunk {
    done: watch::Receiver<Fetched>,
    _permit: Option<OwnedSemaphorePermit>,
}

#[derive(Default)]
struct Window {
    /// Where a sequential reader reads next.
    next: u64,
    /// Chunks to keep in flight past the one being read.
    ahead: u64,
    chunks: BTreeMap<u64, Arc<Chunk>>,
}

/// How a reader fetches: sizes and the shared memory budget.
#[derive(Clone)]
pub struct ReadConfig {
    /// Bytes per chunk fetched ahead.
    pub chunk: u64,
    /// Most chunks ahead.
    pub max_ahead: u64,
    /// Permits for chunks held ahead, shared by all readers.
    pub budget: Arc<Semaphore>,
}

/// One open file's reads from the store.
pub struct Reader {
    key: String,
    size: u64,
    window: Mutex<Window>,
}

impl Reader {
    /// A reader of `key`, whose size was `size` when opened.
    pub fn new(key: String, size: u64) -> Reader {
        Reader {
            key,
            size,
            window: Mutex::new(Window::default()),
        }
    }

    /// Bytes held ahead by this reader.
    pub fn held(&self, cfg: &ReadConfig) -> u64 {
        self.window
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .chunks
            .len() as u64
            * cfg.chunk
    }

    fn spawn(
        &self,
        store: &Arc<Store>,
        cfg: &ReadConfig,
        idx: u64,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Arc<Chunk> {
        let (tx, rx) = watch::channel(None);
        let store = store.clone();
        let key = self.key.clone();
        let (off, len) = (idx * cfg.chunk, cfg.chunk);
        tokio::spawn(async move {
            let r = store.get(&key, off, Some(len)).await.map(Arc::new);
            let _ = tx.send(Some(r));
        });
        Arc::new(Chunk {
            done: rx,
            _permit: permit,
        })
    }

    /// Up to `size` bytes at `offset` (fewer at the end of the object),
    /// copied from the fetched chunks straight into the reply.
    pub async fn read(
        &self,
        store: &Arc<Store>,
        cfg: &ReadConfig,
        offset: u64,
        size: u32,
        out: &mut DataOut<'_>,
    ) -> Result<(), StoreError> {
        if offset >= self.size {
            return Ok(());
        }
        let end = (offset + u64::from(size)).min(self.size);
        let first = offset / cfg.chunk;
        let last = (end - 1) / cfg.chunk;
        let wanted: Option<Vec<Arc<Chunk>>> = {
            let mut w = self.window.lock().unwrap_or_else(PoisonError::into_inner);
            // The kernel reads ahead with several requests at once, which
            // arrive out of order: near where the reader is counts as
            // sequential.
            let near = w.chunks.contains_key(&first)
                || offset.abs_diff(w.next) <= cfg.chunk * (w.ahead + 1);
            if !near {
                w.chunks.clear();
                w.ahead = 0;
                w.next = end;
                None
            } else {
                // Entering a new chunk while sequential widens the window.
                if end / cfg.chunk > w.next / cfg.chunk || w.ahead == 0 {
                    w.ahead = (w.ahead * 2).clamp(1, cfg.max_ahead);
                }
                w.next = w.next.max(end);
                // Chunks wholly behind the reader are done with (a read still
                // in flight for one holds its own reference).
                let behind = (w.next / cfg.chunk).saturating_sub(1);
                w.chunks.retain(|&i, _| i >= first.min(behind));
                let chunks_in_object = self.size.div_ceil(cfg.chunk);
                let horizon = (last + w.ahead).min(chunks_in_object - 1);
                for idx in first..=horizon {
                    if w.chunks.contains_key(&idx) {
                        continue;
                    }
                    let needed = idx <= last;
                    let permit = cfg.budget.clone().try_acquire_owned().ok();
                    if permit.is_none() && !needed {
                        break;
                    }
                    let c = self.spawn(store, cfg, idx, permit);
                    w.chunks.insert(idx, c);
                }
                Some((first..=last).map(|i| w.chunks[&i].clone()).collect())
            }
        };
        let Some(wanted) = wanted else {
            // A read elsewhere: its own range, nothing kept.
            let len = (end - offset).max(MIN_RANGE).min(self.size - offset);
            let data = store.get(&self.key, offset, Some(len)).await?;
            out.extend_from_slice(&data[..data.len().min((end - offset) as usize)]);
            return Ok(());
        };
        for (i, c) in (first..=last).zip(wanted) {
            let mut rx = c.done.clone();
            let got = rx
                .wait_for(Option::is_some)
                .await
                .map_err(|_| StoreError::Other("a fetch ended without an answer".into()))?
                .clone()
                .expect("waited for Some");
            let data = match got {
                Ok(d) => d,
                Err(e) => {
                    // A failed chunk is not kept: the next read asks again.
                    self.window
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .chunks
                        .remove(&i);
                    return Err(e);
                }
            };
            let base = i * cfg.chunk;
            let from = offset.max(base) - base;
            let to = (end.min(base + cfg.chunk) - base).min(data.len() as u64);
            if from < to {
                out.extend_from_slice(&data[from as usize..to as usize]);
            }
        }
        Ok(())
    }
}
