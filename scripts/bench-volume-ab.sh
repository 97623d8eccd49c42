#!/usr/bin/env bash
# A/B of two settings of `optio nbd` (environment, flags) or of `optio up` (flags), fio's nbd
# engine on one 512 MiB volume (prefilled with sequential 4 MiB writes), 4 KiB random reads and
# writes at queue depths 1 and 32, the two sides interleaved round by round. For example:
#   A_ENV=OPTIO_FRAMES=0 B_ENV=OPTIO_FRAMES=1 scripts/bench-volume-ab.sh   # frames off / on
#   A_ARGS=--no-local-reads scripts/bench-volume-ab.sh                     # local reads off / on
#   A_UP="--server-workers 2" scripts/bench-volume-ab.sh                   # a worker per core / the default
# Environment: A_ENV, B_ENV (VAR=VALUE for `optio nbd`; default none), A_ARGS, B_ARGS (flags of
# `optio nbd`), A_UP, B_UP (flags of `optio up`: with either set, each side gets a fresh cluster
# every round; otherwise both share one), SECONDS_PER_JOB (default 6), ROUNDS (default "1 2"),
# JOBS (default "randread:1 randread:32 randwrite:1 randwrite:32"), OPTIO (the binary; default
# the release build). Prints one line per round, side and job: IOPS, mean completion latency,
# and the CPU time the storage servers and `optio nbd` spent per I/O (from /proc/PID/stat).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
optio=${OPTIO:-$root/target/release/optio}
secs=${SECONDS_PER_JOB:-6}
for tool in fio python3 pgrep; do
  command -v "$tool" >/dev/null || { echo "$tool not found: apt-get install -y fio python3 procps" >&2; exit 1; }
done
[ -x "$optio" ] || { echo "no optio binary at $optio: cargo build --release -p optio" >&2; exit 1; }
# shellcheck source=scripts/volume-cluster.sh
. "$root/scripts/volume-cluster.sh"
per_side_clusters=${A_UP:+1}${B_UP:+1}
ticks=$(getconf CLK_TCK)

# cpu_ticks PID...: user + system clock ticks of those processes, summed.
cpu_ticks() {
  local total=0 pid fields
  for pid in "$@"; do
    fields=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null) || continue
    # After the command: state is field 1, utime field 12, stime field 13.
    total=$((total + $(echo "$fields" | awk '{print $12 + $13}')))
  done
  echo "$total"
}

fresh_cluster() { # UP_FLAGS
  UP_FLAGS=$1 start_volume_cluster 512MiB
  start_nbd ""
  fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=4M --iodepth=8 --size=512M > /dev/null
  stop_nbd
  sync
}

[ -z "$per_side_clusters" ] && fresh_cluster ""
for round in ${ROUNDS:-1 2}; do
  for side in a b; do
    if [ $side = a ]; then
      env=${A_ENV:-} flags=${A_ARGS:-} up=${A_UP:-}
    else
      env=${B_ENV:-} flags=${B_ARGS:-} up=${B_UP:-}
    fi
    if [ -n "$per_side_clusters" ]; then
      trap - EXIT
      [ -n "${work:-}" ] && stop_volume_cluster
      fresh_cluster "$up"
    fi
    start_nbd "$env" "$flags"
    mapfile -t servers < <(pgrep -P "$up_pid")
    for job in ${JOBS:-randread:1 randread:32 randwrite:1 randwrite:32}; do
      rw=${job%:*} qd=${job#*:}
      server_before=$(cpu_ticks "${servers[@]}")
      nbd_before=$(cpu_ticks "$nbd_pid")
      result=$(fio --name=j --ioengine=nbd --uri="$uri" --rw="$rw" --bs=4k --iodepth="$qd" \
        --size=512M --time_based --runtime="$secs" --randrepeat=0 --norandommap \
        --output-format=json 2> /dev/null)
      server_cpu=$(($(cpu_ticks "${servers[@]}") - server_before))
      nbd_cpu=$(($(cpu_ticks "$nbd_pid") - nbd_before))
      line=$(echo "$result" | python3 -c '
import json, sys
text = sys.stdin.read()
job = json.loads(text[text.index("{"):])["jobs"][0]
side = job["read"] if job["read"]["io_bytes"] else job["write"]
ios = side["total_ios"] or 1
per_io = lambda ticks: int(sys.argv[ticks]) / int(sys.argv[3]) * 1e6 / ios
print("%.0f IOPS, mean %.0f us, CPU per I/O: servers %.1f us, optio nbd %.1f us" % (
    side["iops"], side["clat_ns"]["mean"] / 1000, per_io(1), per_io(2)))' \
        "$server_cpu" "$nbd_cpu" "$ticks")
      echo "round $round  ${env:-(env)} ${flags:-(flags)} ${up:-(up)}  $rw qd $qd: $line"
    done
    stop_nbd
  done
done
