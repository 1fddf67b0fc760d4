#!/usr/bin/env bash
# Fetches the source distribution of the pyfuse3 Debian installed
# (python3-pyfuse3), with its test suite and example filesystems, into DIR
# (default /var/cache/fusebox/pyfuse3), from PyPI (Debian's mirror here
# lacks the source tarball). Prints the unpacked directory. Safe to run
# again.
set -euo pipefail
out=${1:-/var/cache/fusebox/pyfuse3}
version=$(/usr/bin/python3 -c 'import pyfuse3; print(pyfuse3.__version__)')
dir="$out/pyfuse3-$version"
if [ ! -f "$dir/test/test_fs.py" ]; then
  mkdir -p "$out"
  /usr/bin/python3 -m pip download --quiet --no-deps --no-binary :all: \
    "pyfuse3==$version" -d "$out" >/dev/null 2>&1 \
    || python3 -m pip download --quiet --no-deps --no-binary :all: "pyfuse3==$version" -d "$out"
  tar -C "$out" -xzf "$out/pyfuse3-$version.tar.gz"
fi
echo "$dir"
