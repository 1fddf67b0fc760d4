#!/usr/bin/env bash
# Build fusebox's Debian package with cargo-deb: the fusebox binary, the
# mount(8) helpers (mount.fusebox, mount.fuse.fusebox-FS), the libfuse3
# drop-in and the direct-mode library in /usr/lib/fusebox, man pages and
# shell completions. Prints the .deb's path. Install: dpkg -i that path.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
out="${1:-target/debian}"
if ! command -v cargo-deb >/dev/null; then
  echo "package: cargo install cargo-deb (about a minute)" >&2
  cargo install cargo-deb --locked --quiet --version '^3'
fi
cargo build --release --locked -p fusebox-cli -p fusebox-libfuse3 -p fusebox-direct-preload >&2
mkdir -p "$out"
cargo deb -p fusebox-cli --no-build --strip --locked --output "$out" | tail -1
