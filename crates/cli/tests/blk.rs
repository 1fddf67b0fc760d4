//! Block devices end to end: `fusebox blk create` gives a /dev/loopN
//! served by a user-space driver; real filesystems go on it, and it keeps
//! its data across replacements and crashes of the driver process.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

mod common;
use common::BIN;

fn fusebox(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("running fusebox")
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("spawning");
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// A unique device name per test (tests run in parallel).
fn name(tag: &str) -> String {
    format!("t{}-{tag}", std::process::id())
}

/// A device that is destroyed when dropped, with whatever was mounted on
/// it unmounted first, even if the test panicked.
struct Device {
    name: String,
    path: PathBuf,
    mounts: Vec<PathBuf>,
}

impl Device {
    fn create(name: &str, args: &[&str]) -> Device {
        let mut a = vec!["blk", "create", "--name", name];
        a.extend_from_slice(args);
        // Daemon logs for a failure to be explained: FUSEBOX_TEST_DAEMON_LOGS=DIR.
        let log = std::env::var("FUSEBOX_TEST_DAEMON_LOGS")
            .map(|d| format!("{d}/blk-{name}.log"))
            .ok();
        if let Some(log) = &log {
            a.extend(["--log-file", log.as_str(), "-v"]);
        }
        let dev = ok(&fusebox(&a));
        assert!(dev.starts_with("/dev/loop"), "{dev}");
        Device {
            name: name.to_string(),
            path: PathBuf::from(dev),
            mounts: Vec::new(),
        }
    }

    fn record(&self) -> fusebox_blk::registry::Record {
        fusebox_blk::registry::get(&self.name).expect("registered")
    }

    fn mkfs_and_mount(&mut self, at: &Path) {
        run(Command::new("mkfs.ext4").args(["-q", "-F"]).arg(&self.path));
        self.mount(at);
    }

    fn mount(&mut self, at: &Path) {
        std::fs::create_dir_all(at).unwrap();
        run(Command::new("mount").arg(&self.path).arg(at));
        self.mounts.push(at.to_path_buf());
    }

    fn umount(&mut self, at: &Path) {
        run(Command::new("umount").arg(at));
        self.mounts.retain(|m| m != at);
    }

    fn fsck_clean(&self) {
        let out = Command::new("fsck.ext4")
            .args(["-f", "-n"])
            .arg(&self.path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "fsck found problems:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn destroy(mut self) {
        for m in std::mem::take(&mut self.mounts) {
            let _ = Command::new("umount").arg(&m).status();
        }
        ok(&fusebox(&["blk", "destroy", &self.name]));
        self.name.clear();
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        if self.name.is_empty() {
            return;
        }
        for m in self.mounts.drain(..) {
            let _ = Command::new("umount").arg("-l").arg(&m).status();
        }
        if !fusebox(&["blk", "destroy", &self.name]).status.success() {
            // Last resort: kill the daemon; its leftovers are cleaned up
            // as a dead device's.
            if let Some(r) = fusebox_blk::registry::get(&self.name) {
                if let Some(pid) = rustix::process::Pid::from_raw(r.pid as i32) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
                std::thread::sleep(Duration::from_millis(200));
                fusebox_blk::device::teardown_dead(&r);
            }
        }
    }
}

fn scratch(tag: &str) -> tempfile::TempDir {
    common::scratch(&format!("blk-{tag}"))
}

/// Run `f` on its own thread; fail if it takes longer than `limit`.
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).expect("the workload hung")
}

/// sha256 of every file under `dir`, by relative path, sorted.
fn checksums(dir: &Path) -> String {
    run(Command::new("sh").current_dir(dir).args([
        "-c",
        "find . -type f -print0 | sort -z | xargs -0 sha256sum",
    ]))
}

/// A source tree to untar: /usr/include (libfuse3-dev and the C library
/// put thousands of headers there).
fn source_tarball(dir: &Path) -> PathBuf {
    let tar = dir.join("src.tar");
    run(Command::new("tar")
        .arg("-cf")
        .arg(&tar)
        .args(["-C", "/usr", "include"]));
    tar
}

