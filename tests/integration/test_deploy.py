#!/usr/bin/env python3
"""Issue 26, "Many hosts, one store": a deployment on this machine, in short.

Four sandbox hosts, each a state directory of its own (so its own
supervisors and its own uplink daemon, as on a machine of its own), three
`sandglassd ingest` nodes on one PostgreSQL (scripts/pg-server.sh), three
captured sandboxes a host, each created with `--ingest` naming every node
(each host's list in another order, so that the hosts' streams spread over
the nodes). Load threads run execs in every sandbox all through the test,
each exec printing a mark of its own (`dmark-SANDBOX-N`). While they run:

- the node the first host streams to is SIGKILLed: every host gets execs
  started after the kill into the store (through the others), then the node
  is started again;
- another host is cut off: its uplink daemon is stopped (SIGSTOP: its
  connections stay open and silent, as across a partition, and the
  supervisors keep spooling). The test waits until every other host has
  execs started after the cut in the store, and sees that this host's are
  not, and are in its spools (held); then it lets the daemon go on
  (SIGCONT) and waits for the host's backlog.

Then the load stops, every sandbox is destroyed (which delivers what is
left) and PostgreSQL itself is read: each sandbox's seqs are 0..N-1 with no
gap and no duplicate, and each of its execs' marks is there exactly once,
in the order the execs ran. The checker is first shown streams with a
duplicate, a gap, a lost and a reordered mark: it must find each (a check
that cannot fail is none).

bench/bench_deploy.py runs the full form (4 hosts, 3 nodes, 200 sandboxes)
with these classes and measures it. Every wait is for a condition, with a
deadline. Skips without the PostgreSQL server binaries. TAP."""
from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import PG_SKIP, IngestNode, PgCluster, have_pg, tap, uplink_daemon_pid, wait_for  # noqa: E402
from test_capture import CapEnv, combined_checks  # noqa: E402

MARK = re.compile(r"dmark-(\d+)-(\d+)\b")
EXEC_ID = re.compile(r'"exec_id":\s*(\d+)')


class Sandbox:
    """A captured sandbox of the deployment and the execs it ran: (n,
    monotonic start, monotonic return) of each that printed its mark; the
    ones that did not, with why."""

    def __init__(self, host: int, sid: str, index: int) -> None:
        self.host, self.sid, self.index = host, sid, index
        self.ran: list[tuple[int, float, float]] = []
        self.failed: list[str] = []
        self.n = 0

    def mark(self, n: int) -> str:
        return f"dmark-{self.index}-{n}"


