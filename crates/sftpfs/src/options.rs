//! What a user types: `[user@]host:[dir]` and sshfs's `-o` options.
//!
//! An option is one of four things, decided here once:
//! - sftpfs's own, under sshfs's name where sshfs has one (`reconnect`,
//!   `idmap=user`, `max_conns=4`, `dcache_timeout=20`, ...);
//! - an ssh option (`IdentityFile=...`, `Port=22`, `ProxyJump=...`: a name
//!   that starts with a capital letter, as in ssh_config(5), or sshfs's
//!   lowercase `port=`): handed to ssh as `-oName=value`, where ssh itself
//!   checks it;
//! - an sshfs option sftpfs does not have: refused with the reason, so a
//!   mount line written for sshfs never half-works;
//! - anything else: left for fusebox's mount options (`allow_other`,
//!   `attr_timeout=`, ...), which refuse what they do not know.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use crate::ssh::Route;

/// `[user@]host:[dir]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remote {
    pub user: Option<String>,
    pub host: String,
    /// As given: relative to the login directory unless it starts with /;
    /// empty for the login directory itself.
    pub dir: String,
}

impl Remote {
    pub fn parse(spec: &str) -> Result<Remote, OptionError> {
        let bad = |why: &str| OptionError::Remote {
            spec: spec.into(),
            why: why.into(),
        };
        let (user, rest) = match spec.split_once('@') {
            Some((u, r)) if !u.is_empty() && !u.contains(['/', ':']) => (Some(u.to_string()), r),
            Some((_, _)) => return Err(bad("an empty or odd user name before @")),
            None => (None, spec),
        };
        // [v6:address]:dir, as ssh and sshfs write an IPv6 host.
        let (host, dir) = if let Some(r) = rest.strip_prefix('[') {
            let (h, after) = r
                .split_once(']')
                .ok_or_else(|| bad("a [ with no ] after the host"))?;
            let dir = after
                .strip_prefix(':')
                .ok_or_else(|| bad("no : after the host"))?;
            (h, dir)
        } else {
            rest.split_once(':')
                .ok_or_else(|| bad("no : after the host (write host: for the login directory)"))?
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        if host.starts_with('-') {
            return Err(bad("a host may not start with -"));
        }
        Ok(Remote {
            user: user.filter(|_| true),
            host: host.to_string(),
            dir: dir.to_string(),
        })
    }

    /// `user@host` or `host`, as ssh takes it.
    pub fn destination(&self) -> String {
        match &self.user {
            Some(u) => format!("{u}@{}", self.host),
            None => self.host.clone(),
        }
    }
}

impl std::fmt::Display for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            let user = self
                .user
                .as_deref()
                .map(|u| format!("{u}@"))
                .unwrap_or_default();
            write!(f, "{user}[{}]:{}", self.host, self.dir)
        } else {
            write!(f, "{}:{}", self.destination(), self.dir)
        }
    }
}

/// How remote owners are shown (sshfs's `idmap=`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum IdMap {
    /// As the server says.
    #[default]
    None,
    /// The login user's uid and gid on the server show as the mounting
    /// user's, and the other way round.
    User,
    /// `uidfile=`/`gidfile=`: `name:id` lines mapping remote ids.
    File {
        uidfile: Option<PathBuf>,
        gidfile: Option<PathBuf>,
        /// `nomap=ignore`: ids with no line stay as they are (else error).
        ignore_missing: bool,
    },
}