/// fsx-style random I/O: random writes, reads, truncates, hole punches
/// and fsyncs on one file, every read checked against a model of what
/// the file must hold.
fn fsx(path: &Path, ops: usize, seed: u64) {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap();
    let mut model: Vec<u8> = Vec::new();
    let mut rng = seed | 1;
    let mut next = move |n: u64| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng % n
    };
    const MAX: u64 = 4 << 20;
    for op in 0..ops {
        match next(10) {
            0..=3 => {
                let off = next(MAX);
                let len = 1 + next(64 << 10);
                let fill: Vec<u8> = (0..len).map(|i| (op as u64 * 31 + i) as u8).collect();
                f.write_all_at(&fill, off).unwrap();
                let end = (off + len) as usize;
                if model.len() < end {
                    model.resize(end, 0);
                }
                model[off as usize..end].copy_from_slice(&fill);
            }
            4..=6 => {
                let off = next(MAX);
                let len = 1 + next(64 << 10);
                let mut buf = vec![0u8; len as usize];
                let n = f.read_at(&mut buf, off).unwrap();
                let want = model
                    .get(off as usize..)
                    .map_or(&[][..], |s| &s[..s.len().min(len as usize)]);
                assert_eq!(n, want.len(), "op {op}: read of {len} at {off}");
                assert!(
                    buf[..n] == *want,
                    "op {op}: data read at {off} differs from what was written"
                );
            }
            7 => {
                let size = next(MAX);
                f.set_len(size).unwrap();
                model.resize(size as usize, 0);
            }
            8 => {
                let off = next(MAX);
                let len = 1 + next(256 << 10);
                let r = rustix::fs::fallocate(
                    &f,
                    rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
                    off,
                    len,
                );
                r.unwrap();
                let end = ((off + len) as usize).min(model.len());
                if (off as usize) < end {
                    model[off as usize..end].fill(0);
                }
            }
            _ => f.sync_all().unwrap(),
        }
    }
    let mut all = Vec::new();
    f.seek(SeekFrom::Start(0)).unwrap();
    f.read_to_end(&mut all).unwrap();
    assert!(
        all == model,
        "the whole file differs from the model at the end"
    );
}

/// mkfs.ext4, untar a source tree on the device and natively and compare,
/// copy/rename/remove trees on both, fsx-style random I/O, unmount, fsck
/// clean, mount again (everything read from the driver) and compare.
fn real_workload(dev: &mut Device, dir: &Path) {
    let mnt = dir.join("mnt");
    dev.mkfs_and_mount(&mnt);
    // Untar a source tree on the device and natively; the same bytes.
    let tar = source_tarball(dir);
    let native = dir.join("native");
    std::fs::create_dir(&native).unwrap();
    run(Command::new("tar")
        .arg("-xf")
        .arg(&tar)
        .arg("-C")
        .arg(&native));
    run(Command::new("tar").arg("-xf").arg(&tar).arg("-C").arg(&mnt));
    run(&mut Command::new("sync"));
    assert_eq!(
        checksums(&mnt.join("include")),
        checksums(&native.join("include"))
    );
    // Rename, copy and remove a tree on both sides.
    for d in [&mnt, &native] {
        run(Command::new("sh").current_dir(d).args([
            "-c",
            "cp -a include inc2 && mv inc2/linux inc2/linux2 && rm -r inc2/x86_64-linux-gnu && mkdir -p deep/a/b && mv inc2 deep/a/b/",
        ]));
    }
    assert_eq!(checksums(&mnt), checksums(&native));
    fsx(&mnt.join("fsx.bin"), 3000, 0x5eed);
    dev.umount(&mnt);
    dev.fsck_clean();
    // Mounted again (a fresh page cache: everything comes from the driver).
    dev.mount(&mnt);
    assert_eq!(
        checksums(&mnt.join("deep")),
        checksums(&native.join("deep"))
    );
    dev.umount(&mnt);
}

/// blkdiscard (FALLOCATE punch-hole) and blkdiscard -z (zero-range) on
/// the raw device: the range reads back as zeros and the driver saw them.
fn discard_and_zeroout_reach_the_driver(dev: &Device) {
    let before = common::snapshot(&dev.record().mountpoint);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&dev.path)
        .unwrap();
    let ones = vec![0xffu8; 2 << 20];
    f.write_all_at(&ones, 0).unwrap();
    f.sync_all().unwrap();
    run(Command::new("blkdiscard")
        .args(["-o", "0", "-l", "1048576"])
        .arg(&dev.path));
    run(Command::new("blkdiscard")
        .args(["-z", "-o", "1048576", "-l", "1048576"])
        .arg(&dev.path));
    let mut back = vec![1u8; 2 << 20];
    let direct = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
        .open(&dev.path)
        .unwrap();
    // O_DIRECT wants an aligned buffer: read into the aligned part of a
    // larger one.
    let mut big = vec![1u8; (2 << 20) + 4096];
    let skip = big.as_ptr().align_offset(4096);
    direct
        .read_exact_at(&mut big[skip..skip + (2 << 20)], 0)
        .unwrap();
    back.copy_from_slice(&big[skip..skip + (2 << 20)]);
    assert!(
        back.iter().all(|&b| b == 0),
        "discarded or zeroed blocks read back non-zero"
    );
    let after = common::snapshot(&dev.record().mountpoint);
    let fallocates = |s: &fusebox::stats::Snapshot| {
        s.ops
            .iter()
            .find(|o| o.name == "FALLOCATE")
            .map_or(0, |o| o.count)
    };
    assert!(
        fallocates(&after) >= fallocates(&before) + 2,
        "no FALLOCATE reached the driver"
    );
}

