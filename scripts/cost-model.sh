#!/usr/bin/env bash
# The cost model of issue 39: what one operation costs in CPU time and in syncs, for Optio and
# for Ceph RADOS, on the same machine in the same run, at equal durability (three replicas,
# each write durable on all three before it is acknowledged).
#
#   Optio: `optio up --zones 3 --hosts 1` (3 servers, r = 3); `optio bench` writes then reads
#          N objects and reports, per phase, the client's CPU, the servers' CPU (their
#          /v1/status `cpu_seconds`) and the servers' syncs (`syncs`, counted where the store
#          syncs) per operation.
#   Ceph:  ../shared/anchors/ceph-mini (1 mon, 1 mgr, 3 BlueStore OSDs, pool size 3);
#          `rados bench` write then seq for the same sizes and concurrency; the OSDs', mon's
#          and mgr's CPU from /proc/PID/stat before and after each phase, rados's own CPU
#          (GNU time, as the client), the OSDs' fsync/fdatasync/syncfs calls counted by
#          `perf stat -e syscalls:sys_enter_*` over each phase.
#
# Prints one table (µs of CPU and syncs per operation, and operations per second) and writes
# it as JSON to $OUT (default docs/cost-model.json).
# Usage: [OPTIO=BINARY] [JOBS="SIZE:OBJECTS:IN_FLIGHT ..."] [SERVERS=3|9]
#        scripts/cost-model.sh [SMALL_OBJECTS (default 4000)] [SECONDS (default 20)]
# JOBS: what to measure, each job a size, the objects Optio writes then reads, and the
#   operations in flight (both systems); default: 4 KiB, 64 KiB and 4 MiB at 1, 16 and 64
#   in flight (issue 39's matrix), with SMALL_OBJECTS scaling the object counts of the
#   small sizes. JOBS="4KiB:4000:16 4MiB:64:4" is the two-job run of docs/benchmarks.md.
# SECONDS: each rados phase of objects below 4 MiB; those of 4 MiB objects run half as long,
#   and each job's objects are removed after its read phase, which keeps Ceph's three
#   replicas within its OSDs' files.
# SERVERS: 3 (default: `optio up --zones 3 --hosts 1` against 3 OSDs) or 9 (`--hosts 3`
#   against CEPH_MINI_OSDS=9).
# METADATA=1: after each job's reads, two more phases on the objects written: `stat` (Optio
#   `optio bench --metadata`: `optio stat` of each object; Ceph: librados `stat`, what
#   `rados stat` does) and `delete` (`optio rm`; `rados rm`), with the same operations in
#   flight (Ceph's through scripts/rados-meta.py, librados aio on the names `rados ls` gave
#   before the phase; the client's CPU is the script's own over the timed operations).
# OPTIO_SCHEDULING=batch: Optio's servers under SCHED_BATCH (`optio server --scheduling`).
# TLS=1: both systems encrypted on the wire, like for like: Optio's cluster `optio up --tls`
#   (every request over TLS, clients' and servers' among themselves) against ceph-mini with
#   CEPH_MINI_SECURE=1 (msgr2 secure mode, AES-GCM, for clients, OSDs and monitors). Run it
#   once with and once without to see what encryption costs each system.
# BATCH=1: both systems under SCHED_BATCH, like for like: Optio's servers (as above), both
#   clients (`optio bench`, `rados bench`, rados-meta.py, under `chrt -b 0`), and every thread
#   of Ceph's OSDs, mon and mgr, set once its cluster is up.
# LOOPFS=ext4|xfs: both systems' files on a file system of their own, made for the run (mkfs's
#   defaults: ext4 with its journal) on a sparse image (LOOPFS_IMAGE, default
#   /var/tmp/optio-cost-model.img, 24 GiB, removed after) through a loop device with direct I/O
#   (the image's file sees what a disk would, not a second page cache). What a data disk
#   would have: this machine's root file system is ext4 without a journal, where creating a
#   file scans its block group's inodes freed in the last 60 s (360 s while their inode table
#   is unwritten), which made Optio's first writes of small objects cost three to four times
#   the CPU right after another run's files were deleted (docs/benchmarks.md).
# Needs root (perf tracepoints), jq, perf, GNU time, and what ceph-mini installs.
set -euo pipefail
small=${1:-4000}
seconds=${2:-20}
servers=${SERVERS:-3}
case "$servers" in 3|9) ;; *) echo "SERVERS must be 3 or 9" >&2; exit 2 ;; esac
jobs=${JOBS:-"4KiB:$((small / 2)):1 4KiB:$small:16 4KiB:$((small * 3 / 2)):64 64KiB:$((small / 4)):1 64KiB:$((small * 3 / 4)):16 64KiB:$((small * 3 / 4)):64 4MiB:32:1 4MiB:96:16 4MiB:192:64"}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-$root/docs/cost-model.json}
ceph_mini="$root/../shared/anchors/ceph-mini/ceph-mini.sh"
for tool in jq perf; do
  command -v "$tool" >/dev/null || { echo "$tool not found: apt-get install -y jq linux-perf" >&2; exit 1; }
