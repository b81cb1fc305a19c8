"""Issue 4: checkpoints and rollback through the real CLI and real sandboxes.

Every change here is made by a shell command inside the sandbox (as the
sandbox user), never by a write tool, and every check of the workspace is
made from the host side: contents, full modes, file types, symlink targets
and owners must come back exactly.
"""
from __future__ import annotations

import glob
import hashlib
import json
import re
import os
import pty
import select
import stat
import shutil
import subprocess
import tempfile
import time

from sgtest import Env, SANDGLASS, cgroup_dirs, children, comm, pid_alive, tap, wait_for

WAIT = 120.0  # generous: a loaded machine is slow, not broken; no check times anything

env = Env()
# Sanitizer reports of any of our processes (the supervisor's land in its
# supervisor.log, which destroy removes, and leak reports come at exit): send
# them to files we check at the end. Harmless in a normal build.
SAN_DIR = tempfile.mkdtemp(prefix="sgt-san-", dir="/tmp")
for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS"):
    prev = env.env.get(var, "")
    env.env[var] = (prev + ":" if prev else "") + f"log_path={SAN_DIR}/{var[:5].lower()}"

GIT_ENV = ["--env", "HOME=/tmp", "--env", "GIT_CONFIG_NOSYSTEM=1",
           "--env", "GIT_AUTHOR_NAME=learner", "--env", "GIT_AUTHOR_EMAIL=l@example.org",
           "--env", "GIT_COMMITTER_NAME=learner", "--env", "GIT_COMMITTER_EMAIL=l@example.org"]

SAN_MARKERS = (b"AddressSanitizer", b"LeakSanitizer", b"runtime error:", b"UndefinedBehaviorSanitizer")


def meta(sid: str) -> dict:
    with open(os.path.join(env.state, "sb", sid, "meta.json")) as f:
        return json.load(f)


def ws(sid: str) -> str:
    return meta(sid)["workspace"]


def sh(sid: str, script: str, *opts: str, check: bool = True) -> subprocess.CompletedProcess:
    p = env.run("exec", sid, *opts, "--", "/bin/sh", "-c", script)
    if check and p.returncode != 0:
        raise RuntimeError(f"exec failed ({p.returncode}): {script}\n{p.stderr.decode(errors='replace')}")
    return p


def snapshot(root: str) -> dict:
    """path -> (type, permission bits, uid, gid, content digest or link target)."""
    out = {}

    def one(path: str, rel: str) -> None:
        st = os.lstat(path)
        kind = stat.S_IFMT(st.st_mode)
        data = None
        if stat.S_ISLNK(st.st_mode):
            data = os.readlink(path)
        elif stat.S_ISREG(st.st_mode):
            with open(path, "rb") as f:
                data = hashlib.sha256(f.read()).hexdigest()
        out[rel] = (kind, stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, data)

    one(root, ".")
    for d, dirs, files in os.walk(root, followlinks=False):
        for n in dirs + files:
            p = os.path.join(d, n)
            one(p, os.path.relpath(p, root))
    return out


def snap_diff(a: dict, b: dict) -> str:
    lines = []
    for k in sorted(set(a) | set(b)):
        if a.get(k) != b.get(k):
            lines.append(f"{k}: {a.get(k)!r} -> {b.get(k)!r}")
    return "\n".join(lines[:40])


def san_check(sid: str) -> None:
    """Sanitizer reports in the supervisor's log count as failures."""
    log = os.path.join(env.state, "sb", sid, "supervisor.log")
    try:
        with open(log, "rb") as f:
            text = f.read()
    except OSError:
        text = b""
    bad = [m for m in SAN_MARKERS if m in text]
    tap.ok(not bad, f"no sanitizer report in {sid}'s supervisor.log", text.decode(errors="replace")[-3000:])


# Supervisors (and their workers) of destroyed sandboxes: their exit-time
# leak reports come after destroy answered, so the final scan waits for each
# to exit (by pid) instead of a fixed time.
EXITING: dict[int, str] = {}


def note_exiting(sid: str) -> None:
    try:
        pid = meta(sid)["supervisor_pid"]
    except (OSError, ValueError, KeyError):
        return
    if pid_alive(pid):
        EXITING[pid] = comm(pid)
        for c in children(pid):
            EXITING[c] = comm(c)


