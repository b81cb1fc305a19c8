#!/usr/bin/env python3
"""Capture end to end: captured sandboxes (created with a task) against the
real ingest on an ephemeral port with a real SQLite store. Every assertion
reads what the store committed (sqlite3 on the ingest's database file).

Also the home of the helpers test_faults.py and bench/bench_latency.py
import: CapEnv (an sgtest.Env with an ingest, a store reader and a
sanitizer-report scan) and Ingest (start, SIGKILL, restart on the same
port). TAP output, stdlib only.
"""
from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import signal
import sqlite3
import struct
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import SANDGLASS, SANDGLASSD, Env, _exit_on_sigterm, children, comm, pid_alive, tap, wait_for  # noqa: E402

SAN_PATTERNS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer")


class Ingest:
    """The real ingest (`sandglassd ingest`) on 127.0.0.1, restartable on
    the same port."""

    def __init__(self, env: dict, db: str, secret: str, log: str, port: int = 0) -> None:
        self.env, self.db, self.secret, self.log = env, db, secret, log
        self.port = port
        self.proc: subprocess.Popen | None = None
        self.start()

    def start(self, deadline_s: float = 10.0) -> None:
        end = time.monotonic() + deadline_s
        while True:
            logf = open(self.log, "a")
            p = subprocess.Popen([SANDGLASSD, "ingest", "--listen", f"127.0.0.1:{self.port}",
                                  "--store", f"sqlite:{self.db}", "--secret", self.secret],
                                 stdout=subprocess.PIPE, stderr=logf, env=self.env, text=True)
            logf.close()
            line = p.stdout.readline()
            if line.startswith("listening on ws://127.0.0.1:"):
                self.port = int(line.rsplit(":", 1)[1])
                self.proc = p
                return
            p.wait()
            # the old listener's port may still be held for a moment
            if time.monotonic() > end:
                raise RuntimeError(f"ingest did not start on port {self.port}: {line!r}")
            time.sleep(0.05)

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def http_base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.alive():
            self.proc.send_signal(sig)
            if sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):
                self.proc.wait(timeout=20)

    def http(self, path: str):
        # reads need a read token: an operator one from the ingest's secret
        tok = subprocess.run([SANDGLASSD, "token", "--read", "--secret", self.secret],
                             capture_output=True, text=True, env=self.env, check=True).stdout.strip()
        req = urllib.request.Request(self.http_base + path, headers={"Authorization": f"Bearer {tok}"})
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read())


