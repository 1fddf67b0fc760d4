//! The blk suite's subjects: one block device per subject, each a loop
//! device (direct I/O) over a file, so fio sees the same kind of device
//! everywhere and only what serves the file differs:
//!
//! - `native`: a file on tmpfs, served by the kernel itself (the limit);
//! - `fusebox-classic`, `fusebox-uring`: `fusebox blk create` with the
//!   `null` or `ram` driver (classic runs supervised, as by default);
//! - `nbdkit`: nbdkit's `null` or `memory` plugin through nbdfuse (libnbd);
//! - `qemu-storage-daemon`: its FUSE export of a `null-co` block node, or
//!   of a raw image on tmpfs.
//!
//! Devices that keep data are written once in full when set up (untimed),
//! so reads find memory that exists rather than holes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use fusebox_blk::loopdev::{AttachOptions, LoopDevice};

use crate::results::SubjectInfo;
use crate::subject::{which, Mounted, Subject};
use crate::workload::BlkDriver;

/// Bytes per device.
pub const DEVICE_SIZE: u64 = 512 << 20;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Server {
    Native,
    Fusebox { transport: &'static str },
    Nbdkit,
    QemuStorageDaemon,
}

pub struct BlkSubject {
    server: Server,
    driver: BlkDriver,
    fusebox_bin: PathBuf,
}

pub fn subjects(driver: BlkDriver, fusebox_bin: &Path) -> Vec<Box<dyn Subject>> {
    [
        Server::Native,
        Server::Fusebox {
            transport: "classic",
        },
        Server::Fusebox { transport: "uring" },
        Server::Nbdkit,
        Server::QemuStorageDaemon,
    ]
    .into_iter()
    .map(|server| {
        Box::new(BlkSubject {
            server,
            driver,
            fusebox_bin: fusebox_bin.to_path_buf(),
        }) as Box<dyn Subject>
    })
    .collect()
}

fn driver_name(d: BlkDriver) -> &'static str {
    match d {
        BlkDriver::Null => "null",
        BlkDriver::Ram => "ram",
    }
}

/// Attach a loop device (direct I/O) to `file`.
fn attach(file: &Path) -> Result<LoopDevice> {
    let dev = LoopDevice::attach(
        file,
        AttachOptions {
            block_size: 512,
            read_only: false,
            direct_io: true,
        },
    )
    .with_context(|| format!("attaching a loop device to {}", file.display()))?;
    if !dev.direct_io() {
        tracing::warn!(file = %file.display(), "the loop device could not do direct I/O here");
    }
    Ok(dev)
}

