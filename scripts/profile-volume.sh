#!/usr/bin/env bash
# Profiles fio through `optio nbd` on a fresh `optio up` cluster: one 512 MiB volume prefilled
# with 4 MiB writes, then 16 s of 4 KiB I/O (RW, default randread) at queue depth QD (default
# 32), and `perf record` over 10 s of it, every process (`-a -g`), into ./perf.data. Prints
# fio's IOPS, then the CPU split by process (optio nbd, fio, the storage servers) from the
# samples. With PERF_NBD=1 only `optio nbd` is recorded, with DWARF call graphs (for
# `perf report --children`).
#   scripts/profile-volume.sh [RW] [QD]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
optio=${OPTIO:-$root/target/release/optio}
rw=${1:-randread} qd=${2:-32}
for tool in fio perf python3; do
  command -v "$tool" >/dev/null || { echo "$tool not found (Debian: fio, linux-perf, python3)" >&2; exit 1; }
done
[ -x "$optio" ] || { echo "no optio binary at $optio: cargo build --release -p optio" >&2; exit 1; }
# shellcheck source=scripts/volume-cluster.sh
. "$root/scripts/volume-cluster.sh"
start_volume_cluster 512MiB
start_nbd
fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=4M --iodepth=8 --size=512M > /dev/null
sync
fio --name=j --ioengine=nbd --uri="$uri" --rw="$rw" --bs=4k --iodepth="$qd" --size=512M \
  --time_based --runtime=16 --randrepeat=0 --norandommap --output-format=json > "$work/fio.json" 2> /dev/null &
fio_pid=$!
sleep 3
if [ -n "${PERF_NBD:-}" ]; then
  perf record -F 499 --call-graph dwarf,16384 -p "$nbd_pid" -o perf.data -- sleep 4 > /dev/null 2>&1
else
  perf record -a -g -F 999 -o perf.data -- sleep 10 > /dev/null 2>&1
fi
wait "$fio_pid"
python3 - "$work/fio.json" <<'PY'
import json, sys
text = open(sys.argv[1]).read()
job = json.loads(text[text.index("{"):])["jobs"][0]
side = job["read"] if job["read"]["io_bytes"] else job["write"]
print("%.0f IOPS" % side["iops"])
PY
[ -n "${PERF_NBD:-}" ] && exit 0
# Samples by process: optio nbd's threads are its pid's; fio's are named fio; the storage
# servers are every other optio process (optio up and its children).
nbd_threads=$(ls "/proc/$nbd_pid/task" 2>/dev/null | paste -sd,)
perf report -i perf.data --no-children --sort pid -g none --stdio 2>/dev/null |
  awk -v nbd="$nbd_threads" '
    BEGIN { n = split(nbd, t, ","); for (i = 1; i <= n; i++) is_nbd[t[i]] = 1 }
    /^#/ || NF < 2 { next }
    { p = $1; sub("%", "", p); split($2, a, ":");
      if (a[1] in is_nbd) s["optio nbd"] += p
      else if (a[2] == "fio") s["fio"] += p
      else if (a[2] == "swapper") s["idle"] += p
      else if (a[2] ~ /tokio|optio/) s["storage servers (optio up)"] += p
      else s["other"] += p }
    END { for (k in s) printf "%6.1f %%  %s\n", s[k], k }' | sort -rn
