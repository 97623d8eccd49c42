#!/usr/bin/env bash
# Erasure coding against three copies on one cluster (issue 41): `optio up --zones 3 --hosts 2
# --erasure 4+2` (6 servers, one device each), then `optio bench` of OBJECTS objects of SIZE
# on the pool `plain` (crush, r = 3) and on `ec` (crush indep, 4+2: 1.5x the bytes written
# instead of 3x) in turn, ROUNDS times; then one server is killed (every object of `ec` has a
# chunk on it) and `ec` is measured again: degraded writes (5 of 6 chunks, min_size 5) and
# degraded reads (decoded from the parity). Prints MB/s per run and the ratios.
# Usage: scripts/bench-erasure.sh [BUILD (target/release/optio)] [ROUNDS (3)]
#   env: OBJECTS (100), SIZE (4MiB), CONCURRENCY (4)
set -euo pipefail
bin=${1:-target/release/optio} rounds=${2:-3}
objects=${OBJECTS:-100} size=${SIZE:-4MiB} concurrency=${CONCURRENCY:-4}
[ -x "$bin" ] || { echo "$bin: not an executable (cargo build --release -p optio)" >&2; exit 1; }
command -v jq >/dev/null || { echo "jq not found: apt-get install -y jq" >&2; exit 1; }
work=$(mktemp -d)
up_pid=""
cleanup() {
  if [ -n "$up_pid" ]; then kill -INT "$up_pid" 2>/dev/null || true; wait "$up_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
dir="$work/cluster"
"$bin" up --dir "$dir" --zones 3 --hosts 2 --capacity 64GiB --erasure 4+2 --no-restart > "$work/up.log" 2>&1 &
up_pid=$!
for _ in $(seq 300); do grep -q "Ctrl-C" "$work/up.log" && break; sleep 0.1; done
grep -q "Ctrl-C" "$work/up.log" || { cat "$work/up.log"; exit 1; }

bench() { # POOL LABEL
  "$bin" bench --cluster "$dir" --pool "$1" --objects "$objects" --size "$size" \
    --concurrency "$concurrency" --json > "$work/bench.json"
  jq -r --arg l "$2" '[$l, (.write.mb_per_s * 10 | floor / 10), (.read.mb_per_s * 10 | floor / 10),
    (.cost.write.servers_cpu_us_per_op // 0 | floor), (.cost.read.servers_cpu_us_per_op // 0 | floor),
    (.cost.write.client_cpu_us_per_op // 0 | floor), (.cost.read.client_cpu_us_per_op // 0 | floor)] | @tsv' \
    "$work/bench.json" | tee -a "$work/rows"
}

echo "$objects objects of $size, $concurrency in flight, 6 servers; plain = r 3, ec = 4+2"
printf 'run\twrite MB/s\tread MB/s\tservers µs/write\tservers µs/read\tclient µs/write\tclient µs/read\n'
for _ in $(seq "$rounds"); do
  bench plain plain
  bench ec ec
done
victim=$(pgrep -f -- "--name z3-h2 " | head -1)
[ -n "$victim" ] || { echo "no server z3-h2 to kill" >&2; exit 1; }
kill -9 "$victim"
for _ in $(seq "$rounds"); do
  bench ec ec-degraded
done
awk -F'\t' '{w[$1]+=$2; r[$1]+=$3; n[$1]++}
  END {
    printf "mean write MB/s: plain %.1f, ec %.1f (%.2fx), ec degraded %.1f\n", w["plain"]/n["plain"], w["ec"]/n["ec"], (w["ec"]/n["ec"])/(w["plain"]/n["plain"]), w["ec-degraded"]/n["ec-degraded"]
    printf "mean read MB/s: plain %.1f, ec %.1f (%.2fx), ec degraded %.1f (%.2fx of healthy ec)\n", r["plain"]/n["plain"], r["ec"]/n["ec"], (r["ec"]/n["ec"])/(r["plain"]/n["plain"]), r["ec-degraded"]/n["ec-degraded"], (r["ec-degraded"]/n["ec-degraded"])/(r["ec"]/n["ec"])
  }' "$work/rows"
