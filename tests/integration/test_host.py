#!/usr/bin/env python3
"""sandglass host: the sandbox host's daemon and its /metrics (issue 26;
docs/METRICS.md, sandglass-host(1)).

Real parts only: the daemon on an ephemeral loopback port, real sandboxes
and execs, scrapes over HTTP.

- bad options are refused, each naming what is wrong (a non-loopback
  --metrics-listen without --metrics-token, a missing token file); a
  second daemon on the same state directory is refused;
- execs that exit 0, exit 1, run into --timeout, are OOM-killed under a
  small --memory and are killed by an abort move the counters by exactly
  that: execs by outcome, kills by cause, limit hits, OOMs, the exec and
  kill time histograms' counts; sandboxes by state (running, aborted);
- a destroyed sandbox's counters stay in the host's (the retired file):
  no counter goes down; an idle session's expiry is counted;
- a counters file over 4 KiB or malformed is skipped and counted;
- no learner name and no sandbox id appears in a scrape; `promtool check
  metrics` passes on it;
- SIGTERM stops the daemon and leaves the sandboxes running (a new exec
  works); a restarted daemon scrapes the same counters (monotonic), with
  --metrics-token: no token or a wrong one is 401, counted;
- the pool: a spare that goes is made again by the daemon (create's own
  background refill steps aside while the daemon runs).

No check depends on speed. TAP output."""

import os
import re
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import SANDGLASS, Env, await_true, cgroup_pids, comm, tap  # noqa: E402
from test_metrics import parse  # noqa: E402 - the ingest's scrape parser, the same text format

T = 60
LEARNER = "learner-zq7host"
OOM = "b = []\nwhile True: b.append(bytearray(1 << 20))"


