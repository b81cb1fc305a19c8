#!/usr/bin/env python3
"""A noisy neighbour's disk against another sandbox's capture and the
host's own fsyncs (issue 22, I/O).

Sandbox A (not captured) writes its workspace disk flat out: dd of
--write-mb MiB of zeros with conv=fsync (through the loop device to its
image on the host's disk: without a sync, a file removed before writeback
never reaches a disk), removed, again, for as long as a phase lasts.
Sandbox B (captured, the real ingest on an ephemeral port, its SQLite
store) rewrites a small file (made before) when told; the bench measures file write ->
its file_diff row committed in the store (polled from the SQLite file),
which crosses B's spool fdatasync and the ingest's commit. Beside it a
host probe writes 4 KiB to a file in the state directory and fdatasyncs
it, every 50 ms: the latency of a host fsync like the spool's.

A's loop device is bounded by create (disk.c: sg_disk_io_limit, its bdi's
strict_limit and max_bytes, and a write rate by cgroup v2 io.max where the
host has it; sg_disk_loop_queue, the loop device in direct I/O with a
short queue: nr_requests, max_sectors_kb). The bench never writes a cgroup
outside sandglass/ (no v1 blkio rule: v1 charges writeback to the root).
It saves what create set, and per phase:
  quiet      B alone, A's bounds as create set them
  unlimited  A writing flat out, its bounds taken off (bdi defaults,
             buffered loop device with the driver's queue, no io.max)
  limited    A writing flat out, its bounds as create set them
  bdi_only   only the bdi's strict_limit/max_bytes (the loop buffered)
  queue_only only direct I/O and the short queue (bdi defaults)
  dio_only   only direct I/O (bdi defaults, the driver's queue)
  quiet_after
Phases alternate unlimited/limited --rounds times so they see the same
machine; ratios are limited/unlimited per round and over all samples.
Before the phases: A's own sequential write, dd of --dd-mb MiB with
conv=fsync, unlimited and limited.

usage: bench_io_noisy.py [--build DIR] [--samples N] [--write-mb M] [--dirty-mb D] [--extra PHASES]
Run as root (loop devices, bdi knobs).
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from bench_latency import StoreTail, cap_env, summary  # noqa: E402

WRITER = ("import sys, time\n"
          "for line in sys.stdin:\n"
          "    i = int(line)\n"
          "    t = time.monotonic()\n"
          "    with open(f'io/f{i}.txt', 'w') as f: f.write(f'sample {i}\\n')\n"
          "    sys.stdout.write(f'{i} {t!r}\\n'); sys.stdout.flush()\n")

LOOP_SET_DIRECT_IO = 0x4C08
DRIVER_DEPTH = Path("/sys/module/loop/parameters/hw_queue_depth").read_text().strip()


def loop_bdi(workspace_mount: str) -> str:
    """MAJ:MIN of the loop device mounted at the sandbox's disk mount."""
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        if f[4] == workspace_mount:
            return f[2]
    raise RuntimeError(f"no mount at {workspace_mount}")


