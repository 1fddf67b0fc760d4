#!/usr/bin/env bash
# Resident memory of a fusebox daemon with 10,000 requests answered later in
# flight: timingfs, 3 s per request, fio libaio O_DIRECT 4 KiB reads, one
# job of iodepth 10,000. Prints the daemon's RSS idle and its high-water
# mark, and what that comes to per request in flight. Needs root and fio.
# Usage: scripts/later-memory.sh [--publish] [BIN]   (default target/release/fusebox)
# --publish replaces the "Memory" section at the end of docs/benchmarks-later.md.
set -euo pipefail
PUBLISH=0
if [ "${1:-}" = --publish ]; then PUBLISH=1; shift; fi
BIN=${1:-target/release/fusebox}
ROWS=$(mktemp)
MNT=$(mktemp -d /tmp/fusebox-later-mem-XXXX)
cleanup() {
  mountpoint -q "$MNT" && { "$BIN" umount "$MNT" 2>/dev/null || umount -l "$MNT"; }
  rmdir "$MNT" 2>/dev/null || true; rm -f "$MNT.fio" "$ROWS"
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
    --ioengine=libaio --iodepth=10000 --numjobs=1 --runtime=8 --time_based --readonly \
    --output="$MNT.fio" || { echo "fio failed:"; cat "$MNT.fio"; exit 1; }
  # The daemon's high-water marks: resident size (VmHWM) and requests in
  # flight at once (its own count, kept at every request).
  peak=$(awk '/^VmHWM/ {print $2}' "/proc/$pid/status")
  inflight=$("$BIN" stats "$MNT" | sed -n 's/^in flight: [0-9]* now, \([0-9]*\) at peak.*/\1/p')
  per=$(( (peak - idle) * 1024 / (inflight > 0 ? inflight : 1) ))
  echo "$1 $2 $inflight $idle $peak $per"
  echo "| $1 | $2 | $inflight | $idle | $peak | $per |" >> "$ROWS"
  "$BIN" umount "$MNT"
done

if [ "$PUBLISH" = 1 ]; then
  doc=docs/benchmarks-later.md
  # Everything before an earlier Memory section, then the new one.
  sed -i '/^## Memory with 10,000 requests in flight/,$d' "$doc"
  {
    echo "## Memory with 10,000 requests in flight"
    echo
    echo "Measured $(date -u +%Y-%m-%dT%H:%MZ) from fusebox \`$(git rev-parse --short=12 HEAD)\` by \`scripts/later-memory.sh\`: timingfs with 3 s per request, one fio libaio job 10,000 deep (O_DIRECT 4 KiB reads), 2 classic workers or 2 queues of 6,000 entries. Resident size of the daemon (KiB) before the run and its high-water mark (VmHWM), requests in flight at the peak (the daemon's own count), and the growth per request in flight."
    echo
    echo "| waiting | transport | in flight at peak | RSS idle (KiB) | RSS peak (KiB) | bytes per request |"
    echo "|---|---|---:|---:|---:|---:|"
    cat "$ROWS"
  } >> "$doc"
  echo "published: $doc"
fi
