#!/usr/bin/env bash
# Optio block volumes over NBD against anchors on the same machine and disk, measured side by
# side in one run with fio (issue 15):
#   optio     `optio up` (release, 3 zones x 3 hosts, pool `data`: r = 3, CHOICE k = 2, policy
#             `space`, authentication on), one volume of SIZE served by `optio nbd`;
#   qemu-nbd  a raw file of SIZE on the same file system (one copy, no replication), qemu-nbd's
#             default cache mode (writeback: the host page cache, FLUSH = fdatasync; this is what
#             a user gets, and what Optio's servers do too: they write through the page cache and
#             a flush is a syncfs). QEMU_NBD_CACHE=none|writethrough|... to change it;
#   ceph-rbd  (optional) ceph-mini (/work/shared/anchors/ceph-mini: 1 mon, 1 mgr, 3 BlueStore OSDs
#             on sparse files, pool size 3), an image of ceil(SIZE) GiB of which the first SIZE
#             bytes are used, fio's rbd engine, librbd with rbd_cache = false (every write is
#             acknowledged once durable on 3 OSDs: stricter than the other two).
# Each target is prefilled once (sequential 4 MiB writes over SIZE, iodepth 8) so reads read real
# data. Then for each job, optio, qemu-nbd and ceph-rbd one after the other, SECONDS each
# (--time_based), one fio job (numjobs 1) over the first SIZE bytes:
#   seqwrite      --rw=write     --bs=4M --iodepth=8
#   seqread       --rw=read      --bs=4M --iodepth=8
#   randwrite-q1  --rw=randwrite --bs=4k --iodepth=1  --randrepeat=0 --norandommap
#   randwrite-q32 --rw=randwrite --bs=4k --iodepth=32 --randrepeat=0 --norandommap
#   randread-q1   --rw=randread  --bs=4k --iodepth=1  --randrepeat=0 --norandommap
#   randread-q32  --rw=randread  --bs=4k --iodepth=32 --randrepeat=0 --norandommap
# --direct=1 is not passed: the nbd and rbd engines open no local file, so it has no meaning
# there (the cache behaviour is the server's, as described above). Prints per job MB/s (10^6
# bytes), IOPS, mean and p99 completion latency (fio clat), then the ratios and their targets:
#   reads   optio / qemu-nbd        >= 0.60
#   writes  optio / (qemu-nbd / 3)  >= 0.60  (optio writes 3 replicas, qemu-nbd one copy)
#   all     optio / ceph-rbd        >= 0.60  (both write 3 replicas on the same disk)
# Then the CHOICE probe overhead on first writes (seed 000, section 5.2; the paper: +6.9 %;
# target <= 5 %): the latency of writing the first 4 KiB of never-written 4 MiB objects, k = 2
# against k = 1. `optio up` makes both pools in the one cluster: `data` (crush, rule by_zone,
# r = 3, pg_num 128, k = 2, policy space) and `plain` (crush, the same rule, r = 3, pg_num 128,
# k = 1), so no map editing and no second cluster are needed (`optio up --choices 1` would set
# k = 1 on `data` instead; not used). A volume's data objects live in its pool, so fresh thin
# volumes of CHOICE_OBJECTS x 4 MiB are made in each pool before `optio nbd` starts, and fio
# writes, at iodepth 1, 4 KiB at offsets 0, 4 MiB, 8 MiB, ... (--zonemode=strided
# --zonesize=4k --zonerange=4M --io_size=OBJECTS x 4k: each write is the first write of the next
# object; the script checks the offsets in fio's latency log). Rounds alternate k = 1 and k = 2
# (order swapped every round) on fresh volumes until CHOICE_SAMPLES first writes per k; the
# per-write latencies of all rounds are pooled.
#
# Usage: scripts/bench-volume.sh [SECONDS (default 30)] [SIZE (default 2GiB; a multiple of 4MiB)]
# Environment: BENCH_CEPH=0 (skip Ceph), 1 (require it) or auto (default: run it when ceph-mini.sh
#   exists and the disk has room); CEPH_MINI (path of ceph-mini.sh, default
#   ../shared/anchors/ceph-mini/ceph-mini.sh from the repository); CHOICE_SAMPLES (default 1024,
#   0 to skip the CHOICE experiment); CHOICE_OBJECTS (objects per volume and round, default 256);
#   QEMU_NBD_CACHE (default writeback); TMPDIR (where everything lives; default /tmp);
#   OPTIO (an optio binary to measure; default: the release build, built first);
#   BENCH_JOBS (the fio jobs to run, by name, space-separated; default all; `none`: only the
#   prefill and the CHOICE experiment); OPTIO_NBD_FLAGS (flags for `optio nbd`, e.g. --no-local-reads: every read through the
#   servers; by default `optio nbd` reads replicas on this machine from their files,
#   docs/volumes.md "Local reads").
# Disk: about 3 x SIZE for optio, SIZE for the raw file, 3 x SIZE + ~3 GiB for Ceph, whose mon also
# stops when its file system has less than 1 % free; checked first (fio runs are bounded by timeout).
# Needs fio (with the nbd engine; rbd for Ceph), qemu-nbd (qemu-utils) and python3.
# Everything started (cluster, optio nbd, qemu-nbd, ceph-mini) is stopped on exit, Ctrl-C included.
set -euo pipefail
seconds=${1:-30}
size_arg=${2:-2GiB}
root=$(cd "$(dirname "$0")/.." && pwd)
bench_ceph=${BENCH_CEPH:-auto}
ceph_mini=${CEPH_MINI:-$root/../shared/anchors/ceph-mini/ceph-mini.sh}
choice_samples=${CHOICE_SAMPLES:-1024}
choice_objects=${CHOICE_OBJECTS:-256}
qemu_cache=${QEMU_NBD_CACHE:-writeback}
for tool in fio qemu-nbd python3; do
  command -v "$tool" >/dev/null || { echo "$tool not found: apt-get install -y fio qemu-utils python3" >&2; exit 1; }
