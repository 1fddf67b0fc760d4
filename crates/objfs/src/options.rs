//! `s3://BUCKET[/PREFIX]` and objfs's `-o` options.
//!
//! Where to find the store and who we are come the way every S3 tool
//! reads them (aws-config: `AWS_*` variables, `~/.aws/config` and
//! `~/.aws/credentials`, `AWS_PROFILE`); `-o endpoint=`, `region=` and
//! `profile=` override them for this mount only.

use std::path::PathBuf;
use std::time::Duration;

/// A malformed source or option.
#[derive(Debug, thiserror::Error)]
pub enum OptionError {
    /// The source is not `s3://BUCKET[/PREFIX]`.
    #[error("{0:?}: the source must be s3://BUCKET[/PREFIX]")]
    Url(String),
    /// A bucket name S3 would refuse (3-63 of a-z 0-9 . -).
    #[error("{0:?}: not a bucket name (3 to 63 of a-z, 0-9, '.', '-')")]
    Bucket(String),
    /// `endpoint=` that is not an http(s) URL.
    #[error("endpoint={0:?}: use http://HOST[:PORT] or https://HOST[:PORT]")]
    Endpoint(String),
    /// An option that takes a value without one, or with a bad one.
    #[error("-o {0}: {1}")]
    Value(String, String),
}

/// The bucket and the key prefix a mount shows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BucketUrl {
    /// The bucket.
    pub bucket: String,
    /// Keys under this prefix are the mount's files: empty, or ending
    /// in `/`.
    pub prefix: String,
}

impl BucketUrl {
    /// Parses `s3://BUCKET`, `s3://BUCKET/` or `s3://BUCKET/PREFIX[/]`.
    pub fn parse(s: &str) -> Result<BucketUrl, OptionError> {
        let rest = s
            .strip_prefix("s3://")
            .ok_or_else(|| OptionError::Url(s.into()))?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let ok = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
            && !bucket.starts_with(['.', '-'])
            && !bucket.ends_with(['.', '-']);
        if !ok {
            return Err(OptionError::Bucket(bucket.into()));
        }
        let prefix = prefix.trim_matches('/');
        if prefix.split('/').any(|c| c == "." || c == "..") {
            return Err(OptionError::Url(s.into()));
        }
        Ok(BucketUrl {
            bucket: bucket.into(),
            prefix: if prefix.is_empty() {
                String::new()
            } else {
                format!("{prefix}/")
            },
        })
    }
}

impl std::fmt::Display for BucketUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "s3://{}/{}", self.bucket, self.prefix)
    }
}

/// When a closed file's upload is waited for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upload {
    /// close(2) returns once the object is in the store (or, if the store
    /// cannot be reached, once the data is safe in the journal): another
    /// client sees the file whole as soon as close returns.
    OnClose,
    /// close(2) returns once the data is in the journal, and fsync(2)
    /// once it is synced there; uploads run behind (faster for many small
    /// files; other clients see them later).
    Behind,
}

/// Where a name's attributes come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Attrs {
    /// Its directory's listing (one LIST per 1,000 entries, shared by
    /// every name in it): size and Last-Modified, with the mode, owner,
    /// mtime and type this mount last read or wrote for that version of
    /// the object, else the mount's defaults. `stat` and `ls -l` agree and
    /// neither sends a HEAD; metadata another client set (a mode, a
    /// symlink) is seen once this mount has read it (`attrs=head`).
    Listing,
    /// The object's own metadata, one HEAD per name per attribute
    /// timeout (s3fs's way): exact modes, owners, mtimes and symlinks
    /// whoever wrote them, at a round trip per name.
    Head,
}

