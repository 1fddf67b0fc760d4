//! The filesystems the `fusebox` command serves, by name: what each takes
//! after its name, whether a supervisor can keep it served, and how direct
//! mode runs it. The one list that `fusebox mount`, the mount(8) helpers,
//! `fusebox run --fs` and the direct-mode library read; a filesystem added
//! here is named the same everywhere, and each consumer's `match` on
//! [`FsId`] makes it say how it builds the new one.
//!
//! Nothing here builds a filesystem (that needs each one's crate): this is
//! what is known about them before one is built.

#![warn(missing_docs)]

use std::fmt;

/// Which filesystem.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FsId {
    /// A directory passed through, its nodes kept by kernel file handle.
    Stackfs,
    /// A directory passed through by path (the path-level API's example).
    Pathfs,
    /// Files in the server's memory.
    Memfs,
    /// An empty root where every call succeeds and does nothing.
    Nullfs,
    /// Read-only files with emulated storage latency.
    Timingfs,
    /// timingfs through the async API (direct mode's name for it; a mount
    /// says `timingfs --waiting async`).
    TimingfsAsync,
    /// A remote directory over SFTP, through the system's ssh.
    Sftpfs,
    /// An S3 bucket (or a prefix of one), objects as files.
    Objfs,
}

/// What follows the name (`FS:SOURCE` in a spec, the first path of
/// `fusebox mount`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Nothing.
    None,
    /// A directory on this machine, which must exist.
    LocalDir,
    /// `[user@]host:[dir]`: checked by the filesystem when it connects.
    Remote,
    /// A word the filesystem reads (timingfs's latency profile), optional.
    Profile,
    /// `s3://BUCKET[/PREFIX]`: checked by the filesystem when it connects.
    Bucket,
}

/// What a supervisor can do for the mount when its server dies or is
/// replaced (`fusebox::recovery`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recovery {
    /// Restart after a crash and upgrade live, no failed request.
    CrashAndUpgrade,
    /// Upgrade live only: its files live in its process, and die with it.
    UpgradeOnly,
    /// Served without a supervisor.
    Unsupervised,
}

/// How `fusebox run --fs` serves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direct {
    /// Each process of the run builds its own instance: its state is the
    /// source's files, or it has none. `page_cache`: 4 KiB pages of file
    /// data a process keeps by default (0 where the source's own kernel
    /// page cache serves).
    PerProcess {
        /// 4 KiB pages each process keeps; 0 where the kernel's page cache
        /// already holds the data.
        page_cache: u64,
    },
    /// One instance in a server of the run's, reached by every process:
    /// its state lives in its process (memfs), or it holds what must not
    /// be made once per process (sftpfs's SSH connection and caches).
    RunServer {
        /// 4 KiB pages of file data each process keeps in front of the
        /// server.
        page_cache: u64,
    },
}

/// One filesystem, before it is built.
#[derive(Debug, PartialEq, Eq)]
pub struct Filesystem {
    /// Which one, for a consumer's exhaustive `match`.
    pub id: FsId,
    /// What users call it: `fusebox mount NAME`, `-t fusebox.NAME`,
    /// `--fs NAME:SOURCE`; matched in any case.
    pub name: &'static str,
    /// One line, for help texts.
    pub about: &'static str,
    /// What follows its name.
    pub source: Source,
    /// `fusebox mount` serves it (some names are direct mode's alone).
    pub mounts: bool,
    /// What a supervisor can keep served.
    pub recovery: Recovery,
    /// How direct mode runs it.
    pub direct: Direct,
    /// `uid=` and `gid=` are its own options (sshfs's: the owner every file
    /// shows) rather than mount(8)'s way of naming whose mount it is.
    pub owner_options: bool,
    /// Serving threads by default, when it wants more than one per CPU (a
    /// thread waits out a network round trip).
    pub workers: Option<usize>,
}

/// Direct mode's page cache for filesystems whose data is not already in
/// the kernel's page cache: 64 MiB a process.
pub const DEFAULT_PAGES: u64 = 16_384;

