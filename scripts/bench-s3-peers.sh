#!/usr/bin/env bash
# Optio's S3 gateway against its peers, one after the other in one run, with the same neutral
# client and the same source files (../shared/anchors/s3-bench/s3-bench.sh: rclone, PUT/GET of
# 4 MiB, 100 KiB and 4 KiB objects, LIST, DELETE, every GET verified; it reports the servers'
# and rclone's CPU per phase), then one table of Optio's ratio to each peer (issue 39).
#
#   optio         `optio up --zones 3 --hosts 1` (3 servers, r = 3, every write fsynced) and
#                 `optio s3`; the servers' and the gateway's CPU are counted
#   garage        ../shared/anchors/garage-mini, Garage's defaults (no fsync)
#   garage-fsync  the same with GARAGE_MINI_FSYNC=1 (metadata_fsync and data_fsync on): Optio's
#                 durability
#   rgw           ../shared/anchors/ceph-mini with radosgw (3 BlueStore OSDs, size 3)
#
# Usage: [OPTIO=BINARY] scripts/bench-s3-peers.sh [SYSTEM...]   (default: all four; a peer
#        whose tools are missing is skipped with the reason). S3B_* variables pass through
#        to s3-bench.sh (S3B_CONC, S3B_SMALL_N, …). Writes everything to $OUT (default
#        docs/s3-peers.txt).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
anchors="$root/../shared/anchors"
bench="$anchors/s3-bench/s3-bench.sh"
garage_mini="$anchors/garage-mini/garage-mini.sh"
ceph_mini="$anchors/ceph-mini/ceph-mini.sh"
out=${OUT:-$root/docs/s3-peers.txt}
systems=("$@")
[ ${#systems[@]} -gt 0 ] || systems=(optio garage garage-fsync rgw)
[ -x "$bench" ] || { echo "no $bench" >&2; exit 1; }
if [ -n "${OPTIO:-}" ]; then
  optio=$OPTIO
else
  cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p optio
  optio="${CARGO_TARGET_DIR:-$root/target}/release/optio"
fi
work=$(mktemp -d)
export S3B_SRC="$work/src" # the same files for every system
results="$work/results.txt"
: >"$results"
up_pid="" s3_pid="" garage_dir="" ceph_dir=""
cleanup() {
  [ -n "$s3_pid" ] && kill "$s3_pid" 2>/dev/null || true
  if [ -n "$up_pid" ]; then kill -INT "$up_pid" 2>/dev/null || true; wait "$up_pid" 2>/dev/null || true; fi
  [ -n "$garage_dir" ] && "$garage_mini" stop "$garage_dir" >/dev/null 2>&1 || true
  [ -n "$ceph_dir" ] && "$ceph_mini" stop "$ceph_dir" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

run_bench() { # run_bench LABEL ENDPOINT BUCKET
  echo "== $1" | tee -a "$results"
  "$bench" "$2" "$3" "$1" 2>"$work/$1.log" | tee -a "$results" || {
    tail -n 20 "$work/$1.log" >&2
    echo "$1: s3-bench failed" | tee -a "$results"
  }
}

bench_optio() {
  "$optio" up --dir "$work/optio" --zones 3 --hosts 1 >"$work/up.log" 2>&1 &
  up_pid=$!
  export OPTIO_CLUSTER="$work/optio"
  for _ in $(seq 1 200); do "$optio" status >/dev/null 2>&1 && break; sleep 0.2; done
  local keys port
  keys=$("$optio" s3 user create bench --json)
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  OPTIO_S3_ACCESS_KEY=$(echo "$keys" | jq -r .access_key) \
    OPTIO_S3_SECRET_KEY=$(echo "$keys" | jq -r .secret_key) \
    "$optio" s3 --listen "127.0.0.1:$port" >"$work/s3.log" 2>&1 &
  s3_pid=$!
  for _ in $(seq 1 100); do curl -s -o /dev/null "http://127.0.0.1:$port/_optio/metrics" && break; sleep 0.1; done
  (
    export AWS_ACCESS_KEY_ID=$(echo "$keys" | jq -r .access_key)
    export AWS_SECRET_ACCESS_KEY=$(echo "$keys" | jq -r .secret_key)
    export AWS_DEFAULT_REGION=us-east-1
    env -u AWS_CA_BUNDLE aws --endpoint-url "http://127.0.0.1:$port" s3 mb s3://bench >/dev/null
    S3B_PIDS="$up_pid $s3_pid" S3B_PIDS_CHILDREN=1 run_bench optio "http://127.0.0.1:$port" bench
  )
  kill "$s3_pid" 2>/dev/null || true
  wait "$s3_pid" 2>/dev/null || true
  s3_pid=""
  kill -INT "$up_pid" 2>/dev/null || true
  wait "$up_pid" 2>/dev/null || true
  up_pid=""
}

bench_garage() { # bench_garage LABEL FSYNC
  [ -x "$garage_mini" ] || { echo "$1: skipped (no $garage_mini)" | tee -a "$results"; return; }
  garage_dir="$work/$1"
  if ! GARAGE_MINI_FSYNC=$2 "$garage_mini" start "$garage_dir" >"$work/$1.start" 2>&1; then
    echo "$1: skipped ($(tail -n 3 "$work/$1.start" | tr '\n' ' '))" | tee -a "$results"
    garage_dir=""
    return
  fi
  (
    eval "$("$garage_mini" env "$garage_dir")"
    run_bench "$1" "$S3_ENDPOINT" "$S3_BUCKET"
  )
  "$garage_mini" stop "$garage_dir" >/dev/null 2>&1 || true
  garage_dir=""
}

bench_rgw() {
  [ -x "$ceph_mini" ] || { echo "rgw: skipped (no $ceph_mini)" | tee -a "$results"; return; }
  ceph_dir="$work/ceph"
  if ! "$ceph_mini" start "$ceph_dir" >"$work/ceph.start" 2>&1; then
    echo "rgw: skipped ($(tail -n 3 "$work/ceph.start" | tr '\n' ' '))" | tee -a "$results"
    ceph_dir=""
    return
  fi
  (
    eval "$("$ceph_mini" rgw "$ceph_dir" 2>"$work/rgw.start")"
    run_bench rgw "$S3_ENDPOINT" "$S3_BUCKET"
  )
  "$ceph_mini" stop "$ceph_dir" >/dev/null 2>&1 || true
  ceph_dir=""
}

for system in "${systems[@]}"; do
  case "$system" in
    optio) bench_optio ;;
    garage) bench_garage garage 0 ;;
    garage-fsync) bench_garage garage-fsync 1 ;;
    rgw) bench_rgw ;;
    *) echo "unknown system $system (optio, garage, garage-fsync, rgw)" >&2; exit 2 ;;
  esac
