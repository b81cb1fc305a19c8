#!/usr/bin/env python3
"""Attack: a sparse file of 1 TiB (and a 40 MiB random one) in the
workspace. The host-side checkpoint worker used to read it by its apparent
size before every exec: `exec -- echo hello` took 611 s and the store grew
to 685 MB. Now a file over SG_CKPT_FILE_MAX is recorded by size and a
marker, the exec returns, the store stays small, the checkpoint event says
what was not stored, and a rollback leaves such a file as it is and says so
(checkpoint.h: limits)."""
from __future__ import annotations

import os

from workspace_common import SLOW, events, new_env, sh, store_bytes, tap

env = new_env()
try:
    sid = env.create_captured()
    ws = env.workspace(sid)

    @tap.case("1 TiB sparse file")
    def _sparse():
        p = sh(env, sid, "truncate -s 1T /workspace/sparse && echo made")
        tap.eq(p.stdout, b"made\n", "the learner makes a 1 TiB sparse file")
        p = env.run("exec", sid, "--", "echo", "hello", timeout=SLOW)
        tap.eq((p.returncode, p.stdout), (0, b"hello\n"), "the next exec returns")
        cks = [e for e in events(env, sid, "checkpoint") if "hello" in e.get("label", "")]
        ns = cks[-1].get("not_stored", {}) if cks else {}
        tap.ok(len(cks) == 1 and "error" not in cks[0] and ns.get("files", 0) >= 1,
               "its checkpoint succeeds and says one file's content was not stored", repr(cks))
        tap.ok(store_bytes(env, sid) < 16 << 20, "the checkpoint store stays small",
               f"{store_bytes(env, sid)} bytes")

    @tap.case("40 MiB of random data, rewritten three times")
    def _big():
        for i in range(3):
            sh(env, sid, "head -c 41943040 /dev/urandom > /workspace/big")
        p = env.run("exec", sid, "--", "true", timeout=SLOW)
        tap.eq(p.returncode, 0, "execs still run")
        tap.ok(store_bytes(env, sid) < 16 << 20, "the store holds none of it",
               f"{store_bytes(env, sid)} bytes")

    @tap.case("rollback and the unstored files")
    def _rollback():
        sh(env, sid, "echo kept > /workspace/small && truncate -s 2T /workspace/sparse")
        r = env.run("rollback", sid, "--yes", "--json", timeout=SLOW)
        tap.ok(r.returncode == 0, "a rollback still works", r.stderr.decode(errors="replace"))
        res = __import__("json").loads(r.stdout or b"{}")
        tap.ok(res.get("not_restored", 0) >= 1, "it says what it could not restore", repr(res)[:400])
        tap.eq(os.stat(os.path.join(ws, "sparse")).st_size, 2 << 40,
               "a file recorded by size only is left as it is")
        tap.ok(not os.path.exists(os.path.join(ws, "small")), "the rest is rolled back")
        first = [e for e in events(env, sid, "checkpoint") if e.get("label") == "create"]
        r = env.run("rollback", sid, "--to", first[0]["id"], "--yes", timeout=SLOW)
        tap.ok(r.returncode == 0, "a rollback to before the attack works", r.stderr.decode(errors="replace"))
        tap.eq(sorted(os.listdir(ws)), [], "and removes what the attack made")

    tap.eq(env.run("exec", sid, "--", "echo", "alive", timeout=SLOW).stdout, b"alive\n",
           "the sandbox still works")
finally:
    env.cleanup()
tap.done()