done
fio --enghelp=nbd >/dev/null 2>&1 || { echo "this fio has no nbd engine (fio >= 3.20 built with libnbd)" >&2; exit 1; }
size=$(python3 -c '
import re, sys
m = re.fullmatch(r"(\d+)\s*([kmgt]?)(i?b)?", sys.argv[1].strip().lower())
if not m: sys.exit("bad SIZE %r (e.g. 2GiB, 512MiB)" % sys.argv[1])
print(int(m.group(1)) * 1024 ** " kmgt".index(m.group(2) or " "))' "$size_arg")
mib=$((1024 * 1024))
gib=$((1024 * mib))
if [ "$size" -lt $((4 * mib)) ] || [ $((size % (4 * mib))) -ne 0 ]; then
  echo "SIZE must be a positive multiple of 4MiB (got $size_arg = $size bytes)" >&2; exit 1
fi
case "$seconds" in '' | *[!0-9]*) echo "SECONDS must be a number (got $seconds)" >&2; exit 1 ;; esac

# Everything on the same file system (TMPDIR, default /tmp): cluster, raw file, Ceph's OSD files.
work=$(mktemp -d)
up_pid="" nbd_pid="" qemu_pid="" ceph_start_pid="" ceph_dir=""
stop_pid() { # PID SIGNAL: signal it, wait up to 30 s, then KILL
  local pid=$1 sig=$2
  kill "-$sig" "$pid" 2>/dev/null || return 0
  for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && { echo "pid $pid ignored SIG$sig; killing it" >&2; kill -KILL "$pid" 2>/dev/null; }
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  set +e
  [ -n "$nbd_pid" ] && stop_pid "$nbd_pid" TERM
  [ -n "$qemu_pid" ] && stop_pid "$qemu_pid" TERM
  [ -n "$up_pid" ] && stop_pid "$up_pid" INT
  [ -n "$ceph_start_pid" ] && stop_pid "$ceph_start_pid" TERM
  [ -n "$ceph_dir" ] && [ -e "$ceph_dir" ] && "$ceph_mini" stop "$ceph_dir" > "$work/ceph-stop.log" 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
avail() { df -P -B1 "$work" | awk 'NR == 2 { print $4 }'; }
gb() { awk -v b="$1" 'BEGIN { printf "%.1f GiB", b / 1073741824 }'; }

# Disk room: optio 3 x SIZE, the raw file SIZE, 512 MiB to spare; Ceph 3 x SIZE + 3 GiB more.
need=$((4 * size + 512 * mib))
# (ceph-mon also shuts down when its file system has less than 1 % free: mon_data_avail_crit.)
fs_bytes=$(df -P -B1 "$work" | awk 'NR == 2 { print $2 }')
need_ceph=$((3 * size + 3 * gib + fs_bytes / 100))
have=$(avail)
if [ "$have" -lt "$need" ]; then
  echo "not enough disk under $work: $(gb "$have") free, need $(gb "$need") (4 x SIZE + 0.5 GiB); use a smaller SIZE or set TMPDIR" >&2
  exit 1
fi
run_ceph=0
case "$bench_ceph" in
  0 | no | false) ;;
  1 | yes | true)
    [ -x "$ceph_mini" ] || { echo "BENCH_CEPH=1 but $ceph_mini is missing" >&2; exit 1; }
    [ "$have" -ge $((need + need_ceph)) ] || { echo "BENCH_CEPH=1 but only $(gb "$have") free, need $(gb $((need + need_ceph)))" >&2; exit 1; }
    run_ceph=1 ;;
  *)
    if [ ! -x "$ceph_mini" ]; then echo "(Ceph skipped: $ceph_mini not found)"
    elif [ "$have" -lt $((need + need_ceph)) ]; then echo "(Ceph skipped: $(gb "$have") free under $work, it would need $(gb $((need + need_ceph))) with the others; BENCH_CEPH=1 insists)"
    else run_ceph=1; fi ;;
