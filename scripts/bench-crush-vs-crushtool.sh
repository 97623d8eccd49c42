#!/usr/bin/env bash
# Optio's crush engine against Ceph's own crushtool, on the same maps and inputs, in one run:
#   1. identical output: `crushtool --test --show-mappings` vs `optio place --format crushtool`;
#   2. speed: CPU seconds of `crushtool --test --show-statistics` vs `optio place --format
#      statistics` (single thread both), best of $RUNS, and the ratio of mappings per CPU-second.
# Usage: scripts/bench-crush-vs-crushtool.sh [INPUTS (default 1000000)] [RUNS (default 3)]
# Needs crushtool (Debian: apt-get install ceph-base) and a release build (it runs cargo).
set -euo pipefail
inputs=${1:-1000000}
runs=${2:-3}
max_x=$((inputs - 1))
root=$(cd "$(dirname "$0")/.." && pwd)
command -v crushtool >/dev/null || { echo "crushtool not found: apt-get install -y ceph-base" >&2; exit 1; }
cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p optio
optio="$root/target/release/optio"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# CPU seconds (user + system) of a command, best of $runs.
cpu_seconds() {
  local best=""
  for _ in $(seq "$runs"); do
    local t
    /usr/bin/time -o "$work/time" -f "%U %S" "$@" >/dev/null 2>&1
    t=$(tail -1 "$work/time" | awk '{print $1 + $2}')
    if [ -z "$best" ] || awk -v a="$t" -v b="$best" 'BEGIN{exit !(a<b)}'; then best=$t; fi
  done
  echo "$best"
}

printf '%-28s %10s %14s %14s %14s %8s\n' map inputs identical crushtool/s optio/s ratio
for spec in "10 racks x 10 hosts x 10 OSDs:1000:host straw2 10 rack straw2 10 root straw2 0" \
            "50 hosts x 20 OSDs:1000:host straw2 20 root straw2 0" \
            "4 hosts x 10 OSDs:40:host straw2 10 root straw2 0"; do
  name=${spec%%:*}; rest=${spec#*:}; osds=${rest%%:*}; layers=${rest#*:}
  # shellcheck disable=SC2086
  crushtool --outfn "$work/map" --build --num_osds "$osds" $layers >/dev/null
  crushtool -i "$work/map" --dump > "$work/map.json"
  crushtool -i "$work/map" --test --show-mappings --num-rep 3 --min-x 0 --max-x "$max_x" --rule 0 > "$work/theirs.txt"
  "$optio" place --map "$work/map.json" --rule 0 --num-rep 3 --min-x 0 --max-x "$max_x" --format crushtool > "$work/ours.txt"
  if cmp -s "$work/theirs.txt" "$work/ours.txt"; then same=yes; else same=NO; fi
  theirs=$(cpu_seconds crushtool -i "$work/map" --test --show-statistics --num-rep 3 --min-x 0 --max-x "$max_x" --rule 0)
  ours=$(cpu_seconds "$optio" place --map "$work/map.json" --rule 0 --num-rep 3 --min-x 0 --max-x "$max_x" --format statistics)
  awk -v n="$name" -v i="$inputs" -v s="$same" -v t="$theirs" -v o="$ours" 'BEGIN{
    printf "%-28s %10d %14s %14.0f %14.0f %7.2fx\n", n, i, s, i/t, i/o, t/o }'
  [ "$same" = yes ] || { echo "outputs differ: see diff of crushtool and optio" >&2; diff "$work/theirs.txt" "$work/ours.txt" | head >&2; exit 1; }
done
