#!/usr/bin/env bash
# Large files through the page cache or past it (O_DIRECT), issue 39: what each costs the
# machine, first with fio alone, then in Optio (OPTIO_DIRECT_IO=1, writes or 0 on one build).
#
#   1. fio, three jobs of sequential 4 MiB blocks (1 GiB each) in a directory on the root
#      file system: writes with an fdatasync per block, buffered then direct, twice; reads
#      of the same files direct, buffered from the disk (caches dropped) and buffered from
#      the cache. For each, the machine's busy CPU seconds (all CPUs, /proc/stat) over the
#      run and per 4 MiB block.
#   2. Optio: for each round and mode, a fresh `optio up --zones 3 --hosts 1` (3 servers,
#      r = 3) whose servers run with OPTIO_DIRECT_IO=MODE, then PASSES runs of `optio bench
#      --objects OBJECTS --size 4MiB --concurrency CONC` (the same names each pass: the later
#      passes overwrite); per pass, write and read MB/s and the client's and servers' CPU µs
#      per operation.
#
# Usage: [OPTIO=BINARY] [ROUNDS=2] [MODES="1 writes 0"] [PASSES=3] [OBJECTS=96] [CONC=4]
#        [TLS=1] [FIO=0] scripts/bench-direct-io.sh
# Needs fio and jq; run as root (drop_caches).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${ROUNDS:-2}
modes=${MODES:-"1 writes 0"}
passes=${PASSES:-3}
objects=${OBJECTS:-96}
conc=${CONC:-4}
for tool in fio jq; do
  command -v "$tool" >/dev/null || { echo "$tool not found: apt-get install -y $tool" >&2; exit 1; }
done
if [ -n "${OPTIO:-}" ]; then
  optio=$OPTIO
else
  cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p optio
  optio="${CARGO_TARGET_DIR:-$root/target}/release/optio"
fi
work=$(mktemp -d /var/tmp/optio-direct.XXXXXX)
up_pid=""
cleanup() {
  if [ -n "$up_pid" ]; then kill -TERM "$up_pid" 2>/dev/null || true; wait "$up_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

busy() { awk '/^cpu / { print ($2 + $3 + $4 + $7 + $8) / 100 }' /proc/stat; }

# fio JOB_ARGS...: one line, the job's bandwidth and the machine's busy CPU per block.
fio_run() {
  local label=$1; shift
  local before after out
  before=$(busy)
  out=$(fio --name=j --directory="$work/fio" --bs=4M --size=1G --numjobs=3 --group_reporting \
    --output-format=json "$@")
  after=$(busy)
  jq -r --arg l "$label" --argjson b "$before" --argjson a "$after" '
    .jobs[0] as $j | ($j.write.io_bytes + $j.read.io_bytes) as $bytes
    | ($bytes / 4194304) as $blocks
    | "\($l): \((($j.write.bw_bytes + $j.read.bw_bytes) / 1048576) | floor) MiB/s, busy CPU \(($a - $b) * 100 | floor / 100) s, \((($a - $b) * 1e6 / $blocks) | floor) µs per 4 MiB"' <<<"$out"
}

if [ "${FIO:-1}" = 1 ]; then
  echo "== fio: 3 jobs × 1 GiB of 4 MiB blocks in $work"
  mkdir -p "$work/fio"
  for pass in 1 2; do
    for direct in 0 1; do
      rm -f "$work/fio"/*
      fio_run "write, fdatasync per block, direct=$direct (pass $pass)" --rw=write --fdatasync=1 --direct=$direct
    done
  done
  fio_run "read, direct" --rw=read --direct=1
  sync; echo 3 > /proc/sys/vm/drop_caches
  fio_run "read, buffered, from the disk" --rw=read --direct=0
  fio_run "read, buffered, from the cache" --rw=read --direct=0
  rm -rf "$work/fio"
fi

echo "== Optio: optio up --zones 3 --hosts 1 ${TLS:+--tls }(3 servers, r = 3); optio bench --objects $objects --size 4MiB --concurrency $conc"
printf '%-6s %-8s %-5s %10s %10s %11s %9s %10s %11s\n' round mode pass "write MB/s" "client µs" "servers µs" "read MB/s" "client µs" "servers µs"
for round in $(seq "$rounds"); do
  for mode in $modes; do
    dir="$work/c$round-$mode"
    up_flags=()
    [ "${TLS:-0}" = 1 ] && up_flags=(--tls)
    OPTIO_DIRECT_IO=$mode "$optio" up --dir "$dir" --zones 3 --hosts 1 --capacity 64GiB "${up_flags[@]}" > "$work/up.log" 2>&1 &
    up_pid=$!
    for _ in $(seq 300); do grep -q "Ctrl-C" "$work/up.log" && break; sleep 0.1; done
    grep -q "Ctrl-C" "$work/up.log" || { cat "$work/up.log"; exit 1; }
    for pass in $(seq "$passes"); do
      "$optio" bench --cluster "$dir" --objects "$objects" --size 4MiB --concurrency "$conc" --json > "$work/bench.json"
      jq -r --arg r "$round" --arg m "$mode" --arg p "$pass" '
        [$r, $m, $p, (.write.operations / .write.seconds * 4.194304), .cost.write.client_cpu_us_per_op,
         .cost.write.servers_cpu_us_per_op, (.read.operations / .read.seconds * 4.194304),
         .cost.read.client_cpu_us_per_op, .cost.read.servers_cpu_us_per_op]
        | [.[0], .[1], .[2]] + (.[3:] | map(floor | tostring)) | @tsv' "$work/bench.json" |
        while IFS=$'\t' read -r a b c d e f g h i; do
          printf '%-6s %-8s %-5s %10s %10s %11s %9s %10s %11s\n' "$a" "$b" "$c" "$d" "$e" "$f" "$g" "$h" "$i"
        done
    done
    kill -TERM "$up_pid"; wait "$up_pid" 2>/dev/null || true; up_pid=""
    rm -rf "$dir"
  done
done
