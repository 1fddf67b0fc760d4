//! Names the commit a `fusebox` binary was built from, for `--version`.
//!
//! From a git checkout: the commit HEAD names (rebuilt when HEAD or the
//! branch it points at moves). Elsewhere (a source package, `cargo install`
//! from a tarball) `FUSEBOX_GIT_COMMIT` can say it; otherwise "unknown".
//! The result goes to the compiler as `FUSEBOX_COMMIT`: a different name,
//! since cargo also puts it in the environment of the crate's tests, and a
//! cargo those tests run must not see the input change.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

fn main() {
    println!("cargo:rerun-if-env-changed=FUSEBOX_GIT_COMMIT");
    let here = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let commit = std::env::var("FUSEBOX_GIT_COMMIT").ok().or_else(|| {
        // Only if this crate is in the repository git finds: a crate
        // unpacked from a registry inside someone's home repository is not.
        git(&here, &["ls-files", "--error-unmatch", "build.rs"])?;
        // What moves when a commit is made or checked out, as git names the
        // files (worktrees keep refs in the common directory). Only files
        // that exist: cargo reruns a script watching a missing one on every
        // build. logs/HEAD grows with every commit and checkout, packed
        // refs or not.
        let mut watched = vec!["HEAD".to_string(), "logs/HEAD".into(), "packed-refs".into()];
        if let Some(branch) = git(&here, &["symbolic-ref", "-q", "HEAD"]) {
            watched.push(branch);
        }
        for name in watched {
            if let Some(path) = git(
                &here,
                &["rev-parse", "--path-format=absolute", "--git-path", &name],
            ) {
                if Path::new(&path).exists() {
                    println!("cargo:rerun-if-changed={path}");
                }
            }
        }
        git(&here, &["rev-parse", "--short=12", "HEAD"])
    });
    println!(
        "cargo:rustc-env=FUSEBOX_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );
}
