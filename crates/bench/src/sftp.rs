//! The sftp suite's subjects: the backing directory served over SFTP by
//! one OpenSSH server on loopback (throwaway keys), reached through a
//! proxy that adds the workload's round trip ([`crate::remote`]), by
//! Debian's sshfs (its defaults, and its tuned best), rclone mount (its
//! best cache mode, full) and sftpfs (kernel path over both transports,
//! and direct mode with and without its caches). The server's SFTP
//! subsystem is `fusebox sftp-relay`, which counts the requests each
//! client sends, by type: the same count for every subject.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{bail, Result};

use crate::remote::{DelayProxy, Sshd, SshdConfig};
use crate::results::SubjectInfo;
use crate::subject::{spawn_daemon, which, Mounted, Subject};

/// OpenSSH's SFTP server program (package openssh-sftp-server).
const SFTP_SERVER: &str = "/usr/lib/openssh/sftp-server";

/// What one delay's subjects share: the server and the proxy.
pub struct Shared {
    delay: Duration,
    fusebox_bin: PathBuf,
    state: Mutex<Option<Endpoint>>,
}

struct Endpoint {
    // Dropped in this order: the proxy, then the server.
    proxy: DelayProxy,
    sshd: Sshd,
    counts: PathBuf,
}

impl Shared {
    /// The server and proxy (started on first use): the ssh options that
    /// reach the server through the proxy, the proxy's port, the key.
    fn endpoint(&self, workdir: &Path) -> Result<(String, u16, PathBuf, PathBuf)> {
        let mut g = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if g.is_none() {
            let dir = workdir.join(format!("sftp-sshd-{}ms", self.delay.as_millis()));
            let counts = dir.join("counts");
            let sshd = Sshd::start(
                &dir,
                &SshdConfig {
                    sftp_subsystem: Some(format!(
                        "{} sftp-relay {} {SFTP_SERVER}",
                        self.fusebox_bin.display(),
                        counts.display()
                    )),
                    extra: String::new(),
                },
            )?;
            std::fs::create_dir_all(&counts)?;
            let proxy = DelayProxy::start(sshd.port(), self.delay)?;
            *g = Some(Endpoint {
                proxy,
                sshd,
                counts,
            });
        }
        let e = g.as_ref().expect("started above");
        Ok((
            e.sshd.ssh_options(e.proxy.port()),
            e.proxy.port(),
            e.sshd.key(),
            e.counts.clone(),
        ))
    }
}

/// Which SFTP client a subject is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Client {
    /// Debian's sshfs with its defaults.
    Sshfs,
    /// sshfs tuned: its largest reads, four connections, the kernel's page
    /// cache kept across opens.
    SshfsTuned,
    /// rclone mount of an sftp remote, VFS cache mode full.
    Rclone,
    /// sftpfs through the kernel.
    Sftpfs { uring: bool },
    /// sftpfs in direct mode, with or without its caches.
    SftpfsDirect { cache: bool },
}

pub struct SftpSubject {
    client: Client,
    shared: Arc<Shared>,
    workdir: PathBuf,
}

/// Every subject at one delay.
pub fn subjects(delay_ms: u32, fusebox_bin: &Path) -> Vec<Box<dyn Subject>> {
    let shared = Arc::new(Shared {
        delay: Duration::from_millis(delay_ms as u64),
        fusebox_bin: fusebox_bin.to_path_buf(),
        state: Mutex::new(None),
    });
    [
        Client::Sshfs,
        Client::SshfsTuned,
        Client::Rclone,
        Client::Sftpfs { uring: false },
        Client::Sftpfs { uring: true },
        Client::SftpfsDirect { cache: true },
        Client::SftpfsDirect { cache: false },
    ]
    .into_iter()
    .map(|client| {
        Box::new(SftpSubject {
            client,
            shared: shared.clone(),
            workdir: PathBuf::new(),
        }) as Box<dyn Subject>
    })
    .collect()
}

