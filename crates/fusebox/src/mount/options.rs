//! libfuse-style `-o opt,opt=value` options, split by who consumes them:
//! the mount(2) call, the INIT negotiation, or the filesystem.

use std::time::Duration;

use fusebox_abi::flags::init as f;

use crate::error::Error;
use crate::protocol::InitConfig;
use crate::types::Timeouts;

/// Options passed to mount(2) or fusermount3.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// The mount's source as mount(8) and /proc/mounts show it (`fsname=`).
    pub fsname: Option<String>,
    /// The type shown after `fuse.` (`subtype=`).
    pub subtype: Option<String>,
    /// Let users other than the mount's owner in (`allow_other`).
    pub allow_other: bool,
    /// Let the kernel check permissions from the mode bits, as for a local
    /// filesystem (`default_permissions`); ACCESS is then never sent.
    pub default_permissions: bool,
    /// Mount read-only (`ro`).
    pub read_only: bool,
    /// Ignore setuid and setgid bits (`nosuid`; on by default).
    pub nosuid: bool,
    /// Refuse to open device nodes (`nodev`; on by default).
    pub nodev: bool,
    /// Refuse to execute files (`noexec`).
    pub noexec: bool,
    /// Do not update access times (`noatime`).
    pub noatime: bool,
    /// Make every write synchronous (`sync`).
    pub sync: bool,
    /// Make directory changes synchronous (`dirsync`).
    pub dirsync: bool,
    /// Largest READ the kernel sends, in bytes (`max_read=`).
    pub max_read: Option<u32>,
    /// Block size of a block-device-backed mount (`blksize=`, fuseblk).
    pub blksize: Option<u32>,
    /// The user the mount belongs to (the kernel's `user_id`: who may use
    /// it without allow_other); the mounter by default. Root only.
    pub user_id: Option<u32>,
    /// The mount's group (`group_id`); the mounter's by default. Root only.
    pub group_id: Option<u32>,
}

impl Default for MountOptions {
    /// nosuid and nodev unless asked otherwise, as libfuse does: a user
    /// filesystem should not hand out setuid binaries or device nodes.
    fn default() -> Self {
        MountOptions {
            fsname: None,
            subtype: None,
            allow_other: false,
            default_permissions: false,
            read_only: false,
            nosuid: true,
            nodev: true,
            noexec: false,
            noatime: false,
            sync: false,
            dirsync: false,
            max_read: None,
            blksize: None,
            user_id: None,
            group_id: None,
        }
    }
}

/// Options a filesystem applies to its own answers.
#[derive(Clone, Copy, Debug, Default)]
pub struct FsOptions {
    /// Cache lifetimes given with `-o *_timeout=`; the rest are the
    /// filesystem's own defaults (see [`FsOptions::timeouts_or`]).
    pub timeouts: TimeoutOverrides,
    /// Open every file with FOPEN_DIRECT_IO (no kernel page cache).
    pub direct_io: bool,
    /// Keep the page cache across opens (FOPEN_KEEP_CACHE).
    pub keep_cache: bool,
    /// Send FLUSH on every close(2). Off by default: FOPEN_NOFLUSH saves a
    /// round trip per close, and a filesystem whose data is on the host
    /// (or in memory) has nothing to flush; locks are the kernel's own unless
    /// a filesystem implements getlk/setlk, and the kernel drops those at
    /// close without FLUSH.
    pub flush: bool,
    /// Let the kernel do file I/O on the backing file itself (stackable
    /// filesystems; FUSE_PASSTHROUGH, Linux 6.9+, root).
    pub passthrough: bool,
    /// Serve no extended attributes: xattr requests get ENOSYS once and the
    /// kernel stops sending them, including the security.capability probe
    /// it otherwise makes before every write.
    pub noxattr: bool,
}

/// Per-field `-o` overrides of a filesystem's default [`Timeouts`]: each
/// filesystem knows best how long its answers stay true, and only what the
/// user set explicitly should replace that.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeoutOverrides {
    /// `-o entry_timeout=`: how long names are cached.
    pub entry: Option<Duration>,
    /// `-o attr_timeout=`: how long attributes are cached.
    pub attr: Option<Duration>,
    /// `-o negative_timeout=`: how long a missing name is remembered.
    pub negative: Option<Duration>,
}

