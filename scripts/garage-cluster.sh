#!/usr/bin/env bash
# A Garage cluster on this machine: three nodes on 127.0.0.1, one zone,
# replication factor 3, each node with its own S3 endpoint, the bucket
# "objfs" and one key. objfs's cluster tests and bench start it through
# this script (crates/bench/src/objstore.rs), and so can you:
#
#   scripts/garage-cluster.sh up DIR        # make and start (prints the endpoints)
#   scripts/garage-cluster.sh node-down DIR N   # kill -9 node N (0-2): a machine lost
#   scripts/garage-cluster.sh node-up DIR N     # start node N again
#   scripts/garage-cluster.sh down DIR      # stop every node (DIR stays)
#
# Garage comes from `garage` on PATH, $FUSEBOX_GARAGE, or the copy
# scripts/objfs-cluster.sh builds (~/.cache/fusebox/garage). Requests a
# node cannot answer for lack of a quorum fail after
# $GARAGE_RPC_TIMEOUT_MS (default 5000; Garage's own default is 300 s).
# Credentials: AWS_ACCESS_KEY_ID=GK0000000000000000000f0b0,
# AWS_SECRET_ACCESS_KEY=5ec2e7...f0b0 (the full value is in DIR/env).
set -euo pipefail
cmd=${1:?usage: garage-cluster.sh up|down|node-up|node-down DIR [N]}
dir=${2:?usage: garage-cluster.sh $cmd DIR}
key_id=GK0000000000000000000f0b0
secret=5ec2e7000000000000000000000000000000000000000000000000000000f0b0
admin_token=fusebox-objfs-test-admin
garage=${FUSEBOX_GARAGE:-$(command -v garage || true)}
if [ -z "$garage" ]; then
  for c in "$HOME/.cache/fusebox/garage/bin/garage" /var/tmp/garage/bin/garage; do
    [ -x "$c" ] && { garage=$c; break; }
  done
fi
[ -x "$garage" ] || { echo "garage-cluster: garage is not installed (scripts/objfs-cluster.sh builds it)" >&2; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
g() { "$garage" -c "$dir/node$1/garage.toml" "${@:2}"; }
# A fresh node answers "not ready" for a moment: retry for up to 30 s.
settled() { for _ in $(seq 150); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done; "$@"; }

node_up() {
  local n=$1 pidf="$dir/node$1/pid"
  if [ -f "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null; then return 0; fi
  RUST_LOG=warn setsid "$garage" -c "$dir/node$n/garage.toml" server >>"$dir/node$n/garage.log" 2>&1 < /dev/null &
  echo $! > "$pidf"
  local port; port=$(sed -n 's/^S3_PORT_'"$n"'=//p' "$dir/ports")
  for _ in $(seq 300); do
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    kill -0 "$(cat "$pidf")" 2>/dev/null || { echo "garage-cluster: node $n exited: $(tail -3 "$dir/node$n/garage.log")" >&2; exit 1; }
    sleep 0.1
  done
  echo "garage-cluster: node $n did not listen" >&2; exit 1
}

node_down() {
  local pidf="$dir/node$1/pid"
  [ -f "$pidf" ] || return 0
  local pid; pid=$(cat "$pidf")
  kill -9 "$pid" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  rm -f "$pidf"
}

case $cmd in
up)
  mkdir -p "$dir"
  rpc_secret=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
  : > "$dir/ports"
  for n in 0 1 2; do
    mkdir -p "$dir/node$n/meta" "$dir/node$n/data"
    rpc=$(free_port); s3=$(free_port); admin=$(free_port)
    printf 'S3_PORT_%s=%s\nADMIN_PORT_%s=%s\n' "$n" "$s3" "$n" "$admin" >> "$dir/ports"
    cat > "$dir/node$n/garage.toml" <<EOF
metadata_dir = "$dir/node$n/meta"
data_dir = "$dir/node$n/data"
db_engine = "sqlite"
metadata_fsync = false
data_fsync = false
replication_factor = 3
compression_level = "none"
rpc_bind_addr = "127.0.0.1:$rpc"
rpc_public_addr = "127.0.0.1:$rpc"
rpc_secret = "$rpc_secret"
rpc_timeout_msec = ${GARAGE_RPC_TIMEOUT_MS:-5000}

[s3_api]
s3_region = "us-east-1"
api_bind_addr = "127.0.0.1:$s3"
root_domain = ".s3.garage.localhost"

[admin]
api_bind_addr = "127.0.0.1:$admin"
admin_token = "$admin_token"
metrics_token = "$admin_token"
EOF
  done
  for n in 0 1 2; do node_up $n; done
  ids=()
  for n in 0 1 2; do
    settled g $n node id -q
    ids+=("$(g $n node id -q 2>/dev/null)")
  done
  for id in "${ids[@]:1}"; do settled g 0 node connect "$id"; done
  for id in "${ids[@]}"; do settled g 0 layout assign -z dc1 -c 1G "${id%@*}"; done
  settled g 0 layout apply --version 1
  settled g 0 key import -n objfs --yes "$key_id" "$secret"
  settled g 0 bucket create objfs
  settled g 0 bucket allow --read --write --owner objfs --key "$key_id"
  {
    echo "AWS_ACCESS_KEY_ID=$key_id"
    echo "AWS_SECRET_ACCESS_KEY=$secret"
    echo "AWS_REGION=us-east-1"
    for n in 0 1 2; do echo "ENDPOINT_$n=http://127.0.0.1:$(sed -n 's/^S3_PORT_'"$n"'=//p' "$dir/ports")"; done
  } > "$dir/env"
  cat "$dir/env"
  ;;
node-up) node_up "${3:?node number}" ;;
node-down) node_down "${3:?node number}" ;;
down) for n in 0 1 2; do node_down $n; done ;;
*) echo "garage-cluster: unknown command $cmd" >&2; exit 2 ;;
esac
