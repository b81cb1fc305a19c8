"""Shared helpers for the integration tests: TAP output, a private state
directory per test file, and wrappers that run the real binaries.

Stdlib only. Each test file calls `tap.plan()` implicitly via `tap.done()`.
"""
from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import re
import tempfile
import threading
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
# scripts/test.sh's root for this run (SG_TEST_ROOT, also TMPDIR): every
# Env lives under it and records the sandboxes it made there, so the
# suite's leak check looks at what this run made and nothing else.
RUN_ROOT = os.environ.get("SG_TEST_ROOT", "")


def config_vars() -> list[str]:
    """The SANDGLASS_* variable of every config key (sandglass.conf(5)),
    read from the one table that defines them (src/cli/config.c)."""
    root = os.environ.get("SG_SOURCE_ROOT") or \
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    with open(os.path.join(root, "src", "cli", "config.c")) as f:
        return re.findall(r'"(SANDGLASS_[A-Z_]+)",\s*V_[A-Z]+\}', f.read())


def hermetic_env() -> dict:
    """os.environ without the caller's config: no file read
    (SANDGLASS_CONFIG=none) and none of the keys' SANDGLASS_* defaults, so
    that an operator's settings never reach a test; a test sets the ones it
    means."""
    e = {k: v for k, v in os.environ.items() if k not in set(config_vars())}
    e["SANDGLASS_CONFIG"] = "none"
    return e


def exec_stub_built() -> bool:
    """Whether this build makes sandglass-exec (the musl ready child):
    meson says so (SG_EXEC_STUB_BUILT), so a build that should have it and
    lost it fails its checks instead of skipping them. Run by hand without
    meson's environment: whether the file is there."""
    v = os.environ.get("SG_EXEC_STUB_BUILT")
    if v in ("0", "1"):
        return v == "1"
    cli = os.path.realpath(shutil.which(SANDGLASS) or SANDGLASS)
    return os.path.exists(os.path.join(os.path.dirname(cli), "sandglass-exec"))


def record_sandbox(sid: str) -> None:
    """Notes a sandbox id this run made (RUN_ROOT/sandboxes): the leak
    check looks for its cgroups at the end of the run."""
    if RUN_ROOT and sid and all(c in "0123456789abcdef" for c in sid):
        try:
            with open(os.path.join(RUN_ROOT, "sandboxes"), "a") as f:
                f.write(sid + "\n")
        except OSError:
            pass


def refused_port() -> socket.socket:
    """A loopback port of this test's own where nothing listens: bound, not
    listening, so a connection to it is refused and no other test (or
    ingest) can take it while the socket is open."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    return s


def _exit_on_sigterm() -> None:
    """meson's timeout SIGTERMs a test: exit through finally and atexit,
    so that its Env still destroys what it made."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


