#!/usr/bin/env bash
# The main job: mount fusebox's stackfs over a tmpfs directory and run a
# quick side-by-side benchmark against the native directory and libfuse
# 3.14's passthrough_ll (Debian's packaged example), then show
# `fusebox stats` of the running mount. Needs root. ~2 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
scripts/setup.sh
cargo build --release --locked -p fusebox-cli
mkdir -p target/peers
if [ ! -x target/peers/passthrough_ll ]; then
  gcc -O2 -Wall /usr/share/doc/libfuse3-dev/examples/passthrough_ll.c \
    $(pkg-config fuse3 --cflags --libs) -o target/peers/passthrough_ll
fi
exec python3 scripts/sidebyside.py "$@"
