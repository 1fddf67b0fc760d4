#!/usr/bin/env bash
# The whole test suite: unit and protocol tests, real-mount conformance
# tests over stackfs and memfs, robustness and CLI tests, then pjdfstest on
# native tmpfs, stackfs and memfs. Needs root (it mounts).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
scripts/setup.sh --pjdfstest
cargo build --release --locked -p fusebox-cli
cargo test --workspace --locked -- --test-threads=2
BIN=target/release/fusebox tests/pjdfstest.sh
# No test may leave a mount behind, even a failed one.
left=$(grep -E 'fusebox-(test|cli|pjdfstest)' /proc/self/mounts || true)
if [ -n "$left" ]; then
  echo "leftover test mounts:"; echo "$left"; exit 1
fi