class Tap:
    """TAP output. A thread may record its results instead (recorded()),
    for the caller to print later in a fixed order (replay()): cases run
    side by side keep the output, and the numbering, one order."""

    def __init__(self) -> None:
        self.n = 0
        self.failed = 0
        self.skipped = 0
        self._local = threading.local()

    def ok(self, cond: bool, name: str, diag: str = "") -> bool:
        rec = getattr(self._local, "rec", None)
        if rec is not None:
            rec.append(("ok", cond, name, diag))
            return cond
        self.n += 1
        print(f"{'ok' if cond else 'not ok'} {self.n} - {name}", flush=True)
        if not cond:
            self.failed += 1
            for line in (diag or "").splitlines()[:40]:
                print(f"#   {line}", flush=True)
        return cond

    def skip(self, name: str, why: str) -> None:
        rec = getattr(self._local, "rec", None)
        if rec is not None:
            rec.append(("skip", True, name, why))
            return
        self.n += 1
        self.skipped += 1
        print(f"ok {self.n} - {name} # SKIP {why}", flush=True)

    def recorded(self, name: str, fn) -> list:
        """Runs fn as a case (tap.case) in this thread, its results kept,
        not printed: replay() prints them."""
        self._local.rec = []
        try:
            self.case(name)(fn)
            return self._local.rec
        finally:
            self._local.rec = None

    def replay(self, records: list) -> None:
        for what, cond, name, text in records:
            if what == "skip":
                self.skip(name, text)
            else:
                self.ok(cond, name, text)

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
    """A private state directory and the processes a test file started.

    Hermetic: its captured sandboxes stream by default to a loopback port
    of its own where nothing listens (SANDGLASS_INGEST, self.ingest_url), never
    to the default 127.0.0.1:7433 an operator's ingest may hold. Its
    cleanup runs at exit too (and on meson's SIGTERM), so a test that
    raises still destroys what it made."""

    def __init__(self) -> None:
        base = RUN_ROOT if RUN_ROOT and os.path.isdir(RUN_ROOT) else "/tmp"
        self.root = tempfile.mkdtemp(prefix="sgt-", dir=base)
        self.state = os.path.join(self.root, "s")
        os.makedirs(self.state)
        self._refused = refused_port()
        self.ingest_url = f"ws://127.0.0.1:{self._refused.getsockname()[1]}"
        self.env = hermetic_env()
        self.env["SANDGLASS_STATE_DIR"] = self.state
        self.env["SANDGLASSD"] = SANDGLASSD
        self.env["SANDGLASS_INGEST"] = self.ingest_url
        self.procs: list[subprocess.Popen] = []
        self._cleaned = False
        if RUN_ROOT:  # which test this Env is, for the leak check's report
            try:
                with open(os.path.join(RUN_ROOT, "envs"), "a") as f:
                    f.write(f"{os.path.basename(self.root)} {os.path.basename(sys.argv[0])}\n")
            except OSError:
                pass
        _exit_on_sigterm()
        atexit.register(self._cleanup_at_exit)

    def _cleanup_at_exit(self) -> None:
        # a subclass's cleanup (CapEnv's) ends in this one's: once it ran,
        # nothing of it runs again
        if not self._cleaned:
            self.cleanup()

    def run(self, *args: str, input: bytes | None = None, timeout: float = 60,
            check: bool = False, env: dict | None = None) -> subprocess.CompletedProcess:
        e = dict(self.env)
        if env:
            e.update(env)
        p = subprocess.run([SANDGLASS, *args], input=input, capture_output=True,
                           timeout=timeout, env=e)
        if args and args[0] == "create" and p.returncode == 0:
            out = p.stdout.decode(errors="replace").strip()
            try:
                out = str(json.loads(out).get("id", ""))
            except (ValueError, AttributeError):
                pass
            record_sandbox(out)
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

    def record_sandboxes(self) -> None:
        """Every sandbox with a record in this state directory (made by
        create, mcp or the pool alike), for the run's leak check."""
        try:
            for sid in os.listdir(os.path.join(self.state, "sb")):
                record_sandbox(sid)
        except OSError:
            pass

    def kill_own_children(self) -> None:
        """Ends what this test started with this Env's environment but not
        through spawn (an ingest or a server of its own, run by Popen):
        the test's children whose SANDGLASS_STATE_DIR is this state
        directory. Supervisors are not its children (they detach): a
        sandbox is ended by destroy, and one that outlives it is the
        run's leak check's to name."""
        mark = f"SANDGLASS_STATE_DIR={self.state}".encode()
        for pid in children(os.getpid()):
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if mark not in f.read().split(b"\0"):
                        continue
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (OSError, ChildProcessError):
                pass

    def _destroy_all(self) -> None:
        """Empties the pool and destroys every sandbox left, side by side
        (a captured sandbox whose ingest is gone waits out its delivery,
        each at the same time)."""
        try:
            self.run("pool", "0", timeout=60)
            left = [subprocess.Popen([SANDGLASS, "destroy", sb["id"]], env=self.env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    for sb in self.ls()]
            for p in left:
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        except Exception:  # noqa: BLE001 - the rest of the cleanup still runs
            pass

    def cleanup(self) -> None:
        if self._cleaned:
            return
        self._cleaned = True
        self.record_sandboxes()
        # Destroyed while the test's own ingest (a spawned process) still
        # runs: a captured sandbox then delivers its last events at once
        # instead of waiting out its delivery (10 s) against a dead port.
        # What a spawned process made meanwhile is destroyed after it ends.
        self._destroy_all()
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.kill_own_children()
        self._destroy_all()
        try:
            self.run("gc", timeout=60)
        except Exception:  # noqa: BLE001 - the rest of the cleanup still runs
            pass
        stop_uplink_daemon(self.state)
        self._refused.close()
        rmtree_one_fs(self.root)


def mounts_under(top: str) -> list[str]:
    """The mount points at or below top in this process's mount table,
    deepest first."""
    top = os.path.realpath(top)
    found = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                # id parent major:minor root MOUNTPOINT ... (octal escapes)
                mp = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
                if mp == top or mp.startswith(top.rstrip("/") + "/"):
                    found.append(mp)
    except OSError:
        pass
    return sorted(set(found), key=len, reverse=True)


def rmtree_one_fs(top: str) -> None:
    """shutil.rmtree(top, ignore_errors=True) that never goes into a
    mount below top (rm -r --one-file-system): what a test mounted there
    may show the host's own directories. LXCFS's mount (test_lxcfs) has
    cgroup/, the host's cgroup v1 hierarchies: an rmdir through it removes
    the host's cgroup, so an rmtree over it removed every empty cgroup of
    the host - a sandbox's being created beside the test (made, its init
    not yet moved in: "cannot open .../freezer/sandglass/ID/cgroup.procs")
    and other programs' alike. A mount left there is named on stderr and
    left, with the directories above it."""
    mounts = mounts_under(top)
    if not mounts:
        shutil.rmtree(top, ignore_errors=True)
        return
    print(f"# {top}: mounts left under it, not removed: {mounts}", file=sys.stderr, flush=True)
    skip = set(mounts)
    dev = os.lstat(top).st_dev
    walked = []
    for root, dirs, files in os.walk(os.path.realpath(top)):
        keep = []
        for d in dirs:
            p = os.path.join(root, d)
            try:
                st = os.lstat(p)
            except OSError:
                continue
            if os.path.islink(p):
                files.append(d)  # a link to a directory: removed, never followed
            elif p not in skip and st.st_dev == dev:
                keep.append(d)
        dirs[:] = keep
        walked.append((root, files))
    for root, files in reversed(walked):
        for name in files:
            try:
                os.unlink(os.path.join(root, name))
            except OSError:
                pass
        try:
            os.rmdir(root)
        except OSError:
            pass


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


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


def make_ca(pki: str, name: str) -> None:
    """A CA for TLS tests: pki/NAME.pem and NAME.key (openssl CLI)."""
    p = lambda x: os.path.join(pki, x)  # noqa: E731
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", p(name + ".key"), "-out", p(name + ".pem"),
            "-days", "2", "-subj", f"/CN=sandglass test {name}", "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign")


