#!/usr/bin/env bash
# Volumes like for like (issue 39): Optio's volumes against Ceph RBD at the same guarantee,
# in one run, 3 servers against 3 OSDs (both r = 3, same disk).
#
#   write-back  Optio as it is (a write is acknowledged once in every replica's page cache;
#               durable at FLUSH/FUA) against librbd with its cache on in write-back from the
#               first write (rbd_cache = true, rbd_cache_writethrough_until_flush = false):
#               the guest's flushes decide durability on both. Then again with Optio's own
#               write-back cache (`optio nbd --write-back 24MiB`, librbd's rbd_cache_max_dirty
#               default), the same guarantee as librbd's cache: system `optio-cache`.
#   durable     every write durable when acknowledged: fio --fsync=1 (a FLUSH after each
#               write) on both; RBD with its cache off, as bench-volume.sh measures it.
#   reads       4 KiB random reads, Optio with its local reads (a replica on this machine is
#               read from its file) and without (--no-local-reads: every read through a
#               server), against RBD.
#
# Jobs (SECONDS each, --time_based, numjobs 1, over the first SIZE of a prefilled volume):
# randwrite 4 KiB at iodepth 1 and 32 in both write modes; randread 4 KiB at iodepth 32.
# Prints IOPS and mean latency per job and system, and Optio's ratio to RBD.
# Usage: [OPTIO=BINARY] scripts/bench-volume-modes.sh [SIZE (default 2GiB)] [SECONDS (default 20)]
# Needs fio with the nbd and rbd engines, and what ceph-mini installs.
set -euo pipefail
size_arg=${1:-2GiB}
seconds=${2:-20}
root=$(cd "$(dirname "$0")/.." && pwd)
ceph_mini="$root/../shared/anchors/ceph-mini/ceph-mini.sh"
if [ -n "${OPTIO:-}" ]; then
  optio=$OPTIO
else
  cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p optio
  optio="${CARGO_TARGET_DIR:-$root/target}/release/optio"
fi
fio --enghelp=nbd >/dev/null 2>&1 || { echo "this fio has no nbd engine" >&2; exit 1; }
fio --enghelp=rbd >/dev/null 2>&1 || { echo "this fio has no rbd engine" >&2; exit 1; }
case "$size_arg" in
  *GiB) size=$(( ${size_arg%GiB} << 30 )) ;;
  *MiB) size=$(( ${size_arg%MiB} << 20 )) ;;
  *) echo "SIZE must be N GiB or N MiB" >&2; exit 2 ;;
