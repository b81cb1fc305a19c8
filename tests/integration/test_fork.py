#!/usr/bin/env python3
"""Issue 24, fork any moment: `sandglass fork --sandbox ID --at SEQ` makes a
new live sandbox whose workspace is the exact code state at SEQ, read from
the store alone. A scripted session with a few file changes; a fork at an
earlier seq: its /workspace equals `workspace --at` of that seq byte for
byte (and modes), differs from the latest state, its `sandbox` event says
where it came from and names who forked it (its `actor`, the seed events'
`operator: {action: "seed", actor}`), it runs an exec, and a fork works
after the original is destroyed. Bad input (unknown sandbox, SEQ past the end) fails with one
line.

The fork's record stays complete although its seed sends no content the
store holds (the fork read them from it, the store its sandbox streams to):
its seed events name every file with its sha256 and size, fewer blob frames
reach the ingest than it has files (only what the seed still reads: a link),
`workspace --sandbox FORK --at <its seed's last seq>` equals the origin's
state, and still does after the origin is purged. `create --from` of the
same tree still sends its contents. TAP output."""
from __future__ import annotations

import hashlib
import json
import os
import time
import re
import stat
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import tap  # noqa: E402
from test_capture import CapEnv, creator_check, seeds_by_operator  # noqa: E402
from test_contents import settle, snapshot  # noqa: E402


def ok(cond, name: str, diag="") -> bool:
    return tap.ok(bool(cond), name, diag if isinstance(diag, str) else repr(diag))


def tree(root: str, modes: bool = True) -> dict:
    """path -> (kind, bytes' sha256 or link target, mode bits unless not
    modes); a name that is not UTF-8 as os.walk gives it (surrogates)."""
    out = {}
    for d, dirs, files in os.walk(root):
        for n in files + dirs:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", hashlib.sha256(open(p, "rb").read()).hexdigest()) + \
                    ((oct(st.st_mode & 0o777),) if modes else ())
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
    return out


def blobs_received(env: CapEnv) -> int:
    """The ingest's count of blob frames (contents, recordings) received."""
    text = urllib.request.urlopen(env.ingest.http_base + "/metrics", timeout=30).read().decode()
    m = re.search(r"^sandglass_ingest_blobs_received_total (\d+)", text, re.M)
    return int(m.group(1)) if m else -1


def seeded(env: CapEnv, sid: str, n: int) -> list[dict]:
    """The sandbox's seed file_diffs, once n of them are in the store."""
    rows = env.wait_rows(sid, lambda r: sum(1 for x in r if x["payload"].get("seed")) >= n, 120)
    return [x for x in rows if x["kind"] == "file_diff" and x["payload"].get("seed")]


def seed_complete(env: CapEnv, fid: str, rows: list[dict], want: dict, fws: str, what: str) -> None:
    """Each file and link of want has a seed event naming its content
    (sha256 and size), and the store rebuilds want at the seed's last seq."""
    named = {x["payload"]["path"]: x["payload"].get("content") or {} for x in rows}
    bad = {}
    for rel, v in want.items():
        c = named.get(rel, {})
        if v[0] == "file":
            size = len(open(os.path.join(fws, rel), "rb").read()) if os.path.exists(os.path.join(fws, rel)) else -1
            if c.get("sha256") != v[1] or c.get("size") != size or not c.get("stored"):
                bad[rel] = c
        elif v[0] == "link" and (c.get("type") != "link" or not c.get("stored")):
            bad[rel] = c
    ok(want and not bad, f"{what}: its seed events name every file's stored content, sha256 and size", bad)
    last = max((x["seq"] for x in rows), default=-1)
    out = tempfile.mkdtemp(dir=env.root)
    os.rmdir(out)
    p = env.run("workspace", "--sandbox", fid, "--at", str(last), "--out", out,
                "--ingest", env.ingest.http_base, "--secret", env.secret)
    got = tree(out) if p.returncode == 0 else {}
    ok(got == want, f"{what}: workspace --sandbox FORK --at its seed's last seq ({last}) equals the origin's state",
       {"want": want, "got": got, "err": p.stderr})


def fork(env: CapEnv, *args: str):
    return env.run("fork", *args, "--ingest", env.ingest.ws, "--secret", env.secret, timeout=120)


