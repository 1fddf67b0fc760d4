//! The S3 client crates objfs could be built on, measured on one store
//! with the same requests: aws-sdk-s3 as objfs drives it (its `Store`),
//! object_store and opendal. DESIGN.md ("The S3 client") says why objfs
//! uses the first; this is the throughput half of that choice.
//!
//! ```text
//! s3-clients ENDPOINT BUCKET [REPS]     (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)
//! ```
//!
//! Each workload runs REPS times per client, clients interleaved, and the
//! median is printed as a Markdown table; every client sends the same
//! requests (the same sizes, the same number in flight).

use std::collections::HashMap;
use std::future::Future;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use futures::stream::{self, StreamExt, TryStreamExt};
use object_store::ObjectStoreExt as _;

/// Requests in flight, as objfs's default `concurrency`.
const IN_FLIGHT: usize = 8;
/// Part and range size, as objfs's default `part_size`.
const PART: usize = 8 << 20;
const SMALL: usize = 4096;
const SMALL_COUNT: usize = 400;
const LARGE: usize = 256 << 20;
const LISTED: usize = 2000;

/// One client's way of sending each request the workloads need.
trait Client: Send + Sync {
    fn name(&self) -> &'static str;
    fn put(&self, key: String, body: Bytes) -> impl Future<Output = Result<()>> + Send;
    fn head(&self, key: String) -> impl Future<Output = Result<u64>> + Send;
    fn get_range(
        &self,
        key: String,
        at: u64,
        len: u64,
    ) -> impl Future<Output = Result<usize>> + Send;
    /// Every key under `prefix`, by the client's own paging.
    fn list(&self, prefix: String) -> impl Future<Output = Result<usize>> + Send;
    /// A multipart upload of `data` in [`PART`] parts, [`IN_FLIGHT`] at once.
    fn put_large(&self, key: String, data: Bytes) -> impl Future<Output = Result<()>> + Send;
}

struct Sdk(fusebox_objfs::store::Store);

impl Client for Sdk {
    fn name(&self) -> &'static str {
        "aws-sdk-s3 (objfs's Store)"
    }

    async fn put(&self, key: String, body: Bytes) -> Result<()> {
        let body = fusebox_objfs::store::Body::Bytes(body.to_vec());
        self.0.put(&key, body, HashMap::new(), None, false).await?;
        Ok(())
    }

    async fn head(&self, key: String) -> Result<u64> {
        Ok(self.0.head(&key).await?.size)
    }

    async fn get_range(&self, key: String, at: u64, len: u64) -> Result<usize> {
        Ok(self.0.get(&key, at, Some(len)).await?.len())
    }

    async fn list(&self, prefix: String) -> Result<usize> {
        let (mut n, mut token) = (0, None);
        loop {
            let page = self.0.list(&prefix, None, 1000, token).await?;
            n += page.objects.len();
            match page.next {
                Some(t) => token = Some(t),
                None => return Ok(n),
            }
        }
    }

    async fn put_large(&self, key: String, data: Bytes) -> Result<()> {
        let id = self.0.create_multipart(&key, HashMap::new()).await?;
        let chunks: Vec<(usize, Vec<u8>)> =
            data.chunks(PART).map(<[u8]>::to_vec).enumerate().collect();
        let parts: Vec<(i32, String)> = stream::iter(chunks)
            .map(|(i, chunk)| {
                let (key, id) = (&key, &id);
                let body = fusebox_objfs::store::Body::Bytes(chunk);
                async move {
                    let tag = self.0.upload_part(key, id, i as i32 + 1, body).await?;
                    anyhow::Ok((i as i32 + 1, tag))
                }
            })
            .buffered(IN_FLIGHT)
            .try_collect()
            .await?;
        self.0.complete_multipart(&key, &id, parts).await?;
        Ok(())
    }
}

struct ObjectStore(object_store::aws::AmazonS3);