/// Write the whole device once, so later reads hit stored blocks.
fn fill(device: &Path) -> Result<()> {
    let out = Command::new("fio")
        .args([
            "--name=fill",
            "--rw=write",
            "--bs=1M",
            "--iodepth=8",
            "--ioengine=libaio",
            "--direct=1",
            &format!("--size={DEVICE_SIZE}"),
        ])
        .arg(format!("--filename={}", device.display()))
        .output()
        .context("running fio")?;
    if !out.status.success() {
        bail!(
            "filling {}: {}",
            device.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

fn wait_until(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) -> Result<()> {
    let until = Instant::now() + limit;
    while !ready() {
        if Instant::now() > until {
            bail!("{what} did not come up within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

fn stop(child: &mut Child) {
    if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn detach(dev: LoopDevice) {
    let n = dev.number();
    if !matches!(dev.detach(Duration::from_secs(5)), Ok(true)) {
        tracing::warn!("loop{n} is still attached");
    }
}

impl Subject for BlkSubject {
    fn info(&self) -> SubjectInfo {
        let d = driver_name(self.driver);
        let (name, description, is_fusebox, is_peer) =
            match self.server {
                Server::Native => (
                    "native".to_string(),
                    "a loop device over a file on tmpfs: the kernel alone (the limit)".to_string(),
                    false,
                    false,
                ),
                Server::Fusebox { transport } => (
                    format!("fusebox-{transport}"),
                    format!(
                        "`fusebox blk create --driver {d} --transport {transport}`{}",
                        if transport == "classic" {
                            " (supervised: replaceable)"
                        } else {
                            ""
                        }
                    ),
                    true,
                    false,
                ),
                Server::Nbdkit => {
                    (
                        "nbdkit".to_string(),
                        format!(
                    "nbdkit's {} plugin through nbdfuse (libnbd), a loop device on its file",
                    if self.driver == BlkDriver::Ram { "memory" } else { "null" }
                ),
                        false,
                        true,
                    )
                }
                Server::QemuStorageDaemon => (
                    "qemu-storage-daemon".to_string(),
                    format!(
                        "qemu-storage-daemon's FUSE export of {}, a loop device on it",
                        if self.driver == BlkDriver::Ram {
                            "a raw image on tmpfs"
                        } else {
                            "a null-co node"
                        }
                    ),
                    false,
                    true,
                ),
            };
        SubjectInfo {
            name,
            description,
            is_fusebox,
            is_peer,
            ..Default::default()
        }
    }

    fn prepare(&mut self, _workdir: &Path) -> Result<()> {
        if !Path::new("/dev/loop-control").exists() {
            bail!("no loop device support (/dev/loop-control)");
        }
        match self.server {
            Server::Fusebox { transport: "uring" } => {
                fusebox::transport::uring::availability().map_err(anyhow::Error::msg)?;
            }
            Server::Nbdkit if which("nbdfuse").is_none() || which("nbdkit").is_none() => {
                bail!("nbdkit and nbdfuse are not installed (apt-get install nbdkit libnbd-bin)")
            }
            Server::QemuStorageDaemon if which("qemu-storage-daemon").is_none() => {
                bail!("qemu-storage-daemon is not installed (apt-get install qemu-system-common)")
            }
            _ => {}
        }
        Ok(())
    }

    fn mount(&self, backing: &Path, mnt: &Path) -> Result<Mounted> {
        let keeps_data = self.driver == BlkDriver::Ram;
        match self.server {
            Server::Native => {
                let file = backing.join("blk-native.img");
                let f = std::fs::File::create(&file)?;
                f.set_len(DEVICE_SIZE)?;
                drop(f);
                let dev = attach(&file)?;
                let path = dev.path();
                if keeps_data {
                    fill(&path)?;
                }
                Ok(Mounted::with_cleanup(&path, None, None, move || {
                    detach(dev);
                    let _ = std::fs::remove_file(&file);
                }))
            }
            Server::Fusebox { transport } => {
                let name = format!("bench-{}", transport);
                let out = Command::new(&self.fusebox_bin)
                    .args(["blk", "create", "--name", &name, "--driver"])
                    .arg(driver_name(self.driver))
                    .arg(format!("--size={DEVICE_SIZE}"))
                    .args(["--transport", transport])
                    .env("RUST_BACKTRACE", "0")
                    .output()
                    .context("running fusebox blk create")?;
                if !out.status.success() {
                    bail!(
                        "fusebox blk create: {}",
                        String::from_utf8_lossy(&out.stderr).trim()
                    );
                }
                let rec =
                    fusebox_blk::registry::get(&name).context("the device is not registered")?;
                let bin = self.fusebox_bin.clone();
                let destroy = move || {
                    let _ = Command::new(&bin)
                        .args(["blk", "destroy", &name])
                        .stdout(Stdio::null())
                        .status();
                };
                if keeps_data {
                    if let Err(e) = fill(&rec.device) {
                        destroy();
                        return Err(e);
                    }
                }
                Ok(Mounted::with_cleanup(
                    &rec.device,
                    Some(rec.pid),
                    Some(rec.mountpoint.clone()),
                    destroy,
                ))
            }
            Server::Nbdkit => {
                std::fs::create_dir_all(mnt)?;
                let plugin = if keeps_data { "memory" } else { "null" };
                let mut child = Command::new("nbdfuse")
                    .arg(mnt)
                    .args(["--command", "nbdkit", "-s", plugin])
                    .arg(DEVICE_SIZE.to_string())
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .context("starting nbdfuse")?;
                let file = mnt.join("nbd");
                if let Err(e) = wait_until("nbdfuse", Duration::from_secs(20), || {
                    std::fs::metadata(&file).is_ok_and(|m| m.len() == DEVICE_SIZE)
                }) {
                    stop(&mut child);
                    return Err(e);
                }
                let pid = child.id();
                let mnt = mnt.to_path_buf();
                let finish = move |dev: Option<LoopDevice>, mut child: Child| {
                    if let Some(d) = dev {
                        detach(d);
                    }
                    let _ = fusebox::mount::unmount_path(&mnt, false);
                    stop(&mut child);
                };
                let dev = match attach(&file) {
                    Ok(d) => d,
                    Err(e) => {
                        finish(None, child);
                        return Err(e);
                    }
                };
                let path = dev.path();
                let mut cleanup = Some((dev, child));
                let mut done = move || {
                    if let Some((d, c)) = cleanup.take() {
                        finish(Some(d), c)
                    }
                };
                if keeps_data {
                    if let Err(e) = fill(&path) {
                        done();
                        return Err(e);
                    }
                }
                Ok(Mounted::with_cleanup(&path, Some(pid), None, done))
            }
            Server::QemuStorageDaemon => {
                let export = mnt.with_extension("img");
                std::fs::File::create(&export)?;
                let image = backing.join("blk-qsd.img");
                let node = if keeps_data {
                    let f = std::fs::File::create(&image)?;
                    f.set_len(DEVICE_SIZE)?;
                    vec![
                        format!("driver=file,node-name=f0,filename={}", image.display()),
                        "driver=raw,node-name=n0,file=f0".to_string(),
                    ]
                } else {
                    vec![format!(
                        "driver=null-co,node-name=n0,size={DEVICE_SIZE},read-zeroes=on"
                    )]
                };
                let mut cmd = Command::new("qemu-storage-daemon");
                for n in &node {
                    cmd.args(["--blockdev", n]);
                }
                let mut child = cmd
                    .args(["--export"])
                    .arg(format!(
                        "type=fuse,id=e0,node-name=n0,mountpoint={},writable=on",
                        export.display()
                    ))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .context("starting qemu-storage-daemon")?;
                if let Err(e) = wait_until("qemu-storage-daemon", Duration::from_secs(20), || {
                    std::fs::metadata(&export).is_ok_and(|m| m.len() == DEVICE_SIZE)
                }) {
                    stop(&mut child);
                    return Err(e);
                }
                let pid = child.id();
                let dev = match attach(&export) {
                    Ok(d) => d,
                    Err(e) => {
                        stop(&mut child);
                        return Err(e);
                    }
                };
                let path = dev.path();
                let mut held = Some((dev, child));
                let mut done = move || {
                    if let Some((d, mut c)) = held.take() {
                        detach(d);
                        // It unmounts its export as it exits.
                        stop(&mut c);
                        let _ = std::fs::remove_file(&export);
                        let _ = std::fs::remove_file(&image);
                    }
                };
                if keeps_data {
                    if let Err(e) = fill(&path) {
                        done();
                        return Err(e);
                    }
                }
                Ok(Mounted::with_cleanup(&path, Some(pid), None, done))
            }
        }
    }
}
