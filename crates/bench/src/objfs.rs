//! The objfs suite's subjects: one bucket on a three-node Garage cluster
//! (replication factor 3, [`GarageCluster`]) on loopback, mounted by objfs,
//! by Debian's s3fs and by rclone mount (in the two cache modes that can
//! write files, "writes" and "full"), and read and written by the bench's
//! own S3 client ([`Client::Raw`]) where a workload is plain transfers:
//! the limit a filesystem over this cluster could reach.
//!
//! The bucket holds a copy of the backing directory: before each run the
//! workload's part of it (its directory, the archive or repository it
//! reads) is brought up to date by that same client, untimed and not
//! counted. The S3 requests every subject sends are counted at the
//! cluster (Garage's own metrics), the same way for all of them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use fusebox_objfs::store::{Body, Store};
use fusebox_objfs::{BucketUrl, ObjOptions};
use futures_util::stream::{self, StreamExt, TryStreamExt};

use crate::engine::Sample;
use crate::objstore::{GarageCluster, ACCESS_KEY, BUCKET, SECRET_KEY};
use crate::results::SubjectInfo;
use crate::subject::{spawn_daemon, which, Mounted, Subject};
use crate::workload::{FilesPhase, FioRw, Kind, TreeOp, Workload};

/// The part size and requests in flight of the bench's own transfers:
/// objfs's defaults, so the limit is the same recipe without a kernel.
const PART: u64 = 8 << 20;
const IN_FLIGHT: usize = 8;
/// Objects put at once while the bucket is brought up to date.
const MIRROR_IN_FLIGHT: usize = 32;

/// The cluster and the bench's client of it, started on first use.
struct Cluster {
    // Dropped after the client: the nodes stop last.
    raw: Arc<RawClient>,
    garage: GarageCluster,
    /// s3fs's credentials file.
    passwd: PathBuf,
}

/// What the suite's subjects share.
pub struct Shared {
    fusebox_bin: PathBuf,
    state: Mutex<Option<Cluster>>,
}

impl Shared {
    fn cluster<T>(&self, workdir: &Path, f: impl FnOnce(&Cluster) -> T) -> Result<T> {
        let mut g = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if g.is_none() {
            let dir = workdir.join("objfs-garage");
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
            }
            // Garage's default RPC timeout is 300 s; a bench wants a lost
            // node to cost seconds, as the tests do.
            let garage = GarageCluster::start(&dir, Duration::from_secs(5))?;
            let passwd = dir.join("s3fs-passwd");
            std::fs::write(&passwd, format!("{ACCESS_KEY}:{SECRET_KEY}\n"))?;
            std::fs::set_permissions(&passwd, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
            let raw = Arc::new(RawClient::connect(&garage.endpoint(0))?);
            *g = Some(Cluster {
                raw,
                garage,
                passwd,
            });
        }
        Ok(f(g.as_ref().expect("started above")))
    }
}

/// Which client a subject is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Client {
    /// objfs through the kernel, supervised: its defaults, or with
    /// `upload=behind` (close returns once the data is in the local
    /// journal, as rclone's cache modes return before uploading).
    Objfs { behind: bool },
    /// Debian's s3fs 1.90 with its defaults.
    S3fs,
    /// rclone mount, `--vfs-cache-mode writes` (reads straight from the
    /// store) or `full` (reads through its disk cache too).
    Rclone { full: bool },
    /// The bench's own client: parallel ranged GETs, multipart uploads,
    /// listings; no filesystem.
    Raw,
}

pub struct ObjSubject {
    client: Client,
    shared: Arc<Shared>,
    workdir: PathBuf,
}

/// Every subject of the suite.
pub fn subjects(fusebox_bin: &Path) -> Vec<Box<dyn Subject>> {
    let shared = Arc::new(Shared {
        fusebox_bin: fusebox_bin.to_path_buf(),
        state: Mutex::new(None),
    });
    [
        Client::Raw,
        Client::S3fs,
        Client::Rclone { full: false },
        Client::Rclone { full: true },
        Client::Objfs { behind: false },
        Client::Objfs { behind: true },
    ]
    .into_iter()
    .map(|client| {
        Box::new(ObjSubject {
            client,
            shared: shared.clone(),
            workdir: PathBuf::new(),
        }) as Box<dyn Subject>
    })
    .collect()
}