impl Client for ObjectStore {
    fn name(&self) -> &'static str {
        "object_store 0.14"
    }

    async fn put(&self, key: String, body: Bytes) -> Result<()> {
        self.0.put(&key.into(), body.into()).await?;
        Ok(())
    }

    async fn head(&self, key: String) -> Result<u64> {
        Ok(self.0.head(&key.into()).await?.size)
    }

    async fn get_range(&self, key: String, at: u64, len: u64) -> Result<usize> {
        Ok(self.0.get_range(&key.into(), at..at + len).await?.len())
    }

    async fn list(&self, prefix: String) -> Result<usize> {
        use object_store::ObjectStore as _;
        let prefix = object_store::path::Path::from(prefix);
        Ok(self
            .0
            .list(Some(&prefix))
            .try_collect::<Vec<_>>()
            .await?
            .len())
    }

    async fn put_large(&self, key: String, data: Bytes) -> Result<()> {
        let upload = self.0.put_multipart(&key.into()).await?;
        let mut w = object_store::WriteMultipart::new_with_chunk_size(upload, PART);
        for chunk in data.chunks(PART) {
            w.wait_for_capacity(IN_FLIGHT).await?;
            w.put(data.slice_ref(chunk));
        }
        w.finish().await?;
        Ok(())
    }
}

struct OpenDal(opendal::Operator);

impl Client for OpenDal {
    fn name(&self) -> &'static str {
        "opendal 0.59"
    }

    async fn put(&self, key: String, body: Bytes) -> Result<()> {
        self.0.write(&key, body).await?;
        Ok(())
    }

    async fn head(&self, key: String) -> Result<u64> {
        Ok(self.0.stat(&key).await?.content_length())
    }

    async fn get_range(&self, key: String, at: u64, len: u64) -> Result<usize> {
        Ok(self.0.read_with(&key).range(at..at + len).await?.len())
    }

    async fn list(&self, prefix: String) -> Result<usize> {
        // Entries of files only (a listing may name the directory too).
        let entries = self.0.list(&format!("{prefix}/")).await?;
        Ok(entries.iter().filter(|e| !e.path().ends_with('/')).count())
    }

    async fn put_large(&self, key: String, data: Bytes) -> Result<()> {
        let mut w = self
            .0
            .writer_with(&key)
            .chunk(PART)
            .concurrent(IN_FLIGHT)
            .await?;
        w.write(data).await?;
        w.close().await?;
        Ok(())
    }
}

