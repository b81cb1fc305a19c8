#!/usr/bin/env python3
"""A noisy neighbour's disk against another sandbox's capture (issue 22, I/O).

Sandbox A (not captured) writes its workspace disk flat out: dd of
--write-mb MiB of zeros with conv=fsync (through the loop device to its
image on the host's disk: without a sync, a file removed before writeback
never reaches a disk), removed, again, for as long as a phase lasts.
Sandbox B (captured, the real ingest on an ephemeral port, its SQLite
store) writes a small file when told; the bench measures file write ->
its file_diff row committed in the store (polled from the SQLite file),
which crosses B's spool fdatasync and the ingest's commit: the host's own
fsyncs.

Phases, each --samples samples, a random 20-80 ms apart:
  quiet   B alone
  noisy   A writing flat out
  limited A writing flat out, its loop device's writeback bounded: the
          loop device's bdi (/sys/class/bdi/MAJ:MIN) gets max_bytes
          --limit-mb and strict_limit 1, so A's writers are throttled in
          balance_dirty_pages to what the device writes back, with at most
          that much dirty at once (works on cgroup v1, where blkio cannot
          throttle buffered writes). Set back (max_ratio 100, strict_limit
          0) after the phase.
  throttled A writing flat out, cgroup v1 blkio: A's init (so every exec
          it clones after) in sandglass/bench-io-ID of the blkio hierarchy,
          blkio.throttle.write_bps_device on its loop device --throttle-mb
          MiB/s (only the bios A's own tasks submit: its fsyncs; the
          flusher's writeback is the root's in v1). Undone after.

Prints p50/p90/p99 per phase, ratios against quiet, and A's write rate in
each phase (MiB/s written to its loop device, and to the state
directory's disk, from their /sys/dev/block stat); writes bench/results/io_noisy.json.

usage: bench_io_noisy.py [--build DIR] [--samples N] [--write-mb M] [--limit-mb L]
Run as root (loop devices, bdi knobs).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from bench_latency import StoreTail, summary  # noqa: E402

WRITER = ("import sys, time\n"
          "for line in sys.stdin:\n"
          "    i = int(line)\n"
          "    t = time.monotonic()\n"
          "    with open(f'io/f{i}.txt', 'w') as f: f.write(f'sample {i}\\n')\n"
          "    sys.stdout.write(f'{i} {t!r}\\n'); sys.stdout.flush()\n")


def loop_bdi(workspace_mount: str) -> str:
    """MAJ:MIN of the loop device mounted at the sandbox's disk mount."""
    for line in open("/proc/self/mountinfo"):
        f = line.split()
        if f[4] == workspace_mount:
            return f[2]
    raise RuntimeError(f"no mount at {workspace_mount}")


def set_bdi(bdi: str, max_bytes: int) -> None:
    """max_bytes and strict_limit on; max_bytes 0: back to the kernel's
    defaults (max_ratio 100, which resets max_bytes; strict_limit 0)."""
    base = Path(f"/sys/class/bdi/{bdi}")
    if max_bytes:
        (base / "max_bytes").write_text(str(max_bytes))
        (base / "strict_limit").write_text("1")
    else:
        (base / "strict_limit").write_text("0")
        (base / "max_ratio").write_text("100")


BLKIO = Path("/sys/fs/cgroup/blkio")


def blkio_throttle(sid: str, init_pid: int, bdi: str, bps: int) -> Path | None:
    """cgroup v1: a blkio cgroup of its own under sandglass/ for A, its
    writes to its loop device throttled to bps; A's init in it (what it
    clones after follows). None without a v1 blkio hierarchy."""
    if not (BLKIO / "blkio.throttle.write_bps_device").exists():
        return None
    cg = BLKIO / "sandglass" / f"bench-io-{sid}"
    cg.mkdir(parents=True, exist_ok=True)
    (cg / "blkio.throttle.write_bps_device").write_text(f"{bdi} {bps}")
    (cg / "cgroup.procs").write_text(str(init_pid))
    return cg


def blkio_move(sid: str, cg: Path) -> int:
    """Every process of A (its pids cgroup tree: the ready child forked
    before init moved, the execs) into cg. Returns how many."""
    n = 0
    for d, _dirs, files in os.walk(f"/sys/fs/cgroup/pids/sandglass/{sid}"):
        if "cgroup.procs" in files:
            for pid in Path(d, "cgroup.procs").read_text().split():
                try:
                    (cg / "cgroup.procs").write_text(pid)
                    n += 1
                except OSError:
                    pass  # gone
    return n


def blkio_undo(cg: Path | None, init_pid: int) -> None:
    if cg is None:
        return
    try:
        (BLKIO / "cgroup.procs").write_text(str(init_pid))
    except OSError:
        pass  # init gone
    for pid in (cg / "cgroup.procs").read_text().split():
        try:
            (BLKIO / "cgroup.procs").write_text(pid)
        except OSError:
            pass
    for d in (cg, cg.parent):  # the parent too when nothing else is in it
        try:
            d.rmdir()
        except OSError:
            pass


def sample(env, sid: str, tail, writer, n: int, start: int) -> list[float]:
    out = []
    for i in range(start, start + n):
        writer.stdin.write(f"{i}\n")
        writer.stdin.flush()
        path = f"io/f{i}.txt"
        t1, _pl, _ts = tail.wait(lambda k, p: k == "file_diff" and p.get("path") == path, timeout=60)
        idx, t_write = writer.stdout.readline().split()
        assert int(idx) == i
        if t1 is not None:
            out.append(t1 - float(t_write))
        time.sleep(random.uniform(0.02, 0.08))
    return out


