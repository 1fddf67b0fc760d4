//! The S3 requests objfs makes, through aws-sdk-s3, each one bounded by
//! the mount's timeout, classified into a [`StoreError`] a filesystem
//! call can answer with, and counted by kind for `fusebox stats` and the
//! bench.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::{ByteStream, Length};
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart, MetadataDirective};
use aws_sdk_s3::Client;
use fusebox::Errno;

use crate::options::{BucketUrl, ObjOptions};

/// Why a request failed, in the terms a filesystem call answers in.
#[derive(Clone, Debug, thiserror::Error)]
pub enum StoreError {
    /// No such key (404).
    #[error("no such object")]
    NotFound,
    /// The bucket does not exist.
    #[error("bucket {0:?} does not exist")]
    NoSuchBucket(String),
    /// A conditional request's condition failed (412): the key exists.
    #[error("the object exists")]
    Exists,
    /// The credentials were refused or lack the right (403): the store's
    /// code and message.
    #[error("access denied by the store ({0}): check the access key and secret (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or the profile's) and that they may use this bucket")]
    Denied(String),
    /// The store could not be reached, or did not answer in time.
    #[error("store unreachable: {0}")]
    Unreachable(String),
    /// The store answered with a server error (5xx) after the retries.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// No credentials: none in the environment, the profile or the
    /// files aws-config reads.
    #[error("no usable AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile with -o profile= or AWS_PROFILE): {0}")]
    Credentials(String),
    /// Anything else, as the SDK said it.
    #[error("{0}")]
    Other(String),
}

impl StoreError {
    /// The errno a filesystem call reports for it.
    pub fn errno(&self) -> Errno {
        match self {
            StoreError::NotFound => Errno::ENOENT,
            StoreError::Exists => Errno::EEXIST,
            StoreError::Denied(_) | StoreError::Credentials(_) => Errno::EACCES,
            StoreError::NoSuchBucket(_)
            | StoreError::Unreachable(_)
            | StoreError::Unavailable(_)
            | StoreError::Other(_) => Errno::EIO,
        }
    }

    /// Worth trying again later (a journaled upload waits and retries).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Unreachable(_) | StoreError::Unavailable(_)
        )
    }

    fn from_sdk<E>(e: SdkError<E, HttpResponse>, bucket: &str) -> StoreError
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        let status = e.raw_response().map(|r| r.status().as_u16());
        let code = e.code().map(str::to_owned);
        let text = chain(&e);
        if text.contains("loading credentials") || text.contains("credentials provider") {
            return StoreError::Credentials(text);
        }
        match (&e, status, code.as_deref()) {
            (_, _, Some("NoSuchBucket")) => StoreError::NoSuchBucket(bucket.into()),
            (_, Some(404), _) | (_, _, Some("NoSuchKey" | "NotFound")) => StoreError::NotFound,
            (_, Some(412), _) | (_, _, Some("PreconditionFailed")) => StoreError::Exists,
            (_, Some(401 | 403), _) => StoreError::Denied(match (code.as_deref(), e.message()) {
                (Some(c), Some(m)) => format!("{c}: {m}"),
                (Some(c), None) => c.to_string(),
                _ => text,
            }),
            (SdkError::TimeoutError(_) | SdkError::DispatchFailure(_), _, _) => {
                StoreError::Unreachable(text)
            }
            (_, Some(500..=599), _) => StoreError::Unavailable(text),
            _ => StoreError::Other(text),
        }
    }
}

/// An error and its causes on one line, without the SDK's debug dump.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let s = c.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cause = c.source();
    }
    out
}

/// What a listing or a HEAD tells about one object.
#[derive(Clone, Debug)]
pub struct ObjectInfo {
    /// Bytes.
    pub size: u64,
    /// Last-Modified, seconds since the epoch.
    pub modified: i64,
    /// The entity tag, quotes included, when the store gave one.
    pub etag: Option<String>,
    /// User metadata (HEAD and GET only; listings carry none).
    pub metadata: Option<HashMap<String, String>>,
}

/// One page of a delimited listing.
#[derive(Debug, Default)]
pub struct ListPage {
    /// Objects directly under the prefix: (key, info).
    pub objects: Vec<(String, ObjectInfo)>,
    /// Prefixes one level down, each ending in `/`.
    pub prefixes: Vec<String>,
    /// Where the next page starts, if there is one.
    pub next: Option<String>,
}

