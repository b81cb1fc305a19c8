#!/usr/bin/env python3
"""Issue 22, I/O: a learner writing its disk flat out stalled the host's own
fsyncs (the spool's, the ingest's) and so another sandbox's file_diff: its
loop device took the host's disk at full speed, with gigabytes of its pages
dirty before any writeback began (the host's dirty memory stays under its
freerun threshold, where a bdi's own limits do not apply).

Now create bounds the loop device (sandbox/disk.h): its bdi's
strict_limit with max_bytes 32 MiB (sg_disk_io_limit); the device in direct
I/O with a queue of 4 requests of at most 16 KiB (sg_disk_loop_queue), so
its writes are not a second round of dirty pages on the host's disk and at
most 64 KiB of them are in flight ahead of the host's I/O; and a write
rate by io.max in sandglass/ where the host has cgroup v2's io controller.
No cgroup outside sandglass/ is read for a rule or written (cgroup v1
blkio would charge writeback to its root: sandglass sets nothing there).
This test asserts no timing: the knobs are set for every sandbox's disk
and taken off at destroy, and while the learner writes 768 MiB flat out
without a sync, its dirty and under-writeback pages (its memory cgroup's
own counters: every page of its disk's cache is charged there) never pass
the bound by more than a margin, nor its loop device's requests in flight
the short queue. Without the bounds the pages reach hundreds of MiB (the
host's dirty thresholds are a share of its memory) and the requests the
driver's depth (128), which the control below shows as a comment."""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import SANDGLASS, Env, tap, wait_for  # noqa: E402

MiB = 1 << 20
DIRTY_MAX = 32 * MiB     # SG_DISK_DIRTY_MAX
# balance_dirty_pages lets a writer pass the limit by its last pause's
# pages, and pages under writeback count until their bios end: a margin
# of a second bound, and a constant, far under what an unbounded one makes.
BOUND = 2 * DIRTY_MAX + 32 * MiB
QUEUE_REQS = 4           # SG_DISK_QUEUE_REQS
QUEUE_KIB = 16           # SG_DISK_QUEUE_KIB
# A flush request has its own slot beside the tags: a margin of the
# queue again, far under the driver's depth without the bound.
INFLIGHT_BOUND = 2 * QUEUE_REQS
LOOP_SET_DIRECT_IO = 0x4C08


def cgroup_mounts() -> tuple[str, str]:
    """v1 memory and v2 mount points ("" when absent)."""
    memory = v2 = ""
    for line in open("/proc/self/mountinfo"):
        pre, _, post = line.partition(" - ")
        mnt, (fstype, _src, opts) = pre.split()[4], post.split()[:3]
        if fstype == "cgroup" and "memory" in opts.split(",") and not memory:
            memory = mnt
        if fstype == "cgroup2" and not v2:
            v2 = mnt
    return memory, v2


def loop_dev(mount: str) -> str:
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        if f[4] == mount:
            return f[2]
    raise RuntimeError(f"no mount at {mount}")


def bdi(dev: str, knob: str) -> str:
    return open(f"/sys/class/bdi/{dev}/{knob}").read().strip()


def queue(dev: str, knob: str) -> str:
    return open(f"/sys/dev/block/{dev}/queue/{knob}").read().strip()


def inflight(dev: str) -> int:
    """The loop device's requests in flight (reads + writes)."""
    return sum(int(x) for x in open(f"/sys/dev/block/{dev}/inflight").read().split())


def v2_io(v2: str) -> bool:
    try:
        return "io" in open(os.path.join(v2, "cgroup.controllers")).read().split()
    except OSError:
        return False


def v2_rule(v2: str, dev: str) -> str:
    try:
        for line in open(os.path.join(v2, "sandglass", "io.max")):
            if line.startswith(dev + " "):
                return line.strip()
    except OSError:
        pass
    return ""