def noisy(env, sid_a: str, mb: int) -> subprocess.Popen:
    script = (f"while :; do dd if=/dev/zero of=/workspace/big bs=1M count={mb} conv=fsync 2>/dev/null; "
              "rm -f /workspace/big; done")
    return subprocess.Popen([os.environ["SANDGLASS_BIN"], "exec", sid_a, "--", "/bin/sh", "-c", script],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env.env, text=True)


def sectors_written(bdi: str) -> int:
    """Sectors written to the block device MAJ:MIN so far (its stat's 7th field)."""
    return int(Path(f"/sys/dev/block/{bdi}/stat").read_text().split()[6])


def host_bdi(path: str) -> str:
    """MAJ:MIN of the block device holding path (the state directory's)."""
    d = os.stat(path).st_dev
    return f"{os.major(d)}:{os.minor(d)}"


def stop(env, sid_a: str, p: subprocess.Popen) -> None:
    p.terminate()  # exec passes it on: the loop ends
    try:
        p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()
    env.run("exec", sid_a, "--", "/bin/sh", "-c", "rm -f /workspace/big", timeout=120)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("SG_BUILD", "build"))
    ap.add_argument("--samples", type=int, default=60)
    ap.add_argument("--write-mb", type=int, default=256, help="A's file size per dd run")
    ap.add_argument("--limit-mb", type=int, default=32, help="the loop bdi's max_bytes in the limited phase")
    ap.add_argument("--throttle-mb", type=int, default=50,
                    help="cgroup v1 blkio write_bps on A's loop device in the throttled phase, MiB/s")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds of A's writing before sampling")
    ap.add_argument("--out", default=str(HERE / "results" / "io_noisy.json"))
    a = ap.parse_args()
    build = Path(a.build).resolve()
    os.environ.setdefault("SANDGLASS_BIN", str(build / "sandglass"))
    os.environ.setdefault("SANDGLASSD_BIN", str(build / "sandglassd"))
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    from test_capture import CapEnv  # noqa: E402  (reads the *_BIN variables)

    env = CapEnv()
    writer = None
    bdi = None
    cg = None
    init_a = 0
    try:
        sid_b = env.create_captured()
        sid_a = env.create("--disk", f"{max(2 * a.write_mb, 1024)}M", "--memory", "1G")
        a_mount = json.load(open(os.path.join(env.state, "sb", sid_a, "meta.json")))["workspace"]
        bdi = loop_bdi(a_mount)
        host = host_bdi(env.state)
        if not Path(f"/sys/dev/block/{host}/stat").exists():  # a partition: its disk's
            host = Path(f"/sys/dev/block/{host}").resolve().parent.name
            host = Path(f"/sys/block/{host}/dev").read_text().strip()
        env.sh(sid_b, "mkdir -p io")
        tail = StoreTail(env.db, sid_b)
        writer = subprocess.Popen([os.environ["SANDGLASS_BIN"], "exec", sid_b, "--", "python3", "-S", "-c", WRITER],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env.env, text=True, bufsize=1)
        time.sleep(0.5)
        res: dict = {"samples": a.samples, "write_mb": a.write_mb, "limit_mb": a.limit_mb,
                     "loop_bdi": bdi, "host_bdi": host, "machine": f"{os.cpu_count()} cpus", "phases": {}}
        k = 0
        init_a = int(json.load(open(os.path.join(env.state, "sb", sid_a, "meta.json")))["init_pid"])
        for phase in ("quiet", "noisy", "limited", "throttled", "quiet_after"):
            noise = None
            if phase == "limited":
                set_bdi(bdi, a.limit_mb << 20)
            if phase == "throttled":
                cg = blkio_throttle(sid_a, init_a, bdi, a.throttle_mb << 20)
                if cg is None:
                    res["phases"][phase] = {"skipped": "no cgroup v1 blkio hierarchy"}
                    continue
            if phase in ("noisy", "limited", "throttled"):
                noise = noisy(env, sid_a, a.write_mb)
                time.sleep(0.5)
                if phase == "throttled":
                    res.setdefault("throttled_moved", blkio_move(sid_a, cg))
                time.sleep(a.settle)
            s0, h0, t0 = sectors_written(bdi), sectors_written(host), time.monotonic()
            xs = sample(env, sid_b, tail, writer, a.samples, k)
            k += a.samples
            dt = time.monotonic() - t0
            r = {"write_to_file_diff_row": summary(xs), "lost": a.samples - len(xs),
                 "a_loop_write_mib_s": round((sectors_written(bdi) - s0) * 512 / 2**20 / dt, 1),
                 "host_disk_write_mib_s": round((sectors_written(host) - h0) * 512 / 2**20 / dt, 1)}
            if noise is not None:
                stop(env, sid_a, noise)
            if phase == "limited":
                set_bdi(bdi, 0)
            if phase == "throttled":
                blkio_undo(cg, init_a)
                cg = None
            res["phases"][phase] = r
            print(phase, json.dumps(r), flush=True)
        q = res["phases"]["quiet"]["write_to_file_diff_row"]
        for phase in ("noisy", "limited", "throttled", "quiet_after"):
            if "write_to_file_diff_row" not in res["phases"][phase]:
                continue
            p = res["phases"][phase]["write_to_file_diff_row"]
            res["phases"][phase]["ratio_over_quiet"] = {
                m: round(p[m] / q[m], 2) if q[m] else None for m in ("p50_ms", "p90_ms", "p99_ms")}
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(res, indent=2) + "\n")
        print(json.dumps(res, indent=2))
        return 0
    finally:
        if bdi:
            try:
                set_bdi(bdi, 0)
            except OSError:
                pass
        blkio_undo(cg, init_a)
        if writer is not None:
            writer.kill()
        env.cleanup(check=False)


if __name__ == "__main__":
    sys.exit(main())
