#!/usr/bin/env bash
# Snapshots and clones (issue 40, "Fast"): Optio and Ceph RBD side by side in one run, on the
# issue's four jobs, on the same machine and disk:
#   optio     `optio up` (its own cluster: 9 servers, 3 replicas), volumes served by `optio nbd`
#             on a Unix socket, fio's nbd engine;
#   ceph-rbd  ceph-mini (../shared/anchors/ceph-mini: 1 mon, 1 mgr, 3 BlueStore OSDs on sparse
#             files, pool rbdbench size 3), fio's rbd engine (librbd, rbd_cache = false).
# 1. `snap create`, median of 5, on a 1 GiB and a 100 GiB thin volume (image). Optio: the
#    command's own timing (`--json` elapsed_ms) and the wall time of the whole command (process
#    start and connecting included), without a writer, with `optio nbd` holding the lock, and with
#    `optio nbd` holding it while fio randwrite 4 KiB qd 32 writes through it (over the first
#    64 MiB: each snapshot makes the next writes copy every object they touch, 3 replicas of
#    4 MiB each, and 5 snapshots of 1 GiB written all over would take 30 GiB). RBD: the wall time
#    of `rbd snap create`, and librbd's own time (Image.create_snap() timed in one python3-rbd
#    process, connected and the image open: the counterpart of Optio's elapsed_ms), without a
#    writer and while fio (rbd engine) randwrite 4 KiB qd 32 writes to the image (librbd holds
#    the exclusive lock and takes the snapshot when asked).
# 2. fio randwrite 4 KiB qd 32, SECONDS each, on a fully written 1 GiB volume (4 MiB objects):
#    without a snapshot; right after `snap create` (objects copied at their first write); again
#    (copied); again after a `sync` (the copies' writeback done). Ratios to the first run; and,
#    as the copies are made in the first seconds after the snapshot, the first 5 s of the run
#    after it against the first 5 s of the first run (fio's 1 s IOPS samples).
# 3. `snap rm` of a snapshot that alone holds 10,000 objects: a 625 MiB volume of 64 KiB objects,
#    written, snapshotted, written again (each object once more: the snapshot alone holds 10,000
#    object versions); then fio randread 4 KiB qd 32 on the volume, its IOPS logged every 250 ms;
#    after SNAP_RM_WINDOW s, the removal. Optio: `optio volume snap rm V@s` (with --wait when the
#    command offers it: then it waits for a background trim; without it the command trims itself),
#    done when it returns. RBD: `rbd snap rm`, then done when the mon no longer lists the snapshot
#    in the pool's removed_snaps_queue and no PG is in snaptrim/snaptrim_wait (polled through
#    librados every ~0.3-1 s). Prints the time to done and the foreground IOPS during the removal
#    over those in the window before it. RBD's snap trim runs with osd_snap_trim_sleep_hdd =
#    SNAP_CEPH_TRIM_SLEEP (default 0, Ceph's SSD default; ceph-mini's OSDs take the HDD profile,
#    whose default of 5 s between trims of 2 objects per PG would make 10,000 objects take an hour
#    here; `default` leaves it). Optio runs it last: its trim deletes 30,000 files, and this ext4
#    then creates files slowly for minutes.
# 4. Clone reads: a 1 GiB volume written, snapshotted, the snapshot protected and cloned; fio
#    randread 4 KiB qd 32 and read 4 MiB qd 8 (SECONDS each) on the parent volume, on the fresh
#    clone (it wrote nothing: every read falls through to the parent snapshot) and, for Optio, on
#    the snapshot itself (`optio nbd` exports VOL@SNAP); clone / parent ratios. Optio twice:
#    `optio nbd` as a user gets it (it reads replicas on this machine from their files: here
#    all of the parent's, but not a snapshot's or a clone's fall-through), and --no-local-reads.
# Targets (issue 40): snap create <= 50 ms; after a snapshot >= 0.5x the IOPS while objects are
# copied, >= 0.9x once copied; snap rm of 10,000 objects done <= 30 s with the foreground
# >= 0.8x; clone reads >= 0.8x the parent's.
#
# Usage: scripts/bench-snap-vs-rbd.sh [SECONDS (default 20)]
# Environment: OPTIO (the optio binary; default target/release/optio of this checkout: build it
#   with `cargo build --release -p optio`); CEPH_MINI (default ../shared/anchors/ceph-mini/
#   ceph-mini.sh beside the repository); CEPH_MINI_PORT (default: the first of 18789, 19789, ...
#   with its 100 ports free); SNAP_CEPH_TRIM_SLEEP (default 0, or `default`); SNAP_RM_WINDOW
#   (seconds of foreground reads before the removal, default 15); SNAP_RM_TIMEOUT (the longest
#   wait for a removal to be done, default 900 s); OPTIO_NBD_FLAGS (flags for `optio nbd`, e.g.
#   --no-local-reads); TMPDIR (where everything lives, default /tmp).
# Disk: about 14 GiB for Optio, 12 GiB for Ceph, and Ceph's mon stops below 1 % free; checked.
# Needs fio with the nbd and rbd engines, ceph-mini's packages, /usr/bin/python3 with rados
# (python3-rados, installed with ceph-common) and python3. Everything it starts (the cluster,
# optio nbd, fio, ceph-mini) is stopped on exit, Ctrl-C included, and its directory removed
# (on a failure, its logs are kept first in ${TMPDIR:-/tmp}/bench-snap-rbd-failed.*).
# After a run, wait >= 6 min before the next one: this ext4 (no journal) creates files slowly
# for minutes after many deletions (the trim, the cluster's removal), which skews the numbers.
set -euo pipefail
seconds=${1:-20}
case "$seconds" in '' | *[!0-9]*) echo "SECONDS must be a number (got $seconds)" >&2; exit 1 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
optio=${OPTIO:-$root/target/release/optio}
ceph_mini=${CEPH_MINI:-$root/../shared/anchors/ceph-mini/ceph-mini.sh}
trim_sleep=${SNAP_CEPH_TRIM_SLEEP:-0}
rm_window=${SNAP_RM_WINDOW:-15}
rm_timeout=${SNAP_RM_TIMEOUT:-900}
pyrados=/usr/bin/python3

