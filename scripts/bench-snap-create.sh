#!/usr/bin/env bash
# `optio volume snap create` while `optio nbd` holds the volume: with no I/O, then while fio
# (nbd engine) writes 4 KiB random blocks at queue depth 32 through it (the case where the
# lock holder must stop its writes, wait for those in flight, and record the mark). Prints
# each create's own elapsed_ms (the command's --json) and the median and largest of each set.
# Issue 40's target: <= 50 ms. Optio only (scripts/bench-snap-vs-rbd.sh has Ceph RBD beside it).
# Usage: scripts/bench-snap-create.sh [CREATES (9)]     env: OPTIO (target/release/optio)
set -euo pipefail
n=${1:-9}
optio=$(realpath "${OPTIO:-target/release/optio}")
for tool in fio jq; do command -v "$tool" >/dev/null || { echo "$tool not found: apt-get install -y $tool" >&2; exit 1; }; done
work=$(mktemp -d)
up_pid="" nbd_pid="" fio_pid=""
cleanup() {
  for pid in $fio_pid $nbd_pid $up_pid; do kill -INT "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
"$optio" up --dir "$work/c" --zones 3 --hosts 1 > "$work/up.log" 2>&1 &
up_pid=$!
for _ in $(seq 300); do grep -q "Ctrl-C" "$work/up.log" && break; sleep 0.1; done
grep -q "Ctrl-C" "$work/up.log" || { cat "$work/up.log"; exit 1; }
"$optio" volume create vm 1GiB --cluster "$work/c" > /dev/null
sock="$work/nbd.sock"
"$optio" nbd vm --socket "$sock" --cluster "$work/c" > "$work/nbd.out" 2> "$work/nbd.err" &
nbd_pid=$!
for _ in $(seq 300); do grep -qF "serving nbd+unix:///vm?" "$work/nbd.out" && break; sleep 0.1; done
grep -qF "serving nbd+unix:///vm?" "$work/nbd.out" || { cat "$work/nbd.out" "$work/nbd.err"; exit 1; }
creates() { # TAG: elapsed_ms of N creates, one per line
  for i in $(seq "$n"); do
    "$optio" volume snap create "vm@$1$i" --json --cluster "$work/c" | jq -r .elapsed_ms
  done
}
summary() { sort -n | awk '{ a[NR] = $1 } END { printf "median %.1f ms, largest %.1f ms (of %d)\n", a[int((NR + 1) / 2)], a[NR], NR }'; }
echo "optio nbd holding the lock, no I/O:  $(creates idle | tee "$work/idle" | summary)"
fio --name=writer --ioengine=nbd --uri="nbd+unix:///vm?socket=$sock" --rw=randwrite --bs=4k \
  --iodepth=32 --size=64m --randrepeat=0 --norandommap --time_based --runtime=600 \
  --output-format=json > "$work/fio.json" 2> "$work/fio.err" &
fio_pid=$!
sleep 3
echo "while fio randwrite 4 KiB qd 32:     $(creates busy | tee "$work/busy" | summary)"
echo "  each (ms): $(awk '{ printf "%.1f ", $1 }' "$work/busy")"
kill -INT "$fio_pid"; wait "$fio_pid" 2>/dev/null || true; fio_pid=""
iops=$(python3 -c 'import json, sys; t = open(sys.argv[1]).read(); print(round(json.loads(t[t.index("{"):])["jobs"][0]["write"]["iops"]))' "$work/fio.json")
echo "  the writer: $iops IOPS over its run"
