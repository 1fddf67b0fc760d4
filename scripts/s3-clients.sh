#!/usr/bin/env bash
# Measures the S3 client crates objfs could use (aws-sdk-s3 as objfs's
# Store drives it, object_store, opendal) on a fresh three-node Garage
# cluster, the store the objfs bench runs on: small PUTs and HEADs, a
# multipart PUT and ranged GETs of 256 MiB, a listing of 2,000 keys.
# Prints a Markdown table (DESIGN.md, "The S3 client", quotes one run).
#
#   scripts/s3-clients.sh [REPS]     # default 5
#
# The comparison crate (crates/bench/s3-clients) is outside the
# workspace: it pulls two S3 stacks nothing else needs. Its build goes to
# ~/.cache/fusebox/s3-clients-target.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
reps=${1:-5}
target=${CARGO_TARGET_DIR:-$HOME/.cache/fusebox/s3-clients-target}
cargo build --release --manifest-path "$repo/crates/bench/s3-clients/Cargo.toml" --target-dir "$target"
dir=$(mktemp -d /var/tmp/fusebox-s3-clients.XXXXXX)
trap '"$repo/scripts/garage-cluster.sh" down "$dir" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
"$repo/scripts/garage-cluster.sh" up "$dir" > /dev/null
set -a; . "$dir/env"; set +a
unset AWS_CA_BUNDLE AWS_PROFILE
"$target/release/fusebox-s3-clients" "$ENDPOINT_0" objfs "$reps"
