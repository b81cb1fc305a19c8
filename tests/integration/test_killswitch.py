"""Issue 4: the kill switch (abort, caps, resume) through the real CLI."""
from __future__ import annotations

import json
import os
import signal
import subprocess

from sgtest import (cgroup_pids, Env, SANDGLASS, await_true, cgroup_dirs, cmdline, pid_alive, pids_running,
                    tap)

env = Env()




def meta(sid: str) -> dict:
    with open(os.path.join(env.state, "sb", sid, "meta.json")) as f:
        return json.load(f)


@tap.case("abort kills everything but init, and proves it")
def _():
    sid = env.create()
    env.sh(sid, "setsid sh -c 'sleep 1000 & sleep 1000 &' & (nohup sleep 999 >/dev/null 2>&1 &); exit 0")
    init = meta(sid)["init_pid"]

    def running_now() -> dict[str, int]:
        pids = cgroup_pids(sid)
        return {"sleep 1000": len(pids_running(pids, "sleep 1000")), "sleep 999": len(pids_running(pids, "sleep 999")),
                "sleep 1001": len(pids_running(pids, "sleep 1001")),
                "bomb": len([x for x in pids if "bomb()" in cmdline(x) and pid_alive(x)])}
    # One kind after the other, each seen from the host before the next
    # starts (the bomb, at the pids limit, would stop the others' forks).
    await_true(lambda: (lambda r: r["sleep 1000"] == 2 and r["sleep 999"] == 1)(running_now()),
               "escapers run: setsid, nohup", timeout=60, diag=lambda: repr(running_now()))
    # an exec still running, and a fork bomb in progress: its processes wait
    # for their children, so it stays at the limit (pids.max) until killed
    running = subprocess.Popen([SANDGLASS, "exec", sid, "--", "sleep", "1001"], env=env.env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    await_true(lambda: running_now()["sleep 1001"] == 1, "an exec is in flight", timeout=60,
               diag=lambda: repr(running_now()))
    bomb = subprocess.Popen([SANDGLASS, "exec", sid, "--", "/bin/sh", "-c",
                             "bomb() { bomb & bomb & wait; }; bomb 2>/dev/null"],
                            env=env.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    await_true(lambda: (lambda r: r["sleep 1000"] == 2 and r["sleep 999"] == 1 and r["sleep 1001"] == 1
                        and r["bomb"] >= 50)(running_now()),
               "and a fork bomb is well under way, the others still there", timeout=60,
               diag=lambda: repr(running_now()))
    before = cgroup_pids(sid) - {init}
    p = env.run("abort", sid, "--reason", "student left", "--json")
    rec = json.loads(p.stdout)
    tap.ok(rec["aborted"] and rec["by"] == "operator" and "student left" in rec["reason"],
           "the abort records who and why", p.stdout.decode())
    tap.ok(rec["proof"]["processes_left"] == 0 and rec["proof"]["cgroup_holds_only_init"],
           "the proof says nothing is left running", json.dumps(rec["proof"]))
    tap.ok(set(rec["caps"]) == {"max_wall_s", "max_execs", "max_cpu_s", "max_calls"},
           "each cap and its value at that moment is recorded", json.dumps(rec["caps"]))
    tap.ok(not any(pid_alive(x) for x in before), "every process is dead: setsid, nohup, fork bomb, in-flight")
    tap.eq(cgroup_pids(sid), {init}, "the cgroup holds only init")
    tap.ok(pid_alive(init), "the sandbox itself stays up")
    running.wait(60)
    bomb.wait(60)
    tap.ok(running.returncode != 0, "the in-flight exec ended")
    p = env.exec(sid, "true")
    tap.ok(p.returncode != 0 and b"session aborted" in p.stderr and b"student left" in p.stderr,
           "a new exec is refused and says why", p.stderr.decode())
    p = env.run("abort", sid, "--reason", "second", "--json")
    tap.ok(json.loads(p.stdout)["already"] and "student left" in json.loads(p.stdout)["reason"],
           "the first reason wins and is kept", p.stdout.decode())
    p = env.run("resume", sid)
    tap.eq(p.returncode, 0, "resume clears an operator's abort")
    tap.eq(env.exec(sid, "true").returncode, 0, "execs run again after resume")
    env.run("destroy", sid)


@tap.case("caps")
def _():
    sid = env.create("--max-execs", "2")
    env.exec(sid, "true")
    env.exec(sid, "true")
    p = env.exec(sid, "true")
    tap.ok(p.returncode != 0 and b"max_execs=2" in p.stderr, "max-execs aborts the session", p.stderr.decode())
    p = env.run("resume", sid)
    tap.ok(p.returncode != 0 and b"cap stays" in p.stderr, "an abort by a cap stays", p.stderr.decode())
    env.run("destroy", sid)

    # Caps, not speed: a command that would outlast the test is killed (the
    # exec returns; without the cap it would hit the test's own timeout).
    sid = env.create("--max-wall", "1")
    p = env.exec(sid, "sleep", "3600", timeout=300)
    tap.ok(p.returncode == 137, "max-wall kills the running exec", repr(p))
    p = env.exec(sid, "true")
    tap.ok(b"max_wall_s=1" in p.stderr, "max-wall aborts the session", p.stderr.decode())
    env.run("destroy", sid)

    sid = env.create("--max-cpu", "0.5")
    p = env.exec(sid, "/bin/sh", "-c", "while :; do :; done", timeout=300)
    tap.ok(p.returncode == 137, "max-cpu kills a busy loop", repr(p))
    info = env.run("abort", sid, "--json")
    tap.ok(b"max_cpu_s=0.5" in info.stdout, "max-cpu is the kept reason", info.stdout.decode())
    env.run("destroy", sid)


@tap.case("signal and --destroy")
def _():
    sid = env.create()
    env.sh(sid, "(sleep 1000 &); exit 0")
    init = meta(sid)["init_pid"]
    await_true(lambda: len(pids_running(cgroup_pids(sid), "sleep 1000")) == 1, "a background sleep runs",
               timeout=60)
    sleeper = pids_running(cgroup_pids(sid), "sleep 1000")
    sup = meta(sid)["supervisor_pid"]
    os.kill(sup, signal.SIGTERM)
    await_true(lambda: b"received SIGTERM" in env.exec(sid, "true").stderr,
               "SIGTERM to the session is an abort with that reason", timeout=60, step=0.2)
    tap.ok(sleeper and not any(pid_alive(x) for x in sleeper) and cgroup_pids(sid) == {init},
           "it killed the sandbox's processes, init alone is left (seen from the host)",
           repr((sleeper, cgroup_pids(sid))))
    tap.ok(pid_alive(sup), "the supervisor stays up after SIGTERM (rollback and destroy remain possible)")
    p = env.run("abort", sid, "--destroy")
    tap.ok(p.returncode == 0 and not os.path.exists(os.path.join(env.state, "sb", sid))
           and not any(os.path.exists(c) for c in cgroup_dirs(sid)), "abort --destroy tears it down",
           p.stderr.decode())
    p = env.run("abort", "nosuchid0000")
    tap.ok(p.returncode != 0 and b"nosuchid0000" in p.stderr, "abort of an unknown id is refused")


@tap.case("abort is answered by the kill switch's thread while the loop is held")
def _():
    # The loop held on a received execve (SANDGLASS_TEST_HOLD_EXEC, the
    # test-only hold of sv_execnotify.c, at most 30 s): the abort is killed
    # for, proved and answered beside it; the loop records it once released.
    from test_capture import CapEnv
    cenv = CapEnv()
    hold = os.path.join(cenv.root, "hold-exec")
    cenv.env["SANDGLASS_TEST_HOLD_EXEC"] = hold
    held = None
    try:
        sid = cenv.create_captured()
        with open(os.path.join(cenv.state, "sb", sid, "meta.json")) as f:
            init = json.load(f)["init_pid"]
        cenv.run("exec", sid, "--", "/bin/sh", "-c", "(sleep 1000 >/dev/null 2>&1 &); exit 0")
        await_true(lambda: len(pids_running(cgroup_pids(sid), "sleep 1000")) == 1, "a background sleep runs",
                   timeout=60)
        open(hold, "w").close()
        held = subprocess.Popen([SANDGLASS, "exec", sid, "--", "/bin/sh", "-c", "/bin/true; sleep 1001"],
                                env=cenv.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        await_true(lambda: os.path.exists(hold + ".held"), "the loop holds an execve, unanswered", timeout=60)
        p = cenv.run("abort", sid, "--reason", "held loop", "--json", timeout=60)
        rec = json.loads(p.stdout or b"{}")
        tap.ok(p.returncode == 0 and rec.get("aborted") and not rec.get("already") and rec.get("by") == "operator"
               and "held loop" in rec.get("reason", ""), "the abort is answered while the loop is held",
               p.stdout.decode() + p.stderr.decode())
        tap.ok(rec.get("proof", {}).get("cgroup_holds_only_init") is True and rec["proof"]["processes_left"] == 0
               and rec.get("processes_killed", 0) >= 2 and len(rec.get("execs_killed", [])) >= 1
               and set(rec.get("caps", {})) == {"max_wall_s", "max_execs", "max_cpu_s", "max_calls"},
               "its record: the proof, what it killed, the caps", json.dumps(rec))
        tap.eq(cgroup_pids(sid), {init}, "the cgroup holds only init (seen from the host)")
        p = cenv.run("abort", sid, "--reason", "second", "--json", timeout=60)
        again = json.loads(p.stdout or b"{}")
        tap.ok(again.get("already") and "held loop" in again.get("reason", ""),
               "a second abort, the loop still held, finds it aborted", p.stdout.decode())
        tap.ok(os.path.exists(hold + ".held") and held.poll() is None, "the loop was held all along")
        os.unlink(hold)
        held.wait(120)
        p = cenv.run("exec", sid, "--", "true")
        tap.ok(p.returncode != 0 and b"session aborted" in p.stderr and b"held loop" in p.stderr,
               "released, the loop refuses a new exec and says why", p.stderr.decode())
        rows = cenv.wait_rows(sid, lambda rs: any(r["kind"] == "session_abort" for r in rs))
        aborts = [i for i, r in enumerate(rows) if r["kind"] == "session_abort"]
        tap.eq(len(aborts), 1, "the abort is recorded once")
        tap.ok(aborts and "held loop" in rows[aborts[0]]["payload"].get("reason", ""), "with its reason",
               json.dumps(rows[aborts[0]]["payload"]) if aborts else "")
        killed = [i for i, r in enumerate(rows)
                  if r["kind"] == "run_result" and "sleep 1001" in r["payload"].get("cmd", "")]
        tap.ok(killed and aborts and killed[0] < aborts[0] and rows[killed[0]]["payload"].get("killed_by"),
               "the exec it killed has its result, killed by the abort, before the abort's record",
               json.dumps([(r["kind"], r["payload"].get("cmd")) for r in rows
                           if r["kind"] in ("run_result", "session_abort")]))
        tap.eq(cenv.run("resume", sid).returncode, 0, "resume clears it")
        tap.eq(cenv.run("exec", sid, "--", "true").returncode, 0, "and execs run again")
        cenv.destroy(sid)
    finally:
        if os.path.exists(hold):
            os.unlink(hold)
        if held and held.poll() is None:
            held.kill()
            held.wait()
        cenv.cleanup()


env.cleanup()
tap.done()