impl Subject for SftpSubject {
    fn info(&self) -> SubjectInfo {
        let (name, description) = match self.client {
            Client::Sshfs => ("sshfs", "Debian's sshfs 3.7.3, its defaults"),
            Client::SshfsTuned => (
                "sshfs-tuned",
                "sshfs with -o max_read=65536,max_conns=4,kernel_cache (its largest reads, four connections, the page cache kept)",
            ),
            Client::Rclone => (
                "rclone",
                "rclone mount of an sftp remote, --vfs-cache-mode full (Debian's rclone 1.60)",
            ),
            Client::Sftpfs { uring: false } => ("sftpfs", "sftpfs through the kernel, classic /dev/fuse, supervised (the defaults)"),
            Client::Sftpfs { uring: true } => ("sftpfs-uring", "sftpfs through the kernel, FUSE-over-io_uring"),
            Client::SftpfsDirect { cache: true } => (
                "sftpfs-direct",
                "sftpfs in direct mode (fusebox run): the run's server holds the connection; metadata and page caches on",
            ),
            Client::SftpfsDirect { cache: false } => (
                "sftpfs-direct-nocache",
                "the same with direct mode's caches off (--cache-entries 0 --page-cache 0: no metadata or file data kept in the processes, nor file data in the run's server)",
            ),
        };
        let ours = matches!(
            self.client,
            Client::Sftpfs { .. } | Client::SftpfsDirect { .. }
        );
        SubjectInfo {
            name: name.into(),
            description: description.into(),
            is_fusebox: ours,
            is_peer: !ours,
            matches: ours.then(|| "sshfs".to_string()),
            ..Default::default()
        }
    }

    fn prepare(&mut self, workdir: &Path) -> Result<()> {
        self.workdir = workdir.to_path_buf();
        if !Path::new(SFTP_SERVER).exists() {
            bail!("{SFTP_SERVER} is missing (package openssh-sftp-server)");
        }
        match self.client {
            Client::Sshfs | Client::SshfsTuned if which("sshfs").is_none() => {
                bail!("sshfs is not installed (scripts/setup.sh installs it)")
            }
            Client::Rclone if which("rclone").is_none() => {
                bail!("rclone is not installed (scripts/setup.sh installs it)")
            }
            Client::Sftpfs { uring: true } => {
                fusebox::transport::uring::availability().map_err(anyhow::Error::msg)?
            }
            Client::SftpfsDirect { .. } => {
                let out = Command::new(&self.shared.fusebox_bin)
                    .args(["run", "--fs", "nullfs", "--at"])
                    .arg(workdir.join("direct-probe"))
                    .args(["--", "true"])
                    .output()?;
                if !out.status.success() {
                    bail!(
                        "fusebox run --fs cannot run here: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                }
            }
            _ => {}
        }
        // The server starts now, so a broken one is this subject's error.
        self.shared.endpoint(workdir)?;
        Ok(())
    }

    fn mount(&self, backing: &Path, mnt: &Path) -> Result<Mounted> {
        let (ssh_opts, port, key, counts) = self.shared.endpoint(&self.workdir)?;
        let remote = format!("root@127.0.0.1:{}", backing.display());
        let counter = move || crate::remote::sftp_request_counts(&counts);
        let mut m = match self.client {
            Client::Sshfs | Client::SshfsTuned => {
                let mut c = Command::new("sshfs");
                c.arg("-f").arg("-o").arg(&ssh_opts);
                if self.client == Client::SshfsTuned {
                    c.args(["-o", "max_read=65536,max_conns=4,kernel_cache"]);
                }
                c.arg(&remote).arg(mnt);
                spawn_daemon(c, mnt)?
            }
            Client::Rclone => {
                let mut c = crate::subject::rclone_mount(
                    &self.workdir,
                    &format!(":sftp:{}", backing.display()),
                    mnt,
                    "full",
                )?;
                c.args(["--sftp-host", "127.0.0.1", "--sftp-user", "root"])
                    .arg("--sftp-port")
                    .arg(port.to_string())
                    .arg("--sftp-key-file")
                    .arg(&key);
                spawn_daemon(c, mnt)?
            }
            Client::Sftpfs { uring } => {
                let mut c = Command::new(&self.shared.fusebox_bin);
                c.args(["mount", "sftpfs", "-f"])
                    .arg(&remote)
                    .arg(mnt)
                    .args(["-o", &ssh_opts])
                    .args(["--transport", if uring { "uring" } else { "classic" }]);
                let mut m = spawn_daemon(c, mnt)?;
                m.fusebox_mount = Some(mnt.to_path_buf());
                m
            }
            Client::SftpfsDirect { cache } => {
                let mut args = vec!["-o".to_string(), ssh_opts];
                if !cache {
                    args.extend(["--cache-entries", "0", "--page-cache", "0"].map(String::from));
                }
                Mounted::direct(
                    mnt,
                    crate::direct::DirectLaunch {
                        fusebox_bin: self.shared.fusebox_bin.clone(),
                        suite: "sftp".into(),
                        spec: format!("sftpfs:{remote}"),
                        args,
                    },
                )
            }
        };
        m.counters = Some(Arc::new(counter));
        Ok(m)
    }
}

/// The requests counted so far, by type (what [`Mounted::counters`] holds).
pub type Counts = BTreeMap<String, f64>;
