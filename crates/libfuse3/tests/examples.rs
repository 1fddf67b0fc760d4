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
    for prog in ["passthrough", "passthrough_fh", "passthrough_ll"] {
        let s = scratch(prog);
        let (native, served) = (s.path().join("native"), s.path().join("served"));
        make_tree(&native, 21);
        make_tree(&served, 21);
        let mnt = s.path().join("mnt");
        let mut cmd = Command::new(bin.join(prog));
        cmd.arg("-f");
        // passthrough_ll serves the directory it is given; the others, /.
        let through = if prog == "passthrough_ll" {
            cmd.arg("-o").arg(format!("source={}", served.display()));
            mnt.clone()
        } else {
            mnt.join(served.strip_prefix("/").unwrap())
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

#[test]
fn notify_inval_inode_reaches_the_kernel_cache() {
    let bin = examples();
    let s = scratch("inval");
    let mnt = s.path().join("mnt");
    let m = Mounted::start(
        Command::new(bin.join("notify_inval_inode"))
            .arg("-f")
            .arg("--update-interval=1")
            .arg(&mnt),
        &mnt,
    );
    // The file's contents are the time; the example keeps it in the page
    // cache (keep_cache) and invalidates it with
    // fuse_lowlevel_notify_inval_inode when the time changes.
    let first = std::fs::read_to_string(mnt.join("current_time")).unwrap();
    let mut changed = false;
    for _ in 0..40 {
        std::thread::sleep(Duration::from_millis(100));
        if std::fs::read_to_string(mnt.join("current_time")).unwrap() != first {
            changed = true;
            break;
        }
    }
    assert!(
        changed,
        "the contents never changed: {first:?}\n{}",
        m.log_text()
    );
    m.unmount();
}