class CapEnv(Env):
    """A private state dir, a real ingest with its SQLite store, helpers to
    read the store, and the sanitizer-report scan."""

    def __init__(self) -> None:
        super().__init__()
        self.san_dir = os.path.join(self.root, "san")
        os.makedirs(self.san_dir)
        # Sanitizer reports of every process we start (supervisors too, and
        # their shutdown leak checks, after their state dir is gone) land
        # in files here; supervisor.log is scanned as well.
        for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"):
            prev = self.env.get(var, "")
            self.env[var] = (prev + ":" if prev else "") + \
                f"log_path={self.san_dir}/{var.split('_')[0].lower()}"
        self.secret = os.path.join(self.root, "secret")
        self.db = os.path.join(self.root, "events.db")
        self.ingest = Ingest(self.env, self.db, self.secret, os.path.join(self.root, "ingest.log"))
        self.sup_logs: dict[str, str] = {}
        self.watched: dict[int, str] = {}  # pid -> comm of processes whose exit we await

    # ---- sandboxes
    def create_captured(self, *args: str, task: str = "T") -> str:
        return self.create("--task", task, "--ingest", self.ingest.ws, "--secret", self.secret, *args)

    def sbdir(self, sid: str, rel: str = "") -> str:
        return os.path.join(self.state, "sb", sid, rel)

    def workspace(self, sid: str) -> str:
        return json.load(open(self.sbdir(sid, "meta.json")))["workspace"]

    def keep_log(self, sid: str) -> None:
        """Saves the supervisor log (destroy removes the state dir) and
        notes the supervisor and its workers: their exit-time leak reports
        come after destroy answers, so the scan waits for them to exit."""
        try:
            self.sup_logs[sid] = open(self.sbdir(sid, "supervisor.log"), errors="replace").read()
        except FileNotFoundError:
            pass
        try:
            pid = json.load(open(self.sbdir(sid, "meta.json")))["supervisor_pid"]
        except (OSError, ValueError, KeyError):
            return
        if pid_alive(pid):
            self.watched[pid] = comm(pid)
            for c in children(pid):
                self.watched[c] = comm(c)

    def destroy(self, sid: str, *args: str) -> subprocess.CompletedProcess:
        self.keep_log(sid)
        return self.run("destroy", sid, *args, timeout=60)

    # ---- the store
    # The readers raise on every error (a missing table, an unreadable file):
    # an empty answer would make "nothing lost" and "no duplicate" checks
    # pass on a store that holds nothing.
    def _query(self, sql: str, args: tuple) -> list[tuple]:
        con = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=30)
        try:
            return con.execute(sql, args).fetchall()
        finally:
            con.close()

    def rows(self, sid: str) -> list[dict]:
        return [{"seq": s, "kind": k, "payload": json.loads(p)} for s, k, p in
                self._query("SELECT seq, kind, payload FROM sg_events WHERE sandbox=? ORDER BY seq", (sid,))]

    def seqs(self, sid: str) -> list[int]:
        return [s for (s,) in self._query("SELECT seq FROM sg_events WHERE sandbox=? ORDER BY seq", (sid,))]

    def count_all(self, sid: str) -> int:
        return self._query("SELECT count(*) FROM sg_events WHERE sandbox=?", (sid,))[0][0]

    def wait_rows(self, sid: str, pred, timeout: float = 60.0) -> list[dict]:
        """The rows once pred holds, or at the timeout (the caller's check
        then fails). Only a busy database is retried; any other error raises."""
        end = time.monotonic() + timeout
        while True:
            try:
                r = self.rows(sid)
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e) or time.monotonic() > end:
                    raise
                time.sleep(0.05)
                continue
            if pred(r) or time.monotonic() > end:
                return r
            time.sleep(0.02)

    def run_exec(self, sid: str, script: str, *opts: str, timeout: float = 60.0, hold=None, **kw):
        """Runs `sh -c script` and returns (process, the exec's events from
        its stdin to the activity after its result), waiting for the store.
        `process` events (test_procevents.py checks them) are left out of
        the list, whose order they would make depend on timing; the whole
        span is in self.last_span.

        hold: the exec's stdin is a pipe the test holds open (a script that
        ends reading it, `cat >/dev/null`, runs on) until hold(rows of the
        store since the exec's stdin event) is true, then closed; whether
        it came true before the timeout is in self.held."""
        if hold is None:
            p = self.run("exec", sid, *opts, "--", "/bin/sh", "-c", script, **kw)
        else:
            p = self._exec_held(sid, script, opts, hold, timeout)

        def span(rows):
            start = None
            for i, r in enumerate(rows):
                if r["kind"] == "stdin" and r["payload"].get("line") == script:
                    start = i
            if start is None:
                return None
            for j in range(start, len(rows)):
                if rows[j]["kind"] in ("run_result", "test_result"):
                    for k in range(j + 1, len(rows)):
                        if rows[k]["kind"] == "activity":
                            return rows[start:k + 1]
            return None
        rows = self.wait_rows(sid, lambda r: span(r) is not None, timeout)
        self.last_span = span(rows) or []
        return p, [r for r in self.last_span if r["kind"] != "process"]

    def _exec_held(self, sid: str, script: str, opts, hold, timeout: float) -> subprocess.CompletedProcess:
        args = [SANDGLASS, "exec", sid, *opts, "--", "/bin/sh", "-c", script]
        p = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=self.env)
        out: dict[str, bytes] = {}
        readers = [threading.Thread(target=lambda k, f: out.__setitem__(k, f.read()), args=(k, f), daemon=True)
                   for k, f in (("out", p.stdout), ("err", p.stderr))]
        for t in readers:
            t.start()

        def since(rows):
            st = [i for i, r in enumerate(rows) if r["kind"] == "stdin" and r["payload"].get("line") == script]
            return rows[st[-1]:] if st else []
        rows = self.wait_rows(sid, lambda r: p.poll() is not None or hold(since(r)), timeout)
        self.held = p.poll() is None and hold(since(rows))
        p.stdin.close()
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        for t in readers:
            t.join(timeout)
        return subprocess.CompletedProcess(args, p.returncode, out.get("out", b""), out.get("err", b""))

    # ---- spool
    def spool_records(self, sid: str, base: str | None = None) -> list[tuple[int, dict]]:
        """(seq, frame) of every event record in the spool's segments (blob
        records, type 1: file contents and recordings, take no seq of their own)."""
        out = []
        for seg in sorted(glob.glob(os.path.join(base or self.sbdir(sid, "spool"), "seg-*.log"))):
            b = open(seg, "rb").read()
            off = 0
            while off + 24 <= len(b) and b[off:off + 4] == b"SGR1":
                n, seq, rtype = struct.unpack_from("<IqI", b, off + 4)
                if off + 24 + n > len(b):  # read while it is written: the rest comes
                    break
                if rtype == 0:
                    out.append((seq, json.loads(b[off + 24:off + 24 + n])))
                off += 24 + n
        return out

    def spool_bytes(self, sid: str) -> int:
        return sum(os.path.getsize(f) for f in glob.glob(self.sbdir(sid, "spool/seg-*.log")))

    # ---- sanitizers
    def sanitizer_reports(self) -> list[str]:
        hits = []
        texts = dict(self.sup_logs)
        for f in glob.glob(os.path.join(self.state, "sb", "*", "supervisor.log")):
            texts[f] = open(f, errors="replace").read()
        for f in glob.glob(os.path.join(self.san_dir, "*")) + [self.ingest.log]:
            try:
                texts[f] = open(f, errors="replace").read()
            except FileNotFoundError:
                pass
        for name, t in texts.items():
            for line in t.splitlines():
                if any(p in line for p in SAN_PATTERNS):
                    hits.append(f"{os.path.basename(name)}: {line.strip()}")
        return hits

    def report_heads(self, hits: list[str]) -> list[str]:
        """The first 40 lines of each sanitizer report file with a hit: the
        files go with the test's directory, the diagnostic keeps the stack."""
        out = []
        for name in sorted({h.split(": ", 1)[0] for h in hits}):
            path = os.path.join(self.san_dir, name)
            try:
                with open(path, errors="replace") as f:
                    head = f.read().splitlines()[:40]
            except OSError:  # a log scanned by its lines only (supervisor, ingest)
                continue
            out += [f"--- {name} (head):"] + head
        return out

    def check_sanitizers(self) -> None:
        hits = self.sanitizer_reports()
        tap.ok(not hits, "no sanitizer report in the supervisor logs, the ingest log or the "
               "processes' sanitizer logs", "\n".join(hits[:30] + self.report_heads(hits)))

    def cleanup(self, check: bool = True, into: list | None = None) -> None:
        """Destroys what is left, stops the ingest, scans for sanitizer
        reports (a TAP line when check; into: appended there instead, as
        (processes left, report lines), for a caller that checks several
        Envs in one line: combined_checks), removes the files."""
        try:
            for sb in self.ls():
                self.destroy(sb["id"])
        except Exception:  # noqa: BLE001
            pass
        self.run("gc", timeout=60)
        if self.ingest.alive():
            self.ingest.kill(signal.SIGCONT)
            self.ingest.kill(signal.SIGTERM)  # waits for it to exit
        # Exit-time leak reports are written when a process exits, after
        # destroy answered: wait for every supervisor, worker and the uplink
        # daemon to be gone (by pid) before reading the reports.
        up = uplink_pid(self.state)
        if up:
            os.kill(up, signal.SIGTERM)
            self.watched[up] = "sandglass-uplin"
        left = [p for p, c in self.watched.items() if not wait_exit(p, c, 120)]
        if into is not None:
            hits = self.sanitizer_reports()
            into.append(({p: self.watched[p] for p in left}, hits[:30] + self.report_heads(hits)))
        elif check:
            tap.ok(not left, "every supervisor, worker and uplink daemon exited (their reports are complete)",
                   repr({p: self.watched[p] for p in left}))
            self.check_sanitizers()
        super().cleanup()


