#!/usr/bin/env python3
"""A command sandglass kills does not end in silence: its time limit, the
output limit, the memory limit (the OOM killer), an abort or a
`rollback --force` each end it with 137 and one line on stderr naming the
cause and the limit's value; `--json` carries it as killed_by."""
from __future__ import annotations

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import SANDGLASS, Env, cgroup_pids, comm, tap, wait_for  # noqa: E402

env = Env()


def last_json(out: bytes) -> dict:
    return json.loads(out.strip().splitlines()[-1])


def check(name, p, cause, words):
    err = p.stderr.decode(errors="replace")
    tap.eq(p.returncode, 137, f"{name}: exit status 137")
    lines = [ln for ln in err.splitlines() if ln.startswith("sandglass: killed:")]
    tap.ok(len(lines) == 1 and all(w in lines[0] for w in words),
           f"{name}: one stderr line names the cause and the value ({', '.join(words)})", err)


try:
    sid = env.create("--memory", "64M", "--output-limit", "64K")

    @tap.case("timeout")
    def _timeout():
        p = env.run("exec", sid, "--timeout", "1", "--", "sleep", "60", timeout=120)
        check("timeout", p, "timeout", ["time limit", "1 s"])
        p = env.run("exec", sid, "--timeout", "1", "--json", "--", "sleep", "60", timeout=120)
        res = last_json(p.stdout)
        tap.eq(res.get("killed_by", {}).get("cause"), "timeout", "timeout: --json says killed_by timeout")

    @tap.case("output limit")
    def _output():
        p = env.exec(sid, "/bin/sh", "-c", "yes sandglass", timeout=120)
        check("output limit", p, "output_limit", ["output limit", "65536 bytes"])

    @tap.case("memory")
    def _memory():
        p = env.run("exec", sid, "--json", "--", "python3", "-c",
                    "b = []\nwhile True: b.append(bytearray(1 << 20))", timeout=120)
        check("memory", p, "memory", ["memory limit", "64 MiB"])
        res = last_json(p.stdout)
        tap.eq(res.get("killed_by", {}).get("cause"), "memory", "memory: --json says killed_by memory")
        tap.ok(res.get("oom_killed") is True, "memory: oom_killed is true too", json.dumps(res))
        # Without --json the supervisor reads no counter before the exec:
        # the cause still comes out.
        p = env.exec(sid, "python3", "-c", "b = []\nwhile True: b.append(bytearray(1 << 20))", timeout=120)
        check("memory, exit code only", p, "memory", ["memory limit", "64 MiB"])

    @tap.case("abort")
    def _abort():
        a = env.create()
        proc = subprocess.Popen([SANDGLASS, "exec", a, "--", "sleep", "300"], env=env.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        env.procs.append(proc)
        tap.ok(wait_for(lambda: any(comm(x) == "sleep" for x in cgroup_pids(a)), 60), "abort: the command runs")
        r = env.run("abort", a, "--reason", "exam over", timeout=60)
        tap.eq(r.returncode, 0, "abort: the operator's abort succeeds")
        out, err = proc.communicate(timeout=60)
        check("abort", subprocess.CompletedProcess(proc.args, proc.returncode, out, err), "abort",
              ["aborted", "exam over"])
        # ls says so, and why, not "running".
        rec = [sb for sb in env.ls() if sb["id"] == a][0]
        tap.eq((rec["state"], rec.get("abort", {}).get("by")), ("aborted", "operator"),
               "ls --json: state aborted, by the operator")
        tap.ok("exam over" in rec.get("abort", {}).get("reason", ""), "ls --json: the reason", json.dumps(rec))
        text = env.run("ls", check=True).stdout.decode()
        line = [ln for ln in text.splitlines() if ln.startswith(a)]
        tap.ok(line and " aborted " in line[0] and "exam over" in line[0], "ls: the line says aborted and why", text)
        # The abort outlives its supervisor: a new one that takes the
        # sandbox over still refuses execs.
        sup = rec["supervisor_pid"]
        os.kill(sup, 9)
        tap.ok(wait_for(lambda: not os.path.exists(f"/proc/{sup}/stat")
                        or open(f"/proc/{sup}/stat").read().split(") ")[1][0] == "Z", 60),
               "abort: the supervisor is gone")
        p = env.exec(a, "true")
        tap.ok(p.returncode != 0 and b"aborted" in p.stderr,
               "after a takeover the session is still aborted", p.stderr.decode())
        r = env.run("resume", a, timeout=60)
        tap.eq(r.returncode, 0, "resume clears it")
        rec = [sb for sb in env.ls() if sb["id"] == a][0]
        tap.eq(rec["state"], "running", "ls: running again after resume")
        tap.eq(env.exec(a, "true").returncode, 0, "execs run again")

    @tap.case("rollback --force")
    def _rollback():
        b = env.create()
        proc = subprocess.Popen([SANDGLASS, "exec", b, "--", "sleep", "300"], env=env.env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        env.procs.append(proc)
        tap.ok(wait_for(lambda: any(comm(x) == "sleep" for x in cgroup_pids(b)), 60), "rollback: the command runs")
        r = env.run("rollback", b, "--yes", "--force", timeout=60)
        tap.ok(r.returncode == 0, "rollback --force succeeds", r.stderr.decode())
        out, err = proc.communicate(timeout=60)
        check("rollback --force", subprocess.CompletedProcess(proc.args, proc.returncode, out, err),
              "rollback", ["rollback --force"])

    @tap.case("a command that exits by itself")
    def _plain():
        p = env.exec(sid, "/bin/sh", "-c", "kill -9 $$")
        tap.eq(p.returncode, 137, "a command killed from inside exits 137")
        tap.ok(b"sandglass: killed" not in p.stderr, "and sandglass claims no cause of its own",
               p.stderr.decode())
finally:
    env.cleanup()
tap.done()
