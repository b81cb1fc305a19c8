"""The control protocol's version across an upgrade: a CLI (and MCP) of this
build meets a supervisor started by the build before control protocol 1 (a
long-lived sandbox during an upgrade) and speaks its version: every op the
CLI sends works as it did.

The build before: the parent of the commit that brought SG_CTL_VERSION into
src/wire/ctl.h, exported with `git archive` (nothing of the checkout
changes) and built once per build directory (<builddir>/prev-ctl0/<commit>,
reused by later runs: the suite pays the compile once). Without git history
(a tarball, a shallow clone) the test skips, saying so
(tests/allowed-skips.txt). SG_PREV_SUPERVISOR names a supervisor binary of
that build instead (its sandglass-init and sandglass-ckpt beside it)."""
from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from sgtest import SANDGLASS, Env, tap  # noqa: E402
from test_mcp import Session, text  # noqa: E402

SRC = os.environ.get("SG_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..", ".."))
TARGETS = ["sandglass-supervisor", "sandglass-init", "sandglass-ckpt"]


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", SRC, *args], capture_output=True, text=True, check=True,
                          timeout=60).stdout.strip()


def previous_supervisor() -> tuple[str, str]:
    """(path of the previous build's supervisor, "") or ("", why not)."""
    given = os.environ.get("SG_PREV_SUPERVISOR", "")
    if given:
        return (given, "") if os.access(given, os.X_OK) else ("", f"SG_PREV_SUPERVISOR={given} is not a program")
    try:
        first = git("log", "--format=%H", "-S", "SG_CTL_VERSION", "--", "src/wire/ctl.h").splitlines()
        if not first:
            return "", "no git history for the build before control protocol 1 (shallow clone?)"
        prev = git("rev-parse", "--verify", "-q", first[-1] + "^")
    except (OSError, subprocess.SubprocessError):
        return "", "no git history for the build before control protocol 1 (not a git checkout)"
    build_dir = os.path.dirname(os.path.realpath(SANDGLASS))
    root = os.path.join(build_dir, "prev-ctl0", prev)
    sup = os.path.join(root, "b", "sandglass-supervisor")
    if os.access(sup, os.X_OK) and os.path.exists(os.path.join(root, "built")):
        return sup, ""
    src = os.path.join(root, "src")
    os.makedirs(src, exist_ok=True)
    subprocess.run(f"git -C '{SRC}' archive {prev} | tar -x -C '{src}'", shell=True, check=True, timeout=300)
    if not os.path.isdir(os.path.join(root, "b")):
        subprocess.run(["meson", "setup", "--buildtype=plain", os.path.join(root, "b"), src], check=True,
                       capture_output=True, timeout=600)
    p = subprocess.run(["ninja", "-C", os.path.join(root, "b"), *TARGETS], capture_output=True, text=True,
                       timeout=1800)
    if p.returncode != 0:
        raise RuntimeError("the previous build failed:\n" + p.stdout[-3000:] + p.stderr[-3000:])
    open(os.path.join(root, "built"), "w").close()
    return sup, ""


def tty_exec(env: Env, sid: str) -> bytes:
    """exec -t -i on a terminal: keys typed once the command is ready."""
    master, slave = pty.openpty()
    p = subprocess.Popen([SANDGLASS, "exec", "-t", "-i", sid, "--", "sh", "-c", "echo ready; read x; echo got-$x"],
                         stdin=slave, stdout=slave, stderr=slave, env=env.env, start_new_session=True)
    os.close(slave)
    out, typed = b"", False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and b"got-typed" not in out:
        if not typed and b"ready" in out:
            os.write(master, b"typed\r")
            typed = True
        r, _, _ = select.select([master], [], [], 1)
        if r:
            try:
                out += os.read(master, 4096)
            except OSError:
                break
    p.wait(timeout=60)
    os.close(master)
    return out