def make_cert(pki: str, name: str, san: str, ca: str = "ca") -> None:
    """A server certificate pki/NAME.pem (key NAME.key, mode 0600) for san
    ("IP:127.0.0.1,DNS:localhost"), signed by pki's CA ca."""
    p = lambda x: os.path.join(pki, x)  # noqa: E731
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", p(name + ".key"), "-out", p(name + ".csr"),
            "-subj", f"/CN={name}")
    with open(p(name + ".ext"), "w") as f:
        f.write(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", p(name + ".csr"), "-CA", p(ca + ".pem"), "-CAkey", p(ca + ".key"),
            "-CAcreateserial", "-out", p(name + ".pem"), "-days", "2", "-extfile", p(name + ".ext"))
    os.chmod(p(name + ".key"), 0o600)


def mounts() -> str:
    """The host's mount table (/proc/self/mounts), for a disk's mount."""
    return open("/proc/self/mounts").read()


def loop_backing() -> list[str]:
    """The backing file of every loop device in use."""
    out = []
    for d in os.listdir("/sys/block"):
        try:
            out.append(open(f"/sys/block/{d}/loop/backing_file").read().strip())
        except OSError:
            pass
    return out


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


# ---- PostgreSQL and ingest nodes on it (issue 26: many hosts, one store) ----

ROOT = os.environ.get("SG_SOURCE_ROOT") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PG = os.path.join(ROOT, "scripts", "pg-server.sh")
PG_SKIP = "1..0 # SKIP PostgreSQL server binaries not found (scripts/install-deps.sh installs them)"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pg(verb: str, d: str, port: int) -> str:
    """scripts/pg-server.sh VERB DIR PORT; its output (start: the URL)."""
    p = subprocess.run(["bash", PG, verb, d, str(port)], capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"pg-server.sh {verb}: {p.stdout}{p.stderr}")
    return p.stdout.strip()