def dirty_of(sid: str, memory_v1: str, v2: str) -> int | None:
    """The sandbox's dirty + under-writeback page cache, bytes (its memory
    cgroup, with its leaves)."""
    keys = {"total_dirty", "total_writeback"}
    path = os.path.join(memory_v1, "sandglass", sid, "memory.stat") if memory_v1 else ""
    if not memory_v1:
        keys = {"file_dirty", "file_writeback"}
        path = os.path.join(v2, "sandglass", sid, "memory.stat")
    try:
        return sum(int(v) for k, v in (ln.split() for ln in open(path)) if k in keys)
    except OSError:
        return None


def sectors_written(dev: str) -> int:
    return int(open(f"/sys/dev/block/{dev}/stat").read().split()[6])


class Sampler(threading.Thread):
    def __init__(self, f):
        super().__init__(daemon=True)
        self.f, self.peak, self.n = f, 0, 0
        self.stop_ev = threading.Event()

    def run(self) -> None:
        while not self.stop_ev.wait(0.02):
            v = self.f()
            if v is not None:
                self.peak, self.n = max(self.peak, v), self.n + 1


def flat_out(env: Env, sid: str, fs) -> tuple[list[int], int, int]:
    """The learner's 768 MiB without a sync, each of fs sampled: (their
    peaks, the first one's samples, dd's exit status)."""
    ss = [Sampler(f) for f in fs]
    for s in ss:
        s.start()
    p = subprocess.run([SANDGLASS, "exec", sid, "--", "/bin/sh", "-c",
                        "dd if=/dev/zero of=/workspace/big bs=1M count=768 2>/dev/null; r=$?; "
                        "rm -f /workspace/big; exit $r"], env=env.env, capture_output=True, timeout=900)
    for s in ss:
        s.stop_ev.set()
        s.join()
    return [s.peak for s in ss], ss[0].n, p.returncode


def set_dio(dev: str, on: bool) -> None:
    fd = os.open("/dev/loop" + dev.split(":")[1], os.O_RDONLY)
    try:
        fcntl.ioctl(fd, LOOP_SET_DIRECT_IO, 1 if on else 0)
    finally:
        os.close(fd)