esac

if [ -n "${OPTIO:-}" ]; then
  optio=$OPTIO
else
  cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p optio
  optio="${CARGO_TARGET_DIR:-$root/target}/release/optio"
fi

# The fio report: python3 reads fio's JSON (the nbd engine prints a line before it).
cat > "$work/report.py" <<'EOF'
import json, sys

def load(path):
    text = open(path).read()
    return json.loads(text[text.index("{"):])

def job(path, ddir):
    d = load(path)["jobs"][0][ddir]
    pct = d["clat_ns"].get("percentile", {})
    return {"mbps": d["bw_bytes"] / 1e6, "iops": d["iops"], "mean": d["clat_ns"]["mean"],
            "p99": pct.get("99.000000", float("nan")), "ios": d["total_ios"]}

def lat(ns):
    if ns != ns: return "-"
    if ns >= 1e7: return "%.1f ms" % (ns / 1e6)
    if ns >= 1e6: return "%.2f ms" % (ns / 1e6)
    return "%.0f us" % (ns / 1e3)

def verdict(r, target=0.60):
    return "%.2f  (target >= %.2f) %s" % (r, target, "ok" if r >= target else "below target")

def table(name, ddir, *pairs):
    # pairs: target=path; prints the table and the ratios, returns the ratio lines
    res = {}
    for p in pairs:
        t, path = p.split("=", 1)
        res[t] = job(path, ddir)
    print("  %-10s %10s %10s %11s %11s" % ("target", "MB/s", "IOPS", "mean lat", "p99 lat"))
    for t, r in res.items():
        print("  %-10s %10.1f %10.0f %11s %11s" % (t, r["mbps"], r["iops"], lat(r["mean"]), lat(r["p99"])))
    o, lines = res["optio"]["iops"], []
    q = res["qemu-nbd"]["iops"]
    if ddir == "read":
        lines.append("%-14s optio / qemu-nbd       = %s" % (name, verdict(o / q if q else 0)))
    else:
        lines.append("%-14s optio / (qemu-nbd / 3) = %s" % (name, verdict(o / (q / 3) if q else 0)))
    if "ceph-rbd" in res:
        c = res["ceph-rbd"]["iops"]
        lines.append("%-14s optio / ceph-rbd       = %s" % (name, verdict(o / c if c else 0)))
    for l in lines: print("  " + l)
    return lines

def prefill(path):
    r = job(path, "write")
    return "%.1f MB/s, mean %s, p99 %s" % (r["mbps"], lat(r["mean"]), lat(r["p99"]))

