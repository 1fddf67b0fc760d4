//! The compat suite's subjects: unchanged Debian programs (sshfs,
//! squashfuse, fuse-overlayfs) over the backing directory, each on
//! Debian's own libfuse3 and on fusebox's drop-in libfuse3.so.3 (the
//! `fusebox` binary's sibling, pointed at with `LD_LIBRARY_PATH`) over
//! each transport. The same binary in every case: only the library the
//! loader finds differs.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::UNIX_EPOCH;

use anyhow::{bail, Context, Result};

use crate::remote::{Sshd, SshdConfig};
use crate::results::SubjectInfo;
use crate::subject::{spawn_daemon, which, Mounted, Subject};
use crate::workload::CompatProgram;

/// What the sshfs subjects share: one OpenSSH server on loopback.
#[derive(Default)]
pub struct Shared {
    sshd: Mutex<Option<Sshd>>,
    /// The squashfs image of the backing directory, and what the directory
    /// looked like when it was made.
    image: Mutex<Option<(Signature, PathBuf)>>,
}

/// Which library a subject's program runs on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Library {
    Debian,
    Fusebox { transport: &'static str },
}

pub struct CompatSubject {
    pub program: CompatProgram,
    pub library: Library,
    pub fusebox_bin: PathBuf,
    pub shared: Arc<Shared>,
    /// Set by `prepare`: where the drop-in answers to libfuse3.so.3, and
    /// the scratch directory.
    dropin_dir: Option<PathBuf>,
    workdir: PathBuf,
}

impl CompatSubject {
    pub fn new(
        program: CompatProgram,
        library: Library,
        fusebox_bin: &Path,
        shared: Arc<Shared>,
    ) -> CompatSubject {
        CompatSubject {
            program,
            library,
            fusebox_bin: fusebox_bin.to_path_buf(),
            shared,
            dropin_dir: None,
            workdir: PathBuf::new(),
        }
    }

    fn program_name(&self) -> &'static str {
        match self.program {
            CompatProgram::Sshfs => "sshfs",
            CompatProgram::Squashfuse => "squashfuse",
            CompatProgram::Overlay => "fuse-overlayfs",
        }
    }
}

/// The subjects of one program: on Debian's library, and on the drop-in
/// over classic /dev/fuse and over io_uring.
pub fn subjects(program: CompatProgram, fusebox_bin: &Path) -> Vec<Box<dyn Subject>> {
    let shared = Arc::new(Shared::default());
    [
        Library::Debian,
        Library::Fusebox {
            transport: "classic",
        },
        Library::Fusebox { transport: "uring" },
    ]
    .into_iter()
    .map(|lib| {
        Box::new(CompatSubject::new(
            program,
            lib,
            fusebox_bin,
            shared.clone(),
        )) as Box<dyn Subject>
    })
    .collect()
}

impl Subject for CompatSubject {
    fn info(&self) -> SubjectInfo {
        let program = self.program_name();
        let (name, description) = match self.library {
            Library::Debian => (
                format!("{program}-debian"),
                format!("Debian's {program} on Debian's libfuse3 3.14"),
            ),
            Library::Fusebox { transport } => (
                format!("{program}-fusebox-{transport}"),
                format!("the same {program} binary on fusebox's libfuse3 drop-in, {transport} transport"),
            ),
        };
        SubjectInfo {
            name,
            description,
            is_fusebox: matches!(self.library, Library::Fusebox { .. }),
            matches: match self.library {
                Library::Debian => None,
                Library::Fusebox { .. } => Some(format!("{program}-debian")),
            },
            ..Default::default()
        }
    }

    fn prepare(&mut self, workdir: &Path) -> Result<()> {
        let program = self.program_name();
        if which(program).is_none() {
            bail!("{program} is not installed (scripts/setup.sh installs it)");
        }
        if self.program == CompatProgram::Sshfs && !Path::new("/usr/sbin/sshd").exists() {
            bail!("openssh-server is not installed");
        }
        if self.program == CompatProgram::Squashfuse && which("mksquashfs").is_none() {
            bail!("squashfs-tools (mksquashfs) is not installed");
        }
        self.workdir = workdir.to_path_buf();
        if let Library::Fusebox { transport } = self.library {
            if transport == "uring" {
                fusebox::transport::uring::availability().map_err(anyhow::Error::msg)?;
            }
            let lib = self
                .fusebox_bin
                .parent()
                .map(|d| d.join("libfuse3.so"))
                .filter(|l| l.is_file())
                .with_context(|| {
                    format!(
                        "no libfuse3.so beside {} (cargo build --release -p fusebox-libfuse3)",
                        self.fusebox_bin.display()
                    )
                })?;
            let dir = workdir.join("dropin");
            std::fs::create_dir_all(&dir)?;
            let link = dir.join("libfuse3.so.3");
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(std::fs::canonicalize(&lib)?, &link)?;
            self.dropin_dir = Some(dir);
        }
        Ok(())
    }