impl FsOptions {
    /// `defaults` with every timeout the user gave replacing its field.
    pub fn timeouts_or(&self, defaults: Timeouts) -> Timeouts {
        let o = &self.timeouts;
        Timeouts {
            entry: o.entry.unwrap_or(defaults.entry),
            attr: o.attr.unwrap_or(defaults.attr),
            negative: o.negative.unwrap_or(defaults.negative),
        }
    }
}

/// Everything `-o` can say.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// What goes to mount(2) or fusermount3.
    pub mount: MountOptions,
    /// What goes into the INIT negotiation.
    pub init: InitConfig,
    /// What the filesystem applies to its own answers.
    pub fs: FsOptions,
}

fn parse_num<T: std::str::FromStr>(opt: &str, v: &str) -> Result<T, Error> {
    v.parse().map_err(|_| Error::BadOption {
        option: opt.into(),
        reason: format!("{v:?} is not a number"),
    })
}

fn parse_secs(opt: &str, v: &str) -> Result<Duration, Error> {
    let secs: f64 = parse_num(opt, v)?;
    if !(0.0..=1e9).contains(&secs) {
        return Err(Error::BadOption {
            option: opt.into(),
            reason: "must be between 0 and 1e9 seconds".into(),
        });
    }
    Ok(Duration::from_secs_f64(secs))
}

impl Options {
    /// Apply one comma-separated `-o` list on top of the current values.
    pub fn apply(&mut self, list: &str) -> Result<(), Error> {
        for opt in list.split(',').map(str::trim).filter(|o| !o.is_empty()) {
            self.apply_one(opt)?;
        }
        Ok(())
    }

