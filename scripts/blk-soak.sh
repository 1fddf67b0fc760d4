#!/usr/bin/env bash
# BDUS's test on a fusebox block device: fio writes random 4 KiB blocks at
# queue depth 16 (libaio, O_DIRECT) and then reads every one back and checks
# its crc32c, run after run for SECONDS, while the driver process is
# replaced every EVERY seconds, by `fusebox blk replace` and by SIGKILL
# (`--kill`) in turn. Prints the failed runs (I/O errors or verify
# mismatches: must be 0) and the replacements. Needs root and fio.
# Usage: scripts/blk-soak.sh [SECONDS] [EVERY] [BIN] [DRIVER]
set -euo pipefail
SECONDS_TOTAL=${1:-60}
EVERY=${2:-2}
BIN=${3:-target/release/fusebox}
DRIVER=${4:-ram}
NAME=soak$$
DIR=$(mktemp -d /tmp/fusebox-blk-soak-XXXX)
replacer=
cleanup() {
  [ -n "$replacer" ] && kill "$replacer" 2>/dev/null && wait "$replacer" 2>/dev/null
  "$BIN" blk destroy "$NAME" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
trap cleanup EXIT
args=(--driver "$DRIVER" --size 512M)
[ "$DRIVER" = file ] && args=(--driver file --path "$DIR/disk.img" --size 512M)
DEV=$("$BIN" blk create --name "$NAME" "${args[@]}" --max-restarts 1000000)
(
  n=0
  while true; do
    sleep "$EVERY"
    n=$((n + 1))
    if [ $((n % 2)) = 0 ]; then
      "$BIN" blk replace "$NAME" >/dev/null || echo "replacement $n failed"
    else
      "$BIN" blk replace --kill "$NAME" >/dev/null || echo "kill $n failed"
    fi
  done
) &
replacer=$!
end=$(( $(date +%s) + SECONDS_TOTAL ))
runs=0 failed=0
while [ "$(date +%s)" -lt "$end" ]; do
  runs=$((runs + 1))
  if ! fio --name=soak --filename="$DEV" --rw=randwrite --bs=4k --size=256M \
      --iodepth=16 --ioengine=libaio --direct=1 --randseed=$runs \
      --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0 \
      --output="$DIR/fio.out" >/dev/null 2>&1 \
      || ! grep -q "err= 0" "$DIR/fio.out"; then
    failed=$((failed + 1))
    echo "fio run $runs failed:"; cat "$DIR/fio.out"
  fi
done
kill "$replacer"; wait "$replacer" 2>/dev/null || true; replacer=
line=$("$BIN" stats "$NAME" | grep '^recovery:')
echo "$DRIVER device $DEV: fio runs: $runs, failed (I/O error or verify mismatch): $failed"
echo "$line"
[ "$failed" = 0 ]
