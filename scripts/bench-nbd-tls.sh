#!/usr/bin/env bash
# What TLS costs NBD (issue 36): fio's 4 MiB sequential writes and reads through `optio nbd`
# over plain TCP and over TLS, side by side in one run:
#   plain  `optio nbd --listen 127.0.0.1:P --insecure-plain-tcp plain`  nbd://127.0.0.1:P/plain
#   tls    `optio nbd --listen 127.0.0.1:Q tls`                         nbds://127.0.0.1:Q/tls
#          with client.admin's certificate from `optio up --tls`. fio's nbd engine cannot take
#          `?tls-certificates=DIR` (libnbd refuses local files named in a URI unless the program
#          allows it; fio does not), so libnbd reads its default directory, $HOME/.pki/libnbd
#          for a user other than root (/etc/pki/libnbd for root, which this script leaves
#          alone): fio runs, for both targets alike, as uid 1000 in a user namespace mapped to
#          the caller (`unshare --user --map-user=1000`), with HOME in the work directory.
# on one `optio up --tls` cluster (release; authentication on), one volume of SIZE each (one
# writer per volume: two `optio nbd`, each reaching the servers the same way, over the
# cluster's TLS — so the difference is NBD's TLS alone). Each volume is prefilled (sequential
# 4 MiB writes over SIZE, iodepth 8) so reads read real data. Then ROUNDS rounds, each running
# every job on both targets, the order swapped every round, SECONDS each (--time_based):
#   seqwrite  --rw=write --bs=4M --iodepth=8
#   seqread   --rw=read  --bs=4M --iodepth=8
#   nbdcopy   the whole volume read by nbdcopy (libnbd's own copier; one connection, 8 requests
#             of 4 MiB in flight) to null:, a second client beside fio's nbd engine
# Prints each run's MB/s (10^6 bytes) and the CPU per GB moved of `optio nbd` (from
# /proc/PID/stat) and of fio (its usr + sys, libnbd's TLS included), then per job the median
# of the rounds and the ratio tls / plain.
#
# Usage: scripts/bench-nbd-tls.sh [SECONDS (default 20)] [SIZE (default 1GiB)] [ROUNDS (default 3)]
# Environment: OPTIO (an optio binary; default: the release build, built first); TMPDIR (where
#   everything lives; default /tmp). Disk: about 6 x SIZE (two volumes, three replicas).
# Needs fio (with the nbd engine, libnbd with TLS), nbdcopy (libnbd-bin), bc and python3. Everything started is stopped
# on exit, Ctrl-C included.
set -euo pipefail
seconds=${1:-20}
size_arg=${2:-1GiB}
rounds=${3:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
for tool in fio nbdcopy bc python3; do
  command -v "$tool" >/dev/null || { echo "$tool not found: apt-get install -y fio libnbd-bin bc python3" >&2; exit 1; }
done
fio --enghelp=nbd >/dev/null 2>&1 || { echo "this fio has no nbd engine (fio >= 3.20 built with libnbd)" >&2; exit 1; }
case "$seconds$rounds" in '' | *[!0-9]*) echo "SECONDS and ROUNDS must be numbers (got $seconds, $rounds)" >&2; exit 1 ;; esac
size=$(python3 -c '
import re, sys
m = re.fullmatch(r"(\d+)\s*([kmgt]?)(i?b)?", sys.argv[1].strip().lower())
if not m: sys.exit("bad SIZE %r (e.g. 1GiB, 512MiB)" % sys.argv[1])
print(int(m.group(1)) * 1024 ** " kmgt".index(m.group(2) or " "))' "$size_arg")
mib=$((1024 * 1024))
if [ "$size" -lt $((4 * mib)) ] || [ $((size % (4 * mib))) -ne 0 ]; then
  echo "SIZE must be a positive multiple of 4MiB (got $size_arg = $size bytes)" >&2; exit 1
fi

work=$(mktemp -d)
up_pid="" plain_pid="" tls_pid=""
stop_pid() { # PID SIGNAL: signal it, wait up to 30 s, then KILL
  local pid=$1 sig=$2
  kill "-$sig" "$pid" 2>/dev/null || return 0
  for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && { echo "pid $pid ignored SIG$sig; killing it" >&2; kill -KILL "$pid" 2>/dev/null; }
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  set +e
  [ -n "$plain_pid" ] && stop_pid "$plain_pid" TERM
  [ -n "$tls_pid" ] && stop_pid "$tls_pid" TERM
  [ -n "$up_pid" ] && stop_pid "$up_pid" INT
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

need=$((6 * size + 512 * mib))
have=$(df -P -B1 "$work" | awk 'NR == 2 { print $4 }')
[ "$have" -ge "$need" ] || { echo "not enough disk under $work: $have bytes free, need $need (6 x SIZE + 0.5 GiB)" >&2; exit 1; }

if [ -n "${OPTIO:-}" ]; then
  optio=$OPTIO
else
  cargo build --release --quiet --manifest-path "$root/Cargo.toml" -p optio
  optio="${CARGO_TARGET_DIR:-$root/target}/release/optio"
fi
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

echo "== setup in $work: SIZE $size_arg, $seconds s per run, $rounds rounds"
"$optio" up --tls --dir "$work/cluster" --capacity 64GiB > "$work/up.log" 2>&1 &
up_pid=$!
for _ in $(seq 600); do grep -q "Ctrl-C" "$work/up.log" && break; kill -0 "$up_pid" 2>/dev/null || break; sleep 0.1; done
grep -q "Ctrl-C" "$work/up.log" || { echo "optio up did not come up:" >&2; cat "$work/up.log" >&2; exit 1; }
export OPTIO_CLUSTER="$work/cluster"
"$optio" volume create plain "$size" > /dev/null
"$optio" volume create tls "$size" > /dev/null
certs="$work/home/.pki/libnbd"
mkdir -p "$certs"
cp "$work/cluster/tls/ca.pem" "$certs/ca-cert.pem"
cp "$work/cluster/tls/client.admin.pem" "$certs/client-cert.pem"
cp "$work/cluster/tls/client.admin-key.pem" "$certs/client-key.pem"
# fio as a user other than root, with libnbd's default certificate directory under $work.
as_user() { HOME="$work/home" unshare --user --map-user=1000 --map-group=1000 "$@"; }
as_user true || { echo "cannot run fio in a user namespace (unshare --user --map-user): needed to give libnbd its certificates" >&2; exit 1; }

wait_serving() { # NAME PID: until `optio nbd` (NAME) prints what it serves
  for _ in $(seq 600); do grep -q "^serving" "$work/nbd-$1.out" && break; kill -0 "$2" 2>/dev/null || break; sleep 0.1; done
  grep -q "^serving" "$work/nbd-$1.out" || { echo "optio nbd ($1) did not start:" >&2; cat "$work/nbd-$1.err" >&2; exit 1; }
}
plain_port=$(free_port)
"$optio" nbd --listen "127.0.0.1:$plain_port" --insecure-plain-tcp plain > "$work/nbd-plain.out" 2> "$work/nbd-plain.err" &
plain_pid=$!
wait_serving plain "$plain_pid"
tls_port=$(free_port)
"$optio" nbd --listen "127.0.0.1:$tls_port" tls > "$work/nbd-tls.out" 2> "$work/nbd-tls.err" &
tls_pid=$!
wait_serving tls "$tls_pid"
echo "  plain: $(cat "$work/nbd-plain.out")"
echo "  tls:   $(cat "$work/nbd-tls.out") (client certificate: client.admin)"
uri_plain="nbd://127.0.0.1:$plain_port/plain"
uri_tls="nbds://127.0.0.1:$tls_port/tls"

runfio() { # OUT.json fio-args...
  local out=$1; shift
  if ! as_user timeout $((4 * seconds + 600)) fio --output-format=json "$@" > "$out" 2> "$out.err"; then
    echo "fio failed: fio $*" >&2; cat "$out.err" "$out" >&2; exit 1
  fi
}
mbps() { # JSON DDIR: MB/s
  python3 -c '
import json, sys
text = open(sys.argv[1]).read()
print("%.1f" % (json.loads(text[text.index("{"):])["jobs"][0][sys.argv[2]]["bw_bytes"] / 1e6))' "$1" "$2"
}
fio_cpu_per_gb() { # JSON DDIR: the CPU fio (with libnbd, its TLS included) spent per GB moved, ms
  python3 -c '
import json, sys
text = open(sys.argv[1]).read()
job = json.loads(text[text.index("{"):])["jobs"][0]
busy_ms = (job["usr_cpu"] + job["sys_cpu"]) / 100 * job["job_runtime"]
moved_gb = job[sys.argv[2]]["io_bytes"] / 1e9
print("%.0f" % (busy_ms / moved_gb if moved_gb else 0))' "$1" "$2"
}
target_uri() { case "$1" in plain) echo "$uri_plain" ;; tls) echo "$uri_tls" ;; esac; }
target_pid() { case "$1" in plain) echo "$plain_pid" ;; tls) echo "$tls_pid" ;; esac; }