def creator_check(rows: list[dict], meta: dict, what: str) -> dict:
    """Issue 24: the `sandbox` created event names who created the sandbox,
    the creating process as the record keeps it (`creator`): this test's
    (effective) uid, its user name on this host (or null), a pid. Returns
    the event's actor ({} when none)."""
    import pwd
    uid = os.geteuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = None
    created = [r["payload"] for r in rows if r["kind"] == "sandbox" and r["payload"].get("state") == "created"]
    actor = created[0].get("actor") if len(created) == 1 else None
    ok(isinstance(actor, dict) and actor.get("uid") == uid and actor.get("user") == user
       and isinstance(actor.get("pid"), int) and actor["pid"] > 0 and set(actor) == {"uid", "user", "pid"},
       f"{what}: the sandbox created event's actor is its creator (uid {uid}, user {user}, a pid)", created)
    ok(actor and meta.get("creator") == actor, f"{what}: as the sandbox record keeps it (creator)",
       {"record": meta.get("creator"), "event": actor})
    return actor if isinstance(actor, dict) else {}


def seeds_by_operator(rows: list[dict], cut: int, actor: dict, what: str) -> None:
    """Every seed file_diff (rows before index cut: the session's start)
    names its cause, operator {action: "seed", actor: the creator}, and no
    change after cut (a learner's) carries that cause."""
    seeds = [r["payload"] for r in rows[:cut] if r["kind"] == "file_diff" and r["payload"].get("seed")]
    ok(seeds and all(d.get("operator") == {"action": "seed", "actor": actor} and "exec_id" not in d
                     and "command_id" not in d for d in seeds),
       f"{what}: every seed file_diff's cause is the creator's seeding (operator action seed, its actor)",
       repr([d for d in seeds if d.get("operator") != {"action": "seed", "actor": actor}][:5])[:1500])
    later = [r["payload"] for r in rows[cut:] if r["kind"] in ("file_diff", "bulk")]
    ok(later and not any(isinstance(d.get("operator"), dict) and d["operator"].get("action") == "seed"
                         for d in later),
       f"{what}: no later change carries the seed's cause", repr(later)[:1500])