#[test]
fn ext4_on_a_ram_device_takes_a_real_workload_and_fscks_clean() {
    let dir = scratch("ram");
    let mut dev = Device::create(&name("ram"), &["--driver", "ram", "--size", "1G"]);
    assert!(
        dev.record().direct_io,
        "the loop device should do direct I/O on the file"
    );
    let link = fusebox_blk::registry::link_for(&dev.name);
    assert_eq!(std::fs::canonicalize(&link).unwrap(), dev.path);
    real_workload(&mut dev, dir.path());
    discard_and_zeroout_reach_the_driver(&dev);
    let stats = ok(&fusebox(&["stats", &dev.path.to_string_lossy()]));
    assert!(stats.contains("WRITE") && stats.contains("READ"), "{stats}");
    let rec = dev.record();
    dev.destroy();
    // Its own loop device, not whichever is /dev/loop0: detached (or
    // serving something else by now).
    assert!(
        fusebox_blk::loopdev::backing_file(rec.loop_number)
            .is_none_or(|b| !b.starts_with(&rec.mountpoint)),
        "loop{} still serves the destroyed device",
        rec.loop_number
    );
    assert!(!common::is_mounted(&rec.mountpoint));
    assert!(!link.exists(), "{} left behind", link.display());
}

/// A `file` device of 4 KiB blocks over `image` (`size`: make it so big).
fn file_device(name: &str, image: &Path, size: Option<&str>) -> Device {
    let mut args = vec!["--driver", "file", "--block-size", "4096", "--path"];
    args.push(image.to_str().unwrap());
    if let Some(s) = size {
        args.extend(["--size", s]);
    }
    Device::create(name, &args)
}

#[test]
fn a_file_device_keeps_its_data_when_destroyed_and_created_again() {
    let dir = scratch("file");
    let image = dir.path().join("disk.img");
    let n = name("file");
    let mnt = dir.path().join("mnt");
    let mut dev = file_device(&n, &image, Some("1G"));
    real_workload(&mut dev, dir.path());
    dev.mount(&mnt);
    run(Command::new("sh").current_dir(&mnt).args([
        "-c",
        "mkdir -p a/b && head -c 5000000 /dev/urandom > a/b/blob && seq 1 100000 > a/numbers && ln -s b/blob a/link",
    ]));
    let before = checksums(&mnt);
    dev.umount(&mnt);
    dev.fsck_clean();
    dev.destroy();
    assert_eq!(std::fs::metadata(&image).unwrap().len(), 1 << 30);
    // The same file again, its size taken from the file.
    let mut dev = file_device(&n, &image, None);
    assert_eq!(dev.record().size, 1 << 30);
    assert_eq!(dev.record().logical_block_size, 4096);
    dev.mount(&mnt);
    assert_eq!(checksums(&mnt), before);
    assert_eq!(
        std::fs::read_link(mnt.join("a/link")).unwrap(),
        Path::new("b/blob")
    );
    dev.umount(&mnt);
    dev.fsck_clean();
    dev.destroy();
}

