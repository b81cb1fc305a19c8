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

TAP output, stdlib only. Needs root (tmpfs mount in e).
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
from test_capture import CapEnv, contiguous, ok  # noqa: E402


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
    """The exactly-once, in-order checks on what the store holds."""
    rows = env.rows(sid)
    seqs = [r["seq"] for r in rows]
    holes = sorted(set(range(max(seqs) + 1)) - set(seqs)) if seqs else []
    ok(contiguous(seqs), f"{name}: store seqs are 0..{len(seqs) - 1}, no gap, no duplicate",
       f"{len(seqs)} rows; missing {holes[:20]}")
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
    st = Stream(env, sid, 60, "a", gap=0.01)
    st.start()
    port = env.ingest.port
    for _ in range(2):
        time.sleep(0.6)
        env.ingest.kill(signal.SIGKILL)
        time.sleep(0.4)
        env.ingest.start()
    st.join(120)
    ok(env.ingest.port == port, "a: the ingest came back on the same port")
    ok(not st.is_alive() and len(st.succeeded()) == 60,
       "a: every exec worked while the ingest was killed twice",
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
        st = Stream(env, sid, 30, f"b{rnd}", resume=resume)
        st.start()
        wait_for(lambda: len(st.results) >= 5 + 4 * rnd, 30, 0.001)  # mid-stream
        pid = sup_pid(env, sid)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not pid_alive(pid), 10)
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
        wait_for(lambda: st.failed_once.is_set() or not st.is_alive(), 10)
        resume.set()
        st.join(120)
        ok(not st.is_alive(), f"b{rnd}: the learner's loop went on after the supervisor died")
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


def test_ingest_down_long(env: CapEnv, outage_s: float = 22.0) -> None:
    sid = env.create_captured()
    log = env.sbdir(sid, "supervisor.log")
    env.sh(sid, "echo warm-up")
    mark = os.path.getsize(log)  # before the kill: the first retry is logged at once
    env.ingest.kill(signal.SIGKILL)
    stop = threading.Event()
    st = Stream(env, sid, 1, "c", gap=0.05, until=stop)
    t0 = time.monotonic()
    st.start()
    time.sleep(outage_s)
    stop.set()
    st.join(60)
    ok(len(st.succeeded()) == len(st.results) and len(st.results) >= 50,
       f"c: {len(st.results)} execs worked during a {outage_s:.0f} s outage")
    text = open(log, errors="replace").read()[mark:]
    delays = [int(m.group(3)) for m in RETRY.finditer(text)]
    env.ingest.start()
    t_back = time.monotonic()
    want = len(st.results)
    rows = env.wait_rows(sid, lambda r: sum(1 for x in r if x["kind"] == "run_result") >= want + 1, 30)
    took = time.monotonic() - t_back
    ok(sum(1 for x in rows if x["kind"] == "run_result") >= want + 1,
       f"c: everything delivered {took:.1f} s after the ingest came back (outage {time.monotonic() - t0 - took:.0f} s)")
    # full jitter: attempt k waits uniform [0, min(8000, 250 * 2^k)] ms
    caps = [min(8000, 250 << min(k, 5)) for k in range(len(delays))]
    ok(len(delays) >= 4 and all(d <= c for d, c in zip(delays, caps)),
       f"c: reconnect backoff 0.25 s doubling to 8 s: {len(delays)} retries, delays {delays}")
    ok(len(set(delays)) > 1 and max(delays, default=0) > 1000,
       "c: with jitter (delays differ; they grow past 1 s)", delays)
    ok(all(d <= 8000 for d in delays), "c: no delay above 8 s", delays)
    destroy_all_delivered(env, sid, "c")
    verify(env, sid, st.succeeded(), "c")


# ------------------------------------------------------------------- f