/// Whether a workload writes files (where `upload=` matters).
fn writes(w: &Workload) -> bool {
    match &w.kind {
        Kind::Fio(f) => !f.rw.is_read(),
        Kind::Files(f) => matches!(
            f.phase,
            FilesPhase::Create | FilesPhase::Rewrite | FilesPhase::RenameIntoPlace
        ),
        Kind::Tree { op, .. } => matches!(op, TreeOp::TarExtract | TreeOp::GitClone),
        Kind::ReplaceSoak { .. } => true,
        _ => false,
    }
}

/// Garage's S3 request counts (by API operation), summed over the nodes.
fn cluster_requests(shared: &Shared, workdir: &Path) -> BTreeMap<String, f64> {
    shared
        .cluster(workdir, |c| {
            let mut total = BTreeMap::new();
            for i in 0..3 {
                for (k, v) in c.garage.s3_requests(i).unwrap_or_default() {
                    *total.entry(k).or_insert(0.0) += v as f64;
                }
            }
            total
        })
        .unwrap_or_default()
}

impl Subject for ObjSubject {
    fn info(&self) -> SubjectInfo {
        let (name, description) = match self.client {
            Client::Objfs { behind: false } => (
                "objfs",
                "objfs through the kernel, classic /dev/fuse, supervised; its defaults (close waits for the upload, attributes from listings, part 8 MiB, 8 requests in flight per file, 64 MiB readahead, metadata trusted 10 s)",
            ),
            Client::Objfs { behind: true } => (
                "objfs-behind",
                "objfs with upload=behind: close returns once the data is in its local journal and fsync once it is synced there; uploads follow (write_back, 5 s after the last close, as rclone's --vfs-write-back); run where a workload writes",
            ),
            Client::S3fs => ("s3fs", "Debian's s3fs 1.90, its defaults (no local cache), path-style requests"),
            Client::Rclone { full: false } => (
                "rclone-writes",
                "rclone mount (Debian's 1.60) of an s3 remote, --vfs-cache-mode writes (reads from the store, writes through a local cache, uploaded after close), --use-server-modtime (no HEAD per listed file)",
            ),
            Client::Rclone { full: true } => (
                "rclone-full",
                "rclone mount, --vfs-cache-mode full (reads and writes through a local cache), --use-server-modtime",
            ),
            Client::Raw => (
                "raw-client",
                "the bench's own S3 client, no filesystem (the SDK objfs uses): 8 MiB ranged GETs and multipart parts, 8 in flight per file; listings; the limit for transfers",
            ),
        };
        SubjectInfo {
            name: name.into(),
            description: description.into(),
            is_fusebox: matches!(self.client, Client::Objfs { .. }),
            is_peer: matches!(self.client, Client::S3fs | Client::Rclone { .. }),
            ..Default::default()
        }
    }

    fn prepare(&mut self, workdir: &Path) -> Result<()> {
        self.workdir = workdir.to_path_buf();
        match self.client {
            Client::S3fs if which("s3fs").is_none() => {
                bail!("s3fs is not installed (scripts/setup.sh installs it)")
            }
            Client::Rclone { .. } if which("rclone").is_none() => {
                bail!("rclone is not installed (scripts/setup.sh installs it)")
            }
            _ => {}
        }
        // The cluster starts now, so a missing Garage is every subject's
        // reason.
        self.shared.cluster(workdir, |_| ())
    }

    fn runs(&self, w: &Workload) -> bool {
        match self.client {
            // Only a supervised mount has a server to replace.
            _ if matches!(w.kind, Kind::ReplaceSoak { .. }) => {
                matches!(self.client, Client::Objfs { .. })
            }
            Client::Raw => RawClient::can_run(w),
            Client::Objfs { behind: true } => writes(w),
            _ => true,
        }
    }

    fn before_run(&self, backing: &Path, paths: &[PathBuf]) -> Result<()> {
        let raw = self.shared.cluster(&self.workdir, |c| c.raw.clone())?;
        for p in paths {
            raw.mirror(backing, p)?;
        }
        Ok(())
    }