done
[ -x "$ceph_mini" ] || { echo "no $ceph_mini" >&2; exit 1; }
if [ -n "${OPTIO:-}" ]; then
  optio=$OPTIO # a build to measure, as it is
else
  cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p optio
  optio="${CARGO_TARGET_DIR:-$root/target}/release/optio"
fi
loop_dev=""
loop_mnt=""
loop_image=""
loop_cleanup() {
  if [ -n "$loop_mnt" ]; then umount "$loop_mnt" 2>/dev/null || true; rmdir "$loop_mnt" 2>/dev/null || true; fi
  if [ -n "$loop_dev" ]; then losetup -d "$loop_dev" 2>/dev/null || true; fi
  if [ -n "$loop_image" ]; then rm -f "$loop_image"; fi
}
if [ -n "${LOOPFS:-}" ]; then
  case "$LOOPFS" in ext4|xfs) ;; *) echo "LOOPFS must be ext4 or xfs, not $LOOPFS" >&2; exit 2 ;; esac
  command -v "mkfs.$LOOPFS" >/dev/null || { echo "mkfs.$LOOPFS not found: apt-get install -y e2fsprogs xfsprogs" >&2; exit 1; }
  image=${LOOPFS_IMAGE:-/var/tmp/optio-cost-model.img}
  [ -e "$image" ] && { echo "$image exists (another run's?): remove it or set LOOPFS_IMAGE" >&2; exit 1; }
  trap loop_cleanup EXIT
  loop_image=$image
  truncate -s 24G "$loop_image"
  loop_dev=$(losetup --direct-io=on --find --show "$loop_image")
  if [ "$LOOPFS" = xfs ]; then mkfs.xfs -q -f "$loop_dev"; else mkfs.ext4 -q -F "$loop_dev"; fi
  loop_mnt=$(mktemp -d)
  mount "$loop_dev" "$loop_mnt"
  work=$(mktemp -d -p "$loop_mnt")
  echo "== on $LOOPFS made for this run: $loop_image through $loop_dev (direct I/O), at $loop_mnt"
else
  work=$(mktemp -d)
fi
client_sched=()
if [ "${BATCH:-0}" = 1 ]; then
  client_sched=(chrt -b 0)
  export OPTIO_SCHEDULING=batch
fi
up_flags=()
ceph_secure=0
if [ "${TLS:-0}" = 1 ]; then
  up_flags=(--tls)
  ceph_secure=1
fi
up_pid=""
ceph_dir="$work/ceph"
cleanup() {
  if [ -n "$up_pid" ]; then kill -INT "$up_pid" 2>/dev/null || true; wait "$up_pid" 2>/dev/null || true; fi
  if [ -f "$ceph_dir/.ceph-mini" ]; then "$ceph_mini" stop "$ceph_dir" >/dev/null 2>&1 || true; fi
  rm -rf "$work"
  loop_cleanup
}
trap cleanup EXIT
ticks=$(getconf CLK_TCK)

# CPU seconds (user + system) of the processes given, from /proc/PID/stat.
cpu_of() {
  local total=0 pid
  for pid in "$@"; do
    [ -r "/proc/$pid/stat" ] || continue
    # Fields 14 and 15 (utime, stime) after the command name, which may hold spaces.
    local rest
    rest=$(sed 's/^.*) //' "/proc/$pid/stat")
    total=$(awk -v t="$total" -v r="$rest" -v hz="$ticks" 'BEGIN { split(r, f, " "); print t + (f[12] + f[13]) / hz }')
  done
  echo "$total"
}