env = Env()
try:
    memory_v1, v2 = cgroup_mounts()
    depth = open("/sys/module/loop/parameters/hw_queue_depth").read().strip()
    a = env.create("--disk", "1G", "--memory", "1G")
    ws = next(sb for sb in env.ls() if sb["id"] == a)["workspace"]
    dev = loop_dev(ws)
    tap.ok(dev.startswith("7:"), "the workspace is a loop device", dev)
    tap.eq(bdi(dev, "strict_limit"), "1", "its bdi's strict_limit is set")
    mb = int(bdi(dev, "max_bytes"))
    tap.ok(DIRTY_MAX * 0.9 <= mb <= DIRTY_MAX * 1.1, "its bdi's max_bytes is the bound (32 MiB)", str(mb))
    # create leaves the queue's setting to a detached process (its freezes
    # would hold create up): waited for, generously
    wait_for(lambda: queue(dev, "nr_requests") == str(QUEUE_REQS), timeout=60)
    tap.eq(open(f"/sys/dev/block/{dev}/loop/dio").read().strip(), "1", "it is in direct-I/O mode")
    tap.eq(queue(dev, "nr_requests"), str(QUEUE_REQS), "its queue holds 4 requests")
    tap.eq(queue(dev, "max_sectors_kb"), str(QUEUE_KIB), "of at most 16 KiB")
    if v2 and v2_io(v2):
        tap.ok("wbps=" in v2_rule(v2, dev) and "wbps=max" not in v2_rule(v2, dev),
               "cgroup v2: io.max for it in sandglass/", v2_rule(v2, dev))
    else:
        tap.ok(True, "# SKIP no cgroup v2 io controller")

    def probe() -> int | None:
        return dirty_of(a, memory_v1, v2)

    tap.ok(probe() is not None, "the sandbox's dirty and writeback pages can be read")
    s0 = sectors_written(dev)
    (peak, qpeak), n, rc = flat_out(env, a, [probe, lambda: inflight(dev)])
    wrote = (sectors_written(dev) - s0) * 512
    print(f"# bounded: peak {peak / MiB:.1f} MiB dirty + writeback, {qpeak} requests in flight, "
          f"{wrote / MiB:.0f} MiB written", flush=True)
    tap.eq(rc, 0, "the learner's 768 MiB were written")
    tap.ok(wrote >= 64 * MiB and n >= 10, "it reached its disk while sampled",
           f"{wrote / MiB:.0f} MiB, {n} samples")
    tap.ok(peak <= BOUND, "its dirty + writeback pages stayed under the bound",
           f"peak {peak / MiB:.1f} MiB, bound {BOUND / MiB:.0f} MiB")
    tap.ok(qpeak <= INFLIGHT_BOUND, "its loop device's requests in flight stayed in the short queue",
           f"peak {qpeak}, bound {INFLIGHT_BOUND}")

    # The control: the same writer with the bounds taken off by hand (what
    # create did before). Not asserted: how far it goes is the kernel's and
    # the host's memory's.
    open(f"/sys/class/bdi/{dev}/strict_limit", "w").write("0")
    open(f"/sys/class/bdi/{dev}/max_ratio", "w").write("100")
    set_dio(dev, False)
    open(f"/sys/dev/block/{dev}/queue/nr_requests", "w").write(depth)
    open(f"/sys/dev/block/{dev}/queue/max_sectors_kb", "w").write("0")
    if v2 and v2_rule(v2, dev):
        open(os.path.join(v2, "sandglass", "io.max"), "w").write(f"{dev} wbps=max")
    (cpeak, cq), _n, _rc = flat_out(env, a, [probe, lambda: inflight(dev)])
    print(f"# control without the bounds: peak {cpeak / MiB:.1f} MiB dirty + writeback, "
          f"{cq} requests in flight", flush=True)
    # ... and create's bounds put back by the same knobs destroy must clear
    open(f"/sys/class/bdi/{dev}/max_bytes", "w").write(str(DIRTY_MAX))
    open(f"/sys/class/bdi/{dev}/strict_limit", "w").write("1")
    open(f"/sys/dev/block/{dev}/queue/nr_requests", "w").write(str(QUEUE_REQS))
    open(f"/sys/dev/block/{dev}/queue/max_sectors_kb", "w").write(str(QUEUE_KIB))

    tap.eq(env.exec(a, "echo", "alive").stdout, b"alive\n", "the sandbox works after it")
    p = env.run("destroy", a, timeout=300)
    tap.eq(p.returncode, 0, "destroy")
    # destroy answers before its disk's release: the reclaimer takes the
    # bounds off, then detaches (waited for, the checks below say what)
    wait_for(lambda: bdi(dev, "strict_limit") == "0" and queue(dev, "nr_requests") == depth and
             queue(dev, "max_sectors_kb") == queue(dev, "max_hw_sectors_kb"), 60)
    tap.eq(bdi(dev, "strict_limit"), "0", "destroy takes strict_limit off the loop device")
    tap.ok(int(bdi(dev, "max_bytes")) > DIRTY_MAX * 4, "and its max_bytes", bdi(dev, "max_bytes"))
    tap.eq(queue(dev, "nr_requests"), depth, "and gives its queue the driver's depth back")
    tap.eq(queue(dev, "max_sectors_kb"), queue(dev, "max_hw_sectors_kb"), "and its transfer size")
    if v2 and v2_io(v2):
        tap.ok(v2_rule(v2, dev) in ("", f"{dev} wbps=max") or "wbps=max" in v2_rule(v2, dev),
               "and its io.max", v2_rule(v2, dev))
finally:
    env.cleanup()
tap.done()