def on_pty(env: Env, args: list[str], steps: list[tuple[bytes, bytes]]) -> tuple[int | None, bytes]:
    """Runs the CLI on a terminal; each step: when `wait` has shown, type
    `keys`. Returns (exit status, None if still running after 60 s; output)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([SANDGLASS, *args], stdin=slave, stdout=slave, stderr=slave, env=env.env,
                         start_new_session=True)
    os.close(slave)
    out, i, seen = b"", 0, 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and p.poll() is None:
        if i < len(steps) and steps[i][0] in out[seen:]:
            seen = out.index(steps[i][0], seen) + len(steps[i][0])
            os.write(master, steps[i][1])
            i += 1
        r, _, _ = select.select([master], [], [], 0.2)
        if r:
            try:
                out += os.read(master, 4096)
            except OSError:
                break
    try:
        code = p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        code = None
    os.close(master)
    return code, out


def attach_checks(env: Env, sid: str) -> None:
    """shell, detach, shell --attach (its replay shows first): the attach
    speaks the supervisor's version (protocol 0: no "v")."""
    code, out = on_pty(env, ["shell", sid, "--", "sh"],
                       [(b"$ ", b"X=kept; echo up-$X\r"), (b"up-kept", b"\x10\x11")])
    tap.ok(code == 0, "shell: the detach keys leave it running", repr((code, out[-300:])))
    code, out = on_pty(env, ["shell", sid, "--attach"],
                       [(b"up-kept", b"echo $X-again\r"), (b"kept-again", b"exit 5\r")])
    tap.ok(code == 5 and b"kept-again" in out, "shell --attach: the same shell, through the fallback",
           repr((code, out[-300:])))


def main() -> None:
    sup, why = previous_supervisor()
    if not sup:
        tap.skip("a CLI of this build with a supervisor of the build before", why)
        tap.done()
    env = Env()
    env.env["SANDGLASS_SUPERVISOR"] = sup
    try:
        sid = env.create()
        with open(os.path.join(env.state, "sb", sid, "meta.json")) as f:
            pid = int(json.load(f)["supervisor_pid"])
        tap.eq(os.path.realpath(f"/proc/{pid}/exe"), os.path.realpath(sup),
               "the sandbox's supervisor is the previous build's")
        p = env.sh(sid, "cat; echo out; echo err >&2; exit 3", input=b"in\n")
        tap.eq((p.returncode, p.stdout, p.stderr), (3, b"in\nout\n", b"err\n"),
               "exec: stdin, stdout, stderr and the exit code, through the fallback to protocol 0")
        with open(os.path.join(env.root, "stdin.txt"), "wb") as f:
            f.write(b"from a file\n")
        with open(os.path.join(env.root, "stdin.txt"), "rb") as f:
            p = subprocess.run([SANDGLASS, "exec", sid, "--", "cat"], stdin=f, capture_output=True, env=env.env,
                               timeout=60)
        tap.eq((p.returncode, p.stdout), (0, b"from a file\n"), "exec: a relayed stdin (a file) goes again whole")
        out = tty_exec(env, sid)
        tap.ok(b"got-typed" in out, "exec -t -i: a terminal through the fallback", repr(out[-300:]))
        attach_checks(env, sid)
        p = env.run("exec", "--json", sid, "--", "true")
        tap.ok(p.returncode == 0 and b'"exit_code":0' in p.stdout, "exec --json: the result", repr(p.stdout))
        p = env.run("checkpoint", sid, "--label", "up")
        tap.ok(p.returncode == 0 and len(p.stdout.strip()) == 12, "checkpoint", repr(p.stdout + p.stderr))
        p = env.run("checkpoints", sid)
        tap.ok(p.returncode == 0 and b"up" in p.stdout, "checkpoints lists it", repr(p.stdout + p.stderr))
        env.sh(sid, "echo x > /workspace/new.txt", check=True)
        p = env.run("rollback", sid, "--yes")
        tap.ok(p.returncode == 0 and b"new.txt" in p.stdout, "rollback", repr(p.stdout + p.stderr))
        p = env.run("abort", sid)
        tap.ok(p.returncode == 0 and b"aborted" in p.stdout, "abort", repr(p.stdout + p.stderr))
        p = env.run("resume", sid)
        tap.ok(p.returncode == 0 and b"resumed" in p.stdout, "resume", repr(p.stdout + p.stderr))
        s = Session(env, "--sandbox", sid)
        try:
            s.initialize()
            r = s.tool("run_bash", {"command": "echo via-mcp"})
            tap.ok("via-mcp" in text(r) and not r.get("isError"), "mcp: run_bash", repr(r))
            r = s.tool("checkpoint", {"label": "m"})
            tap.ok("checkpoint" in text(r) and not r.get("isError"), "mcp: checkpoint", repr(r))
        finally:
            s.close()
        p = env.run("destroy", sid)
        tap.ok(p.returncode == 0 and b"destroyed" in p.stdout, "destroy", repr(p.stdout + p.stderr))
    finally:
        env.cleanup()
    tap.done()


if __name__ == "__main__":
    main()
