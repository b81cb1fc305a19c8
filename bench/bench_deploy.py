#!/usr/bin/env python3
"""A deployment on this machine, in full (issue 26, "Many hosts, one store").

4 sandbox hosts (each a state directory of its own: its own supervisors and
uplink daemon), 3 `sandglassd ingest` nodes on one PostgreSQL
(scripts/pg-server.sh; fsync on, as a bench's server), 200 captured
sandboxes spread over the hosts, each created with `--ingest` naming every
node (each host's list in another order). Worker threads run execs in the
sandboxes all through the run (`/bin/echo dmark-SANDBOX-N`, one exec at a
time in a sandbox). The schedule:

    steady (--steady s) | node 1 SIGKILLed, restarted once every sandbox
    that streamed to it has committed again | steady | the same for node 2
    | steady | one host cut off for --cut s (its uplink daemon stopped,
    SIGSTOP, then SIGCONT) | until its backlog is committed | steady | the
    load stops, every sandbox is destroyed, and PostgreSQL is checked:
    every event of every sandbox stored exactly once, seqs contiguous, each
    exec's mark once and in order (test_deploy.verify).

Figures (from the store's own columns: `ts`, when the host made the event,
and `received`, when an ingest node read it; one clock on this machine):

- events/s: events received by the nodes over the load, and over the
  first steady window alone;
- ack lag: an event's `received - ts` (the host's spool to the ingest),
  p50/p99 over the first steady window and over the whole run; the ack
  follows the group commit, whose p99 the surviving node's
  `sandglass_ingest_commit_duration_seconds` histogram gives: the two
  added are an upper bound of the ack lag's p99;
- recovery after a node's kill: for each sandbox that streamed to it, its
  first exec started after the kill, from max(kill, that exec's start) to
  its output's `received` (median and max over those sandboxes);
- recovery after the host's cut: from SIGCONT until the last of the events
  it held was received; the number of events held;
- per ingest core: events over the nodes' CPU seconds (and PostgreSQL's);
  bytes per event in the store (sg_events with its indexes);
- memory a sandbox at rest (PSS of its supervisor, its workers, the
  processes in its cgroup and its share of the host's uplink daemon), so
  sandboxes per GiB.

Run from a build directory's environment (SANDGLASS_BIN, SANDGLASSD_BIN as
meson test sets them) or with the binaries on PATH, as root:
    python3 bench/bench_deploy.py [--sandboxes 200] [--workers 8] [--steady 30] [--cut 30]
Results: bench/results/deploy.json (--out)."""
from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import re
import shutil
import statistics
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
from sgtest import cgroup_pids, children, have_pg, uplink_daemon_pid  # noqa: E402
from test_deploy import Deployment, Load, verify  # noqa: E402

WALL0 = time.time() - time.monotonic()  # monotonic -> wall clock


def iso(t_wall: float) -> str:
    return datetime.datetime.fromtimestamp(t_wall, datetime.timezone.utc).isoformat()


def epoch(text: str) -> float:
    return datetime.datetime.fromisoformat(text).timestamp()