class Deployment:
    """PostgreSQL, `nodes` ingest nodes on it and `hosts` sandbox hosts
    (test_capture.CapEnv: a state directory each, the sanitizer scan). All
    the nodes and the sandboxes share the first host's secret."""

    def __init__(self, hosts: int, nodes: int, prefix: str = "sg-deploy-") -> None:
        self.cluster = PgCluster(prefix)
        self.hosts: list[CapEnv] = []
        self.nodes: list[IngestNode] = []
        self.sandboxes: list[Sandbox] = []
        self.cut_pids: dict[int, int] = {}
        self._lock = threading.Lock()
        self.committed: dict[str, dict[int, str]] = {}  # sid -> mark n -> received (the ingest's time)
        self._last_id = 0
        try:
            self.store = self.cluster.start()
            self.hosts = [CapEnv() for _ in range(hosts)]
            h0 = self.hosts[0]
            self.secret = h0.secret
            for i in range(nodes):
                self.nodes.append(IngestNode(h0.env, self.store, self.secret, os.path.join(h0.root, f"node{i}.log")))
        except BaseException:
            self.close()
            raise

    def ingest_arg(self, host: int) -> str:
        """Host i names every node, starting from node i % nodes."""
        k = host % len(self.nodes)
        return ",".join(n.ws for n in self.nodes[k:] + self.nodes[:k])

    def create(self, host: int) -> Sandbox:
        sid = self.hosts[host].create("--task", "T", "--ingest", self.ingest_arg(host), "--secret", self.secret)
        with self._lock:
            sb = Sandbox(host, sid, len(self.sandboxes))
            self.sandboxes.append(sb)
        return sb

    def create_all(self, n: int) -> None:
        """n sandboxes spread over the hosts, the hosts side by side (a
        host's creates one after another). Raises with the first create
        that failed (each sandbox holds an inotify instance:
        fs.inotify.max_user_instances must exceed a host's count)."""
        per = [n // len(self.hosts) + (h < n % len(self.hosts)) for h in range(len(self.hosts))]
        errors: list[str] = []

        def one_host(h: int) -> None:
            try:
                for _ in range(per[h]):
                    self.create(h)
            except RuntimeError as e:
                errors.append(str(e))
        th = [threading.Thread(target=one_host, args=(h,)) for h in range(len(self.hosts))]
        for x in th:
            x.start()
        for x in th:
            x.join()
        if errors:
            raise RuntimeError(errors[0])

    def exec_mark(self, sb: Sandbox) -> None:
        """One exec printing the sandbox's next mark (one at a time in a
        sandbox: its callers own disjoint sandboxes)."""
        n = sb.n
        sb.n += 1
        t0 = time.monotonic()
        p = self.hosts[sb.host].exec(sb.sid, "/bin/echo", sb.mark(n), timeout=120)
        if p.returncode == 0 and p.stdout.decode(errors="replace").strip() == sb.mark(n):
            sb.ran.append((n, t0, time.monotonic()))
        else:
            sb.failed.append(f"{sb.mark(n)}: rc {p.returncode}: {p.stderr.decode(errors='replace')[-300:]}")

    # ---- the store, read from PostgreSQL itself
    def poll(self) -> dict[str, dict[int, str]]:
        """Reads the stdout events committed since the last poll (by the
        table's identity column) and notes their marks; returns them all."""
        out = self.cluster.sql("SELECT id, sandbox, received, replace(payload, E'\\n', ' ') FROM sg_events "
                               f"WHERE kind = 'stdout' AND id > {self._last_id} ORDER BY id")
        for line in out.splitlines():
            rid, sid, received, payload = line.split("|", 3)
            self._last_id = max(self._last_id, int(rid))
            for m in MARK.finditer(payload):
                self.committed.setdefault(sid, {})[int(m.group(2))] = received
        return self.committed

    def all_rows(self) -> dict[str, list[tuple[int, str, str]]]:
        """Every stored event of the deployment's sandboxes: sid -> [(seq,
        kind, payload)] in seq order."""
        out = self.cluster.sql("SELECT sandbox, seq, kind, replace(payload, E'\\n', ' ') FROM sg_events "
                               "ORDER BY sandbox, seq")
        rows: dict[str, list[tuple[int, str, str]]] = {}
        for line in out.splitlines():
            sid, seq, kind, payload = line.split("|", 3)
            rows.setdefault(sid, []).append((int(seq), kind, payload))
        return rows

    def started_after_committed(self, host: int, t: float) -> bool:
        """Whether an exec of this host started after t (monotonic) is in
        the store."""
        c = self.poll()
        return any(n in c.get(sb.sid, {}) for sb in self.sandboxes if sb.host == host
                   for n, t0, _ in list(sb.ran) if t0 > t)

    def uncommitted(self, host: int | None = None, before: float | None = None) -> list[str]:
        """The marks of execs that returned (before `before`, if given) and
        are not in the store yet (of one host, if given)."""
        c = self.poll()
        return [sb.mark(n) for sb in self.sandboxes if host is None or sb.host == host
                for n, _, t1 in list(sb.ran) if (before is None or t1 < before) and n not in c.get(sb.sid, {})]

    # ---- a host cut off, and back
    def cut(self, host: int) -> int:
        """Stops the host's uplink daemon (SIGSTOP); its pid."""
        pid = uplink_daemon_pid(self.hosts[host].state)
        if not pid:
            raise RuntimeError(f"host {host} has no uplink daemon to stop")
        os.kill(pid, signal.SIGSTOP)
        self.cut_pids[host] = pid
        return pid

    def restore(self, host: int) -> None:
        pid = self.cut_pids.pop(host, 0)
        if pid:
            os.kill(pid, signal.SIGCONT)

    def spooled(self, sb: Sandbox, n: int) -> bool:
        """Whether the mark's event is in the sandbox's spool (on its host's
        disk)."""
        want = sb.mark(n).encode()
        for f in glob.glob(os.path.join(self.hosts[sb.host].sbdir(sb.sid, "spool"), "*")):
            try:
                with open(f, "rb") as fh:
                    if want in fh.read():
                        return True
            except OSError:
                pass
        return False

    def destroy_all(self) -> list[str]:
        """Destroys every sandbox, the hosts side by side (each destroy
        delivers its sandbox's rest first); the failures."""
        bad: list[str] = []

        def one_host(h: int) -> None:
            for sb in self.sandboxes:
                if sb.host == h:
                    p = self.hosts[h].destroy(sb.sid)
                    if p.returncode != 0:
                        bad.append(f"{sb.sid}: {p.stderr.decode(errors='replace')[-300:]}")
        th = [threading.Thread(target=one_host, args=(h,)) for h in range(len(self.hosts))]
        for t in th:
            t.start()
        for t in th:
            t.join()
        return bad

    def close(self, checks: list | None = None) -> None:
        """Lets a cut host go, destroys what is left while the nodes run,
        stops the nodes (their exit-time sanitizer reports land in the first
        host's), then each host's cleanup (its checks into `checks`), then
        PostgreSQL."""
        for h in list(self.cut_pids):
            self.restore(h)
        try:
            for h in self.hosts:
                for sb in h.ls():
                    h.destroy(sb["id"])
        except Exception:  # noqa: BLE001 - the rest of the cleanup still runs
            pass
        for n in self.nodes:
            n.kill(signal.SIGTERM)
        for h in self.hosts:
            if checks is None:
                h.cleanup(check=False)
            else:
                h.cleanup(into=checks)
        self.cluster.close()


class Load:
    """`workers` threads running execs side by side until stop(): worker w
    owns the sandboxes w, w + workers, ... and runs one exec in each in
    turn, so that a sandbox runs one exec at a time (its marks in order)."""

    def __init__(self, dep: Deployment, workers: int) -> None:
        self.dep, self.stopping = dep, threading.Event()
        self.threads = [threading.Thread(target=self._run, args=(w, workers), daemon=True)
                        for w in range(workers)]
        for t in self.threads:
            t.start()

    def _run(self, w: int, workers: int) -> None:
        mine = self.dep.sandboxes[w::workers]
        while not self.stopping.is_set():
            for sb in mine:
                if self.stopping.is_set():
                    return
                self.dep.exec_mark(sb)

    def stop(self) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=300)