def destroy(sid: str) -> None:
    san_check(sid)
    note_exiting(sid)
    env.run("destroy", sid, timeout=60)


def rollback(sid: str, *args: str, **kw) -> subprocess.CompletedProcess:
    return env.run("rollback", sid, *args, **kw)


def checkpoints(sid: str) -> list[dict]:
    return json.loads(env.run("checkpoints", sid, "--json", check=True).stdout)


def labels_of(sid: str) -> dict:
    return {c["id"]: c["label"] for c in checkpoints(sid)}


def running_execs(sid: str) -> list[str]:
    """Exec leaves of the sandbox's cgroup that hold a process."""
    leaves = []
    for d in [x for c in cgroup_dirs(sid) for x in glob.glob(os.path.join(c, "x*"))]:
        try:
            with open(os.path.join(d, "cgroup.procs")) as f:
                if f.read().split():
                    leaves.append(d)
        except OSError:
            pass
    return leaves


@tap.case("shell changes are rolled back exactly")
def _():
    sid = env.create()
    root = ws(sid)
    sh(sid, r"""
        cd /workspace
        printf 'keep me\n' > plain.txt
        printf 'secret\n' > private.txt && chmod 0600 private.txt
        printf '#!/bin/sh\necho hi\n' > run.sh && chmod 0755 run.sh
        mkdir -p closed/inner && chmod 0700 closed && printf 'x\n' > closed/inner/f
        mkdir empty && mkdir -m 0711 empty2 && mkdir -p deep/er/est
        ln -s plain.txt link && ln -s does/not/exist dangling && ln -s closed dirlink
        printf '*.log\nbuild/\n' > .gitignore
        printf 'log line\n' > app.log && mkdir build && printf 'obj\n' > build/out.o
        printf 'to delete\n' > gone.txt && mkdir gonedir && printf 'y\n' > gonedir/y
        dd if=/dev/urandom of=bin.dat bs=1k count=64 2>/dev/null
        printf x > "$(printf 'bad\377name')" && printf y > "$(printf 'new\nline')"
        printf s > suid && chmod 4750 suid
    """)
    cp = json.loads(env.run("checkpoint", sid, "--label", "golden", "--json", check=True).stdout)
    tap.ok(len(cp["id"]) == 40 and cp["label"] == "golden", "a manual checkpoint returns its id and label",
           json.dumps(cp))
    before = snapshot(root)
    tap.ok(before["private.txt"][1] == 0o600 and before["run.sh"][1] == 0o755 and before["suid"][1] == 0o4750
           and before["closed"][1] == 0o700 and before["empty2"][1] == 0o711,
           "the modes were set up as intended", repr(before))
    tap.ok(all(v[2] == meta(sid)["uid"] for v in before.values()), "everything belongs to the sandbox user")

    sh(sid, r"""
        cd /workspace
        printf 'changed\n' > plain.txt
        chmod 0644 private.txt && printf 'leaked\n' >> private.txt
        chmod 0644 run.sh
        chmod 0755 closed
        rmdir empty empty2 && rm -r deep
        rm link && ln -s run.sh link
        rm dangling && printf 'now a file\n' > dangling
        rm dirlink && mkdir dirlink
        rm app.log && printf 'other\n' > build/out.o && printf 'new ignored\n' > new.log
        rm gone.txt && rm -r gonedir
        printf 'new\n' > created.txt && mkdir -p newdir/sub && printf 'z\n' > newdir/sub/z
        ln -s /nowhere newlink && mkfifo fifo
        dd if=/dev/urandom of=bin.dat bs=1k count=1 seek=7 conv=notrunc 2>/dev/null
        printf 'gitignore changed\n' >> .gitignore
        rm bad*name new?line && printf z > "$(printf 'n\377ew')" && chmod 0755 suid
        chmod 0750 /workspace
    """)
    changed = snapshot(root)
    tap.ok(changed != before, "the shell changed the workspace", "")

    p = rollback(sid, "--to", cp["id"], "--yes", "--json")
    tap.eq(p.returncode, 0, "rollback --to ID --yes --json succeeds")
    res = json.loads(p.stdout or b"{}")
    paths = {c["path"]: c["change"] for c in res.get("changes", [])}
    tap.ok(res.get("restored") and res.get("to") == cp["id"], "the result names the target and says restored",
           p.stdout.decode())
    want = {"plain.txt": "modified", "created.txt": "created", "gone.txt": "deleted", "gonedir": "deleted",
            "empty": "deleted", "app.log": "deleted", "new.log": "created", "private.txt": "modified",
            "run.sh": "mode", "closed": "mode", "link": "modified", "dangling": "type",
            "dirlink": "type", "newdir": "created", "fifo": "created",
            # names that are not UTF-8 are shown with U+FFFD, never left out
            ".": "mode", "bad\ufffdname": "deleted", "n\ufffdew": "created", "new\nline": "deleted",
            "suid": "mode"}
    wrong = {k: (paths.get(k), v) for k, v in want.items() if paths.get(k) != v}
    tap.ok(not wrong, "the plan lists each change with its kind", f"(got, want): {wrong!r}\n{p.stdout.decode()}")
    after = snapshot(root)
    tap.ok(after == before, "contents, modes, types, symlinks (dangling too), empty dirs, ignored files "
           "and owners are exactly as at the checkpoint", snap_diff(before, after))
    tap.eq(sh(sid, "cat /workspace/link; ls /workspace/empty | wc -l").stdout,
           b"keep me\n0\n", "the sandbox sees the restored workspace")
    p = sh(sid, "touch /workspace/private.txt /workspace/empty/w && chmod 0640 /workspace/run.sh && "
           "rm -r /workspace/closed && echo ok", check=False)
    tap.eq(p.stdout, b"ok\n", "the sandbox user still owns and can change every restored path")
    destroy(sid)