    fn mount(&self, _backing: &Path, mnt: &Path) -> Result<Mounted> {
        let (endpoint, passwd, raw) = self.shared.cluster(&self.workdir, |c| {
            (c.garage.endpoint(0), c.passwd.clone(), c.raw.clone())
        })?;
        let mut m = match self.client {
            Client::Objfs { behind } => {
                // A fresh staging area per mount: each run starts cold. A
                // new one each time, not the last one emptied: the last
                // mount's daemon may still be sending its uploads after
                // its unmount, by paths in its own staging area.
                static MOUNTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
                let n = MOUNTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let staging = self.workdir.join(format!("objfs-staging-{n}"));
                if staging.exists() {
                    std::fs::remove_dir_all(&staging)?;
                }
                let mut c = Command::new(&self.shared.fusebox_bin);
                crate::objstore::client_env(&mut c);
                c.args(["mount", "objfs", "-f", &format!("s3://{BUCKET}")])
                    .arg(mnt)
                    .arg("-o")
                    .arg(format!(
                        "endpoint={endpoint},staging={}{}",
                        staging.display(),
                        if behind { ",upload=behind" } else { "" }
                    ));
                let mut m = spawn_daemon(c, mnt)?;
                m.fusebox_mount = Some(mnt.to_path_buf());
                m
            }
            Client::S3fs => {
                let mut c = Command::new("s3fs");
                crate::objstore::client_env(&mut c);
                c.arg(BUCKET).arg(mnt).arg("-f").arg("-o").arg(format!(
                    "url={endpoint},use_path_request_style,endpoint=us-east-1,passwd_file={}",
                    passwd.display()
                ));
                spawn_daemon(c, mnt)?
            }
            Client::Rclone { full } => {
                let mut c = crate::subject::rclone_mount(
                    &self.workdir,
                    &format!(":s3:{BUCKET}"),
                    mnt,
                    if full { "full" } else { "writes" },
                )?;
                crate::objstore::client_env(&mut c);
                c.args(["--s3-provider", "Other", "--s3-env-auth"])
                    .args(["--s3-endpoint", &endpoint, "--s3-region", "us-east-1"])
                    .args(["--s3-force-path-style=true", "--s3-no-check-bucket"])
                    // Times from the listing, as objfs and s3fs show them
                    // for objects without their metadata: else rclone
                    // sends a HEAD per file a listing shows.
                    .arg("--use-server-modtime");
                spawn_daemon(c, mnt)?
            }
            Client::Raw => {
                let mut m = Mounted::native(mnt);
                m.runner = Some(Arc::new(move |w: &Workload, dataset: &Path| {
                    raw.run(w, dataset)
                }));
                m
            }
        };
        let (shared, workdir) = (self.shared.clone(), self.workdir.clone());
        m.counters = Some(Arc::new(move || cluster_requests(&shared, &workdir)));
        Ok(m)
    }
}

/// The bench's own S3 client: objfs's store module (the SDK, configured
/// as objfs configures it) driven directly, with its own runtime.
pub struct RawClient {
    rt: tokio::runtime::Runtime,
    store: Arc<Store>,
}

fn key_of(rel: &Path) -> Result<String> {
    rel.to_str()
        .map(str::to_owned)
        .with_context(|| format!("{} is not UTF-8", rel.display()))
}

impl RawClient {
    fn connect(endpoint: &str) -> Result<RawClient> {
        // The AWS configuration chain reads the credentials from the
        // environment. Set here, in the bench's own process, while no
        // other thread of it reads the environment: the subjects are
        // prepared before any workload or progress thread starts.
        std::env::set_var("AWS_ACCESS_KEY_ID", ACCESS_KEY);
        std::env::set_var("AWS_SECRET_ACCESS_KEY", SECRET_KEY);
        std::env::set_var("AWS_EC2_METADATA_DISABLED", "true");
        std::env::remove_var("AWS_CA_BUNDLE");
        std::env::remove_var("AWS_PROFILE");
        std::env::remove_var("AWS_SESSION_TOKEN");
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("bench-s3")
            .enable_all()
            .build()?;
        let url = BucketUrl::parse(&format!("s3://{BUCKET}"))?;
        let (o, _) = ObjOptions::parse(&[format!("endpoint={endpoint},timeout=120")])?;
        let store = rt.block_on(Store::connect(&url, &o));
        rt.block_on(store.check())
            .context("listing the bench's bucket")?;
        Ok(RawClient {
            rt,
            store: Arc::new(store),
        })
    }

    /// The workloads a client that is no filesystem runs: listings and
    /// whole-file transfers of a few files.
    fn can_run(w: &Workload) -> bool {
        match &w.kind {
            Kind::Fio(f) => {
                f.once && f.threads <= 4 && matches!(f.rw, FioRw::SeqRead | FioRw::SeqWrite)
            }
            Kind::Files(f) => f.phase == FilesPhase::ListStat,
            _ => false,
        }
    }