/// Every filesystem, in the order help texts and error messages list them.
pub static FILESYSTEMS: &[Filesystem] = &[
    Filesystem {
        id: FsId::Stackfs,
        name: "stackfs",
        about: "passthrough of a directory (nodes by kernel file handle)",
        source: Source::LocalDir,
        mounts: true,
        recovery: Recovery::CrashAndUpgrade,
        direct: Direct::PerProcess { page_cache: 0 },
        owner_options: false,
        workers: None,
    },
    Filesystem {
        id: FsId::Pathfs,
        name: "pathfs",
        about: "passthrough of a directory through the path-level API",
        source: Source::LocalDir,
        mounts: true,
        recovery: Recovery::CrashAndUpgrade,
        direct: Direct::PerProcess { page_cache: 0 },
        owner_options: false,
        workers: None,
    },
    Filesystem {
        id: FsId::Memfs,
        name: "memfs",
        about: "in memory",
        source: Source::None,
        mounts: true,
        recovery: Recovery::UpgradeOnly,
        direct: Direct::RunServer {
            page_cache: DEFAULT_PAGES,
        },
        owner_options: false,
        workers: None,
    },
    Filesystem {
        id: FsId::Nullfs,
        name: "nullfs",
        about: "only the root exists; everything succeeds with nothing",
        source: Source::None,
        mounts: true,
        recovery: Recovery::Unsupervised,
        direct: Direct::PerProcess {
            page_cache: DEFAULT_PAGES,
        },
        owner_options: false,
        workers: None,
    },
    Filesystem {
        id: FsId::Timingfs,
        name: "timingfs",
        about: "read-only files with emulated storage latency",
        source: Source::Profile,
        mounts: true,
        recovery: Recovery::Unsupervised,
        direct: Direct::PerProcess {
            page_cache: DEFAULT_PAGES,
        },
        owner_options: false,
        workers: None,
    },
    Filesystem {
        id: FsId::TimingfsAsync,
        name: "timingfs-async",
        about: "timingfs through the async API",
        source: Source::Profile,
        mounts: false,
        recovery: Recovery::Unsupervised,
        direct: Direct::PerProcess {
            page_cache: DEFAULT_PAGES,
        },
        owner_options: false,
        workers: None,
    },
    Filesystem {
        id: FsId::Sftpfs,
        name: "sftpfs",
        about: "a remote directory over SFTP ([user@]host:[dir]), through your ssh",
        source: Source::Remote,
        mounts: true,
        recovery: Recovery::CrashAndUpgrade,
        direct: Direct::RunServer {
            page_cache: DEFAULT_PAGES,
        },
        owner_options: true,
        workers: Some(16),
    },
    Filesystem {
        id: FsId::Objfs,
        name: "objfs",
        about: "an S3 bucket (s3://BUCKET[/PREFIX]), objects as files, through your AWS config",
        source: Source::Bucket,
        mounts: true,
        recovery: Recovery::CrashAndUpgrade,
        direct: Direct::RunServer {
            page_cache: DEFAULT_PAGES,
        },
        owner_options: false,
        workers: Some(16),
    },
];

/// A name no filesystem has.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown filesystem {name:?} (fusebox has {known})")]
pub struct UnknownFs {
    /// The name asked for.
    pub name: String,
    /// The names that would have been accepted, comma-separated.
    pub known: String,
}

/// A spec that names a filesystem but not what it needs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The name before the colon is no filesystem's.
    #[error(transparent)]
    Unknown(#[from] UnknownFs),
    /// The filesystem needs a source and the spec gave none.
    #[error("{fs} needs {what} ({fs}:{what_short})")]
    MissingSource {
        /// The filesystem's name.
        fs: &'static str,
        /// What it needs, in words ("a source directory").
        what: &'static str,
        /// The same as a placeholder ("SOURCE").
        what_short: &'static str,
    },
    /// A source was given to a filesystem that takes none.
    #[error("{fs} takes nothing after its name")]
    Unexpected {
        /// The filesystem's name.
        fs: &'static str,
    },
}