def test_uplink_daemon_killed(env: CapEnv) -> None:
    """The daemon holds no event (the supervisor's spool does): killing it
    loses nothing; the supervisor starts another and it replays from the
    ingest's ack."""
    sid = env.create_captured()
    env.sh(sid, "echo warm-up")
    wait_for(lambda: uplink_daemon_pid(env.state) > 0, 5)
    first = uplink_daemon_pid(env.state)
    ok(first > 0 and comm(first) == "sandglass-uplin",
       "f: a captured sandbox's events go through the per-host uplink daemon", first)
    st = Stream(env, sid, 60, "f", gap=0.01)
    st.start()
    killed = []
    for _ in range(2):
        time.sleep(0.5)
        pid = uplink_daemon_pid(env.state)
        if pid:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    st.join(120)
    ok(not st.is_alive() and len(st.succeeded()) == 60,
       "f: every exec worked while the uplink daemon was killed twice",
       [r for r in st.results if r[1] != 0][:5])
    wait_for(lambda: uplink_daemon_pid(env.state) not in (0, *killed), 10)
    again = uplink_daemon_pid(env.state)
    again = again if again not in killed else 0
    ok(len(killed) == 2 and again > 0, "f: a new uplink daemon took over after each kill",
       f"killed {killed}, now {again}")
    destroy_all_delivered(env, sid, "f")
    verify(env, sid, st.succeeded(), "f")


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
    t0 = time.monotonic()
    r = env.destroy(sid, "--json")
    res = json.loads(r.stdout or b"{}")
    ok(r.returncode == 0 and res.get("events_undelivered", 0) > 0,
       f"d: destroy with the ingest down reports events_undelivered ({time.monotonic() - t0:.1f} s)",
       r.stdout + r.stderr)
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
    """Every record whole and checksummed, seqs contiguous, nothing after."""
    import glob
    import struct
    seqs = []
    for seg in sorted(glob.glob(os.path.join(spool_dir, "seg-*.log"))):
        b = open(seg, "rb").read()
        off = 0
        while off < len(b):
            if off + 24 > len(b) or b[off:off + 4] != b"SGR1":
                return False, f"{os.path.basename(seg)}: bad header at {off}"
            n, seq, _res, crc = struct.unpack_from("<IqII", b, off + 4)
            if off + 24 + n > len(b):
                return False, f"{os.path.basename(seg)}: torn record at {off}"
            if crc32c(b[off:off + 20] + b[off + 24:off + 24 + n]) != crc:
                return False, f"{os.path.basename(seg)}: bad CRC at {off} (seq {seq})"
            json.loads(b[off + 24:off + 24 + n])
            seqs.append(seq)
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


