#!/usr/bin/env python3
"""Faults on the capture path, each against the real ingest and SQLite:
after recovery the store holds every event exactly once, in order (seqs
0..N-1, no gap, no duplicate; each exec's events once).

 a. the ingest SIGKILLed and restarted on the same port mid-stream
 b. the supervisor SIGKILLed mid-stream; the next exec revives it (--adopt)
 c. the ingest unreachable for a long stretch while the learner works
 d. destroy while the ingest is down; `sandglass flush` delivers later
 e. disk full: the state dir on a tiny tmpfs
 f. the per-host uplink daemon SIGKILLed mid-stream, twice

Each scenario has an Env of its own (state dir, ingest, store), and two
run side by side; their TAP lines are printed in one fixed order (a, b,
c, d, f, then e), as when they ran one after the other. TAP output,
stdlib only. Needs root (tmpfs mount in e; without it e is a TAP skip
with its reason, which CI counts as a failure).

No check depends on the machine's speed: faults are injected when the
stream has made progress (counted execs), never after a fixed time, and
every wait is for a condition, with a generous timeout, and is itself a check.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import comm, pid_alive, tap, uplink_daemon_pid, wait_for  # noqa: E402
from test_capture import CapEnv, combined_checks, contiguous, ok, replay, side_by_side  # noqa: E402

WAIT = 120.0  # generous: a loaded machine is slow, not broken


def waited(pred, what: str, timeout: float = WAIT, diag=None) -> bool:
    """A wait that is a check: the checks after it never run on nothing."""
    good = wait_for(pred, timeout, 0.01)
    ok(good, what, "" if good else (diag() if callable(diag) else (diag or "")))
    return good


class Stream(threading.Thread):
    """A learner at work: a loop of execs, each writing a file and printing.
    On a failed exec (the supervisor died under it) it waits for `resume`
    before going on, when given."""

    def __init__(self, env: CapEnv, sid: str, n: int, tag: str, gap: float = 0.0,
                 resume: threading.Event | None = None, until: threading.Event | None = None):
        super().__init__(daemon=True)
        self.env, self.sid, self.n, self.tag, self.gap = env, sid, n, tag, gap
        self.resume, self.until = resume, until
        self.results: list[tuple[str, int, bytes]] = []
        self.failed_once = threading.Event()

    def run(self) -> None:
        i = 0
        while i < self.n or (self.until is not None and not self.until.is_set()):
            script = f"echo {self.tag}-{i} > {self.tag}_{i % 7}.txt; echo {self.tag}-{i}"
            try:
                p = self.env.run("exec", self.sid, "--", "/bin/sh", "-c", script, timeout=60)
                self.results.append((script, p.returncode, p.stdout))
                if p.returncode != 0 and self.resume is not None:
                    self.failed_once.set()
                    self.resume.wait(30)
            except subprocess.TimeoutExpired:
                self.results.append((script, -1, b""))
            i += 1
            if self.gap:
                time.sleep(self.gap)

    def succeeded(self) -> list[str]:
        return [s for s, rc, out in self.results if rc == 0 and out.decode().strip() == s.rsplit(" ", 1)[1]]


def verify(env: CapEnv, sid: str, scripts: list[str], name: str) -> list[dict]:
    """The exactly-once, in-order checks on what the store holds, after a
    destroy that delivered everything: seqs 0..N-1 without gap or duplicate,
    ending with the destroy's own events (so nothing is missing at the end
    either), and each completed exec's stdin and result exactly once."""
    rows = env.rows(sid)
    seqs = [r["seq"] for r in rows]
    holes = sorted(set(range(max(seqs) + 1)) - set(seqs)) if seqs else []
    ok(contiguous(seqs), f"{name}: store seqs are 0..N-1, no gap, no duplicate",
       f"{len(seqs)} rows; missing {holes[:20]}")
    ok(rows[:1] and rows[0]["kind"] == "sandbox" and rows[0]["payload"].get("state") == "created"
       and [(x["kind"], x["payload"].get("state")) for x in rows[-2:]]
       == [("sandbox", "destroyed"), ("activity", "stopped")],
       f"{name}: the stream is whole: from sandbox created to sandbox destroyed, activity stopped",
       rows[:1] + rows[-2:])
    ok(scripts, f"{name}: there are completed execs to look for")
    res = {}
    stdin = {}
    for r in rows:
        if r["kind"] in ("run_result", "test_result"):
            res[r["payload"]["cmd"]] = res.get(r["payload"]["cmd"], 0) + 1
        if r["kind"] == "stdin":
            stdin[r["payload"]["line"]] = stdin.get(r["payload"]["line"], 0) + 1
    bad = [s for s in scripts if res.get(s) != 1 or stdin.get(s) != 1]
    ok(not bad, f"{name}: each of the {len(scripts)} completed execs has its stdin and result exactly once",
       [(s, stdin.get(s), res.get(s)) for s in bad[:10]])
    return rows