def choice(obj_bytes, *logs):
    # logs: k=path of fio clat logs (time, latency ns, ddir, bs, offset, ...)
    lats = {}
    for p in logs:
        k, path = p.split("=", 1)
        offsets = []
        for line in open(path):
            f = [x.strip() for x in line.split(",")]
            offsets.append(int(f[4]))
            lats.setdefault(k, []).append(int(f[1]))
        want = [i * obj_bytes for i in range(len(offsets))]
        if offsets != want:
            sys.exit("%s: offsets are not 0, %d, %d, ...: %s" % (path, obj_bytes, 2 * obj_bytes, offsets[:5]))
    def stats(v):
        v = sorted(v)
        return sum(v) / len(v), v[len(v) // 2], v[min(len(v) - 1, int(len(v) * 0.99))]
    s1, s2 = stats(lats["1"]), stats(lats["2"])
    print("  %-22s %8s %10s %10s %10s" % ("pool", "writes", "mean", "p50", "p99"))
    print("  %-22s %8d %10s %10s %10s" % ("plain (k = 1)", len(lats["1"]), lat(s1[0]), lat(s1[1]), lat(s1[2])))
    print("  %-22s %8d %10s %10s %10s" % ("data (k = 2, space)", len(lats["2"]), lat(s2[0]), lat(s2[1]), lat(s2[2])))
    om, op = 100 * (s2[0] / s1[0] - 1), 100 * (s2[1] / s1[1] - 1)
    line = "CHOICE first-write overhead (k = 2 vs k = 1) = %+.1f %% mean (%+.1f %% p50)  (target <= 5 %%; paper +6.9 %%) %s" % (
        om, op, "ok" if om <= 5 else "below target")
    print("  " + line)
    return [line]

if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "table":
        out = table(*args)
    elif cmd == "prefill":
        print(prefill(args[0])); out = []
    else:
        out = choice(int(args[0]), *args[1:])
    with open(sys.argv[0] + ".summary", "a") as f:
        for l in out: f.write(l + "\n")
EOF

runfio() { # OUT.json fio-args...: run fio, its JSON to OUT.json; show its errors if it fails
  local out=$1; shift
  if ! timeout --foreground "${fio_timeout:-$((4 * seconds + 600))}" fio --output-format=json "$@" > "$out" 2> "$out.err"; then
    echo "fio failed: fio $*" >&2; cat "$out.err" "$out" >&2; exit 1
  fi
}

# Ceph first, in the background: it takes ~40 s to come up.
if [ "$run_ceph" = 1 ]; then
  ceph_dir="$work/ceph"
  image_gb=$(((size + gib - 1) / gib))
  CEPH_MINI_IMAGE_GB=$image_gb "$ceph_mini" start "$ceph_dir" > "$work/ceph-start.log" 2>&1 &
  ceph_start_pid=$!
fi

echo "== setup in $work ($(gb "$(avail)") free): SIZE $size_arg ($size bytes), $seconds s per run"
"$optio" up --dir "$work/cluster" --capacity 64GiB > "$work/up.log" 2>&1 &
up_pid=$!
for _ in $(seq 600); do grep -q "Ctrl-C" "$work/up.log" && break; kill -0 "$up_pid" 2>/dev/null || break; sleep 0.1; done
grep -q "Ctrl-C" "$work/up.log" || { echo "optio up did not come up:" >&2; cat "$work/up.log" >&2; exit 1; }
export OPTIO_CLUSTER="$work/cluster"
"$optio" volume create bench "$size" > /dev/null
# The CHOICE experiment's volumes, made now: `optio nbd` serves the volumes there are when it starts.
choice_rounds=0
if [ "$choice_samples" -gt 0 ]; then
  choice_rounds=$(((choice_samples + choice_objects - 1) / choice_objects))
  for n in $(seq "$choice_rounds"); do
    "$optio" volume create "choice-k2-$n" $((choice_objects * 4 * mib)) --pool data > /dev/null
    "$optio" volume create "choice-k1-$n" $((choice_objects * 4 * mib)) --pool plain > /dev/null
  done
fi
optio_port=$(free_port)
# shellcheck disable=SC2086
# Plain TCP on loopback, as qemu-nbd is measured (scripts/bench-nbd-tls.sh measures TLS).
"$optio" nbd --listen "127.0.0.1:$optio_port" --insecure-plain-tcp ${OPTIO_NBD_FLAGS:-} > "$work/nbd.out" 2> "$work/nbd.err" &
nbd_pid=$!
for _ in $(seq 600); do grep -q "^serving nbd://127.0.0.1:$optio_port/bench$" "$work/nbd.out" && break; kill -0 "$nbd_pid" 2>/dev/null || break; sleep 0.1; done
grep -q "^serving nbd://127.0.0.1:$optio_port/bench$" "$work/nbd.out" || { echo "optio nbd did not start:" >&2; cat "$work/nbd.out" "$work/nbd.err" >&2; exit 1; }
echo "  optio:    $("$optio" volume info bench | awk '/^pool/ { p = $2 } END { print "volume bench, pool " p }'), nbd://127.0.0.1:$optio_port/bench"

truncate -s "$size" "$work/anchor.raw"
qemu_port=$(free_port)
qemu-nbd -f raw -x anchor -b 127.0.0.1 -p "$qemu_port" -t --shared=8 --cache="$qemu_cache" "$work/anchor.raw" > "$work/qemu-nbd.log" 2>&1 &
qemu_pid=$!
for _ in $(seq 300); do (exec 3<>"/dev/tcp/127.0.0.1/$qemu_port") 2>/dev/null && break; kill -0 "$qemu_pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$qemu_pid" 2>/dev/null || { echo "qemu-nbd did not start:" >&2; cat "$work/qemu-nbd.log" >&2; exit 1; }
echo "  qemu-nbd: $(qemu-nbd --version | head -1), raw file $work/anchor.raw, --cache=$qemu_cache, nbd://127.0.0.1:$qemu_port/anchor"

optio_io=(--ioengine=nbd "--uri=nbd://127.0.0.1:$optio_port/bench")
qemu_io=(--ioengine=nbd "--uri=nbd://127.0.0.1:$qemu_port/anchor")
ceph_io=(--ioengine=rbd --clientname=admin --pool=rbdbench --rbdname=img0)
targets=(optio qemu-nbd)
target_io() { # TARGET: its fio engine options, one per line
  case "$1" in
    optio) printf '%s\n' "${optio_io[@]}" ;;
    qemu-nbd) printf '%s\n' "${qemu_io[@]}" ;;
    ceph-rbd) printf '%s\n' "${ceph_io[@]}" ;;
  esac
}