[ -x "$optio" ] || { echo "no optio binary at $optio: cargo build --release -p optio, or set OPTIO" >&2; exit 1; }
[ -x "$ceph_mini" ] || { echo "no ceph-mini at $ceph_mini (set CEPH_MINI)" >&2; exit 1; }
for tool in fio python3 rbd ceph; do
  command -v "$tool" >/dev/null || { echo "$tool not found" >&2; exit 1; }
done
fio --enghelp=nbd >/dev/null 2>&1 || { echo "this fio has no nbd engine" >&2; exit 1; }
fio --enghelp=rbd >/dev/null 2>&1 || { echo "this fio has no rbd engine" >&2; exit 1; }
"$pyrados" -c 'import rados' 2>/dev/null || { echo "$pyrados cannot import rados (apt-get install python3-rados)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/bench-snap-rbd.XXXXXX")
gib=$((1024 * 1024 * 1024))
fs_bytes=$(df -P -B1 "$work" | awk 'NR == 2 { print $2 }')
have=$(df -P -B1 "$work" | awk 'NR == 2 { print $4 }')
need=$((26 * gib + fs_bytes / 100))
if [ "$have" -lt "$need" ]; then
  rmdir "$work"
  echo "not enough disk under ${TMPDIR:-/tmp}: $((have / gib)) GiB free, need $((need / gib)) GiB" >&2; exit 1
fi

