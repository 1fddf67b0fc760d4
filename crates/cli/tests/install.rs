//! Installing fusebox and mounting it like any filesystem (issue 19): the
//! generated man pages and completions match the command line, `cargo
//! install` works, and the Debian package installs, mounts through fstab
//! with mount(8), serves reads and writes, unmounts with umount(8) and
//! purges cleanly. Needs root (dpkg, mount) and cargo-deb
//! (`scripts/setup.sh --pjdfstest` installs it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fusebox");
/// What the mount helpers are called by mount(8), one per filesystem.
const HELPER_PREFIX: &str = "mount.fuse.fusebox-";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/cli is two levels down")
        .to_path_buf()
}

fn run(cmd: &mut Command) -> Output {
    let shown = format!("{cmd:?}");
    let out = cmd
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap_or_else(|e| panic!("{shown}: {e}"));
    out
}

fn ok(cmd: &mut Command) -> String {
    let shown = format!("{cmd:?}");
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{shown} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn sh(script: &str) -> String {
    ok(Command::new("sh").arg("-ec").arg(script))
}

fn mounted_at(dir: &Path) -> Option<String> {
    let dir = dir.to_str().unwrap();
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(dir))
        .map(str::to_string)
}

#[test]
fn generated_man_pages_and_completions_match_the_command_line() {
    let packaged = workspace().join("packaging");
    let fresh = tempfile::tempdir().unwrap();
    for (shell, file) in [
        ("bash", "fusebox.bash"),
        ("zsh", "_fusebox"),
        ("fish", "fusebox.fish"),
    ] {
        let now = ok(Command::new(BIN).args(["completions", shell]));
        let kept = std::fs::read_to_string(packaged.join("completions").join(file)).unwrap();
        assert!(
            now == kept,
            "packaging/completions/{file} is stale: regenerate with `fusebox completions {shell} > packaging/completions/{file}`"
        );
    }
    ok(Command::new(BIN).arg("man").arg(fresh.path()));
    let names = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    let man = packaged.join("man");
    assert_eq!(
        names(fresh.path()),
        names(&man),
        "packaging/man is stale: regenerate with `fusebox man packaging/man`"
    );
    for page in names(&man) {
        assert!(
            std::fs::read(fresh.path().join(&page)).unwrap()
                == std::fs::read(man.join(&page)).unwrap(),
            "packaging/man/{page} is stale: regenerate with `fusebox man packaging/man`"
        );
    }
    assert!(names(&man).contains(&"fusebox-mount.1".to_string()));

    // One mount helper link per filesystem the binary knows: ask the
    // helper itself (called by that name, it lists them on bad input).
    let dir = tempfile::tempdir().unwrap();
    let generic = dir.path().join("mount.fusebox");
    std::os::unix::fs::symlink(BIN, &generic).unwrap();
    let out = run(Command::new(&generic).args(["nosuchfs", dir.path().to_str().unwrap()]));
    let err = String::from_utf8_lossy(&out.stderr);
    let list = err
        .split("fusebox has ")
        .nth(1)
        .unwrap_or_else(|| panic!("no filesystem list in {err:?}"))
        .trim()
        .trim_end_matches(')');
    let mut known: Vec<String> = list
        .split(", ")
        .map(|n| format!("{HELPER_PREFIX}{n}"))
        .collect();
    known.push("mount.fusebox".into());
    known.sort();
    let sbin = packaged.join("sbin");
    assert_eq!(
        names(&sbin),
        known,
        "packaging/sbin: one helper link per filesystem"
    );
    for link in names(&sbin) {
        assert_eq!(
            std::fs::read_link(sbin.join(&link)).unwrap(),
            Path::new("../bin/fusebox"),
            "{link}"
        );
    }
}

