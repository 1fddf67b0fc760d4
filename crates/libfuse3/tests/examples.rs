//! libfuse's own example programs, built from Debian's source package of
//! fuse3 3.14 against Debian's headers, unchanged
//! (`scripts/libfuse-examples.sh`), run on the drop-in: what they serve is
//! compared with what the same operations do natively.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;

/// The built examples (building them on first use: a Debian source
/// download and a few gcc runs).
fn examples() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/libfuse-examples.sh");
    let out = Path::new("/var/cache/fusebox/libfuse-examples");
    run(Command::new(script).arg(out));
    out.join("bin")
}

#[test]
fn hello_and_hello_ll_serve_their_one_file() {
    let bin = examples();
    for prog in ["hello", "hello_ll"] {
        let s = scratch(prog);
        let mnt = s.path().join("mnt");
        let m = Mounted::start(Command::new(bin.join(prog)).arg("-f").arg(&mnt), &mnt);
        let names: Vec<_> = std::fs::read_dir(&mnt)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["hello"], "{prog}");
        assert_eq!(
            std::fs::read_to_string(mnt.join("hello")).unwrap(),
            "Hello World!\n"
        );
        // No create, mknod or write in the example: creating fails.
        assert!(std::fs::write(mnt.join("other"), b"x").is_err(), "{prog}");
        m.unmount();
    }
}

#[test]
fn the_passthrough_examples_match_the_same_changes_made_natively() {
    let bin = examples();
    for prog in [
        "passthrough",
        "passthrough_fh",
        "passthrough_ll",
        "passthrough_hp",
    ] {
        let s = scratch(prog);
        let (native, served) = (s.path().join("native"), s.path().join("served"));
        make_tree(&native, 21);
        make_tree(&served, 21);
        let mnt = s.path().join("mnt");
        let mut cmd = Command::new(bin.join(prog));
        if prog != "passthrough_hp" {
            cmd.arg("-f");
        }
        // passthrough_ll and _hp serve the directory they are given; the
        // others, /.
        let through = match prog {
            "passthrough_ll" => {
                cmd.arg("-o").arg(format!("source={}", served.display()));
                mnt.clone()
            }
            "passthrough_hp" => {
                cmd.arg("--foreground").arg(&served);
                mnt.clone()
            }
            _ => mnt.join(served.strip_prefix("/").unwrap()),
        };
        let m = Mounted::start(cmd.arg(&mnt), &mnt);
        assert_same_tree(&native, &through);
        let extra = s.path().join("extra");
        make_tree(&extra, 4);
        change_tree(&native, &extra);
        change_tree(&through, &extra);
        assert_same_tree(&native, &through);
        assert_same_tree(&native, &served);
        assert_eq!(tar_listing(&native), tar_listing(&through), "{prog}");
        m.unmount();
    }
}

/// One of the examples whose `current_time` file holds the time, updated
/// every second: mounted, the file read until its contents change (up to
/// 4 s), then unmounted; the program must end cleanly.
fn current_time_changes(prog: &str, tag: &str) {
    let bin = examples();
    let s = scratch(tag);
    let mnt = s.path().join("mnt");
    let m = Mounted::start(
        Command::new(bin.join(prog))
            .arg("-f")
            .arg("--update-interval=1")
            .arg(&mnt),
        &mnt,
    );
    let first = std::fs::read_to_string(mnt.join("current_time")).unwrap();
    let mut changed = false;
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(100));
        if std::fs::read_to_string(mnt.join("current_time")).unwrap() != first {
            changed = true;
            break;
        }
    }
    assert!(changed, "{prog}: {first:?} never changed\n{}", m.log_text());
    // Another update round, so a retrieve asked for is answered or not.
    std::thread::sleep(Duration::from_millis(1200));
    m.unmount();
}

#[test]
fn notify_inval_inode_reaches_the_kernel_cache() {
    // The example keeps the file in the page cache (keep_cache) and
    // invalidates it with fuse_lowlevel_notify_inval_inode when the time
    // changes: without the invalidation the old time would stay.
    current_time_changes("notify_inval_inode", "inval");
}

