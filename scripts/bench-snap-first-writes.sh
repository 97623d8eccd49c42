#!/usr/bin/env bash
# Writes right after a snapshot, Optio alone (issue 40; the side-by-side run with Ceph RBD is
# scripts/bench-snap-vs-rbd.sh): its own `optio up`, a 1 GiB volume written whole (4 MiB
# objects) through `optio nbd`, fio randwrite 4 KiB qd 32 for SECONDS; `snap create`; the same
# run again. Prints the IOPS of each second of both runs: the first seconds after the snapshot
# carry the copies (each object's first write after it copies the object on each replica).
# Each write run is followed by fio randread 4 KiB qd 32 for SECONDS (after the snapshot's, the
# objects are clones and heads: with `redirect`, heads that hold only the blocks written).
# Usage: scripts/bench-snap-first-writes.sh [SECONDS (default 10)]; OPTIO (default
# target/release/optio of this checkout), TMPDIR; OPTIO_SNAPSHOT_COPY=blocks|redirect to have the
# servers copy blocks, or nothing, rather than objects (docs/volumes.md). Needs fio with the nbd engine.
set -euo pipefail
seconds=${1:-10}
case "$seconds" in '' | *[!0-9]*) echo "SECONDS must be a number (got $seconds)" >&2; exit 1 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
optio=${OPTIO:-$root/target/release/optio}
[ -x "$optio" ] || { echo "no optio binary at $optio: cargo build --release -p optio, or set OPTIO" >&2; exit 1; }
fio --enghelp=nbd >/dev/null 2>&1 || { echo "fio with the nbd engine is needed (apt-get install fio)" >&2; exit 1; }
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-snap-first.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
"$optio" up --dir "$work/cluster" --capacity 64GiB > "$work/up.log" 2>&1 &
pids+=($!)
for _ in $(seq 600); do grep -q "Ctrl-C" "$work/up.log" && break; sleep 0.1; done
grep -q "Ctrl-C" "$work/up.log" || { echo "optio up did not come up:" >&2; cat "$work/up.log" >&2; exit 1; }
export OPTIO_CLUSTER="$work/cluster"
sock="$work/nbd.sock"
"$optio" volume create w 1GiB > /dev/null
"$optio" nbd w --socket "$sock" > "$work/nbd.out" 2> "$work/nbd.err" &
pids+=($!)
for _ in $(seq 300); do grep -q serving "$work/nbd.out" && break; sleep 0.1; done
grep -q serving "$work/nbd.out" || { echo "optio nbd did not start:" >&2; cat "$work/nbd.err" >&2; exit 1; }
io=(--ioengine=nbd "--uri=nbd+unix:///w?socket=$sock" --size=1g)
run() { # NAME fio-args...
  local name=$1; shift
  fio --name="$name" "${io[@]}" "$@" --output-format=json > "$work/$name.json" 2> "$work/$name.err" \
    || { echo "fio $name failed:" >&2; cat "$work/$name.err" >&2; exit 1; }
}
run fill --rw=write --bs=4M --iodepth=8
sync
rw=(--rw=randwrite --bs=4k --iodepth=32 --randrepeat=0 --norandommap --time_based "--runtime=$seconds" --log_avg_msec=1000)
rr=(--rw=randread --bs=4k --iodepth=32 --randrepeat=0 --norandommap --time_based "--runtime=$seconds")
run before "${rw[@]}" --write_iops_log="$work/before"
run read-before "${rr[@]}"
"$optio" volume snap create w@s
run after "${rw[@]}" --write_iops_log="$work/after"
run read-after "${rr[@]}"
per_second() { cut -d, -f2 "$1" | tr -d ' ' | paste -sd' '; }
iops() { # fio may print notes before its JSON
  python3 -c 'import json,sys; t=open(sys.argv[1]).read(); print(round(json.loads(t[t.index("{"):])["jobs"][0]["read"]["iops"]))' "$1"
}
echo "randwrite 4 KiB qd 32, IOPS per second: without a snapshot: $(per_second "$work/before_iops.1.log")"
echo "right after snap create:                               $(per_second "$work/after_iops.1.log")"
echo "randread 4 KiB qd 32 (IOPS) after the writes: without a snapshot $(iops "$work/read-before.json"), after the snapshot's $(iops "$work/read-after.json")"
