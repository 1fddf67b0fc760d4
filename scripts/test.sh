#!/usr/bin/env bash
# The whole test suite: unit and protocol tests, real-mount conformance
# tests over stackfs and memfs, robustness and CLI tests, then pjdfstest on
# native tmpfs, stackfs and memfs. Needs root (it mounts).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
scripts/setup.sh --pjdfstest
# What the house rules say, checked before anything is built: formatting,
# clippy with warnings denied (every unsafe block's SAFETY comment
# included: undocumented_unsafe_blocks is denied workspace-wide), and
# rustdoc with warnings denied.
rustup component add rustfmt clippy >/dev/null 2>&1 || true
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked --quiet -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked --quiet
# The core crate's layering as DESIGN.md ("Module layers") states it: no
# import cycle, no import upward, opcodes named only where the table says.
python3 scripts/import-graph.py --check >/dev/null || {
  python3 scripts/import-graph.py; exit 1; }
# Tests open /dev/fuse to users while they run as one and put its mode
# back; a test process killed midway could not, so the suite does. Tests
# that cannot run on this machine list themselves in $FUSEBOX_SKIPPED_LOG
# (fusebox-test-support's `skipped`): libtest counts them as passed, so
# the summary at the end names them.
fuse_mode=$(stat -c %a /dev/fuse)
export FUSEBOX_SKIPPED_LOG
FUSEBOX_SKIPPED_LOG=$(mktemp /tmp/fusebox-skipped-XXXX)
summary() {
  chmod "$fuse_mode" /dev/fuse
  if [ -s "$FUSEBOX_SKIPPED_LOG" ]; then
    echo "skipped tests ($(sort -u "$FUSEBOX_SKIPPED_LOG" | wc -l)), counted as passed by cargo test:"
    sort -u "$FUSEBOX_SKIPPED_LOG" | sed 's/^/  SKIPPED /'
  else
    echo "skipped tests: none"
  fi
  rm -f "$FUSEBOX_SKIPPED_LOG"
}
trap summary EXIT
# `cargo install` first: the build after it then reuses its fusebox binary
# (the other order links it twice), and the install test's own `cargo
# install` finds it built.
cargo install --locked --quiet --path crates/cli --root target/cargo-install
cargo build --release --locked -p fusebox-cli -p fusebox-libfuse3 -p fusebox-direct-preload
# libfuse's examples from Debian's fuse3 source (the drop-in's tests).
scripts/libfuse-examples.sh
cargo test --workspace --locked -- --test-threads=2
# The drop-in under the name the loader looks for.
mkdir -p target/release/dropin
ln -sf ../libfuse3.so target/release/dropin/libfuse3.so.3
BIN=target/release/fusebox DROPIN_LIB="$PWD/target/release/dropin" tests/pjdfstest.sh
# No test may leave a mount behind, even a failed one, nor a block device
# (a loop device over a fusebox-blk mount, its record or its link).
left=$(grep -E 'fusebox-(test|cli|pjdfstest|lf3|blk)' /proc/self/mounts || true)
left+=$(losetup -l -n -O NAME,BACK-FILE | grep /run/fusebox/blk/ || true)
left+=$(ls /run/fusebox/blk/*.json 2>/dev/null || true)
if [ -n "$left" ]; then
  echo "leftover test mounts or block devices:"; echo "$left"; exit 1
fi