def destroy_all_delivered(env: CapEnv, sid: str, name: str) -> None:
    r = env.destroy(sid, "--json")
    res = json.loads(r.stdout or b"{}")
    ok(r.returncode == 0 and res.get("events_undelivered") == 0,
       f"{name}: destroy delivers everything (events_undelivered 0)", r.stdout + r.stderr)


def sup_pid(env: CapEnv, sid: str) -> int:
    return json.load(open(env.sbdir(sid, "meta.json")))["supervisor_pid"]


# ------------------------------------------------------------------- a


def test_ingest_killed(env: CapEnv) -> None:
    sid = env.create_captured()
    stop = threading.Event()
    st = Stream(env, sid, 1, "a", gap=0.01, until=stop)  # runs until stopped
    st.start()
    port = env.ingest.port
    for k in range(2):
        # mid-stream by progress: kill after some execs, restart after more
        # ran with the ingest down
        n = len(st.results)
        waited(lambda: len(st.results) >= n + 10, f"a: 10 more execs, then kill {k + 1}")
        env.ingest.kill(signal.SIGKILL)
        n = len(st.results)
        waited(lambda: len(st.results) >= n + 10, f"a: 10 more execs with the ingest down ({k + 1})")
        env.ingest.start()
    n = len(st.results)
    waited(lambda: len(st.results) >= n + 10, "a: 10 more execs with the ingest back")
    stop.set()
    st.join(600)
    ok(env.ingest.port == port, "a: the ingest came back on the same port")
    ok(not st.is_alive() and st.results and len(st.succeeded()) == len(st.results),
       f"a: every exec worked while the ingest was killed twice ({len(st.results)} execs)",
       [r for r in st.results if r[1] != 0][:5])
    destroy_all_delivered(env, sid, "a")
    verify(env, sid, st.succeeded(), "a")


# ------------------------------------------------------------------- b


