#!/usr/bin/env bash
# Soak test of recovery: fio (random 4 KiB writes by 4 jobs, then every
# block read back and its crc32c checked) runs again and again on a
# supervised stackfs (or FS: pathfs) for SECONDS, while the server is
# replaced every EVERY seconds, by SIGKILL and by `fusebox upgrade` in turn.
# Prints the I/O errors and verify failures (both must be 0) and the
# replacements. Needs root and fio.
# Usage: scripts/recovery-soak.sh [SECONDS] [EVERY] [BIN] [FS]
set -euo pipefail
SECONDS_TOTAL=${1:-60}
EVERY=${2:-2}
BIN=${3:-target/release/fusebox}
FS=${4:-stackfs}
DIR=$(mktemp -d /tmp/fusebox-soak-XXXX)
MNT=$DIR/mnt
mkdir "$DIR/src" "$MNT"
replacer=
cleanup() {
  [ -n "$replacer" ] && kill "$replacer" 2>/dev/null && wait "$replacer" 2>/dev/null
  mountpoint -q "$MNT" && { "$BIN" umount "$MNT" 2>/dev/null || "$BIN" umount --abort "$MNT"; }
  rm -rf "$DIR"
}
trap cleanup EXIT
"$BIN" mount "$FS" "$DIR/src" "$MNT" --max-restarts 1000000 >/dev/null
(
  n=0
  while true; do
    sleep "$EVERY"
    n=$((n + 1))
    if [ $((n % 2)) = 0 ]; then
      "$BIN" upgrade "$MNT" >/dev/null || echo "upgrade $n failed"
    else
      pid=$("$BIN" stats "$MNT" | sed -n '1s/.*  pid \([0-9]*\) .*/\1/p')
      kill -9 "$pid"
    fi
  done
) &
replacer=$!
end=$(( $(date +%s) + SECONDS_TOTAL ))
runs=0 failed=0
while [ "$(date +%s)" -lt "$end" ]; do
  runs=$((runs + 1))
  if ! fio --name=soak --directory="$MNT" --rw=randwrite --bs=4k --size=32M \
      --numjobs=4 --verify=crc32c --do_verify=1 --verify_fatal=1 --verify_state_save=0 \
      --group_reporting --output="$DIR/fio.out" >/dev/null 2>&1 \
      || ! grep -q "err= 0" "$DIR/fio.out"; then
    failed=$((failed + 1))
    echo "fio run $runs failed:"; cat "$DIR/fio.out"
  fi
  rm -f "$MNT"/soak.*
done
kill "$replacer"; wait "$replacer" 2>/dev/null || true; replacer=
line=$("$BIN" stats "$MNT" | grep '^recovery:')
echo "$FS: fio runs: $runs, failed (I/O error or verify mismatch): $failed"
echo "$line"
[ "$failed" = 0 ]
