#!/usr/bin/env python3
"""The sandbox's init and its ready children run without the caller's
environment and with their stdio on /dev/null, so in a sanitizer build
their sanitizer reports went nowhere. Now the supervisor passes init the
sanitizer options it has (ASAN_OPTIONS, UBSAN_OPTIONS, LSAN_OPTIONS, and
nothing else, without a log_path: a host path is not visible in the
sandbox's mount namespace), and a sanitized init keeps its fd 2 on the
supervisor's log, where the harness looks for reports (supervisor.log,
SANDGLASS_LOG_ARCHIVE). The user's command gets none of it.

Whether init is sanitized is read from the build (its binary links a
sanitizer runtime), never from what the product did: in a plain build
the options still reach init (harmless there) and its fd 2 stays
/dev/null. In a sanitized build a ready child (a copy of init there) is
sent SIGSEGV: ASan's handler must report it in the supervisor's log."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess

from sgtest import SANDGLASS, Env, children, comm, tap, wait_for

env = Env()
# Options as the harness gives them, with a log_path the sandbox cannot see.
env.env["ASAN_OPTIONS"] = (os.environ.get("ASAN_OPTIONS", "") +
                           ":handle_segv=1:log_path=/nonexistent-host-dir/report").lstrip(":")
env.env["UBSAN_OPTIONS"] = (os.environ.get("UBSAN_OPTIONS", "") + ":print_stacktrace=1").lstrip(":")
env.env["SG_TEST_SECRET_VAR"] = "must-not-reach-init"
# This test makes a sanitizer report on purpose: its log must not reach the
# harness's collection of real ones.
env.env.pop("SANDGLASS_LOG_ARCHIVE", None)


def init_bin() -> str:
    """sandglass-init next to the sandglass binary under test."""
    return os.path.join(os.path.dirname(os.path.realpath(shutil.which(SANDGLASS) or SANDGLASS)), "sandglass-init")


def sanitized(path: str) -> bool:
    """Whether the binary links a sanitizer runtime (dynamically, as meson's
    b_sanitize builds do, or statically)."""
    try:
        out = subprocess.run(["ldd", path], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    if "libasan" in out or "libubsan" in out:
        return True
    with open(path, "rb") as f:
        data = f.read()
    return b"__asan_init" in data or b"__ubsan_handle" in data


def environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        items = [x.decode(errors="replace") for x in f.read().split(b"\0") if x]
    return dict(x.split("=", 1) for x in items if "=" in x)


def meta(sid: str) -> dict:
    with open(os.path.join(env.state, "sb", sid, "meta.json")) as f:
        return json.load(f)


try:
    sid = env.create()
    init = int(meta(sid)["init_pid"])
    log = os.path.join(env.state, "sb", sid, "supervisor.log")
    san = sanitized(init_bin())
    print(f"# sandglass-init is {'sanitized' if san else 'not sanitized'} in this build ({init_bin()})", flush=True)

    @tap.case("init gets the sanitizer options and nothing else")
    def _init_env():
        e = environ(init)
        tap.ok(set(e) == {"ASAN_OPTIONS", "UBSAN_OPTIONS"}, "init's environment holds only the sanitizer options",
               repr(e))
        for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
            tap.eq([o for o in e.get(var, "log_path=?").split(":") if o],
                   [o for o in env.env[var].split(":") if o and not o.startswith("log_path=")],
                   f"{var} reaches it without its log_path, the rest as given")
        fd2 = os.readlink(f"/proc/{init}/fd/2")
        want = os.path.realpath(log) if san else "/dev/null"
        tap.eq(fd2, want, f"init's fd 2 is {'the supervisor log (sanitized init)' if san else '/dev/null'}")

    @tap.case("the user's command gets none of it")
    def _user_env():
        out = env.exec(sid, "/usr/bin/env").stdout.decode(errors="replace")
        tap.ok("ASAN_OPTIONS" not in out and "UBSAN_OPTIONS" not in out and "must-not-reach" not in out,
               "no sanitizer option and no caller variable in the command's environment", out)
        out = env.exec(sid, "/bin/sh", "-c", "readlink /proc/self/fd/2 </dev/null; ls -l /proc/self/fd/ 2>&1").stdout
        tap.ok(log.encode() not in out and b"supervisor.log" not in out,
               "the command's fds name no supervisor log", out.decode(errors="replace"))

    @tap.case("a ready child's report reaches the supervisor's log")
    def _ready_report():
        def ready() -> int:
            return next((c for c in children(init) if comm(c) in ("sandglass-init", "sandglass-ready")), 0)
        tap.ok(wait_for(lambda: ready() > 0, 60), "init has a ready child for the next exec")
        r = ready()
        if not r:
            return
        e = environ(r)
        tap.ok(set(e) <= {"ASAN_OPTIONS", "UBSAN_OPTIONS"}, "its environment is init's (or empty)", repr(e))
        if not san:
            # A plain build: nothing in the sandbox is sanitized, and the
            # ready child's fd 2 stays /dev/null.
            tap.eq(os.readlink(f"/proc/{r}/fd/2"), "/dev/null", "its fd 2 is /dev/null (plain build)")
            return
        before = open(log, errors="replace").read()
        os.kill(r, signal.SIGSEGV)
        tap.ok(wait_for(lambda: "AddressSanitizer" in open(log, errors="replace").read()[len(before):], 60),
               "SIGSEGV in the ready child: ASan's report is in the supervisor's log",
               open(log, errors="replace").read()[len(before):][-2000:])
        tap.eq(env.exec(sid, "echo", "alive").stdout, b"alive\n", "the sandbox still runs commands")
finally:
    env.cleanup()
tap.done()