def stream_problems(rows: list[tuple[int, str, str]], want: list[int], index: int) -> list[str]:
    """What is wrong with one sandbox's stored events: seqs not 0..N-1 (a
    gap, a duplicate, out of order), or its marks not exactly the execs'
    (`want`, in the order they ran: one lost, one twice, out of order)."""
    bad = []
    seqs = [s for s, _, _ in rows]
    if not seqs or seqs != list(range(len(seqs))):
        bad.append(f"seqs not 0..{len(seqs) - 1}: first differences "
                   f"{[(i, s) for i, s in enumerate(seqs) if s != i][:5]}")
    got = [int(m.group(2)) for _, kind, payload in rows if kind == "stdout"
           for m in MARK.finditer(payload) if int(m.group(1)) == index]
    if got != want:
        dup = sorted({n for n in got if got.count(n) > 1})
        lost = sorted(set(want) - set(got))
        extra = sorted(set(got) - set(want))
        where = [(seq, m.group(0), EXEC_ID.findall(payload)) for seq, kind, payload in rows if kind == "stdout"
                 for m in MARK.finditer(payload) if int(m.group(2)) in dup + extra]
        bad.append(f"marks: {len(got)} stored for {len(want)} execs; twice {dup[:5]}, lost {lost[:5]}, "
                   f"of no exec that succeeded {extra[:5]}" + ("" if dup or lost or extra else ", out of order")
                   + (f"; (seq, mark, exec_id) of those: {where[:10]}" if where else ""))
    return bad


