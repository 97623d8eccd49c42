#!/usr/bin/env bash
# Optio's store against this machine's own limits, measured in the same run:
#   fio: sequential write of 4 MiB blocks with an fdatasync after each, sequential read
#        (O_DIRECT) of 4 MiB blocks; iperf3 over loopback;
#   optio (release build, `optio up` default: 3 zones x 3 hosts, r = 3, k = 2):
#        4 MiB PUT and GET throughput, probe round trip p50, first 4 KiB write with and
#        without probing, probes sent by cached accesses.
# Prints the measurements, the ratios and the targets (docs/benchmarks.md).
# Then the authentication and TLS comparison (scripts/bench-auth.sh, AUTH_ROUNDS rounds).
# Usage: scripts/bench-store.sh [OBJECTS (default 64)] [CONCURRENCY (default 4)]
# Needs fio, iperf3 and jq (Debian: apt-get install -y fio iperf3 jq).
set -euo pipefail
objects=${1:-64}
concurrency=${2:-4}
root=$(cd "$(dirname "$0")/.." && pwd)
for tool in fio iperf3 jq; do
  command -v "$tool" >/dev/null || { echo "$tool not found: apt-get install -y fio iperf3 jq" >&2; exit 1; }
done
cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p optio
optio="${CARGO_TARGET_DIR:-$root/target}/release/optio"
# Work on the same file system the cluster uses (TMPDIR, default /tmp).
work=$(mktemp -d)
up_pid=""
iperf_pid=""
cleanup() {
  if [ -n "$up_pid" ]; then kill -INT "$up_pid" 2>/dev/null || true; wait "$up_pid" 2>/dev/null || true; fi
  if [ -n "$iperf_pid" ]; then kill "$iperf_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

echo "== machine limits (fio, iperf3) in $work"
fio --name=seqwrite --filename="$work/fio.dat" --rw=write --bs=4M --size=1G --fdatasync=1 \
  --ioengine=psync --output-format=json > "$work/fio-write.json"
write_mb=$(jq '.jobs[0].write.bw_bytes / 1e6' "$work/fio-write.json")
fio --name=seqread --filename="$work/fio.dat" --rw=read --bs=4M --size=1G --direct=1 \
  --ioengine=psync --output-format=json > "$work/fio-read.json"
read_mb=$(jq '.jobs[0].read.bw_bytes / 1e6' "$work/fio-read.json")
rm -f "$work/fio.dat"
port=$((20000 + RANDOM % 20000))
iperf3 -s -p "$port" -1 > /dev/null 2>&1 &
iperf_pid=$!
for _ in $(seq 100); do iperf3 -c 127.0.0.1 -p "$port" -t 5 -J > "$work/iperf.json" 2>/dev/null && break; sleep 0.1; done
net_mb=$(jq '.end.sum_received.bits_per_second / 8e6' "$work/iperf.json")
iperf_pid=""
printf '  fio sequential write, fdatasync per 4 MiB: %8.1f MB/s\n' "$write_mb"
printf '  fio sequential read (O_DIRECT), 4 MiB:     %8.1f MB/s\n' "$read_mb"
printf '  iperf3 over loopback:                      %8.1f MB/s\n' "$net_mb"

echo "== optio local cluster (release)"
"$optio" up --dir "$work/cluster" --capacity 64GiB > "$work/up.log" 2>&1 &
up_pid=$!
for _ in $(seq 300); do grep -q "Ctrl-C" "$work/up.log" && break; sleep 0.1; done
grep -q "Ctrl-C" "$work/up.log" || { cat "$work/up.log"; exit 1; }
export OPTIO_CLUSTER="$work/cluster"
"$optio" bench --objects "$objects" --size 4MiB --concurrency "$concurrency" --json > "$work/rw.json"
"$optio" bench --mode probe --objects 5000 --json > "$work/probe.json"
"$optio" bench --mode first-write --objects 300 --size 4KiB --json > "$work/first.json"

put_mb=$(jq '.write.mb_per_s' "$work/rw.json")
get_mb=$(jq '.read.mb_per_s' "$work/rw.json")
read_probes=$(jq '.read.probes_per_op' "$work/rw.json")
cache_bytes=$(jq '.cache_bytes_per_object' "$work/rw.json")
probe_p50=$(jq '.rtt_us_p50' "$work/probe.json")
with_us=$(jq '.with_probing.latency_us_mean' "$work/first.json")
without_us=$(jq '.without_probing.latency_us_mean' "$work/first.json")
overhead=$(jq '.overhead_mean_percent' "$work/first.json")
overhead_p50=$(jq '.overhead_p50_percent' "$work/first.json")
rewrite_probes=$(jq '.cached_rewrite_probes' "$work/first.json")
printf '  4 MiB PUT, r = 3, %s in flight:           %8.1f MB/s\n' "$concurrency" "$put_mb"
printf '  4 MiB GET (cached choice):                 %8.1f MB/s, %s probes/op\n' "$get_mb" "$read_probes"
printf '  probe round trip p50:                      %8s us\n' "$probe_p50"
printf '  first 4 KiB write, with / without probing: %s / %s us mean (%+.1f%% mean, %+.1f%% p50)\n' \
  "$with_us" "$without_us" "$overhead" "$overhead_p50"
printf '  cached rewrites: %s probes; choice cache: %.1f bytes per object\n' "$rewrite_probes" "$cache_bytes"

echo "== ratios and targets"
awk -v put="$put_mb" -v w="$write_mb" -v get="$get_mb" -v r="$read_mb" -v p="$probe_p50" \
    -v o="$overhead" -v rp="$rewrite_probes" -v cb="$cache_bytes" 'BEGIN {
  verdict = "met"
  pr = put / (w / 3); gr = get / r
  printf "  PUT / (disk write / 3) = %.2f  (target >= 0.60) %s\n", pr, (pr >= 0.6 ? "met" : "MISSED")
  printf "  GET / disk read        = %.2f  (target >= 0.60) %s\n", gr, (gr >= 0.6 ? "met" : "MISSED")
  printf "  probe p50              = %d us (target <= 100) %s\n", p, (p <= 100 ? "met" : "MISSED")
  printf "  first-write overhead   = %+.1f%% (target <= 5%%) %s\n", o, (o <= 5 ? "met" : "MISSED")
  printf "  cached access probes   = %d    (target 0) %s\n", rp, (rp == 0 ? "met" : "MISSED")
  printf "  cache bytes per object = %.1f  (target <= 16) %s\n", cb, (cb <= 16 ? "met" : "MISSED")
}'

# The same cluster without authentication, with it, and with it over TLS, side by side
# (issue 14; AUTH_ROUNDS alternating rounds, default 1, 0 to skip): scripts/bench-auth.sh.
auth_rounds=${AUTH_ROUNDS:-1}
if [ "$auth_rounds" -gt 0 ]; then
  kill -INT "$up_pid" 2>/dev/null || true; wait "$up_pid" 2>/dev/null || true; up_pid=""
  "$root/scripts/bench-auth.sh" "$auth_rounds" "$objects" "$concurrency"
fi
