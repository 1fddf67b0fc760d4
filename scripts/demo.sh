#!/usr/bin/env bash
# The main job: `fusebox bench --quick`: mounts fusebox's stackfs (classic,
# io_uring, io_uring + passthrough), libfuse 3.14's passthrough_ll, a fuser
# passthrough and go-fuse's loopback over one tmpfs, runs one workload of
# each kind side by side with native, and prints the table (report.md, charts
# and results.json are written too). Needs root. About 5 minutes once the
# peers are built (the first run builds them: about a minute more).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:/usr/local/go/bin:$PATH"
scripts/setup.sh
cargo build --release --locked -p fusebox-cli
exec target/release/fusebox bench --quick "$@"
