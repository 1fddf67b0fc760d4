#!/usr/bin/env bash
# Runs pjdfstest on native tmpfs and on each fusebox example filesystem that
# stores data (stackfs, memfs, and pathfs through the path-level API) over
# each transport, plus stackfs with passthrough, with the cached
# configuration and through the async API (--async-api), and fails unless
# every run has the same failures as native (none).
# Needs root, pjdfstest (cargo install pjdfstest) and a release build of
# the fusebox binary (BIN, default target/release/fusebox).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/fusebox}
CONF=tests/pjdfstest.toml
id fbtest >/dev/null 2>&1 || useradd -M -U -s /usr/sbin/nologin fbtest
WORK=$(mktemp -d /tmp/fusebox-pjdfstest-XXXX)
# Every mount made here is undone on any exit, success or not.
cleanup() {
  for m in "$WORK"/*/mnt "$WORK/native"; do
    mountpoint -q "$m" 2>/dev/null && { "$BIN" umount "$m" 2>/dev/null || umount -l "$m"; }
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
# pjdfstest switches to unprivileged users, who must be able to reach the dir.
chmod 755 "$WORK"

summary() { grep '^Summary:' "$1" | tail -1; }

mkdir "$WORK/native" && mount -t tmpfs tmpfs "$WORK/native"
(cd "$WORK" && timeout 600 pjdfstest -c "$OLDPWD/$CONF" -p native >native.log 2>&1) || true
echo "native tmpfs:  $(summary "$WORK/native.log")"
want=$(summary "$WORK/native.log" | sed 's/, [0-9]* total//')

status=0
runs=0
# One line per configuration: label, filesystem, transport, extra mount
# arguments. io_uring rows run only where the kernel has it switched on.
configs="stackfs-classic stackfs classic
stackfs-classic-replaced stackfs classic --max-restarts 100000
memfs-classic memfs classic
memfs-classic-upgraded memfs classic
pathfs-classic pathfs classic
pathfs-classic-replaced pathfs classic --max-restarts 100000
memfs-classic-async memfs classic --async-api
pathfs-classic-async pathfs classic --async-api"
if [ "$(cat /sys/module/fuse/parameters/enable_uring 2>/dev/null)" = Y ]; then
  configs="$configs
stackfs-uring stackfs uring
memfs-uring memfs uring
pathfs-uring pathfs uring
stackfs-uring-passthrough stackfs uring -o passthrough
stackfs-uring-cached stackfs uring --exclusive -o writeback_cache
stackfs-uring-async stackfs uring --async-api"
else
  echo "SKIPPED pjdfstest over io_uring: enable_uring is off"
fi
n=0
expected=$(grep -c . <<< "$configs")
# Rows come on fd 3, so nothing in the body can swallow them from stdin.
while read -r -u 3 label fs transport extra; do
  n=$((n + 1))
  # Short: pjdfstest binds unix sockets, whose paths must fit in 108 bytes.
  dir="$WORK/c$n"
  mkdir -p "$dir/src" "$dir/mnt"
  if [ "$fs" != memfs ]; then args=("$dir/src" "$dir/mnt"); else args=("$dir/mnt"); fi
  # shellcheck disable=SC2086 # extra holds separate arguments
  "$BIN" mount "$fs" "${args[@]}" --transport "$transport" $extra -o allow_other,default_permissions >/dev/null
  # A row must run with what it names, not quietly without it.
  # Captured first: grep -q stopping early would fail the pipe (pipefail).
  negotiated=$("$BIN" stats "$dir/mnt" | grep "flags:" || true)
  for feature in passthrough writeback_cache; do
    if [[ "$extra" == *"$feature"* ]] && ! grep -qw "$feature" <<< "$negotiated"; then
      echo "$label: $feature was not negotiated"
      status=1
    fi
  done
  killer=
  if [[ "$label" == *-replaced || "$label" == *-upgraded ]]; then
    # The server is replaced every ~0.1 s while pjdfstest runs, by
    # SIGKILL (the supervisor starts the next one) and by `fusebox
    # upgrade` in turn, or (memfs, whose files die with a killed server)
    # by upgrades only; no test may notice.
    (
      n=0
      while mountpoint -q "$dir/mnt"; do
        sleep 0.1
        n=$((n + 1))
        if [ $((n % 2)) = 0 ] || [[ "$label" == *-upgraded ]]; then
          "$BIN" upgrade "$dir/mnt" >/dev/null 2>&1 || true
          continue
        fi
        pid=$("$BIN" stats "$dir/mnt" 2>/dev/null | sed -n '1s/.*  pid \([0-9]*\) .*/\1/p')
        [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
      done
    ) &
    killer=$!
  fi
  (cd "$dir" && timeout 600 pjdfstest -c "$OLDPWD/$CONF" -p mnt >pjd.log 2>&1) || true
  if [ -n "$killer" ]; then
    kill "$killer" 2>/dev/null; wait "$killer" 2>/dev/null || true
    line=$("$BIN" stats "$dir/mnt" | grep '^recovery:' || true)
    generation=$(sed -n 's/^recovery: server generation \([0-9]*\),.*/\1/p' <<< "$line")
    restarts=$(sed -n 's/.*generation [0-9]*, \([0-9]*\) restarts.*/\1/p' <<< "$line")
    echo "$label: $((${generation:-1} - 1)) server replacements during the run, ${restarts:-0} of them after SIGKILL"
    if [[ "$label" == *-upgraded ]]; then
      if [ "${generation:-1}" -le 1 ]; then
        echo "$label: no upgrade happened: the row tested too little"
        status=1
      fi
    elif [ "${restarts:-0}" -lt 1 ] || [ "${generation:-1}" -le $((${restarts:-0} + 1)) ]; then
      echo "$label: no kill or no upgrade happened: the row tested too little"
      status=1
    fi
  fi
  got=$(summary "$dir/pjd.log" | sed 's/, [0-9]* total//')
  echo "$label:  $(summary "$dir/pjd.log")"
  runs=$((runs + 1))
  if [ "$got" != "$want" ]; then
    echo "pjdfstest on $label differs from native tmpfs; failures:"
    grep -E 'FAILED|failed$' "$dir/pjd.log" | head -40 || true
    # What the failing case said (pjdfstest panics with the failed assertion).
    grep -E -A3 "panicked at|called \`" "$dir/pjd.log" | head -40 || true
    status=1
  fi
  "$BIN" umount "$dir/mnt"
done 3<<< "$configs"
# libfuse's passthrough_ll (built from Debian's fuse3 source, unchanged) on
# Debian's libfuse3 and on fusebox's drop-in, in this same run: the drop-in
# must pass at least as many tests. DROPIN_LIB: a directory holding
# fusebox's libfuse3.so.3; EXAMPLES: scripts/libfuse-examples.sh's output.
DROPIN_LIB=${DROPIN_LIB:-}
EXAMPLES=${EXAMPLES:-/var/cache/fusebox/libfuse-examples/bin}
if [ -n "$DROPIN_LIB" ]; then
  failed_of() { sed -n 's/^Summary: \([0-9]*\) failed.*/\1/p' "$1" | tail -1; }
  declare -A failures
  for lib in debian fusebox; do
    dir="$WORK/ll-$lib"
    mkdir -p "$dir/src" "$dir/mnt"
    if [ $lib = fusebox ]; then libpath=$DROPIN_LIB; else libpath=; fi
    LD_LIBRARY_PATH=$libpath "$EXAMPLES/passthrough_ll" -f \
      -o source="$dir/src",allow_other,default_permissions "$dir/mnt" >"$dir/daemon.log" 2>&1 &
    daemon=$!
    for _ in $(seq 100); do mountpoint -q "$dir/mnt" && break; sleep 0.1; done
    if ! mountpoint -q "$dir/mnt"; then
      echo "passthrough_ll on $lib libfuse3 did not mount:"; cat "$dir/daemon.log"
      status=1; kill "$daemon" 2>/dev/null || true; continue
    fi
    (cd "$dir" && timeout 600 pjdfstest -c "$OLDPWD/$CONF" -p mnt >pjd.log 2>&1) || true
    echo "passthrough_ll on $lib libfuse3:  $(summary "$dir/pjd.log")"
    failures[$lib]=$(failed_of "$dir/pjd.log")
    umount "$dir/mnt" || umount -l "$dir/mnt"
    wait "$daemon" 2>/dev/null || true
  done
  if [ -z "${failures[fusebox]:-}" ] || [ -z "${failures[debian]:-}" ] \
     || [ "${failures[fusebox]}" -gt "${failures[debian]}" ]; then
    echo "passthrough_ll: the drop-in failed ${failures[fusebox]:-?} tests, Debian's libfuse3 ${failures[debian]:-?}"
    grep -E 'FAILED|failed$' "$WORK/ll-fusebox/pjd.log" | head -40 || true
    status=1
  fi
fi
if [ "$runs" != "$expected" ]; then
  echo "pjdfstest: ran $runs of $expected configurations"
  status=1
fi
if [ $status = 0 ]; then echo "pjdfstest: $runs passed, 0 failed"; fi
exit $status