def have_pg() -> bool:
    """Whether the PostgreSQL server binaries are installed (CI has them
    and counts a skip for their absence as a failure)."""
    return subprocess.run(["bash", PG, "have"]).returncode == 0


class PgCluster:
    """A throwaway PostgreSQL cluster (scripts/pg-server.sh) in a directory
    of its own, listening on 127.0.0.1 on a free port: start() gives its
    URL, close() stops it and removes its files. A context manager."""

    def __init__(self, prefix: str = "sg-pg-") -> None:
        self.tmp = tempfile.mkdtemp(prefix=prefix)
        os.chmod(self.tmp, 0o711)  # the server runs as `postgres` when we are root
        self.dir, self.port, self.url = os.path.join(self.tmp, "pg"), free_port(), ""

    def start(self) -> str:
        self.url = pg("start", self.dir, self.port)
        return self.url

    def sql(self, query: str, timeout: float = 60) -> str:
        """One statement through psql, its rows unaligned (-At); raises on
        any error, so that a reader never takes a failure for no rows."""
        p = subprocess.run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", self.url, "-c", query],
                           capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"psql: {p.stderr.strip()}")
        return p.stdout.strip()

    def close(self) -> None:
        try:
            pg("stop", self.dir, self.port)
        except RuntimeError:
            pass
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> "PgCluster":
        self.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


class IngestNode:
    """`sandglassd ingest` on a shared store (`--store URL`), restartable
    on its own port: one node of a deployment. env is the environment to
    run it in (a test's Env.env), log its stderr's file (None: dropped)."""

    def __init__(self, env: dict, store: str, secret: str, log: str | None = None) -> None:
        self.env, self.store, self.secret, self.log = env, store, secret, log
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self, deadline_s: float = 20.0) -> None:
        end = time.monotonic() + deadline_s
        while True:
            err = open(self.log, "a") if self.log else subprocess.DEVNULL
            p = subprocess.Popen([SANDGLASSD, "ingest", "--listen", f"127.0.0.1:{self.port}", "--store",
                                  self.store, "--secret", self.secret],
                                 stdout=subprocess.PIPE, stderr=err, env=self.env, text=True)
            if self.log:
                err.close()
            line = p.stdout.readline()
            if line.startswith("listening on ws://127.0.0.1:"):
                self.proc = p
                return
            p.wait()
            if time.monotonic() > end:  # the old listener's port may be held a moment
                raise RuntimeError(f"ingest did not start on port {self.port}: {line!r}")
            time.sleep(0.05)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.alive():
            os.kill(self.proc.pid, sig)
            self.proc.wait(timeout=60)

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def read_token(env: dict, secret: str) -> str:
    """An operator's read token made from the ingest's secret."""
    return subprocess.run([SANDGLASSD, "token", "--read", "--secret", secret], capture_output=True,
                          text=True, env=env, check=True).stdout.strip()


def stored_events(http: str, token: str, sid: str) -> list[dict]:
    """Every stored event of a sandbox, read through an ingest's
    /v1/events (http: its base URL), page by page; raises on any error."""
    import urllib.parse
    import urllib.request
    out, after = [], -1
    while True:
        q = urllib.parse.urlencode({"sandbox": sid, "after_seq": after, "limit": 1000})
        req = urllib.request.Request(f"{http}/v1/events?{q}", headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            page = json.loads(r.read())["events"]
        if not page:
            return out
        out += page
        after = page[-1]["seq"]


def write_file(path: str, data: bytes, mode: int = 0o644) -> None:
    """A host file of the test's (its directories made), with this mode."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    os.chmod(path, mode)


def sh_out(env, sid: str, script: str) -> str:
    """What a script run in sandbox sid printed (stripped), or 'exit N: stderr'."""
    p = env.sh(sid, script)
    if p.returncode == 0:
        return p.stdout.decode(errors="replace").strip()
    return f"exit {p.returncode}: {p.stderr.decode(errors='replace')}"
