#!/usr/bin/env python3
"""workspace --at / fork --at of a 1,000-file, 20 MB workspace (issue 24).

A captured sandbox with a real ingest creates 1,000 files of 20,480 bytes
in 20 directories (its budget of event bytes raised so that all are
stored); once the store's events name every file with a stored content,
and every such content is whole in the store, SEQ is the last event and
the rebuilt tree is checked (1,000 files, 20,480,000 bytes). Then
interleaved rounds time:
  anchor `sandglass create` then `tar -x` of the same files into its workspace
  dir    `workspace --at SEQ --out DIR`, DIR in a fresh sandbox's workspace
  tar    `workspace --at SEQ --out -` piped into `tar -x -C DIR`, the same
  null   `workspace --at SEQ --out -` into /dev/null (the fetches alone)
  fork   `fork --at SEQ` (a new live sandbox)
  seeded `sandglass create --from REF` (REF: the rebuilt tree): a create
         whose workspace holds the files when its supervisor starts, as a
         fork's does (its first checkpoint and seed events then cover them:
         the anchor's come after its clock stops)
and print each one's median in seconds and its ratio to the anchor's.
Target: under 1 s and under 2x the anchor. --probe: before the rounds,
GET /healthz and one event to its ack, in turn, while 5 fetches (`null`)
run back to back, and while nothing does (the ingest must keep serving
its streams during a fetch). --compare BIN times a second
sandglass binary (e.g. main's build) for dir, tar, null and fork in the same
rounds, side by side (its names prefixed other_).

usage: bench_workspace.py [--build DIR] [--rounds N] [--compare BIN] [--hold S] [--probe]
writes bench/results/workspace.json"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from bench_latency import cap_env  # noqa: E402

SCRIPT = ("import os\n"
          "for d in range(20):\n"
          "    os.makedirs('src/d%02d' % d, exist_ok=True)\n"
          "    for i in range(50):\n"
          "        open('src/d%02d/f%03d.txt' % (d, i), 'wb').write((('d%d f%d ' % (d, i)) * 4000)[:20480].encode())\n")


NFILES, FSIZE = 1000, 20480


def stored_files(rows: list[dict]) -> dict:
    """src/d* path -> sha256 of the files the events up to the last row
    give a stored content (file_diff and bulk entries, in seq order)."""
    st: dict = {}
    for x in rows:
        ps = [x["payload"]] if x["kind"] == "file_diff" else \
            x["payload"].get("files", []) if x["kind"] == "bulk" else []
        for p in ps:
            path, c = p.get("path", ""), p.get("content") or {}
            if path.startswith("src/d") and not p.get("dir") and p.get("change") != "deleted" \
                    and c.get("stored") and c.get("size") == FSIZE:
                st[path] = c["sha256"]
    return st


def contents_whole(env, rows: list[dict]) -> bool:
    """Every content the files name is in the store, all its bytes."""
    want = set(stored_files(rows).values())
    if not want:
        return False
    have = {s for (s,) in env._query(
        "SELECT c.sha256 FROM sg_contents c WHERE c.size = (SELECT coalesce(sum(length(data)), 0)"
        " FROM sg_content_parts p WHERE p.sha256 = c.sha256)", ())}
    return want <= have


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("SG_BUILD", "build"))
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--compare", default="", help="another sandglass binary, timed side by side")
    ap.add_argument("--out", default=str(HERE / "results" / "workspace.json"))
    ap.add_argument("--hold", type=float, default=0,
                    help="after the setup, print the commands and wait this many seconds (to profile by hand)")
    ap.add_argument("--probe", action="store_true", help="the ingest's healthz and ack round trips during fetches")
    a = ap.parse_args()
    env = cap_env(a.build)
    bins = {"": os.environ["SANDGLASS_BIN"]}
    if a.compare:
        bins["other_"] = str(Path(a.compare).resolve())
    try:
        # past the default 16 MiB a minute of event frames the rest would be counted, not stored
        sid = env.create_captured("--max-bytes-per-min", "256M")
        p = env.exec(sid, "python3", "-S", "-c", SCRIPT, timeout=600)
        assert p.returncode == 0, p.stderr
        # The state to time is the whole 1,000-file workspace: wait until the
        # store's events (file_diff, and bulk past the per-exec limit) name
        # every file with a stored content and every such content is in the
        # store whole; SEQ is then the last event stored.
        rows = env.wait_rows(sid, lambda r: len(stored_files(r)) >= NFILES and contents_whole(env, r), 600)
        files = stored_files(rows)
        assert len(files) == NFILES and contents_whole(env, rows), f"the store has {len(files)} of {NFILES} files"
        seq = max(x["seq"] for x in rows)
        ingest = ["--ingest", env.ingest.http_base, "--secret", env.secret]
        work = os.path.join(env.root, "bw")
        os.makedirs(work)
        tarball = os.path.join(work, "files.tar")
        ref = os.path.join(work, "ref")
        r = subprocess.run([bins[""], "workspace", "--sandbox", sid, "--at", str(seq), "--out", ref, *ingest],
                           env=env.env, capture_output=True)
        assert r.returncode == 0, r.stderr
        nfiles = sum(len(f) for _, _, f in os.walk(ref))
        nbytes = sum(os.path.getsize(os.path.join(r_, f)) for r_, _, fs in os.walk(ref) for f in fs)
        assert (nfiles, nbytes) == (NFILES, NFILES * FSIZE), f"rebuilt {nfiles} files, {nbytes} bytes"
        subprocess.run(["tar", "-cf", tarball, "-C", ref, "."], check=True)

        # both binaries' tar streams, byte for byte (the rebuild's output must not change)
        def ws_cmd(b, out):
            # each binary with its own sandglassd (the thin CLI runs workspace and
            # fork there, found by $SANDGLASSD, which the test env sets to --build's)
            return (f"SANDGLASSD='{Path(b).parent / 'sandglassd'}' '{b}' workspace --sandbox {sid} --at {seq}"
                    f" --out {out} --ingest {ingest[1]} --secret {ingest[3]}")

        streams = {pre: hashlib.sha256(subprocess.run(ws_cmd(b, "-"), shell=True, env=env.env, capture_output=True,
                                                      check=True).stdout).hexdigest() for pre, b in bins.items()}
        same_output = len(set(streams.values())) == 1
        if a.hold:
            print(f"SANDGLASS_STATE_DIR={env.env.get('SANDGLASS_STATE_DIR', '')} {bins['']} workspace --sandbox {sid}"
                  f" --at {seq} --out DIR {' '.join(ingest)}", flush=True)
            end = time.monotonic() + a.hold
            while time.monotonic() < end:
                time.sleep(1)

        # dir and tar write into a fresh sandbox's workspace (made before the
        # clock starts, destroyed after it stops): the filesystem the anchor
        # and fork write to (create's own ext4 image), not the shared disk
        # under the bench's directory, whose writeback other jobs share.
        def into_sandbox(cmd):
            new = env.create("--task", "T")
            d = os.path.join(env.workspace(new), "out")
            t = time.monotonic()
            r = subprocess.run(cmd(d), shell=True, env=env.env, capture_output=True)
            dt = time.monotonic() - t
            assert r.returncode == 0, r.stderr
            env.destroy(new)
            return dt

        def t_dir(b, k):
            return into_sandbox(lambda d: ws_cmd(b, d))

        def t_tar(b, k):
            return into_sandbox(lambda d: f"mkdir {d} && {ws_cmd(b, '-')} | tar -x -C {d}")

        def t_null(b, k):  # the tar stream into /dev/null: the fetches alone, no file written
            t = time.monotonic()
            r = subprocess.run(f"{ws_cmd(b, '-')} > /dev/null", shell=True, env=env.env, capture_output=True)
            dt = time.monotonic() - t
            assert r.returncode == 0, r.stderr
            return dt

        def t_fork(b, k):
            e = dict(env.env, SANDGLASSD=str(Path(b).parent / "sandglassd"))
            t = time.monotonic()
            r = subprocess.run([b, "fork", "--sandbox", sid, "--at", str(seq), "--ingest", env.ingest.ws,
                                "--secret", env.secret], env=e, capture_output=True, timeout=120)
            dt = time.monotonic() - t
            assert r.returncode == 0, r.stderr
            env.destroy(r.stdout.decode().strip())
            return dt

        def t_anchor(k):
            t = time.monotonic()
            new = env.create("--task", "T")
            subprocess.run(["tar", "-x", "-C", env.workspace(new), "-f", tarball], check=True)
            dt = time.monotonic() - t
            env.destroy(new)
            return dt

        def t_seeded(k):  # a create whose workspace holds the files from its start, as a fork's does
            t = time.monotonic()
            new = env.create("--task", "T", "--from", ref)
            dt = time.monotonic() - t
            env.destroy(new)
            return dt

        probes = {}
        if a.probe:
            from bench_export import probe
            state = env.env.get("SANDGLASS_STATE_DIR", "")
            sgd = str(Path(bins[""]).parent / "sandglassd")

            def fetches():
                for _ in range(5):
                    t_null(bins[""], 0)
            probes = {"idle": probe(env.ingest.port, state, sgd, lambda: time.sleep(1), env.secret),
                      "fetching": probe(env.ingest.port, state, sgd, fetches, env.secret)}
        got: dict[str, list[float]] = {}
        for k in range(a.rounds):
            steps = [("anchor", lambda: t_anchor(k)), ("seeded", lambda: t_seeded(k))]
            for pre, b in bins.items():
                steps += [(pre + "dir", lambda b=b: t_dir(b, k)), (pre + "tar", lambda b=b: t_tar(b, k)),
                          (pre + "null", lambda b=b: t_null(b, k)), (pre + "fork", lambda b=b: t_fork(b, k))]
            if k % 2:
                steps.reverse()
            for name, fn in steps:
                got.setdefault(name, []).append(fn())
        med = {n: statistics.median(v) for n, v in got.items()}
        res = {"files": nfiles, "bytes": nbytes, "seq": seq, "tar_sha256": streams, "same_output": same_output,
               "rounds": a.rounds, "loadavg": os.getloadavg(), "binaries": bins,
               "median_s": {n: round(v, 3) for n, v in med.items()},
               "all_s": {n: [round(x, 3) for x in v] for n, v in got.items()},
               "ratio_to_anchor": {n: round(v / med["anchor"], 2) for n, v in med.items() if n != "anchor"},
               "fork_ratio_to_seeded": {n: round(med[n] / med["seeded"], 2) for n in med if n.endswith("fork")},
               "target": "under 1 s and under 2x the anchor", **({"probe": probes} if probes else {})}
        res["target_met"] = {n: med[n] < 1 and res["ratio_to_anchor"][n] < 2 for n in ("dir", "tar", "fork")}
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(res, indent=2) + "\n")
        print(json.dumps(res, indent=2))
        return 0
    finally:
        env.cleanup()


if __name__ == "__main__":
    sys.exit(main())