def verify(dep: Deployment) -> dict[str, list[str]]:
    """stream_problems of every sandbox of the deployment, from the store."""
    rows = dep.all_rows()
    out = {}
    for sb in dep.sandboxes:
        bad = stream_problems(rows.get(sb.sid, []), [n for n, _, _ in sb.ran], sb.index)
        if bad:
            out[sb.sid] = bad
    return out


def checker_fails_on_bad_streams() -> None:
    def ev(seq: int, n: int | None = None) -> tuple[int, str, str]:
        return (seq, "stdout", f'{{"data":"dmark-7-{n}\\n"}}') if n is not None else (seq, "exit", "{}")
    good = [ev(0), ev(1, 0), ev(2), ev(3, 1), ev(4)]
    cases = {
        "clean": (good, []),
        "a duplicate seq": (good[:3] + [good[2]] + good[3:], ["seqs"]),
        "a gap": (good[:2] + good[3:], ["seqs"]),
        "a mark stored twice": (good + [ev(5, 1)], ["marks"]),
        "a mark lost": ([ev(0), ev(1, 0), ev(2)], ["marks"]),
        "marks out of order": ([ev(0), ev(1, 1), ev(2), ev(3, 0)], ["marks"]),
        "nothing stored": ([], ["seqs", "marks"]),
    }
    for name, (rows, want) in cases.items():
        got = [p.split(" ")[0].rstrip(":") for p in stream_problems(rows, [0, 1], 7)]
        tap.eq(got, want, f"the exactly-once check on {name}")


# 2 exec loops: more only slows the waits under ASan on 2 cores
HOSTS, NODES, PER_HOST, WORKERS = 4, 3, 3, 2


def note(what: str, since: float) -> None:
    """A TAP comment with how long a step took (for the run's log only)."""
    print(f"# {what}: {time.monotonic() - since:.1f} s", flush=True)


def run(dep: Deployment) -> None:
    t = time.monotonic()
    dep.create_all(HOSTS * PER_HOST)
    note(f"{len(dep.sandboxes)} sandboxes created", t)
    t = time.monotonic()
    load = Load(dep, WORKERS)
    try:
        phases(dep)
    finally:
        load.stop()
        for h in list(dep.cut_pids):
            dep.restore(h)
    note("the load, a node's kill and a host's cut", t)
    t = time.monotonic()
    failed = [f for sb in dep.sandboxes for f in sb.failed]
    tap.ok(not failed, f"all {sum(len(sb.ran) for sb in dep.sandboxes)} execs ran", "\n".join(failed[:10]))
    bad = dep.destroy_all()
    tap.ok(not bad, "every sandbox destroyed (its rest delivered)", "\n".join(bad))
    note("destroyed", t)
    problems = verify(dep)
    tap.ok(not problems, f"PostgreSQL: every event of the {len(dep.sandboxes)} sandboxes stored exactly once, "
           "seqs contiguous, each exec's mark once and in order",
           "\n".join(f"{sid}: {p}" for sid, ps in problems.items() for p in ps))
    # the same check on the same store with one stored output taken out:
    # it reads the rows themselves and finds the loss
    dep.cluster.sql("DELETE FROM sg_events WHERE id = (SELECT max(id) FROM sg_events WHERE kind = 'stdout')")
    tap.ok(len(verify(dep)) == 1, "PostgreSQL: with one stored output deleted, the check names its sandbox", "")