/// Requests sent, by kind.
#[derive(Debug, Default)]
pub struct RequestCounts {
    counts: [AtomicU64; KINDS.len()],
}

/// The kinds of request counted (S3's operation names).
pub const KINDS: [&str; 11] = [
    "LIST",
    "HEAD",
    "GET",
    "PUT",
    "COPY",
    "DELETE",
    "CREATE_MULTIPART",
    "UPLOAD_PART",
    "COMPLETE_MULTIPART",
    "ABORT_MULTIPART",
    "UPLOAD_PART_COPY",
];

impl RequestCounts {
    fn add(&self, kind: usize) {
        self.counts[kind].fetch_add(1, Ordering::Relaxed);
    }

    /// `(kind, count)` for every kind.
    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        KINDS
            .iter()
            .zip(&self.counts)
            .map(|(k, c)| (*k, c.load(Ordering::Relaxed)))
            .collect()
    }
}

const LIST: usize = 0;
const HEAD: usize = 1;
const GET: usize = 2;
const PUT: usize = 3;
const COPY: usize = 4;
const DELETE: usize = 5;
const CREATE_MULTIPART: usize = 6;
const UPLOAD_PART: usize = 7;
const COMPLETE_MULTIPART: usize = 8;
const ABORT_MULTIPART: usize = 9;
const UPLOAD_PART_COPY: usize = 10;

/// S3's most parts in one multipart upload.
const MAX_PARTS: u64 = 10_000;

/// Content to put: bytes in memory, or a byte range of a staged file.
pub enum Body<'a> {
    /// Small content (markers, symlinks).
    Bytes(Vec<u8>),
    /// `len` bytes of `path` from `offset`.
    File {
        /// The staged file.
        path: &'a Path,
        /// Where the range starts.
        offset: u64,
        /// How many bytes.
        len: u64,
    },
}

/// A bucket, reached through one SDK client.
pub struct Store {
    client: Client,
    bucket: String,
    counts: RequestCounts,
    /// The largest object one CopyObject copies (`max_copy`).
    max_copy: u64,
    /// Part size and parts in flight of a copy made in parts.
    part_size: u64,
    concurrency: usize,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("bucket", &self.bucket)
            .finish()
    }
}

fn modified(t: Option<&aws_smithy_types::DateTime>) -> i64 {
    t.map_or(0, |t| t.secs())
}