def test_disk_full() -> None:
    if os.geteuid() != 0:
        tap.skip("e: disk full", "needs root for a tmpfs mount")
        return
    env = CapEnv()
    mnt = env.state
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", mnt], capture_output=True)
    if r.returncode != 0:
        tap.skip("e: disk full", f"cannot mount a tmpfs: {r.stderr.decode().strip()}")
        env.cleanup(check=False)
        return
    wsdir = tempfile.mkdtemp(prefix="sgt-ws-", dir="/tmp")
    try:
        sid = env.create_captured("--workspace", wsdir)
        env.sh(sid, "echo before-full > pre.txt")
        filler = os.path.join(mnt, "filler")
        n = fill(filler)
        st = os.statvfs(mnt)
        ok(n > 0 and st.f_bavail == 0, f"e: the state dir's tmpfs is full ({n} bytes of filler)")
        log = env.sbdir(sid, "supervisor.log")
        results = []
        for i in range(20):
            p = env.sh(sid, f"echo full-{i} > full{i}.txt; seq 1 200; echo full-{i}")
            results.append((p.returncode, p.stdout.decode().splitlines()[-1:] == [f"full-{i}"]))
        ok(all(rc == 0 and good for rc, good in results),
           "e: the sandbox keeps working while the spool cannot grow", results)
        good, why = spool_check(env.sbdir(sid, "spool"))
        ok(good, f"e: the spool is not corrupted while full ({why})", why)
        os.unlink(filler)
        after = "echo space-is-back"
        env.sh(sid, after)
        rows = env.wait_rows(sid, lambda r: any(x["kind"] == "limit" and x["payload"].get("what") == "capture_lost"
                                                for x in r) and any(x["kind"] == "stdin" and
                                                                    x["payload"]["line"] == after for x in r), 20)
        lost = [x for x in rows if x["kind"] == "limit" and x["payload"].get("what") == "capture_lost"]
        ok(len(lost) == 1 and "space" in lost[0]["payload"]["error"].lower(),
           "e: once space returns one limit event (what: capture_lost) reports the loss",
           [x["payload"] for x in lost])
        # 20 execs of >= 7 events each (stdin, activity, command, file_diff,
        # stdout, run_result, activity) could not be spooled: the report
        # counts them all (regression: a report that failed on the full disk
        # used to swallow the count, leaving "count": 1)
        missing = sum(1 for i in range(20)
                      if f"echo full-{i} > full{i}.txt; seq 1 200; echo full-{i}" not in
                      {x["payload"].get("cmd") for x in rows if x["kind"] == "run_result"})
        ok(lost and lost[0]["payload"]["count"] >= 5 * missing and missing >= 10,
           f"e: the count covers every event lost ({missing} execs had no result stored)",
           lost and lost[0]["payload"])
        print(f"# e: capture_lost events: {[x['payload'] for x in lost]}", flush=True)
        kept = {x["payload"]["line"] for x in rows if x["kind"] == "stdin"}
        print(f"# e: execs during the full disk whose stdin reached the store: "
              f"{sum(1 for i in range(20) if f'echo full-{i} > full{i}.txt; seq 1 200; echo full-{i}' in kept)}/20",
              flush=True)
        # the spool is whole for a new supervisor too
        pid = sup_pid(env, sid)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not pid_alive(pid), 10)
        p = env.sh(sid, "echo revived")
        ok(p.returncode == 0, "e: a new supervisor takes over the spool after the full disk")
        rows = env.wait_rows(sid, lambda r: any(x["kind"] == "sandbox" and x["payload"]["state"] == "resumed"
                                                for x in r))
        res = [x for x in rows if x["kind"] == "sandbox" and x["payload"]["state"] == "resumed"]
        ok(res and "spool_recovery" not in res[0]["payload"], "e: recovery found nothing to repair",
           res and res[0]["payload"])
        sup_log = open(log, errors="replace").read()
        print("# e: supervisor log lines about the spool:", flush=True)
        for line in [l for l in sup_log.splitlines() if "spool" in l or "capture" in l][:8]:
            print(f"#   {line[:200]}", flush=True)
        destroy_all_delivered(env, sid, "e")
        seqs = [x["seq"] for x in env.rows(sid)]
        ok(contiguous(seqs), f"e: store seqs 0..{len(seqs) - 1} without gap or duplicate")
    finally:
        env.cleanup(check=True)  # destroys first, so nothing holds the mount
        subprocess.run(["umount", mnt], capture_output=True)
        if os.path.ismount(mnt):
            subprocess.run(["umount", "-l", mnt], capture_output=True)
        shutil.rmtree(wsdir, ignore_errors=True)
        shutil.rmtree(env.root, ignore_errors=True)


def main() -> None:
    only = set(sys.argv[1:])
    env = CapEnv()
    try:
        for name, fn in (("a", test_ingest_killed), ("b", test_supervisor_killed),
                         ("c", test_ingest_down_long), ("d", test_destroy_while_down),
                         ("f", test_uplink_daemon_killed)):
            if only and name not in only:
                continue
            if not env.ingest.alive():
                env.ingest.start()
            tap.case(f"fault {name}")(lambda: fn(env))
    finally:
        env.cleanup()
    if not only or "e" in only:
        tap.case("fault e")(test_disk_full)
    tap.done()


if __name__ == "__main__":
    main()