def get(port, tok=None):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/metrics",
                                 headers={"Authorization": f"Bearer {tok}"} if tok else {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=T) as r:
            return r.status, r.headers.get("content-type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, "", e.read().decode()


class Daemon:
    def __init__(self, env, *args):
        self.p = env.spawn([SANDGLASS, "host", "--metrics-listen", "127.0.0.1:0", *args],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        m = re.match(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", line)
        if not m:
            self.p.kill()
            raise RuntimeError(f"sandglass host did not start: {line!r} {self.p.stderr.read()}")
        self.port = int(m.group(1))
        self.tok = None

    def text(self):
        code, _, body = get(self.port, self.tok)
        if code != 200:
            raise RuntimeError(f"scrape: {code} {body}")
        return body

    def scrape(self):
        return parse(self.text())

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(timeout=T)
        err = self.p.stderr.read()
        return rc, err


def delta(after, before, key):
    return after.get(key, 0) - before.get(key, 0)


def bad_options(env):
    def refused(args, want, name, rc=None):
        p = env.run("host", *args, timeout=T)
        err = p.stderr.decode()
        tap.ok(p.returncode != 0 and (rc is None or p.returncode == rc) and want in err, name,
               f"rc {p.returncode}: {err}")

    refused(["--metrics-listen", "0.0.0.0:0"], "needs --metrics-token", "a non-loopback --metrics-listen "
            "without a token is refused", 2)
    refused(["--metrics-listen", "localhost:9"], "--metrics-listen", "--metrics-listen with a name is refused", 2)
    missing = os.path.join(env.root, "no-such-token")
    refused(["--metrics-token", missing], missing, "a missing --metrics-token file is refused, named")
    refused(["extra"], "unexpected argument 'extra'", "an argument is refused", 2)


def counters_case(env, d):
    base = d.scrape()
    a = env.create("--learner", LEARNER, "--memory", "64M")
    b = env.create("--learner", LEARNER)
    tap.eq(env.exec(a, "true").returncode, 0, "exec true")
    tap.eq(env.exec(a, "false").returncode, 1, "exec false")
    p = env.run("exec", a, "--timeout", "1", "--", "sleep", "60", timeout=T)
    tap.ok(p.returncode == 137 and b"time limit" in p.stderr, "exec past --timeout is killed", p.stderr.decode())
    p = env.run("exec", a, "--", "python3", "-c", OOM, timeout=T)
    tap.ok(p.returncode == 137 and b"memory limit" in p.stderr, "exec past --memory is OOM-killed",
           p.stderr.decode())
    slow = subprocess.Popen([SANDGLASS, "exec", b, "--", "sleep", "60"], env=env.env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # the exec has started (its supervisor counts it at its end)
    await_true(lambda: any(comm(pid) == "sleep" for pid in cgroup_pids(b)), "the exec to abort runs")
    env.run("abort", b, check=True)
    slow.wait(timeout=T)
    want = {'sandglass_host_execs_total{outcome="ok"}': 1, 'sandglass_host_execs_total{outcome="failed"}': 1,
            'sandglass_host_execs_total{outcome="killed"}': 3, 'sandglass_host_execs_total{outcome="error"}': 0,
            'sandglass_host_kills_total{cause="timeout"}': 1, 'sandglass_host_kills_total{cause="memory"}': 1,
            'sandglass_host_kills_total{cause="abort"}': 1, 'sandglass_host_kills_total{cause="output_limit"}': 0,
            'sandglass_host_limit_hits_total{limit="time"}': 1, 'sandglass_host_limit_hits_total{limit="cap"}': 0,
            'sandglass_host_expiries_total{reason="idle"}': 0,
            'sandglass_host_exec_duration_seconds_count': 5, 'sandglass_host_kill_duration_seconds_count': 2}

    def moved():
        now = d.scrape()
        return all(delta(now, base, k) == v for k, v in want.items())
    await_true(moved, "the counters moved", timeout=T)
    now = d.scrape()
    for k, v in want.items():
        tap.eq(delta(now, base, k), v, f"{k} moved by {v}")
    tap.ok(delta(now, base, "sandglass_host_ooms_total") >= 1 and
           delta(now, base, 'sandglass_host_limit_hits_total{limit="memory"}') ==
           delta(now, base, "sandglass_host_ooms_total"), "the OOM kill is counted, as a memory limit hit too",
           str({k: v for k, v in now.items() if "oom" in k or "memory" in k}))
    tap.ok(delta(now, base, "sandglass_host_checkpoint_duration_seconds_count") >= 2,
           "the sandboxes' checkpoints are timed")
    tap.eq(now.get('sandglass_host_sandboxes{state="running"}'), 1.0, "sandboxes: 1 running")
    tap.eq(now.get('sandglass_host_sandboxes{state="aborted"}'), 1.0, "sandboxes: 1 aborted")
    text = d.text()
    tap.ok(LEARNER not in text and a not in text and b not in text, "no learner name or sandbox id in a scrape")
    if shutil.which("promtool"):
        p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=T)
        tap.ok(p.returncode == 0 and not p.stdout.strip(), "promtool check metrics passes",
               p.stdout + p.stderr)
    else:
        tap.skip("promtool check metrics passes", "no promtool (scripts/install-deps.sh installs it)")
    env.run("destroy", a, check=True)
    expiry_case(env, d, now)
    after = d.scrape()
    down = [k for k, v in now.items() if k.endswith("_total") or "_bucket" in k or k.endswith("_count")
            if after.get(k, 0) < v]
    tap.ok(not down, "a destroy takes no counter down (the retired file keeps them)", str(down))
    tap.eq(after.get('sandglass_host_sandboxes{state="running"}'), 0.0, "the destroyed sandbox is gone from states")
    return b, after


def expiry_case(env, d, before):
    """A session that expires (--idle-timeout) is counted, then destroyed:
    its counters go to the retired file."""
    e = env.create("--learner", LEARNER, "--idle-timeout", "1")
    key = 'sandglass_host_expiries_total{reason="idle"}'
    await_true(lambda: e not in os.listdir(os.path.join(env.state, "sb")) and
               delta(d.scrape(), before, key) == 1, "an idle session expires and goes", timeout=T)
    now = d.scrape()
    tap.eq(delta(now, before, key), 1, "expiries{idle} moved by 1")
    tap.eq(delta(now, before, 'sandglass_host_expiries_total{reason="ttl"}'), 0, "expiries{ttl} did not move")


def bad_file_case(env, d, sid):
    """A counters file over 4 KiB or malformed is skipped, and counted."""
    path = os.path.join(env.state, "sb", sid, "counters")
    with open(path) as f:
        good = f.read()
    base = d.scrape()
    for bad, what in (("x" * 5000, "over 4 KiB"), ("sandglass-counters 1\nexecs 1 x\n", "malformed")):
        with open(path, "w") as f:
            f.write(bad)
        now = d.scrape()
        tap.eq(now.get("sandglass_host_skipped_files"), 1.0, f"a counters file {what} is skipped, counted")
        # sid's one exec (killed by the abort) is left out with its file
        tap.eq(delta(now, base, 'sandglass_host_execs_total{outcome="killed"}'), -1,
               f"the counters of a file {what} are left out")
    with open(path, "w") as f:
        f.write(good)
    tap.eq(d.scrape().get("sandglass_host_skipped_files"), 0.0, "the file put back is read again")


def restart_case(env, d, b):
    c = env.create("--learner", LEARNER)
    before = d.scrape()
    rc, err = d.stop()
    tap.eq(rc, 0, "SIGTERM stops the daemon (exit 0)")
    tap.ok("the sandboxes stay running" in err, "its log says the sandboxes stay running", err)
    states = {x["id"]: x["state"] for x in env.ls()}
    tap.ok(states.get(c) == "running" and states.get(b, "").startswith("aborted"),
           "the sandboxes are still there after the daemon stopped", str(states))
    tap.eq(env.exec(c, "true").returncode, 0, "a sandbox still runs execs with no daemon")
    tokf = os.path.join(env.root, "metrics.token")
    with open(tokf, "w") as f:
        f.write("t0ken-zq7\n")
    os.chmod(tokf, 0o600)
    d2 = Daemon(env, "--metrics-token", tokf)
    code, _, _ = get(d2.port)
    tap.eq(code, 401, "with --metrics-token, a scrape without it is 401")
    code, _, _ = get(d2.port, "wrong")
    tap.eq(code, 401, "a wrong token is 401")
    d2.tok = "t0ken-zq7"
    now = d2.scrape()
    tap.eq(now.get("sandglass_host_metrics_refusals_total"), 2.0, "both refusals are counted")
    down = [k for k, v in before.items() if (k.endswith("_total") and "refusals" not in k and "refill" not in k)
            and now.get(k, 0) < v]
    tap.ok(not down, "a restarted daemon's counters go on from the same values", str(down))
    key = 'sandglass_host_execs_total{outcome="ok"}'
    await_true(lambda: delta(d2.scrape(), before, key) == 1, "the exec run while no daemon ran is counted")
    p = env.run("host", "--metrics-listen", "127.0.0.1:0", timeout=T)
    tap.ok(p.returncode == 1 and b"another sandglass host runs" in p.stderr,
           "a second daemon on the same state directory is refused", p.stderr.decode())
    return d2


def spares(env):
    """The spares the pool lists (`ls` does not show them)."""
    d = os.path.join(env.state, "pool")
    return sorted(n for n in os.listdir(d) if not n.startswith(".") and n != "size"
                  and os.path.exists(os.path.join(env.state, "sb", n, "meta.json")))


def pool_case(env, d):
    env.run("pool", "2", check=True, timeout=120)
    have = spares(env)
    tap.eq(len(have), 2, "sandglass pool 2 made two spares")
    env.run("destroy", have[0], check=True)
    await_true(lambda: len(spares(env)) == 2 and have[0] not in spares(env), "the daemon makes a new spare",
               timeout=120)
    now = d.scrape()
    tap.eq(now.get("sandglass_host_pool_ready"), 2.0, "pool_ready is 2 again")
    tap.ok(now.get("sandglass_host_pool_refills_total", 0) >= 1 and
           now.get("sandglass_host_pool_refill_failures_total") == 0, "the daemon refilled it",
           str({k: v for k, v in now.items() if "pool" in k}))
    tap.eq(now.get('sandglass_host_sandboxes{state="spare"}'), 2.0, "sandboxes: 2 spares")
    env.run("pool", "0", check=True, timeout=120)


def main():
    if os.geteuid() != 0:
        tap.skip("sandglass host", "needs root")
        tap.done()
    env = Env()
    try:
        bad_options(env)
        d = Daemon(env)
        b, _ = counters_case(env, d)
        bad_file_case(env, d, b)
        d2 = restart_case(env, d, b)
        pool_case(env, d2)
        rc, _ = d2.stop()
        tap.eq(rc, 0, "the daemon stops on SIGTERM")
    except Exception as e:  # noqa: BLE001 - a test must report, not crash
        import traceback
        tap.ok(False, "raised", f"{e}\n{traceback.format_exc()}")
    finally:
        env.cleanup()
    tap.done()


main()