    /// Every key under `prefix`, with its size.
    async fn list_all(store: &Store, prefix: &str) -> Result<HashMap<String, u64>> {
        let mut out = HashMap::new();
        let mut token = None;
        loop {
            let page = store.list(prefix, None, 1000, token).await?;
            out.extend(page.objects.into_iter().map(|(k, i)| (k, i.size)));
            match page.next {
                Some(t) => token = Some(t),
                None => return Ok(out),
            }
        }
    }

    /// Makes the bucket's copy of `path` (a file or a directory below
    /// `backing`) what `path` is now: missing or resized objects put,
    /// objects no longer there deleted, a marker object per directory.
    pub fn mirror(&self, backing: &Path, path: &Path) -> Result<()> {
        let rel = path
            .strip_prefix(backing)
            .with_context(|| format!("{} is not below {}", path.display(), backing.display()))?;
        let key = key_of(rel)?;
        let store = self.store.clone();
        let mut want: Vec<(String, Option<(PathBuf, u64)>)> = Vec::new();
        let meta = std::fs::symlink_metadata(path).ok();
        // A file is its own key; a directory, or what is gone (a run's
        // output, removed after it), everything under the name too.
        let prefix = match &meta {
            Some(m) if m.is_file() => key.clone(),
            _ => format!("{key}/"),
        };
        match meta {
            Some(m) if m.is_dir() => {
                let mut stack = vec![path.to_path_buf()];
                while let Some(dir) = stack.pop() {
                    want.push((format!("{}/", key_of(dir.strip_prefix(backing)?)?), None));
                    for e in std::fs::read_dir(&dir)? {
                        let e = e?;
                        let t = e.file_type()?;
                        if t.is_dir() {
                            stack.push(e.path());
                        } else if t.is_file() {
                            let k = key_of(e.path().strip_prefix(backing)?)?;
                            want.push((k, Some((e.path(), e.metadata()?.len()))));
                        }
                    }
                }
            }
            Some(m) if m.is_file() => want.push((key.clone(), Some((path.to_path_buf(), m.len())))),
            _ => {}
        }
        self.rt.block_on(async move {
            let mut have = Self::list_all(&store, &prefix).await?;
            // "NAME" is also a prefix of "NAME.tmp" and "NAME.git/": keep
            // to the name itself and what is below it.
            have.retain(|k, _| *k == key || k.starts_with(&prefix));
            let wanted: std::collections::HashSet<&str> =
                want.iter().map(|(k, _)| k.as_str()).collect();
            let extra: Vec<String> = have
                .keys()
                .filter(|k| !wanted.contains(k.as_str()))
                .cloned()
                .collect();
            let puts: Vec<(String, Option<(PathBuf, u64)>)> = want
                .into_iter()
                .filter(|(k, f)| have.get(k) != Some(&f.as_ref().map_or(0, |(_, n)| *n)))
                .collect();
            let limit = Arc::new(tokio::sync::Semaphore::new(MIRROR_IN_FLIGHT));
            let mut tasks = tokio::task::JoinSet::new();
            for k in extra {
                let (store, limit) = (store.clone(), limit.clone());
                tasks.spawn(async move {
                    let _slot = limit.acquire_owned().await?;
                    store
                        .delete(&k)
                        .await
                        .with_context(|| format!("deleting {k}"))
                });
            }
            for (k, file) in puts {
                let (store, limit) = (store.clone(), limit.clone());
                tasks.spawn(async move {
                    let _slot = limit.acquire_owned().await?;
                    match file {
                        None => store
                            .put(&k, Body::Bytes(Vec::new()), HashMap::new(), None, false)
                            .await
                            .map(drop)
                            .map_err(anyhow::Error::from),
                        Some((path, len)) if len > 4 * PART => {
                            upload_multipart(&store, &k, len, |off, n| Body::File {
                                path: &path,
                                offset: off,
                                len: n,
                            })
                            .await
                        }
                        Some((path, len)) => store
                            .put(
                                &k,
                                Body::File {
                                    path: &path,
                                    offset: 0,
                                    len,
                                },
                                HashMap::new(),
                                None,
                                false,
                            )
                            .await
                            .map(drop)
                            .map_err(anyhow::Error::from),
                    }
                    .with_context(|| format!("putting {k}"))
                });
            }
            while let Some(r) = tasks.join_next().await {
                r??;
            }
            Ok(())
        })
    }