def ambiguous(env: CapEnv) -> None:
    """Two streams in the store whose ids share a prefix (loaded by import,
    the operator's way into a store): the prefix names neither."""
    rows = [{"learner": "t", "task": "T", "sandbox": f"abcd0000000{i}", "seq": 0, "kind": "sandbox",
             "ts": "2026-01-01T00:00:00.000Z", "received": "2026-01-01T00:00:00.000Z",
             "payload": {"state": "created"}} for i in (1, 2)]
    f = os.path.join(env.root, "two.jsonl")
    with open(f, "w") as out:
        out.writelines(json.dumps(r) + "\n" for r in rows)
    p = env.run("import", f, "--store", "sqlite:" + env.db)
    ok(p.returncode == 0, "two streams with ids sharing a prefix imported", p.stderr)
    p = fork(env, "--sandbox", "abcd", "--at", "0")
    err = p.stderr.decode()
    ok(p.returncode == 1 and "is the start of 2 sandbox ids (abcd00000001, abcd00000002)" in err
       and err.count("\n") == 1, "bad input: an ambiguous prefix, its candidates named", err)
    # the ingest resolves a prefix itself: only the streams it names travel
    def sbs(q):
        return sorted(r["sandbox"] for r in env.ingest.http("/v1/sandboxes" + q)["sandboxes"])
    ok(sbs("?prefix=abcd") == ["abcd00000001", "abcd00000002"] and sbs("?prefix=abcd00000002") == ["abcd00000002"]
       and sbs("?prefix=abc") == [] and len(sbs("")) > 2, "/v1/sandboxes?prefix=: the one rule, on the ingest",
       [sbs("?prefix=abcd"), sbs("?prefix=abc")])
    # the one prefix rule for every command that reads the store
    store = ("--ingest", env.ingest.ws, "--secret", env.secret)
    for args in (["events", "--sandbox", "abcd"], ["workspace", "--sandbox", "abcd0000000", "--at", "0",
                                                    "--out", os.path.join(env.root, "never")],
                 ["cast", "abcd"], ["sessions", "--sandbox", "abcd"],
                 ["export", "--format", "jsonl", "--out", "-", "--sandbox", "abcd"]):
        p = env.run(*args, *store, timeout=120)
        err = p.stderr.decode()
        ok(p.returncode == 1 and "is the start of 2 sandbox ids" in err and err.count("\n") == 1,
           f"{args[0]}: an ambiguous prefix in the store is refused naming its candidates", err)
    p = env.run("events", "--sandbox", "abcd00000002", *store, "--json", timeout=120)
    ok(p.returncode == 0 and p.stdout.count(b"\n") == 1 and b"abcd00000001" not in p.stdout,
       "events: the whole id names one of them", p.stdout + p.stderr)
    p = env.run("events", "--sandbox", "abc", *store, timeout=120)
    err = p.stderr.decode()
    ok(p.returncode == 1 and "a sandbox id prefix needs at least 4 characters" in err and err.count("\n") == 1,
       "events: a prefix under 4 characters is refused", err)


def import_one(env: CapEnv, sandbox: str, path: str, sha: str, what: str) -> None:
    """A one-event stream into the store: a file_diff naming path with a
    stored content sha (whatever the store holds)."""
    row = {"learner": "t", "task": "T", "sandbox": sandbox, "seq": 0, "kind": "file_diff",
           "ts": "2026-01-01T00:00:00.000Z", "received": "2026-01-01T00:00:00.000Z",
           "payload": {"path": path, "change": "created",
                       "content": {"type": "file", "sha256": sha, "size": 1, "mode": 420, "stored": True}}}
    f = os.path.join(env.root, sandbox + ".jsonl")
    with open(f, "w") as out:
        out.write(json.dumps(row) + "\n")
    p = env.run("import", f, "--store", "sqlite:" + env.db)
    ok(p.returncode == 0, f"{what} imported", p.stderr)


def outside(env: CapEnv) -> None:
    """A stream that names a path outside the workspace (what an outside
    capture agent could send): the rebuild writes nothing for it."""
    import_one(env, "e0110000000a", "a/../../escape.txt", "0" * 64, "a stream naming a path outside its workspace")
    d = os.path.join(env.root, "outside", "ws")
    os.makedirs(os.path.dirname(d))
    p = env.run("workspace", "--sandbox", "e0110000000a", "--at", "0", "--out", d,
                "--ingest", env.ingest.http_base, "--secret", env.secret)
    err = p.stderr.decode()
    ok(p.returncode == 3 and "is not a path inside the workspace" in err and os.listdir(d) == []
       and os.listdir(os.path.dirname(d)) == ["ws"], "the path is named on stderr and nothing written for it", err)