/// Everything sftpfs takes from `-o`.
#[derive(Clone, Debug)]
pub struct SftpOptions {
    /// The ssh program and options (`ssh_command=`, ssh options, `-F`).
    pub ssh_command: Option<String>,
    pub ssh_options: Vec<String>,
    /// `sftp_server=`: a subsystem name, or a path run as a command.
    pub sftp_server: Option<String>,
    /// `directport=`: connect straight to an SFTP server on this port.
    pub directport: Option<u16>,
    /// Whether ssh may ask for a password or a host key on a terminal
    /// (foreground mounts); otherwise BatchMode=yes unless the user set
    /// BatchMode.
    pub interactive: bool,
    /// Reconnect when the connection drops (on by default; sshfs's
    /// `reconnect` is accepted and changes nothing).
    pub reconnect: bool,
    /// `delay_connect`: no connection until the first request.
    pub delay_connect: bool,
    /// `timeout=SECS`: the longest a request waits for the server,
    /// reconnecting included, before it fails with EIO.
    pub timeout: Duration,
    /// `sshfs_sync`: every write waits for the server (no write-behind).
    pub sync_write: bool,
    /// `no_readahead` turns it off; `max_readahead_window=BYTES` bounds it
    /// per open file.
    pub readahead: bool,
    pub readahead_window: u64,
    /// `write_behind=BYTES`: most write data in flight, not yet confirmed
    /// by the server, for the whole mount (what the write log holds).
    pub write_behind: u64,
    /// `readahead_memory=BYTES`: most readahead data held, whole mount.
    pub readahead_memory: u64,
    /// `page_cache=BYTES`: file data kept in sftpfs's memory (see
    /// `pages`); None: the default of where it runs (none through the
    /// kernel, whose page cache serves; 256 MiB in direct mode).
    pub page_cache: Option<u64>,
    pub idmap: IdMap,
    /// `uid=`/`gid=`/`umask=`: every file shows this owner and mode mask.
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub umask: Option<u32>,
    pub workaround_rename: bool,
    pub workaround_renamexdev: bool,
    pub workaround_createmode: bool,
    pub workaround_fstat: bool,
    pub disable_hardlink: bool,
    pub transform_symlinks: bool,
    pub contain_symlinks: bool,
    pub follow_symlinks: bool,
    pub check_root: bool,
    /// `dir_cache=yes|no` and its timeouts: how long a listing's names
    /// and attributes answer lookups without asking the server.
    pub dir_cache: bool,
    pub dcache_timeout: Duration,
    pub dcache_stat_timeout: Option<Duration>,
    pub dcache_dir_timeout: Option<Duration>,
    pub dcache_link_timeout: Option<Duration>,
    /// Most entries (names with attributes) the cache keeps.
    pub dcache_max_size: u64,
    /// `max_conns=N`: SSH connections; open files are spread over them.
    pub max_conns: usize,
    /// `stream_conns=N`: connections one file read in sequence spreads its
    /// READs over once its readahead outgrows one connection's window
    /// (its own and N-1 more, made when first needed; 1: never).
    pub stream_conns: usize,
    /// `prefetch_dirs=N`: threads listing directories ahead of a walk (0:
    /// none; see `listing`).
    pub prefetch_dirs: usize,
    /// `prefetch_files=N`: most small files of a directory read ahead at
    /// once for a program reading them one by one (0: none; see
    /// `smallfiles`).
    pub prefetch_files: usize,
    /// `kernel_cache`: keep the kernel's page cache across opens even if
    /// the file changed; `auto_cache` (the default here): keep it while
    /// mtime and size are unchanged.
    pub kernel_cache: bool,
}

impl Default for SftpOptions {
    fn default() -> SftpOptions {
        SftpOptions {
            ssh_command: None,
            ssh_options: Vec::new(),
            sftp_server: None,
            directport: None,
            interactive: false,
            reconnect: true,
            delay_connect: false,
            timeout: Duration::from_secs(30),
            sync_write: false,
            readahead: true,
            readahead_window: 16 << 20,
            write_behind: 32 << 20,
            readahead_memory: 256 << 20,
            page_cache: None,
            idmap: IdMap::None,
            uid: None,
            gid: None,
            umask: None,
            workaround_rename: false,
            workaround_renamexdev: false,
            workaround_createmode: false,
            workaround_fstat: false,
            disable_hardlink: false,
            transform_symlinks: false,
            contain_symlinks: false,
            follow_symlinks: false,
            check_root: true,
            dir_cache: true,
            dcache_timeout: Duration::from_secs(20),
            dcache_stat_timeout: None,
            dcache_dir_timeout: None,
            dcache_link_timeout: None,
            dcache_max_size: 100_000,
            max_conns: 1,
            stream_conns: 4,
            prefetch_dirs: 8,
            prefetch_files: 128,
            kernel_cache: false,
        }
    }
}