impl Filesystem {
    /// What a user writes after the name, for messages.
    pub fn source_words(&self) -> Option<(&'static str, &'static str)> {
        match self.source {
            Source::LocalDir => Some(("a source directory", "SOURCE")),
            Source::Remote => Some(("a remote directory", "[user@]host:[dir]")),
            Source::Profile => Some(("a latency profile", "PROFILE")),
            Source::Bucket => Some(("a bucket", "s3://BUCKET[/PREFIX]")),
            Source::None => None,
        }
    }

    /// Whether a source must be given.
    pub fn needs_source(&self) -> bool {
        matches!(
            self.source,
            Source::LocalDir | Source::Remote | Source::Bucket
        )
    }
}

impl fmt::Display for Filesystem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name)
    }
}

/// The names `pick` keeps, comma-separated.
pub fn names(pick: impl Fn(&Filesystem) -> bool) -> String {
    FILESYSTEMS
        .iter()
        .filter(|f| pick(f))
        .map(|f| f.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The filesystem called `name` (any case).
pub fn find(name: &str) -> Result<&'static Filesystem, UnknownFs> {
    FILESYSTEMS
        .iter()
        .find(|f| f.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| UnknownFs {
            name: name.to_string(),
            known: names(|_| true),
        })
}

/// The one `fusebox mount` serves called `name`.
pub fn find_mountable(name: &str) -> Result<&'static Filesystem, UnknownFs> {
    match find(name) {
        Ok(f) if f.mounts => Ok(f),
        _ => Err(UnknownFs {
            name: name.to_string(),
            known: names(|f| f.mounts),
        }),
    }
}

/// `FS[:SOURCE]`, as mount(8)'s `fusebox` type and `fusebox run --fs`
/// take it. A remote source keeps its own colons (`sftpfs:host:dir`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec<'a> {
    /// The filesystem named.
    pub fs: &'static Filesystem,
    /// What came after the first colon; `None` if nothing did.
    pub source: Option<&'a str>,
}

/// Splits `FS[:SOURCE]` and checks the source against what the filesystem
/// takes. An empty source counts as none.
pub fn parse_spec(spec: &str) -> Result<Spec<'_>, SpecError> {
    let (name, source) = match spec.split_once(':') {
        Some((n, s)) => (n, Some(s).filter(|s| !s.is_empty())),
        None => (spec, None),
    };
    let fs = find(name)?;
    match (fs.source, source) {
        (Source::None, Some(_)) => Err(SpecError::Unexpected { fs: fs.name }),
        (Source::LocalDir | Source::Remote | Source::Bucket, None) => {
            let (what, what_short) = fs.source_words().expect("has a source");
            Err(SpecError::MissingSource {
                fs: fs.name,
                what,
                what_short,
            })
        }
        _ => Ok(Spec { fs, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found_in_any_case() {
        for (i, f) in FILESYSTEMS.iter().enumerate() {
            assert!(FILESYSTEMS[..i]
                .iter()
                .all(|g| g.name != f.name && g.id != f.id));
            assert_eq!(find(&f.name.to_uppercase()).unwrap().id, f.id);
        }
        let e = find("nosuchfs").unwrap_err().to_string();
        assert!(e.contains("fusebox has stackfs, pathfs"), "{e}");
        assert!(find_mountable("timingfs-async").is_err());
    }

    #[test]
    fn specs_say_what_they_lack() {
        let s = parse_spec("sftpfs:alice@host:src").unwrap();
        assert_eq!((s.fs.id, s.source), (FsId::Sftpfs, Some("alice@host:src")));
        assert_eq!(parse_spec("memfs").unwrap().source, None);
        assert_eq!(parse_spec("timingfs").unwrap().source, None);
        assert!(parse_spec("memfs:/x").is_err());
        let e = parse_spec("stackfs").unwrap_err().to_string();
        assert_eq!(e, "stackfs needs a source directory (stackfs:SOURCE)");
        assert!(parse_spec("sftpfs:").is_err());
    }
}