esac
work=$(mktemp -d)
up_pid="" nbd_pids=() ceph_dir="$work/ceph"
cleanup() {
  for pid in "${nbd_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  if [ -n "$up_pid" ]; then kill -INT "$up_pid" 2>/dev/null || true; wait "$up_pid" 2>/dev/null || true; fi
  [ -f "$ceph_dir/.ceph-mini" ] && "$ceph_mini" stop "$ceph_dir" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

CEPH_MINI_IMAGE_GB=$(( (size + (1 << 30) - 1) >> 30 )) "$ceph_mini" start "$ceph_dir" > "$work/ceph-start.log" 2>&1 &
ceph_start=$!
"$optio" up --dir "$work/cluster" --zones 3 --hosts 1 --capacity 64GiB > "$work/up.log" 2>&1 &
up_pid=$!
for _ in $(seq 600); do grep -q "Ctrl-C" "$work/up.log" && break; sleep 0.1; done
export OPTIO_CLUSTER="$work/cluster"
"$optio" volume create bench "$size" > /dev/null
start_nbd() { # PORT FLAGS...
  local port=$1; shift
  "$optio" nbd --listen "127.0.0.1:$port" --insecure-plain-tcp "$@" > "$work/nbd-$port.out" 2>&1 &
  nbd_pids+=($!)
  for _ in $(seq 600); do grep -q "^serving nbd://127.0.0.1:$port/bench$" "$work/nbd-$port.out" && return; sleep 0.1; done
  echo "optio nbd did not start:" >&2; cat "$work/nbd-$port.out" >&2; exit 1
}
port=$(free_port)
start_nbd "$port"
wait "$ceph_start" || { tail -20 "$work/ceph-start.log" >&2; exit 1; }
export CEPH_CONF="$ceph_dir/ceph.conf"
optio_io=(--ioengine=nbd "--uri=nbd://127.0.0.1:$port/bench")
rbd_io=(--ioengine=rbd --clientname=admin --pool=rbdbench --rbdname=img0)
write_back=(--rbd_cache=true --rbd_cache_writethrough_until_flush=false)
# librbd's default rbd_cache_max_dirty: the bytes its cache may hold unwritten.
cache_size=24MiB

results="$work/results.tsv"
: > "$results"
run() { # LABEL SYSTEM CEPH_ARGS -- FIO ARGS...
  local label=$1 system=$2 ceph_args=$3; shift 4
  local out="$work/$label-$system.json"
  CEPH_ARGS="$ceph_args" timeout $((seconds * 4 + 600)) fio --output-format=json "$@" > "$out" 2> "$out.err" \
    || { echo "fio failed: $label $system" >&2; cat "$out.err" >&2; exit 1; }
  python3 - "$out" "$label" "$system" >> "$results" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
job = json.loads(text[text.index("{"):])["jobs"][0]
d = job["write"] if job["write"]["total_ios"] else job["read"]
print("\t".join([sys.argv[2], sys.argv[3], f"{d['iops']:.0f}", f"{d['clat_ns']['mean'] / 1000:.0f}"]))
PY
  tail -n 1 "$results"
}

common=(--size="$size" --bs=4k --randrepeat=0 --norandommap --time_based --runtime="$seconds")
echo "== prefill: sequential 4 MiB writes over $size_arg"
fio --name=prefill "${optio_io[@]}" --size="$size" --rw=write --bs=4M --iodepth=8 > /dev/null 2>&1
fio --name=prefill "${rbd_io[@]}" --size="$size" --rw=write --bs=4M --iodepth=8 > /dev/null 2>&1

echo "== write-back: Optio as it is; RBD with rbd_cache on, write-back from the first write"
for depth in 1 32; do
  run "write-back-q$depth" optio "" -- --name=w "${optio_io[@]}" "${common[@]}" --rw=randwrite --iodepth=$depth
  run "write-back-q$depth" rbd "${write_back[*]}" -- --name=w "${rbd_io[@]}" "${common[@]}" --rw=randwrite --iodepth=$depth
done
echo "== durable: a FLUSH after every write (fio --fsync=1); RBD's cache off"
for depth in 1 32; do
  run "durable-q$depth" optio "" -- --name=w "${optio_io[@]}" "${common[@]}" --rw=randwrite --iodepth=$depth --fsync=1
  run "durable-q$depth" rbd "" -- --name=w "${rbd_io[@]}" "${common[@]}" --rw=randwrite --iodepth=$depth --fsync=1
done
echo "== reads: 4 KiB random, iodepth 32"
run "randread-q32" optio "" -- --name=r "${optio_io[@]}" "${common[@]}" --rw=randread --iodepth=32
# The volume's lock is the first optio nbd's: it lets go when stopped.
kill "${nbd_pids[0]}"
wait "${nbd_pids[0]}" 2>/dev/null || true
nbd_pids=()
port2=$(free_port)
start_nbd "$port2" --no-local-reads
run "randread-q32" optio-no-local "" -- --name=r --ioengine=nbd "--uri=nbd://127.0.0.1:$port2/bench" "${common[@]}" --rw=randread --iodepth=32
run "randread-q32" rbd "" -- --name=r "${rbd_io[@]}" "${common[@]}" --rw=randread --iodepth=32
echo "== write-back again, Optio with its write-back cache (optio nbd --write-back $cache_size, RBD's most dirty bytes)"
kill "${nbd_pids[0]}"
wait "${nbd_pids[0]}" 2>/dev/null || true
nbd_pids=()
port3=$(free_port)
start_nbd "$port3" --write-back "$cache_size"
for depth in 1 32; do
  run "write-back-q$depth" optio-cache "" -- --name=w --ioengine=nbd "--uri=nbd://127.0.0.1:$port3/bench" "${common[@]}" --rw=randwrite --iodepth=$depth
done

echo
printf '%-16s %-15s %9s %12s %12s\n' job system IOPS "mean µs" "optio/rbd"
awk -F'\t' '{ iops[$1, $2] = $3; lat[$1, $2] = $4; if (!seen[$1]++) order[++n] = $1; sys[$1] = sys[$1] " " $2 }
  END { for (i = 1; i <= n; i++) { j = order[i]; split(substr(sys[j], 2), s, " ")
    for (k in s) { r = ((j, "rbd") in iops && iops[j, "rbd"] > 0 && s[k] != "rbd") ? sprintf("%.2f", iops[j, s[k]] / iops[j, "rbd"]) : ""
      printf "%-16s %-15s %9s %12s %12s\n", j, s[k], iops[j, s[k]], lat[j, s[k]], r } } }' "$results"