def test_supervisor_killed(env: CapEnv) -> None:
    sid = env.create_captured()
    resume = threading.Event()
    all_ok: list[str] = []
    resumed_checks = []
    spool_snapshots: list[list[tuple[int, dict]]] = []
    for rnd in range(3):
        resume.clear()
        stop = threading.Event()
        st = Stream(env, sid, 1, f"b{rnd}", resume=resume, until=stop)  # runs until stopped
        st.start()
        waited(lambda: len(st.results) >= 5 + 4 * rnd, f"b{rnd}: the stream is under way")  # mid-stream
        pid = sup_pid(env, sid)
        os.kill(pid, signal.SIGKILL)
        waited(lambda: not pid_alive(pid), f"b{rnd}: the supervisor died")
        # What the dead supervisor left: every record on disk must reach the
        # store as it is (a reused seq would be dropped there as a duplicate).
        snap = env.spool_records(sid)
        # The learner's loop may already have revived the supervisor (its
        # next exec does that), which appends from `sandbox resumed` on:
        # what the dead one left ends before this round's resumed event.
        after = resumed_checks[-1][0] if resumed_checks else -1
        cut = [s for s, f in snap if s > after + 1 and f["kind"] == "sandbox"
               and f["payload"].get("state") == "resumed"]
        if cut:
            snap = [(s, f) for s, f in snap if s < cut[0]]
        spool_snapshots.append(snap)
        # the exec in flight fails (the loop then waits for `resume`), or the
        # next one revives the supervisor
        wait_for(lambda: st.failed_once.is_set() or sup_pid(env, sid) != pid, WAIT)
        resume.set()
        n = len(st.results)
        waited(lambda: len(st.results) >= n + 5, f"b{rnd}: the learner's loop went on after the supervisor died")
        stop.set()
        st.join(600)
        ok(not st.is_alive(), f"b{rnd}: the learner's loop ended when told to")
        npid = sup_pid(env, sid)
        ok(npid != pid and pid_alive(npid), f"b{rnd}: the next exec revived the supervisor (--adopt)",
           f"killed {pid}, now {npid} alive={pid_alive(npid)}; {len(st.results)} execs")
        failed = [r for r in st.results if r[1] != 0]
        ok(len(failed) <= 1, f"b{rnd}: at most the exec in flight at the kill failed", failed)
        all_ok += st.succeeded()
        if snap:
            resumed_checks.append((max(s for s, _ in snap), rnd))
    destroy_all_delivered(env, sid, "b")
    rows = verify(env, sid, all_ok, "b")
    byseq = {r["seq"]: r for r in rows}
    lost = []
    for snap in spool_snapshots:
        for seq, frame in snap:
            r = byseq.get(seq)
            if r is None or r["kind"] != frame["kind"] or r["payload"] != frame["payload"]:
                lost.append((seq, frame["kind"], r and r["kind"]))
    ok(spool_snapshots and not lost and all(spool_snapshots),
       "b: every record the killed supervisor had spooled is in the store, unchanged (no seq reused)",
       lost[:10])
    resumed = [r for r in rows if r["kind"] == "sandbox" and r["payload"].get("state") == "resumed"]
    ok(len(resumed) == 3, "b: a sandbox resumed event per takeover", [r["seq"] for r in resumed])
    ok([r["seq"] for r in resumed] == [m + 1 for m, _ in resumed_checks],
       "b: seq resumes right after the last spooled record",
       f"resumed at {[r['seq'] for r in resumed]}, spool ended at {[m for m, _ in resumed_checks]}")
    ok(not any("spool_recovery" in r["payload"] for r in resumed),
       "b: the spool needed no repair after SIGKILL (records are whole)",
       [r["payload"].get("spool_recovery") for r in resumed])


# ------------------------------------------------------------------- c


RETRY = re.compile(r"uplink (disconnected|refused) \((-?\d+)\): .*; retry in (\d+) ms")


