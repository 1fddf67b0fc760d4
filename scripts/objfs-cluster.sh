#!/usr/bin/env bash
# objfs's cluster tests on a real replicated store: builds Garage once
# (`cargo install garage`, about 15 minutes on 2 cores, kept in
# ~/.cache/fusebox/garage), then runs the objfs tests, the cluster ones
# included (a three-node cluster, replication factor 3, made by
# scripts/garage-cluster.sh). scripts/test.sh runs the same tests without
# Garage and reports the cluster ones as skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
root="$HOME/.cache/fusebox/garage"
if ! command -v garage >/dev/null && [ ! -x "$root/bin/garage" ]; then
  echo "objfs-cluster: cargo install garage 2.5.0 into $root (about 15 minutes)"
  # Release without LTO: the same server, built in two thirds of the time.
  CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
    cargo install garage --version 2.5.0 --locked --quiet --root "$root"
fi
export FUSEBOX_GARAGE=${FUSEBOX_GARAGE:-$(command -v garage || echo "$root/bin/garage")}
scripts/setup.sh
cargo test --locked -p fusebox-cli --test objfs -- --test-threads=2 "$@"