#[test]
fn notify_store_retrieve_stores_and_gets_its_data_back() {
    // The example pushes the file's new contents into the kernel's cache
    // (fuse_lowlevel_notify_store), then asks for them back
    // (fuse_lowlevel_notify_retrieve) and checks them in its
    // retrieve_reply callback; at exit it asserts that a retrieve it
    // asked for was answered, so a clean exit after umount is the check.
    current_time_changes("notify_store_retrieve", "store");
}

#[test]
fn printcap_sees_the_same_capabilities_on_both_libraries() {
    let bin = examples();
    let s = scratch("printcap");
    let run_on = |dropin: bool| {
        let mut cmd = Command::new(bin.join("printcap"));
        cmd.env("TMPDIR", s.path());
        if dropin {
            cmd.env("LD_LIBRARY_PATH", library_dir(s.path()));
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "printcap ({}): {}",
            if dropin { "drop-in" } else { "Debian" },
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    // The version lines before it say whose library it is.
    let caps = |out: String| out[out.find("Protocol version").expect("printed")..].to_string();
    let (debian, ours) = (caps(run_on(false)), caps(run_on(true)));
    assert!(debian.contains("FUSE_CAP_ASYNC_READ"), "{debian}");
    assert_eq!(ours, debian);
}

#[test]
fn notify_inval_entry_renames_the_file_under_the_kernels_cache() {
    let bin = examples();
    let s = scratch("inval-entry");
    let mnt = s.path().join("mnt");
    let m = Mounted::start(
        Command::new(bin.join("notify_inval_entry"))
            .arg("-f")
            .arg("--update-interval=1")
            .arg(&mnt),
        &mnt,
    );
    // The one file is named after the time; the example invalidates the
    // old name (fuse_lowlevel_notify_inval_entry) when it changes, so a
    // name looked up once stops resolving once it is out of date.
    let names = || -> Vec<String> {
        std::fs::read_dir(&mnt)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect()
    };
    let first = names();
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(mnt.join(&first[0]).exists());
    let mut gone = false;
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(100));
        if !mnt.join(&first[0]).exists() {
            gone = true;
            break;
        }
    }
    assert!(gone, "{} still resolves\n{}", first[0], m.log_text());
    assert_ne!(names(), first);
    m.unmount();
}

#[test]
fn the_ioctl_example_answers_its_client() {
    let bin = examples();
    let s = scratch("ioctl");
    let mnt = s.path().join("mnt");
    let m = Mounted::start(Command::new(bin.join("ioctl")).arg("-f").arg(&mnt), &mnt);
    let client = |args: &[&str]| {
        run(Command::new(bin.join("ioctl_client"))
            .arg(mnt.join("fioc"))
            .args(args))
    };
    // FIOC_GET_SIZE, FIOC_SET_SIZE, FIOC_GET_SIZE: through the
    // high-level ioctl callback, with its in and out data.
    assert_eq!(client(&[]).trim(), "0");
    client(&["4096"]);
    assert_eq!(client(&[]).trim(), "4096");
    m.unmount();
}

#[test]
fn the_poll_example_wakes_its_client() {
    let bin = examples();
    let s = scratch("poll");
    let mnt = s.path().join("mnt");
    let m = Mounted::start(Command::new(bin.join("poll")).arg("-f").arg(&mnt), &mnt);
    // poll_client select()s on the 16 files 16 times; each pass returns
    // only once the example's fuse_notify_poll woke the kernel for a file
    // that became readable: 16 lines, each with a file read.
    let mut child = Command::new(bin.join("poll_client"))
        .current_dir(&mnt)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("poll_client still waiting after 30 s\n{}", m.log_text());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 16, "{text}");
    assert!(lines.iter().all(|l| l.contains(":01")), "{text}");
    m.unmount();
}

#[test]
fn invalidate_path_reaches_the_kernel_cache_from_the_high_level_api() {
    // High-level: the file is cached (kernel_cache) and invalidated by
    // path with fuse_invalidate_path when the time changes.
    current_time_changes("invalidate_path", "invalidate");
}
