#!/usr/bin/env python3
"""No file git tracks holds a merge's conflict markers: a conflict committed
by mistake in a document or a test would otherwise pass unnoticed (in C it
fails the build; in Markdown, Python fixtures or meson files it may not).

    check-merge-markers.py SOURCE_ROOT

TAP output: one check per tracked text file that holds a marker line, or
one passing check when none does. Without git (a tarball) it checks nothing
and says so.
"""
import os
import subprocess
import sys

MARKERS = ("<<<<<<< ", ">>>>>>> ", "||||||| ")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    try:
        files = subprocess.run(["git", "-c", "safe.directory=*", "-C", root, "ls-files", "-z"], check=True,
                               capture_output=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        print("1..1\nok 1 - # SKIP not a git checkout")
        return 0
    bad = []
    for f in filter(None, files):
        try:
            with open(os.path.join(root, f), "rb") as fh:
                # its size, not a 4 MiB buffer a file: meson's MALLOC_PERTURB_
                # fills every buffer, and 800 of 4 MiB took over the 30 s timeout
                data = fh.read(min(os.fstat(fh.fileno()).st_size, 4 << 20) or 1)
        except OSError:
            continue
        if b"\0" in data:
            continue  # binary
        for n, line in enumerate(data.decode("utf-8", "replace").split("\n"), 1):
            if line.startswith(MARKERS):
                bad.append(f"{f}:{n}: {line[:60]}")
                break
    print(f"1..{max(len(bad), 1)}")
    if not bad:
        print("ok 1 - no conflict markers in the tracked files")
        return 0
    for i, b in enumerate(bad, 1):
        print(f"not ok {i} - a conflict marker: {b}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