def failed_rebuild(env: CapEnv) -> None:
    """A stream whose file names a content the store does not hold: the
    rebuild fails while the new sandbox's supervisor sets it up (it waits
    for the workspace before its capture), and the new sandbox is undone:
    no record left, no supervisor alive."""
    import_one(env, "f0110000000b", "gone.txt", "2" * 64, "a stream naming a content the store lacks")
    had = set(os.listdir(os.path.join(env.state, "sb")))
    # The undone sandbox's disk goes to the background reclaimer, held here
    # (SANDGLASS_TEST_RECLAIM_HOLD) until the fork has returned: its uid
    # slot must still come back once the reclaimer runs (the fork's own
    # cleanup once removed the mount first, and the reclaimer, finding no
    # mount, never gave the slot back).
    hold = os.path.join(env.root, "reclaim-hold")
    open(hold, "w").close()
    try:
        p = env.run("fork", "--sandbox", "f0110000000b", "--at", "0", "--ingest", env.ingest.ws,
                    "--secret", env.secret, timeout=120, env={"SANDGLASS_TEST_RECLAIM_HOLD": hold})
    finally:
        os.unlink(hold)
    err = p.stderr.decode()
    ok(p.returncode == 1 and "is not in the store" in err, "a fork whose rebuild fails says why", err)
    left = set(os.listdir(os.path.join(env.state, "sb"))) - had
    ok(not left, "and leaves no sandbox behind", left)
    reclaim = os.path.join(env.state, "reclaim")
    end = time.monotonic() + 120
    while os.path.isdir(reclaim) and os.listdir(reclaim) and time.monotonic() < end:
        time.sleep(0.05)
    mine = os.path.join(env.state, "sb") + "/"
    stale = []
    for slot in os.listdir("/run/sandglass-uids") if os.path.isdir("/run/sandglass-uids") else []:
        try:
            owner = open(os.path.join("/run/sandglass-uids", slot)).read().strip()
        except OSError:
            continue
        if owner.startswith(mine) and not os.path.exists(owner):
            stale.append((slot, owner))
    ok(not (os.path.isdir(reclaim) and os.listdir(reclaim)) and not stale,
       "its disk reclaimed in the background and its uid slot given back", stale)


def main() -> None:
    env = CapEnv()
    try:
        run(env)
    finally:
        env.cleanup()
    tap.done()