#[test]
fn version_names_the_commit() {
    let version = ok(Command::new(BIN).arg("--version"));
    let head = run(Command::new("git").arg("-C").arg(workspace()).args([
        "rev-parse",
        "--short=12",
        "HEAD",
    ]));
    let head = String::from_utf8_lossy(&head.stdout).trim().to_string();
    assert!(!head.is_empty(), "not a git checkout");
    assert_eq!(
        version.trim(),
        format!("fusebox {} (commit {head})", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn cargo_install_builds_the_command() {
    let root = tempfile::tempdir().unwrap();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    ok(Command::new(cargo)
        .current_dir(workspace())
        .args([
            "install",
            "--locked",
            "--quiet",
            "--path",
            "crates/cli",
            "--root",
        ])
        .arg(root.path()));
    let installed = root.path().join("bin/fusebox");
    let help = ok(Command::new(&installed).arg("--help"));
    assert!(help.contains("Usage: fusebox"), "{help}");
    assert!(help.contains("doctor"), "{help}");
}

/// Leaves the machine as it found it: whatever is mounted at the test's
/// mount points is unmounted, the package purged, even if the test fails.
struct Installed {
    mountpoints: Vec<PathBuf>,
}

impl Drop for Installed {
    fn drop(&mut self) {
        for m in &self.mountpoints {
            if mounted_at(m).is_some() {
                let _ = Command::new("umount").arg(m).status();
            }
            if mounted_at(m).is_some() {
                let _ = Command::new("umount").arg("-l").arg(m).status();
            }
        }
        let _ = Command::new("dpkg")
            .args(["--purge", "fusebox"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .output();
    }
}

fn package_installed() -> bool {
    run(Command::new("dpkg-query").args(["-W", "-f", "${Status}", "fusebox"]))
        .stdout
        .starts_with(b"install ok installed")
}

/// mount(8) with `args` must fail with one line, nothing mounted at `dir`.
fn refused(args: &[&str], dir: &Path, expect: &str) {
    let out = run(Command::new("mount").args(args));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "mount {args:?} succeeded");
    assert_eq!(
        err.trim().lines().count(),
        1,
        "mount {args:?}: not one line: {err:?}"
    );
    assert!(
        err.contains(expect),
        "mount {args:?}: {err:?} does not say {expect:?}"
    );
    assert_eq!(mounted_at(dir), None, "mount {args:?} left a mount");
}

/// Unmounts `0` if a test fails with something mounted there.
struct UnmountOnDrop(PathBuf);

impl Drop for UnmountOnDrop {
    fn drop(&mut self) {
        if mounted_at(&self.0).is_some() {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

#[test]
fn bad_mount_input_is_one_line_and_mounts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let _guard = UnmountOnDrop(dir.path().to_path_buf());
    for (args, expect) in [
        (vec!["mount", "nosuchfs", d], "invalid value 'nosuchfs'"),
        (vec!["mount", "stackfs", "/no/such/dir", d], "/no/such/dir"),
        // blksize: an option this kernel has for fuseblk mounts only.
        (vec!["mount", "memfs", d, "-o", "blksize=4096"], "refused"),
        (vec!["mount", "memfs", d, "-o", "frobnicate"], "frobnicate"),
    ] {
        let out = run(Command::new(BIN).args(&args));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "fusebox {args:?} succeeded");
        assert_eq!(
            err.trim().lines().count(),
            1,
            "fusebox {args:?}: not one line: {err:?}"
        );
        assert!(
            err.starts_with("fusebox: ") && err.contains(expect),
            "fusebox {args:?}: {err:?}"
        );
        assert_eq!(
            mounted_at(dir.path()),
            None,
            "fusebox {args:?} left a mount"
        );
    }
}

#[test]
fn the_debian_package_mounts_through_fstab_and_purges_cleanly() {
    assert!(
        !package_installed(),
        "a fusebox package is installed already; this test installs and purges its own: remove it first (dpkg --purge fusebox)"
    );
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let src = w.join("src");
    let (stack, mem, native) = (w.join("stack"), w.join("mem"), w.join("native"));
    for d in [&src, &stack, &mem, &native] {
        std::fs::create_dir(d).unwrap();
    }
    let mut guard = Installed {
        mountpoints: vec![stack.clone(), mem.clone()],
    };

    // Build the package the way users do, then install it.
    let deb = ok(Command::new(workspace().join("scripts/package.sh")).arg(w.join("deb")));
    let deb = PathBuf::from(deb.trim().lines().last().unwrap_or_default());
    assert!(deb.is_file(), "scripts/package.sh printed {deb:?}");
    ok(Command::new("dpkg")
        .arg("-i")
        .arg(&deb)
        .env("DEBIAN_FRONTEND", "noninteractive"));
    assert!(package_installed());
    for f in [
        "/usr/bin/fusebox",
        "/usr/lib/fusebox/libfuse3.so.3",
        "/usr/lib/fusebox/libfusebox_direct_preload.so",
        "/usr/share/man/man1/fusebox-mount.1.gz",
        "/usr/share/man/man8/mount.fusebox.8.gz",
        "/usr/share/bash-completion/completions/fusebox",
        "/usr/share/doc/fusebox/examples/fusebox-data.mount",
    ] {
        assert!(Path::new(f).is_file(), "{f} not installed");
    }
    assert_eq!(
        std::fs::read_link("/usr/sbin/mount.fuse.fusebox-stackfs").unwrap(),
        Path::new("../bin/fusebox")
    );
    // Debian's libfuse3 stays what the loader finds.
    let ldconfig = ok(Command::new("ldconfig").arg("-p"));
    assert!(
        !ldconfig.contains("/usr/lib/fusebox"),
        "the drop-in is in the loader's path"
    );
    let version = ok(Command::new("/usr/bin/fusebox").arg("--version"));
    assert!(
        version.starts_with("fusebox ") && version.contains("commit"),
        "{version}"
    );
    let doctor = ok(Command::new("/usr/bin/fusebox").args(["doctor", "--no-probe"]));
    assert!(
        doctor.contains("/usr/lib/fusebox/libfuse3.so.3"),
        "{doctor}"
    );

    // A scratch fstab: stackfs mounted by `mount -a`, memfs only when asked
    // (noauto), with the options people write in fstab.
    let fstab = w.join("fstab");
    std::fs::write(
        &fstab,
        format!(
            "# fusebox test fstab\n\
             {src} {stack} fuse.fusebox-stackfs allow_other,default_permissions,relatime,noatime,transport=auto,_netdev,nofail 0 0\n\
             memfs {mem} fusebox noauto,x-systemd.automount,allow_other,uid=1000,gid=1000 0 0\n",
            src = src.display(),
            stack = stack.display(),
            mem = mem.display()
        ),
    )
    .unwrap();
    let fstab_arg = fstab.to_str().unwrap();
    ok(Command::new("mount").args(["-a", "-T", fstab_arg]));
    let line = mounted_at(&stack).expect("mount -a did not mount the stackfs line");
    assert!(line.contains(" fuse.fusebox-stackfs "), "{line}");
    assert!(line.contains("allow_other"), "{line}");
    assert_eq!(
        mounted_at(&mem),
        None,
        "a noauto line was mounted by mount -a"
    );
    ok(Command::new("mount").args(["-T", fstab_arg]).arg(&mem));
    let line = mounted_at(&mem).expect("mount -T FSTAB DIR did not mount the memfs line");
    assert!(
        line.contains(" fuse.fusebox-memfs ") && line.contains("user_id=1000"),
        "{line}"
    );
    // Again: both lines are mounted already, so nothing is stacked on top.
    ok(Command::new("mount").args(["-a", "-T", fstab_arg]));
    let count = |d: &Path| {
        std::fs::read_to_string("/proc/self/mounts")
            .unwrap()
            .lines()
            .filter(|l| l.split_whitespace().nth(1) == d.to_str())
            .count()
    };
    assert_eq!((count(&stack), count(&mem)), (1, 1));

    // Reads and writes through both, compared with the same on a native
    // directory.
    let tree = "/usr/share/doc/fuse3";
    let workload = |dir: &Path| {
        sh(&format!(
            "cd {d}; cp -r {tree} tree; echo hello > note; mkdir -p a/b; \
             seq 1 20000 > a/b/numbers; mv note a/renamed; \
             ln -s a/renamed link; cat link; rm -r tree/changelog.Debian.gz 2>/dev/null || true; \
             find . | LC_ALL=C sort; find . -type f | LC_ALL=C sort | xargs md5sum",
            d = dir.display()
        ))
    };
    let want = workload(&native);
    assert_eq!(
        workload(&stack),
        want,
        "stackfs through fstab differs from native"
    );
    assert_eq!(
        workload(&mem),
        want,
        "memfs through fstab differs from native"
    );
    // stackfs wrote into its source.
    assert_eq!(
        std::fs::read_to_string(src.join("a/renamed")).unwrap(),
        "hello\n"
    );
    let stats = ok(Command::new("/usr/bin/fusebox").arg("stats").arg(&stack));
    assert!(
        stats.contains("LOOKUP") || stats.contains("CREATE"),
        "{stats}"
    );

    // Bad input: one line each, nothing mounted.
    let s = stack.to_str().unwrap();
    ok(Command::new("umount").arg(&stack));
    assert_eq!(mounted_at(&stack), None, "umount left the stackfs mount");
    refused(
        &["-t", "fusebox", "nosuchfs:/x", s],
        &stack,
        "unknown filesystem",
    );
    refused(
        &["-t", "fuse.fusebox-stackfs", "/no/such/dir", s],
        &stack,
        "/no/such/dir",
    );
    refused(
        &["-t", "fusebox", "memfs", s, "-o", "frobnicate"],
        &stack,
        "frobnicate",
    );
    // blksize is an option this kernel has for fuseblk only.
    refused(
        &["-t", "fusebox", "memfs", s, "-o", "blksize=4096"],
        &stack,
        "refused",
    );

    ok(Command::new("umount").arg(&mem));
    assert_eq!(mounted_at(&mem), None, "umount left the memfs mount");
    // The daemons end with their mounts.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let ps = sh("ps -eo args");
        let left: Vec<&str> = ps
            .lines()
            .filter(|l| l.contains(w.to_str().unwrap()) && l.contains("fusebox"))
            .collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "daemons outlived umount: {left:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    ok(Command::new("dpkg")
        .args(["--purge", "fusebox"])
        .env("DEBIAN_FRONTEND", "noninteractive"));
    assert!(!package_installed());
    for f in [
        "/usr/bin/fusebox",
        "/usr/sbin/mount.fusebox",
        "/usr/sbin/mount.fuse.fusebox-stackfs",
        "/usr/lib/fusebox",
        "/usr/share/man/man1/fusebox-mount.1.gz",
        "/usr/share/doc/fusebox",
    ] {
        assert!(!Path::new(f).exists(), "{f} left after purge");
    }
    guard.mountpoints.clear();
}