    /// Workload `w` on the objects under `dataset` (the workload's
    /// directory, relative to the backing directory): MiB/s for
    /// transfers, entries/s for listings.
    fn run(&self, w: &Workload, dataset: &Path) -> Result<Sample> {
        let prefix = key_of(dataset)?;
        let store = self.store.clone();
        let cpu0 = crate::subject::process_cpu_seconds(std::process::id()).unwrap_or(0.0);
        let start = Instant::now();
        let ops = match &w.kind {
            Kind::Files(f) if f.phase == FilesPhase::ListStat => {
                let prefix = format!("{prefix}/");
                self.rt.block_on(async move {
                    let mut n = 0u64;
                    let mut token = None;
                    loop {
                        let page = store.list(&prefix, Some("/"), 1000, token).await?;
                        n += (page.objects.len() + page.prefixes.len()) as u64;
                        match page.next {
                            Some(t) => token = Some(t),
                            None => return anyhow::Ok(n as f64),
                        }
                    }
                })?
            }
            Kind::Fio(f) if Self::can_run(w) => {
                let size = f.size;
                let jobs = f.threads;
                let read = f.rw.is_read();
                self.rt.block_on(async move {
                    let mut tasks = tokio::task::JoinSet::new();
                    for j in 0..jobs {
                        let store = store.clone();
                        let key = format!("{prefix}/f{j}");
                        tasks.spawn(async move {
                            if read {
                                read_whole(&store, &key, size).await
                            } else {
                                let chunk: Vec<u8> = (0..PART).map(|i| (i % 251) as u8).collect();
                                upload_multipart(&store, &key, size, |_, n| {
                                    Body::Bytes(chunk[..n as usize].to_vec())
                                })
                                .await
                                .map(|()| size)
                            }
                        });
                    }
                    let mut bytes = 0u64;
                    while let Some(r) = tasks.join_next().await {
                        bytes += r??;
                    }
                    anyhow::Ok(bytes as f64 / (1 << 20) as f64)
                })?
            }
            _ => bail!("the raw client runs only listings and whole-file transfers"),
        };
        let secs = start.elapsed().as_secs_f64();
        Ok(Sample {
            value: ops / secs,
            workload_cpu_s: crate::subject::process_cpu_seconds(std::process::id()).unwrap_or(0.0)
                - cpu0,
            ops: Some(ops),
        })
    }
}

/// Reads `key` (of `size` bytes) front to back in [`PART`] ranges, with
/// [`IN_FLIGHT`] of them requested ahead, in order; the bytes read.
async fn read_whole(store: &Store, key: &str, size: u64) -> Result<u64> {
    let ranges = (0..size.div_ceil(PART)).map(|p| p * PART);
    let mut parts = stream::iter(ranges)
        .map(|at| store.get(key, at, Some(PART)))
        .buffered(IN_FLIGHT);
    let mut got = 0u64;
    while let Some(data) = parts.next().await {
        let data = data?;
        if data.is_empty() {
            bail!("{key} ends at {got} bytes, not {size}");
        }
        got += data.len() as u64;
    }
    Ok(got)
}

/// A multipart upload of `len` bytes in [`PART`] parts, [`IN_FLIGHT`] at
/// once; `body(offset, len)` gives each part's bytes when it is sent.
async fn upload_multipart<'a>(
    store: &Store,
    key: &str,
    len: u64,
    body: impl Fn(u64, u64) -> Body<'a>,
) -> Result<()> {
    let id = store.create_multipart(key, HashMap::new()).await?;
    let sent: Result<Vec<(i32, String)>> = stream::iter(0..len.div_ceil(PART).max(1))
        .map(|p| {
            let (offset, id, body) = (p * PART, &id, &body);
            async move {
                let n = PART.min(len - offset);
                let tag = store
                    .upload_part(key, id, p as i32 + 1, body(offset, n))
                    .await?;
                anyhow::Ok((p as i32 + 1, tag))
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect()
        .await;
    match sent {
        Ok(mut tags) => {
            tags.sort_unstable_by_key(|(n, _)| *n);
            store.complete_multipart(key, &id, tags).await?;
            Ok(())
        }
        Err(e) => {
            let _ = store.abort_multipart(key, &id).await;
            Err(e)
        }
    }
}
