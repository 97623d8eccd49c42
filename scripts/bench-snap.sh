#!/usr/bin/env bash
# Snapshot costs (issue 40): `snap create` time on a 1 GiB and a 100 GiB thin volume (no
# writer, and with `optio nbd` holding the lock), and fio randwrite 4 KiB at queue depth 32
# through `optio nbd` before a snapshot, right after one (objects copied at their first
# write) and after that (copied). Usage: scripts/bench-snap.sh [SECONDS] (default 20).
# Needs a built `target/release/optio` (or OPTIO=path) and fio; starts its own `optio up`.
# Optio alone: scripts/bench-snap-vs-rbd.sh runs the issue's four jobs beside Ceph RBD.
set -euo pipefail
SECONDS_RUN=${1:-20}
OPTIO=${OPTIO:-target/release/optio}
WORK=$(mktemp -d /tmp/bench-snap.XXXX)
export OPTIO_CLUSTER=$WORK/c
"$OPTIO" up --dir "$WORK/c" >"$WORK/up.log" 2>&1 &
UP=$!
NBD=
cleanup() { [ -n "$NBD" ] && kill "$NBD" 2>/dev/null; kill "$UP" 2>/dev/null; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
for _ in $(seq 100); do "$OPTIO" status >/dev/null 2>&1 && break; sleep 0.3; done

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
create_ms() { # VOLUME RUNS
  for i in $(seq "$2"); do
    "$OPTIO" volume snap create "$1@t$i" --json | sed 's/.*"elapsed_ms":\([0-9.]*\).*/\1/'
  done | median
}
rm_all() { for i in $(seq "$2"); do "$OPTIO" volume snap rm "$1@t$i" >/dev/null; done; }

"$OPTIO" volume create small 1GiB >/dev/null
"$OPTIO" volume create large 100GiB >/dev/null
echo "snap create, no writer (median of 5): 1 GiB $(create_ms small 5) ms, 100 GiB $(create_ms large 5) ms"
rm_all small 5; rm_all large 5

"$OPTIO" nbd small large --socket "$WORK/nbd.sock" >"$WORK/nbd.log" 2>&1 &
NBD=$!
for _ in $(seq 100); do [ -S "$WORK/nbd.sock" ] && break; sleep 0.1; done
echo "snap create, optio nbd holding the lock (median of 5): 1 GiB $(create_ms small 5) ms, 100 GiB $(create_ms large 5) ms"
rm_all small 5; rm_all large 5

URI="nbd+unix:///small?socket=$WORK/nbd.sock"
fio_iops() {
  fio --name=w --ioengine=nbd --uri="$URI" --rw=randwrite --bs=4k --iodepth=32 \
    --size=1g --runtime="$SECONDS_RUN" --time_based --randrepeat=0 --output-format=json \
    | python3 -c 'import json,sys; t=sys.stdin.read(); print(round(json.loads(t[t.index("{"):])["jobs"][0]["write"]["iops"]))'
}
# Every object allocated first, so that the runs write in place (not creates).
fio --name=fill --ioengine=nbd --uri="$URI" --rw=write --bs=4m --iodepth=8 --size=1g \
  --output-format=terse >/dev/null
before=$(fio_iops)
"$OPTIO" volume snap create small@s >/dev/null
first=$(fio_iops)
second=$(fio_iops)
sync  # the copies' writeback done
third=$(fio_iops)
ratio() { python3 -c "print(f'{$1/$before:.2f}')"; }
echo "fio randwrite 4k qd32 ${SECONDS_RUN}s: without a snapshot $before IOPS; right after one $first ($(ratio "$first")x); once copied $second ($(ratio "$second")x); after a sync $third ($(ratio "$third")x)"