def side_by_side(cases: list, jobs: int = 2) -> tuple[dict, list]:
    """Runs each case (name, fn, own_env) as a tap case, `jobs` at a time in
    threads: fn(env) in a CapEnv of its own when own_env (its exit and
    sanitizer checks kept for combined_checks), else fn(). Their TAP
    results are recorded, not printed: the caller replays them (tap.replay)
    in its own fixed order. Returns (results by name, the Envs' checks); a
    case missing from the first did not finish."""
    _exit_on_sigterm()  # here: each Env sets it up, but a thread cannot
    into: list = []
    out: dict[str, list] = {}
    queue = list(cases)
    lock = threading.Lock()

    def one(name: str, fn, own_env: bool) -> None:
        def case() -> None:
            if not own_env:
                fn()
                return
            env = CapEnv()
            try:
                fn(env)
            finally:
                env.cleanup(into=into)
        out[name] = tap.recorded(name, case)

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                c = queue.pop(0)
            one(*c)
    workers = [threading.Thread(target=worker, daemon=True) for _ in range(jobs)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return out, into


def replay(out: dict, name: str) -> None:
    """A case's recorded results (side_by_side), or a failure if it did not finish."""
    if name in out:
        tap.replay(out[name])
    else:
        ok(False, f"{name}: did not finish")


def combined_checks(results: list) -> None:
    """CapEnv.cleanup's two checks, once for several Envs (their `into`)."""
    left = {p: c for lf, _ in results for p, c in lf.items()}
    ok(results and not left, "every supervisor, worker and uplink daemon exited (their reports are complete)",
       repr(left))
    hits = [h for _, hs in results for h in hs]
    ok(results and not hits, "no sanitizer report in the supervisor logs, the ingest log or the "
       "processes' sanitizer logs", "\n".join(hits))


def ok(cond, name: str, diag="") -> bool:
    """tap.ok with any diagnostic value (repr unless a str)."""
    return tap.ok(bool(cond), name, diag if isinstance(diag, str) else repr(diag))


def contiguous(seqs: list[int]) -> bool:
    """0..N-1 without gap or duplicate, and not empty: an empty store is
    a lost stream, not a clean one."""
    return bool(seqs) and seqs == list(range(len(seqs)))


def uplink_pid(state: str) -> int:
    """The uplink daemon of a state dir, 0 if none (sgtest.uplink_daemon_pid)."""
    from sgtest import uplink_daemon_pid
    return uplink_daemon_pid(state)


def wait_exit(pid: int, name: str, timeout: float = 120.0) -> bool:
    """Waits for a process (not our child) to exit: gone, a zombie, or the
    pid reused by another program."""
    return wait_for(lambda: not pid_alive(pid) or comm(pid) != name, timeout, 0.02)


def kinds(rows: list[dict]) -> list[str]:
    return [r["kind"] for r in rows]


# ------------------------------------------------------------------- tests


def main() -> None:
    env = CapEnv()
    try:
        run_tests(env)
    finally:
        env.cleanup()
    tap.case("heartbeats and the uplink daemon's idle exit")(test_heartbeat_and_idle_exit)
    tap.done()


HEARTBEAT_MS = 200    # SANDGLASS_CAPTURE_HEARTBEAT_MS here (30 s by default)
UPLINK_IDLE_MS = 1500  # SANDGLASS_UPLINK_IDLE_MS here (30 s by default)


def test_heartbeat_and_idle_exit() -> None:
    """The README's idle heartbeats and the uplink daemon's exit once no
    sandbox uses it, with both periods shortened through their environment
    variables (the defaults are the constants SG_CAPTURE_HEARTBEAT_MS and
    SG_UPLINKD_IDLE_MS). No check depends on the machine's speed: heartbeats
    are counted, not timed, and the daemon's exit is waited for."""
    env = CapEnv()
    env.env["SANDGLASS_CAPTURE_HEARTBEAT_MS"] = str(HEARTBEAT_MS)
    env.env["SANDGLASS_UPLINK_IDLE_MS"] = str(UPLINK_IDLE_MS)
    try:
        sid = env.create_captured()
        ws = env.workspace(sid)

        def beats(rows, state):
            # activity events outside any exec: after `starting`, not between
            # an exec's stdin and its result
            return [r for r in rows[2:] if r["kind"] == "activity" and r["payload"].get("state") == state]
        # 12 heartbeats take at least 12 * 200 ms = 2.4 s: longer than the
        # daemon's idle period, so it has had every chance to leave early.
        rows = env.wait_rows(sid, lambda r: len(beats(r, "idle")) >= 12, 120)
        hb = beats(rows, "idle")
        ok(len(hb) >= 12 and all(isinstance(r["payload"].get("spooled"), int) for r in hb)
           and not any(r["kind"] in ("stdin", "command") for r in rows),
           "idle heartbeats come without any exec: activity idle, with spooled", rows[:6])
        up = uplink_pid(env.state)
        ok(up > 0, "the uplink daemon runs while a captured sandbox uses it")
        # a heartbeat while an exec runs says so
        bg = env.spawn([os.environ.get("SANDGLASS_BIN", "sandglass"), "exec", sid, "--", "/bin/sh", "-c",
                        "while [ ! -e /workspace/stop ]; do sleep 0.02; done"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        rows = env.wait_rows(sid, lambda r: any(x["kind"] == "activity" and x["payload"].get("state") == "command"
                                                and x["seq"] > hb[-1]["seq"] and
                                                not any(y["kind"] == "command" and y["seq"] == x["seq"] + 1
                                                        for y in r) for x in r), 120)
        cmd_beats = [x for x in rows if x["kind"] == "activity" and x["payload"].get("state") == "command"
                     and x["seq"] > hb[-1]["seq"]]
        # the exec's own `activity command` precedes its `command` event; a
        # heartbeat is any other one
        own = {x["seq"] - 1 for x in rows if x["kind"] == "command"}
        beats_running = [x for x in cmd_beats if x["seq"] not in own]
        ok(beats_running, "a heartbeat during a running exec has state command", [x["seq"] for x in cmd_beats])
        cmd_ev = next((x for x in rows if x["kind"] == "command" and "stop" in x["payload"].get("cmd", "")), None)
        named = [x["payload"].get("running") for x in beats_running]
        ok(cmd_ev is not None and all(isinstance(n, list) and len(n) == 1 and
                                      n[0].get("exec_id") == cmd_ev["payload"].get("exec_id") and
                                      n[0].get("cmd") == cmd_ev["payload"].get("cmd") and
                                      isinstance(n[0].get("for_s"), float) and n[0]["for_s"] >= 0
                                      for n in named),
           "it names the running command (exec_id, cmd) and how long it has run", named[:2])
        shown = env.run("events", "--sandbox", sid, "--all", "--ingest", env.ingest.http_base, "--secret",
                        env.secret)  # heartbeats are plumbing: shown with --all
        ok(re.search(r"activity\s.*command .*; running: exec \d+ `.*stop.*` for \d+ s", shown.stdout.decode())
           is not None, "sandglass events shows the running command", shown.stdout.decode()[-1500:])
        open(os.path.join(ws, "stop"), "w").close()
        bg.wait(120)
        tap.eq(bg.returncode, 0, "the running exec ended when told to")
        ok(uplink_pid(env.state) == up, "the same uplink daemon still serves (no idle exit with a session)",
           f"{up} -> {uplink_pid(env.state)}")
        r = env.destroy(sid, "--json")
        ok(r.returncode == 0 and json.loads(r.stdout or b"{}").get("events_undelivered") == 0,
           "destroy delivers everything", r.stdout + r.stderr)
        ok(wait_exit(up, "sandglass-uplin", 120), "the uplink daemon exits once no sandbox uses it")
        log = open(os.path.join(env.state, "uplink.log"), errors="replace").read()
        ok(f"idle for {UPLINK_IDLE_MS} ms: exiting" in log, "it says it left for idleness", log[-1500:])
    finally:
        env.cleanup()


def run_tests(env: CapEnv) -> None:
    sid = env.create_captured()
    ws = env.workspace(sid)

    @tap.case("sandbox created, activity starting")
    def _():
        rows = env.wait_rows(sid, lambda r: len(r) >= 2)
        ok(rows and rows[0]["kind"] == "sandbox" and rows[0]["payload"]["state"] == "created"
               and rows[0]["payload"]["learner"] == "t" and rows[0]["payload"]["task"] == "T",
               "first event: sandbox created, with learner and task", rows[:2])
        ok(len(rows) > 1 and rows[1]["kind"] == "activity" and rows[1]["payload"]["state"] == "starting"
               and isinstance(rows[1]["payload"].get("spooled"), int),
               "second event: activity starting, with spooled", rows[:2])

    @tap.case("one exec: events in order")
    def _():
        # The command sleeps 0.2 s: its duration can be no shorter.
        script = 'echo out1; echo err1 >&2; printf "a\\nb\\n" > first.txt; sleep 0.2; exit 3'
        t0 = time.monotonic()
        p, ev = env.run_exec(sid, script)
        took = time.monotonic() - t0  # the exec ran inside this span (run_exec waits for the store after)
        tap.eq(p.returncode, 3, "exec returns the command's status")
        tap.eq(kinds(ev), ["stdin", "activity", "command", "file_diff", "stdout", "stdout",
                           "run_result", "activity"], "stdin, activity, command, file_diff, stdout x2, "
               "run_result, activity")
        seqs = [r["seq"] for r in env.last_span]
        ok(seqs == list(range(seqs[0], seqs[0] + len(seqs))) if seqs else False,
               "the exec's events have consecutive seqs", seqs)
        d = {r["kind"]: r["payload"] for r in ev}
        tap.eq(ev[1]["payload"]["state"] if ev else None, "command", "activity command before the command")
        ok(d.get("command", {}).get("cmd") == script and d["command"].get("argv") == ["/bin/sh", "-c", script]
               and d["command"].get("cwd") == "/workspace", "command carries cmd, argv and cwd", d.get("command"))
        fd = ev[3]["payload"] if len(ev) > 3 else {}
        ok(fd.get("path") == "first.txt" and fd.get("change") == "created" and fd.get("size") == 4
               and "+a\n+b\n" in fd.get("diff", ""), "file_diff created with a unified diff", fd)
        outs = [r["payload"] for r in ev if r["kind"] == "stdout"]
        ok([(o["stream"], o["data"]) for o in outs] == [("stdout", "out1\n"), ("stderr", "err1\n")],
               "stdout and stderr kept apart", outs)
        rr = d.get("run_result", {})
        # duration_s: no shorter than the command's sleep, no longer than the
        # span the test saw the exec run in (both on the monotonic clock: an
        # order of events, no speed asked of the machine)
        ok(rr.get("cmd") == script and rr.get("exit_code") == 3 and rr.get("timed_out") is False
               and isinstance(rr.get("duration_s"), float) and 0.2 <= rr["duration_s"] <= took,
               "run_result: cmd, exit_code, duration_s, timed_out", f"{rr}; the test saw {took:.3f} s")
        acts = [r["payload"] for r in ev if r["kind"] == "activity"]
        ok(all(isinstance(a.get("spooled"), int) and a["spooled"] >= 0 for a in acts)
               and acts[-1]["state"] == "idle", "activity heartbeats carry spooled; idle after", acts)

    @tap.case("output: last 64 KiB per stream, invalid UTF-8 replaced")
    def _():
        script = "seq 1 30000; printf 'bad:\\377\\376:end\\n' >&2"
        p, ev = env.run_exec(sid, script)
        outs = {r["payload"]["stream"]: r["payload"] for r in ev if r["kind"] == "stdout"}
        full = "".join(f"{i}\n" for i in range(1, 30001))
        o = outs.get("stdout", {})
        ok(o.get("bytes") == len(full) and o.get("truncated") is True
               and o.get("data") == full[-65536:], "stdout keeps the last 64 KiB, with total bytes",
               {k: (v if k != "data" else len(v)) for k, v in o.items()})
        e = outs.get("stderr", {})
        tap.eq(e.get("data"), "bad:\ufffd\ufffd:end\n", "invalid UTF-8 replaced by U+FFFD, rest kept")

    @tap.case("test runners give test_result")
    def _():
        p = env.sh(sid, "mkdir -p bin && printf '#!/bin/sh\\necho 3 passed\\nexit 0\\n' > bin/pytest && "
                   "chmod +x bin/pytest && printf 'test:\\n\\t@echo make-tested\\n' > Makefile && "
                   "echo hello > test.txt")
        tap.eq(p.returncode, 0, "set up a fake pytest and a Makefile")
        _, ev = env.run_exec(sid, "PATH=/workspace/bin:$PATH pytest -q")
        tr = [r["payload"] for r in ev if r["kind"] == "test_result"]
        ok(len(tr) == 1 and tr[0]["exit_code"] == 0 and "cmd" in tr[0] and "duration_s" in tr[0]
               and tr[0]["timed_out"] is False and not any(r["kind"] == "run_result" for r in ev),
               "pytest gives test_result", ev)
        _, ev = env.run_exec(sid, "make test")
        ok(any(r["kind"] == "test_result" for r in ev), "make test gives test_result", kinds(ev))
        _, ev = env.run_exec(sid, "cat test.txt")
        ok(any(r["kind"] == "run_result" for r in ev) and not any(r["kind"] == "test_result" for r in ev),
               "cat test.txt gives run_result", kinds(ev))

    def diffs(ev):
        return [r["payload"] for r in ev if r["kind"] == "file_diff"]

    @tap.case("file_diff for shell-made changes")
    def _():
        env.sh(sid, "printf 'one\\ntwo\\nthree\\n' > m.txt")
        _, ev = env.run_exec(sid, "printf 'one\\nTWO\\nthree\\n' > m.txt")
        d = diffs(ev)
        ok(len(d) == 1 and d[0]["change"] == "modified" and d[0]["path"] == "m.txt"
               and "-two\n+TWO\n" in d[0]["diff"] and d[0]["added"] == 1 and d[0]["removed"] == 1,
               "modified, with a unified diff", d)
        _, ev = env.run_exec(sid, "rm m.txt")
        d = diffs(ev)
        ok(len(d) == 1 and d[0]["change"] == "deleted" and d[0]["path"] == "m.txt", "deleted", d)
        env.sh(sid, "echo moving > r1.txt")
        _, ev = env.run_exec(sid, "mv r1.txt r2.txt")
        d = diffs(ev)
        ok(len(d) == 1 and d[0]["change"] == "renamed" and d[0]["old_path"] == "r1.txt"
               and d[0]["path"] == "r2.txt", "renamed: one event with old_path and path", d)
        _, ev = env.run_exec(sid, "head -c 49000 /dev/urandom | base64 > big.txt")
        d = diffs(ev)
        data = open(os.path.join(ws, "big.txt"), "rb").read()
        ok(len(d) == 1 and d[0].get("truncated") is True and d[0]["size"] == len(data) > 65536
               and d[0].get("sha256") == hashlib.sha256(data).hexdigest() and "diff" not in d[0],
               "a file over 64 KiB: truncated, size, sha256, no diff", {k: v for k, v in (d[0] if d else {}).items()})
        _, ev = env.run_exec(sid, "printf '\\000\\001\\002binary\\000' > b.bin")
        d = diffs(ev)
        data = open(os.path.join(ws, "b.bin"), "rb").read()
        ok(len(d) == 1 and d[0].get("binary") is True and d[0]["size"] == len(data)
               and d[0].get("sha256") == hashlib.sha256(data).hexdigest() and "diff" not in d[0],
               "a binary file: binary, size, sha256, no diff", d)

    @tap.case("editor saves give exactly one event")
    def _():
        env.sh(sid, "printf 'v1\\n' > ed.txt")
        # As editors save (gedit/GIO, vim with writebackup): write a temp
        # file, fsync, close, rename it over the target at once.
        _, ev = env.run_exec(sid, "python3 -c \"import os; f=open('.ed.txt.tmp','w'); f.write('v2\\n'); "
                                  "f.flush(); os.fsync(f.fileno()); f.close(); os.replace('.ed.txt.tmp','ed.txt')\"")
        d = diffs(ev)
        # One event when the writer closes within SG_WATCH_CAP_MS (watch.h).
        # Its fsync may take longer on a loaded host (the workspace is a
        # loop-mounted disk): the temp file is then reported created when
        # that wait ends, and the rename over ed.txt replaces it. Either
        # way ed.txt ends as one change to v2 and nothing else is reported.
        on_target = [x for x in d if x["path"] == "ed.txt"]
        slow = [x for x in d if x["path"] == ".ed.txt.tmp"]
        v2 = hashlib.sha256(b"v2\n").hexdigest()
        ok(len(on_target) == 1 and len(on_target) + len(slow) == len(d) and len(slow) <= 1
           and (on_target[0]["change"] == "modified" and "-v1\n+v2\n" in on_target[0]["diff"] and not slow
                or on_target[0]["change"] == "renamed" and on_target[0].get("replaced") is True
                and on_target[0].get("sha256") == v2 and slow and slow[0]["change"] == "created"),
           "write temp + rename over: one change of ed.txt to v2 (one modified, unless the writer "
           "outlasted the watcher's wait)", d)
        _, ev = env.run_exec(sid, "python3 -c \"import time; f=open('ed.txt','r+'); f.truncate(0); f.flush(); "
                                  "time.sleep(0.02); f.write('v3\\n'); f.close()\"")
        d = diffs(ev)
        ok(len(d) == 1 and d[0]["path"] == "ed.txt" and d[0]["change"] == "modified"
               and "-v2\n+v3\n" in d[0]["diff"], "truncate + rewrite (one open, a pause): one modified", d)
        _, ev = env.run_exec(sid, "printf 'v3\\n' > ed.txt")
        tap.eq(diffs(ev), [], "rewriting the same content: no event")
        # A rename over an existing file in a later exec (not a burst): one
        # event for the target, carrying the new content's hash.
        env.sh(sid, "printf 'v4\\n' > .ed.swp")
        _, ev = env.run_exec(sid, "mv .ed.swp ed.txt")
        d = diffs(ev)
        data = open(os.path.join(ws, "ed.txt"), "rb").read()
        ok(len(d) == 1 and d[0]["path"] == "ed.txt" and d[0]["change"] in ("renamed", "modified")
           and d[0]["sha256"] == hashlib.sha256(data).hexdigest(),
           "mv of a known file over another: one event with the new content's hash", d)

    @tap.case("a new directory tree made at once")
    def _():
        _, ev = env.run_exec(sid, "mkdir -p t1/a/b/c && echo x > t1/a/b/c/deep.txt && echo y > t1/a/top.txt && "
                                  "mkdir t1/e")
        d = sorted((x["path"], x["change"], bool(x.get("dir"))) for x in diffs(ev))
        # the directories with files are implied by them; the empty one is
        # reported as a directory, so a rebuilt workspace has it too
        tap.eq(d, [("t1/a/b/c/deep.txt", "created", False), ("t1/a/top.txt", "created", False),
                   ("t1/e", "created", True)],
               "every file of the new tree reported, and the empty directory as one")
        p = env.run("events", "--sandbox", sid, "--kind", "file_diff", "--ingest", env.ingest.http_base,
                    "--secret", env.secret)
        ok(p.returncode == 0 and b"t1/e/ (directory created)" in p.stdout and b"+0 -0 t1/e" not in p.stdout,
           "events: the empty directory shows as a directory", p.stdout[-1500:])

    @tap.case("the exec's events are in the spool before exec returns")
    def _():
        before = env.spool_bytes(sid)
        env.ingest.kill(signal.SIGSTOP)  # nothing gets acked (or trimmed) meanwhile
        try:
            script = "echo spooled-before-return > sp.txt"
            p = env.run("exec", sid, "--", "/bin/sh", "-c", script)
            recs = env.spool_records(sid)
            after = env.spool_bytes(sid)
            mine = [f for _, f in recs if f["kind"] == "run_result" and f["payload"].get("cmd") == script]
            ok(p.returncode == 0 and after > before and len(mine) == 1,
                   "when exec returns, its run_result is on disk in the spool (which grew)",
                   f"{before} -> {after}, {len(mine)}")
            fds = [f for _, f in recs if f["kind"] == "file_diff" and f["payload"].get("path") == "sp.txt"]
            tap.eq(len(fds), 1, "and its file_diff")
            last_act = [f for _, f in recs if f["kind"] == "activity"][-1]
            ok(last_act["payload"]["state"] == "idle" and last_act["payload"]["spooled"] > 0,
                   "activity carries the unacknowledged count (ingest stopped)", last_act)
            ok(not any(r["payload"].get("cmd") == script for r in env.rows(sid)),
                   "not in the store while the ingest is stopped")
        finally:
            env.ingest.kill(signal.SIGCONT)
        rows = env.wait_rows(sid, lambda r: any(x["kind"] == "run_result" and x["payload"]["cmd"] == script
                                                for x in r), timeout=120)
        ok(any(x["kind"] == "run_result" and x["payload"]["cmd"] == script for x in rows),
               "the store has it after the ingest resumes")

    @tap.case("limits: timeout and OOM")
    def _():
        p, ev = env.run_exec(sid, "sleep 5", "--timeout", "0.5")
        rr = [r["payload"] for r in ev if r["kind"] == "run_result"]
        lim = [r["payload"] for r in ev if r["kind"] == "limit"]
        ok(rr and rr[0]["timed_out"] is True, "run_result timed_out", rr)
        ok(len(lim) == 1 and lim[0]["what"] == "timeout" and lim[0]["cmd"] == "sleep 5",
               "limit event what: timeout", lim)
        oom = env.create_captured("--memory", "64M")
        p, ev = env.run_exec(oom, "head -c 200000000 /dev/zero | tail > /dev/null")
        lim = [r["payload"] for r in ev if r["kind"] == "limit"]
        rr = [r["payload"] for r in ev if r["kind"] == "run_result"]
        ok(any(x["what"] == "memory" for x in lim) and rr and rr[0].get("oom_killed") is True,
               "limit event what: memory after an OOM kill", ev[-3:])
        env.destroy(oom)

    @tap.case("checkpoint and rollback events")
    def _():
        env.sh(sid, "echo keep > ck.txt")
        p = env.run("checkpoint", sid, "--label", "mine", "--json", check=True)
        ck = json.loads(p.stdout)
        rows = env.wait_rows(sid, lambda r: any(x["kind"] == "checkpoint" and x["payload"].get("label") == "mine"
                                                for x in r))
        ev = [x["payload"] for x in rows if x["kind"] == "checkpoint" and x["payload"].get("label") == "mine"]
        ok(len(ev) == 1 and ev[0]["id"] == ck["id"] and ev[0]["files"] >= 1, "checkpoint event", ev)
        env.sh(sid, "echo changed > ck.txt; echo new > ck2.txt")
        p = env.run("rollback", sid, "--to", ck["id"], "--yes", "--json")
        tap.eq(p.returncode, 0, "rollback runs")
        rows = env.wait_rows(sid, lambda r: any(x["kind"] == "rollback" for x in r))
        rb = [x for x in rows if x["kind"] == "rollback"]
        ok(len(rb) == 1 and rb[0]["payload"]["to"] == ck["id"] and rb[0]["payload"]["restored"] is True
               and {c["path"] for c in rb[0]["payload"]["changes"]} >= {"ck.txt", "ck2.txt"},
               "rollback event: to, restored, changes", rb)
        # the restore changes the workspace from outside: the watcher reports it
        rows = env.wait_rows(sid, lambda r: {(x["payload"].get("path"), x["payload"].get("change"))
                                             for x in r if x["kind"] == "file_diff" and x["seq"] > rb[0]["seq"] - 2}
                             >= {("ck.txt", "modified"), ("ck2.txt", "deleted")}, timeout=60)
        got = {(x["payload"].get("path"), x["payload"].get("change"))
               for x in rows if x["kind"] == "file_diff" and rb and x["seq"] > rb[0]["seq"] - 2}
        ok(got >= {("ck.txt", "modified"), ("ck2.txt", "deleted")},
               "the rollback's own changes are reported as file_diff", got)

    @tap.case("session_abort")
    def _():
        p = env.run("abort", sid, "--reason", "stop now", "--json")
        tap.eq(p.returncode, 0, "abort runs")
        rows = env.wait_rows(sid, lambda r: any(x["kind"] == "session_abort" for x in r))
        sa = [x["payload"] for x in rows if x["kind"] == "session_abort"]
        ok(len(sa) == 1 and sa[0]["by"] == "operator" and "stop now" in sa[0]["reason"]
               and sa[0]["proof"]["processes_left"] == 0 and "caps" in sa[0], "session_abort event", sa)
        env.run("resume", sid, check=True)

    @tap.case("order and uniqueness of the whole stream; destroyed")
    def _():
        r = env.destroy(sid, "--json")
        res = json.loads(r.stdout or b"{}")
        ok(r.returncode == 0 and res.get("events_undelivered") == 0,
               "destroy delivers everything first (events_undelivered 0)", r.stdout + r.stderr)
        rows = env.rows(sid)
        ok(contiguous([x["seq"] for x in rows]), "the store holds seqs 0..N-1, no gap, no duplicate",
               [x["seq"] for x in rows][-5:])
        tail = [(x["kind"], x["payload"].get("state")) for x in rows[-2:]]
        tap.eq(tail, [("sandbox", "destroyed"), ("activity", "stopped")],
               "the stream ends with sandbox destroyed, activity stopped")

    @tap.case("nothing of the capture in the workspace")
    def _():
        s2 = env.create_captured()
        w2 = env.workspace(s2)
        env.sh(s2, "true")
        _, ev = env.run_exec(s2, "ls -A /workspace; ls -A /")
        inside = [r["payload"]["data"] for r in ev if r["kind"] == "stdout"]
        found = []
        for dp, dn, fn in os.walk(w2):
            found += [os.path.join(dp, x) for x in dn + fn]
        tap.eq(found, [], "the workspace stays empty on the host (the spool lives under the state dir)")
        ok(inside and "spool" not in inside[0] and "seg-" not in inside[0],
               "inside the sandbox no spool is visible", inside)
        ok(os.path.isdir(env.sbdir(s2, "spool")), "the spool is under <state>/sb/<id>/spool")
        env.destroy(s2)

    @tap.case("a sandbox without --task is not captured")
    def _():
        s3 = env.create()
        p = env.sh(s3, "echo shell-only > f.txt; cat f.txt")
        tap.eq(p.stdout, b"shell-only\n", "the pure-shell sandbox works")
        ok(not os.path.exists(env.sbdir(s3, "spool")), "no spool directory")
        meta = json.load(open(env.sbdir(s3, "meta.json")))
        ok(meta.get("ingest") is None and meta.get("task") is None, "no ingest, no task in its record", meta)
        env.destroy(s3)
        # No wait needed: a captured sandbox's destroy delivers everything
        # before it answers, so anything it sent would be stored by now.
        tap.eq(env.count_all(s3), 0, "no event at all in the store")
        sbs = env.ingest.http("/v1/sandboxes")["sandboxes"]
        ok(not any(s.get("sandbox") == s3 for s in sbs), "the ingest never heard of it", sbs)


if __name__ == "__main__":
    main()