/// objfs's settings for one mount.
#[derive(Clone, Debug)]
pub struct ObjOptions {
    /// `endpoint=URL`: the S3 endpoint (otherwise aws-config's: the
    /// profile's `endpoint_url`, `AWS_ENDPOINT_URL`, or AWS itself).
    pub endpoint: Option<String>,
    /// `region=`: overrides the profile's and `AWS_REGION`.
    pub region: Option<String>,
    /// `profile=`: the profile in `~/.aws/config` (otherwise
    /// `AWS_PROFILE`, then `default`).
    pub profile: Option<String>,
    /// `path_style` / `virtual_host`: path-style addressing, on by default
    /// when an endpoint is given (what self-hosted stores serve).
    pub path_style: Option<bool>,
    /// `attr_timeout=S`, `entry_timeout=S`, `negative_timeout=S`, or
    /// `cache_timeout=S` for all three: how long names and attributes are
    /// trusted before the store is asked again.
    pub attr_timeout: Duration,
    /// See `attr_timeout`.
    pub entry_timeout: Duration,
    /// How long a name's absence is trusted.
    pub negative_timeout: Duration,
    /// `part_size=BYTES`: multipart part and ranged-GET chunk size.
    pub part_size: u64,
    /// `concurrency=N`: requests one file's transfer keeps in flight.
    pub concurrency: usize,
    /// `max_copy=BYTES`: the largest object one CopyObject request
    /// copies (S3's limit, 5 GiB, by default); larger objects are copied
    /// in parts of `part_size` (UploadPartCopy). For stores that set a
    /// lower limit.
    pub max_copy: u64,
    /// `readahead=BYTES`: the most a sequential reader fetches ahead.
    pub readahead: u64,
    /// `read_memory=BYTES`: the bound on fetched-ahead data held for all
    /// open files together.
    pub read_memory: u64,
    /// `timeout=S`: a request that takes longer fails (EIO), retries
    /// included.
    pub timeout: Duration,
    /// `staging=DIR`: where open and not-yet-uploaded files live.
    pub staging: Option<PathBuf>,
    /// `upload=close|behind`.
    pub upload: Upload,
    /// `write_back=S`: with `upload=behind`, how long after its last
    /// close a file waits before its upload (rclone's `--vfs-write-back`),
    /// so a file renamed or changed right after it is written goes up
    /// once.
    pub write_back: Duration,
    /// `umask=`: permission bits removed from objects without a mode.
    pub umask: u32,
    /// `attrs=listing|head`.
    pub attrs: Attrs,
}

impl Default for ObjOptions {
    fn default() -> Self {
        ObjOptions {
            endpoint: None,
            region: None,
            profile: None,
            path_style: None,
            attr_timeout: Duration::from_secs(10),
            entry_timeout: Duration::from_secs(10),
            negative_timeout: Duration::from_secs(10),
            part_size: 8 << 20,
            concurrency: 8,
            max_copy: 5 << 30,
            readahead: 64 << 20,
            read_memory: 256 << 20,
            timeout: Duration::from_secs(30),
            staging: None,
            upload: Upload::OnClose,
            write_back: Duration::from_secs(5),
            umask: 0o022,
            attrs: Attrs::Listing,
        }
    }
}

fn seconds(key: &str, v: &str) -> Result<Duration, OptionError> {
    let n: f64 = v
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)
        .ok_or_else(|| OptionError::Value(key.into(), "use seconds, e.g. 10 or 0.5".into()))?;
    Ok(Duration::from_secs_f64(n))
}

