#!/usr/bin/env bash
# Optio's placement lookups against libch-placement (the C library the attributed-CH paper measured
# its Table 1 with), on the same machine, in the same run (issue 18):
#   libch-placement `ring` with 256 virtual nodes per node, and Optio's ring (256 vnodes per HDD),
#   attributed (one lookup at a time and batched) and elastic, at each node count; 100,000 ids,
#   3 replicas, one thread. Each round runs, per node count, libch then `optio sim attributed-cost`
#   (interleaved, so drift on a shared machine hits both); the best of the rounds is reported.
#   Two orders, two tables: libch's own benchmark sorts its random ids before timing, so its
#   lookups walk the ring in order; Optio is run on its keys sorted the same way
#   (`--key-order sorted`). Then both in random order: libch through scripts/libch-shuffled.c
#   (the same ids and calls, shuffled) and Optio with `--key-order random`.
# Usage: scripts/bench-lookups.sh [ROUNDS (default 3)] [NODES (default 64,512,4096,32768)]
# Env: CH_PLACEMENT_DIR = the anchor's sources (default: ../shared/anchors/ch-placement from the
#      repository root); OPTIO_RUNS = timed runs inside each optio invocation (default 2).
# Needs jq, gcc/g++ and a release build (it runs cargo).
set -euo pipefail
rounds=${1:-3}
node_list=${2:-64,512,4096,32768}
root=$(cd "$(dirname "$0")/.." && pwd)
anchor=${CH_PLACEMENT_DIR:-$root/../shared/anchors/ch-placement}
optio_runs=${OPTIO_RUNS:-2}
ids=100000
replicas=3
if [ ! -x "$anchor/build.sh" ]; then
  echo "libch-placement anchor not found at $anchor (no executable build.sh);" >&2
  echo "set CH_PLACEMENT_DIR to the directory holding ch-placement's build.sh" >&2
  exit 1
fi
command -v jq >/dev/null || { echo "jq not found: apt-get install -y jq" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$anchor/build.sh" "$work/chp" >/dev/null
libch="$work/chp/ch-placement-benchmark"
# The shuffled driver against the library's sources, with build.sh's flags.
mkdir -p "$work/obj"
: > "$work/obj/config.h"
for f in ch-placement oid-gen lookup3 modules/placement-ring modules/placement-multiring \
         modules/placement-static-modulo modules/placement-xor modules/placement-two-d \
         modules/placement-hash-lookup3 modules/placement-hash-spooky; do
  gcc -O2 -c "$anchor/src/$f.c" -I"$work/obj" -I"$anchor/include" -I"$anchor/src" -I"$anchor" \
    -include "$work/obj/config.h" -o "$work/obj/$(basename "$f").o"
done
g++ -O2 -c "$anchor/src/SpookyV2.cpp" -I"$anchor/src" -o "$work/obj/spookyv2.o"
g++ -O2 -c "$anchor/src/spooky.cpp" -I"$anchor/src" -o "$work/obj/spooky.o"
gcc -O2 -c "$root/scripts/libch-shuffled.c" -I"$anchor/include" -o "$work/obj/driver.o"
g++ -O2 "$work/obj"/*.o -o "$work/libch-shuffled" -lm
shuffled="$work/libch-shuffled"
cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p optio
optio="$root/target/release/optio"

# best KEY VALUE: keep the minimum of each measurement across rounds in $work/best.
best() {
  local file="$work/best/$1"
  if [ "$2" = null ]; then return; fi
  if [ ! -f "$file" ] || awk -v a="$2" -v b="$(cat "$file")" 'BEGIN{exit !(a<b)}'; then
    echo "$2" > "$file"
  fi
}
mkdir -p "$work/best"
IFS=, read -r -a sizes <<< "$node_list"
for round in $(seq "$rounds"); do
  for n in "${sizes[@]}"; do
    # libch prints: objects replication servers virt_factor algorithm time(s) rate
    t=$("$libch" -s "$n" -o "$ids" -r "$replicas" -p ring -v 256 | awk '!/^#/ && NF >= 7 {print $6}')
    best "sorted.$n.libch" "$t"
    best "random.$n.libch" "$("$shuffled" "$n" "$ids" "$replicas" 256 2>/dev/null)"
    for order in sorted random; do
      "$optio" sim attributed-cost --nodes "$n" --ids "$ids" --replicas "$replicas" --runs "$optio_runs" \
        --skip-memory --skip-crush --key-order "$order" --json > "$work/optio.json"
      for engine in ring ring_1g attributed attributed_batch elastic; do
        best "$order.$n.$engine" "$(jq -r ".table1[0].seconds.$engine" "$work/optio.json")"
      done
    done
  done
  echo "round $round of $rounds done" >&2
done

get() { if [ -f "$work/best/$1" ]; then cat "$work/best/$1"; else echo nan; fi; }
echo "seconds for $ids ids x $replicas replicas, one thread, best of $rounds rounds (optio: best of $optio_runs runs per round)"
for order in sorted random; do
  if [ "$order" = sorted ]; then
    echo "keys sorted (as ch-placement-benchmark looks its ids up; Optio --key-order sorted):"
  else
    echo "keys in random order (libch: scripts/libch-shuffled.c; Optio --key-order random):"
  fi
  printf '%7s %9s %9s %9s %9s %9s %9s | %9s %9s %9s %9s %9s\n' \
    nodes libch-ring ring ring_1g attr attr-batch elastic \
    'ch/attr' 'ch/ring' 'ch/elast' 'attr/ring' 'a/ring1g'
  for n in "${sizes[@]}"; do
    awk -v n="$n" -v c="$(get "$order.$n.libch")" -v r="$(get "$order.$n.ring")" \
        -v r1="$(get "$order.$n.ring_1g")" -v a="$(get "$order.$n.attributed")" \
        -v b="$(get "$order.$n.attributed_batch")" -v e="$(get "$order.$n.elastic")" '
      function f(x) { return (x == "nan") ? "-" : sprintf("%.4f", x) }
      function q(x, y) { return (x == "nan" || y == "nan") ? "-" : sprintf("%.2fx", x / y) }
      BEGIN { printf "%7d %9s %9s %9s %9s %9s %9s | %9s %9s %9s %9s %9s\n",
        n, f(c), f(r), f(r1), f(a), f(b), f(e), q(c, a), q(c, r), q(c, e), q(a, r), q(a, r1) }'
  done
done
echo "targets (issue 18): ch/attr >= 2x, ch/ring >= 3x, ch/elast >= 2x, attr/ring <= 1.2x"
echo "(ring: 256 vnodes per HDD, 64 per SSD, as the paper's CH; ring_1g: 1 GiB vnodes, as many as attributed, absent above 6,500 nodes)"