/// A bad or unsupported option, or a bad remote.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OptionError {
    #[error("{spec:?} is not a remote directory ([user@]host:[dir]): {why}")]
    Remote { spec: String, why: String },
    #[error("-o {option}: {why}")]
    Bad { option: String, why: String },
    #[error("-o {option}: sshfs has this option, sftpfs does not: {why}")]
    Unsupported { option: String, why: String },
}

/// sshfs's options that sftpfs refuses, and why.
const UNSUPPORTED: &[(&str, &str)] = &[
    ("passive", "sftpfs always starts its own ssh (or directport); pipe an SFTP server through ssh_command instead"),
    ("slave", "sftpfs always starts its own ssh; pipe an SFTP server through ssh_command instead"),
    ("password_stdin", "give ssh a key or an agent (or SSH_ASKPASS); sftpfs reconnects on its own and could not ask again"),
    ("ssh_protocol", "only SSH protocol 2 exists in OpenSSH today"),
    ("workaround=truncate", "it copies whole files through the client; every SFTP server in use truncates with SETSTAT"),
    ("workaround=buflimit", "it works around an OpenSSH bug fixed in 2006"),
    ("modules", "libfuse's stacking modules (subdir, iconv) are not available"),
    ("subdir", "libfuse's subdir module is not available: put the directory in host:dir"),
    ("iconv", "libfuse's iconv module is not available"),
    ("from_code", "libfuse's iconv module is not available"),
    ("to_code", "libfuse's iconv module is not available"),
    ("nonempty", "FUSE3 mounts on non-empty directories already"),
    ("large_read", "FUSE3 has no large_read"),
    ("sshfs_debug", "run with -vv (or RUST_LOG=fusebox_sftpfs::connection=debug) for every SFTP request and reply"),
];

fn secs(option: &str, v: &str) -> Result<Duration, OptionError> {
    v.parse::<f64>()
        .ok()
        .filter(|s| (0.0..=1e9).contains(s))
        .map(Duration::from_secs_f64)
        .ok_or_else(|| OptionError::Bad {
            option: option.into(),
            why: format!("{v:?} is not a number of seconds"),
        })
}

fn number<T: std::str::FromStr>(option: &str, v: &str) -> Result<T, OptionError> {
    v.parse().map_err(|_| OptionError::Bad {
        option: option.into(),
        why: format!("{v:?} is not a number"),
    })
}

