#!/usr/bin/env python3
"""Attack: a deep path whose every byte is invalid UTF-8 (700 directories
of 250 bytes 0xff: a 176 KB path), with a file made and renamed at the
bottom. Each byte is U+FFFD (3 bytes) in `path` and `old_path`, 2 more in
their hex forms and four more in the diff's quoted header lines: the
file_diff came to 3.1 MB, past the spool's record and the ingest's 1 MiB
frame limit, and was dropped with a log line only. Every event must stay
under the limit — the watcher's path_hex bound (SG_WATCH_PATH_HEX_MAX in
src/capture/watch.c), and the capture cutting a file_diff that would pass
it (no diff, paths' first 4 KiB with their full lengths) — the change is
still reported, and the events after it reach the store: the stream does
not stall."""
from __future__ import annotations

import os

from workspace_common import SLOW, events, new_env, sh, tap

FRAME_MAX = 1024 * 1024  # SG_FRAME_MAX (src/base/bounds.h)
LEVELS, NAME_LEN = 700, 250

CODE = ("import os\n"
        "os.chdir('/workspace')\n"
        f"n = b'\\xff' * {NAME_LEN}\n"
        f"for i in range({LEVELS}):\n"
        "    os.mkdir(n); os.chdir(n)\n"
        "open(b'\\xfe' * 200, 'w').write('deep\\n')\n")
RENAME = ("import os\n"
          "os.chdir('/workspace')\n"
          f"for i in range({LEVELS}):\n"
          f"    os.chdir(b'\\xff' * {NAME_LEN})\n"
          "os.rename(b'\\xfe' * 200, b'\\xfd' * 200)\n")

env = new_env()
try:
    sid = env.create_captured()
    p = env.run("exec", sid, "--", "python3", "-c", CODE, timeout=SLOW)
    tap.eq(p.returncode, 0, "the learner makes a file under a 176 KB path of invalid UTF-8")
    p = env.run("exec", sid, "--", "python3", "-c", RENAME, timeout=SLOW)
    tap.eq(p.returncode, 0, "and renames it")
    after = sh(env, sid, "echo after-the-deep-path")
    tap.ok(after.returncode == 0 and b"after-the-deep-path" in after.stdout, "the sandbox keeps working")
    frames = [fr for _seq, fr in env.spool_records(sid)]
    sizes = [len(__import__("json").dumps(fr, ensure_ascii=False).encode()) for fr in frames]
    tap.ok(max(sizes) < FRAME_MAX, "every spooled event is under the ingest's frame limit",
           f"largest {max(sizes)} bytes")
    deep = [e for e in events(env, sid, "file_diff") if e.get("path_bytes", 0) > 170000]
    tap.ok({e.get("change") for e in deep} >= {"created"} and all(e.get("truncated") for e in deep),
           "the deep file's changes are reported, cut to fit (path_bytes: the full length)",
           repr([(e.get("change"), e.get("path_bytes"), len(e.get("path", "")))
                 for e in events(env, sid, "file_diff")])[:600])
    # the store: the events after the deep ones are there (no stall)
    rows = env.wait_rows(sid, lambda rs: any(r["kind"] == "stdout" and "after-the-deep-path" in
                                             r["payload"].get("data", "") for r in rs), SLOW)
    tap.ok(any(r["kind"] == "stdout" and "after-the-deep-path" in r["payload"].get("data", "") for r in rows),
           "the ingest stored the events after them: the stream did not stall")
    seqs = [r["seq"] for r in rows]
    tap.ok(seqs == list(range(len(seqs))), "with no gap", repr(seqs[-5:]))
    r = env.destroy(sid)
    tap.ok(r.returncode == 0, "destroy succeeds", r.stderr.decode(errors="replace"))
finally:
    env.cleanup()
tap.done()