prefill() { # TARGET
  local io; mapfile -t io < <(target_io "$1")
  fio_timeout=7200 runfio "$work/prefill-$1.json" --name=prefill "${io[@]}" --size="$size" --rw=write --bs=4M --iodepth=8
  printf '  prefill %-9s %s\n' "$1:" "$(python3 "$work/report.py" prefill "$work/prefill-$1.json")"
}
echo "== prefill: sequential 4 MiB writes over $size_arg, iodepth 8"
prefill optio
prefill qemu-nbd

if [ "$run_ceph" = 1 ]; then
  if ! wait "$ceph_start_pid"; then
    ceph_start_pid=""
    echo "ceph-mini did not start:" >&2; tail -20 "$work/ceph-start.log" >&2
    [ "$bench_ceph" = auto ] || exit 1
    echo "(Ceph skipped)"; run_ceph=0
  else
    ceph_start_pid=""
    export CEPH_CONF="$ceph_dir/ceph.conf"
    echo "  ceph-rbd: $(ceph --version | awk '{ print $1, $2, $3, $5 }'), 3 OSDs, pool rbdbench size 3, image img0 ${image_gb} GiB (first $size_arg used), rbd_cache=false"
    targets+=(ceph-rbd)
    prefill ceph-rbd
  fi
fi

# NAME DIRECTION fio-args...
jobs=(
  "seqwrite write --rw=write --bs=4M --iodepth=8"
  "seqread read --rw=read --bs=4M --iodepth=8"
  "randwrite-q1 write --rw=randwrite --bs=4k --iodepth=1 --randrepeat=0 --norandommap"
  "randwrite-q32 write --rw=randwrite --bs=4k --iodepth=32 --randrepeat=0 --norandommap"
  "randread-q1 read --rw=randread --bs=4k --iodepth=1 --randrepeat=0 --norandommap"
  "randread-q32 read --rw=randread --bs=4k --iodepth=32 --randrepeat=0 --norandommap"
)
for spec in "${jobs[@]}"; do
  read -r name ddir args <<< "$spec"
  case " ${BENCH_JOBS:-$name} " in *" $name "*) ;; *) continue ;; esac
  echo "== $name: $args, $seconds s each"
  pairs=()
  for t in "${targets[@]}"; do
    mapfile -t io < <(target_io "$t")
    # shellcheck disable=SC2086
    runfio "$work/$name-$t.json" --name="$name" "${io[@]}" --size="$size" $args --time_based --runtime="$seconds"
    pairs+=("$t=$work/$name-$t.json")
  done
  python3 "$work/report.py" table "$name" "$ddir" "${pairs[@]}"
done

if [ "$choice_rounds" -gt 0 ]; then
  echo "== CHOICE first writes: 4 KiB at the start of never-written 4 MiB objects, iodepth 1," \
    "$choice_rounds round(s) of $choice_objects objects per k"
  logs=()
  for n in $(seq "$choice_rounds"); do
    order="1 2"; [ $((n % 2)) -eq 0 ] && order="2 1"
    for k in $order; do
      runfio "$work/choice-k$k-$n.json" --name="choice-k$k-$n" --ioengine=nbd \
        "--uri=nbd://127.0.0.1:$optio_port/choice-k$k-$n" --rw=write --bs=4k --iodepth=1 \
        --size=$((choice_objects * 4 * mib)) --io_size=$((choice_objects * 4096)) \
        --zonemode=strided --zonesize=4k --zonerange=4M \
        --write_lat_log="$work/choice-k$k-$n" --log_offset=1
      logs+=("$k=$work/choice-k$k-$n""_clat.1.log")
    done
  done
  python3 "$work/report.py" choice $((4 * mib)) "${logs[@]}"
fi

echo "== ratios and targets"
sed 's/^/  /' "$work/report.py.summary"
