#!/usr/bin/env python3
"""How many small durable writes per second a file system takes, by how their syncs are shared.

Optio's servers make a whole-object write durable by writing a temporary file, syncing it,
renaming it over the object's path and syncing the directory (docs/failures.md, "Durability
and group commit"). This measures, on the file system holding DIR, what sharing those syncs
between concurrent writers buys, with WRITERS threads each writing 4 KiB objects into 256
`hh` directories as a device does:

    scripts/bench-group-commit.py [DIR (default: a new directory under $TMPDIR)] [SECONDS] [WRITERS]

Strategies (each for SECONDS, default 5; WRITERS default 16):

* `per-write`  — write, fdatasync, rename, fsync(dir): every writer its own two syncs (before
  issue 39);
* `dir-batched` — write, fdatasync, rename, then one shared barrier (syncfs) per batch;
* `two-barriers` — write, shared barrier, rename, shared barrier (issue 39's choice): a barrier
  is one syncfs that every writer waiting when it starts shares;
* `range-dirs` — write, `sync_file_range` (write the data out and wait, no journal commit, no
  cache flush), rename, then one shared barrier that fsyncs the directories renamed into since
  the last one (a journal commit, with the disk's cache flushed: the data too);
* `range-own` — as `range-dirs`, but each writer fsyncs its own directory (the journal still
  commits concurrent ones together);
* `one-barrier` — write, rename, shared barrier: one sync fewer, but a crash can publish a
  rename whose data never reached the disk (reference only, not safe on every file system);
* `log` — append the object to a preallocated per-device log and share one fdatasync of it,
  then write the object in place without a sync (reference: a log needs replay and
  checkpoints).

A shared barrier: a writer waits for a sync that starts after it arrives; one writer (the
leader) runs it while the others wait, and all waiting when it starts share it.
"""
import ctypes
import os
import sys
import tempfile
import threading
import time

LIBC = ctypes.CDLL("libc.so.6", use_errno=True)
LIBC.sync_file_range.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
# SYNC_FILE_RANGE_WAIT_BEFORE | WRITE | WAIT_AFTER
RANGE_WRITE_AND_WAIT = 1 | 2 | 4
OBJECT = os.urandom(4096 + 64)


class Barrier:
    """A sync that every writer waiting when it starts shares (leader and followers)."""

    def __init__(self, sync):
        self.sync = sync
        self.lock = threading.Condition()
        self.started = 0
        self.completed = 0
        self.running = False
        self.syncs = 0

    def wait(self):
        with self.lock:
            need = self.started + 1
            while self.completed < need:
                if not self.running:
                    self.running = True
                    self.started += 1
                    generation = self.started
                    self.lock.release()
                    try:
                        self.sync()
                    finally:
                        self.lock.acquire()
                        self.running = False
                        self.completed = generation
                        self.syncs += 1
                        self.lock.notify_all()
                else:
                    self.lock.wait()


def run(base, name, seconds, writers):
    root = os.path.join(base, name)
    tmp = os.path.join(root, "tmp")
    os.makedirs(tmp)
    for hh in range(256):
        os.makedirs(os.path.join(root, f"{hh:02x}"))
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)

    def syncfs():
        if LIBC.syncfs(root_fd) != 0:
            raise OSError(ctypes.get_errno(), "syncfs")

    barrier = Barrier(syncfs)
    log_path = os.path.join(root, "log")
    log_fd = os.open(log_path, os.O_RDWR | os.O_CREAT, 0o600)
    log_bytes = 256 << 20
    # Preallocate with written zeros, so that overwrites change no metadata.
    chunk = b"\0" * (1 << 20)
    for _ in range(log_bytes >> 20):
        os.write(log_fd, chunk)
    os.fsync(log_fd)
    log_barrier = Barrier(lambda: os.fdatasync(log_fd))
    log_at = [0]
    log_lock = threading.Lock()
    count = [0] * writers
    stop = time.monotonic() + seconds

    def durable_dir(path):
        fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    dirs = set()
    dir_syncs = [0]

    def sync_dirs():
        with barrier.lock:
            batch = list(dirs)
            dirs.clear()
        dir_syncs[0] += len(batch)
        for d in batch:
            durable_dir(os.path.join(d, "x"))

    dir_barrier = Barrier(sync_dirs)

    def write_temp(temp, sync):
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, OBJECT)
            if sync == "range":
                if LIBC.sync_file_range(fd, 0, 0, RANGE_WRITE_AND_WAIT) != 0:
                    raise OSError(ctypes.get_errno(), "sync_file_range")
            elif sync:
                os.fdatasync(fd)
        finally:
            os.close(fd)

    def writer(i):
        n = 0
        while time.monotonic() < stop:
            key = f"{i}.{n}"
            path = os.path.join(root, f"{hash(key) & 0xff:02x}", key)
            temp = os.path.join(tmp, key)
            if name == "per-write":
                write_temp(temp, True)
                os.rename(temp, path)
                durable_dir(path)
            elif name == "dir-batched":
                write_temp(temp, True)
                os.rename(temp, path)
                barrier.wait()
            elif name == "two-barriers":
                write_temp(temp, False)
                barrier.wait()
                os.rename(temp, path)
                barrier.wait()
            elif name == "range-dirs":
                write_temp(temp, "range")
                os.rename(temp, path)
                with barrier.lock:
                    dirs.add(os.path.dirname(path))
                dir_barrier.wait()
            elif name == "range-own":
                write_temp(temp, "range")
                os.rename(temp, path)
                durable_dir(path)
            elif name == "one-barrier":
                write_temp(temp, False)
                os.rename(temp, path)
                barrier.wait()
            elif name == "log":
                with log_lock:
                    at = log_at[0]
                    log_at[0] = (at + len(OBJECT)) % (log_bytes - len(OBJECT))
                os.pwrite(log_fd, OBJECT, at)
                log_barrier.wait()
                write_temp(temp, False)
                os.rename(temp, path)
            n += 1
        count[i] = n

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    writes = sum(count)
    syncs = {
        "per-write": 2 * writes,
        "dir-batched": writes + barrier.syncs,
        "two-barriers": barrier.syncs,
        "one-barrier": barrier.syncs,
        "range-dirs": dir_syncs[0],
        "range-own": writes,
        "log": log_barrier.syncs,
    }[name]
    print(f"{name:>13} {writes / elapsed:10.0f} {syncs / max(writes, 1):14.3f}", flush=True)
    os.close(root_fd)
    os.close(log_fd)


def main():
    base = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="group-commit.")
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
    writers = int(sys.argv[3]) if len(sys.argv) > 3 else 16
    os.makedirs(base, exist_ok=True)
    print(f"{'strategy':>13} {'writes/s':>10} {'fsyncs/write':>14}   ({writers} writers, {base})")
    for name in ["per-write", "dir-batched", "two-barriers", "range-dirs", "range-own", "one-barrier", "log"]:
        run(base, name, seconds, writers)


if __name__ == "__main__":
    main()
