#!/usr/bin/env bash
# Failures, measured on a release `optio up` (3 zones x 3 hosts, r = 3, min_size 2):
#   1. kill -9 one server (the supervisor not restarting it): the share of writes acknowledged
#      right after the kill, and the time until the map marks its device down (--down-grace,
#      default 20 s);
#   2. once it is marked out (--out-grace), the time until every placement group is whole
#      again (optio status: HEALTH_OK) and the recovery throughput (bytes the servers moved
#      over that time);
#   3. deep-scrub throughput (no rate limit), and what a deep scrub at the default background
#      rate (8 MiB/s per server) costs foreground 4 MiB PUT/GET throughput.
# Usage: scripts/bench-failures.sh [OBJECTS (default 1000, 1 MiB each)] [DOWN_GRACE (20s)] [OUT_GRACE (30s)]
# Needs jq.
set -euo pipefail
objects=${1:-1000}
down_grace=${2:-20s}
out_grace=${3:-30s}
root=$(cd "$(dirname "$0")/.." && pwd)
command -v jq >/dev/null || { echo "jq not found: apt-get install -y jq" >&2; exit 1; }
cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p optio
optio="${CARGO_TARGET_DIR:-$root/target}/release/optio"
work=$(mktemp -d)
up_pid=""
cleanup() {
  if [ -n "$up_pid" ]; then kill -INT "$up_pid" 2>/dev/null || true; wait "$up_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
now() { date +%s.%N; }
# optio status exits 2 (HEALTH_WARN) or 3 (HEALTH_ERR) after printing: keep its output.
status_json() { "$optio" status --json || true; }
since() { echo "$(now) - $1" | bc -l; }

"$optio" up --dir "$work/cluster" --capacity 64GiB --no-restart \
  --down-grace "$down_grace" --out-grace "$out_grace" > "$work/up.log" 2>&1 &
up_pid=$!
for _ in $(seq 300); do grep -q "Ctrl-C" "$work/up.log" && break; sleep 0.1; done
grep -q "Ctrl-C" "$work/up.log" || { cat "$work/up.log"; exit 1; }
export OPTIO_CLUSTER="$work/cluster"
"$optio" bench --objects "$objects" --size 1MiB --json > "$work/load.json"
echo "== loaded $objects objects of 1 MiB ($(jq '.write.mb_per_s' "$work/load.json") MB/s PUT)"

victim=$(pgrep -f -- "--name z1-h1 " | head -1)
[ -n "$victim" ] || { echo "no server z1-h1 found" >&2; exit 1; }
killed=$(now)
kill -9 "$victim"
ok=0
for i in $(seq 100); do
  if head -c 4096 /dev/urandom | "$optio" put "after-kill/$i" - --pool plain >/dev/null 2>"$work/put.err"; then
    ok=$((ok + 1))
  fi
done
writes_done=$(since "$killed")
echo "== kill -9 of server z1-h1 (device 0)"
printf '  writes acknowledged right after the kill: %d of 100 (pool plain, 4 KiB, %.1f s)\n' "$ok" "$writes_done"
until status_json | jq -e '.health.problems | any(test("down: osd.0"))' >/dev/null; do sleep 0.2; done
printf '  kill -9 to "down" in the map: %.1f s (--down-grace %s)\n' "$(since "$killed")" "$down_grace"
# Down shrinks the sets of the crush pool (the bench's data) without moving anything; out moves.
moved_before=$(status_json | jq '[.servers[].migration.total_bytes_moved // 0] | add')
until grep -Eq '(^|[ {,])in *= *false' "$work/cluster/map.toml"; do sleep 0.02; done
out_at=$(now)
printf '  kill -9 to "out": %.1f s (--out-grace %s)\n' "$(since "$killed")" "$out_grace"
until "$optio" status > "$work/status.txt" 2>&1; do sleep 0.1; done
recovery=$(since "$out_at")
moved_after=$(status_json | jq '[.servers[].migration.total_bytes_moved // 0] | add')
moved=$((moved_after - moved_before))
printf '  "out" to HEALTH_OK (full replication again): %.1f s, %.1f MB moved, %.1f MB/s\n' \
  "$recovery" "$(echo "$moved / 1000000" | bc -l)" "$(echo "$moved / 1000000 / $recovery" | bc -l)"

echo "== scrubbing"
"$optio" scrub --deep --json > "$work/scrub.json"
read_bytes=$(jq '[.devices[].bytes_read] | add' "$work/scrub.json")
slowest=$(jq '[.devices[].seconds] | max' "$work/scrub.json")
printf '  deep scrub, no limit: %.1f MB re-read and verified in %.2f s (%.1f MB/s over all servers)\n' \
  "$(echo "$read_bytes / 1000000" | bc -l)" "$slowest" "$(echo "$read_bytes / 1000000 / $slowest" | bc -l)"
"$optio" bench --objects 64 --size 4MiB --json > "$work/quiet.json"
( while true; do "$optio" scrub --deep --rate 8MiB > /dev/null 2>&1 || true; done ) &
scrubber=$!
sleep 1
"$optio" bench --objects 64 --size 4MiB --json > "$work/busy.json"
kill "$scrubber" 2>/dev/null || true
wait "$scrubber" 2>/dev/null || true
for op in write read; do
  quiet=$(jq ".$op.mb_per_s" "$work/quiet.json")
  busy=$(jq ".$op.mb_per_s" "$work/busy.json")
  printf '  4 MiB %s: %.1f MB/s without, %.1f MB/s during a deep scrub at 8 MiB/s per server (%.1f %% less)\n' \
    "$op" "$quiet" "$busy" "$(echo "(1 - $busy / $quiet) * 100" | bc -l)"
done
