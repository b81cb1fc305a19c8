#!/usr/bin/env python3
"""Attack (issue 24): the learner fills the workspace with FIFOs (2,000 in
one command, past the per-exec file_diff limit) and leaves writers blocked
on 60 of them between execs. The capture used to open every file it read
(O_RDONLY|O_NONBLOCK), a FIFO too: each open released a blocked writer into
a reader that closed at once, its bytes lost and the learner's own reader
left waiting forever. Now the watcher and the contents reader look through
O_PATH and open regular files only: every FIFO is recorded by its type (a
file_diff or a bulk entry, `type: fifo`, no hash), the next exec runs, each
blocked writer still meets the learner's reader with its bytes, and the
kill switch ends the sandbox with writers blocked."""
from __future__ import annotations

from workspace_common import SLOW, new_env, sh, tap

N = 2000  # FIFOs, past the per-exec limit of 1000 file_diff events
W = 60    # blocked writers (the sandbox's pids limit is 256)

MAKE = f'import os\nfor i in range({N}):\n    os.mkfifo("/workspace/f%d" % i)\n'
WRITERS = f"for i in $(seq 1 {W}); do (printf \"w$i;\" > f$i) >/dev/null 2>&1 & done"


def fifo_paths(rows: list[dict]) -> set:
    out = set()
    for x in rows:
        p = x["payload"]
        if x["kind"] == "file_diff" and p.get("type") == "fifo" and "sha256" not in p:
            out.add(p.get("path"))
        elif x["kind"] == "bulk":
            out |= {f.get("path") for f in p.get("files", []) if f.get("type") == "fifo" and "sha256" not in f}
    return out


def main() -> None:
    env = new_env()
    try:
        sid = env.create_captured()
        r = sh(env, sid, f"python3 -c '{MAKE}' && {WRITERS}")
        tap.ok(r.returncode == 0, f"{N} FIFOs made, {W} writers left blocked on them",
               r.stderr.decode(errors="replace"))
        r = sh(env, sid, "printf x > marker.txt")
        tap.ok(r.returncode == 0, "the next exec runs while the writers wait", r.stderr.decode(errors="replace"))
        rows = env.wait_rows(sid, lambda rs: len(fifo_paths(rs)) >= N and any(
            x["kind"] == "file_diff" and x["payload"].get("path") == "marker.txt" for x in rs), SLOW)
        got = fifo_paths(rows)
        tap.ok(got == {f"f{i}" for i in range(N)},
               f"every FIFO recorded by its type (file_diff or bulk entry), no hash: {len(got)} of {N}")
        r = sh(env, sid, f"for i in $(seq 1 {W}); do timeout 60 cat f$i; done")
        want = "".join(f"w{i};" for i in range(1, W + 1))
        tap.ok(r.stdout.decode(errors="replace") == want,
               "each blocked writer meets the learner's reader with its bytes (the capture never opened a FIFO)",
               repr(r.stdout[:200]))
        r = sh(env, sid, WRITERS)
        ab = env.run("abort", sid, "--json", timeout=SLOW)
        tap.ok(r.returncode == 0 and ab.returncode == 0, "the kill switch ends the sandbox with writers blocked",
               ab.stderr.decode(errors="replace"))
    finally:
        env.cleanup()
    tap.done()


if __name__ == "__main__":
    main()