/// fio's crc32c verify on the raw device, run after run until `stop`.
fn fio_verify_loop(
    device: PathBuf,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<(u32, String)> {
    std::thread::spawn(move || {
        let mut runs = 0;
        while !stop.load(Ordering::Acquire) {
            let out = Command::new("fio")
                .args([
                    "--name=verify",
                    "--rw=randwrite",
                    "--bs=4k",
                    "--size=64M",
                    "--iodepth=16",
                    "--ioengine=libaio",
                    "--direct=1",
                    "--verify=crc32c",
                    "--verify_state_save=0",
                    "--do_verify=1",
                    "--verify_fatal=1",
                    &format!("--randseed={runs}"),
                ])
                .arg(format!("--filename={}", device.display()))
                .output()
                .expect("fio (scripts/setup.sh installs it)");
            let report = String::from_utf8_lossy(&out.stdout).to_string();
            if !out.status.success() || !report.contains("err= 0") {
                return (
                    runs,
                    format!("{report}\n{}", String::from_utf8_lossy(&out.stderr)),
                );
            }
            runs += 1;
        }
        (runs, String::new())
    })
}

#[test]
fn fio_verify_passes_while_the_driver_is_replaced_and_killed() {
    fio_verify_through_replacements("fio", &[]);
}

/// The same over io_uring: the supervisor holds the rings.
#[test]
fn fio_verify_passes_while_the_driver_is_replaced_and_killed_over_io_uring() {
    if std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring")
        .map_or(true, |v| v.trim() != "Y")
    {
        fusebox_test_support::skipped(None, "enable_uring is off");
        return;
    }
    fio_verify_through_replacements("fio-uring", &["--transport", "uring"]);
}

/// `tag` names the device: the two variants run side by side in one process.
fn fio_verify_through_replacements(tag: &str, extra: &[&str]) {
    let args: Vec<&str> = [
        "--driver",
        "ram",
        "--size",
        "256M",
        "--max-restarts",
        "1000",
    ]
    .iter()
    .chain(extra)
    .copied()
    .collect();
    let dev = Device::create(&name(tag), &args);
    let stop = Arc::new(AtomicBool::new(false));
    let fio = fio_verify_loop(dev.path.clone(), stop.clone());
    let (mut kills, mut upgrades) = (0, 0);
    let until = Instant::now() + Duration::from_secs(12);
    while Instant::now() < until && !fio.is_finished() {
        std::thread::sleep(Duration::from_millis(400));
        if (kills + upgrades) % 2 == 0 {
            ok(&fusebox(&["blk", "replace", &dev.name]));
            upgrades += 1;
        } else {
            ok(&fusebox(&["blk", "replace", "--kill", &dev.name]));
            kills += 1;
        }
    }
    stop.store(true, Ordering::Release);
    let (runs, failure) = within(Duration::from_secs(120), move || fio.join().unwrap());
    assert!(failure.is_empty(), "fio failed after {runs} clean runs, across {kills} kills and {upgrades} replacements:\n{failure}");
    assert!(
        runs >= 1 && kills >= 3 && upgrades >= 3,
        "{runs} runs, {kills} kills, {upgrades} replacements"
    );
    let snap = common::snapshot(&dev.record().mountpoint);
    if extra.contains(&"uring") {
        assert!(snap.transport.starts_with("uring"), "{}", snap.transport);
    }
    let rec = snap.recovery.expect("supervised");
    assert!(rec.restarts >= kills as u64, "{rec:?}");
    dev.destroy();
}

#[test]
fn bad_sizes_and_options_are_refused_before_anything_is_made() {
    for (args, says) in [
        (
            &["--driver", "ram", "--size", "1000"][..],
            "not a positive multiple of the block size",
        ),
        (
            &["--driver", "ram", "--size", "1M", "--block-size", "1000"][..],
            "power of two",
        ),
        (&["--driver", "ram"][..], "--size is needed"),
        (&["--driver", "file", "--size", "1M"][..], "needs --path"),
        (
            &["--driver", "timing", "--size", "1M", "--profile", "floppy"][..],
            "unknown --profile",
        ),
        (
            &["--driver", "file", "--path", "/nonexistent/dir/img"][..],
            "/nonexistent/dir/img: no such file",
        ),
    ] {
        let n = name("bad");
        let mut a = vec!["blk", "create", "--name", n.as_str()];
        a.extend_from_slice(args);
        let out = fusebox(&a);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(says),
            "{args:?}: {err}"
        );
        assert!(
            fusebox_blk::registry::get(&n).is_none(),
            "{args:?} left a record"
        );
        assert!(!fusebox_blk::registry::mountpoint_for(&n)
            .join("disk")
            .exists());
    }
    let out = fusebox(&["blk", "destroy", "no-such-device"]);
    assert!(
        !out.status.success()
            && String::from_utf8_lossy(&out.stderr).contains("no fusebox block device")
    );
}

#[test]
fn a_missing_loop_driver_is_said_clearly() {
    // A private mount namespace whose /dev is empty: no /dev/loop-control.
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "mount -t tmpfs none /dev && RUST_BACKTRACE=0 {BIN} blk create --driver ram --size 1M --name {}",
            name("noloop")
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("/dev/loop-control"),
        "{err}"
    );
}