rows='[]'
add_row() { rows=$(jq --argjson r "$1" '. + [$r]' <<<"$rows"); }

echo "== Optio: optio up --zones 3 --hosts $((servers / 3)) ${up_flags[*]} ($servers servers, r = 3), in $work"
"$optio" up --dir "$work/optio" --zones 3 --hosts $((servers / 3)) --capacity 64GiB "${up_flags[@]}" > "$work/up.log" 2>&1 &
up_pid=$!
for _ in $(seq 300); do grep -q "Ctrl-C" "$work/up.log" && break; sleep 0.1; done
grep -q "Ctrl-C" "$work/up.log" || { cat "$work/up.log"; exit 1; }
for job in $jobs; do
  IFS=: read -r size objects concurrency <<<"$job"
  meta=()
  [ "${METADATA:-0}" = 1 ] && meta=(--metadata)
  "${client_sched[@]}" "$optio" bench --cluster "$work/optio" --objects "$objects" --size "$size" \
    --concurrency "$concurrency" --json "${meta[@]}" > "$work/optio-$size-$concurrency.json"
  phases="write read"
  [ "${METADATA:-0}" = 1 ] && phases="write read stat delete"
  for phase in $phases; do
    add_row "$(jq -c --arg s "$size" --arg p "$phase" --argjson c "$concurrency" '{
      system: "optio", size: $s, phase: $p, in_flight: $c,
      ops_per_s: (.[$p].operations / .[$p].seconds),
      client_cpu_us_per_op: .cost[$p].client_cpu_us_per_op,
      servers_cpu_us_per_op: .cost[$p].servers_cpu_us_per_op,
      syncs_per_op: .cost[$p].syncs_per_op }' "$work/optio-$size-$concurrency.json")"
  done
done
kill -INT "$up_pid"; wait "$up_pid" 2>/dev/null || true; up_pid=""

echo "== Ceph: ceph-mini ($servers BlueStore OSDs, size 3, msgr2 secure mode $ceph_secure)"
CEPH_MINI_SECURE=$ceph_secure CEPH_MINI_OSDS=$servers CEPH_MINI_PREFILL=0 "$ceph_mini" start "$ceph_dir" > "$work/ceph-start.log" 2>&1 \
  || { tail -20 "$work/ceph-start.log"; exit 1; }
export CEPH_CONF="$ceph_dir/ceph.conf"
pool=${CEPH_MINI_POOL:-rbdbench}
osds=$(pgrep -f "ceph-osd.*--conf $ceph_dir/ceph.conf" | tr '\n' ' ')
others=$(pgrep -f "ceph-(mon|mgr).*--conf $ceph_dir/ceph.conf" | tr '\n' ' ')
[ -n "$osds" ] || { echo "no ceph-osd processes found" >&2; exit 1; }
if [ "${BATCH:-0}" = 1 ]; then
  for pid in $osds $others; do
    for task in /proc/"$pid"/task/*; do chrt -b -p 0 "${task##*/}"; done
  done
