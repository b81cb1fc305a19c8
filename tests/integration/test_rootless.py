"""Rootless mode: an ordinary user (nobody) runs sandboxes through a user
namespace, without cgroups (README: what rootless can and cannot do).

Everything runs as that user through runuser: a failure to run as it is a
failure; only a host that forbids unprivileged user namespaces is a skip,
with the kernel's answer as the reason. The sanitizers' options go with the
user (reports land in a directory it can write, scanned at the end)."""
from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import tempfile

from sgtest import (PROBE, RUN_ROOT, SANDGLASS, SANDGLASSD, await_true, cmdline, pid_alive, pidns_members,
                    probe_ns_args, tap)

USER, GROUP = "nobody", "nogroup"
# A supplementary group the sandbox keeps, unmapped (README: setgroups is
# denied in such a namespace).
EXTRA_GROUP = "adm"


def as_user(argv: list[str], groups: bool = False, env: dict | None = None,
            **kw) -> subprocess.CompletedProcess:
    cmd = ["runuser", "-u", USER]
    if groups:
        cmd += ["-g", GROUP, "-G", EXTRA_GROUP]
    cmd += ["--"]
    if env is not None:
        cmd += ["env", "-i", *(f"{k}={v}" for k, v in env.items())]
    return subprocess.run(cmd + argv, capture_output=True, **kw)


# The user must exist and runuser must work: if not, that is a failure of
# this machine's setup, not a reason to pass.
r = as_user(["true"])
if r.returncode != 0:
    tap.ok(False, f"runuser runs a command as {USER}", r.stderr.decode(errors="replace"))
    tap.done()
r = as_user(["unshare", "-U", "-r", "true"])
if r.returncode != 0:
    why = r.stderr.decode(errors="replace").strip()
    for knob in ("/proc/sys/kernel/unprivileged_userns_clone", "/proc/sys/user/max_user_namespaces",
                 "/proc/sys/kernel/apparmor_restrict_unprivileged_userns"):
        try:
            why += f"; {knob}={open(knob).read().strip()}"
        except OSError:
            pass
    tap.skip("rootless", f"the host forbids unprivileged user namespaces ({why})")
    tap.done()

root = tempfile.mkdtemp(prefix="sgrl-", dir=RUN_ROOT or "/tmp")  # the run's own root (sgtest)
os.chmod(root, 0o755)
state = os.path.join(root, "state")
os.makedirs(state)
shutil.chown(state, USER, GROUP)
san_dir = os.path.join(root, "san")
os.makedirs(san_dir)
os.chmod(san_dir, 0o1777)
# The build directory may not be reachable by that user (a checkout under
# /root): run copies of the binaries from a directory it can read.
bindir = os.path.join(root, "bin")
os.makedirs(bindir)
for b in (SANDGLASS, SANDGLASSD, *(os.path.join(os.path.dirname(SANDGLASS), n)
                                   for n in ("sandglass-supervisor", "sandglass-init", "sandglass-ckpt", "sandglass-uplink",
                                             "sandglass-exec"))):
    if os.path.exists(b) or not b.endswith("sandglass-exec"):  # musl builds only
        shutil.copy(b, bindir)
SG = os.path.join(bindir, os.path.basename(SANDGLASS))
env = {"PATH": "/usr/bin:/bin", "SANDGLASS_STATE_DIR": state,
       "SANDGLASSD": os.path.join(bindir, os.path.basename(SANDGLASSD)),
       # the run's mark (its leak check finds what this test leaves) and a
       # refused ingest, never the default port's
       "SG_TEST_ROOT": RUN_ROOT, "SANDGLASS_INGEST": "ws://127.0.0.1:1"}
# Sanitizer reports of the user's processes must not be lost: the options
# go along, with a log path the user can write (scanned at the end).
for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"):
    opts = [o for o in os.environ.get(var, "").split(":") if o and not o.startswith("log_path=")]
    env[var] = ":".join(opts + [f"log_path={san_dir}/{var.split('_')[0].lower()}"])


def run(*args: str, groups: bool = False, timeout: float = 120) -> subprocess.CompletedProcess:
    return as_user([SG, *args], groups=groups, env=env, timeout=timeout)


def spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen(["runuser", "-u", USER, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()),
                             SG, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def meta(sid: str) -> dict:
    with open(os.path.join(state, "sb", sid, "meta.json")) as f:
        return json.load(f)


def pidns_pids(init_pid: int) -> set[int]:
    """The live processes of a sandbox, by its pid namespace."""
    return {p for p, st in pidns_members(init_pid).items() if st != "Z"}


def running(init: int, cmd: str) -> list[int]:
    return sorted(p for p in pidns_pids(init) if cmdline(p) == cmd)


def status_groups(text: str) -> list[int]:
    return [int(g) for line in text.splitlines() if line.startswith("Groups:") for g in line.split()[1:]]


try:
    @tap.case("an ordinary user's sandbox")
    def _():
        p = run("create", "--learner", "rl", "--memory", "128M", "--json")
        tap.ok(p.returncode == 0, "an ordinary user creates a sandbox", p.stderr.decode())
        sid = json.loads(p.stdout)["id"]
        m = meta(sid)
        # No loop device without root: the workspace has no file system of
        # its own, and create says so (never a silent lack of a limit).
        tap.ok(b"warning: no disk limit" in p.stderr and p.stderr.count(b"\n") == 1,
               "create warns, in one line, that the workspace has no disk limit", p.stderr.decode())
        tap.eq(m["limits"].get("disk"), None, "the record says: no disk limit")
        tap.ok(os.stat(os.path.join(state, "sb", sid, "supervisor.log")).st_uid != 0,
               "the supervisor runs as that user")
        with open(f"/proc/{m['supervisor_pid']}/environ", "rb") as f:
            sup_env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        tap.ok(all(f"log_path={san_dir}/".encode() in sup_env.get(v.encode(), b"")
                   for v in ("ASAN_OPTIONS", "UBSAN_OPTIONS")),
               "the user's supervisor runs with the sanitizers' options (its reports are kept)",
               repr({k: v for k, v in sup_env.items() if k.endswith(b"SAN_OPTIONS")}))
        p = run("exec", sid, "--", "/bin/sh", "-c", "id -u; cat /proc/1/comm; echo data > /workspace/f")
        tap.ok(p.returncode == 0 and p.stdout.split()[1:2] == [b"sandglass-init"],
               "exec runs inside, init is pid 1", (p.stdout + p.stderr).decode())
        ws = m["workspace"]
        shutil.copy(PROBE, os.path.join(ws, "sg-probe"))
        os.chmod(os.path.join(ws, "sg-probe"), 0o755)
        for check in ("pid1", "caps", "nnp", "seccomp", "net", "fs", "dev"):
            p = run("exec", sid, "--", "/workspace/sg-probe", check)
            tap.ok(p.returncode == 0 and f"ok {check}\n".encode() in p.stdout, f"rootless probe {check}",
                   (p.stdout + p.stderr).decode())
        # README: the same pid, mount, net, ipc, uts and cgroup namespaces,
        # in a user namespace of its own: each compared with the host's.
        p = run("exec", sid, "--", "/workspace/sg-probe",
                *probe_ns_args(types=("pid", "mnt", "net", "ipc", "uts", "cgroup", "user")), "ns")
        tap.ok(p.returncode == 0 and b"ok ns\n" in p.stdout
               and b"# ns compared: pid mnt net ipc uts cgroup user\n" in p.stdout,
               "rootless probe ns: every namespace, the user namespace too, differs from the host's",
               (p.stdout + p.stderr).decode())
        p = run("exec", sid, "--json", "--", "/bin/sh", "-c", "head -c 300000000 /dev/zero | tail > /dev/null")
        res = json.loads(p.stdout.decode().splitlines()[-1])
        tap.ok(res["exit_code"] != 0, "the memory limit holds (RLIMIT_AS without cgroups)", p.stdout.decode())

        # A timeout kills its exec's session; an escaper from it (setsid)
        # survives until abort or destroy (README). The command says when
        # its escaper has its own session and when it goes to sleep (files
        # in the workspace), so the timeout need not outlast the host's
        # look at the processes: the checks come after it.
        init = m["init_pid"]
        ex = spawn("exec", sid, "--json", "--timeout", "5", "--", "/bin/sh", "-c",
                   "setsid sh -c 'echo > /workspace/esc; exec sleep 701' </dev/null >/dev/null 2>&1 & "
                   "while [ ! -e /workspace/esc ]; do sleep 0.01; done; echo > /workspace/timed; exec sleep 700")
        out, err = ex.communicate(timeout=120)
        res = json.loads(out.decode().splitlines()[-1]) if out.strip() else {}
        tap.ok(ex.returncode == 137 and res.get("timed_out") is True,
               "a rootless exec's timeout kills it and is reported", (out + err).decode())
        started = run("exec", sid, "--", "cat", "/workspace/esc", "/workspace/timed").returncode == 0
        tap.ok(started and not running(init, "sleep 700"), "the timed-out command ran and is dead",
               repr((started, [(x, cmdline(x)) for x in pidns_pids(init)])))
        await_true(lambda: len(running(init, "sleep 701")) == 1, "its setsid escaper survives the timeout (documented)",
                   timeout=60, diag=lambda: repr([(x, cmdline(x)) for x in pidns_pids(init)]))
        p = run("exec", sid, "--json", "--timeout", "0.5", "--", "sleep", "3600", timeout=300)
        res = json.loads(p.stdout.decode().splitlines()[-1])
        tap.ok(p.returncode == 137 and res["timed_out"] is True, "a sleep past the timeout is killed", p.stdout.decode())

        run("exec", sid, "--", "/bin/sh", "-c", "setsid sleep 300 & (nohup sleep 301 >/dev/null 2>&1 &); exit 0")
        await_true(lambda: running(init, "sleep 300") and running(init, "sleep 301"),
                   "escapers are running", timeout=60,
                   diag=lambda: repr([(x, cmdline(x)) for x in pidns_pids(init)]))
        users = pidns_pids(init) - {init}
        p = run("abort", sid, "--json")
        rec = json.loads(p.stdout)
        tap.ok(rec["proof"]["processes_left"] == 0 and rec["proof"]["checked_by"] == "pid namespace",
               "abort kills by pid namespace and proves it", p.stdout.decode())
        tap.ok(users and not any(pid_alive(x) for x in users), "every one of them is dead, the escapers too",
               repr(users))
        tap.eq(pidns_pids(init), {init}, "only init is left")
        p = run("destroy", sid)
        tap.ok(p.returncode == 0 and not pid_alive(init) and not os.path.exists(os.path.join(state, "sb", sid)),
               "destroy leaves nothing", p.stderr.decode())

    @tap.case("supplementary groups are kept, unmapped")
    def _():
        extra = int(subprocess.run(["getent", "group", EXTRA_GROUP], capture_output=True,
                                   check=True).stdout.split(b":")[2])
        overflow = int(open("/proc/sys/kernel/overflowgid").read())
        p = run("create", "--learner", "rg", "--json", groups=True)
        tap.ok(p.returncode == 0, f"a user with the supplementary group {EXTRA_GROUP} creates a sandbox",
               p.stderr.decode())
        sid = json.loads(p.stdout)["id"]
        init = meta(sid)["init_pid"]
        with open(f"/proc/{init}/status") as f:
            host_groups = status_groups(f.read())
        tap.ok(extra in host_groups, f"the sandbox keeps the operator's group {extra} (seen from the host)",
               repr(host_groups))
        p = run("exec", sid, "--", "cat", "/proc/self/status", groups=True)
        inside = status_groups(p.stdout.decode())
        tap.ok(p.returncode == 0 and extra not in inside and overflow in inside,
               f"inside, it is unmapped: the overflow gid {overflow}, never {extra}",
               repr((inside, p.stderr.decode())))
        p = run("destroy", sid)
        tap.ok(p.returncode == 0 and not pid_alive(init), "destroy ends it", p.stderr.decode())
finally:
    for sb in os.listdir(os.path.join(state, "sb")) if os.path.isdir(os.path.join(state, "sb")) else []:
        run("destroy", sb)
    reports = ""
    for f in sorted(glob.glob(os.path.join(san_dir, "*"))):
        reports += f"== {f}\n" + open(f, errors="replace").read()[-3000:]
    tap.ok(not reports, f"no sanitizer report from any process run as {USER}", reports)
    shutil.rmtree(root, ignore_errors=True)
tap.done()
