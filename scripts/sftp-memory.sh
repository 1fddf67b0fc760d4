#!/usr/bin/env bash
# Resident memory of an sftpfs server under 64 concurrent readers: 64 fio
# jobs, each reading its own 64 MiB file sequentially (1 MiB requests,
# cold caches) from a mount over an OpenSSH server on loopback
# (`fusebox test-sshd`). Prints the server's RSS idle and its high-water
# mark (VmHWM) beside the bound sftpfs states for them (DESIGN.md,
# "sftpfs": readahead_memory + write_behind's log + the caches), with the
# defaults and with readahead_memory=64M. Needs root and fio.
# Usage: scripts/sftp-memory.sh [--publish] [BIN]   (default target/release/fusebox)
# --publish replaces the "Memory" section at the end of docs/benchmarks-sftp.md.
set -euo pipefail
PUBLISH=0
if [ "${1:-}" = --publish ]; then PUBLISH=1; shift; fi
BIN=${BIN:-${1:-target/release/fusebox}}
WORK=$(mktemp -d /tmp/fusebox-sftp-mem-XXXX)
chmod 755 "$WORK"
ROWS=$(mktemp)
SSHD=
cleanup() {
  mountpoint -q "$WORK/mnt" && { "$BIN" umount "$WORK/mnt" 2>/dev/null || umount -l "$WORK/mnt"; }
  if [ -n "$SSHD" ]; then kill "$SSHD" 2>/dev/null; wait "$SSHD" 2>/dev/null || true; fi
  rm -rf "$WORK" "$ROWS"
}
trap cleanup EXIT
mkdir -p "$WORK/remote" "$WORK/mnt" "$WORK/sshd"
"$BIN" test-sshd "$WORK/sshd" & SSHD=$!
for _ in $(seq 100); do [ -f "$WORK/sshd/ssh-options" ] && break; sleep 0.1; done
[ -f "$WORK/sshd/ssh-options" ] || { echo "the test sshd did not start"; exit 1; }
for i in $(seq 0 63); do head -c 67108864 /dev/urandom > "$WORK/remote/f$i"; done
server_pid() { "$BIN" stats "$1" | head -1 | sed -n 's/.*pid \([0-9]*\).*/\1/p'; }
kib() { awk -v k="$1" '$1 == k":" {print $2}' "/proc/$2/status"; }
echo "options rss_idle_kib rss_peak_kib bound_kib"
for extra in "" "readahead_memory=64M"; do
  opts=$(cat "$WORK/sshd/ssh-options")${extra:+,$extra}
  "$BIN" mount sftpfs "root@127.0.0.1:$WORK/remote" "$WORK/mnt" -o "$opts" >/dev/null
  pid=$(server_pid "$WORK/mnt")
  idle=$(kib VmRSS "$pid")
  sync; echo 3 > /proc/sys/vm/drop_caches
  fio --name=m --directory="$WORK/mnt" --filename_format='f$jobnum' --rw=read --bs=1M \
    --size=64M --numjobs=64 --readonly --ioengine=psync --group_reporting \
    --output="$WORK/fio.out" || { echo "fio failed:"; cat "$WORK/fio.out"; exit 1; }
  peak=$(kib VmHWM "$pid")
  # The stated bound above idle: readahead (256 MiB by default), the write
  # log (32 MiB and its slack) and the metadata caches (100,000 entries of
  # at most ~300 bytes), plus 64 threads' stacks touched (~64 KiB each).
  if [ -n "$extra" ]; then ra=$((64 * 1024)); else ra=$((256 * 1024)); fi
  bound=$(( idle + ra + 33 * 1024 + 30 * 1024 + 16 * 64 * 64 ))
  echo "${extra:-defaults} $idle $peak $bound"
  echo "| ${extra:-defaults} | $idle | $peak | $bound | $([ "$peak" -le "$bound" ] && echo within || echo OVER) |" >> "$ROWS"
  "$BIN" umount "$WORK/mnt"
done
if grep -q OVER "$ROWS"; then echo "the high-water mark went over the stated bound"; status=1; else status=0; fi
if [ "$PUBLISH" = 1 ]; then
  doc=docs/benchmarks-sftp.md
  sed -i '/^## Memory under 64 concurrent readers/,$d' "$doc"
  {
    echo "## Memory under 64 concurrent readers"
    echo
    echo "Measured $(date -u +%Y-%m-%dT%H:%MZ) from fusebox \`$(git rev-parse --short=12 HEAD)\` by \`scripts/sftp-memory.sh\`: 64 fio jobs, each reading its own 64 MiB file front to back in 1 MiB requests, cold caches, from an sftpfs mount over OpenSSH on loopback. Resident size of the sftpfs server (KiB) before the run and its high-water mark (VmHWM), against the bound DESIGN.md states (idle + readahead_memory + the write log + the metadata caches + thread stacks)."
    echo
    echo "| options | RSS idle (KiB) | RSS peak (KiB) | stated bound (KiB) | |"
    echo "|---|---:|---:|---:|---|"
    cat "$ROWS"
  } >> "$doc"
  echo "published: $doc"
fi
exit $status
