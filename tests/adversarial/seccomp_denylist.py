#!/usr/bin/env python3
"""Attack: every syscall of the seccomp denylist, made from inside a
sandbox. Each must fail as docs/SECURITY.md says (its table, call by call),
and that table must be the code's list (`deny_eperm` in
src/sandbox/seccomp.c): a name dropped from the code, or added to it
without a word in SECURITY.md, fails here.

The calls are made by the probe (tests/probe/sg_probe.c, `--syscalls`)
with arguments the kernel rejects before it does anything (bad pointers,
unknown flags, fd -1), so a call the filter lets through fails with
EFAULT, EINVAL, EBADF... instead of the filter's errno. The same calls
made on the host as an unprivileged user without the filter show which
of them the filter alone refuses; the few whose unfiltered answer is
EPERM too (the kernel checks a capability first) are named in a comment
line: for those the list comparison is what catches a dropped name."""
from __future__ import annotations

import errno
import json
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import PROBE, Env, tap  # noqa: E402

ROOT = os.environ.get("SG_SOURCE_ROOT") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SECCOMP_C = os.path.join(ROOT, "src", "sandbox", "seccomp.c")
SECURITY_MD = os.path.join(ROOT, "docs", "SECURITY.md")


def code_denylist() -> list[str]:
    """The names of `deny_eperm[]` in seccomp.c, comments left out."""
    src = open(SECCOMP_C).read()
    m = re.search(r"deny_eperm\[\]\s*=\s*\{(.*?)\};", src, re.S)
    if not m:
        raise RuntimeError("no deny_eperm[] in " + SECCOMP_C)
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    return re.findall(r'"([a-z0-9_]+)"', body)


def doc_denylist() -> dict[str, str]:
    """name -> errno name, from SECURITY.md's table (`| syscalls | what
    they reach | fail with |`)."""
    out: dict[str, str] = {}
    in_table = False
    for line in open(SECURITY_MD):
        if line.startswith("| syscalls | what they reach | fail with |"):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            break
        if in_table and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            for name in re.findall(r"`([a-z0-9_]+)`", cells[0]):
                out[name] = cells[-1]
    return out


def probe(args: list[str], names: list[str]) -> dict:
    p = subprocess.run(args + names, capture_output=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"probe failed ({p.returncode}): {(p.stdout + p.stderr).decode(errors='replace')}")
    return json.loads(p.stdout)


def errname(e) -> str:
    return errno.errorcode.get(e, str(e)) if isinstance(e, int) and e else "no error"


code = code_denylist()
doc = doc_denylist()
tap.ok(len(code) > 40 and len(set(code)) == len(code), f"seccomp.c denies {len(code)} distinct calls", repr(code))
tap.ok(len(doc) > 40, f"SECURITY.md's table names {len(doc)} calls", repr(doc))
tap.ok(sorted(doc) == sorted(code), "SECURITY.md's table names exactly the code's denylist",
       f"only in the code: {sorted(set(code) - set(doc))}; only in SECURITY.md: {sorted(set(doc) - set(code))}")
bad_errno = {n: e for n, e in doc.items() if not hasattr(errno, e)}
tap.ok(not bad_errno, "each row of the table names an errno", repr(bad_errno))

# What SECURITY.md promises is tried: every documented name and every
# name in the code.
names = sorted(set(doc) | set(code))
env = Env()
try:
    sid = env.create()
    ws = json.loads(env.run("ls", "--json", check=True).stdout)
    ws = next(sb["workspace"] for sb in ws if sb["id"] == sid)
    shutil.copy(PROBE, os.path.join(ws, "sg-probe"))
    os.chmod(os.path.join(ws, "sg-probe"), 0o755)
    p = env.exec(sid, "/workspace/sg-probe", "--syscalls", *names, timeout=120)
    tap.ok(p.returncode == 0, "the probe ran in the sandbox", (p.stdout + p.stderr).decode(errors="replace"))
    inside = json.loads(p.stdout or b"{}")
    host = probe([PROBE, "--syscalls", "--as-nobody"], names)
    unproven = []
    for name in names:
        r = inside.get(name, {})
        want = doc.get(name, "(not in SECURITY.md)")
        if r.get("known") is False:
            tap.ok(False, f"{name}: the probe knows its arguments", "add it to syscalls[] in tests/probe/sg_probe.c")
            continue
        if r.get("nr") is None and "nr" in r:
            # No such call on this architecture (umount on x86_64): the
            # filter leaves it out, and no program can make it.
            tap.ok(host.get(name, {}).get("nr") is None,
                   f"{name}: no such syscall on this architecture, nothing to refuse", repr(r))
            continue
        got = errname(r.get("errno")) if r.get("ret", 0) < 0 else f"returned {r.get('ret')}"
        h = host.get(name, {})
        hgot = errname(h.get("errno")) if h.get("ret", 0) < 0 else f"returned {h.get('ret')}"
        tap.ok(got == want, f"{name} fails inside the sandbox with {want}",
               f"got {got} (nr {r.get('nr')}); without the filter, as nobody on the host: {hgot}")
        if hgot == want:
            unproven.append(name)
    print(f"# refused by the kernel too, unprivileged and unfiltered (the list check guards these): "
          f"{' '.join(unproven) or 'none'}", flush=True)
    # The sandbox still works after all of them.
    tap.eq(env.exec(sid, "echo", "alive").stdout, b"alive\n", "the sandbox still runs commands")
finally:
    env.cleanup()
tap.done()