#[test]
fn destroy_refuses_a_mounted_device_and_a_dead_daemon_is_cleaned_up() {
    let dir = scratch("dead");
    let mnt = dir.path().join("mnt");
    let mut dev = Device::create(&name("dead"), &["--driver", "ram", "--size", "64M"]);
    dev.mkfs_and_mount(&mnt);
    let out = fusebox(&["blk", "destroy", &dev.name]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("in use"));
    assert!(dev.record().alive());
    dev.umount(&mnt);
    // The daemon (supervisor) dies: the loop device goes with its last
    // user, the rest is cleaned up by destroy.
    let r = dev.record();
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(r.pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while r.alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let listed = ok(&fusebox(&["blk", "list"]));
    assert!(listed.contains("dead"), "{listed}");
    let out = ok(&fusebox(&["blk", "destroy", &dev.name]));
    assert!(out.contains("cleaned up"), "{out}");
    dev.name.clear();
    assert!(!common::is_mounted(&r.mountpoint));
    assert!(fusebox_blk::loopdev::backing_file(r.loop_number)
        .is_none_or(|b| !b.starts_with(&r.mountpoint)));
    assert!(fusebox_blk::registry::get(&r.name).is_none());
}

/// The writer in a memory cgroup far smaller than what it writes: its
/// dirty pages can only be freed by writing them back through this very
/// device, whose daemon must keep serving meanwhile.
#[test]
fn writeback_under_memory_pressure_completes() {
    let cg_root = Path::new("/sys/fs/cgroup/memory");
    if !cg_root.join("memory.limit_in_bytes").exists() {
        // cgroup v2 only machines: the v2 interface instead.
        assert!(
            Path::new("/sys/fs/cgroup/cgroup.controllers").exists(),
            "no memory cgroup interface"
        );
    }
    let dir = scratch("pressure");
    let mnt = dir.path().join("mnt");
    let mut dev = Device::create(&name("press"), &["--driver", "ram", "--size", "1G"]);
    dev.mkfs_and_mount(&mnt);
    let cg = Cgroup::new(&format!("fusebox-test-{}", std::process::id()), 48 << 20);
    let file = mnt.join("big");
    let script = format!(
        "echo $$ > {} && dd if=/dev/zero of={} bs=1M count=400 conv=fsync status=none && sha256sum {}",
        cg.tasks().display(),
        file.display(),
        file.display()
    );
    let out = within(Duration::from_secs(300), move || {
        Command::new("sh").args(["-c", &script]).output().unwrap()
    });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let zeros = run(Command::new("sh").args(["-c", "head -c 419430400 /dev/zero | sha256sum"]));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next(),
        zeros.split_whitespace().next()
    );
    drop(cg);
    dev.umount(&mnt);
    dev.fsck_clean();
    dev.destroy();
}

/// A memory cgroup (v1 or v2), removed on drop.
struct Cgroup {
    dir: PathBuf,
    v2: bool,
}

impl Cgroup {
    fn new(name: &str, limit: u64) -> Cgroup {
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let (dir, v2) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(name), false)
        } else {
            (Path::new("/sys/fs/cgroup").join(name), true)
        };
        std::fs::create_dir(&dir).unwrap();
        let file = if v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        std::fs::write(dir.join(file), limit.to_string()).unwrap();
        Cgroup { dir, v2 }
    }

    fn tasks(&self) -> PathBuf {
        self.dir
            .join(if self.v2 { "cgroup.procs" } else { "tasks" })
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // Its processes have exited; the directory goes once they are reaped.
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn a_read_only_file_device_refuses_writes() {
    let dir = scratch("ro");
    let image = dir.path().join("ro.img");
    let mut f = std::fs::File::create(&image).unwrap();
    f.write_all(&vec![7u8; 1 << 20]).unwrap();
    drop(f);
    let dev = Device::create(
        &name("ro"),
        &[
            "--driver",
            "file",
            "--path",
            image.to_str().unwrap(),
            "--read-only",
        ],
    );
    assert!(dev.record().read_only);
    let mut buf = vec![0u8; 4096];
    std::fs::File::open(&dev.path)
        .unwrap()
        .read_exact_at(&mut buf, 8192)
        .unwrap();
    assert!(buf.iter().all(|&b| b == 7));
    // The kernel may let the device be opened for writing; no write lands.
    let written = std::fs::OpenOptions::new()
        .write(true)
        .open(&dev.path)
        .and_then(|f| f.write_all_at(&[1u8; 4096], 0).and_then(|()| f.sync_all()));
    assert!(written.is_err(), "a write to a read-only device succeeded");
    std::fs::File::open(&dev.path)
        .unwrap()
        .read_exact_at(&mut buf, 0)
        .unwrap();
    assert!(buf.iter().all(|&b| b == 7));
    assert!(std::fs::read(&image).unwrap().iter().all(|&b| b == 7));
    dev.destroy();
}