class Limits:
    """A's loop device's bounds: read as create left them, taken off, put back."""

    def __init__(self, bdi: str, sid: str, state: str):
        self.bdi = bdi
        self.base = Path(f"/sys/class/bdi/{bdi}")
        self.queue = Path(f"/sys/dev/block/{bdi}/queue")
        self.dev = "/dev/loop" + bdi.split(":")[1]
        self.v2 = None
        for d in Path("/sys/fs/cgroup").glob("sandglass/io.max"):
            self.v2 = d
        self.strict = (self.base / "strict_limit").read_text().strip()
        self.max_bytes = (self.base / "max_bytes").read_text().strip()
        self.dio = Path(f"/sys/dev/block/{bdi}/loop/dio").read_text().strip()
        self.nr = (self.queue / "nr_requests").read_text().strip()
        self.kib = (self.queue / "max_sectors_kb").read_text().strip()
        self.v2_line = self._v2_line()

    def _v2_line(self) -> str:
        if self.v2 is None:
            return ""
        for line in self.v2.read_text().split("\n"):
            if line.startswith(self.bdi + " "):
                return line
        return ""

    def created(self) -> dict:
        return {"strict_limit": self.strict, "max_bytes": self.max_bytes, "dio": self.dio,
                "nr_requests": self.nr, "max_sectors_kb": self.kib, "v2_io_max": self.v2_line}

    def set(self, strict: bool, max_bytes: int, rate: int, dio: bool, queue: bool) -> None:
        if strict:
            (self.base / "max_bytes").write_text(str(max_bytes))
            (self.base / "strict_limit").write_text("1")
        else:
            (self.base / "strict_limit").write_text("0")
            (self.base / "max_ratio").write_text("100")
        set_dio(self.dev, dio)
        (self.queue / "max_sectors_kb").write_text(self.kib if queue else "0")
        (self.queue / "nr_requests").write_text(self.nr if queue else DRIVER_DEPTH)
        if self.v2 is not None:
            self.v2.write_text(f"{self.bdi} wbps={rate or 'max'}")


def set_dio(dev: str, on: bool) -> None:
    fd = os.open(dev, os.O_RDONLY)
    try:
        fcntl.ioctl(fd, LOOP_SET_DIRECT_IO, 1 if on else 0)
    finally:
        os.close(fd)


def plan_phases(a) -> list[str]:
    plan = ["quiet"]
    for r in range(a.rounds):
        plan += [f"unlimited{r}", f"limited{r}"]
    return plan + [x for x in a.extra.split(",") if x] + ["quiet_after"]


def sample(env, sid: str, tail, writer, n: int, start: int) -> list[float]:
    out = []
    for i in range(start, start + n):
        writer.stdin.write(f"{i}\n")
        writer.stdin.flush()
        path = f"io/f{i}.txt"
        t1, _pl, _ts = tail.wait(lambda k, p: k == "file_diff" and p.get("path") == path and
                                 p.get("change") == "modified", timeout=60)
        idx, t_write = writer.stdout.readline().split()
        assert int(idx) == i
        if t1 is not None:
            out.append(t1 - float(t_write))
        time.sleep(random.uniform(0.02, 0.08))
    return out


