"""Rootless mode: an ordinary user (nobody) runs sandboxes through a user
namespace, without cgroups (README: what rootless can and cannot do)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile

from sgtest import PROBE, SANDGLASS, SANDGLASSD, pid_alive, tap  # noqa: F401

USER = "nobody"


def userns_allowed() -> bool:
    r = subprocess.run(["runuser", "-u", USER, "--", "unshare", "-U", "-r", "true"],
                       capture_output=True)
    return r.returncode == 0


root = tempfile.mkdtemp(prefix="sgrl-", dir="/tmp")
os.chmod(root, 0o755)
state = os.path.join(root, "state")
os.makedirs(state)
shutil.chown(state, USER, "nogroup")
# The build directory may not be reachable by that user (a checkout under
# /root): run copies of the binaries from a directory it can read.
bindir = os.path.join(root, "bin")
os.makedirs(bindir)
for b in (SANDGLASS, SANDGLASSD, *(os.path.join(os.path.dirname(SANDGLASS), n)
                                   for n in ("sandglass-supervisor", "sandglass-init", "sandglass-ckpt", "sandglass-uplink",
                                             "sandglass-capture.so", "sandglass-exec"))):
    if os.path.exists(b) or not b.endswith("sandglass-exec"):  # musl builds only
        shutil.copy(b, bindir)
SG = os.path.join(bindir, os.path.basename(SANDGLASS))
env = {"PATH": "/usr/bin:/bin", "SANDGLASS_STATE_DIR": state,
       "SANDGLASSD": os.path.join(bindir, os.path.basename(SANDGLASSD))}


def run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    e = " ".join(f"{k}={v}" for k, v in env.items())
    return subprocess.run(["runuser", "-u", USER, "--", "env", *e.split(), SG, *args],
                          capture_output=True, timeout=timeout)


def meta(sid: str) -> dict:
    with open(os.path.join(state, "sb", sid, "meta.json")) as f:
        return json.load(f)


def pidns_pids(init_pid: int) -> set[int]:
    want = os.readlink(f"/proc/{init_pid}/ns/pid")
    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.readlink(f"/proc/{d}/ns/pid") == want and pid_alive(int(d)):
                    out.add(int(d))
            except OSError:
                pass
    return out


if not userns_allowed():
    tap.skip("rootless", "unprivileged user namespaces are not allowed here")
    tap.done()

try:
    p = run("create", "--learner", "rl", "--memory", "128M", "--json")
    tap.ok(p.returncode == 0, "an ordinary user creates a sandbox", p.stderr.decode())
    sid = json.loads(p.stdout)["id"]
    m = meta(sid)
    tap.ok(os.stat(os.path.join(state, "sb", sid, "supervisor.log")).st_uid != 0,
           "the supervisor runs as that user")
    p = run("exec", sid, "--", "/bin/sh", "-c", "id -u; cat /proc/1/comm; echo data > /workspace/f")
    tap.ok(p.returncode == 0 and p.stdout.split()[1] == b"sandglass-init",
           "exec runs inside, init is pid 1", (p.stdout + p.stderr).decode())
    ws = m["workspace"]
    shutil.copy(PROBE, os.path.join(ws, "sg-probe"))
    os.chmod(os.path.join(ws, "sg-probe"), 0o755)
    for check in ("pid1", "caps", "nnp", "seccomp", "net", "fs", "dev"):
        p = run("exec", sid, "--", "/workspace/sg-probe", check)
        tap.ok(p.returncode == 0, f"rootless probe {check}", (p.stdout + p.stderr).decode())
    p = run("exec", sid, "--json", "--", "/bin/sh", "-c", "head -c 300000000 /dev/zero | tail > /dev/null")
    tap.ok(json.loads(p.stdout.decode().splitlines()[-1])["exit_code"] != 0,
           "the memory limit holds (RLIMIT_AS without cgroups)", p.stdout.decode())
    run("exec", sid, "--", "/bin/sh", "-c", "setsid sleep 300 & (nohup sleep 301 >/dev/null 2>&1 &); sleep 0.3")
    init = m["init_pid"]
    users = pidns_pids(init) - {init}
    tap.ok(len(users) >= 2, "escapers are running", repr(users))
    p = run("abort", sid, "--json")
    rec = json.loads(p.stdout)
    tap.ok(rec["proof"]["processes_left"] == 0 and rec["proof"]["checked_by"] == "pid namespace",
           "abort kills by pid namespace and proves it", p.stdout.decode())
    tap.eq(pidns_pids(init), {init}, "only init is left")
    p = run("destroy", sid)
    tap.ok(p.returncode == 0 and not pid_alive(init) and not os.path.exists(os.path.join(state, "sb", sid)),
           "destroy leaves nothing", p.stderr.decode())
finally:
    for sb in os.listdir(os.path.join(state, "sb")) if os.path.isdir(os.path.join(state, "sb")) else []:
        run("destroy", sb)
    shutil.rmtree(root, ignore_errors=True)
tap.done()
