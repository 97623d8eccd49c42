#!/usr/bin/python3
"""Metadata operations on Ceph RADOS, for the cost model of issue 39 (scripts/cost-model.sh).

  rados-meta.py stat|rm POOL IN_FLIGHT NAMES

Stats (`rados stat`) or removes (`rados rm`) every object named in the file NAMES (one name
a line, e.g. from `rados -p POOL ls`) with IN_FLIGHT asynchronous operations in flight
(librados aio, one client, as `rados bench` keeps its writes in flight). Prints
`ops N seconds S cpu C`: the operations, their wall time and this process's CPU seconds
meanwhile (neither counts starting Python or connecting).

Needs /usr/bin/python3 with python3-rados (Debian's, installed with ceph-mini) and CEPH_CONF.
"""

import os
import sys
import threading
import time

import rados


def main():
    if len(sys.argv) != 5 or sys.argv[1] not in ("stat", "rm"):
        sys.exit(__doc__)
    op, pool, in_flight = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if in_flight < 1:
        sys.exit("IN_FLIGHT must be at least 1")
    with open(sys.argv[4], encoding="utf-8") as f:
        names = [line.rstrip("\n") for line in f if line.strip()]
    cluster = rados.Rados(conffile=os.environ.get("CEPH_CONF", "/etc/ceph/ceph.conf"))
    cluster.connect()
    ioctx = cluster.open_ioctx(pool)
    slots = threading.Semaphore(in_flight)
    failed = []

    def done(name):
        def callback(completion, *_):
            code = completion.get_return_value()
            if code < 0:
                failed.append((name, code))
            slots.release()

        return callback

    started, cpu = time.monotonic(), time.process_time()
    completions = []
    for name in names:
        slots.acquire()
        if op == "stat":
            completions.append(ioctx.aio_stat(name, done(name)))
        else:
            completions.append(ioctx.aio_remove(name, done(name)))
    for completion in completions:
        completion.wait_for_complete()
    seconds, cpu = time.monotonic() - started, time.process_time() - cpu
    ioctx.close()
    cluster.shutdown()
    if failed:
        sys.exit(f"{len(failed)} of {len(names)} failed, first: {failed[0]}")
    print(f"ops {len(names)} seconds {seconds:.6f} cpu {cpu:.6f}")


if __name__ == "__main__":
    main()