def test_ingest_down_long(env: CapEnv, retries: int = 8) -> None:
    """A long outage, measured in reconnect attempts, not seconds: the
    ingest stays down until the uplink logged `retries` of them (with full
    jitter the 8th comes after about 12 s on average, at most 31.75 s of
    delays), while the learner keeps working."""
    sid = env.create_captured()
    log = env.sbdir(sid, "supervisor.log")
    env.sh(sid, "echo warm-up")
    mark = os.path.getsize(log)  # before the kill: the first retry is logged at once

    def delays() -> list[int]:
        with open(log, errors="replace") as f:
            f.seek(mark)
            return [int(m.group(3)) for m in RETRY.finditer(f.read())]
    env.ingest.kill(signal.SIGKILL)
    stop = threading.Event()
    st = Stream(env, sid, 1, "c", gap=0.05, until=stop)
    st.start()
    waited(lambda: len(delays()) >= retries, f"c: the uplink retried {retries} times while the ingest was down",
           diag=lambda: delays())
    waited(lambda: len(st.results) >= 3, "c: the learner ran execs during the outage")
    stop.set()
    st.join(600)
    ok(st.results and len(st.succeeded()) == len(st.results),
       "c: every exec during the outage worked", [r for r in st.results if r[1] != 0][:5])
    got = delays()
    env.ingest.start()
    want = len(st.results)
    rows = env.wait_rows(sid, lambda r: sum(1 for x in r if x["kind"] == "run_result") >= want + 1, WAIT)
    ok(sum(1 for x in rows if x["kind"] == "run_result") >= want + 1,
       "c: everything is delivered once the ingest is back")
    # Full jitter: attempt k waits uniform [0, min(8000, 250 * 2^k)] ms. The
    # logged delays are checked against these windows (exact bounds, no
    # clock involved); that the window grows shows in a delay above the
    # first window (all 8 under 250 ms: probability about 1e-8), the
    # jitter in delays that differ (all equal: about 1e-15).
    caps = [min(8000, 250 << min(k, 5)) for k in range(len(got))]
    over = [(k, d, c) for k, (d, c) in enumerate(zip(got, caps)) if d > c]
    ok(len(got) >= retries and not over,
       "c: each reconnect delay within its backoff window (0.25 s doubling to 8 s)",
       f"delays {got}; over the window (attempt, delay, window): {over}")
    ok(max(got, default=0) > caps[0], "c: the window grows (a delay above the first window's 250 ms)", got)
    ok(len(set(got)) > 1, "c: with jitter (the delays differ)", got)
    destroy_all_delivered(env, sid, "c")
    verify(env, sid, st.succeeded(), "c")


# ------------------------------------------------------------------- f


def test_uplink_daemon_killed(env: CapEnv) -> None:
    """The daemon holds no event (the supervisor's spool does): killing it
    loses nothing; the supervisor starts another and it replays from the
    ingest's ack. (README: "within 50 ms": that is a benchmark figure; here
    only that a new daemon comes and the stream goes on through it.)"""
    sid = env.create_captured()
    env.sh(sid, "echo warm-up")
    waited(lambda: uplink_daemon_pid(env.state) > 0, "f: an uplink daemon runs")
    first = uplink_daemon_pid(env.state)
    ok(first > 0 and comm(first) == "sandglass-uplin",
       "f: a captured sandbox's events go through the per-host uplink daemon", first)
    stop = threading.Event()
    st = Stream(env, sid, 1, "f", gap=0.01, until=stop)  # runs until stopped
    st.start()
    killed: list[int] = []
    extra: list[str] = []
    for k in range(2):
        n = len(st.results)
        waited(lambda: len(st.results) >= n + 10, f"f: 10 more execs, then kill {k + 1}")
        pid = uplink_daemon_pid(env.state)
        ok(pid > 0 and pid not in killed, f"f: a daemon to kill ({k + 1})", f"{pid}, killed {killed}")
        os.kill(pid, signal.SIGKILL)
        killed.append(pid)
        waited(lambda: uplink_daemon_pid(env.state) not in (0, *killed),
               f"f: the supervisor started a new uplink daemon after kill {k + 1}",
               diag=lambda: f"killed {killed}, now {uplink_daemon_pid(env.state)}")
        # the stream goes on through the new daemon: an exec made after the
        # restart reaches the store
        script = f"echo after-restart-{k}"
        ok(env.sh(sid, script).returncode == 0, f"f: an exec after kill {k + 1} runs")
        extra.append(script)
        rows = env.wait_rows(sid, lambda r: any(x["kind"] == "run_result" and x["payload"]["cmd"] == script
                                                for x in r), WAIT)
        ok(any(x["kind"] == "run_result" and x["payload"]["cmd"] == script for x in rows),
           f"f: an exec after kill {k + 1} reached the store through the new daemon", script)
    n = len(st.results)
    waited(lambda: len(st.results) >= n + 10, "f: 10 more execs after the second restart")
    stop.set()
    st.join(600)
    ok(not st.is_alive() and st.results and len(st.succeeded()) == len(st.results),
       f"f: every exec worked while the uplink daemon was killed twice ({len(st.results)} execs)",
       [r for r in st.results if r[1] != 0][:5])
    destroy_all_delivered(env, sid, "f")
    verify(env, sid, st.succeeded() + extra, "f")