    fn mount(&self, backing: &Path, mnt: &Path) -> Result<Mounted> {
        let mut cmd = match self.program {
            CompatProgram::Sshfs => {
                let ssh_options = self.sshd()?;
                let mut c = Command::new("sshfs");
                c.arg("-f").arg("-o").arg(ssh_options);
                c.arg(format!("root@127.0.0.1:{}", backing.display()));
                c
            }
            CompatProgram::Squashfuse => {
                let image = self.image_of(backing)?;
                let mut c = Command::new("squashfuse");
                c.arg("-f").arg(image);
                c
            }
            CompatProgram::Overlay => {
                // A fresh upper layer per mount: the backing directory (the
                // lower one) never changes.
                let layers = self.workdir.join(format!("overlay-{}", self.info().name));
                if layers.exists() {
                    std::fs::remove_dir_all(&layers)?;
                }
                let (upper, work) = (layers.join("upper"), layers.join("work"));
                std::fs::create_dir_all(&upper)?;
                std::fs::create_dir_all(&work)?;
                let mut c = Command::new("fuse-overlayfs");
                c.arg("-f").arg("-o").arg(format!(
                    "lowerdir={},upperdir={},workdir={}",
                    backing.display(),
                    upper.display(),
                    work.display()
                ));
                c
            }
        };
        cmd.arg(mnt);
        if let (Library::Fusebox { transport }, Some(dir)) = (self.library, &self.dropin_dir) {
            cmd.env("LD_LIBRARY_PATH", dir)
                .env("FUSEBOX_TRANSPORT", transport);
        }
        let mut m = spawn_daemon(cmd, mnt)?;
        if matches!(self.library, Library::Fusebox { .. }) {
            m.fusebox_mount = Some(mnt.to_path_buf());
        }
        Ok(m)
    }
}

impl CompatSubject {
    /// The shared sshd (started on first use): the ssh options that
    /// reach it.
    fn sshd(&self) -> Result<String> {
        let mut guard = self
            .shared
            .sshd
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if guard.is_none() {
            *guard = Some(Sshd::start(
                &self.workdir.join("compat-sshd"),
                &SshdConfig::default(),
            )?);
        }
        let s = guard.as_ref().expect("just started");
        Ok(s.ssh_options(s.port()))
    }

    /// A squashfs image of `backing` (uncompressed: the library is what is
    /// compared, not zlib), made again only when the directory changed.
    fn image_of(&self, backing: &Path) -> Result<PathBuf> {
        let sig = signature(backing)?;
        let mut guard = self
            .shared
            .image
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some((s, img)) = guard.as_ref() {
            if *s == sig && img.exists() {
                return Ok(img.clone());
            }
        }
        let img = self.workdir.join("compat.squashfs");
        let _ = std::fs::remove_file(&img);
        let st = Command::new("mksquashfs")
            .arg(backing)
            .arg(&img)
            .args([
                "-quiet",
                "-no-progress",
                "-noappend",
                "-noI",
                "-noD",
                "-noF",
                "-noX",
            ])
            .stdout(Stdio::null())
            .status()
            .context("mksquashfs")?;
        if !st.success() {
            bail!("mksquashfs of {} failed", backing.display());
        }
        *guard = Some((sig, img.clone()));
        Ok(img)
    }
}

/// Entries, bytes and the newest change time under a directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Signature {
    entries: u64,
    bytes: u64,
    newest_ns: u128,
}

fn signature(root: &Path) -> Result<Signature> {
    let mut sig = Signature {
        entries: 0,
        bytes: 0,
        newest_ns: 0,
    };
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir)? {
            let e = e?;
            let md = e.metadata()?;
            sig.entries += 1;
            sig.bytes += md.len();
            if let Ok(t) = md.modified() {
                let ns = t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
                sig.newest_ns = sig.newest_ns.max(ns);
            }
            if md.is_dir() {
                stack.push(e.path());
            }
        }
    }
    Ok(sig)
}
