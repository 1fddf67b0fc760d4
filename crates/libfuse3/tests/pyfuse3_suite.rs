//! pyfuse3's own test suite and example filesystems, from the source
//! distribution of the version Debian installed (python3-pyfuse3), run
//! against Debian's libfuse3 and against the drop-in in the same test: the
//! drop-in must pass every test Debian's passes (pyfuse3 3.2.1's tmpfs and
//! passthroughfs examples fail their own tests on Debian 12 either way).

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

use common::*;

/// (passed, not passed) test ids of one run of the suite.
fn run_suite(src: &Path, scratch: &Path, dropin: bool) -> (BTreeSet<String>, BTreeSet<String>) {
    let tag = if dropin { "fusebox" } else { "debian" };
    let base = scratch.join(tag);
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.current_dir(src)
        .args([
            "-m",
            "pytest",
            "--installed",
            "test/",
            "-p",
            "no:cacheprovider",
            "-rA",
        ])
        // The suite's own -x would stop at the first failure.
        .args(["-o", "addopts=--assert=rewrite --tb=native"])
        .arg(format!("--basetemp={}", base.display()));
    if dropin {
        cmd.env("LD_LIBRARY_PATH", library_dir(scratch));
    }
    let out = cmd.output().unwrap();
    // Whatever a failed test left mounted under our scratch directory.
    for m in fusebox::mount::fuse_mounts() {
        if m.mountpoint.starts_with(&base) {
            let _ = fusebox::mount::abort_connection(m.connection);
            let _ = Command::new("umount").arg("-l").arg(&m.mountpoint).status();
        }
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut passed = BTreeSet::new();
    let mut other = BTreeSet::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next()) {
            (Some("PASSED"), Some(id)) => {
                passed.insert(id.to_string());
            }
            (Some("FAILED" | "ERROR"), Some(id)) => {
                other.insert(id.to_string());
            }
            _ => {}
        }
    }
    assert!(
        !passed.is_empty(),
        "pytest ran nothing on {tag}'s library:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (passed, other)
}

#[test]
fn pyfuse3s_own_suite_passes_on_the_drop_in_what_it_passes_on_debians_libfuse3() {
    if !python_has("pyfuse3") || !python_has("pytest") {
        return skip("python3-pyfuse3 or python3-pytest");
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/pyfuse3-source.sh");
    let src = run(&mut Command::new(script));
    let src = Path::new(src.trim());
    let s = scratch("pyfuse3-suite");
    let (debian_passed, debian_other) = run_suite(src, s.path(), false);
    let (ours_passed, ours_other) = run_suite(src, s.path(), true);
    let lost: Vec<_> = debian_passed.difference(&ours_passed).collect();
    assert!(
        lost.is_empty(),
        "pass on Debian's libfuse3, not on the drop-in: {lost:?}\n(drop-in failures: {ours_other:?})"
    );
    eprintln!(
        "pyfuse3 suite: Debian's libfuse3 {} passed, {} not ({:?}); the drop-in {} passed, {} not",
        debian_passed.len(),
        debian_other.len(),
        debian_other,
        ours_passed.len(),
        ours_other.len()
    );
}
