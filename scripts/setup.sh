#!/usr/bin/env bash
# Installs what fusebox's build, tests and demo need on a fresh Debian 12
# machine (root): FUSE userspace, fio, libfuse's examples, pjdfstest; turns
# on FUSE-over-io_uring. Safe to run again. (fusectl, to abort a hung
# connection, is mounted by fusebox itself when needed and unmounted after.)
set -euo pipefail
need=()
# meson, ninja-build, g++, liburing-dev: to build libfuse's io_uring peer
# when the bench is given a libfuse source tree (--libfuse-src).
# sshfs, squashfuse, fuse-overlayfs, python3-pyfuse3 (+ squashfs-tools,
# openssh-server): unchanged Debian programs the libfuse3 drop-in runs.
# e2fsprogs: ext4 on fusebox block devices in the tests; nbdkit, libnbd-bin
# (nbdfuse) and qemu-system-common (qemu-storage-daemon): the blk bench's peers.
# iproute2 (ss): a direct-mode test finds the run's server by its socket.
# rsync, sqlite3, git: programs the sftpfs tests run on the mount;
# rclone: the sftp bench's peer (rclone mount), beside sshfs; s3fs: the
# objfs bench's peer, beside rclone.
for pkg in fuse3 libfuse3-dev fio pkg-config gcc python3 meson ninja-build g++ liburing-dev \
           sshfs squashfuse squashfs-tools fuse-overlayfs python3-pyfuse3 python3-pytest python3-pip openssh-server \
           e2fsprogs nbdkit libnbd-bin qemu-system-common iproute2 rsync sqlite3 git rclone s3fs; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "setup: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
# io_uring transport (used by later fusebox releases; harmless now).
if [ -w /sys/module/fuse/parameters/enable_uring ]; then
  echo Y > /sys/module/fuse/parameters/enable_uring || true
fi
if [ "${1:-}" = --pjdfstest ] && ! command -v pjdfstest >/dev/null; then
  echo "setup: cargo install pjdfstest (about two minutes)"
  cargo install pjdfstest --locked --quiet
fi
# gofakes3: the S3 server objfs's tests run against (a Go program from the
# Go module proxy, 20 s to build); Garage, for the cluster tests and the
# bench, takes 15 minutes: scripts/objfs-cluster.sh builds it.
if ! command -v gofakes3 >/dev/null; then
  export PATH="$PATH:/usr/local/go/bin"
  command -v go >/dev/null || { echo "setup: go is needed for gofakes3 (the objfs tests' S3 server)"; exit 1; }
  echo "setup: go install gofakes3 (about 30 seconds)"
  GOBIN=/usr/local/bin go install github.com/johannesboyne/gofakes3/cmd/gofakes3@v1.2.0
fi
# cargo-deb: the Debian package (scripts/package.sh; the install test).
if [ "${1:-}" = --pjdfstest ] && ! command -v cargo-deb >/dev/null; then
  echo "setup: cargo install cargo-deb (about a minute)"
  cargo install cargo-deb --locked --quiet --version '^3'
fi