/// `8M`, `64K`, `1G` or bytes.
pub fn parse_size(key: &str, v: &str) -> Result<u64, OptionError> {
    let bad = || OptionError::Value(key.into(), "use a size such as 8M or 65536".into());
    let (num, mult) = match v.chars().last() {
        Some('K' | 'k') => (&v[..v.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&v[..v.len() - 1], 1 << 20),
        Some('G' | 'g') => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(bad)
}

impl ObjOptions {
    /// Takes objfs's options out of `-o` lists (each comma-separated);
    /// returns the rest (fusebox's mount options) for the caller.
    pub fn parse(lists: &[String]) -> Result<(ObjOptions, Vec<String>), OptionError> {
        let mut o = ObjOptions::default();
        let mut rest = Vec::new();
        for item in lists
            .iter()
            .flat_map(|l| l.split(','))
            .filter(|s| !s.is_empty())
        {
            let (key, value) = match item.split_once('=') {
                Some((k, v)) => (k, Some(v)),
                None => (item, None),
            };
            let need = || {
                value
                    .filter(|v| !v.is_empty())
                    .ok_or_else(|| OptionError::Value(key.into(), "needs a value".into()))
            };
            match key {
                "endpoint" => {
                    let v = need()?;
                    if !(v.starts_with("http://") || v.starts_with("https://")) {
                        return Err(OptionError::Endpoint(v.into()));
                    }
                    o.endpoint = Some(v.trim_end_matches('/').into());
                }
                "region" => o.region = Some(need()?.into()),
                "profile" => o.profile = Some(need()?.into()),
                "path_style" | "use_path_request_style" => o.path_style = Some(true),
                "virtual_host" => o.path_style = Some(false),
                "attr_timeout" => o.attr_timeout = seconds(key, need()?)?,
                "entry_timeout" => o.entry_timeout = seconds(key, need()?)?,
                "negative_timeout" => o.negative_timeout = seconds(key, need()?)?,
                "cache_timeout" => {
                    let t = seconds(key, need()?)?;
                    (o.attr_timeout, o.entry_timeout, o.negative_timeout) = (t, t, t);
                }
                "part_size" => {
                    let n = parse_size(key, need()?)?;
                    // S3's own limits on a multipart part.
                    if !(5 << 20..=5 << 30).contains(&n) {
                        return Err(OptionError::Value(key.into(), "between 5M and 5G".into()));
                    }
                    o.part_size = n;
                }
                "concurrency" => {
                    o.concurrency = need()?
                        .parse()
                        .ok()
                        .filter(|n| (1..=256).contains(n))
                        .ok_or_else(|| OptionError::Value(key.into(), "1 to 256".into()))?
                }
                "max_copy" => {
                    let n = parse_size(key, need()?)?;
                    if !(5 << 20..=5 << 30).contains(&n) {
                        return Err(OptionError::Value(key.into(), "between 5M and 5G".into()));
                    }
                    o.max_copy = n;
                }
                "readahead" => o.readahead = parse_size(key, need()?)?,
                "read_memory" => o.read_memory = parse_size(key, need()?)?,
                "timeout" => {
                    o.timeout = seconds(key, need()?)?;
                    if o.timeout.is_zero() {
                        return Err(OptionError::Value(key.into(), "must be above 0".into()));
                    }
                }
                "staging" => o.staging = Some(PathBuf::from(need()?)),
                "upload" => {
                    o.upload = match need()? {
                        "close" => Upload::OnClose,
                        "behind" => Upload::Behind,
                        _ => return Err(OptionError::Value(key.into(), "close or behind".into())),
                    }
                }
                "attrs" => {
                    o.attrs = match need()? {
                        "listing" => Attrs::Listing,
                        "head" => Attrs::Head,
                        _ => return Err(OptionError::Value(key.into(), "listing or head".into())),
                    }
                }
                "write_back" => {
                    o.write_back = seconds(key, need()?)?;
                    if o.write_back > Duration::from_secs(86_400) {
                        return Err(OptionError::Value(key.into(), "at most a day".into()));
                    }
                }
                "umask" => {
                    o.umask = u32::from_str_radix(need()?, 8)
                        .ok()
                        .filter(|m| *m <= 0o777)
                        .ok_or_else(|| OptionError::Value(key.into(), "octal, e.g. 022".into()))?
                }
                _ => rest.push(item.to_string()),
            }
        }
        Ok((o, rest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = BucketUrl::parse("s3://my-bucket").unwrap();
        assert_eq!((u.bucket.as_str(), u.prefix.as_str()), ("my-bucket", ""));
        let u = BucketUrl::parse("s3://b.example/a/b/").unwrap();
        assert_eq!(
            (u.bucket.as_str(), u.prefix.as_str()),
            ("b.example", "a/b/")
        );
        for bad in [
            "http://x/y",
            "s3://",
            "s3://UPPER",
            "s3://ab",
            "s3://b-/x",
            "s3://bkt/../x",
        ] {
            assert!(BucketUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn options_are_taken_and_the_rest_passed_on() {
        let (o, rest) = ObjOptions::parse(&[
            "endpoint=http://127.0.0.1:3900/,region=garage,allow_other".into(),
            "cache_timeout=2,part_size=16M,upload=behind,attrs=head,write_back=0.5,ro".into(),
        ])
        .unwrap();
        assert_eq!(o.endpoint.as_deref(), Some("http://127.0.0.1:3900"));
        assert_eq!(o.region.as_deref(), Some("garage"));
        assert_eq!(o.negative_timeout, Duration::from_secs(2));
        assert_eq!(o.part_size, 16 << 20);
        assert_eq!(o.upload, Upload::Behind);
        assert_eq!(o.attrs, Attrs::Head);
        assert_eq!(o.write_back, Duration::from_millis(500));
        assert_eq!(ObjOptions::default().attrs, Attrs::Listing);
        assert_eq!(rest, ["allow_other", "ro"]);
        for bad in [
            "endpoint=ftp://x",
            "part_size=1M",
            "concurrency=0",
            "upload=later",
            "attrs=guess",
            "write_back=1e18",
            "region",
        ] {
            assert!(ObjOptions::parse(&[bad.into()]).is_err(), "{bad}");
        }
    }
}