class FsyncProbe(threading.Thread):
    """The host's own fsync: 4 KiB written and fdatasync'd in the state
    directory every 50 ms; latencies in seconds."""

    def __init__(self, path: str):
        super().__init__(daemon=True)
        self.path = path
        self.xs: list[float] = []
        self.stop_ev = threading.Event()

    def run(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            while not self.stop_ev.wait(0.05):
                t = time.monotonic()
                os.write(fd, b"x" * 4096)
                os.fdatasync(fd)
                self.xs.append(time.monotonic() - t)
        finally:
            os.close(fd)
            os.unlink(self.path)

    def take(self) -> list[float]:
        xs, self.xs = self.xs, []
        return xs


def noisy(env, sid_a: str, mb: int) -> subprocess.Popen:
    script = (f"while :; do dd if=/dev/zero of=/workspace/big bs=1M count={mb} conv=fsync 2>/dev/null; "
              "rm -f /workspace/big; done")
    return subprocess.Popen([os.environ["SANDGLASS_BIN"], "exec", sid_a, "--", "/bin/sh", "-c", script],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env.env, text=True)


def dd_speed(env, sid_a: str, mb: int) -> float:
    """A's own sequential write: dd of mb MiB with conv=fsync, MiB/s."""
    r = env.run("exec", sid_a, "--", "/bin/sh", "-c",
                f"dd if=/dev/zero of=/workspace/dd bs=1M count={mb} conv=fsync 2>&1; rm -f /workspace/dd",
                timeout=600)
    m = re.search(r"copied, ([0-9.]+) s", (r.stdout + r.stderr).decode(errors="replace"))
    return round(mb / float(m.group(1)), 1) if m else -1.0


def sectors_written(bdi: str) -> int:
    """Sectors written to the block device MAJ:MIN so far (its stat's 7th field)."""
    return int(Path(f"/sys/dev/block/{bdi}/stat").read_text().split()[6])


def host_bdi(path: str) -> str:
    """MAJ:MIN of the block device holding path (the state directory's)."""
    d = os.stat(path).st_dev
    host = f"{os.major(d)}:{os.minor(d)}"
    if not Path(f"/sys/dev/block/{host}/stat").exists():  # a partition: its disk's
        host = Path(f"/sys/dev/block/{host}").resolve().parent.name
        host = Path(f"/sys/block/{host}/dev").read_text().strip()
    return host


def stop(env, sid_a: str, p: subprocess.Popen) -> None:
    p.terminate()  # exec passes it on: the loop ends
    try:
        p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
    env.run("exec", sid_a, "--", "/bin/sh", "-c", "rm -f /workspace/big", timeout=300)


def ratios(p: dict, q: dict) -> dict:
    return {m: round(p[m] / q[m], 2) if q.get(m) else None for m in ("p50_ms", "p90_ms", "p99_ms")}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("SG_BUILD", "build"))
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=2, help="unlimited/limited pairs")
    ap.add_argument("--write-mb", type=int, default=256, help="A's file size per dd run")
    ap.add_argument("--dd-mb", type=int, default=1024, help="A's own sequential write, MiB")
    ap.add_argument("--dirty-mb", type=int, default=32, help="when create set no bdi limit: max_bytes here")
    ap.add_argument("--extra", default="bdi_only,queue_only,dio_only",
                    help="extra phases (bdi_only, queue_only, dio_only), comma-separated")
    ap.add_argument("--queue-reqs", type=int, default=0, help="nr_requests of the bound (default: create's)")
    ap.add_argument("--queue-kib", type=int, default=0, help="max_sectors_kb of the bound (default: create's)")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds of A's writing before sampling")
    ap.add_argument("--out", default=str(HERE / "results" / "io_noisy.json"))
    a = ap.parse_args()
    env = cap_env(a.build)
    writer = None
    lim = None
    rate = 0
    probe = None
    try:
        sid_b = env.create_captured()
        sid_a = env.create("--disk", f"{max(2 * a.write_mb, a.dd_mb + 256, 1024)}M", "--memory", "1G")
        a_mount = json.load(open(os.path.join(env.state, "sb", sid_a, "meta.json")))["workspace"]
        bdi = loop_bdi(a_mount)
        host = host_bdi(env.state)
        nr = Path(f"/sys/dev/block/{bdi}/queue/nr_requests")
        end = time.monotonic() + 30  # create leaves the queue's setting to a detached process
        while nr.read_text().strip() == DRIVER_DEPTH and time.monotonic() < end:
            time.sleep(0.05)
        lim = Limits(bdi, sid_a, env.state)
        made = lim.created()
        rate = int(re.search(r"wbps=(\d+)", lim.v2_line).group(1)) if "wbps=" in lim.v2_line else 0
        dirty = int(lim.max_bytes) if lim.strict == "1" else a.dirty_mb << 20
        if lim.dio != "1":  # a build that sets no queue bound: the default's here
            lim.nr, lim.kib = "4", "16"
        lim.nr, lim.kib = str(a.queue_reqs or lim.nr), str(a.queue_kib or lim.kib)
        res: dict = {"samples": a.samples, "write_mb": a.write_mb, "created_with": made,
                     "limit": {"rate_bytes_s": rate, "dirty_max_bytes": dirty,
                               "nr_requests": lim.nr, "max_sectors_kb": lim.kib},
                     "loop_bdi": bdi, "host_bdi": host, "machine": f"{os.cpu_count()} cpus",
                     "load_at_start": os.getloadavg()[0], "phases": {}}
        print("created with", made, flush=True)
        lim.set(False, 0, 0, False, False)
        res["dd_unlimited_mib_s"] = dd_speed(env, sid_a, a.dd_mb)
        lim.set(True, dirty, rate, True, True)
        res["dd_limited_mib_s"] = dd_speed(env, sid_a, a.dd_mb)
        print("dd", res["dd_unlimited_mib_s"], res["dd_limited_mib_s"], flush=True)

        # The samples rewrite files made here (a new file would time the
        # watcher's 500 ms hold for editor saves: bench_latency.py).
        total = a.samples * (len(plan_phases(a)))
        env.sh(sid_b, f"mkdir -p io && for i in $(seq 0 {total - 1}); do echo old > io/f$i.txt; done")
        tail = StoreTail(env.db, sid_b)
        writer = subprocess.Popen([os.environ["SANDGLASS_BIN"], "exec", sid_b, "--", "python3", "-S", "-c", WRITER],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env.env, text=True, bufsize=1)
        probe = FsyncProbe(os.path.join(env.state, ".bench-fsync-probe"))
        probe.start()
        time.sleep(0.5)
        plan = plan_phases(a)
        k = 0
        all_x: dict = {"unlimited": [], "limited": [], "unlimited_fsync": [], "limited_fsync": []}
        for phase in plan:
            kind = phase.rstrip("0123456789")
            bounds = {"unlimited": (False, 0, False, False), "bdi_only": (True, 0, False, False),
                      "queue_only": (False, 0, True, True), "dio_only": (False, 0, True, False)}
            strict, r8, dio, queue = bounds.get(kind, (True, rate, True, True))
            lim.set(strict, dirty, r8, dio, queue)
            noise = None
            if not kind.startswith("quiet"):
                noise = noisy(env, sid_a, a.write_mb)
                time.sleep(a.settle)
            probe.take()
            s0, h0, t0 = sectors_written(bdi), sectors_written(host), time.monotonic()
            xs = sample(env, sid_b, tail, writer, a.samples, k)
            k += a.samples
            dt = time.monotonic() - t0
            fs = probe.take()
            r = {"write_to_file_diff_row": summary(xs), "lost": a.samples - len(xs),
                 "host_fdatasync": summary(fs),
                 "a_loop_write_mib_s": round((sectors_written(bdi) - s0) * 512 / 2**20 / dt, 1),
                 "host_disk_write_mib_s": round((sectors_written(host) - h0) * 512 / 2**20 / dt, 1)}
            if kind in all_x:
                all_x[kind] += xs
                all_x[kind + "_fsync"] += fs
            if noise is not None:
                stop(env, sid_a, noise)
            res["phases"][phase] = r
            print(phase, json.dumps(r), flush=True)
        q = res["phases"]["quiet"]
        for phase, r in res["phases"].items():
            if phase != "quiet":
                r["ratio_over_quiet"] = ratios(r["write_to_file_diff_row"], q["write_to_file_diff_row"])
        for r in range(a.rounds):
            u, li = res["phases"][f"unlimited{r}"], res["phases"][f"limited{r}"]
            li["ratio_over_unlimited"] = ratios(li["write_to_file_diff_row"], u["write_to_file_diff_row"])
            li["fsync_ratio_over_unlimited"] = ratios(li["host_fdatasync"], u["host_fdatasync"])
        su, sl = summary(all_x["unlimited"]), summary(all_x["limited"])
        fu, fl = summary(all_x["unlimited_fsync"]), summary(all_x["limited_fsync"])
        res["all_rounds"] = {"unlimited": su, "limited": sl, "limited_over_unlimited": ratios(sl, su),
                             "fsync_unlimited": fu, "fsync_limited": fl,
                             "fsync_limited_over_unlimited": ratios(fl, fu),
                             "dd_limited_over_unlimited": round(res["dd_limited_mib_s"] / res["dd_unlimited_mib_s"], 3)}
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(res, indent=2) + "\n")
        print(json.dumps(res["all_rounds"], indent=2))
        return 0
    finally:
        if probe is not None:
            probe.stop_ev.set()
        if lim is not None:
            try:
                made_q = lim.dio == "1"
                lim.set(lim.strict == "1", int(lim.max_bytes), rate, made_q, made_q)
            except (OSError, ValueError):
                pass
        if writer is not None:
            writer.kill()
        env.cleanup(check=False)


if __name__ == "__main__":
    sys.exit(main())