def run(env: CapEnv) -> None:
    sid = env.create_captured()
    ws = env.workspace(sid)
    env.sh(sid, "printf 'one\\n' > a.txt && mkdir -p src/pkg && printf 'x = 1\\n' > src/pkg/m.py"
                " && ln -s a.txt link && head -c 3000 /dev/urandom > b.bin && chmod 750 b.bin"
                " && mkdir many && for i in $(seq 20); do echo $i > many/f$i; done")
    early = settle(env, sid, snapshot(ws))
    ok(early >= 0, "the store caught up with the first state")
    env.sh(sid, "printf 'two\\n' >> a.txt && rm src/pkg/m.py && printf 'new' > c.txt")
    late = settle(env, sid, snapshot(ws))
    ok(late > early, "the store caught up with the last state", f"{early} {late}")

    out = os.path.join(env.root, "at-early")
    p = env.run("workspace", "--sandbox", sid, "--at", str(early), "--out", out,
                "--ingest", env.ingest.http_base, "--secret", env.secret)
    ok(p.returncode == 0, "workspace --at the early seq", p.stderr)
    want = tree(out)

    nseed = sum(1 for v in want.values() if v[0] != "dir")
    before = blobs_received(env)
    p = fork(env, "--sandbox", sid[:6], "--at", str(early))
    fid = p.stdout.decode().strip()
    ok(p.returncode == 0 and fid and fid != sid, "fork --at the early seq (by an id prefix) prints a new id",
           p.stderr)
    got = tree(env.workspace(fid)) if p.returncode == 0 else {}
    ok(got == want and want, "the fork's workspace equals workspace --at byte for byte, modes too",
           {"want": want, "got": got})
    ok(got != tree(ws), "and differs from the original's latest state")
    frows = seeded(env, fid, nseed) if p.returncode == 0 else []
    sent = blobs_received(env) - before
    nfiles = sum(1 for v in want.values() if v[0] == "file")
    ok(before >= 0 and 0 <= sent < nfiles,
       "the fork's seed sends no content the store holds (fewer blob frames than files: a link's at most)",
       {"blob frames": sent, "files": nfiles})
    seed_complete(env, fid, frows, want, env.workspace(fid), "the fork")
    e = env.sh(fid, "cat a.txt && cat src/pkg/m.py && id -u")
    tap.eq(e.stdout.decode().splitlines()[:2], ["one", "x = 1"], "the fork runs an exec on its workspace")
    # written straight into the new workspace: every entry its user's, as a copy in was
    meta = json.load(open(env.sbdir(fid, "meta.json")))
    fws = env.workspace(fid)
    owners = {os.path.relpath(os.path.join(d, n), fws): (st.st_uid, st.st_gid)
              for d, dirs, files in os.walk(fws) for n in files + dirs
              for st in [os.lstat(os.path.join(d, n))] if n != "lost+found"}
    ok(owners and all(v == (meta["uid"], meta["gid"]) for v in owners.values()),
       "every entry of the fork's workspace is the sandbox user's, links and directories too",
       {"uid": meta["uid"], "owners": owners})
    e = env.sh(fid, "printf z >> a.txt && mkdir src/pkg/new && touch src/pkg/new/f src/f")
    ok(e.returncode == 0, "the learner writes into the forked files and directories", e.stderr)
    rows = env.wait_rows(fid, lambda r: any(x["kind"] == "sandbox" for x in r) and
                         any(x["kind"] == "file_diff" and x["payload"].get("path") == "src/f" for x in r), 120)
    first = next((x for x in rows if x["kind"] == "sandbox"), {})
    tap.eq(first.get("payload", {}).get("forked_from"),
           {"learner": "t", "task": "T", "sandbox": sid, "seq": early},
           "its first sandbox event says where it came from")
    ok(rows and rows[0]["kind"] == "sandbox", "and it is the fork's first event", rows[:1])
    # issue 24: who forked it, and its seed is that operator's action
    actor = creator_check(rows, meta, "the fork")
    cut = next((i for i, r in enumerate(rows) if r["kind"] in ("stdin", "command")), len(rows))
    seeds_by_operator(rows, cut, actor, "the fork")

    # create --from of the same tree: its seed still sends every content
    before = blobs_received(env)
    cid = env.create("--task", "T3", "--ingest", env.ingest.ws, "--secret", env.secret, "--from", out)
    crows = seeded(env, cid, nseed)
    sent = blobs_received(env) - before
    ok(sent >= nfiles, "create --from of the same tree still sends every content with its seed",
       {"blob frames": sent, "files": nfiles})
    seed_complete(env, cid, crows, want, env.workspace(cid), "create --from")
    env.destroy(cid)

    env.destroy(sid)
    p = fork(env, "--sandbox", sid, "--at", str(late), "--learner", "other", "--task", "T2")
    fid2 = p.stdout.decode().strip()
    ok(p.returncode == 0 and fid2, "a fork after the original was destroyed, with another learner and task",
           p.stderr)
    if p.returncode == 0:
        e = env.sh(fid2, "cat a.txt c.txt; test ! -e src/pkg/m.py && echo gone")
        tap.eq(e.stdout.decode(), "one\ntwo\nnewgone\n", "it holds the latest state")
        rows = env.wait_rows(fid2, lambda r: any(x["kind"] == "sandbox" for x in r), 120)
        first = next((x for x in rows if x["kind"] == "sandbox"), {})
        tap.eq(first.get("payload", {}).get("forked_from", {}).get("seq"), late, "its origin's seq")
        env.destroy(fid2)
    env.destroy(fid)

    for args, what in ((["--sandbox", "ffffffffffff", "--at", "1"], "no sandbox 'ffffffffffff' in the ingest's store"),
                       (["--sandbox", sid, "--at", str(10 ** 9)], "past the end")):
        p = fork(env, *args)
        err = p.stderr.decode()
        ok(p.returncode == 1 and what in err and err.count("\n") == 1, f"bad input: {what}", err)
    # purge of the origin keeps the contents the fork's events name
    p = env.run("purge", "--sandbox", sid, "--store", "sqlite:" + env.db)
    ok(p.returncode == 0 and not env.rows(sid), "the origin is purged from the store", p.stderr)
    seed_complete(env, fid, frows, want, out, "after the origin's purge, the fork")
    ambiguous(env)
    outside(env)
    failed_rebuild(env)
    p = env.run("fork", "--sandbox", sid)
    ok(p.returncode == 2, "--at missing is a usage error", p.stderr)
    left = [n for n in os.listdir(env.state) if n.startswith("fork.")]
    ok(not left, "no rebuilt directory is left behind", left)


if __name__ == "__main__":
    main()
