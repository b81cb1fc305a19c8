#!/usr/bin/env python3
"""sandglass cp (issue 26): files and trees into and out of a workspace,
host-side by the supervisor. Contents, modes and owners; paths escaping the
workspace by '..' or by a learner's symlink refused both ways (the host
files they aim at checked untouched); a FIFO never hangs a copy out;
refused while aborted; a captured sandbox's file_diff events of a copy in
name the operator's cp as their cause, with their contents, and no learner
command. Real sandboxes, a real ingest and store (CapEnv). TAP."""
from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess

from sgtest import sh_out, tap, write_file
from test_capture import CapEnv

env = CapEnv()
ME = os.getuid()


def cp(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return env.run("cp", *args, timeout=timeout)


def err(p: subprocess.CompletedProcess) -> str:
    return p.stderr.decode(errors="replace")


def host(*parts: str) -> str:
    return os.path.join(env.root, *parts)


write = write_file


def inside(sid: str, script: str) -> str:
    return sh_out(env, sid, script)


@tap.case("a file and a tree in and out: contents, modes, the sandbox user's")
def _():
    sid = env.create()
    uid = env.uid_of(sid)
    write(host("src", "one.txt"), b"one\n", 0o640)
    write(host("src", "tree", "a.sh"), b"#!/bin/sh\necho a\n", 0o751)
    write(host("src", "tree", "deep", "b.bin"), bytes(range(256)) * 300, 0o604)
    os.symlink("a.sh", host("src", "tree", "link"))
    p = cp(host("src", "one.txt"), f"{sid}:/workspace/one.txt")
    tap.ok(p.returncode == 0 and b"copied 1 file" in p.stdout, "cp FILE ID:/workspace/one.txt", err(p))
    tap.eq(inside(sid, "cat one.txt; stat -c '%a %u' one.txt"), f"one\n640 {uid}",
           "the file inside: its contents, mode, and the sandbox user as owner")
    p = cp(host("src", "tree"), f"{sid}:")  # into the workspace itself, under its own name
    tap.ok(p.returncode == 0, "cp DIR ID: copies the tree into the workspace", err(p))
    got = inside(sid, "cd tree && stat -c '%n %a %u' a.sh deep deep/b.bin && readlink link && "
                 "sha256sum deep/b.bin | cut -c1-64 && stat -c %u link")
    want = (f"a.sh 751 {uid}\ndeep 755 {uid}\ndeep/b.bin 604 {uid}\na.sh\n"
            f"{hashlib.sha256(bytes(range(256)) * 300).hexdigest()}\n{uid}")
    tap.eq(got, want, "the tree inside: modes, owner, contents, the symlink as a link")
    env.sh(sid, "mkdir -p made/sub && printf 'x' > made/sub/x && chmod 700 made/sub && echo two > two.txt", check=True)
    out = host("out1")
    os.makedirs(out)
    p = cp(f"{sid}:made", out)
    tap.ok(p.returncode == 0, "cp ID:DIR LOCALDIR copies the tree into it under its own name", err(p))
    x = os.path.join(out, "made", "sub", "x")
    tap.ok(os.path.isfile(x) and open(x, "rb").read() == b"x" and
           stat.S_IMODE(os.stat(os.path.dirname(x)).st_mode) == 0o700 and os.stat(x).st_uid == ME,
           "the tree outside: contents, modes, the caller as owner")
    p = cp(f"{sid}:/workspace/two.txt", host("two-copy"))
    tap.ok(p.returncode == 0 and open(host("two-copy"), "rb").read() == b"two\n",
           "cp ID:FILE LOCAL names the copy", err(p))
    p = cp(f"{sid}:tree/link", host("link-copy"))
    tap.ok(p.returncode == 0 and os.readlink(host("link-copy")) == "a.sh", "a symlink comes out as a link", err(p))
    p = cp(host("src", "one.txt"), f"{sid}:one.txt", "--json")
    tap.ok(p.returncode == 0 and json.loads(p.stdout).get("path") == "/workspace/one.txt" and
           json.loads(p.stdout).get("bytes") == 4, "a copy over a file of the workspace; --json", p.stdout.decode())
    env.destroy(sid)


@tap.case("an operator's root-owned --workspace (idmapped): root's on disk, the sandbox user's inside")
def _():
    ws = host("operators-ws")
    os.makedirs(ws)
    sid = env.create("--workspace", ws)
    uid = env.uid_of(sid)
    write(host("idm.txt"), b"idm\n", 0o644)
    p = cp(host("idm.txt"), f"{sid}:idm.txt")
    st = os.lstat(os.path.join(ws, "idm.txt")) if p.returncode == 0 else None
    tap.ok(st is not None and st.st_uid == 0, "on disk the copy is root's, as the sandbox user's own files are",
           err(p) + repr(st))
    tap.eq(inside(sid, "stat -c %u idm.txt"), uid, "inside it is the sandbox user's")
    env.destroy(sid)


@tap.case("escapes refused: '..', a learner's symlink, both ways")
def _():
    sid = env.create()
    target = host("hostdir")
    os.makedirs(target)
    write(os.path.join(target, "victim"), b"orig\n", 0o644)
    write(os.path.join(target, "secret"), b"host secret\n", 0o600)
    write(host("payload"), b"evil\n", 0o644)
    # a symlink into the host's file system, dangling inside the sandbox
    env.sh(sid, f"ln -s {target} evil && ln -s {target}/victim pw && ln -s {target}/secret sec", check=True)
    cases = [
        ("in", (host("payload"), f"{sid}:../payload"), "'..' out of the workspace (relative)"),
        ("in", (host("payload"), f"{sid}:/workspace/../tmp/payload"), "'..' out of the workspace (absolute)"),
        ("in", (host("payload"), f"{sid}:/etc/payload"), "an absolute path outside /workspace"),
        ("in", (host("payload"), f"{sid}:evil/payload"), "a path through a learner's symlink"),
        ("in", (host("payload"), f"{sid}:evil"), "a learner's symlink to a directory as the destination"),
        ("in", (host("payload"), f"{sid}:pw"), "a learner's symlink to a file as the destination"),
        ("out", (f"{sid}:/workspace/../../etc/passwd", host("o1")), "'..' out of the workspace"),
        ("out", (f"{sid}:evil/secret", host("o2")), "a path through a learner's symlink"),
        ("out", (f"{sid}:evil/", host("o3")), "a learner's symlink named as a directory ('/')"),
    ]
    for way, args, what in cases:
        p = cp(*args)
        tap.ok(p.returncode == 1 and ("workspace" in err(p) or "symlink" in err(p)),
               f"cp {way} refused: {what}", f"{p.returncode} {err(p)}")
    tap.eq(sorted(os.listdir(target)), ["secret", "victim"], "nothing was written into the host directory")
    tap.eq(open(os.path.join(target, "victim"), "rb").read(), b"orig\n", "the host file a symlink names is unchanged")
    tap.ok(not any(os.path.lexists(host(n)) for n in ("o1", "o2", "o3")), "nothing was copied out by a refused cp")
    p = cp(host("payload"), f"{sid}:nodir/")
    tap.ok(p.returncode == 1 and not env.sh(sid, "test -e nodir").returncode == 0,
           "a destination written as a directory ('/') that is none is refused", err(p))
    p = cp(f"{sid}:sec", host("o4"))
    tap.ok(p.returncode == 0 and os.path.islink(host("o4")), "a learner's symlink out is copied as a link, not read",
           err(p))
    env.destroy(sid)


@tap.case("FIFOs and hostile names: no hang, escaped messages")
def _():
    sid = env.create()
    env.sh(sid, "mkdir -p t && echo ok > t/f && mkfifo t/pipe && mkfifo \"$(printf 'q\\033[31mred')\"", check=True)
    p = cp(f"{sid}:t", host("fifo-out"), timeout=60)
    tap.ok(p.returncode == 0 and open(host("fifo-out", "f"), "rb").read() == b"ok\n" and
           not os.path.lexists(host("fifo-out", "pipe")) and b"left out 1" in p.stdout,
           "a tree with a FIFO is copied out without it, and says so", err(p) + p.stdout.decode())
    p = cp(f"{sid}:t/pipe", host("fifo2"), timeout=60)
    tap.ok(p.returncode == 1 and "FIFO" in err(p) and not os.path.lexists(host("fifo2")),
           "a FIFO named is refused at once", err(p))
    p = cp(f"{sid}:q\x1b[31mred", host("fifo3"), timeout=60)
    tap.ok(p.returncode == 1 and b"\x1b" not in p.stderr and "\\x1b" in err(p),
           "a name with an escape sequence reaches the terminal escaped", repr(p.stderr))
    env.destroy(sid)


@tap.case("refused while aborted, in and out; allowed again after resume")
def _():
    sid = env.create()
    write(host("ab.txt"), b"ab\n", 0o644)
    env.sh(sid, "echo w > w.txt", check=True)
    env.run("abort", sid, "--reason", "cp test", check=True)
    p_in = cp(host("ab.txt"), f"{sid}:ab.txt")
    p_out = cp(f"{sid}:w.txt", host("ab-out"))
    tap.ok(p_in.returncode == 1 and "aborted" in err(p_in) and "resume" in err(p_in),
           "cp in refused with a clear message", err(p_in))
    tap.ok(p_out.returncode == 1 and "aborted" in err(p_out) and not os.path.lexists(host("ab-out")),
           "cp out refused too", err(p_out))
    env.run("resume", sid, check=True)
    p = cp(host("ab.txt"), f"{sid}:ab.txt")
    tap.ok(p.returncode == 0 and inside(sid, "cat ab.txt") == "ab", "after resume cp works", err(p))
    env.destroy(sid)


@tap.case("captured: a copy in is the operator's cp, with its contents, no learner command")
def _():
    sid = env.create_captured()
    env.sh(sid, "echo before > before.txt", check=True)
    body = b"copied by the operator\n"
    write(host("cap", "op.txt"), body, 0o644)
    write(host("cap", "dir", "inner.txt"), b"inner\n", 0o600)
    before = len(env.wait_rows(sid, lambda r: any(x["kind"] == "run_result" for x in r)))
    for src in ("op.txt", "dir"):
        p = cp(host("cap", src), f"{sid}:")
        tap.ok(p.returncode == 0, f"cp {src} into the captured sandbox", err(p))

    def diffs(rows):
        return {os.path.basename(r["payload"].get("path", "")): r["payload"] for r in rows[before:]
                if r["kind"] == "file_diff"}
    rows = env.wait_rows(sid, lambda r: {"op.txt", "inner.txt"} <= set(diffs(r)))
    d = diffs(rows)
    for name in ("op.txt", "inner.txt"):
        o = (d.get(name) or {}).get("operator") or {}
        tap.ok(o.get("action") == "cp" and (o.get("actor") or {}).get("uid") == ME and
               o.get("path", "").startswith("/workspace/") and "exec_id" not in d.get(name, {}) and
               "command_id" not in d.get(name, {}),
               f"{name}'s file_diff names the operator's cp as its cause, no exec", repr(d.get(name)))
    c = (d.get("op.txt") or {}).get("content") or {}
    tap.eq((c.get("sha256"), c.get("size")), (hashlib.sha256(body).hexdigest(), len(body)),
           "its content is recorded (hash and size)")
    later = [r for r in rows[before:] if r["kind"] in ("command", "stdin", "run_result")]
    tap.eq(later, [], "no learner command, input or result was recorded for the copies")
    env.destroy(sid)


@tap.case("usage errors")
def _():
    p = cp(host("a"), host("b"))
    tap.ok(p.returncode == 2 and "ID:PATH" in err(p), "two local paths: a usage error", err(p))
    p = cp("abcd:x", "abce:y")
    tap.ok(p.returncode == 2 and "local" in err(p), "two sandbox paths: a usage error", err(p))
    p = cp(host("a"))
    tap.ok(p.returncode == 2, "one path: a usage error", err(p))
    p = cp(host("nothing-here"), "zzzzzzzzzzzz:x")
    tap.ok(p.returncode == 1 and "zzzz" in err(p), "an unknown sandbox id is named", err(p))


env.cleanup()
tap.done()
