"""Shared helpers for the integration tests: TAP output, a private state
directory per test file, and wrappers that run the real binaries.

Stdlib only. Each test file calls `tap.plan()` implicitly via `tap.done()`.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

SANDGLASS = os.environ.get("SANDGLASS_BIN", "sandglass")
SANDGLASSD = os.environ.get("SANDGLASSD_BIN", "sandglassd")
PROBE = os.environ.get("SG_PROBE_BIN", "")
# Whether a root sandbox holds each execve for the host (src/sandbox/
# execnotify.h): one more seccomp filter on init and everything under it.
# The same gate as the code's: SANDGLASS_EXEC_NOTIFY=0 or Linux < 5.5 turn it off.
EXEC_HELD = os.environ.get("SANDGLASS_EXEC_NOTIFY") != "0" and \
    tuple(int(x) for x in os.uname().release.split(".")[:2] if x.isdigit()) >= (5, 5)


class Tap:
    def __init__(self) -> None:
        self.n = 0
        self.failed = 0
        self.skipped = 0

    def ok(self, cond: bool, name: str, diag: str = "") -> bool:
        self.n += 1
        print(f"{'ok' if cond else 'not ok'} {self.n} - {name}", flush=True)
        if not cond:
            self.failed += 1
            for line in (diag or "").splitlines()[:40]:
                print(f"#   {line}", flush=True)
        return cond

    def skip(self, name: str, why: str) -> None:
        self.n += 1
        self.skipped += 1
        print(f"ok {self.n} - {name} # SKIP {why}", flush=True)

    def eq(self, got, want, name: str) -> bool:
        return self.ok(got == want, name, f"got:  {got!r}\nwant: {want!r}")

    def case(self, name: str):
        """Decorator: run a test function, turning exceptions into failures."""
        def wrap(fn):
            try:
                fn()
            except Exception:  # noqa: BLE001 - a test must report, not crash
                self.ok(False, f"{name}: raised", traceback.format_exc())
            return fn
        return wrap

    def done(self) -> None:
        print(f"1..{self.n}", flush=True)
        sys.exit(1 if self.failed else 0)


tap = Tap()


class Env:
    """A private state directory and the processes a test file started."""

    def __init__(self) -> None:
        self.root = tempfile.mkdtemp(prefix="sgt-", dir="/tmp")
        self.state = os.path.join(self.root, "s")
        os.makedirs(self.state)
        self.env = dict(os.environ)
        self.env["SANDGLASS_STATE_DIR"] = self.state
        self.env["SANDGLASSD"] = SANDGLASSD
        self.procs: list[subprocess.Popen] = []

    def run(self, *args: str, input: bytes | None = None, timeout: float = 60,
            check: bool = False, env: dict | None = None) -> subprocess.CompletedProcess:
        e = dict(self.env)
        if env:
            e.update(env)
        p = subprocess.run([SANDGLASS, *args], input=input, capture_output=True,
                           timeout=timeout, env=e)
        if check and p.returncode != 0:
            raise RuntimeError(f"sandglass {' '.join(args)} failed ({p.returncode}): "
                               f"{p.stderr.decode(errors='replace')}")
        return p

    def create(self, *args: str) -> str:
        p = self.run("create", "--learner", "t", *args, check=True)
        return p.stdout.decode().strip()

    def exec(self, sid: str, *cmd: str, **kw) -> subprocess.CompletedProcess:
        return self.run("exec", sid, "--", *cmd, **kw)

    def sh(self, sid: str, script: str, **kw) -> subprocess.CompletedProcess:
        return self.exec(sid, "/bin/sh", "-c", script, **kw)

    def spawn(self, args: list[str], **kw) -> subprocess.Popen:
        p = subprocess.Popen(args, env=self.env, **kw)
        self.procs.append(p)
        return p

    def uid_of(self, sid: str) -> str:
        """The uid the sandbox's user runs as (each sandbox has its own),
        from its record."""
        with open(os.path.join(self.state, "sb", sid, "meta.json")) as f:
            return str(json.load(f)["uid"])

    def ls(self) -> list[dict]:
        return json.loads(self.run("ls", "--json", check=True).stdout)

    def cleanup(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        try:
            self.run("pool", "0", timeout=60)
            for sb in self.ls():
                self.run("destroy", sb["id"], timeout=30)
        except Exception:  # noqa: BLE001
            pass
        self.run("gc", timeout=60)
        stop_uplink_daemon(self.state)
        shutil.rmtree(self.root, ignore_errors=True)


def uplink_daemon_pid(state: str) -> int:
    """The pid of the uplink daemon serving this state directory, 0 if none
    runs (its lock file holds the pid; the comm says it is still ours)."""
    try:
        with open(os.path.join(state, "uplink.lock")) as f:
            pid = int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0
    return pid if pid > 0 and comm(pid) == "sandglass-uplin" else 0


def stop_uplink_daemon(state: str) -> None:
    """Ends the uplink daemon a test's supervisors started (it would exit
    by itself once idle), then fails the test if its log holds a sanitizer
    report: under ASan it runs instrumented, like every other process."""
    pid = uplink_daemon_pid(state)
    if pid:
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            if not pid_alive(pid) or comm(pid) != "sandglass-uplin":
                break
            time.sleep(0.05)
        else:
            os.kill(pid, signal.SIGKILL)
    try:
        log = open(os.path.join(state, "uplink.log"), errors="replace").read()
    except OSError:
        return
    if "Sanitizer" in log or "runtime error:" in log:
        tap.ok(False, "the uplink daemon ran clean under the sanitizers", log[-4000:])


def cgroup_dirs(sid: str) -> list[str]:
    """Every directory a sandbox's cgroup may have, on any layout."""
    out = []
    for base in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/memory",
                 "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct",
                 "/sys/fs/cgroup/freezer"):
        out.append(os.path.join(base, "sandglass", sid))
    return out