def uplinks(dep: Deployment, host: int) -> list[str]:
    """`ls`'s uplink reason of each of the host's sandboxes."""
    return [(sb.get("uplink") or {}).get("reason", "") for sb in dep.hosts[host].ls()]


def phases(dep: Deployment) -> None:
    wait = 180  # generous: a loaded machine under ASan is slow, not broken
    tap.ok(wait_for(lambda: all(len(dep.poll().get(sb.sid, {})) >= 1 for sb in dep.sandboxes), wait, 0.2),
           "every sandbox's execs reach the store", repr(dep.uncommitted()[:10]))

    # the node the first host's first sandbox streams to (its list's first,
    # unless that one did not answer in time on a loaded machine)
    port = lambda r: r.rsplit(":", 1)[-1].rstrip(")")  # noqa: E731
    ok = wait_for(lambda: all(r.startswith("connected to node ") for r in uplinks(dep, 0)), wait, 0.2)
    tap.ok(ok, "the first host's sandboxes are connected", repr(uplinks(dep, 0)))
    first = port(uplinks(dep, 0)[0])
    victim = next(n for n in dep.nodes if str(n.port) == first)
    t = time.monotonic()
    victim.kill()
    tap.ok(wait_for(lambda: all(dep.started_after_committed(h, t) for h in range(HOSTS)), wait, 0.2),
           f"node {dep.nodes.index(victim) + 1} killed: every host's later execs stored through the other nodes",
           repr([h for h in range(HOSTS) if not dep.started_after_committed(h, t)]))
    moved = lambda: all(r.startswith("connected to node ") and port(r) != first  # noqa: E731
                        for r in uplinks(dep, 0))
    tap.ok(wait_for(moved, wait, 0.2), "the first host's sandboxes on it moved to another node",
           repr(uplinks(dep, 0)))
    victim.start()

    cut = 1
    t = time.monotonic()
    dep.cut(cut)
    others = [h for h in range(HOSTS) if h != cut]
    ran_after = lambda: [(sb, n) for sb in dep.sandboxes if sb.host == cut  # noqa: E731
                         for n, t0, _ in list(sb.ran) if t0 > t]
    seen = wait_for(lambda: ran_after() and all(dep.started_after_committed(h, t) for h in others), wait, 0.2)
    tap.ok(seen, "host cut off: the other hosts' execs started since reach the store",
           repr([h for h in others if not dep.started_after_committed(h, t)]))
    held = ran_after()
    c = dep.poll()
    tap.ok(held and not any(n in c.get(sb.sid, {}) for sb, n in held) and all(dep.spooled(sb, n) for sb, n in held),
           f"host cut off: its {len(held)} execs since held in its spools, none in the store",
           repr([(sb.mark(n), n in c.get(sb.sid, {}), dep.spooled(sb, n)) for sb, n in held][:10]))
    t_back = time.monotonic()
    dep.restore(cut)
    tap.ok(wait_for(lambda: not dep.uncommitted(cut, t_back), wait, 0.2),
           "host back: its held events reach the store", repr(dep.uncommitted(cut, t_back)[:10]))


def main() -> int:
    if not have_pg():
        print(PG_SKIP)
        return 0
    checker_fails_on_bad_streams()
    t = time.monotonic()
    dep = Deployment(HOSTS, NODES)
    note("PostgreSQL, the hosts and the nodes started", t)
    checks: list = []
    try:
        run(dep)
    finally:
        t = time.monotonic()
        dep.close(checks)
        note("cleaned up", t)
    combined_checks(checks)
    tap.done()
    return 0


if __name__ == "__main__":
    sys.exit(main())