impl Store {
    /// The client, configured the way the AWS CLI would be (environment,
    /// profiles), then by the mount's options. Makes no request.
    pub async fn connect(url: &BucketUrl, o: &ObjOptions) -> Store {
        use aws_config::retry::RetryConfig;
        use aws_config::timeout::TimeoutConfig;
        use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};

        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
            .build_https();
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .http_client(http)
            // Each attempt gets the whole budget's share; the operation as a
            // whole, retries included, stops at `timeout`.
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(o.timeout.min(Duration::from_secs(5)))
                    .operation_attempt_timeout(o.timeout)
                    .operation_timeout(o.timeout)
                    .build(),
            )
            .retry_config(RetryConfig::standard().with_max_attempts(3));
        if let Some(p) = &o.profile {
            loader = loader.profile_name(p);
        }
        if let Some(r) = &o.region {
            loader = loader.region(aws_config::Region::new(r.clone()));
        }
        if let Some(e) = &o.endpoint {
            loader = loader.endpoint_url(e);
        }
        let shared = loader.load().await;
        let mut cfg = aws_sdk_s3::config::Builder::from(&shared);
        // A store without a region in any configuration: S3's default.
        if shared.region().is_none() {
            cfg = cfg.region(aws_config::Region::new("us-east-1"));
        }
        let path_style = o.path_style.unwrap_or(o.endpoint.is_some());
        cfg = cfg.force_path_style(path_style);
        // Checksums only where S3 requires them: the SDK's default sends
        // bodies aws-chunked with a trailing checksum, which stores other
        // than AWS (gofakes3, older Garage and Ceph) keep as the object's
        // bytes or refuse.
        cfg = cfg
            .request_checksum_calculation(
                aws_sdk_s3::config::RequestChecksumCalculation::WhenRequired,
            )
            .response_checksum_validation(
                aws_sdk_s3::config::ResponseChecksumValidation::WhenRequired,
            );
        Store {
            client: Client::from_conf(cfg.build()),
            bucket: url.bucket.clone(),
            counts: RequestCounts::default(),
            max_copy: o.max_copy,
            part_size: o.part_size,
            concurrency: o.concurrency,
        }
    }

    /// Requests sent so far.
    pub fn counts(&self) -> &RequestCounts {
        &self.counts
    }

    fn fail<E>(&self, e: SdkError<E, HttpResponse>) -> StoreError
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        StoreError::from_sdk(e, &self.bucket)
    }

    /// Checks the bucket is there and the credentials open it: one
    /// listing of at most one key.
    pub async fn check(&self) -> Result<(), StoreError> {
        self.list("", None, 1, None).await.map(drop)
    }

    /// One page of the keys under `prefix`, `delimiter` folding deeper
    /// ones into prefixes.
    pub async fn list(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
        max_keys: i32,
        token: Option<String>,
    ) -> Result<ListPage, StoreError> {
        self.counts.add(LIST);
        let out = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .set_delimiter(delimiter.map(str::to_owned))
            .max_keys(max_keys)
            .set_continuation_token(token)
            .send()
            .await
            .map_err(|e| self.fail(e))?;
        let objects = out
            .contents()
            .iter()
            .filter_map(|o| {
                Some((
                    o.key()?.to_owned(),
                    ObjectInfo {
                        size: o.size().unwrap_or(0).max(0) as u64,
                        modified: modified(o.last_modified()),
                        etag: o.e_tag().map(str::to_owned),
                        metadata: None,
                    },
                ))
            })
            .collect();
        let prefixes = out
            .common_prefixes()
            .iter()
            .filter_map(|p| p.prefix().map(str::to_owned))
            .collect();
        let next = if out.is_truncated() == Some(true) {
            out.next_continuation_token().map(str::to_owned)
        } else {
            None
        };
        Ok(ListPage {
            objects,
            prefixes,
            next,
        })
    }

    /// The object's size, time, tag and metadata.
    pub async fn head(&self, key: &str) -> Result<ObjectInfo, StoreError> {
        self.counts.add(HEAD);
        let out = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| self.fail(e))?;
        Ok(ObjectInfo {
            size: out.content_length().unwrap_or(0).max(0) as u64,
            modified: modified(out.last_modified()),
            etag: out.e_tag().map(str::to_owned),
            metadata: out.metadata().cloned(),
        })
    }

    /// Bytes `[offset, offset + len)` of the object (fewer at its end);
    /// the whole object when `len` is `None`.
    pub async fn get(
        &self,
        key: &str,
        offset: u64,
        len: Option<u64>,
    ) -> Result<Vec<u8>, StoreError> {
        self.counts.add(GET);
        let range = match len {
            Some(0) => return Ok(Vec::new()),
            Some(n) => Some(format!("bytes={offset}-{}", offset + n - 1)),
            None if offset > 0 => Some(format!("bytes={offset}-")),
            None => None,
        };
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .set_range(range)
            .send()
            .await;
        let out = match out {
            Ok(o) => o,
            // A range starting at or past the end: nothing there.
            Err(e) if e.code() == Some("InvalidRange") => return Ok(Vec::new()),
            Err(e) => return Err(self.fail(e)),
        };
        // Straight into one vector of the answer's size: collecting the
        // body first and flattening it would copy every byte twice more,
        // CPU that a store on the same machine needs.
        let expected = out.content_length().unwrap_or(0).max(0) as usize;
        let mut data = Vec::with_capacity(expected);
        let mut body = out.body;
        while let Some(chunk) = body
            .try_next()
            .await
            .map_err(|e| StoreError::Unreachable(chain(&e)))?
        {
            data.extend_from_slice(&chunk);
        }
        Ok(data)
    }

    /// Writes the whole object to `file` (a staged copy to change).
    pub async fn download(&self, key: &str, file: &std::fs::File) -> Result<u64, StoreError> {
        use std::os::unix::fs::FileExt;
        self.counts.add(GET);
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| self.fail(e))?;
        let mut body = out.body;
        let mut at = 0u64;
        while let Some(chunk) = body
            .try_next()
            .await
            .map_err(|e| StoreError::Unreachable(chain(&e)))?
        {
            file.write_all_at(&chunk, at)
                .map_err(|e| StoreError::Other(format!("staging: {e}")))?;
            at += chunk.len() as u64;
        }
        Ok(at)
    }

    async fn stream(body: Body<'_>) -> Result<(ByteStream, u64), StoreError> {
        match body {
            Body::Bytes(b) => {
                let n = b.len() as u64;
                Ok((ByteStream::from(b), n))
            }
            Body::File { path, offset, len } => {
                let s = ByteStream::read_from()
                    .path(path)
                    .offset(offset)
                    .length(Length::Exact(len))
                    .build()
                    .await
                    .map_err(|e| StoreError::Other(format!("staging {}: {e}", path.display())))?;
                Ok((s, len))
            }
        }
    }

    /// One PUT. `if_absent` sends `If-None-Match: *`: the store refuses
    /// (EEXIST) if the key exists, where it supports conditional writes.
    pub async fn put(
        &self,
        key: &str,
        body: Body<'_>,
        metadata: HashMap<String, String>,
        content_type: Option<&str>,
        if_absent: bool,
    ) -> Result<Option<String>, StoreError> {
        self.counts.add(PUT);
        let (stream, len) = Self::stream(body).await?;
        let out = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .body(stream)
            .content_length(len as i64)
            .set_metadata(Some(metadata))
            .set_content_type(content_type.map(str::to_owned))
            .set_if_none_match(if_absent.then(|| "*".to_owned()))
            .send()
            .await
            .map_err(|e| self.fail(e))?;
        Ok(out.e_tag().map(str::to_owned))
    }

    /// Starts a multipart upload; its id.
    pub async fn create_multipart(
        &self,
        key: &str,
        metadata: HashMap<String, String>,
    ) -> Result<String, StoreError> {
        self.counts.add(CREATE_MULTIPART);
        let out = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .set_metadata(Some(metadata))
            .send()
            .await
            .map_err(|e| self.fail(e))?;
        out.upload_id()
            .map(str::to_owned)
            .ok_or_else(|| StoreError::Other("the store gave no upload id".into()))
    }

    /// Uploads part `number` (from 1); its entity tag.
    pub async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        number: i32,
        body: Body<'_>,
    ) -> Result<String, StoreError> {
        self.counts.add(UPLOAD_PART);
        let (stream, len) = Self::stream(body).await?;
        let out = self
            .client
            .upload_part()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .part_number(number)
            .content_length(len as i64)
            .body(stream)
            .send()
            .await
            .map_err(|e| self.fail(e))?;
        out.e_tag()
            .map(str::to_owned)
            .ok_or_else(|| StoreError::Other("the store gave no part tag".into()))
    }

    /// Makes the object of the parts `(number, tag)`, in order.
    pub async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: Vec<(i32, String)>,
    ) -> Result<Option<String>, StoreError> {
        self.counts.add(COMPLETE_MULTIPART);
        let parts = parts
            .into_iter()
            .map(|(n, tag)| CompletedPart::builder().part_number(n).e_tag(tag).build())
            .collect();
        let out = self
            .client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| self.fail(e))?;
        Ok(out.e_tag().map(str::to_owned))
    }

    /// Gives up a multipart upload (its parts are freed).
    pub async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<(), StoreError> {
        self.counts.add(ABORT_MULTIPART);
        self.client
            .abort_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .send()
            .await
            .map_err(|e| self.fail(e))?;
        Ok(())
    }

    /// Server-side copy of `from` (`size` bytes) to `to`; with
    /// `metadata`, the copy gets it instead of `from`'s (how chmod and
    /// utimes change an object without sending its data). One CopyObject
    /// up to `max_copy`, a multipart copy above. The copy's tag.
    pub async fn copy(
        &self,
        from: &str,
        to: &str,
        size: u64,
        metadata: Option<HashMap<String, String>>,
    ) -> Result<Option<String>, StoreError> {
        if size > self.max_copy {
            return self.copy_in_parts(from, to, metadata).await;
        }
        self.copy_whole(from, to, metadata).await
    }

    async fn copy_whole(
        &self,
        from: &str,
        to: &str,
        metadata: Option<HashMap<String, String>>,
    ) -> Result<Option<String>, StoreError> {
        self.counts.add(COPY);
        let mut req = self
            .client
            .copy_object()
            .bucket(&self.bucket)
            .key(to)
            .copy_source(self.copy_source(from));
        if let Some(m) = metadata {
            req = req
                .metadata_directive(MetadataDirective::Replace)
                .set_metadata(Some(m));
        }
        let out = req.send().await.map_err(|e| self.fail(e))?;
        Ok(out
            .copy_object_result()
            .and_then(|r| r.e_tag())
            .map(str::to_owned))
    }

    fn copy_source(&self, key: &str) -> String {
        format!("{}/{}", self.bucket, encode_key(key))
    }

    /// A copy too large for one CopyObject: a multipart upload whose
    /// parts are ranges of `from` (UploadPartCopy), `concurrency` in
    /// flight. The source is read first (one HEAD): its size as the store
    /// has it now, not as a listing saw it, its metadata (a multipart
    /// upload copies none) and its tag, which every part must match, so
    /// a source replaced during the copy fails it instead of mixing two
    /// versions. Any failure aborts the upload: `to` is untouched.
    async fn copy_in_parts(
        &self,
        from: &str,
        to: &str,
        metadata: Option<HashMap<String, String>>,
    ) -> Result<Option<String>, StoreError> {
        let source = self.head(from).await?;
        if source.size <= self.max_copy {
            // Replaced by a smaller object since it was listed.
            return self.copy_whole(from, to, metadata).await;
        }
        let metadata = metadata.unwrap_or_else(|| source.metadata.clone().unwrap_or_default());
        let upload_id = self.create_multipart(to, metadata).await?;
        let copied = self.copy_parts(from, to, &upload_id, &source).await;
        let completed = match copied {
            Ok(parts) => self.complete_multipart(to, &upload_id, parts).await,
            Err(e) => Err(e),
        };
        if completed.is_err() {
            // Best effort: parts left behind are the store's lifecycle
            // rule's to free, if this abort does not reach it.
            let _ = self.abort_multipart(to, &upload_id).await;
        }
        completed
    }

    async fn copy_parts(
        &self,
        from: &str,
        to: &str,
        upload_id: &str,
        info: &ObjectInfo,
    ) -> Result<Vec<(i32, String)>, StoreError> {
        use futures_util::stream::{self, StreamExt, TryStreamExt};
        let source = self.copy_source(from);
        let size = info.size;
        let part = copy_part_size(size, self.part_size);
        let count = size.div_ceil(part);
        stream::iter(0..count)
            .map(|i| {
                let source = &source;
                async move {
                    let start = i * part;
                    let end = (start + part).min(size) - 1;
                    let number = i as i32 + 1;
                    self.counts.add(UPLOAD_PART_COPY);
                    let out = self
                        .client
                        .upload_part_copy()
                        .bucket(&self.bucket)
                        .key(to)
                        .upload_id(upload_id)
                        .part_number(number)
                        .copy_source(source)
                        .copy_source_range(format!("bytes={start}-{end}"))
                        .set_copy_source_if_match(info.etag.clone())
                        .send()
                        .await
                        .map_err(|e| self.fail(e))?;
                    let tag = out
                        .copy_part_result()
                        .and_then(|r| r.e_tag())
                        .map(str::to_owned)
                        .ok_or_else(|| StoreError::Other("the store gave no part tag".into()))?;
                    Ok::<_, StoreError>((number, tag))
                }
            })
            .buffered(self.concurrency)
            .try_collect()
            .await
    }

    /// Deletes `key` (no error if it is already gone, as S3 answers).
    pub async fn delete(&self, key: &str) -> Result<(), StoreError> {
        self.counts.add(DELETE);
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| self.fail(e))?;
        Ok(())
    }
}

/// The part size of a copy made in parts: the mount's part size, or
/// larger where the object would need more than S3's 10,000 parts.
fn copy_part_size(size: u64, part_size: u64) -> u64 {
    part_size.max(size.div_ceil(MAX_PARTS))
}

/// A key as `x-amz-copy-source` wants it: URL-encoded, `/` kept.
fn encode_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_in_parts_stays_within_ten_thousand_parts() {
        let mib = 1u64 << 20;
        assert_eq!(copy_part_size(6 << 30, 8 * mib), 8 * mib);
        let huge = 5u64 << 40; // S3's largest object
        let part = copy_part_size(huge, 8 * mib);
        assert!(huge.div_ceil(part) <= MAX_PARTS);
        assert!(part <= 5 << 30);
    }

    #[test]
    fn copy_sources_are_encoded() {
        assert_eq!(encode_key("a/b c+d%é"), "a/b%20c%2Bd%25%C3%A9");
    }
}
