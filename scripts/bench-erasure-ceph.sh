#!/usr/bin/env bash
# Erasure-coded pools, Optio against Ceph, in one run (issue 41): 4 MiB objects written then
# read back at CONCURRENCY in flight on a 4+2 pool of 6 devices each.
#   Optio: `optio up --zones 3 --hosts 2 --erasure 4+2` (6 servers, one device each; the pool
#          `ec`, one chunk per host), `optio bench --pool ec`.
#   Ceph:  ../shared/anchors/ceph-mini with CEPH_MINI_OSDS=6, an erasure-code profile
#          k=4 m=2 crush-failure-domain=osd and a pool on it, `rados bench write` then `seq`.
# Prints MB/s (10^6 bytes a second) of each and the ratios. Needs root for ceph-mini (it installs Ceph if missing).
# Usage: scripts/bench-erasure-ceph.sh [BUILD (target/release/optio)]
#   env: OBJECTS (120: Optio's objects), SECONDS_CEPH (20: rados bench per phase),
#        CONCURRENCY (4)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$root/target/release/optio}
objects=${OBJECTS:-120} seconds=${SECONDS_CEPH:-20} concurrency=${CONCURRENCY:-4}
ceph_mini="$root/../shared/anchors/ceph-mini/ceph-mini.sh"
[ -x "$bin" ] || { echo "$bin: not an executable (cargo build --release -p optio)" >&2; exit 1; }
[ -x "$ceph_mini" ] || { echo "$ceph_mini not found" >&2; exit 1; }
command -v jq >/dev/null || { echo "jq not found: apt-get install -y jq" >&2; exit 1; }
work=$(mktemp -d)
ceph_dir="$work/ceph"
up_pid=""
cleanup() {
  if [ -n "$up_pid" ]; then kill -INT "$up_pid" 2>/dev/null || true; wait "$up_pid" 2>/dev/null || true; fi
  [ -e "$ceph_dir/.ceph-mini" ] && "$ceph_mini" stop "$ceph_dir" > /dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== Optio: 6 servers, pool ec (4+2), $objects objects of 4 MiB, $concurrency in flight"
"$bin" up --dir "$work/optio" --zones 3 --hosts 2 --capacity 64GiB --erasure 4+2 > "$work/up.log" 2>&1 &
up_pid=$!
for _ in $(seq 300); do grep -q "Ctrl-C" "$work/up.log" && break; sleep 0.1; done
grep -q "Ctrl-C" "$work/up.log" || { cat "$work/up.log"; exit 1; }
"$bin" bench --cluster "$work/optio" --pool ec --objects "$objects" --size 4MiB \
  --concurrency "$concurrency" --json > "$work/optio.json"
optio_write=$(jq '.write.mb_per_s * 10 | floor / 10' "$work/optio.json")
optio_read=$(jq '.read.mb_per_s * 10 | floor / 10' "$work/optio.json")
kill -INT "$up_pid"; wait "$up_pid" 2>/dev/null || true; up_pid=""
echo "optio: write $optio_write MB/s, read $optio_read MB/s"

echo "== Ceph: ceph-mini, 6 BlueStore OSDs, pool ecbench (k=4 m=2, failure domain osd)"
CEPH_MINI_OSDS=6 CEPH_MINI_PREFILL=0 "$ceph_mini" start "$ceph_dir" > "$work/ceph-start.log" 2>&1 \
  || { tail -20 "$work/ceph-start.log"; exit 1; }
export CEPH_CONF="$ceph_dir/ceph.conf"
ceph osd erasure-code-profile set optio41 k=4 m=2 crush-failure-domain=osd > /dev/null
ceph osd pool create ecbench 32 32 erasure optio41 > /dev/null 2>&1
ceph osd pool application enable ecbench rados > /dev/null 2>&1 || true
for _ in $(seq 120); do
  ceph pg stat 2>/dev/null | grep -q "32 active+clean" && ! ceph pg stat | grep -q -E "creating|peering|unknown" && break
  sleep 1
done
rados bench -p ecbench "$seconds" write -b 4194304 -t "$concurrency" --no-cleanup > "$work/ceph-write.txt"
rados bench -p ecbench "$seconds" seq -t "$concurrency" > "$work/ceph-read.txt"
# (rados bench's "MB/sec" is MiB/s; Optio's MB/s are 10^6 bytes: both as 10^6 here.)
mbps() { awk '/^Total (writes|reads) made:/ { ops = $4 } /^Total time run:/ { secs = $4 }
  END { printf "%.1f", ops * 4194304 / secs / 1e6 }' "$1"; }
ceph_write=$(mbps "$work/ceph-write.txt")
ceph_read=$(mbps "$work/ceph-read.txt")
echo "ceph: write $ceph_write MB/s, read $ceph_read MB/s"
awk -v ow="$optio_write" -v or="$optio_read" -v cw="$ceph_write" -v cr="$ceph_read" 'BEGIN {
  printf "optio / ceph: write %.2fx, read %.2fx\n", ow / cw, or / cr }'