def hold(seconds: float, dep: Deployment) -> None:
    """The schedule's steady windows: the load runs; the store is read
    meanwhile (the same poll as the waits)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        dep.poll()
        time.sleep(0.5)


def cpu_s(pid: int) -> float:
    """utime + stime of a live process (and of its reaped children)."""
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")


class NodeCpu:
    """The ingest nodes' CPU seconds, each process's read before it dies."""

    def __init__(self, dep: Deployment) -> None:
        self.dep, self.done = dep, 0.0
        self.base = {n.proc.pid: cpu_s(n.proc.pid) for n in dep.nodes}

    def before_kill(self, node) -> None:
        self.done += cpu_s(node.proc.pid) - self.base.pop(node.proc.pid, 0.0)

    def started(self, node) -> None:
        self.base[node.proc.pid] = 0.0

    def total(self) -> float:
        return self.done + sum(cpu_s(p) - b for p, b in self.base.items())


def pg_cpu(dep: Deployment) -> float:
    """The PostgreSQL server's CPU seconds: the postmaster with its reaped
    backends, and the live ones."""
    try:
        pm = int(open(os.path.join(dep.cluster.dir, "pgdata", "postmaster.pid")).readline())
    except (OSError, ValueError):
        return 0.0
    return cpu_s(pm) + sum(cpu_s(c) for c in children(pm))


def pss_kib(pid: int) -> int:
    try:
        for line in open(f"/proc/{pid}/smaps_rollup"):
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def memory_per_sandbox(dep: Deployment) -> dict:
    """PSS at rest: each sandbox's supervisor, its children, its cgroup's
    processes; each host's uplink daemon shared among its sandboxes."""
    per = []
    for sb in dep.sandboxes:
        meta = json.load(open(dep.hosts[sb.host].sbdir(sb.sid, "meta.json")))
        sup = meta.get("supervisor_pid", 0)
        pids = {sup, *children(sup), *cgroup_pids(sb.sid)} - {0}
        per.append(sum(pss_kib(p) for p in pids))
    up = sum(pss_kib(uplink_daemon_pid(h.state)) for h in dep.hosts)
    mean = (sum(per) + up) / len(per) / 1024
    return {"pss_mib_mean": round(mean, 2), "sandbox_pss_mib_median": round(statistics.median(per) / 1024, 2),
            "uplink_daemons_pss_mib": round(up / 1024, 2), "sandboxes_per_gib": int(1024 / mean)}


def on_node(dep: Deployment, node: int) -> list:
    """The sandboxes whose uplink is connected to this node now."""
    port = f"127.0.0.1:{dep.nodes[node].port})"
    sids = {s["id"] for h in dep.hosts for s in h.ls()
            if (s.get("uplink") or {}).get("reason", "").endswith(port)}
    return [sb for sb in dep.sandboxes if sb.sid in sids]


def kill_node(dep: Deployment, i: int, cpu: NodeCpu, deadline: float = 120) -> dict:
    """SIGKILLs node i; waits until each sandbox that streamed to it has an
    exec started after the kill in the store; restarts it."""
    affected = on_node(dep, i)
    node = dep.nodes[i]
    cpu.before_kill(node)
    t = time.monotonic()
    node.kill()

    def first_after(sb):
        c = dep.committed.get(sb.sid, {})
        return next(((n, t0) for n, t0, _ in list(sb.ran) if t0 > t and n in c), None)
    end = time.monotonic() + deadline
    while time.monotonic() < end and not all(first_after(sb) for sb in affected):
        dep.poll()
        time.sleep(0.05)
    rec = []
    for sb in affected:
        f = first_after(sb)
        if f:
            rec.append(epoch(dep.committed[sb.sid][f[0]]) - (WALL0 + max(t, f[1])))
    node.start()
    cpu.started(node)
    ok = len(rec) == len(affected)
    print(f"node {i + 1} killed: {len(affected)} sandboxes streamed to it; each committed again "
          f"{'' if ok else '(NOT ALL) '}within median {statistics.median(rec or [0]):.3f} s, "
          f"max {max(rec or [0]):.3f} s")
    return {"node": i + 1, "sandboxes_on_it": len(affected), "all_recovered": ok,
            "recovery_s_median": round(statistics.median(rec or [0]), 3), "recovery_s_max": round(max(rec or [0]), 3)}