/// `128K`, `16M`, `1G` or plain bytes.
fn bytes(option: &str, v: &str) -> Result<u64, OptionError> {
    let (num, mult) = match v.chars().last() {
        Some('K' | 'k') => (&v[..v.len() - 1], 1u64 << 10),
        Some('M' | 'm') => (&v[..v.len() - 1], 1 << 20),
        Some('G' | 'g') => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .ok_or_else(|| OptionError::Bad {
            option: option.into(),
            why: format!("{v:?} is not a size (bytes, or with K, M or G)"),
        })
}

fn yes_no(option: &str, v: &str) -> Result<bool, OptionError> {
    match v {
        "yes" | "true" | "1" => Ok(true),
        "no" | "false" | "0" => Ok(false),
        _ => Err(OptionError::Bad {
            option: option.into(),
            why: format!("{v:?}: use yes or no"),
        }),
    }
}

impl SftpOptions {
    /// Take sftpfs's and ssh's options out of the comma-separated `-o`
    /// lists; what is left (in order) is for fusebox's mount options.
    pub fn parse(lists: &[String]) -> Result<(SftpOptions, Vec<String>), OptionError> {
        let mut o = SftpOptions::default();
        let mut rest = Vec::new();
        for list in lists {
            for opt in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                if !o.take(opt)? {
                    rest.push(opt.to_string());
                }
            }
        }
        Ok((o, rest))
    }

    /// One option: true if it was sftpfs's or ssh's.
    fn take(&mut self, opt: &str) -> Result<bool, OptionError> {
        let (key, val) = match opt.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (opt, None),
        };
        let need = || {
            val.ok_or_else(|| OptionError::Bad {
                option: opt.into(),
                why: "needs a value (name=value)".into(),
            })
        };
        if let Some((_, why)) = UNSUPPORTED
            .iter()
            .find(|(name, _)| *name == opt || *name == key)
        {
            return Err(OptionError::Unsupported {
                option: opt.into(),
                why: (*why).into(),
            });
        }
        // ssh_config keywords are written capitalised (ssh takes any case,
        // but no FUSE or sshfs option starts with a capital).
        if key.starts_with(|c: char| c.is_ascii_uppercase()) {
            let v = need()?;
            self.ssh_options.push(format!("{key}={v}"));
            return Ok(true);
        }
        match key {
            "port" => {
                let p: u16 = number(opt, need()?)?;
                self.ssh_options.push(format!("Port={p}"));
            }
            "compression" => {
                let v = need()?;
                self.ssh_options.push(format!("Compression={v}"));
            }
            "ssh_command" => self.ssh_command = Some(need()?.into()),
            "sftp_server" => self.sftp_server = Some(need()?.into()),
            "directport" => self.directport = Some(number(opt, need()?)?),
            "reconnect" => self.reconnect = true,
            "delay_connect" => self.delay_connect = true,
            "timeout" => {
                let t = secs(opt, need()?)?;
                if t.is_zero() {
                    return Err(OptionError::Bad {
                        option: opt.into(),
                        why: "must be more than 0 seconds".into(),
                    });
                }
                self.timeout = t;
            }
            "sshfs_sync" => self.sync_write = true,
            "no_readahead" => self.readahead = false,
            "max_readahead_window" => self.readahead_window = bytes(opt, need()?)?,
            "readahead_memory" => self.readahead_memory = bytes(opt, need()?)?,
            "write_behind" => self.write_behind = bytes(opt, need()?)?,
            "page_cache" => self.page_cache = Some(bytes(opt, need()?)?),
            "sync_readdir" => {}
            "idmap" => {
                self.idmap = match need()? {
                    "none" => IdMap::None,
                    "user" => IdMap::User,
                    "file" => IdMap::File {
                        uidfile: None,
                        gidfile: None,
                        ignore_missing: false,
                    },
                    v => {
                        return Err(OptionError::Bad {
                            option: opt.into(),
                            why: format!("{v:?}: use none, user or file"),
                        })
                    }
                }
            }
            "uidfile" | "gidfile" | "nomap" => {
                let v = need()?;
                if !matches!(self.idmap, IdMap::File { .. }) {
                    self.idmap = IdMap::File {
                        uidfile: None,
                        gidfile: None,
                        ignore_missing: false,
                    };
                }
                let IdMap::File {
                    uidfile,
                    gidfile,
                    ignore_missing,
                } = &mut self.idmap
                else {
                    unreachable!("set just above")
                };
                match key {
                    "uidfile" => *uidfile = Some(v.into()),
                    "gidfile" => *gidfile = Some(v.into()),
                    _ => {
                        *ignore_missing = match v {
                            "ignore" => true,
                            "error" => false,
                            _ => {
                                return Err(OptionError::Bad {
                                    option: opt.into(),
                                    why: format!("{v:?}: use ignore or error"),
                                })
                            }
                        }
                    }
                }
            }
            "uid" => self.uid = Some(number(opt, need()?)?),
            "gid" => self.gid = Some(number(opt, need()?)?),
            "umask" => {
                let v = need()?;
                self.umask = Some(u32::from_str_radix(v, 8).map_err(|_| OptionError::Bad {
                    option: opt.into(),
                    why: format!("{v:?} is not an octal mask"),
                })?)
            }
            "workaround" => {
                for w in need()?.split(':').filter(|w| !w.is_empty()) {
                    match w {
                        "rename" => self.workaround_rename = true,
                        "renamexdev" => self.workaround_renamexdev = true,
                        "createmode" => self.workaround_createmode = true,
                        "fstat" => self.workaround_fstat = true,
                        "none" => {}
                        "all" => {
                            self.workaround_rename = true;
                            self.workaround_createmode = true;
                            self.workaround_fstat = true;
                        }
                        "truncate" | "buflimit" => {
                            let (_, why) = UNSUPPORTED
                                .iter()
                                .find(|(n, _)| n.ends_with(w))
                                .expect("listed");
                            return Err(OptionError::Unsupported {
                                option: format!("workaround={w}"),
                                why: (*why).into(),
                            });
                        }
                        other => {
                            return Err(OptionError::Bad {
                                option: opt.into(),
                                why: format!("unknown workaround {other:?} (sftpfs has rename, renamexdev, createmode, fstat)"),
                            })
                        }
                    }
                }
            }
            "disable_hardlink" => self.disable_hardlink = true,
            "transform_symlinks" => self.transform_symlinks = true,
            "contain_symlinks" => self.contain_symlinks = true,
            "no_contain_symlinks" => self.contain_symlinks = false,
            "follow_symlinks" => self.follow_symlinks = true,
            "no_check_root" => self.check_root = false,
            "dir_cache" | "cache" => self.dir_cache = yes_no(opt, need()?)?,
            "dcache_timeout" | "cache_timeout" => self.dcache_timeout = secs(opt, need()?)?,
            "dcache_stat_timeout" | "cache_stat_timeout" => {
                self.dcache_stat_timeout = Some(secs(opt, need()?)?)
            }
            "dcache_dir_timeout" | "cache_dir_timeout" => {
                self.dcache_dir_timeout = Some(secs(opt, need()?)?)
            }
            "dcache_link_timeout" | "cache_link_timeout" => {
                self.dcache_link_timeout = Some(secs(opt, need()?)?)
            }
            "dcache_max_size" | "cache_max_size" => self.dcache_max_size = number(opt, need()?)?,
            // Cleaning runs as entries expire (moka); nothing to set.
            "dcache_clean_interval"
            | "dcache_min_clean_interval"
            | "cache_clean_interval"
            | "cache_min_clean_interval" => {
                secs(opt, need()?)?;
            }
            "max_conns" => {
                let n: usize = number(opt, need()?)?;
                if !(1..=32).contains(&n) {
                    return Err(OptionError::Bad {
                        option: opt.into(),
                        why: "use 1 to 32 connections".into(),
                    });
                }
                self.max_conns = n;
            }
            "stream_conns" => {
                let n: usize = number(opt, need()?)?;
                if !(1..=16).contains(&n) {
                    return Err(OptionError::Bad {
                        option: opt.into(),
                        why: "use 1 to 16 connections".into(),
                    });
                }
                self.stream_conns = n;
            }
            "prefetch_dirs" => self.prefetch_dirs = number(opt, need()?)?,
            "prefetch_files" => self.prefetch_files = number(opt, need()?)?,
            "kernel_cache" => self.kernel_cache = true,
            "auto_cache" => self.kernel_cache = false,
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Seconds the cache keeps attributes, names and link targets.
    pub fn stat_timeout(&self) -> Duration {
        self.dcache_stat_timeout.unwrap_or(self.dcache_timeout)
    }
    pub fn dir_timeout(&self) -> Duration {
        self.dcache_dir_timeout.unwrap_or(self.dcache_timeout)
    }
    pub fn link_timeout(&self) -> Duration {
        self.dcache_link_timeout.unwrap_or(self.dcache_timeout)
    }

    /// How to reach `remote`: the ssh command line sshfs would run.
    pub fn route(&self, remote: &Remote) -> Route {
        if let Some(port) = self.directport {
            return Route::Direct {
                host: remote.host.clone(),
                port,
            };
        }
        let mut argv: Vec<OsString> = match &self.ssh_command {
            Some(cmd) => cmd.split_whitespace().map(OsString::from).collect(),
            None => vec!["ssh".into()],
        };
        argv.extend(
            ["-x", "-a", "-oClearAllForwardings=yes"]
                .iter()
                .map(OsString::from),
        );
        let set_by_user = |name: &str| {
            self.ssh_options.iter().any(|o| {
                o.split_once('=')
                    .is_some_and(|(k, _)| k.eq_ignore_ascii_case(name))
            })
        };
        if !self.interactive && !set_by_user("BatchMode") {
            argv.push("-oBatchMode=yes".into());
        }
        for o in &self.ssh_options {
            argv.push(format!("-o{o}").into());
        }
        if let Some(u) = &remote.user {
            argv.push("-l".into());
            argv.push(u.into());
        }
        argv.push(remote.host.clone().into());
        match self.sftp_server.as_deref() {
            // A path runs as a command, anything else names a subsystem
            // (sshfs's rule).
            Some(s) if s.contains('/') => argv.push(s.into()),
            s => {
                argv.push("-s".into());
                argv.push(s.unwrap_or("sftp").into());
            }
        }
        argv.retain(|a| !a.is_empty());
        Route::Ssh { argv }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remotes_parse_as_ssh_writes_them() {
        let r = Remote::parse("alice@example.org:src/x").unwrap();
        assert_eq!(
            (r.user.as_deref(), r.host.as_str(), r.dir.as_str()),
            (Some("alice"), "example.org", "src/x")
        );
        let r = Remote::parse("host:").unwrap();
        assert_eq!((r.user, r.dir.as_str()), (None, ""));
        let r = Remote::parse("[::1]:/srv").unwrap();
        assert_eq!((r.host.as_str(), r.dir.as_str()), ("::1", "/srv"));
        assert_eq!(r.to_string(), "[::1]:/srv");
        for bad in ["host", ":dir", "@h:d", "-oProxyCommand=x:d", "[::1/srv"] {
            assert!(Remote::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn options_are_sorted_into_ours_ssh_and_the_rest() {
        let (o, rest) = SftpOptions::parse(&[
            "idmap=user,IdentityFile=/k,port=2222,allow_other,reconnect,max_conns=4".into(),
            "dcache_timeout=5,attr_timeout=1,ServerAliveInterval=15,workaround=rename:renamexdev"
                .into(),
        ])
        .unwrap();
        assert_eq!(o.idmap, IdMap::User);
        assert_eq!(o.max_conns, 4);
        assert!(o.workaround_rename && o.workaround_renamexdev);
        assert_eq!(o.dcache_timeout, Duration::from_secs(5));
        assert_eq!(rest, ["allow_other", "attr_timeout=1"]);
        let Route::Ssh { argv } = o.route(&Remote::parse("bob@h:d").unwrap()) else {
            panic!("ssh")
        };
        let argv: Vec<String> = argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            argv,
            [
                "ssh",
                "-x",
                "-a",
                "-oClearAllForwardings=yes",
                "-oBatchMode=yes",
                "-oIdentityFile=/k",
                "-oPort=2222",
                "-oServerAliveInterval=15",
                "-l",
                "bob",
                "h",
                "-s",
                "sftp"
            ]
        );
    }

    #[test]
    fn sshfs_options_sftpfs_lacks_are_refused_with_the_reason() {
        for opt in [
            "passive",
            "password_stdin",
            "workaround=truncate",
            "ssh_protocol=1",
        ] {
            let e = SftpOptions::parse(&[opt.into()]).unwrap_err();
            assert!(matches!(e, OptionError::Unsupported { .. }), "{opt}: {e}");
            assert!(e.to_string().contains("sshfs has this option"), "{e}");
        }
        assert!(SftpOptions::parse(&["timeout=0".into()]).is_err());
        assert!(SftpOptions::parse(&["idmap=group".into()]).is_err());
        assert!(SftpOptions::parse(&["IdentityFile".into()]).is_err());
    }

    #[test]
    fn a_path_as_sftp_server_runs_as_a_command() {
        let (o, _) =
            SftpOptions::parse(&["sftp_server=/usr/lib/openssh/sftp-server".into()]).unwrap();
        let Route::Ssh { argv } = o.route(&Remote::parse("h:").unwrap()) else {
            panic!()
        };
        assert_eq!(argv.last().unwrap(), "/usr/lib/openssh/sftp-server");
        assert_ne!(argv[argv.len() - 2], "-s");
    }
}