up_pid="" nbd_pid="" bg_pid="" ceph_start_pid="" ceph_dir=""
stop_pid() { # PID SIGNAL: signal it, wait up to 30 s, then KILL
  local pid=$1 sig=$2
  kill "-$sig" "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null; return 0; }
  for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && { echo "pid $pid ignored SIG$sig; killing it" >&2; kill -KILL "$pid" 2>/dev/null; }
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  local rc=$?
  set +e
  if [ "$rc" -ne 0 ] && [ -d "$work" ]; then # keep what shows why (not the data)
    keep=$(mktemp -d "${TMPDIR:-/tmp}/bench-snap-rbd-failed.XXXXXX")
    cp "$work"/*.log "$work"/*.out "$work"/*.err "$work"/*.json "$keep"/ 2>/dev/null
    mkdir -p "$keep/cluster" && cp "$work"/cluster/*.log "$keep/cluster/" 2>/dev/null
    echo "failed (exit $rc): logs kept in $keep" >&2
  fi
  [ -n "$bg_pid" ] && stop_pid "$bg_pid" INT
  [ -n "$nbd_pid" ] && stop_pid "$nbd_pid" TERM
  [ -n "$up_pid" ] && stop_pid "$up_pid" INT
  [ -n "$ceph_start_pid" ] && stop_pid "$ceph_start_pid" TERM
  [ -n "$ceph_dir" ] && [ -e "$ceph_dir" ] && "$ceph_mini" stop "$ceph_dir" > "$work/ceph-stop.log" 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# Ceph first, in the background (~40 s to come up), on ports nobody uses.
ports_free() { # BASE: no listener on BASE..BASE+100
  ! ss -Htln | awk -v a="$1" -v b="$(($1 + 100))" '{ n = split($4, f, ":"); p = f[n] + 0 } p >= a && p <= b { found = 1 } END { exit !found }'
}
if [ -z "${CEPH_MINI_PORT:-}" ]; then
  for base in 18789 19789 20789 21789 22789 23789; do ports_free "$base" && { CEPH_MINI_PORT=$base; break; }; done
  [ -n "${CEPH_MINI_PORT:-}" ] || { echo "no free port range for ceph-mini; set CEPH_MINI_PORT" >&2; exit 1; }
fi
export CEPH_MINI_PORT
ceph_dir="$work/ceph"
CEPH_MINI_IMAGE_GB=1 "$ceph_mini" start "$ceph_dir" > "$work/ceph-start.log" 2>&1 &
ceph_start_pid=$!

echo "== $0 $*: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), in $work ($((have / gib)) GiB free), $seconds s per fio run"
echo "   optio: $optio ($("$optio" --version 2>/dev/null || echo '?'))"
"$optio" up --dir "$work/cluster" --capacity 64GiB > "$work/up.log" 2>&1 &
up_pid=$!
for _ in $(seq 600); do grep -q "Ctrl-C" "$work/up.log" && break; kill -0 "$up_pid" 2>/dev/null || break; sleep 0.1; done
grep -q "Ctrl-C" "$work/up.log" || { echo "optio up did not come up:" >&2; cat "$work/up.log" >&2; exit 1; }
export OPTIO_CLUSTER="$work/cluster"

if ! wait "$ceph_start_pid"; then
  ceph_start_pid=""
  echo "ceph-mini did not start:" >&2; tail -20 "$work/ceph-start.log" >&2; exit 1
fi
ceph_start_pid=""
export CEPH_CONF="$ceph_dir/ceph.conf"
if [ "$trim_sleep" != default ]; then
  ceph config set osd osd_snap_trim_sleep_hdd "$trim_sleep" >/dev/null
fi
echo "   ceph-rbd: $(ceph --version | awk '{ print $1, $2, $3, $5 }'), 3 OSDs on port $CEPH_MINI_PORT, pool rbdbench size 3, rbd_cache=false," \
  "osd_snap_trim_sleep_hdd $(ceph config get osd.0 osd_snap_trim_sleep_hdd)"

# ---------------------------------------------------------------- helpers
now_ms() { date +%s%3N; }
sock="$work/nbd.sock"
nbd_stop() { [ -n "$nbd_pid" ] && stop_pid "$nbd_pid" TERM; nbd_pid=""; }
nbd_start() { # VOLUME...: one `optio nbd` serving them (it takes each read-write volume's lock)
  nbd_stop
  rm -f "$sock"
  # shellcheck disable=SC2086
  "$optio" nbd "$@" --socket "$sock" ${OPTIO_NBD_FLAGS:-} > "$work/nbd.out" 2> "$work/nbd.err" &
  nbd_pid=$!
  local v t0; t0=$(now_ms)
  for v in "$@"; do
    for _ in $(seq 1200); do grep -qF "serving nbd+unix:///$v?" "$work/nbd.out" && break; kill -0 "$nbd_pid" 2>/dev/null || break; sleep 0.1; done
    grep -qF "serving nbd+unix:///$v?" "$work/nbd.out" || { echo "optio nbd $* did not start in 120 s:" >&2; cat "$work/nbd.out" "$work/nbd.err" >&2; exit 1; }
  done
  # (it normally serves within ~0.2 s: say so when it did not)
  [ $(($(now_ms) - t0)) -lt 5000 ] || echo "    NOTE: optio nbd $* took $(($(now_ms) - t0)) ms to serve"
}
quiet() { # COMMAND...: run it, its output to a file; on failure show it and stop
  "$@" > "$work/quiet.out" 2>&1 || { echo "failed: $*" >&2; cat "$work/quiet.out" >&2; exit 1; }
}
oio() { echo "--ioengine=nbd --uri=nbd+unix:///$1?socket=$sock"; }              # VOLUME
rio() { echo "--ioengine=rbd --clientname=admin --pool=rbdbench --rbdname=$1"; } # IMAGE
runfio() { # OUT.json fio-args...
  local out=$1; shift
  if ! timeout --foreground $((4 * seconds + 900)) fio --output-format=json "$@" > "$out" 2> "$out.err"; then
    echo "fio failed: fio $*" >&2; cat "$out.err" "$out" >&2; exit 1
  fi
}
fio_iops() { # OUT.json read|write: IOPS
  python3 -c 'import json, sys; t = open(sys.argv[1]).read(); print(round(json.loads(t[t.index("{"):])["jobs"][0][sys.argv[2]]["iops"]))' "$1" "$2"
}
fio_mbps() { # OUT.json read|write: MB/s
  python3 -c 'import json, sys; t = open(sys.argv[1]).read(); print("%.0f" % (json.loads(t[t.index("{"):])["jobs"][0][sys.argv[2]]["bw_bytes"] / 1e6))' "$1" "$2"
}
bg_start() { # OUT fio-args...: a fio running in the background until bg_stop
  local out=$1; shift
  fio --output-format=json "$@" --time_based --runtime=$((rm_timeout + 600)) > "$out" 2> "$out.err" &
  bg_pid=$!
}
bg_stop() { stop_pid "$bg_pid" INT; bg_pid=""; }
ratio() { python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); print("%.2f" % (a / b) if b else "nan")' "$1" "$2"; }
verdict() { # VALUE OP TARGET
  python3 -c 'import sys; v, op, t = sys.argv[1:]; ok = float(v) <= float(t) if op == "le" else float(v) >= float(t); print("met" if ok else "NOT met")' "$1" "$2" "$3"
}
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
fill() { # ENGINE-ARGS (one string) SIZE [BS]: write every byte once, sequential, qd 8
  # (fio rounds the size down to a multiple of the block size: 625m needs 1m blocks)
  # shellcheck disable=SC2086
  runfio "$work/fill.json" --name=fill $1 --rw=write --bs="${3:-4M}" --iodepth=8 --size="$2"
}
summary=()
say() { echo "$*"; summary+=("$*"); }
free_disk() { df -P -B1 "$work" | awk 'NR == 2 { printf "%.1f GiB free", $4 / 1073741824 }'; }
randwrite=(--rw=randwrite --bs=4k --iodepth=32 --randrepeat=0 --norandommap)
randread=(--rw=randread --bs=4k --iodepth=32 --randrepeat=0 --norandommap)

# ---------------------------------------------------------------- 1. snap create
echo "== 1. snap create, median of 5 (1 GiB and 100 GiB thin) ($(free_disk))"
"$optio" volume create s1 1GiB > /dev/null
"$optio" volume create s100 100GiB > /dev/null
rbd create rbdbench/s1 --size 1G
rbd create rbdbench/s100 --size 100G
optio_creates() { # VOLUME TAG: "median elapsed_ms, median wall ms" of 5 `snap create`
  local i t0 out
  for i in 1 2 3 4 5; do
    t0=$(now_ms)
    out=$("$optio" volume snap create "$1@$2$i" --json)
    echo "$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["elapsed_ms"])' "$out") $(($(now_ms) - t0))"
  done > "$work/creates-$1-$2"
  echo "$(awk '{ print $1 }' "$work/creates-$1-$2" | median) $(awk '{ print $2 }' "$work/creates-$1-$2" | median)"
}
rbd_creates() { # IMAGE TAG: median wall ms of 5 `rbd snap create`
  local i t0
  for i in 1 2 3 4 5; do
    t0=$(now_ms)
    quiet rbd snap create "rbdbench/$1@$2$i"
    echo $(($(now_ms) - t0))
  done | median
}
rbd_api_creates() { # IMAGE TAG: median ms of 5 Image.create_snap() in one process (librbd's own time)
  "$pyrados" - "$CEPH_CONF" "$1" "$2" <<'EOF'
import sys, time
import rados, rbd
conf, name, tag = sys.argv[1:]
c = rados.Rados(conffile=conf, name="client.admin")
c.connect(timeout=30)
io = c.open_ioctx("rbdbench")
img = rbd.Image(io, name)  # opened for snapshots only: it takes no lock
ms = []
for i in range(1, 6):
    t = time.monotonic()
    img.create_snap("%s%d" % (tag, i))
    ms.append((time.monotonic() - t) * 1000)
img.close(); io.close(); c.shutdown()
print("%.1f" % sorted(ms)[2])
EOF
}
report_create() { # LABEL VOLUME "elapsed wall" (optio) ; prints and checks
  local e w; read -r e w <<< "$3"
  say "$(printf '  %-44s %-5s %8.1f ms (command wall %s ms)  target <= 50 ms: %s' "$1" "$2" "$e" "$w" "$(verdict "$e" le 50)")"
}
for v in s1 s100; do report_create "optio, no writer" "$v" "$(optio_creates "$v" a)"; done
nbd_start s1 s100
for v in s1 s100; do report_create "optio, optio nbd holding the lock" "$v" "$(optio_creates "$v" b)"; done
for v in s1 s100; do
  # shellcheck disable=SC2046
  bg_start "$work/writer-optio-$v.json" --name=writer $(oio "$v") --size=64m "${randwrite[@]}"
  sleep 3
  r=$(optio_creates "$v" c)
  bg_stop
  report_create "optio, optio nbd + fio randwrite qd32" "$v" "$r"
  echo "    (the writer: $(fio_iops "$work/writer-optio-$v.json" write) IOPS over its run)"
done
nbd_stop
for v in s1 s100; do
  w=$(rbd_creates "$v" a)
  report_create "rbd, no writer" "$v" "$(rbd_api_creates "$v" pa) $w"
done
for v in s1 s100; do
  # shellcheck disable=SC2046
  bg_start "$work/writer-rbd-$v.json" --name=writer $(rio "$v") --size=64m "${randwrite[@]}"
  sleep 3
  w=$(rbd_creates "$v" c)
  r=$(rbd_api_creates "$v" pc)
  bg_stop
  report_create "rbd, fio rbd randwrite qd32" "$v" "$r $w"
  echo "    (the writer: $(fio_iops "$work/writer-rbd-$v.json" write) IOPS over its run)"
done

# ---------------------------------------------------------------- 2. writes after a snapshot
echo "== 2. fio randwrite 4 KiB qd 32, ${seconds} s each, 1 GiB volume fully written (4 MiB objects) ($(free_disk))"
cow_runs() { # SYSTEM ENGINE-ARGS SNAP-COMMAND...
  local sys=$1 io=$2; shift 2
  fill "$io" 1g; sync
  # shellcheck disable=SC2086
  runfio "$work/w-$sys-0.json" --name=base $io --size=1g "${randwrite[@]}" --time_based --runtime="$seconds" \
    --write_iops_log="$work/w-$sys-0" --log_avg_msec=1000
  quiet "$@"
  # shellcheck disable=SC2086
  runfio "$work/w-$sys-1.json" --name=first $io --size=1g "${randwrite[@]}" --time_based --runtime="$seconds" \
    --write_iops_log="$work/w-$sys-1" --log_avg_msec=1000
  # shellcheck disable=SC2086
  runfio "$work/w-$sys-2.json" --name=second $io --size=1g "${randwrite[@]}" --time_based --runtime="$seconds"
  sync
  # shellcheck disable=SC2086
  runfio "$work/w-$sys-3.json" --name=third $io --size=1g "${randwrite[@]}" --time_based --runtime="$seconds"
  local b f s t
  b=$(fio_iops "$work/w-$sys-0.json" write); f=$(fio_iops "$work/w-$sys-1.json" write)
  s=$(fio_iops "$work/w-$sys-2.json" write); t=$(fio_iops "$work/w-$sys-3.json" write)
  say "  $sys: no snapshot $b IOPS; right after snap create $f ($(ratio "$f" "$b")x, target >= 0.5: $(verdict "$(ratio "$f" "$b")" ge 0.5));" \
    "again $s ($(ratio "$s" "$b")x, target >= 0.9: $(verdict "$(ratio "$s" "$b")" ge 0.9)); after a sync $t ($(ratio "$t" "$b")x)"
  # The copies happen in the first seconds of the run after the snapshot: its first 5 s and its
  # lowest second against the baseline run's (fio's 1 s samples).
  local b5 f5 bmin fmin
  read -r b5 bmin < <(early_iops "$work/w-$sys-0_iops.1.log")
  read -r f5 fmin < <(early_iops "$work/w-$sys-1_iops.1.log")
  say "  $sys:   first 5 s: no snapshot $b5 IOPS, right after snap create $f5 ($(ratio "$f5" "$b5")x, target >= 0.5: $(verdict "$(ratio "$f5" "$b5")" ge 0.5));" \
    "lowest 1 s: $bmin vs $fmin; right after, per second: $(cut -d, -f2 "$work/w-$sys-1_iops.1.log" | head -10 | tr -d ' ' | paste -sd' ')"
}
early_iops() { # LOG: mean IOPS of the samples in the first 5 s, and the lowest sample
  python3 -c '
import sys
v = [(int(l.split(",")[0]), int(l.split(",")[1])) for l in open(sys.argv[1])]
first = [x for t, x in v if t <= 5000]
print("%.0f %d" % (sum(first) / len(first), min(x for _, x in v)))' "$1"
}
"$optio" volume create w 1GiB > /dev/null
nbd_start w
cow_runs optio "$(oio w)" "$optio" volume snap create w@s
nbd_stop
rbd create rbdbench/w --size 1G
cow_runs rbd "$(rio w)" rbd snap create rbdbench/w@s

# ---------------------------------------------------------------- 4. clone reads
# (before 3: Optio's trim there deletes 30,000 files, after which this ext4 is slow for minutes)
echo "== 4. reads of a fresh clone (everything falls through) vs its parent, ${seconds} s each ($(free_disk))"
"$optio" volume create p 1GiB > /dev/null
nbd_start p
fill "$(oio p)" 1g
quiet "$optio" volume snap create p@g
quiet "$optio" volume snap protect p@g
quiet "$optio" volume clone p@g c
nbd_start p c p@g
rbd create rbdbench/p --size 1G
fill "$(rio p)" 1g
quiet rbd snap create rbdbench/p@g
quiet rbd snap protect rbdbench/p@g
quiet rbd clone rbdbench/p@g rbdbench/c
sync
clone_reads() { # LABEL NAME IOPS|MB/s "SYSTEM:VOLUME ..." fio-args...
  local label=$1 name=$2 unit=$3 targets=$4 v; shift 4
  local get=fio_iops; [ "$unit" = MB/s ] && get=fio_mbps
  local line="" po="" pc="" pg="" ro="" rc=""
  for t in $targets; do
    local sys=${t%%:*} vol=${t#*:} io out
    if [ "$sys" = optio ]; then io=$(oio "$vol"); else io=$(rio "$vol"); fi
    out="$work/r-$name-$sys-$vol-${label//[^a-z]/}.json"
    # shellcheck disable=SC2086
    runfio "$out" --name="$name" $io --size=1g "$@" --time_based --runtime="$seconds"
    v=$($get "$out" read)
    line+=" $vol $v;"
    case "$t" in optio:p) po=$v ;; optio:c) pc=$v ;; optio:p@g) pg=$v ;; rbd:p) ro=$v ;; rbd:c) rc=$v ;; esac
  done
  echo "  $label $name ($unit):$line"
  if [ -n "$po" ]; then
    say "  $label $name: clone/parent $(ratio "$pc" "$po") ($pc / $po $unit; target >= 0.8: $(verdict "$(ratio "$pc" "$po")" ge 0.8));" \
      "clone/snapshot $(ratio "$pc" "$pg") ($pc / $pg $unit)"
  else
    say "  $label $name: clone/parent $(ratio "$rc" "$ro") ($rc / $ro $unit; target >= 0.8: $(verdict "$(ratio "$rc" "$ro")" ge 0.8))"
  fi
}
clone_reads optio randread IOPS "optio:p optio:c optio:p@g" "${randread[@]}"
clone_reads rbd randread IOPS "rbd:p rbd:c" "${randread[@]}"
clone_reads optio seqread MB/s "optio:p optio:c optio:p@g" --rw=read --bs=4M --iodepth=8
clone_reads rbd seqread MB/s "rbd:p rbd:c" --rw=read --bs=4M --iodepth=8
# `optio nbd` reads the replicas on this machine from their files (here: all of them), but
# not for a snapshot or a clone's fall-through: the same through the servers only.
case " ${OPTIO_NBD_FLAGS:-} " in
  *" --no-local-reads "*) ;;
  *)
    saved_flags=${OPTIO_NBD_FLAGS:-}
    OPTIO_NBD_FLAGS="$saved_flags --no-local-reads"
    nbd_start p c p@g
    clone_reads "optio --no-local-reads" randread IOPS "optio:p optio:c optio:p@g" "${randread[@]}"
    clone_reads "optio --no-local-reads" seqread MB/s "optio:p optio:c optio:p@g" --rw=read --bs=4M --iodepth=8
    OPTIO_NBD_FLAGS=$saved_flags ;;
esac
nbd_stop

# ---------------------------------------------------------------- 3. snap rm under foreground reads
cat > "$work/trimwait.py" <<'EOF'
# Waits until Ceph has trimmed a removed snapshot: its id is out of the pool's removed_snaps_queue
# (the mon's osdmap; the mon drops it once every PG reported it purged) and no PG is in snaptrim
# or snaptrim_wait (the pgmap in `status`). argv: CEPH_CONF POOL SNAPID TIMEOUT_S LOG.
# Prints the Unix time in ms when done, or "timeout ...".
import json, sys, time
import rados

conf, pool, snapid, timeout, logpath = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
c = rados.Rados(conffile=conf, name="client.admin")
c.connect(timeout=30)

def mon(prefix):
    ret, buf, err = c.mon_command(json.dumps({"prefix": prefix, "format": "json"}), b"", timeout=30)
    if ret != 0:
        raise SystemExit("ceph %s: %s" % (prefix, err))
    return json.loads(buf)

start, seen = time.time(), False
with open(logpath, "w") as log:
    while True:
        d = mon("osd dump")
        pid = next(p["pool"] for p in d["pools"] if p["pool_name"] == pool)
        queued = any(e["pool"] == pid and any(s["begin"] <= snapid < s["begin"] + s["length"] for s in e["snaps"])
                     for e in d.get("removed_snaps_queue", []))
        states = mon("status")["pgmap"].get("pgs_by_state", [])
        trimming = sum(s["count"] for s in states if "snaptrim" in s["state_name"])
        now = time.time()
        seen = seen or queued or trimming > 0
        log.write("%.3f queued=%s pgs_trimming=%d %s\n" % (now - start, queued, trimming,
                  ",".join("%s:%d" % (s["state_name"], s["count"]) for s in states)))
        log.flush()
        # (seen, or 10 s): a removal the mon had not published yet must not count as done
        if not queued and trimming == 0 and (seen or now - start > 10):
            print(int(now * 1000))
            break
        if now - start > timeout:
            print("timeout: after %.0f s snapshot %d still queued=%s, %d PGs trimming" % (now - start, snapid, queued, trimming))
            break
        time.sleep(0.25)
c.shutdown()
EOF
window_iops() { # LOG FROM_MS TO_MS: mean IOPS of fio's 250 ms samples, weighted by overlap
  python3 - "$@" <<'EOF'
import sys
path, a, b = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ios = span = 0.0
for line in open(path):
    f = [x.strip() for x in line.split(",")]
    end, iops = int(f[0]), float(f[1])
    lo, hi = max(a, end - 250), min(b, end)
    if hi > lo:
        ios += iops * (hi - lo); span += hi - lo
print("%.0f" % (ios / span) if span else "nan")
EOF
}
echo "== 3. snap rm of a snapshot holding 10,000 objects (625 MiB, 64 KiB objects) under fio randread 4 KiB qd 32 ($(free_disk))"
rm_run() { # SYSTEM ENGINE-ARGS: sets rm_done_ms, rm_cmd_ms, fg_before, fg_during
  local sys=$1 io=$2 t0 t1 td
  sync; sleep 5
  # shellcheck disable=SC2086
  bg_start "$work/fg-$sys.json" --name=fg $io --size=625m "${randread[@]}" \
    --write_iops_log="$work/fg-$sys" --log_avg_msec=250 --log_unix_epoch=1
  sleep "$rm_window"
  t0=$(now_ms)
  if [ "$sys" = optio ]; then
    local wait_flag=() help
    help=$("$optio" volume snap rm --help)
    grep -q -- '--wait' <<< "$help" && wait_flag=(--wait)
    "$optio" volume snap rm t@s "${wait_flag[@]}" --json > "$work/rm-optio.out" 2> "$work/rm-optio.err" \
      || { echo "optio volume snap rm t@s ${wait_flag[*]} failed:" >&2; cat "$work/rm-optio.err" >&2; exit 1; }
    t1=$(now_ms); td=$t1
    echo "    optio volume snap rm t@s ${wait_flag[*]}: $(cat "$work/rm-optio.out")"
  else
    local id
    id=$(rbd snap ls rbdbench/t --format json | python3 -c 'import json, sys; print([s["id"] for s in json.load(sys.stdin) if s["name"] == "s"][0])')
    quiet rbd snap rm rbdbench/t@s
    t1=$(now_ms)
    td=$("$pyrados" "$work/trimwait.py" "$CEPH_CONF" rbdbench "$id" "$rm_timeout" "$work/trim.log")
    echo "    rbd snap rm rbdbench/t@s returned after $((t1 - t0)) ms; trim: $(wc -l < "$work/trim.log") polls, last: $(tail -1 "$work/trim.log")"
    case "$td" in timeout*) echo "    $td"; td=$(now_ms); rm_timed_out=1 ;; esac
  fi
  sleep 3
  bg_stop
  rm_cmd_ms=$((t1 - t0)); rm_done_ms=$((td - t0))
  fg_before=$(window_iops "$work/fg-${sys}_iops.1.log" $((t0 - (rm_window - 3) * 1000)) "$t0")
  fg_during=$(window_iops "$work/fg-${sys}_iops.1.log" "$t0" "$td")
  fg_after=$(window_iops "$work/fg-${sys}_iops.1.log" "$td" $((td + 3000)))
}
rm_timed_out=0
rbd create rbdbench/t --size 625M --object-size 64K
fill "$(rio t)" 625m 1M
quiet rbd snap create rbdbench/t@s
fill "$(rio t)" 625m 1M
echo "    rbd du: $(rbd du rbdbench/t 2> /dev/null | tr -s ' ' | tr '\n' ';')"
rm_run rbd "$(rio t)"
done_s=$(python3 -c "print('%.1f' % ($rm_done_ms / 1000))")
fr=$(ratio "$fg_during" "$fg_before")
say "  rbd: rbd snap rm returned in $rm_cmd_ms ms; trimmed (done) after $done_s s$([ "$rm_timed_out" = 1 ] && echo ' (TIMED OUT, not done)') (target <= 30 s: $(verdict "$done_s" le 30));" \
  "foreground randread $fg_before IOPS before, $fg_during during (${fr}x, target >= 0.8: $(verdict "$fr" ge 0.8)), $fg_after in the 3 s after"

"$optio" volume create t 625MiB --object-size 64KiB > /dev/null
nbd_start t
fill "$(oio t)" 625m 1M
quiet "$optio" volume snap create t@s
fill "$(oio t)" 625m 1M
echo "    optio du: $("$optio" volume du t | tr -s ' ' | tr '\n' ';')"
rm_run optio "$(oio t)"
done_s=$(python3 -c "print('%.1f' % ($rm_done_ms / 1000))")
fr=$(ratio "$fg_during" "$fg_before")
say "  optio: snap rm done after $done_s s (target <= 30 s: $(verdict "$done_s" le 30));" \
  "foreground randread $fg_before IOPS before, $fg_during during (${fr}x, target >= 0.8: $(verdict "$fr" ge 0.8)), $fg_after in the 3 s after"
echo "    optio du after: $("$optio" volume du t | tr -s ' ' | tr '\n' ';')"
nbd_stop

echo "== summary, $(free_disk) at the end ($(date -u '+%Y-%m-%d %H:%M:%S UTC'))"
printf '%s\n' "${summary[@]}"