def cut_host(dep: Deployment, h: int, seconds: float, deadline: float = 300) -> dict:
    dep.cut(h)
    t_cut = time.monotonic()
    hold(seconds, dep)
    t_back = time.monotonic()
    dep.restore(h)
    end = time.monotonic() + deadline
    while time.monotonic() < end and dep.uncommitted(h, t_back):
        time.sleep(0.05)
    left = dep.uncommitted(h, t_back)
    sids = ",".join(f"'{sb.sid}'" for sb in dep.sandboxes if sb.host == h)
    held, last = dep.cluster.sql(
        "SELECT count(*), max(received::timestamptz) FROM sg_events WHERE sandbox IN (" + sids + ") AND "
        f"ts::timestamptz >= '{iso(WALL0 + t_cut)}' AND ts::timestamptz < '{iso(WALL0 + t_back)}'").split("|")
    rec = epoch(last) - (WALL0 + t_back) if last else float("nan")
    print(f"host {h + 1} cut off for {t_back - t_cut:.1f} s: {held} events held, all received "
          f"{rec:.3f} s after it came back{'' if not left else f' (NOT ALL: {len(left)} execs missing)'}")
    return {"host": h + 1, "cut_s": round(t_back - t_cut, 1), "events_held": int(held),
            "all_delivered": not left, "recovery_s": round(rec, 3)}


def lag(dep: Deployment, t0: float, t1: float) -> dict:
    """received - ts of the events made in [t0, t1] (monotonic), in ms."""
    q = ("SELECT count(*), percentile_cont(ARRAY[0.5, 0.99]) WITHIN GROUP (ORDER BY d), max(d) FROM ("
         "SELECT extract(epoch FROM received::timestamptz - ts::timestamptz) * 1000 AS d FROM sg_events "
         f"WHERE ts::timestamptz >= '{iso(WALL0 + t0)}' AND ts::timestamptz < '{iso(WALL0 + t1)}') x")
    n, pct, mx = dep.cluster.sql(q).split("|")
    p50, p99 = (float(x) for x in pct.strip("{}").split(","))
    return {"events": int(n), "events_per_s": round(int(n) / (t1 - t0), 1), "lag_ms_p50": round(p50, 2),
            "lag_ms_p99": round(p99, 2), "lag_ms_max": round(float(mx), 2)}


def commit_p99_ms(node) -> float:
    """The p99 of a node's commit histogram (the upper edge of its bucket)."""
    text = urllib.request.urlopen(f"{node.http}/metrics", timeout=10).read().decode()
    buckets = [(float(m.group(1)), float(m.group(2))) for m in
               re.finditer(r'sandglass_ingest_commit_duration_seconds_bucket\{le="([0-9.e+-]+)"\} (\d+)', text)]
    total = buckets[-1][1] if buckets else 0
    return next((le * 1000 for le, c in buckets if c >= 0.99 * total), float("nan")) if total else float("nan")


def create_all(dep: Deployment, n: int) -> float:
    """n sandboxes over the hosts (Deployment.create_all); the seconds."""
    t = time.monotonic()
    dep.create_all(n)
    return time.monotonic() - t


def keep_logs(dep: Deployment, problems: dict) -> None:
    """The supervisor logs of the sandboxes the check found wrong, kept in
    /tmp/sg-bench-deploy-logs/ (the hosts' directories are removed)."""
    if not problems:
        return
    out = "/tmp/sg-bench-deploy-logs"
    os.makedirs(out, exist_ok=True)
    for h in dep.hosts:
        for sid, text in h.sup_logs.items():
            if sid in problems:
                with open(os.path.join(out, f"{sid}.supervisor.log"), "w") as f:
                    f.write(text)
    for i, h in enumerate(dep.hosts):
        for f in [os.path.join(h.state, "uplink.log")] + glob.glob(os.path.join(h.root, "node*.log")):
            if os.path.exists(f):
                shutil.copy(f, os.path.join(out, f"host{i}.{os.path.basename(f)}"))
    print(f"the supervisor logs of the {len(problems)} sandboxes found wrong, the uplink and node logs: {out}/")


