#!/usr/bin/env python3
"""The operator's files never change owner behind their back: a root-owned
--workspace used to be chowned, with all its files, to the sandbox user and
left so after destroy. It is now mounted idmapped: inside, root's files
appear as the sandbox user's; on disk they stay root's, and what the
sandbox user creates is root's too; files of other owners stay theirs."""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import Env, tap  # noqa: E402

env = Env()
try:
    ws = os.path.join(env.root, "operators-project")
    os.makedirs(os.path.join(ws, "src"))
    with open(os.path.join(ws, "src", "main.py"), "w") as f:
        f.write("print('hi')\n")
    with open(os.path.join(ws, "someone-elses"), "w") as f:
        f.write("x\n")
    os.chown(os.path.join(ws, "someone-elses"), 1234, 1234)
    owners = {}
    for root, dirs, files in os.walk(ws):
        for n in dirs + files:
            p = os.path.join(root, n)
            st = os.lstat(p)
            owners[p] = (st.st_uid, st.st_gid)
    owners[ws] = (os.lstat(ws).st_uid, os.lstat(ws).st_gid)

    sid = env.create("--workspace", ws)
    uid = env.uid_of(sid)
    tap.ok(int(uid) not in (0, 65534, 1234), "the sandbox runs as a uid of its own", uid)
    p = env.exec(sid, "/bin/sh", "-c", "stat -c '%u %n' /workspace/src/main.py /workspace/someone-elses")
    lines = p.stdout.decode().splitlines()
    tap.ok(len(lines) == 2 and lines[0] == f"{uid} /workspace/src/main.py",
           "inside, root's files appear as the sandbox user's", p.stdout.decode() + p.stderr.decode())
    tap.ok(len(lines) == 2 and not lines[1].startswith(f"{uid} "),
           "a file of another owner does not become the sandbox user's", p.stdout.decode())
    p = env.exec(sid, "/bin/sh", "-c", "echo more >> /workspace/src/main.py && echo new > /workspace/new.txt")
    tap.eq(p.returncode, 0, "the sandbox user writes and creates files")
    p = env.exec(sid, "/bin/sh", "-c", "echo nope >> /workspace/someone-elses")
    tap.ok(p.returncode != 0, "but not into another owner's file")

    now = {p: (os.lstat(p).st_uid, os.lstat(p).st_gid) for p in owners}
    tap.eq(now, owners, "on disk no file changed owner")
    st = os.lstat(os.path.join(ws, "new.txt"))
    tap.eq((st.st_uid, st.st_gid), (0, 0), "a file the sandbox user made is root's on disk")

    first = json.loads(env.run("checkpoints", sid, "--json", check=True).stdout)[0]["id"]
    p = env.run("rollback", sid, "--to", first, "--yes")
    tap.ok(p.returncode == 0, "rollback to the checkpoint taken at create works on it", p.stderr.decode())
    tap.ok(not os.path.exists(os.path.join(ws, "new.txt"))
           and open(os.path.join(ws, "src", "main.py")).read() == "print('hi')\n", "and restores it")
    env.run("destroy", sid, check=True)
    now = {p: (os.lstat(p).st_uid, os.lstat(p).st_gid) for p in owners}
    tap.eq(now, owners, "after destroy every file has its owner of before")
finally:
    env.cleanup()
tap.done()
