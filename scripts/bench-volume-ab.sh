#!/usr/bin/env bash
# A/B of two environments (or flags) for `optio nbd` on one `optio up` cluster (one 512 MiB
# volume, prefilled with sequential 4 MiB writes), fio's nbd engine, 4 KiB random reads and
# writes at queue depths 1 and 32, the two interleaved round by round. For example, frames off
# against on (docs/store.md, "Frames"), or local reads off against on (docs/volumes.md):
#   A_ENV=OPTIO_FRAMES=0 B_ENV=OPTIO_FRAMES=1 scripts/bench-volume-ab.sh
#   A_ENV=X=1 A_ARGS=--no-local-reads B_ENV=X=1 scripts/bench-volume-ab.sh
# Environment: A_ENV, B_ENV (VAR=VALUE, passed to `optio nbd`; defaults: frames off / on),
# A_ARGS, B_ARGS (flags of `optio nbd`, default none),
# SECONDS_PER_JOB (default 6), ROUNDS (default "1 2"), JOBS (default
# "randread:1 randread:32 randwrite:1 randwrite:32"), OPTIO (the binary; default the release
# build). Prints one line per round, environment and job: IOPS and mean completion latency.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
optio=${OPTIO:-$root/target/release/optio}
a_env=${A_ENV:-OPTIO_FRAMES=0}
b_env=${B_ENV:-OPTIO_FRAMES=1}
secs=${SECONDS_PER_JOB:-6}
for tool in fio python3; do
  command -v "$tool" >/dev/null || { echo "$tool not found: apt-get install -y fio python3" >&2; exit 1; }
done
[ -x "$optio" ] || { echo "no optio binary at $optio: cargo build --release -p optio" >&2; exit 1; }
# shellcheck source=scripts/volume-cluster.sh
. "$root/scripts/volume-cluster.sh"
start_volume_cluster 512MiB
start_nbd "$b_env"
fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=4M --iodepth=8 --size=512M > /dev/null
stop_nbd
sync
for round in ${ROUNDS:-1 2}; do
  for side in a b; do
    if [ $side = a ]; then env=$a_env flags=${A_ARGS:-}; else env=$b_env flags=${B_ARGS:-}; fi
    start_nbd "$env" "$flags"
    for job in ${JOBS:-randread:1 randread:32 randwrite:1 randwrite:32}; do
      rw=${job%:*} qd=${job#*:}
      result=$(fio --name=j --ioengine=nbd --uri="$uri" --rw="$rw" --bs=4k --iodepth="$qd" \
        --size=512M --time_based --runtime="$secs" --randrepeat=0 --norandommap \
        --output-format=json 2> /dev/null | python3 -c '
import json, sys
text = sys.stdin.read()
job = json.loads(text[text.index("{"):])["jobs"][0]
side = job["read"] if job["read"]["io_bytes"] else job["write"]
print("%.0f IOPS, mean %.0f us" % (side["iops"], side["clat_ns"]["mean"] / 1000))')
      echo "round $round  $env $flags  $rw qd $qd: $result"
    done
    stop_nbd
  done
done