echo "== prefill: sequential 4 MiB writes over $size_arg, iodepth 8"
for t in plain tls; do
  runfio "$work/prefill-$t.json" --name=prefill --ioengine=nbd "--uri=$(target_uri "$t")" --size="$size" --rw=write --bs=4M --iodepth=8
  echo "  $t: $(mbps "$work/prefill-$t.json" write) MB/s"
done

# results: lines "JOB TARGET MB/s CPU-ms-per-GB"
: > "$work/results"
echo "== runs (MB/s; CPU per GB moved)"
for round in $(seq "$rounds"); do
  if [ $((round % 2)) = 1 ]; then order="plain tls"; else order="tls plain"; fi
  for job in seqwrite seqread; do
    case "$job" in seqwrite) rw=write ;; seqread) rw=read ;; esac
    for t in $order; do
      pid=$(target_pid "$t")
      before=$(cpu_ticks "$pid")
      out="$work/$job-$t-$round.json"
      runfio "$out" --name="$job" --ioengine=nbd "--uri=$(target_uri "$t")" --size="$size" \
        --rw="$rw" --bs=4M --iodepth=8 --time_based --runtime="$seconds"
      ticks=$(($(cpu_ticks "$pid") - before))
      rate=$(mbps "$out" "$rw")
      cpu=$(python3 -c 'import sys, os
ticks, rate, secs = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
hz = os.sysconf("SC_CLK_TCK")
print("%.0f" % (1000 * ticks / hz / (rate * secs / 1000) if rate else 0))' "$ticks" "$rate" "$seconds")
      client=$(fio_cpu_per_gb "$out" "$rw")
      printf '  round %d %-8s %-5s %8s MB/s  optio nbd %5s, fio %5s ms CPU/GB\n' "$round" "$job" "$t" "$rate" "$cpu" "$client"
      echo "$job $t $rate $cpu $client" >> "$work/results"
    done
  done
  # A second client of libnbd: nbdcopy reading the whole volume, one connection, 8 requests
  # of 4 MiB in flight, to null: (its CPU is not measured).
  for t in $order; do
    pid=$(target_pid "$t")
    before=$(cpu_ticks "$pid")
    start=$(date +%s.%N)
    as_user nbdcopy --connections=1 --requests=8 --request-size=$((4 * mib)) "$(target_uri "$t")" null:
    end=$(date +%s.%N)
    ticks=$(($(cpu_ticks "$pid") - before))
    read -r rate cpu < <(python3 -c 'import sys, os
size, secs, ticks = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
print("%.1f %.0f" % (size / 1e6 / secs, 1000 * ticks / os.sysconf("SC_CLK_TCK") / (size / 1e9)))' "$size" "$(echo "$end - $start" | bc -l)" "$ticks")
    printf '  round %d %-8s %-5s %8s MB/s  optio nbd %5s ms CPU/GB\n' "$round" nbdcopy "$t" "$rate" "$cpu"
    echo "nbdcopy $t $rate $cpu 0" >> "$work/results"
  done
done

echo "== summary: median of $rounds rounds"
python3 - "$work/results" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    job, target, *numbers = line.split()
    runs.setdefault((job, target), []).append([float(n) for n in numbers])
def median(target, column):
    return statistics.median(r[column] for r in runs[(job, target)])
print("  %-9s %11s %11s %9s   %s" % ("job", "plain MB/s", "tls MB/s", "tls/plain", "CPU ms per GB: optio nbd plain / tls, fio plain / tls"))
for job in ("seqwrite", "seqread", "nbdcopy"):
    p, t = median("plain", 0), median("tls", 0)
    client = "-" if job == "nbdcopy" else "%.0f / %.0f" % (median("plain", 2), median("tls", 2))
    print("  %-9s %11.1f %11.1f %9.2f   %.0f / %.0f, %s" % (
        job, p, t, t / p if p else 0, median("plain", 1), median("tls", 1), client))
EOF