# ------------------------------------------------------------------- d


def test_destroy_while_down(env: CapEnv) -> None:
    sid = env.create_captured()
    env.sh(sid, "echo before")
    env.ingest.kill(signal.SIGKILL)
    scripts = []
    for i in range(10):
        s = f"echo d-{i} > d{i}.txt; echo d-{i}"
        ok_ = env.sh(sid, s).returncode == 0
        if ok_:
            scripts.append(s)
    r = env.destroy(sid, "--json")
    res = json.loads(r.stdout or b"{}")
    ok(r.returncode == 0 and isinstance(res.get("events_undelivered"), int) and res["events_undelivered"] > 0,
       "d: destroy with the ingest down reports events_undelivered", r.stdout + r.stderr)
    kept = os.path.join(env.state, "undelivered", sid)
    ok(os.path.isfile(os.path.join(kept, "meta.json")) and os.path.isdir(os.path.join(kept, "spool")),
       "d: the spool is kept under <state>/undelivered/<id>/")
    ok(not os.path.exists(env.sbdir(sid)), "d: the sandbox itself is gone")
    p = env.run("flush", "--timeout", "1.5", timeout=60)
    ok(p.returncode != 0 and os.path.isdir(kept),
       "d: flush with the ingest still down fails and keeps the spool", p.stdout + p.stderr)
    env.ingest.start()
    p = env.run("flush", sid, timeout=60)
    out = p.stdout.decode()
    ok(p.returncode == 0 and f"{sid}: " in out and "1 spool(s)" in out and "0 left" in out,
       "d: sandglass flush ID delivers and reports counts", out + p.stderr.decode())
    ok(not os.path.exists(kept), "d: the delivered spool is removed")
    rows = verify(env, sid, scripts, "d")
    ok(rows and [(x["kind"], x["payload"].get("state")) for x in rows[-2:]]
       == [("sandbox", "destroyed"), ("activity", "stopped")],
       "d: the stream ends with sandbox destroyed, activity stopped", rows[-2:])
    p = env.run("flush", timeout=30)
    ok(p.returncode == 0 and b"0 events" in p.stdout, "d: flush with nothing left is a no-op", p.stdout)


# ------------------------------------------------------------------- e


