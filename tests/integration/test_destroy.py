#!/usr/bin/env python3
"""destroy is idempotent: whatever is left of a sandbox (record,
supervisor, init, cgroups, workspace, spool) it removes, keeping an
undelivered spool for `sandglass flush`, and it says what it found."""
from __future__ import annotations

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import Env, cgroup_dirs, cgroup_pids, pid_alive, tap, wait_for  # noqa: E402

env = Env()


def record(sid):
    return [sb for sb in env.ls() if sb["id"] == sid][0]


def gone(sid):
    return (not os.path.exists(os.path.join(env.state, "sb", sid))
            and not any(os.path.isdir(d) for d in cgroup_dirs(sid)))


def rmdir_tree(d):
    for root, dirs, _files in os.walk(d, topdown=False):
        for x in dirs:
            os.rmdir(os.path.join(root, x))
    os.rmdir(d)


def remove_by_hand(sid) -> bool:
    """Kills what the sandbox's cgroups hold and removes them, as an operator
    would by hand. Until it holds: the supervisor, still alive, may start
    its checkpoint worker again in the meantime (EBUSY on its leaf), and a
    cgroup whose last task just exited can be busy for a moment."""
    def once() -> bool:
        for pid in cgroup_pids(sid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            for d in cgroup_dirs(sid):
                if os.path.isdir(d):
                    rmdir_tree(d)
        except OSError:
            return False
        return not any(os.path.isdir(d) for d in cgroup_dirs(sid))
    return wait_for(once, 60, step=0.05)


try:
    @tap.case("the sandbox's cgroup is gone")
    def _cgroup_gone():
        sid = env.create()
        rec = record(sid)
        init = rec["init_pid"]
        for pid in cgroup_pids(sid):
            os.kill(pid, signal.SIGKILL)
        tap.ok(wait_for(lambda: not cgroup_pids(sid), 60), "every process of the sandbox was killed by hand")
        tap.ok(remove_by_hand(sid), "its cgroups were removed by hand")
        p = env.run("destroy", sid, timeout=120)
        tap.ok(p.returncode == 0, "destroy succeeds", (p.stdout + p.stderr).decode())
        tap.ok(gone(sid), "nothing of it is left")
        tap.ok(not pid_alive(init) and not pid_alive(rec["supervisor_pid"]), "its init and supervisor are gone")

    @tap.case("the supervisor is dead")
    def _sup_dead():
        sid = env.create()
        rec = record(sid)
        os.kill(rec["supervisor_pid"], signal.SIGKILL)
        tap.ok(wait_for(lambda: not pid_alive(rec["supervisor_pid"]), 60), "the supervisor was killed")
        p = env.run("destroy", sid, timeout=120)
        out = (p.stdout + p.stderr).decode()
        tap.ok(p.returncode == 0, "destroy succeeds", out)
        # Its init lives: a new supervisor takes the sandbox over and
        # destroys it itself (issue 21), saying so.
        tap.ok("a new one took over" in out and "cleaning up" not in out, "destroy says what it found", out)
        tap.ok(gone(sid) and not pid_alive(rec["init_pid"]), "nothing of it is left")

    @tap.case("the supervisor and the init are dead")
    def _all_dead():
        sid = env.create()
        rec = record(sid)
        os.kill(rec["supervisor_pid"], signal.SIGKILL)
        os.kill(rec["init_pid"], signal.SIGKILL)
        tap.ok(wait_for(lambda: not pid_alive(rec["supervisor_pid"]) and not pid_alive(rec["init_pid"]), 60),
               "the supervisor and the init were killed")
        p = env.run("destroy", sid, timeout=120)
        out = (p.stdout + p.stderr).decode()
        tap.ok(p.returncode == 0, "destroy succeeds", out)
        tap.ok("not running" in out and "cleaning up" in out, "destroy says what it found", out)
        tap.ok(gone(sid), "nothing of it is left")
        p = env.run("destroy", sid, timeout=60)
        tap.ok(p.returncode != 0 and sid.encode() in p.stderr, "a second destroy says there is no such sandbox",
               p.stderr.decode())

    @tap.case("destroy while an exec runs")
    def _running():
        import subprocess
        from sgtest import SANDGLASS, comm
        for args in ((), ("--task", "t", "--ingest", "ws://127.0.0.1:9")):
            sid = env.create(*args)
            what = "captured" if args else "plain"
            proc = subprocess.Popen([SANDGLASS, "exec", sid, "--", "sleep", "300"], env=env.env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            env.procs.append(proc)
            tap.ok(wait_for(lambda: any(comm(x) == "sleep" for x in cgroup_pids(sid)), 60),
                   f"{what}: the exec runs")
            sup = record(sid)["supervisor_pid"]
            p = env.run("destroy", sid, timeout=120)
            err = p.stderr.decode()
            tap.ok(p.returncode == 0 and "cleaning up from here" not in err,
                   f"{what}: the supervisor itself destroys it (it crashed on a captured one)", err)
            out, perr = proc.communicate(timeout=60)
            tap.ok(proc.returncode != 0 and b"destroyed" in perr, f"{what}: the exec is told", perr.decode())
            tap.ok(gone(sid) and not pid_alive(sup), f"{what}: nothing of it is left")

    @tap.case("events that could not be delivered")
    def _undelivered():
        # An ingest that is not running: the spool keeps everything.
        sid = env.create("--task", "t", "--ingest", "ws://127.0.0.1:9")
        env.exec(sid, "echo", "hello")
        p = env.run("destroy", sid, timeout=120)
        err = p.stderr.decode()
        tap.ok(p.returncode == 0, "destroy succeeds", err)
        tap.ok("could not be delivered" in err and f"sandglass flush {sid}" in err,
               "destroy says how many events are undelivered and how to deliver them", err)
        tap.ok(os.path.isdir(os.path.join(env.state, "undelivered", sid)), "the spool is kept for flush")
finally:
    env.cleanup()
tap.done()