def cgroup_pids(sid: str) -> set[int]:
    """Host pids in every cgroup of a sandbox (all hierarchies, all leaves)."""
    pids: set[int] = set()
    for d in cgroup_dirs(sid):
        for root, _dirs, files in os.walk(d):
            if "cgroup.procs" in files:
                try:
                    with open(os.path.join(root, "cgroup.procs")) as f:
                        pids.update(int(x) for x in f.read().split())
                except OSError:
                    pass
    return pids


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def comm(pid: int) -> str:
    """A process's name, "" when it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def children(pid: int) -> list[int]:
    out = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def ckpt_worker(sup_pid: int) -> int:
    """The supervisor's checkpoint worker (src/checkpoint/ckpt_client.h), 0 when none runs."""
    return next((c for c in children(sup_pid) if comm(c) == "sandglass-ckpt"), 0)


def wait_for(pred, timeout: float = 10.0, step: float = 0.02) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


# ---- H1a: waits that are checks, and what the host sees of a sandbox ----

def await_true(pred, what: str, timeout: float = 60.0, diag=None, step: float = 0.05) -> bool:
    """wait_for as a check: records `what` as failed when the condition
    never comes, so the checks after it never run on nothing. Timeouts are
    generous (a loaded machine is slow, not broken); diag may be a callable,
    evaluated only on failure."""
    ok = wait_for(pred, timeout, step)
    tap.ok(ok, what, "" if ok else (diag() if callable(diag) else (diag or "")))
    return ok


# The namespaces a sandbox makes (README: pid, mount, net, ipc, uts, cgroup).
NS_TYPES = ("pid", "mnt", "net", "ipc", "uts", "cgroup")


def ns_inodes(pid: int | str = "self", types=NS_TYPES) -> dict[str, int]:
    """The inode of each namespace of a process (the host's: "self")."""
    return {t: os.stat(f"/proc/{pid}/ns/{t}").st_ino for t in types}


def probe_ns_args(pid: int | str = "self", types=NS_TYPES) -> list[str]:
    """sg-probe arguments: each host namespace the sandbox's must differ from."""
    out: list[str] = []
    for t, ino in ns_inodes(pid, types).items():
        out += ["--host-ns", f"{t}={ino}"]
    return out


def cmdline(pid: int) -> str:
    """A process's command line, space-separated, "" when it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def pids_running(pids, cmd: str) -> list[int]:
    """Those of pids alive with exactly this command line."""
    return sorted(p for p in pids if cmdline(p) == cmd and pid_alive(p))


def pidns_members(init_pid: int) -> dict[int, str]:
    """Every host process (zombies too) in init's pid namespace: pid -> state."""
    want = os.readlink(f"/proc/{init_pid}/ns/pid")
    out: dict[int, str] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            if os.readlink(f"/proc/{d}/ns/pid") != want:
                continue
            with open(f"/proc/{d}/stat") as f:
                out[int(d)] = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            pass
    return out


def ns_pid(pid: int) -> int:
    """A host process's pid in its innermost pid namespace, 0 when gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        pass
    return 0
