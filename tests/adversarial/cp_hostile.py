#!/usr/bin/env python3
"""Attack: `sandglass cp` against a hostile workspace and hostile sizes
(issue 26). A learner swaps a directory for a symlink to a host directory
in a loop while the operator copies it out: no byte of the host directory
comes out, every copy ends (done, or refused with a message). A 1 TiB
sparse file, 100,001 entries and a tree 300 levels deep are refused at
their bound (SG_CP_*), saying which. An abort issued while a copy runs
returns, and the copy ends reporting it was cancelled (the copy runs off
the supervisor's loop and stops when the kill switch says so; before, it
ran on the loop to its end). No timing is asserted: the waits are bounds
on a hang."""
from __future__ import annotations

import os
import subprocess
import time

from workspace_common import SANDGLASS, SLOW, new_env, sh, tap

env = new_env()
SECRET = b"HOST-SECRET-7f3a"


def err(p) -> str:
    return (p.stderr if isinstance(p.stderr, bytes) else b"").decode(errors="replace")


def host(*parts: str) -> str:
    return os.path.join(env.root, *parts)


def leaked(root: str) -> list[str]:
    """Regular files under root (no symlink followed) holding the secret."""
    found = []
    for d, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            if os.path.isfile(p) and not os.path.islink(p) and SECRET in open(p, "rb").read():
                found.append(p)
    return found


try:
    @tap.case("a symlink swapped in a loop during cp out")
    def _race():
        sid = env.create()
        target = host("hostdir")
        os.makedirs(target)
        with open(os.path.join(target, "secret"), "wb") as f:
            f.write(SECRET)
        sh(env, sid, "mkdir -p d/x && for i in 1 2 3 4 5 6 7 8; do echo $i > d/x/f$i; done", timeout=SLOW)
        # the learner's loop: d/x a directory, then a symlink to the host's directory, again and again
        loop = (f"i=0; while [ $i -lt 200000 ]; do mv d/x d/x.real && ln -s {target} d/x && rm d/x && "
                f"mv d/x.real d/x; i=$((i+1)); done >/dev/null 2>&1 &")
        tap.eq(sh(env, sid, loop).returncode, 0, "the learner's swapping loop runs in the background")
        outcomes = []
        for i in range(12):
            out = host(f"race{i}")
            os.makedirs(out)
            p = env.run("cp", f"{sid}:d", out, timeout=SLOW)
            outcomes.append(p.returncode)
            if p.returncode not in (0, 1) or (p.returncode == 1 and not err(p).strip()):
                tap.ok(False, f"copy {i} ended with {p.returncode}: {err(p)}")
        tap.ok(all(r in (0, 1) for r in outcomes), "every copy ended, copied or refused with a message",
               repr(outcomes))
        tap.eq([p for i in range(12) for p in leaked(host(f"race{i}"))], [],
               "no byte of the host directory came out through the swapped symlink")
        links = [os.path.join(d, n) for i in range(12) for d, ds, fs in os.walk(host(f"race{i}"))
                 for n in ds + fs if os.path.islink(os.path.join(d, n))]
        tap.ok(all(os.readlink(x) == target for x in links), "a swapped-in symlink came out as a link, not followed",
               repr(links)[:400])
        tap.eq(sorted(os.listdir(target)), ["secret"], "nothing was written into the host directory")
        env.destroy(sid)

    @tap.case("a 1 TiB sparse file and a tree 300 levels deep, out")
    def _sizes():
        sid = env.create()
        p = sh(env, sid, "truncate -s 1T big && p=deep; for i in $(seq 300); do p=$p/d; done; mkdir -p $p && echo ok")
        tap.eq(p.stdout, b"ok\n", "the learner makes both")
        p = env.run("cp", f"{sid}:big", host("big-out"), timeout=SLOW)
        tap.ok(p.returncode == 1 and "at most" in err(p) and "bytes" in err(p) and
               not os.path.lexists(host("big-out")),
               "the sparse file is refused at its size, before a byte is read", err(p))
        os.makedirs(host("deep-out"))
        p = env.run("cp", f"{sid}:deep", host("deep-out"), timeout=SLOW)
        tap.ok(p.returncode == 1 and "nested too deep" in err(p), "the deep tree is refused at the depth bound",
               err(p))
        env.destroy(sid)

    @tap.case("100,001 entries: an abort mid-copy, then the entries' bound")
    def _many():
        tree = host("many")
        for i in range(101):
            d = os.path.join(tree, f"d{i:03}")
            os.makedirs(d)
            for j in range(1000 if i < 100 else 1):
                open(os.path.join(d, f"f{j}"), "wb").close()
        # 100,001 files, 101 directories and the tree itself: past 100,000 entries
        sid = env.create("--disk", "4G")
        ws = env.workspace(sid)
        cp = subprocess.Popen([SANDGLASS, "cp", tree, f"{sid}:"], env=env.env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
        end = time.monotonic() + SLOW
        while time.monotonic() < end and cp.poll() is None and not (
                os.path.isdir(os.path.join(ws, "many")) and os.listdir(os.path.join(ws, "many"))):
            time.sleep(0.01)
        started = cp.poll() is None
        ab = env.run("abort", sid, "--reason", "cp test", timeout=SLOW)
        tap.ok(started and ab.returncode == 0, "an abort issued while the copy runs returns",
               f"copy running when asked: {started}; {err(ab)}")
        out, errb = cp.communicate(timeout=SLOW)
        tap.ok(cp.returncode == 1 and b"cancelled" in errb, "the copy ends, reporting it was cancelled",
               f"{cp.returncode} {errb.decode(errors='replace')} {out.decode(errors='replace')}")
        env.run("resume", sid, check=True)
        p = env.run("cp", tree, f"{sid}:again", timeout=SLOW)
        tap.ok(p.returncode == 1 and "100000 entries" in err(p), "the whole tree is refused at the entries' bound",
               err(p))
        tap.eq(env.run("exec", sid, "--", "echo", "alive", timeout=SLOW).stdout, b"alive\n",
               "the sandbox still works")
        env.destroy(sid)
finally:
    env.cleanup()
tap.done()
