#!/usr/bin/env python3
"""What creating a file costs in DIR: CPU and wall time per empty file created (O_CREAT|O_EXCL)
in a new directory under DIR, N files (default 5,000), then the files are removed.

On ext4 without a journal the kernel avoids reusing inodes freed in the last minute and, when a
block group's only free inodes are such ones, checks each of them on every create: run this
twice in a row in the same DIR to see it (the second run creates files among the inodes the
first one freed). docs/benchmarks.md, "the root file system's inode scan".

Usage: scripts/file-create-cost.py DIR [N]
"""
import os
import shutil
import sys
import tempfile
import time


def main() -> int:
    if len(sys.argv) not in (2, 3):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    base = sys.argv[1]
    try:
        n = int(sys.argv[2]) if len(sys.argv) == 3 else 5000
    except ValueError:
        print(f"N must be a whole number, not {sys.argv[2]!r}", file=sys.stderr)
        return 2
    if n <= 0:
        print("N must be at least 1", file=sys.stderr)
        return 2
    if not os.path.isdir(base):
        print(f"{base}: not a directory", file=sys.stderr)
        return 1
    work = tempfile.mkdtemp(dir=base, prefix="create-cost.")
    try:
        cpu, wall = time.process_time(), time.monotonic()
        for i in range(n):
            os.close(os.open(os.path.join(work, f"f{i}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
        cpu, wall = time.process_time() - cpu, time.monotonic() - wall
    finally:
        shutil.rmtree(work)
    print(f"{n} files in {base}: {cpu / n * 1e6:.1f} µs of CPU and {wall / n * 1e6:.1f} µs per create")
    return 0


if __name__ == "__main__":
    sys.exit(main())
