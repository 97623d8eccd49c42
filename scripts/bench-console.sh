#!/usr/bin/env bash
# `optio console` at the balanced engines' published scale (issue 42): a map of 1,000 devices
# (10 zones x 100 hosts, `optio map init --pg-num 32768`: the PG pools at 32,768 PGs; no
# servers), the console on it, a login, then each API request timed with curl: the first at
# the epoch (caches cold) and the next ones, and a what-if marking a device out (another device
# each time), ROUNDS times; then a what-if and a GET of the devices right after a map change.
# Usage: scripts/bench-console.sh [BUILD (target/release/optio)] [ROUNDS (3)]
set -euo pipefail
bin=${1:-target/release/optio} rounds=${2:-3}
[ -x "$bin" ] || { echo "$bin: not an executable (cargo build --release -p optio)" >&2; exit 1; }
command -v curl >/dev/null || { echo "curl not found: apt-get install -y curl" >&2; exit 1; }
command -v jq >/dev/null || { echo "jq not found: apt-get install -y jq" >&2; exit 1; }
work=$(mktemp -d)
console_pid=""
cleanup() {
  [ -n "$console_pid" ] && kill "$console_pid" 2>/dev/null && wait "$console_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
. "$(dirname "$0")/lib-console.sh"
console_at_scale "$bin" "$work"
csrf=$(curl -sf -c "$work/cookies" -H 'content-type: application/json' \
  -d "{\"entity\":\"client.admin\",\"key\":\"$key\"}" "$base/api/v1/login" | jq -r .csrf_token)
get() { curl -sf -o /dev/null -w '%{time_total}' -b "$work/cookies" "$base/api/v1/$1"; }
# A what-if marking device osd.$1 out (each round another device: nothing judged before is
# asked again).
whatif() {
  curl -sf -o /dev/null -w '%{time_total}' -b "$work/cookies" -H "x-csrf-token: $csrf" \
    -H 'content-type: application/json' \
    -d "{\"change\":{\"kind\":\"set_state\",\"device\":\"osd.$1\",\"in\":false}}" "$base/api/v1/whatif"
}
echo "1,000 devices, 32,768 PGs per PG pool; seconds per request (curl time_total)"
printf 'request\tfirst\tthen (%s times)\n' "$rounds"
for path in map health devices pools; do
  first=$(get "$path")
  then=""
  for _ in $(seq "$rounds"); do then="$then $(get "$path")"; done
  printf '%s\t%s\t%s\n' "GET $path" "$first" "$then"
done
then=""
for round in $(seq "$rounds"); do then="$then $(whatif $((round * 37 % 1000)))"; done
printf '%s\t%s\t%s\n' "POST whatif (a device out)" "-" "$then"
# Right after a map change made by the CLI (another device reweighted just before): the
# console places the new epoch first (its warmer looks at the map every 100 ms).
after="" devices=""
for round in $(seq "$rounds"); do
  weight=$([ $((round % 2)) -eq 1 ] && echo 0.9 || echo 1.0)
  "$bin" map reweight --map "$work/map.toml" osd.7 "$weight" > /dev/null 2>&1
  after="$after $(whatif $((round * 53 % 1000)))"
  sleep 2
  "$bin" map reweight --map "$work/map.toml" osd.8 "$weight" > /dev/null 2>&1
  devices="$devices $(get devices)"
  sleep 2
done
printf '%s\t%s\t%s\n' "POST whatif right after a change" "-" "$after"
printf '%s\t%s\t%s\n' "GET devices right after a change" "-" "$devices"