def crc32c(data: bytes, crc: int = 0) -> int:
    global _CRC_T
    if "_CRC_T" not in globals():
        _CRC_T = []
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            _CRC_T.append(c)
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = _CRC_T[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def spool_check(spool_dir: str) -> tuple[bool, str]:
    """Every record whole and checksummed, the events' seqs contiguous, nothing
    after; a blob record (type 1) carries the seq of the event after it."""
    import glob
    import struct
    seqs = []
    for seg in sorted(glob.glob(os.path.join(spool_dir, "seg-*.log"))):
        b = open(seg, "rb").read()
        off = 0
        while off < len(b):
            if off + 24 > len(b) or b[off:off + 4] != b"SGR1":
                return False, f"{os.path.basename(seg)}: bad header at {off}"
            n, seq, rtype, crc = struct.unpack_from("<IqII", b, off + 4)
            if off + 24 + n > len(b):
                return False, f"{os.path.basename(seg)}: torn record at {off}"
            if crc32c(b[off:off + 20] + b[off + 24:off + 24 + n]) != crc:
                return False, f"{os.path.basename(seg)}: bad CRC at {off} (seq {seq})"
            json.loads(b[off + 24:off + 24 + n])
            if rtype == 1 and seqs and seq != seqs[-1] + 1:
                return False, f"{os.path.basename(seg)}: blob record seq {seq} after event {seqs[-1]}"
            if rtype == 0:
                seqs.append(seq)
            elif rtype != 1:
                return False, f"{os.path.basename(seg)}: record type {rtype} at {off}"
            off += 24 + n
    if seqs != list(range(seqs[0], seqs[0] + len(seqs))) if seqs else False:
        return False, f"seqs not contiguous: {seqs[:5]}...{seqs[-5:]}"
    return True, f"{len(seqs)} records, seq {seqs[0] if seqs else '-'}..{seqs[-1] if seqs else '-'}"


def fill(path: str) -> int:
    """Writes until the file system is full; returns bytes written."""
    total = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for chunk in (1 << 16, 4096, 1):
            while True:
                try:
                    n = os.write(fd, b"\0" * chunk)
                    total += n
                    if n < chunk:
                        break
                except OSError:
                    break
    finally:
        os.close(fd)
    return total


def full_script(i) -> str:
    return f"echo full-{i} > full{i}.txt; seq 1 200; echo full-{i}"


def test_disk_full() -> None:
    if os.geteuid() != 0:
        tap.skip("e: disk full", "needs root to mount a tmpfs (CI runs as root)")
        return
    env = CapEnv()
    # No idle heartbeat during the test: every event is then one of the
    # execs', which makes the number lost exactly knowable.
    env.env["SANDGLASS_CAPTURE_HEARTBEAT_MS"] = str(24 * 3600 * 1000)
    # Nor process events: the connector's events of an exec's last
    # processes may come after its idle activity, i.e. count in the next
    # exec's span, so an exec's number of events would vary by one.
    env.env["SANDGLASS_PROCEVENTS"] = "0"
    mnt = env.state
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", mnt], capture_output=True)
    if r.returncode != 0:
        tap.skip("e: disk full", f"mount -t tmpfs failed: {r.stderr.decode().strip()}")
        env.cleanup(check=False)
        return
    wsdir = tempfile.mkdtemp(prefix="sgt-ws-", dir="/tmp")
    try:
        # --checkpoints manual: no checkpoint before each exec. Such a
        # checkpoint may succeed on the full disk (or not) and then make an
        # event whose loss nothing outside the supervisor could count (its
        # label record may fail while its event is emitted).
        sid = env.create_captured("--workspace", wsdir, "--checkpoints", "manual")
        env.sh(sid, "echo before-full > pre.txt")
        # An exec like the ones below, before the disk fills: how many
        # events one makes (stdin, activity, command, file_diff, stdout,
        # run_result, activity), all stored.
        env.run_exec(sid, full_script("pre"))
        pre = env.last_span
        per_exec = len(pre)
        ok(per_exec >= 7 and pre[-1]["kind"] == "activity", f"e: an exec of this shape makes {per_exec} events",
           [x["kind"] for x in pre])
        filler = os.path.join(mnt, "filler")
        n = fill(filler)
        st = os.statvfs(mnt)
        ok(n > 0 and st.f_bavail == 0, f"e: the state dir's tmpfs is full ({n} bytes of filler)")
        results = []
        for i in range(20):
            p = env.sh(sid, full_script(i))
            results.append((p.returncode, p.stdout.decode().splitlines()[-1:] == [f"full-{i}"]))
        ok(all(rc == 0 and good for rc, good in results),
           "e: the sandbox keeps working while the spool cannot grow", results)
        good, why = spool_check(env.sbdir(sid, "spool"))
        ok(good, f"e: the spool is not corrupted while full ({why})", why)
        os.unlink(filler)
        after = "echo space-is-back"
        env.sh(sid, after)

        def is_lost(x):
            return x["kind"] == "limit" and x["payload"].get("what") == "capture_lost"
        rows = env.wait_rows(sid, lambda r: any(is_lost(x) for x in r) and any(
            x["kind"] == "stdin" and x["payload"]["line"] == after for x in r), WAIT)
        lost = [x for x in rows if is_lost(x)]
        # One limit event a run of lost events: mostly one run, but a small
        # event may still fit the slack of the spool's last page after a
        # bigger one failed (where depends on the sizes of every event
        # spooled before), and then the loss is two runs, each reported.
        runs = [(x["payload"].get("first_seq", -1), x["payload"].get("last_seq", -1)) for x in lost]
        ok(lost and all("space" in x["payload"].get("error", "").lower() for x in lost)
           and all(a <= b for a, b in runs) and all(runs[k][1] <= runs[k + 1][0] for k in range(len(runs) - 1))
           and len(lost) <= 20 * per_exec,
           "e: once space returns, limit events (what: capture_lost) report the loss: one a run of lost events, "
           "in seq order, each naming the full disk", [x["payload"] for x in lost])
        # The exact count: the 20 execs made 20 * per_exec events (no
        # heartbeat, no checkpoint event: see above). Those stored lie
        # between the pre exec's last event and the stdin of the exec after
        # space returned (seqs are contiguous: a lost event uses up none);
        # every other one was lost and must be counted.
        lo = pre[-1]["seq"]
        hi = next(x["seq"] for x in rows if x["kind"] == "stdin" and x["payload"]["line"] == after)
        kept = [x for x in rows if lo < x["seq"] < hi and not is_lost(x)]
        foreign = [x for x in kept if x["kind"] not in {k["kind"] for k in pre}]
        want = 20 * per_exec - len(kept)
        got = sum(x["payload"].get("count", 0) for x in lost)
        ok(lost and got == want and not foreign and want > 0,
           "e: capture_lost's count is exactly the number of events not stored",
           f"count {got}, want 20 * {per_exec} - {len(kept)} stored = {want}; "
           f"not an exec's: {foreign[:3]}; {[x['payload'] for x in lost]}")
        ok(lost and lost[0]["payload"].get("first_seq", -1) > lo
           and lost[0]["payload"].get("last_seq", -1) >= lost[0]["payload"]["first_seq"],
           "e: its seq range lies after the last event stored before the disk filled",
           lost and lost[0]["payload"])
        # the spool is whole for a new supervisor too
        pid = sup_pid(env, sid)
        os.kill(pid, signal.SIGKILL)
        waited(lambda: not pid_alive(pid), "e: the supervisor died")
        p = env.sh(sid, "echo revived")
        ok(p.returncode == 0, "e: a new supervisor takes over the spool after the full disk")
        rows = env.wait_rows(sid, lambda r: any(x["kind"] == "sandbox" and x["payload"]["state"] == "resumed"
                                                for x in r))
        res = [x for x in rows if x["kind"] == "sandbox" and x["payload"]["state"] == "resumed"]
        ok(res and "spool_recovery" not in res[0]["payload"], "e: recovery found nothing to repair",
           res and res[0]["payload"])
        destroy_all_delivered(env, sid, "e")
        seqs = [x["seq"] for x in env.rows(sid)]
        ok(contiguous(seqs), "e: store seqs 0..N-1 without gap or duplicate", f"{len(seqs)} rows")
    finally:
        env.cleanup(check=True)  # destroys first, so nothing holds the mount
        subprocess.run(["umount", mnt], capture_output=True)
        if os.path.ismount(mnt):
            subprocess.run(["umount", "-l", mnt], capture_output=True)
        shutil.rmtree(wsdir, ignore_errors=True)
        shutil.rmtree(env.root, ignore_errors=True)


SCENARIOS = (("a", test_ingest_killed), ("b", test_supervisor_killed), ("c", test_ingest_down_long),
             ("d", test_destroy_while_down), ("f", test_uplink_daemon_killed))


def main() -> None:
    only = set(sys.argv[1:])
    todo = [(f"fault {n}", fn, n != "e") for n, fn in SCENARIOS + (("e", test_disk_full),) if not only or n in only]
    # two at a time: each waits on its processes far more than it computes
    out, into = side_by_side(todo, 2)
    # in the order they ran one after the other: a, b, c, d, f, the
    # Envs' checks, then e (whose Env checks itself)
    shared = any(own for _, _, own in todo)
    for name, _, own in todo:
        if not own and shared:
            combined_checks(into)
            shared = False
        replay(out, name)
    if shared:
        combined_checks(into)
    tap.done()


if __name__ == "__main__":
    main()
