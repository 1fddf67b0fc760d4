#!/usr/bin/env bash
# Resident memory of a fusebox daemon with 10,000 requests answered later in
# flight: timingfs, 3 s per request, fio libaio O_DIRECT 4 KiB reads, 4 jobs
# of iodepth 2,500. Prints the daemon's RSS idle and at the peak, and what
# that comes to per request in flight. Needs root and fio.
# Usage: scripts/later-memory.sh [BIN]   (default target/release/fusebox)
set -euo pipefail
BIN=${1:-target/release/fusebox}
MNT=$(mktemp -d /tmp/fusebox-later-mem-XXXX)
cleanup() {
  mountpoint -q "$MNT" && { "$BIN" umount "$MNT" 2>/dev/null || umount -l "$MNT"; }
  rmdir "$MNT" 2>/dev/null || true
}
trap cleanup EXIT
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
echo "mode transport in_flight rss_idle_kib rss_peak_kib bytes_per_request"
for spec in "token classic" "async classic" "token uring"; do
  set -- $spec
  "$BIN" mount timingfs "$MNT" --profile pmem --files 1 --size 64M --latency 3s \
    --waiting "$1" --transport "$2" --queue-depth 6000 \
    -o max_background=16384,congestion_threshold=12288,async_dio,attr_timeout=3600,noatime >/dev/null
  pid=$("$BIN" stats "$MNT" | head -1 | sed -n 's/.*pid \([0-9]*\).*/\1/p')
  idle=$(rss_kib "$pid")
  fio --name=m --filename="$MNT/file0" --rw=randread --bs=4k --size=64M --direct=1 \
    --ioengine=libaio --iodepth=2500 --numjobs=4 --runtime=8 --time_based --readonly \
    --output=/dev/null &
  fio_pid=$!
  peak=0; inflight=0
  for _ in $(seq 1 60); do
    sleep 0.1
    r=$(rss_kib "$pid"); [ "$r" -gt "$peak" ] && peak=$r
    n=$("$BIN" stats "$MNT" | sed -n 's/^in flight: \([0-9]*\) now.*/\1/p')
    [ "${n:-0}" -gt "$inflight" ] && inflight=$n
  done
  wait "$fio_pid" || true
  per=$(( (peak - idle) * 1024 / (inflight > 0 ? inflight : 1) ))
  echo "$1 $2 $inflight $idle $peak $per"
  "$BIN" umount "$MNT"
done