/// Each workload once: (name, unit, value).
async fn workloads(c: &impl Client, tag: &str) -> Result<Vec<(&'static str, &'static str, f64)>> {
    let mut out = Vec::new();
    let small = Bytes::from(vec![7u8; SMALL]);
    let t = Instant::now();
    stream::iter(0..SMALL_COUNT)
        .map(|i| c.put(format!("{tag}/small/{i:05}"), small.clone()))
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<_>>()
        .await?;
    out.push((
        "put 4 KiB",
        "objects/s",
        SMALL_COUNT as f64 / t.elapsed().as_secs_f64(),
    ));

    let t = Instant::now();
    let sizes: Vec<u64> = stream::iter(0..SMALL_COUNT)
        .map(|i| c.head(format!("{tag}/small/{i:05}")))
        .buffer_unordered(IN_FLIGHT)
        .try_collect()
        .await?;
    if sizes.iter().any(|&s| s != SMALL as u64) {
        bail!("{}: HEAD gave a wrong size", c.name());
    }
    out.push((
        "head",
        "objects/s",
        SMALL_COUNT as f64 / t.elapsed().as_secs_f64(),
    ));

    let large = Bytes::from((0..LARGE).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    let t = Instant::now();
    c.put_large(format!("{tag}/large"), large).await?;
    out.push((
        "multipart put 256 MiB",
        "MB/s",
        LARGE as f64 / 1e6 / t.elapsed().as_secs_f64(),
    ));

    let t = Instant::now();
    let got: usize = stream::iter((0..LARGE).step_by(PART))
        .map(|at| c.get_range(format!("{tag}/large"), at as u64, PART as u64))
        .buffered(IN_FLIGHT)
        .try_fold(0, |n, len| async move { Ok(n + len) })
        .await?;
    if got != LARGE {
        bail!("{}: read {got} bytes of {LARGE}", c.name());
    }
    out.push((
        "ranged get 256 MiB",
        "MB/s",
        LARGE as f64 / 1e6 / t.elapsed().as_secs_f64(),
    ));

    let t = Instant::now();
    let n = c.list(format!("listed")).await?;
    if n != LISTED {
        bail!("{}: listed {n} keys of {LISTED}", c.name());
    }
    out.push((
        "list 2,000 keys",
        "keys/s",
        n as f64 / t.elapsed().as_secs_f64(),
    ));
    Ok(out)
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (endpoint, bucket) = match &args[..] {
        [e, b, ..] => (e.clone(), b.clone()),
        _ => bail!("usage: s3-clients ENDPOINT BUCKET [REPS]"),
    };
    let reps: usize = args.get(2).map_or(Ok(5), |r| r.parse()).context("REPS")?;
    let key = std::env::var("AWS_ACCESS_KEY_ID").context("AWS_ACCESS_KEY_ID")?;
    let secret = std::env::var("AWS_SECRET_ACCESS_KEY").context("AWS_SECRET_ACCESS_KEY")?;
    let region = std::env::var("AWS_REGION").unwrap_or_else(|_| "garage".into());

    let url = fusebox_objfs::BucketUrl::parse(&format!("s3://{bucket}"))?;
    let (opts, _) =
        fusebox_objfs::ObjOptions::parse(&[format!("endpoint={endpoint},region={region}")])?;
    let sdk = Sdk(fusebox_objfs::store::Store::connect(&url, &opts).await);
    let os = ObjectStore(
        object_store::aws::AmazonS3Builder::new()
            .with_endpoint(&endpoint)
            .with_bucket_name(&bucket)
            .with_region(&region)
            .with_access_key_id(&key)
            .with_secret_access_key(&secret)
            .with_allow_http(true)
            .with_virtual_hosted_style_request(false)
            .build()?,
    );
    let dal = OpenDal(opendal::Operator::new(
        opendal::services::S3::default()
            .endpoint(&endpoint)
            .bucket(&bucket)
            .region(&region)
            .access_key_id(&key)
            .secret_access_key(&secret),
    )?);

    // The keys every client lists, made once.
    let body = Bytes::from_static(b"x");
    stream::iter(0..LISTED)
        .map(|i| sdk.put(format!("listed/{i:05}"), body.clone()))
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<Vec<_>>()
        .await?;

    let mut results: HashMap<(&'static str, &'static str), Vec<f64>> = HashMap::new();
    let mut rows: Vec<(&'static str, &'static str)> = Vec::new();
    let names = [sdk.name(), os.name(), dal.name()];
    for rep in 0..reps {
        eprintln!("s3-clients: repetition {} of {reps}", rep + 1);
        for (i, name) in names.iter().enumerate() {
            let tag = format!("run{rep}-{i}");
            let got = match i {
                0 => workloads(&sdk, &tag).await,
                1 => workloads(&os, &tag).await,
                _ => workloads(&dal, &tag).await,
            }
            .with_context(|| name.to_string())?;
            // Three copies of each on this machine's disk: gone at once.
            sdk.0.delete(&format!("{tag}/large")).await?;
            for (w, unit, v) in got {
                if !rows.iter().any(|(r, _)| *r == w) {
                    rows.push((w, unit));
                }
                results.entry((w, *name)).or_default().push(v);
            }
        }
    }
    println!("| workload | unit | {} |", names.join(" | "));
    println!("|---|---|{}", "---:|".repeat(names.len()));
    for (w, unit) in rows {
        let cells: Vec<String> = names
            .iter()
            .map(|n| {
                let v = results
                    .get_mut(&(w, *n))
                    .expect("every client ran every row");
                let (lo, hi) = (
                    v.iter().copied().fold(f64::INFINITY, f64::min),
                    v.iter().copied().fold(0.0, f64::max),
                );
                format!("{:.0} ({lo:.0}..{hi:.0})", median(v))
            })
            .collect();
        println!("| {w} | {unit} | {} |", cells.join(" | "));
    }
    println!();
    println!("Medians of {reps} repetitions (min..max), clients interleaved; {IN_FLIGHT} requests in flight, {} MiB parts and ranges.", PART >> 20);
    Ok(())
}
