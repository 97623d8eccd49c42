#!/usr/bin/env bash
# The S3 gateway against Optio's own client, side by side on one cluster (release build,
# `optio up` defaults: 3 zones x 3 hosts, r = 3, k = 2): `optio bench s3` alternates native
# and S3 rounds and keeps the best of each —
#   4 MiB objects: S3 PUT/GET MB/s ÷ optio put/get (target >= 0.80);
#   4 KiB objects: S3 PUT/GET ops/s ÷ optio put/get (target >= 0.50);
# then fills a bucket with LIST_KEYS empty objects and times a full ListObjectsV2
# (target >= 50,000 keys/s at 1,000,000 keys).
# Usage: scripts/bench-s3.sh [CONCURRENCY (default 8)] [LIST_KEYS (default 1000000)]
set -euo pipefail
concurrency=${1:-8}
list_keys=${2:-1000000}
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p optio
optio="${CARGO_TARGET_DIR:-$root/target}/release/optio"
work=$(mktemp -d)
up_pid=""
s3_pid=""
cleanup() {
  [ -n "$s3_pid" ] && kill "$s3_pid" 2>/dev/null || true
  if [ -n "$up_pid" ]; then kill -INT "$up_pid" 2>/dev/null || true; wait "$up_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
"$optio" up --dir "$work/cluster" >"$work/up.log" 2>&1 &
up_pid=$!
export OPTIO_CLUSTER="$work/cluster"
for _ in $(seq 1 200); do "$optio" status >/dev/null 2>&1 && break; sleep 0.2; done
keys=$("$optio" s3 user create bench --json)
export OPTIO_S3_ACCESS_KEY=$(echo "$keys" | python3 -c 'import json,sys; print(json.load(sys.stdin)["access_key"])')
export OPTIO_S3_SECRET_KEY=$(echo "$keys" | python3 -c 'import json,sys; print(json.load(sys.stdin)["secret_key"])')
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$optio" s3 --listen "127.0.0.1:$port" >"$work/s3.log" 2>&1 &
s3_pid=$!
for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$port/_optio/metrics" && break; sleep 0.1; done
endpoint="http://127.0.0.1:$port"
echo "== 4 MiB objects, $concurrency in flight"
"$optio" bench s3 --endpoint "$endpoint" --size 4MiB --objects 64 --concurrency "$concurrency" --rounds 3
echo
echo "== 4 KiB objects, $concurrency in flight"
"$optio" bench s3 --endpoint "$endpoint" --size 4KiB --objects 2000 --concurrency "$concurrency" --rounds 3
if [ "$list_keys" -gt 0 ]; then
  echo
  echo "== listing $list_keys keys"
  "$optio" bench s3 --endpoint "$endpoint" --bucket listing --list-keys "$list_keys" --concurrency 32
fi
