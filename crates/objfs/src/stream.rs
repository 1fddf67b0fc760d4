//! Streaming uploads: a file written front to back (`dd`, `cp`, a
//! download, a build's output) goes up in parts while it is written, so
//! its close waits for the last part rather than for the whole file.
//!
//! A [`PartStream`] is a multipart upload begun once a file written from
//! its end outgrows one part. Each part is sent as soon as the file holds
//! it whole, from the staged data file (the bytes are on local disk, not
//! in memory). The staged file stays the truth: a write below what the
//! stream has sent, a truncate or a rename drops the stream (the upload
//! is aborted in the store) and the file goes up whole at close, as any
//! other staged file does.

use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use crate::meta::Meta;
use crate::store::{Body, Store, StoreError};

/// A multipart upload that follows a file as it is written.
pub(crate) struct PartStream {
    store: Arc<Store>,
    rt: tokio::runtime::Handle,
    key: String,
    upload_id: String,
    /// The metadata the upload was begun with (S3 takes it then, not at
    /// completion).
    meta: Meta,
    /// Changed by chmod, chown or utimes since the upload began: the
    /// completed object needs the new metadata copied onto it.
    pub meta_changed: bool,
    path: PathBuf,
    part_size: u64,
    /// Parts started cover bytes `0..sent`.
    sent: u64,
    parts: Vec<JoinHandle<Result<String, StoreError>>>,
    /// Parts in flight across every stream of the mount: their bytes are
    /// read from disk as they are sent, and this bounds the memory and
    /// connections all streams take together.
    slots: Arc<Semaphore>,
    finished: bool,
}

impl PartStream {
    /// Begins a multipart upload of `key` from the staged data file at
    /// `path`.
    pub async fn begin(
        store: Arc<Store>,
        key: &str,
        meta: Meta,
        path: PathBuf,
        part_size: u64,
        slots: Arc<Semaphore>,
    ) -> Result<PartStream, StoreError> {
        let upload_id = store.create_multipart(key, meta.to_headers()).await?;
        Ok(PartStream {
            store,
            rt: tokio::runtime::Handle::current(),
            key: key.to_string(),
            upload_id,
            meta,
            meta_changed: false,
            path,
            part_size,
            sent: 0,
            parts: Vec::new(),
            slots,
            finished: false,
        })
    }

    /// The key the upload makes.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The metadata the object will carry unless [`Self::meta_changed`].
    pub fn meta(&self) -> Meta {
        self.meta
    }

    /// Whether an object of this upload would lack `now`, the file's
    /// metadata at its close: a chmod, chown or utime since it began (a
    /// write's own mtime does not count: the object keeps its start's).
    pub fn meta_changes(&self, now: &Meta) -> bool {
        self.meta_changed
            || Meta {
                mtime: self.meta.mtime,
                ..*now
            } != self.meta
    }

    /// Bytes handed to parts so far: a write below this breaks the stream.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Sends every whole part the file's first `size` bytes hold.
    pub fn advance(&mut self, size: u64) {
        while self.sent + self.part_size <= size {
            self.send_part(self.part_size);
        }
    }

    fn send_part(&mut self, len: u64) {
        let (store, slots) = (self.store.clone(), self.slots.clone());
        let (key, upload_id, path) = (self.key.clone(), self.upload_id.clone(), self.path.clone());
        let number = self.parts.len() as i32 + 1;
        let offset = self.sent;
        self.parts.push(self.rt.spawn(async move {
            let _slot = slots.acquire_owned().await.expect("never closed");
            let body = Body::File {
                path: &path,
                offset,
                len,
            };
            store.upload_part(&key, &upload_id, number, body).await
        }));
        self.sent += len;
    }

    /// Sends the rest of a file of `size` bytes (at least [`Self::sent`])
    /// and completes the object: its entity tag. On an error the upload
    /// is aborted and the caller uploads the file whole.
    pub async fn finish(mut self, size: u64) -> Result<Option<String>, StoreError> {
        debug_assert!(size >= self.sent);
        while self.sent < size {
            self.send_part(self.part_size.min(size - self.sent));
        }
        let mut tags = Vec::with_capacity(self.parts.len());
        // Awaited in place: on an error, Drop aborts the parts not yet
        // awaited along with the upload.
        for n in 0..self.parts.len() {
            let tag = (&mut self.parts[n])
                .await
                .map_err(|e| StoreError::Other(format!("part {}: {e}", n + 1)))??;
            tags.push((n as i32 + 1, tag));
        }
        let etag = self
            .store
            .complete_multipart(&self.key, &self.upload_id, tags)
            .await?;
        self.finished = true;
        Ok(etag)
    }
}

impl PartStream {
    /// Gives the upload up and waits until the store has forgotten it
    /// (a server about to exit, where Drop's abort in the background
    /// would not be sent).
    pub async fn abort(mut self) {
        self.finished = true;
        for part in &self.parts {
            part.abort();
        }
        if let Err(e) = self.store.abort_multipart(&self.key, &self.upload_id).await {
            tracing::debug!("objfs: aborting the streamed upload of {}: {e}", self.key);
        }
    }
}

impl Drop for PartStream {
    /// A stream not completed leaves no parts behind in the store.
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        for part in &self.parts {
            part.abort();
        }
        let (store, key, id) = (
            self.store.clone(),
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.upload_id),
        );
        self.rt.spawn(async move {
            if let Err(e) = store.abort_multipart(&key, &id).await {
                tracing::debug!("objfs: aborting the streamed upload of {key}: {e}");
            }
        });
    }
}