@tap.case("checkpoints list: create, before each exec, manual with labels")
def _():
    sid = env.create()
    sh(sid, "echo one > /workspace/a")
    env.run("checkpoint", sid, "--label", "after one", check=True)
    env.run("checkpoint", sid, check=True)
    sh(sid, "echo two > /workspace/b")
    cps = checkpoints(sid)
    labels = [c["label"] for c in cps]
    tap.eq(labels[0], "create", "the first checkpoint is the one taken at create")
    tap.ok(labels[1].startswith("before exec 1: ") and "echo one" in labels[1],
           "a checkpoint before the exec, labelled with its command", repr(labels))
    tap.eq(labels[2:4], ["after one", "on request"], "manual checkpoints with their label (default: on request)")
    tap.ok(labels[4].startswith("before exec 2: ") and len(cps) == 5, "one automatic checkpoint per exec",
           repr(labels))
    tap.ok(all(len(c["id"]) == 40 and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", c["time"]) for c in cps),
           "each has an id and a time (RFC 3339)", json.dumps(cps))
    tap.eq(cps[2]["files"], 1, "a checkpoint counts the files it holds")
    p = env.run("checkpoints", sid)
    lines = p.stdout.decode().splitlines()
    tap.ok(p.returncode == 0 and lines[0].split()[:2] == ["ID", "TIME"] and len(lines) == 6
           and "after one" in lines[3], "the table lists them", p.stdout.decode())
    destroy(sid)


@tap.case("a workspace that is a git repository, with a nested one")
def _():
    if not shutil.which("git"):
        tap.skip("a workspace that is a git repository",
                 "git is not installed on the host (apt-get install git; CI installs it)")
        return
    sid = env.create()
    root = ws(sid)
    sh(sid, r"""
        cd /workspace && git init -q -b main && printf 'v1\n' > code.py && printf 'tmp/\n' > .gitignore
        git add -A && git commit -q -m first
        git init -q -b main vendor/lib && cd vendor/lib && printf 'lib v1\n' > lib.c
        git add -A && git commit -q -m lib-first && cd /workspace
        mkdir tmp && echo scratch > tmp/s && printf 'dirty\n' >> code.py
    """, *GIT_ENV)
    cp = env.run("checkpoint", sid, "--label", "repo", check=True).stdout.decode().strip()
    log0 = sh(sid, "cd /workspace && git log --format=%H%x20%s && git status --porcelain", *GIT_ENV).stdout
    nlog0 = sh(sid, "cd /workspace/vendor/lib && git log --format=%H%x20%s", *GIT_ENV).stdout
    before = snapshot(root)
    sh(sid, r"""
        cd /workspace && git add -A && git commit -q -m second && printf 'v3\n' > code.py && rm .gitignore
        git checkout -q -b feature && git rm -q --cached code.py
        cd vendor/lib && printf 'lib v2\n' > lib.c && git commit -q -am lib-second && git gc -q
    """, *GIT_ENV)
    tap.ok(sh(sid, "cd /workspace && git log --format=%H%x20%s && git status --porcelain", *GIT_ENV).stdout != log0,
           "the repository moved on", "")
    p = rollback(sid, "--to", cp, "--yes", "--json")
    tap.eq(p.returncode, 0, "rollback of the repository succeeds")
    tap.ok(any(c["path"].startswith(".git/") for c in json.loads(p.stdout)["changes"]),
           "the plan covers .git itself", p.stdout.decode()[:2000])
    after = snapshot(root)
    tap.ok(after == before, "the workspace and its .git are exactly as at the checkpoint", snap_diff(before, after))
    log1 = sh(sid, "cd /workspace && git log --format=%H%x20%s && git status --porcelain", *GIT_ENV).stdout
    tap.eq(log1, log0, "git log and git status show the old state")
    tap.eq(sh(sid, "cd /workspace && git rev-parse --abbrev-ref HEAD", *GIT_ENV).stdout, b"main\n",
           "HEAD is back on the old branch")
    tap.eq(sh(sid, "cd /workspace/vendor/lib && git log --format=%H%x20%s", *GIT_ENV).stdout, nlog0,
           "the nested repository is there with its old history")
    p = sh(sid, "cd /workspace && git fsck --no-progress 2>&1 && cd vendor/lib && git fsck --no-progress 2>&1",
           *GIT_ENV, check=False)
    tap.eq(p.returncode, 0, "git fsck is clean in both repositories")

    # A nested repository created after the checkpoint goes with the
    # rollback, but is never lost: undoing the rollback brings it back.
    sh(sid, "cd /workspace && git init -q -b main later && cd later && echo l > l && git add l && "
       "git commit -q -m later", *GIT_ENV)
    with_later = snapshot(root)
    p = rollback(sid, "--to", cp, "--yes", "--json")
    res = json.loads(p.stdout)
    tap.ok(not os.path.exists(os.path.join(root, "later")) and snapshot(root) == before,
           "a repository created since is removed by the rollback", p.stderr.decode())
    p = rollback(sid, "--to", res["safety_checkpoint"], "--yes", "--json")
    tap.ok(p.returncode == 0 and snapshot(root) == with_later, "and comes back with its .git when the rollback is undone",
           snap_diff(with_later, snapshot(root)))
    tap.eq(sh(sid, "cd /workspace/later && git log --format=%s", *GIT_ENV).stdout, b"later\n",
           "its history is intact")
    destroy(sid)


@tap.case("no --yes: refused without a terminal, y/n on a terminal")
def _():
    sid = env.create()
    root = ws(sid)
    sh(sid, "echo old > /workspace/f")
    cp = env.run("checkpoint", sid, check=True).stdout.decode().strip()
    sh(sid, "echo new > /workspace/f && echo x > /workspace/extra")
    changed = snapshot(root)
    cp = cp[:12]  # the id as the `checkpoints` table shows it
    p = rollback(sid, "--to", cp, input=b"y\n")
    err = p.stderr.decode()
    tap.ok(p.returncode != 0 and "not a terminal" in err and "--yes" in err and err.count("\n") == 1,
           "without --yes and without a terminal it refuses, in one clear line", err)
    tap.ok(snapshot(root) == changed, "and nothing changed")

    def on_pty(answer: bytes) -> tuple[int, str]:
        master, slave = os.openpty()
        proc = subprocess.Popen([SANDGLASS, "rollback", sid, "--to", cp], stdin=slave, stdout=slave,
                                stderr=slave, env=env.env, close_fds=True)
        os.close(slave)
        out = b""
        answered = False
        end = time.monotonic() + WAIT
        while time.monotonic() < end:
            r, _, _ = select.select([master], [], [], 0.5)
            if r:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: the child closed the terminal
                    break
                if not chunk:
                    break
                out += chunk
            if not answered and b"[y/n]" in out:
                os.write(master, answer + b"\n")
                answered = True
            if proc.poll() is not None and not r:
                break
        proc.wait(WAIT)
        os.close(master)
        return proc.returncode, out.decode(errors="replace")

    rc, out = on_pty(b"n")
    tap.ok(rc == 0 and "[y/n]" in out and "revert   f" in out and "delete   extra" in out
           and "keeping the changes" in out, "on a terminal it shows the plan and asks; n keeps the changes", out)
    tap.ok(snapshot(root) == changed, "after n nothing changed", snap_diff(changed, snapshot(root)))
    rc, out = on_pty(b"y")
    tap.ok(rc == 0 and "restored" in out, "y restores", out)
    tap.ok(not os.path.exists(os.path.join(root, "extra")) and open(os.path.join(root, "f")).read() == "old\n",
           "after y the workspace is back")
    destroy(sid)


@tap.case("rollback while an exec runs: refused, --force kills it first")
def _():
    sid = env.create()
    root = ws(sid)
    sh(sid, "echo base > /workspace/f")
    cp = env.run("checkpoint", sid, check=True).stdout.decode().strip()
    bg = env.spawn([SANDGLASS, "exec", sid, "--", "/bin/sh", "-c", "echo during > /workspace/f; exec sleep 3600"],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    ok = wait_for(lambda: running_execs(sid) and open(os.path.join(root, "f")).read() == "during\n", WAIT)
    tap.ok(ok, "the exec is running")
    p = rollback(sid, "--to", cp, "--yes")
    err = p.stderr.decode()
    tap.ok(p.returncode != 0 and "running" in err and "--force" in err and err.count("\n") == 1,
           "rollback refuses while an exec runs and says --force", err)
    tap.eq(open(os.path.join(root, "f")).read(), "during\n", "nothing was restored")
    tap.ok(bg.poll() is None, "the exec is still running")
    p = rollback(sid, "--to", cp, "--yes", "--force", "--json")
    tap.eq(p.returncode, 0, "rollback --force succeeds", )
    res = json.loads(p.stdout or b"{}")
    killed = res.get("killed") or {}
    tap.ok(killed.get("proof", {}).get("processes_left") == 0 and len(killed.get("execs_killed", [])) == 1,
           "it killed the running exec first, with proof", p.stdout.decode())
    bg.wait(WAIT)
    tap.ok(bg.returncode != 0, "the exec ended (killed)", repr(bg.returncode))
    tap.eq(open(os.path.join(root, "f")).read(), "base\n", "the workspace is restored")
    tap.eq(sh(sid, "cat /workspace/f").stdout, b"base\n", "and the session goes on (a rollback is no abort)")
    destroy(sid)


@tap.case("abort --rollback")
def _():
    sid = env.create()
    root = ws(sid)
    sh(sid, "echo good > /workspace/f")
    before = snapshot(root)
    bg = env.spawn([SANDGLASS, "exec", sid, "--", "/bin/sh", "-c",
                    "echo bad > /workspace/f; rm /workspace/f; echo evil > /workspace/g; "
                    "setsid sh -c 'while :; do echo x >> /workspace/g; sleep 0.05; done' & exec sleep 3600"],
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    tap.ok(wait_for(lambda: os.path.exists(os.path.join(root, "g")) and running_execs(sid), WAIT),
           "the bad exec runs (its leaf holds processes, seen from the host)")
    p = env.run("abort", sid, "--reason", "went rogue", "--rollback", "--json")
    tap.eq(p.returncode, 0, "abort --rollback succeeds")
    res = json.loads(p.stdout or b"{}")
    tap.ok(res.get("aborted") and res.get("proof", {}).get("processes_left") == 0
           and res.get("rollback", {}).get("restored"), "one record: the abort with its proof, and the rollback",
           p.stdout.decode())
    bg.wait(WAIT)
    # nothing can write any more: the sandbox's cgroup holds no process
    tap.eq(running_execs(sid), [], "after the abort no exec's process is left (seen from the host)")
    tap.ok(snapshot(root) == before, "the workspace is restored (nothing kept writing to it)",
           snap_diff(before, snapshot(root)))
    p = env.exec(sid, "true")
    tap.ok(p.returncode != 0 and b"went rogue" in p.stderr, "the session stays aborted", p.stderr.decode())
    env.run("resume", sid, check=True)
    tap.eq(sh(sid, "cat /workspace/f").stdout, b"good\n", "after resume the restored workspace is used")
    destroy(sid)


@tap.case("clear errors: unknown checkpoint, unknown sandbox")
def _():
    sid = env.create()
    for bad in ("deadbeefdeadbeef", "zz", "0" * 40):
        p = rollback(sid, "--to", bad, "--yes")
        err = p.stderr.decode()
        tap.ok(p.returncode != 0 and err.count("\n") == 1 and err.startswith("sandglass rollback: ")
               and not p.stdout, f"rollback --to {bad[:16]}: one-line error", err + p.stdout.decode())
    p = rollback("nosuchsandbox", "--yes")
    err = p.stderr.decode()
    tap.ok(p.returncode != 0 and err.count("\n") == 1 and "nosuchsandbox" in err,
           "rollback of an unknown sandbox: one-line error naming it", err)
    for cmd in ("checkpoint", "checkpoints"):
        p = env.run(cmd, "nosuchsandbox")
        err = p.stderr.decode()
        tap.ok(p.returncode != 0 and err.count("\n") == 1 and "nosuchsandbox" in err,
               f"{cmd} of an unknown sandbox: one-line error", err)
    destroy(sid)


@tap.case("a rollback can be undone")
def _():
    sid = env.create()
    root = ws(sid)
    sh(sid, "echo v1 > /workspace/f && mkdir /workspace/d")
    cp = env.run("checkpoint", sid, check=True).stdout.decode().strip()
    sh(sid, "echo v2 > /workspace/f && rmdir /workspace/d && echo n > /workspace/n && chmod 0700 /workspace/n")
    present = snapshot(root)
    res = json.loads(rollback(sid, "--to", cp, "--yes", "--json", check=True).stdout)
    safety = res.get("safety_checkpoint")
    labels = {c["id"]: c["label"] for c in checkpoints(sid)}
    tap.eq(labels.get(safety), "before rollback", "the rollback keeps the present as a 'before rollback' checkpoint")
    res2 = json.loads(rollback(sid, "--to", safety, "--yes", "--json", check=True).stdout)
    tap.ok(snapshot(root) == present, "rolling back to it undoes the rollback", snap_diff(present, snapshot(root)))
    tap.ok({c["path"] for c in res2["changes"]} >= {"f", "d", "n"}, "its plan lists what comes back",
           json.dumps(res2["changes"]))

    # Without --to the target is the newest checkpoint that is not such a
    # safety copy: rolling back twice (or abort --rollback after a rollback)
    # must not bring the undone changes back.
    sh(sid, "echo good > /workspace/f")
    sh(sid, "echo BAD > /workspace/f && echo bad > /workspace/extra")
    good = None
    for i in range(2):
        res = json.loads(rollback(sid, "--yes", "--json", check=True).stdout)
        good = good or snapshot(root)
        with open(os.path.join(root, "f")) as fh:
            tap.ok(fh.read() == "good\n" and not os.path.exists(os.path.join(root, "extra")),
                   f"rollback without --to, time {i + 1}: the bad change is undone", json.dumps(res))
        tap.ok(labels_of(sid).get(res["to"], "").startswith("before exec"),
               f"time {i + 1}: the target is the checkpoint before the bad exec, not a safety copy",
               json.dumps(res))
    res = json.loads(env.run("abort", sid, "--rollback", "--json", check=True).stdout)
    tap.ok(snapshot(root) == good and res["rollback"]["changes"] == [],
           "abort --rollback after a rollback keeps the restored state", json.dumps(res))
    destroy(sid)


@tap.case("links out of the workspace: restored as links, nothing outside written")
def _():
    sid = env.create()
    root = ws(sid)
    outside = os.path.join(env.root, "outside")
    os.makedirs(outside)
    victim = os.path.join(outside, "victim.txt")
    with open(victim, "w") as f:
        f.write("host data\n")
    os.chmod(outside, 0o777)  # writable by anyone: only our restore could be tricked into writing here
    st0 = os.stat(victim)
    listing0 = sorted(os.listdir(outside))
    # the link's target is a host path: dangling inside the sandbox, live on the host
    sh(sid, f"cd /workspace && ln -s {victim} out && ln -s {outside} outdir && echo safe > plain "
            f"&& mkdir sub && echo s > sub/s && test ! -e {victim}")
    cp = json.loads(env.run("checkpoint", sid, "--json", check=True).stdout)
    before = snapshot(root)
    tap.eq(cp["files"], 4, "the checkpoint holds the links, not what they point at")
    # swap things for links to the outside, so a naive restore would write through them
    sh(sid, f"cd /workspace && rm out && echo EVIL > out && rm outdir && mkdir outdir && echo EVIL > outdir/victim.txt "
            f"&& rm plain && ln -s {victim} plain && rm -r sub && ln -s {outside} sub")
    p = rollback(sid, "--to", cp["id"], "--yes", "--json")
    tap.eq(p.returncode, 0, "rollback succeeds", )
    after = snapshot(root)
    tap.ok(after == before, "the links are restored as links, the files as files", snap_diff(before, after))
    tap.eq(os.readlink(os.path.join(root, "out")), victim, "the outside link points where it did")
    st1 = os.stat(victim)
    with open(victim) as f:
        tap.eq(f.read(), "host data\n", "the outside file is untouched")
    tap.ok((st1.st_mtime_ns, st1.st_ino, st1.st_mode, st1.st_uid) == (st0.st_mtime_ns, st0.st_ino, st0.st_mode, st0.st_uid),
           "its inode, mtime, mode and owner too")
    tap.eq(sorted(os.listdir(outside)), listing0, "nothing was created in the outside directory")
    destroy(sid)


@tap.case("background writers left by earlier execs are stopped by a rollback")
def _():
    sid = env.create()
    root = ws(sid)
    sh(sid, "echo original > f")
    ck = env.run("checkpoint", sid, "--label", "clean", check=True).stdout.decode().strip()
    sh(sid, "(while :; do echo scribble >> f; sleep 0.01; done) >/dev/null 2>&1 &")
    tap.ok(wait_for(lambda: "scribble" in open(os.path.join(root, "f")).read(), WAIT),
           "the background writer is writing")
    tap.ok(running_execs(sid), "its exec's cgroup leaf holds it (seen from the host)")
    p = rollback(sid, "--to", ck, "--yes", "--json")
    tap.eq(p.returncode, 0, "rollback with a background writer succeeds")
    res = json.loads(p.stdout)
    tap.ok(res["killed"] and res["killed"]["proof"]["processes_left"] == 0,
           "the background writer was killed, with proof", p.stdout.decode()[-600:])
    # checked from the host: no process left in the sandbox's cgroup, so
    # nothing can write to f after this read
    tap.eq(running_execs(sid), [], "no exec's process is left (seen from the host)")
    with open(os.path.join(root, "f")) as fh:
        tap.eq(fh.read(), "original\n", "the restored file stays restored")
    destroy(sid)


for _sb in env.ls():  # what a failed case left: env.cleanup destroys it
    note_exiting(_sb["id"])
env.cleanup()


@tap.case("no sanitizer reports from any process")
def _():
    # leak reports come when the supervisors exit, after destroy answered:
    # wait for each (by pid), then read
    left = [p for p, c in EXITING.items() if not wait_for(lambda: not pid_alive(p) or comm(p) != c, WAIT)]
    tap.ok(EXITING and not left, "every destroyed sandbox's supervisor and workers exited",
           f"{len(EXITING)} watched; still running: {left}")
    files = sorted(glob.glob(os.path.join(SAN_DIR, "*")))
    text = ""
    for f in files:
        with open(f, errors="replace") as fh:
            text += f"== {os.path.basename(f)}\n" + fh.read()[-3000:]
    tap.ok(not files, "no ASan/UBSan report files", text)
    if not files:
        shutil.rmtree(SAN_DIR, ignore_errors=True)


tap.done()
