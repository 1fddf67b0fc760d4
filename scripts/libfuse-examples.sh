#!/usr/bin/env bash
# Builds libfuse's example programs from Debian's own source package of
# fuse3 (3.14) against Debian's headers, unchanged, into DIR (default
# /var/cache/fusebox/libfuse-examples): what tests/programs.rs runs on the
# drop-in. Adds a deb-src entry for the mirror apt already uses when none
# is there. Safe to run again (does nothing once built).
set -euo pipefail
out=${1:-/var/cache/fusebox/libfuse-examples}
if [ -x "$out/bin/hello" ] && [ -x "$out/bin/passthrough_hp" ] && [ -x "$out/bin/printcap" ]; then
  exit 0
fi
if ! grep -rqs '^Types:.*deb-src' /etc/apt/sources.list.d/ && ! grep -qs '^deb-src' /etc/apt/sources.list; then
  echo "libfuse-examples: adding a deb-src entry for Debian's mirror"
  cat > /etc/apt/sources.list.d/fusebox-deb-src.sources <<SRC
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  apt-get update -qq
fi
mkdir -p "$out/src" "$out/bin"
cd "$out/src"
if [ ! -d fuse3-* ] 2>/dev/null || ! ls -d fuse3-*/example >/dev/null 2>&1; then
  apt-get source -qq fuse3 >/dev/null 2>&1 || apt-get source fuse3
fi
src=$(ls -d "$out"/src/fuse3-*/example | head -1)
flags=$(pkg-config --cflags --libs fuse3)
# Debian links with BIND_NOW; so do these (a missing symbol fails at start).
# (cuse and hello_ll_uds need interfaces outside FUSE mounts: not built.)
for c in hello hello_ll passthrough passthrough_fh passthrough_ll null notify_inval_inode \
         notify_inval_entry notify_store_retrieve invalidate_path poll poll_client ioctl \
         ioctl_client printcap; do
  [ -f "$src/$c.c" ] || continue
  gcc -Wall -O2 -Wl,-z,now -I"$src" "$src/$c.c" -o "$out/bin/$c" $flags -lpthread 2>"$out/bin/$c.log" \
    || { echo "libfuse-examples: $c did not build (see $out/bin/$c.log)"; }
done
if [ -f "$src/passthrough_hp.cc" ]; then
  g++ -std=c++17 -O2 -Wl,-z,now -I"$src" "$src/passthrough_hp.cc" -o "$out/bin/passthrough_hp" $flags -lpthread \
    2>"$out/bin/passthrough_hp.log" || echo "libfuse-examples: passthrough_hp did not build"
fi
ls "$out/bin" | grep -v '\.log$' | tr '\n' ' '; echo
