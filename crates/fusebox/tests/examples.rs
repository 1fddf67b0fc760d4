//! The examples a filesystem author starts from (crates/fusebox/examples)
//! and the tutorial (docs/writing-a-filesystem.md): each example as cargo
//! built it, mounted, read and changed through the kernel, unmounted by
//! SIGTERM; and the tutorial's hello filesystem copied into a new crate
//! outside the workspace with fusebox as a path dependency, built, mounted
//! and read with cat.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// An example cargo built for this test run (cargo test builds them into
/// target/<profile>/examples, beside this test's deps directory).
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().join("examples");
    let path = dir.join(name);
    assert!(path.exists(), "{} not built", path.display());
    path
}

/// A running filesystem program and its mount: SIGTERM and a clean exit
/// expected by `stop`; on a failed test, the mount is aborted and
/// removed and the program killed.
struct Served {
    child: Option<Child>,
    mnt: PathBuf,
}

impl Served {
    fn start(program: &Path, mnt: &Path, args: &[&str]) -> Served {
        let child = Command::new(program)
            .arg(mnt)
            .args(args)
            .stdin(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
        let mut s = Served {
            child: Some(child),
            mnt: std::fs::canonicalize(mnt).unwrap(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while fusebox::mount::fuse_mount_at(&s.mnt).is_none() {
            let exited = s.child.as_mut().unwrap().try_wait().unwrap();
            assert!(exited.is_none(), "{} exited: {exited:?}", program.display());
            assert!(
                Instant::now() < deadline,
                "{} did not mount",
                program.display()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    /// SIGTERM: the program unmounts and exits successfully.
    fn stop(mut self) {
        let mut child = self.child.take().unwrap();
        rustix::process::kill_process(
            rustix::process::Pid::from_child(&child),
            rustix::process::Signal::TERM,
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(15);
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("no exit after SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "{status}");
        assert!(fusebox::mount::fuse_mount_at(&self.mnt).is_none());
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(info) = fusebox::mount::fuse_mount_at(&self.mnt) {
            let _ = fusebox::mount::abort_connection(info.connection);
            let _ = fusebox::mount::unmount_path(&self.mnt, false);
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn scratch(tag: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(&format!("fusebox-test-examples-{tag}-"))
        .tempdir_in("/dev/shm")
        .unwrap()
}

fn sh(script: &str, dir: &Path) -> String {
    let out = Command::new("timeout")
        .args(["60", "sh", "-c", script])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn hello_serves_one_file() {
    let s = scratch("hello");
    let mnt = s.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let served = Served::start(&example("hello"), &mnt, &[]);
    assert_eq!(sh("cat hello && ls", &mnt), "Hello, world!\nhello\n");
    assert!(std::fs::read(mnt.join("missing")).is_err());
    served.stop();
}

#[test]
fn async_hello_serves_one_file_from_far_away() {
    let s = scratch("async");
    let mnt = s.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let served = Served::start(&example("async_hello"), &mnt, &[]);
    // Eight readers at once: requests in flight together, no thread each.
    let script = "for i in 1 2 3 4 5 6 7 8; do cat hello & done; wait";
    assert_eq!(sh(script, &mnt), "hello from far away\n".repeat(8));
    served.stop();
}

/// The path-level example behaves as a native directory does for what it
/// supports: the same script, the same output.
#[test]
fn notes_keeps_what_is_written_as_a_directory_would() {
    let s = scratch("notes");
    let (mnt, native) = (s.path().join("mnt"), s.path().join("native"));
    std::fs::create_dir(&mnt).unwrap();
    std::fs::create_dir(&native).unwrap();
    let served = Served::start(&example("notes"), &mnt, &[]);
    let script = "echo one > a && echo two >> a && printf 'xyz' > b \
        && seq 1 20000 > big && mv b c && truncate -s 2 a && rm big \
        && cat a c && echo && ls && wc -c < a \
        && dd if=/dev/zero of=holes bs=1 count=1 seek=9999 2>/dev/null && wc -c < holes";
    assert_eq!(sh(script, &mnt), sh(script, &native));
    served.stop();
}

/// A filesystem whose root is a regular file mounts on a regular file,
/// hides it while mounted and gives it back after.
#[test]
fn one_file_mounts_on_a_regular_file() {
    let s = scratch("one-file");
    let image = s.path().join("lines");
    std::fs::write(&image, "underneath\n").unwrap();
    let served = Served::start(&example("one_file"), &image, &["1000"]);
    let text = std::fs::read_to_string(&image).unwrap();
    assert_eq!(text.lines().count(), 1000);
    assert_eq!(text.lines().nth(999), Some("line 1000"));
    assert!(std::fs::metadata(&image).unwrap().is_file());
    served.stop();
    assert_eq!(std::fs::read_to_string(&image).unwrap(), "underneath\n");
}

/// The tutorial's code is the hello example, word for word.
fn tutorial_hello() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let doc = std::fs::read_to_string(root.join("docs/writing-a-filesystem.md")).unwrap();
    let marker = "<!-- hello.rs";
    let after = &doc[doc.find(marker).expect("the hello.rs marker")..];
    let start = after.find("```rust\n").unwrap() + "```rust\n".len();
    let code = &after[start..];
    let code = &code[..code.find("```\n").unwrap()];
    let example =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hello.rs"))
            .unwrap();
    assert_eq!(
        code, example,
        "the tutorial's hello and examples/hello.rs differ"
    );
    code.to_owned()
}

/// A newcomer's crate: the tutorial's hello in a new crate outside the
/// workspace, depending on fusebox by path, built offline with the
/// workspace's locked versions, mounted, and read with cat.
#[test]
fn the_tutorials_hello_builds_in_a_new_crate_and_answers_cat() {
    let code = tutorial_hello();
    let fusebox = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = fusebox.join("../..").canonicalize().unwrap();
    let s = scratch("newcomer");
    let krate = s.path().join("hellofs");
    std::fs::create_dir_all(krate.join("src")).unwrap();
    std::fs::write(
        krate.join("Cargo.toml"),
        format!(
            "[package]\nname = \"hellofs\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [dependencies]\nfusebox = {{ path = {:?} }}\nlibc = \"0.2\"\n",
            fusebox.canonicalize().unwrap()
        ),
    )
    .unwrap();
    std::fs::write(krate.join("src/main.rs"), code).unwrap();
    // The versions the workspace was tested with (cargo drops the rest).
    std::fs::copy(workspace.join("Cargo.lock"), krate.join("Cargo.lock")).unwrap();
    // Its own target directory: the one this test runs from is locked by
    // the cargo that runs it. Kept across runs, as a user's would be.
    let target = workspace.join("target/newcomer");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new("timeout")
        .arg("900")
        .arg(&cargo)
        .args(["build", "--offline", "--quiet"])
        .current_dir(&krate)
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("RUSTFLAGS")
        // No debug info: a third of the build, and nothing here needs it.
        .env("CARGO_PROFILE_DEV_DEBUG", "0")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "building the tutorial's crate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mnt = s.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let served = Served::start(&target.join("debug/hellofs"), &mnt, &[]);
    let cat = Command::new("cat").arg(mnt.join("hello")).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&cat.stdout), "Hello, world!\n");
    served.stop();
}
