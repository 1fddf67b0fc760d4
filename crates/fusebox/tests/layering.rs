//! The layering check (`scripts/import-graph.py --check`, DESIGN.md's
//! "Module layers") passes on this tree, and fails on copies of it with
//! one import upward, one cycle, or one opcode named outside the table.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Run the check on `src` (a copy of crates/fusebox/src, or the real one).
fn check(src: &Path) -> (bool, String) {
    let out = Command::new("python3")
        .arg(repo().join("scripts/import-graph.py"))
        .arg("--check")
        .env("IMPORT_GRAPH_SRC", src)
        .env("IMPORT_GRAPH_DESIGN", repo().join("DESIGN.md"))
        .output()
        .expect("python3 runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// A copy of the crate's source with `line` put first in `file` (before
/// any unit-test module, which the check leaves out).
fn altered(file: &str, line: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let status = Command::new("cp")
        .arg("-r")
        .arg(repo().join("crates/fusebox/src/."))
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    let path = dir.path().join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, format!("{line}{text}")).unwrap();
    dir
}

#[test]
fn the_tree_keeps_its_layers() {
    let (ok, out) = check(&repo().join("crates/fusebox/src"));
    assert!(ok, "{out}");
    assert!(out.contains("no cycles"), "{out}");
}

#[test]
fn an_import_upward_fails_the_check() {
    let dir = altered("protocol/mod.rs", "use crate::session::Session;\n");
    let (ok, out) = check(dir.path());
    assert!(!ok, "{out}");
    assert!(out.contains("upward import: protocol"), "{out}");
    // The same through a name the crate root re-exports.
    let dir = altered("mount/mod.rs", "use crate::Session;\n");
    let (ok, out) = check(dir.path());
    assert!(!ok, "{out}");
    assert!(
        out.contains("upward import: mount (layer 3) uses session"),
        "{out}"
    );
}

#[test]
fn a_cycle_fails_the_check() {
    // error is in the bottom layer with device: an import each way is a
    // cycle within one layer.
    let dir = altered("device.rs", "use crate::error::Errno;\n");
    let error = dir.path().join("error.rs");
    let text = std::fs::read_to_string(&error).unwrap();
    std::fs::write(&error, format!("use crate::device::DevChannel;\n{text}")).unwrap();
    let (ok, out) = check(dir.path());
    assert!(!ok, "{out}");
    assert!(out.contains("cycle among: device error"), "{out}");
}

#[test]
fn an_opcode_named_outside_the_table_fails_the_check() {
    let dir = altered(
        "later/mod.rs",
        "fn is_read(o: fusebox_abi::Opcode) -> bool { o == Opcode::READ }\n",
    );
    let (ok, out) = check(dir.path());
    assert!(!ok, "{out}");
    assert!(
        out.contains("opcode named outside the table: later/mod.rs: Opcode::READ"),
        "{out}"
    );
}