def schedule(dep: Deployment, a, cpu: NodeCpu, res: dict) -> None:
    t0 = time.monotonic()
    hold(a.steady, dep)
    res["steady"] = lag(dep, t0 + 2, time.monotonic())  # 2 s for the workers to get going
    res["node_kills"] = []
    for i in range(min(a.kills, len(dep.nodes))):
        res["node_kills"].append(kill_node(dep, i, cpu))
        hold(a.steady / 3, dep)
    res["host_cut"] = cut_host(dep, len(dep.hosts) - 1, a.cut)
    hold(a.steady / 3, dep)
    res["whole_run"] = lag(dep, t0, time.monotonic())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--sandboxes", type=int, default=200)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--steady", type=float, default=30)
    ap.add_argument("--kills", type=int, default=2)
    ap.add_argument("--cut", type=float, default=30)
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "deploy.json"))
    a = ap.parse_args()
    if not have_pg():
        print("PostgreSQL server binaries not found")
        return 1
    os.environ.pop("SG_TEST_ROOT", None)  # a bench's server syncs (pg-server.sh)
    dep = Deployment(a.hosts, a.nodes, "sg-bench-deploy-")
    res: dict = {"bench": "deploy", "hosts": a.hosts, "nodes": a.nodes, "sandboxes": a.sandboxes,
                 "workers": a.workers}
    try:
        res["create_s"] = round(create_all(dep, a.sandboxes), 1)
        print(f"{a.sandboxes} captured sandboxes on {a.hosts} hosts created in {res['create_s']} s")
        res["memory"] = memory_per_sandbox(dep)
        print(f"at rest: {res['memory']['pss_mib_mean']} MiB PSS a sandbox "
              f"(its share of the uplink daemon in): {res['memory']['sandboxes_per_gib']} a GiB")
        cpu, pg0 = NodeCpu(dep), pg_cpu(dep)
        load = Load(dep, a.workers)
        try:
            schedule(dep, a, cpu, res)
        finally:
            load.stop()
        node_cpu, pgc = cpu.total(), pg_cpu(dep) - pg0
        res["commit_p99_ms"] = commit_p99_ms(dep.nodes[-1])
        failed = [f for sb in dep.sandboxes for f in sb.failed]
        bad = dep.destroy_all()
        problems = verify(dep)
        keep_logs(dep, problems)
        n_events = int(dep.cluster.sql("SELECT count(*) FROM sg_events"))
        size = int(dep.cluster.sql("SELECT pg_total_relation_size('sg_events')"))
        res.update({
            "execs": sum(len(sb.ran) for sb in dep.sandboxes), "execs_failed": len(failed),
            "destroy_failed": len(bad), "events_stored": n_events, "execs_failed_why": failed[:5],
            "problems": problems,
            "exactly_once_in_order": not problems and not failed and not bad,
            "store_bytes_per_event": round(size / max(n_events, 1), 1),
            "payload_bytes_mean": round(float(dep.cluster.sql("SELECT avg(length(payload)) FROM sg_events")), 1),
            "ingest_cpu_s": round(node_cpu, 2), "postgres_cpu_s": round(pgc, 2),
            "events_per_ingest_cpu_s": round(res["whole_run"]["events"] / max(node_cpu, 1e-9)),
            "events_per_postgres_cpu_s": round(res["whole_run"]["events"] / max(pgc, 1e-9)),
            "loadavg": os.getloadavg(), "measured_at": datetime.datetime.now(datetime.timezone.utc).isoformat()})
    finally:
        dep.close(checks=None)
    s, w = res["steady"], res["whole_run"]
    print(f"steady: {s['events_per_s']} events/s, ack lag (ts -> received) p50 {s['lag_ms_p50']} ms, "
          f"p99 {s['lag_ms_p99']} ms; whole run (kills and cut in): {w['events_per_s']} events/s, "
          f"p99 {w['lag_ms_p99']} ms, max {w['lag_ms_max']} ms; commit p99 (histogram) {res['commit_p99_ms']} ms")
    print(f"{res['execs']} execs, {res['events_stored']} events: exactly once and in order: "
          f"{res['exactly_once_in_order']}" + ("" if res["exactly_once_in_order"] else f" {problems}"))
    print(f"ingest: {res['events_per_ingest_cpu_s']} events per CPU second (PostgreSQL: "
          f"{res['events_per_postgres_cpu_s']}); {res['store_bytes_per_event']} store bytes an event")
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    return 0 if res["exactly_once_in_order"] else 1


if __name__ == "__main__":
    sys.exit(main())
