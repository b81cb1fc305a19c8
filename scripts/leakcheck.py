#!/usr/bin/env python3
"""The end of a test run: nothing the run made is left on the host.

    leakcheck.py ROOT [--wait SECONDS]

ROOT is the run's own directory (scripts/test.sh's SG_TEST_ROOT, also the
tests' TMPDIR): every test's state directory lives under it, and sgtest.py
writes ROOT/sandboxes, the ids of the sandboxes its Envs made. Only what
this run made is looked at, so two runs can share a host:
- processes whose environment holds SG_TEST_ROOT=ROOT or whose command
  line names ROOT (the supervisors, workers, uplink daemons and ingests
  the tests started inherit it);
- the cgroups sandglass/<id> of the sandboxes in ROOT/sandboxes, on every
  hierarchy (init and everything under it lives there);
- mounts whose source or mount point is under ROOT, and loop devices whose
  backing file is (each workspace's disk image), with their mounts;
- uid slots (/run/sandglass-uids) naming a state directory under ROOT.

Waits (at most --wait seconds, polling) for what is still going away, then
prints one line per leak and exits 1, or exits 0 on a clean host.
"""
import argparse
import os
import subprocess
import sys
import time

CG_BASES = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/memory",
            "/sys/fs/cgroup/pids", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct",
            "/sys/fs/cgroup/freezer")
UID_DIR = "/run/sandglass-uids"


def read(path, mode="r"):
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError:
        return b"" if "b" in mode else ""


def ancestors():
    """This process and its ancestors (test.sh and what runs it)."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        stat = read(f"/proc/{pid}/stat")
        try:
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (IndexError, ValueError):
            break
    return out


def under(path, root):
    return path == root or path.startswith(root + "/")


def env_tests(root):
    """{Env directory name: test script} from ROOT/envs (sgtest.py)."""
    out = {}
    for line in read(os.path.join(root, "envs")).splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2:
            out[parts[0]] = parts[1]
    return out


def whose(text, root, tests):
    """The test whose Env directory text names, as " (made by TEST)"."""
    rest = text.split(root + "/", 1)
    name = rest[1].split("/", 1)[0].split()[0] if len(rest) == 2 and rest[1] else ""
    return f" (made by {tests[name]})" if name in tests else ""


def leaked_processes(root):
    mark = f"SG_TEST_ROOT={root}".encode()
    tests = env_tests(root)
    skip = ancestors()
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) in skip:
            continue
        env = read(f"/proc/{d}/environ", "rb").split(b"\0")
        cmd = read(f"/proc/{d}/cmdline", "rb").replace(b"\0", b" ").decode(errors="replace").strip()
        if mark in env or root in cmd:
            stat = read(f"/proc/{d}/stat")
            state = stat.rsplit(")", 1)[1].split()[0] if ")" in stat else "?"
            state_dir = next((v.decode(errors="replace") for v in env
                              if v.startswith(b"SANDGLASS_STATE_DIR=")), "")
            if stat:
                out.append(f"process {d} ({read(f'/proc/{d}/comm').strip()}, state {state}): {cmd[:200]}"
                           + whose(state_dir + " " + cmd, root, tests))
    return out


def leaked_cgroups(root):
    try:
        ids = sorted(set(read(os.path.join(root, "sandboxes")).split()))
    except OSError:
        ids = []
    # a sandbox's own, and its supervisor's beside it
    return [f"cgroup {os.path.join(b, 'sandglass', n)}" for i in ids for n in (i, i + ":supervisor")
            for b in CG_BASES if os.path.isdir(os.path.join(b, "sandglass", n))]


def loop_devices(root):
    """{device: backing file} of the loop devices backed by a file under root."""
    p = subprocess.run(["losetup", "-l", "-n", "-O", "NAME,BACK-FILE"], capture_output=True, text=True)
    out = {}
    for line in p.stdout.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2 and under(parts[1].replace(" (deleted)", "").strip(), root):
            out[parts[0]] = parts[1].strip()
    return out


def leaked_mounts(root, loops):
    out = []
    for line in read("/proc/self/mountinfo").splitlines():
        f = line.split()
        if " - " not in line or len(f) < 5:
            continue
        source = line.split(" - ", 1)[1].split()[1]
        if under(f[4], root) or under(f[3], root) or under(source, root) or source in loops:
            out.append(f"mount {f[4]} (from {source})")
    return out


def leaked_uid_slots(root):
    out = []
    try:
        slots = os.listdir(UID_DIR)
    except OSError:
        return out
    for s in slots:
        owner = read(os.path.join(UID_DIR, s)).strip()
        if owner and under(owner, root):
            out.append(f"uid slot {UID_DIR}/{s} ({owner})")
    return out


def leaks(root):
    loops = loop_devices(root)
    return (leaked_processes(root) + leaked_cgroups(root) + leaked_mounts(root, loops)
            + [f"loop device {d} ({b})" for d, b in sorted(loops.items())] + leaked_uid_slots(root))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("root")
    ap.add_argument("--wait", type=float, default=30.0)
    a = ap.parse_args()
    root = os.path.realpath(a.root)
    if len(root) < 6 or root == "/tmp":
        print(f"leakcheck: {root} is not a run's own directory", file=sys.stderr)
        return 2
    end = time.monotonic() + a.wait
    found = leaks(root)
    while found and time.monotonic() < end:
        time.sleep(0.5)
        found = leaks(root)
    for what in found:
        print(f"LEAK {what}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