    /// One option, taken whole (a value may hold commas: `fsname=a,b`).
    pub fn apply_one(&mut self, opt: &str) -> Result<(), Error> {
        let (key, val) = match opt.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (opt, None),
        };
        fn need<'a>(opt: &str, v: Option<&'a str>) -> Result<&'a str, Error> {
            v.ok_or_else(|| Error::BadOption {
                option: opt.into(),
                reason: "needs a value (name=value)".into(),
            })
        }
        let m = &mut self.mount;
        let i = &mut self.init;
        match key {
            "fsname" => m.fsname = Some(need(opt, val)?.into()),
            "subtype" => m.subtype = Some(need(opt, val)?.into()),
            "allow_other" => m.allow_other = true,
            "default_permissions" => m.default_permissions = true,
            "ro" => m.read_only = true,
            "rw" => m.read_only = false,
            "nosuid" => m.nosuid = true,
            "suid" => m.nosuid = false,
            "nodev" => m.nodev = true,
            "dev" => m.nodev = false,
            "noexec" => m.noexec = true,
            "exec" => m.noexec = false,
            "noatime" => m.noatime = true,
            "atime" => m.noatime = false,
            "sync" => m.sync = true,
            "async" => m.sync = false,
            "dirsync" => m.dirsync = true,
            "max_read" => {
                let v = parse_num(opt, need(opt, val)?)?;
                m.max_read = Some(v);
                i.max_read = v;
            }
            "blksize" => m.blksize = Some(parse_num(opt, need(opt, val)?)?),
            "user_id" => m.user_id = Some(parse_num(opt, need(opt, val)?)?),
            "group_id" => m.group_id = Some(parse_num(opt, need(opt, val)?)?),
            "max_write" => i.max_write = parse_num(opt, need(opt, val)?)?,
            "max_readahead" => i.max_readahead = Some(parse_num(opt, need(opt, val)?)?),
            "max_background" => i.max_background = parse_num(opt, need(opt, val)?)?,
            "congestion_threshold" => {
                i.congestion_threshold = Some(parse_num(opt, need(opt, val)?)?)
            }
            "writeback_cache" => i.ask(f::WRITEBACK_CACHE),
            "no_writeback_cache" => i.refuse(f::WRITEBACK_CACHE),
            "async_read" => i.ask(f::ASYNC_READ),
            "sync_read" => i.refuse(f::ASYNC_READ),
            "parallel_dirops" => i.ask(f::PARALLEL_DIROPS),
            "no_parallel_dirops" => i.refuse(f::PARALLEL_DIROPS),
            "handle_killpriv_v2" => i.ask(f::HANDLE_KILLPRIV_V2),
            "no_handle_killpriv_v2" => i.refuse(f::HANDLE_KILLPRIV_V2),
            "async_dio" => i.ask(f::ASYNC_DIO),
            "no_async_dio" => i.refuse(f::ASYNC_DIO),
            "atomic_o_trunc" => i.ask(f::ATOMIC_O_TRUNC),
            "no_atomic_o_trunc" => i.refuse(f::ATOMIC_O_TRUNC),
            "splice_read" => i.ask(f::SPLICE_READ),
            "splice_write" => i.ask(f::SPLICE_WRITE | f::SPLICE_MOVE),
            "readdirplus" => {
                let plus = f::DO_READDIRPLUS | f::READDIRPLUS_AUTO;
                i.want &= !plus;
                i.refused &= !plus;
                match need(opt, val)? {
                    "yes" => {
                        i.ask(f::DO_READDIRPLUS);
                        i.refused |= f::READDIRPLUS_AUTO;
                    }
                    "auto" => i.ask(plus),
                    "no" => i.refuse(plus),
                    other => {
                        return Err(Error::BadOption {
                            option: opt.into(),
                            reason: format!("{other:?}: use yes, no or auto"),
                        })
                    }
                }
            }
            "attr_timeout" => self.fs.timeouts.attr = Some(parse_secs(opt, need(opt, val)?)?),
            "entry_timeout" => self.fs.timeouts.entry = Some(parse_secs(opt, need(opt, val)?)?),
            "negative_timeout" => {
                self.fs.timeouts.negative = Some(parse_secs(opt, need(opt, val)?)?)
            }
            "direct_io" => self.fs.direct_io = true,
            "keep_cache" => self.fs.keep_cache = true,
            "flush" => self.fs.flush = true,
            "noflush" => self.fs.flush = false,
            "passthrough" => self.fs.passthrough = true,
            "noxattr" => self.fs.noxattr = true,
            _ => {
                return Err(Error::BadOption {
                    option: opt.into(),
                    reason: "unknown option (see `fusebox mount --help` for the list)".into(),
                })
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_land_where_they_belong() {
        let mut o = Options::default();
        o.apply("allow_other,default_permissions,max_write=131072,attr_timeout=2.5,readdirplus=no,writeback_cache,fsname=src")
            .unwrap();
        assert!(o.mount.allow_other && o.mount.default_permissions);
        assert_eq!(o.mount.fsname.as_deref(), Some("src"));
        assert_eq!(o.init.max_write, 131072);
        let t = o.fs.timeouts_or(Timeouts::DAY);
        assert_eq!(t.attr, Duration::from_millis(2500));
        assert_eq!(
            (t.entry, t.negative),
            (Timeouts::DAY.entry, Timeouts::DAY.negative)
        );
        assert_eq!(o.init.want & f::DO_READDIRPLUS, 0);
        assert_ne!(o.init.want & f::WRITEBACK_CACHE, 0);
        // O_TRUNC inside OPEN only when asked for (see DESIGN.md).
        assert_eq!(o.init.want & f::ATOMIC_O_TRUNC, 0);
        o.apply("atomic_o_trunc").unwrap();
        assert_ne!(o.init.want & f::ATOMIC_O_TRUNC, 0);
        // Whose mount it is (fstab's uid=/gid=, through the mount helper).
        assert_eq!((o.mount.user_id, o.mount.group_id), (None, None));
        o.apply("user_id=1000,group_id=100").unwrap();
        assert_eq!((o.mount.user_id, o.mount.group_id), (Some(1000), Some(100)));
        assert!(o.apply("user_id=alice").is_err());
    }

    #[test]
    fn bad_options_say_why() {
        let mut o = Options::default();
        let e = o.apply("max_write=lots").unwrap_err().to_string();
        assert!(e.contains("max_write") && e.contains("not a number"), "{e}");
        assert!(o
            .apply("frobnicate")
            .unwrap_err()
            .to_string()
            .contains("unknown option"));
        assert!(o
            .apply("fsname")
            .unwrap_err()
            .to_string()
            .contains("needs a value"));
    }
}