fi
syscalls="syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync,syscalls:sys_enter_syncfs"
for job in $jobs; do
  IFS=: read -r size _ concurrency <<<"$job"
  case "$size" in
    *KiB) bytes=$(( ${size%KiB} * 1024 )) ;;
    *MiB) bytes=$(( ${size%MiB} * 1024 * 1024 )) ;;
    *) echo "JOBS: size $size is not N KiB or N MiB" >&2; exit 2 ;;
  esac
  phases="write seq"
  [ "${METADATA:-0}" = 1 ] && phases="write seq stat rm"
  for phase in $phases; do
    case "$phase" in write) name=write ;; seq) name=read ;; stat) name=stat ;; rm) name=delete ;; esac
    tag="$size-$concurrency-$phase"
    # (The objects a metadata phase works on are listed before it is measured.)
    case "$phase" in stat|rm) rados -p "$pool" ls | grep '^benchmark_data' > "$work/names-$tag.txt" ;; esac
    # shellcheck disable=SC2086
    servers_before=$(cpu_of $osds $others)
    perf stat -x, -e "$syscalls" -p "$(tr ' ' ',' <<<"${osds% }")" -o "$work/perf-$tag.txt" &
    perf_pid=$!
    sleep 0.5
    run_for=$([ "$bytes" -lt 4194304 ] && echo "$seconds" || echo $(( (seconds + 1) / 2 )))
    args=(-p "$pool" "$run_for" "$phase" -t "$concurrency")
    [ "$phase" = write ] && args+=(-b "$bytes" --no-cleanup)
    case "$phase" in
      write|seq) command=(rados bench "${args[@]}") ;;
      *)
        command=(/usr/bin/python3 "$root/scripts/rados-meta.py" "$phase" "$pool" "$concurrency" "$work/names-$tag.txt") ;;
    esac
    /usr/bin/time -f '%U %S' -o "$work/time-$tag.txt" \
      "${client_sched[@]}" "${command[@]}" > "$work/rados-$tag.txt" 2>&1 \
      || { cat "$work/rados-$tag.txt"; exit 1; }
    client_cpu=$(awk '{ print $1 + $2 }' "$work/time-$tag.txt")
    kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true
    # shellcheck disable=SC2086
    servers_after=$(cpu_of $osds $others)
    case "$phase" in
      write|seq)
        ops=$(grep -E "^Total (writes|reads) made:" "$work/rados-$tag.txt" | awk '{print $4}')
        secs=$(grep -E "^Total time run:" "$work/rados-$tag.txt" | awk '{print $4}') ;;
      *)
        ops=$(awk '/^ops / { print $2 }' "$work/rados-$tag.txt")
        secs=$(awk '/^ops / { print $4 }' "$work/rados-$tag.txt")
        client_cpu=$(awk '/^ops / { print $6 }' "$work/rados-$tag.txt") ;;
    esac
    syncs=$(awk -F, '{ s += $1 } END { print s + 0 }' < <(grep -v '^#' "$work/perf-$tag.txt" | grep syscalls))
    add_row "$(jq -nc --arg s "$size" --arg p "$name" --argjson c "$concurrency" \
      --argjson ops "$ops" --argjson secs "$secs" --argjson cc "$client_cpu" \
      --argjson sb "$servers_before" --argjson sa "$servers_after" --argjson sy "$syncs" '{
      system: "ceph", size: $s, phase: $p, in_flight: $c, ops_per_s: ($ops / $secs),
      client_cpu_us_per_op: ($cc * 1e6 / $ops),
      servers_cpu_us_per_op: (($sa - $sb) * 1e6 / $ops),
      syncs_per_op: ($sy / $ops) }')"
  done
  # This job's objects go before the next job writes (the OSDs' files are 10 GiB).
  rados -p "$pool" cleanup > /dev/null 2>&1 || true
done

jq --argjson n "$servers" '{ measured: (now | todate), servers: $n, rows: . }' <<<"$rows" > "$out"
echo
printf '%-6s %-6s %9s %-5s %9s %14s %15s %9s\n' system size in-flight phase "ops/s" "client µs/op" "servers µs/op" "syncs/op"
jq -r '.rows[] | [.system, .size, .in_flight, .phase, (.ops_per_s|floor), (.client_cpu_us_per_op|floor),
  ((.servers_cpu_us_per_op // -1)|floor), ((.syncs_per_op // -1) * 100 | floor / 100)] | @tsv' "$out" |
  while IFS=$'\t' read -r a b c d e f g h; do
    printf '%-6s %-6s %9s %-5s %9s %14s %15s %9s\n' "$a" "$b" "$c" "$d" "$e" "$f" "$g" "$h"
  done
# Optio's rate over Ceph's, job by job.
echo
printf '%-6s %9s %-5s %10s\n' size in-flight phase "optio/ceph"
jq -r '.rows as $r | [$r[] | select(.system == "optio")][] as $o
  | ($r[] | select(.system == "ceph" and .size == $o.size and .in_flight == $o.in_flight and .phase == $o.phase)) as $c
  | [$o.size, $o.in_flight, $o.phase, (($o.ops_per_s / $c.ops_per_s) * 100 | floor / 100)] | @tsv' "$out" |
  while IFS=$'\t' read -r a b c d; do printf '%-6s %9s %-5s %10s\n' "$a" "$b" "$c" "$d"; done
echo "(written to $out)"
