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
SSHD_PID=
FUSE_MODE=
cleanup() {
  [ -z "$FUSE_MODE" ] || chmod "$FUSE_MODE" /dev/fuse
  for m in "$WORK"/*/mnt "$WORK/native" "$WORK/user-native"; do
    mountpoint -q "$m" 2>/dev/null && { "$BIN" umount "$m" 2>/dev/null || umount -l "$m"; }
  done
  if [ -n "$SSHD_PID" ]; then kill "$SSHD_PID" 2>/dev/null; wait "$SSHD_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
# pjdfstest switches to unprivileged users, who must be able to reach the dir.
chmod 755 "$WORK"

summary() { grep '^Summary:' "$1" | tail -1; }
failed_names() { grep -E 'FAILED$' "$1" | awk '{print $1}' | sort -u; }

mkdir "$WORK/native" && mount -t tmpfs tmpfs "$WORK/native"
(cd "$WORK" && timeout 600 pjdfstest -c "$OLDPWD/$CONF" -p native >native.log 2>&1) || true
echo "native tmpfs:  $(summary "$WORK/native.log")"
want=$(summary "$WORK/native.log" | sed 's/, [0-9]* total//')

status=0
runs=0
# One line per configuration: label, filesystem, transport, extra mount
# arguments. io_uring rows run only where the kernel has it switched on;
# their plain rows are the replaced ones (a supervised io_uring mount
# serves the same way when nothing is replaced).
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
stackfs-uring-replaced stackfs uring --max-restarts 100000
memfs-uring-upgraded memfs uring
pathfs-uring-replaced pathfs uring --max-restarts 100000
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
# As an ordinary user (nobody): the user's own mounts through fusermount3,
# without allow_other, and pjdfstest run by the user (the tests that need
# root skip themselves), against the same user on native tmpfs. /dev/fuse
# is open to users for these rows only, as desktop distributions have it;
# cleanup puts its mode back whatever happens.
FUSE_MODE=$(stat -c %a /dev/fuse)
chmod 666 /dev/fuse
as_user() { setpriv --reuid=65534 --regid=65534 --clear-groups env -u XDG_RUNTIME_DIR HOME=/tmp "$@"; }
install -m 755 "$(command -v pjdfstest)" "$WORK/pjdfstest-user"
conf_abs=$(realpath "$CONF")
mkdir "$WORK/user-native" && mount -t tmpfs -o mode=755,uid=65534,gid=65534 tmpfs "$WORK/user-native"
(cd "$WORK" && as_user timeout 600 "$WORK/pjdfstest-user" -c "$conf_abs" -p user-native >user-native.log 2>&1) || true
echo "native tmpfs as nobody:  $(summary "$WORK/user-native.log")"
want_user=$(summary "$WORK/user-native.log" | sed 's/, [0-9]* total//')
user_rows="stackfs pathfs memfs"
expected=$((expected + $(wc -w <<< "$user_rows")))
for fs in $user_rows; do
  label="$fs-user"
  dir="$WORK/u-$fs"
  mkdir -p "$dir/src" "$dir/mnt"
  chown -R 65534:65534 "$dir"
  if [ "$fs" != memfs ]; then args=("$dir/src" "$dir/mnt"); else args=("$dir/mnt"); fi
  if ! as_user "$BIN" mount "$fs" "${args[@]}" >/dev/null; then
    echo "$label: the user could not mount"; status=1; continue
  fi
  (cd "$dir" && as_user timeout 600 "$WORK/pjdfstest-user" -c "$conf_abs" -p mnt >pjd.log 2>&1) || true
  got=$(summary "$dir/pjd.log" | sed 's/, [0-9]* total//')
  echo "$label:  $(summary "$dir/pjd.log")"
  runs=$((runs + 1))
  if [ -z "$got" ] || [ "$got" != "$want_user" ]; then
    echo "pjdfstest as nobody on $fs differs from native tmpfs as nobody; failures:"
    grep -E 'FAILED|failed$' "$dir/pjd.log" | head -40 || true
    grep -E -A3 "panicked at|called \`" "$dir/pjd.log" | head -40 || true
    status=1
  fi
  as_user "$BIN" umount "$dir/mnt" || { echo "$label: the user could not unmount"; status=1; }
done
umount "$WORK/user-native"
chmod "$FUSE_MODE" /dev/fuse
FUSE_MODE=

# libfuse's passthrough_ll (built from Debian's fuse3 source, unchanged) on
# Debian's libfuse3 and on fusebox's drop-in, in this same run: the drop-in
# must pass every test Debian's passes. A test that fails on the drop-in
# only is run again alone (three tries): one that then passes is a race in
# the test itself (open::etxtbsy fails now and then on either library) and
# is reported, not counted. DROPIN_LIB: a directory holding fusebox's
# libfuse3.so.3; EXAMPLES: scripts/libfuse-examples.sh's output.
DROPIN_LIB=${DROPIN_LIB:-}
EXAMPLES=${EXAMPLES:-/var/cache/fusebox/libfuse-examples/bin}
if [ -n "$DROPIN_LIB" ]; then
  # Mount passthrough_ll on library $1 at $2/mnt over $2/src; prints the pid.
  mount_ll() {
    local libpath=
    [ "$1" = fusebox ] && libpath=$DROPIN_LIB
    LD_LIBRARY_PATH=$libpath "$EXAMPLES/passthrough_ll" -f \
      -o source="$2/src",allow_other,default_permissions "$2/mnt" >>"$2/daemon.log" 2>&1 &
    echo $!
    for _ in $(seq 100); do mountpoint -q "$2/mnt" && return 0; sleep 0.1; done
    return 1
  }
  # The daemon is not this shell's child (started inside $(...)): wait
  # for it to go by its pid.
  unmount_ll() {
    umount "$1/mnt" 2>/dev/null || umount -l "$1/mnt"
    for _ in $(seq 100); do kill -0 "$2" 2>/dev/null || return 0; sleep 0.1; done
    echo "passthrough_ll (pid $2) did not exit after umount"; kill "$2" 2>/dev/null || true
  }
  ll_ok=1
  for lib in debian fusebox; do
    dir="$WORK/ll-$lib"
    mkdir -p "$dir/src" "$dir/mnt"
    if ! daemon=$(mount_ll $lib "$dir"); then
      echo "passthrough_ll on $lib libfuse3 did not mount:"; cat "$dir/daemon.log"
      ll_ok=0; continue
    fi
    (cd "$dir" && timeout 600 pjdfstest -c "$OLDPWD/$CONF" -p mnt >pjd.log 2>&1) || true
    echo "passthrough_ll on $lib libfuse3:  $(summary "$dir/pjd.log")"
    unmount_ll "$dir" "$daemon"
  done
  if [ $ll_ok = 1 ]; then
    only_ours=$(comm -13 <(failed_names "$WORK/ll-debian/pjd.log") <(failed_names "$WORK/ll-fusebox/pjd.log"))
    if [ -n "$only_ours" ]; then
      dir="$WORK/ll-fusebox"
      daemon=$(mount_ll fusebox "$dir") || ll_ok=0
      for t in $only_ours; do
        passed=0
        for try in 1 2 3; do
          if (cd "$dir" && timeout 120 pjdfstest -c "$OLDPWD/$CONF" -p mnt -e "$t" >"retry-$try.log" 2>&1) \
             && grep -q '^Summary: 0 failed' "$dir/retry-$try.log"; then
            passed=1; break
          fi
        done
        if [ $passed = 1 ]; then
          echo "passthrough_ll: $t failed on the drop-in only, then passed alone (try $try): a race in the test"
        else
          echo "passthrough_ll: $t passes on Debian's libfuse3 and fails on the drop-in"
          ll_ok=0
        fi
      done
      unmount_ll "$dir" "$daemon"
    fi
  fi
  [ $ll_ok = 1 ] || status=1
fi
# Direct mode (fusebox run --fs): the suite inside pjdfstest's own process,
# next to the kernel path's row of the same filesystem. What it does not
# pass yet is listed by name (LIST): a failure not listed fails the run; a
# listed test that passes is reported, so the list only shrinks.
bin_abs=$(realpath "$BIN")
direct_row() { # LABEL SPEC LIST KERNEL_ROW_DIR KERNEL_ROW_LABEL
  local label=$1 spec=$2 list=$3 dir="$WORK/$1"
  mkdir -p "$dir/src"
  spec=${spec//@SRC@/$dir/src}
  (cd "$dir" && timeout 600 "$bin_abs" run --fs "$spec" --at "$dir/mnt" -- \
    pjdfstest -c "$OLDPWD/$CONF" -p mnt >pjd.log 2>&1) || true
  echo "$label:  $(summary "$dir/pjd.log")  (kernel path, $5: $(summary "$WORK/$4/pjd.log"))"
  local known new fixed
  known=$(grep -v '^#' "$list" | sort -u)
  if ! grep -q '^Summary:' "$dir/pjd.log"; then
    echo "$label: pjdfstest did not finish:"; tail -20 "$dir/pjd.log"
    status=1
    return
  fi
  new=$(comm -13 <(echo "$known") <(failed_names "$dir/pjd.log"))
  fixed=$(comm -23 <(echo "$known") <(failed_names "$dir/pjd.log"))
  if [ -n "$new" ]; then
    echo "$label: failures not in $list:"; echo "$new"
    status=1
  fi
  [ -z "$fixed" ] || { echo "$label: now passing (remove from the list):"; echo "$fixed"; }
}
direct_row stackfs-direct "stackfs:@SRC@" tests/direct-known-failures.txt c1 stackfs-classic
# memfs's files live in the run's server.
direct_row memfs-direct memfs tests/direct-memfs-known-failures.txt c3 memfs-classic
# sftpfs over an OpenSSH server on loopback (`fusebox test-sshd`: throwaway
# keys, logged in as root), once as it is and once with its server
# replaced every ~0.3 s (SIGKILL and `fusebox upgrade` in turn). What SFTP
# cannot carry (FIFOs and devices, link counts, ctime and sub-second
# times, the owner of new files) is listed by name in
# tests/sftpfs-known-failures.txt, as direct mode's list is.
sftp_known=$(grep -v '^#' tests/sftpfs-known-failures.txt | sort -u)
mkdir -p "$WORK/sshd"
"$BIN" test-sshd "$WORK/sshd" & SSHD_PID=$!
for _ in $(seq 100); do [ -f "$WORK/sshd/ssh-options" ] && break; sleep 0.1; done
if [ ! -f "$WORK/sshd/ssh-options" ]; then
  echo "sftpfs: the test sshd did not start"; status=1
else
  for label in sftpfs sftpfs-replaced; do
    dir="$WORK/$label"
    mkdir -p "$dir/remote" "$dir/mnt"
    extra=()
    [ "$label" = sftpfs-replaced ] && extra=(--max-restarts 100000)
    "$BIN" mount sftpfs "root@127.0.0.1:$dir/remote" "$dir/mnt" "${extra[@]}" \
      -o "$(cat "$WORK/sshd/ssh-options"),allow_other,default_permissions" >/dev/null
    killer=
    if [ "$label" = sftpfs-replaced ]; then
      (
        n=0
        while mountpoint -q "$dir/mnt"; do
          sleep 0.3
          n=$((n + 1))
          if [ $((n % 2)) = 0 ]; then "$BIN" upgrade "$dir/mnt" >/dev/null 2>&1 || true; continue; fi
          pid=$("$BIN" stats "$dir/mnt" 2>/dev/null | sed -n '1s/.*  pid \([0-9]*\) .*/\1/p' || true)
          if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null || true; fi
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
      if [ "${restarts:-0}" -lt 1 ] || [ "${generation:-1}" -le $((${restarts:-0} + 1)) ]; then
        echo "$label: no kill or no upgrade happened: the row tested too little"; status=1
      fi
    fi
    echo "$label:  $(summary "$dir/pjd.log")"
    if ! grep -q '^Summary:' "$dir/pjd.log"; then
      echo "$label: pjdfstest did not finish:"; tail -20 "$dir/pjd.log"; status=1
    else
      new=$(comm -13 <(echo "$sftp_known") <(failed_names "$dir/pjd.log"))
      fixed=$(comm -23 <(echo "$sftp_known") <(failed_names "$dir/pjd.log"))
      if [ -n "$new" ]; then
        echo "$label: failures not in tests/sftpfs-known-failures.txt:"; echo "$new"
        grep -E -A3 "panicked at|called \`" "$dir/pjd.log" | head -40 || true
        status=1
      fi
      [ -z "$fixed" ] || { echo "$label: now passing (remove from the list):"; echo "$fixed"; }
    fi
    "$BIN" umount "$dir/mnt"
  done
fi
if [ "$runs" != "$expected" ]; then
  echo "pjdfstest: ran $runs of $expected configurations"
  status=1
fi
if [ $status = 0 ]; then echo "pjdfstest: $runs passed, 0 failed"; fi
exit $status
