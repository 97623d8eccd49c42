#!/usr/bin/env bash
# What authentication and TLS cost (issue 14), measured side by side in one run: the same
# `optio up` cluster (release, 3 zones x 3 hosts, r = 3, k = 2) started with --no-auth, with its
# keyring (every request signed: keyed BLAKE3 over the request, a BLAKE3 hash of each body),
# and with its keyring and --tls, in alternating rounds; for each mode the best of the rounds
# of 4 MiB PUT and GET throughput and probe round trip p50. Targets: authentication at most 5 %
# of 4 MiB throughput and 10 us on the probe p50; TLS at most 15 % of 4 MiB throughput.
# Usage: scripts/bench-auth.sh [ROUNDS (default 3)] [OBJECTS (default 64)] [CONCURRENCY (default 4)]
# Needs jq.
set -euo pipefail
rounds=${1:-3}
objects=${2:-64}
concurrency=${3:-4}
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

round() { # MODE (auth|noauth) N
  local mode=$1 n=$2 flags=""
  [ "$mode" = noauth ] && flags="--no-auth"
  [ "$mode" = tls ] && flags="--tls"
  local dir="$work/$mode-$n"
  # shellcheck disable=SC2086
  "$optio" up --dir "$dir" --capacity 64GiB $flags > "$work/up.log" 2>&1 &
  up_pid=$!
  for _ in $(seq 300); do grep -q "Ctrl-C" "$work/up.log" && break; sleep 0.1; done
  grep -q "Ctrl-C" "$work/up.log" || { cat "$work/up.log"; exit 1; }
  OPTIO_CLUSTER="$dir" "$optio" bench --objects "$objects" --size 4MiB --concurrency "$concurrency" --json > "$work/rw.json"
  OPTIO_CLUSTER="$dir" "$optio" bench --mode probe --objects 5000 --json > "$work/probe.json"
  printf '%s %s %s %s\n' "$mode" "$(jq '.write.mb_per_s' "$work/rw.json")" \
    "$(jq '.read.mb_per_s' "$work/rw.json")" "$(jq '.rtt_us_p50' "$work/probe.json")" | tee -a "$work/results"
  kill -INT "$up_pid"; wait "$up_pid" 2>/dev/null || true; up_pid=""
  rm -rf "$dir"
}

echo "== mode, 4 MiB PUT MB/s, 4 MiB GET MB/s, probe p50 us (rounds alternate)"
for n in $(seq "$rounds"); do
  round noauth "$n"
  round auth "$n"
  round tls "$n"
done
echo "== best of $rounds rounds"
awk '{
  if (!($1 in put) || $2 > put[$1]) put[$1] = $2
  if (!($1 in get) || $3 > get[$1]) get[$1] = $3
  if (!($1 in p50) || $4 < p50[$1]) p50[$1] = $4
} END {
  printf "  without auth: PUT %.1f MB/s, GET %.1f MB/s, probe p50 %d us\n", put["noauth"], get["noauth"], p50["noauth"]
  printf "  with auth:    PUT %.1f MB/s, GET %.1f MB/s, probe p50 %d us\n", put["auth"], get["auth"], p50["auth"]
  printf "  auth + TLS:   PUT %.1f MB/s, GET %.1f MB/s, probe p50 %d us\n", put["tls"], get["tls"], p50["tls"]
  dp = 100 * (1 - put["auth"] / put["noauth"]); dg = 100 * (1 - get["auth"] / get["noauth"])
  dl = p50["auth"] - p50["noauth"]
  printf "  PUT cost %+.1f %% (target <= 5 %%) %s\n", dp, (dp <= 5 ? "met" : "MISSED")
  printf "  GET cost %+.1f %% (target <= 5 %%) %s\n", dg, (dg <= 5 ? "met" : "MISSED")
  printf "  probe p50 cost %+d us (target <= 10 us) %s\n", dl, (dl <= 10 ? "met" : "MISSED")
  tp = 100 * (1 - put["tls"] / put["noauth"]); tg = 100 * (1 - get["tls"] / get["noauth"])
  printf "  TLS (with auth) PUT cost %+.1f %%, GET cost %+.1f %% (target <= 15 %%) %s\n", tp, tg, (tp <= 15 && tg <= 15 ? "met" : "MISSED")
}' "$work/results"