done

# Optio's ratio to each peer, per phase: MB/s for the PUT/GET phases, objects/s for LIST and
# DELETE; and each system's CPU per object (servers, client) from s3-bench's line.
python3 - "$results" <<'PY' | tee -a "$results"
import re, sys
rows = {}
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 6 or f[0].startswith(("#", "==")) or not f[1].startswith(("put", "get", "list", "delete")):
        continue
    label, phase, mbs, ops, secs = f[0], f[1], f[2], float(f[3]), float(f[4])
    srv = re.search(r"srv_cpu=([0-9.]+)s", line)
    cli = re.search(r"cli_cpu=([0-9.]+)s", line)
    objects = ops * secs
    rows.setdefault(label, {})[phase] = {
        "rate": float(mbs) if mbs != "-" and not phase.startswith(("list", "delete")) else ops,
        "unit": "MB/s" if mbs != "-" and not phase.startswith(("list", "delete")) else "obj/s",
        "srv_us": 1e6 * float(srv.group(1)) / objects if srv and objects else None,
        "cli_us": 1e6 * float(cli.group(1)) / objects if cli and objects else None,
    }
if "optio" not in rows:
    sys.exit(0)
peers = [p for p in rows if p != "optio"]
print()
print("phase".ljust(12), "optio".rjust(12), *(f"{p}".rjust(14) for p in peers), *(f"x {p}".rjust(14) for p in peers))
for phase, o in rows["optio"].items():
    cells = [f"{o['rate']:.1f} {o['unit']}".rjust(12)]
    ratios = []
    for p in peers:
        r = rows[p].get(phase)
        cells.append((f"{r['rate']:.1f}" if r else "-").rjust(14))
        ratios.append((f"{o['rate'] / r['rate']:.2f}" if r and r["rate"] else "-").rjust(14))
    print(phase.ljust(12), *cells, *ratios)
print()
print("CPU µs per object (servers / client):")
for label, phases in rows.items():
    print(label.ljust(14), "  ".join(
        f"{ph} {v['srv_us']:.0f}/{v['cli_us']:.0f}" if v["srv_us"] is not None else f"{ph} -/{v['cli_us']:.0f}"
        for ph, v in phases.items()))
PY
cp "$results" "$out"
echo "written to $out"
