#!/usr/bin/env python3
"""Cost of a 4 KiB pwrite into a file, by the size of the writes that first wrote the file.

Linux caches a file in folios as large as the writes that made them (ext4 with large folios,
6.x kernels), and ext4 walks every block of a folio on each buffered write into it. Optio's
servers therefore write object files in pieces of at most 64 KiB (optio_server::disk::
WRITE_PIECE_BYTES). This measures why, on the file system holding DIR:

    scripts/bench-pwrite-folios.py [DIR (default: a new directory under $TMPDIR)] [WRITES]

For each first-write size it writes 32 files of 4 MiB in pieces of that size, then times
WRITES (default 40,000) random 4 KiB pwrites into them (page cache only, no sync).
"""
import os
import random
import sys
import tempfile
import time

SIZES = [4 << 20, 1 << 20, 256 << 10, 64 << 10, 16 << 10]


def main():
    made = len(sys.argv) <= 1
    base = sys.argv[1] if not made else tempfile.mkdtemp(prefix="folios.")
    writes = int(sys.argv[2]) if len(sys.argv) > 2 else 40000
    os.makedirs(base, exist_ok=True)
    data = os.urandom(4 << 20)
    block = os.urandom(4096)
    print(f"{'first written in':>17}  {'4 KiB pwrite':>12}   ({writes} writes into 32 files of 4 MiB, {base})")
    for size in SIZES + SIZES[:1]:
        paths = [os.path.join(base, f"f{i}") for i in range(32)]
        for path in paths:
            fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
            view = memoryview(data)
            for offset in range(0, len(data), size):
                os.pwrite(fd, view[offset:offset + size], offset)
            os.close(fd)
        fds = [os.open(path, os.O_WRONLY) for path in paths]
        start = time.perf_counter()
        for _ in range(writes):
            os.pwrite(random.choice(fds), block, random.randrange(1024) * 4096)
        took = time.perf_counter() - start
        for fd in fds:
            os.close(fd)
        print(f"{size >> 10:>13} KiB  {took / writes * 1e6:>9.1f} µs")
    for path in paths:
        os.remove(path)
    if made:
        os.rmdir(base)


if __name__ == "__main__":
    main()
