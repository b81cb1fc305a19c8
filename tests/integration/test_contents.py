#!/usr/bin/env python3
"""Issue 24, exact code states: every changed file's content reaches the
store (content-addressed, deduplicated), and `sandglass workspace --at SEQ`
rebuilds the workspace from the store alone, after the sandbox is gone.

A scripted session (text, binary, a symlink, renames, deletes, an
overwrite, empty directories made, moved and removed, a rollback, a real vim
save (backup by rename), ignored files (`.x.swp`, `f~`, `__pycache__/`), a
300-file command and a 1,200-file one past --max-file-events (bulk events),
then 1,100 of those files rewritten and some removed, a file over the size
limit) takes a checkpoint after each step; at the seq where the store has
caught up with the workspace (the watcher settles in its own time) the
rebuilt tree must equal the checkpoint's own tree, read from the sandbox's
checkpoint store (a bare git repository: `git ls-tree`/`cat-file` as root)
less the paths the default ignore list matches: byte for byte, links by
target, and the file over the limit by size and hash only. Also:
capture-ignore from the config file replaces the default list; and a FIFO,
a socket and a device node are recorded as their type, never opened. TAP
output."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import tap as _tap  # noqa: E402


class _Tap:
    """tap with any diagnostic shown as its repr."""
    def ok(self, cond, name, diag=""):
        return _tap.ok(cond, name, diag if isinstance(diag, str) else repr(diag))

    def done(self):
        _tap.done()


tap = _Tap()
from test_capture import SANDGLASSD, CapEnv  # noqa: E402

LIMIT = 1024 * 1024  # the capture's default --capture-max-file


def snapshot(root: str) -> dict:
    """Every file, link and directory under root (a directory as ("dir",):
    an empty one is part of the workspace too)."""
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs:
            if not os.path.islink(os.path.join(d, n)):
                out[os.path.relpath(os.path.join(d, n), root)] = ("dir",)
        for n in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
            p = os.path.join(d, n)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            elif os.path.isfile(p):
                data = open(p, "rb").read()
                out[rel] = ("file", hashlib.sha256(data).hexdigest(), len(data))
    return out


# SG_IGNORE_DEFAULT (src/capture/ignore.h), as docs/EVENTS.md reads it
IGNORE_DEFAULT = ("*.swp,*.swo,*.swx,*~,.#*,#*#,.*.kate-swp,.DS_Store,__pycache__/,*.pyc,*.pyo,"
                  ".pytest_cache/,.mypy_cache/,.ruff_cache/,node_modules/.cache/,.sass-cache/")


def ignored(rel: str, is_dir: bool, patterns: str = IGNORE_DEFAULT) -> bool:
    """Whether the list ignores rel or a directory above it (no escapes or
    anchors in the default list)."""
    import fnmatch
    comps = rel.split("/")
    for pat in patterns.split(","):
        dir_only = pat.endswith("/")
        pc = pat.rstrip("/").split("/")
        for end in range(len(pc), len(comps) + 1):  # the pattern's last component at comps[end-1]
            if dir_only and end == len(comps) and not is_dir:
                continue
            if all(fnmatch.fnmatchcase(c, q) for c, q in zip(comps[end - len(pc):end], pc)):
                return True
    return False


def unignored(snap: dict) -> dict:
    return {k: v for k, v in snap.items() if not ignored(k, v[0] == "dir")}


def checkpoint_tree(env: CapEnv, sid: str, ck: str) -> dict:
    """A checkpoint's own tree, as snapshot() gives a directory: read from
    the sandbox's store (a bare git repository; names escaped with %sg%,
    each directory's metadata blob named %sg%: src/checkpoint/ckpt_scan.c)."""
    git = ["git", "--git-dir", env.sbdir(sid, "checkpoints.git")]
    ls = subprocess.run(git + ["ls-tree", "-r", "-t", "-z", ck], capture_output=True, check=True).stdout
    ents = []
    for e in ls.split(b"\0"):
        if not e:
            continue
        head, path = e.split(b"\t", 1)
        mode, typ, oid = head.split()
        comps = path.decode("utf-8", "surrogateescape").split("/")
        if comps[-1] == "%sg%":
            continue
        rel = "/".join(c[4:] if c.startswith("%sg%") else c for c in comps)
        ents.append((rel, mode, typ, oid))
    blobs = [e for e in ents if e[2] == b"blob"]
    cat = subprocess.run(git + ["cat-file", "--batch"], input=b"".join(e[3] + b"\n" for e in blobs),
                         capture_output=True, check=True).stdout
    out, off = {}, 0
    data = {}
    for e in blobs:
        nl = cat.index(b"\n", off)
        size = int(cat[off:nl].split()[2])
        data[e[0]] = cat[nl + 1:nl + 1 + size]
        off = nl + 1 + size + 1
    for rel, mode, typ, oid in ents:
        if typ == b"tree":
            out[rel] = ("dir",)
        elif mode == b"120000":
            out[rel] = ("link", data[rel].decode("utf-8", "surrogateescape"))
        else:
            out[rel] = ("file", hashlib.sha256(data[rel]).hexdigest(), len(data[rel]))
    return out


STEPS = [
    "printf 'hello\\n' > a.txt",
    "printf 'hello\\nworld\\n' > a.txt",
    "head -c 5000 /dev/urandom > bin.dat",
    "ln -s a.txt link.txt",
    "mkdir -p sub/deep && printf 'x' > sub/deep/x.txt",
    "mv a.txt b.txt",
    "rm sub/deep/x.txt",
    "printf '' > empty.txt",
    "for i in $(seq 1 300); do printf \"f$i\" > sub/f$i.txt; done",
    "cp b.txt c.txt",
    "head -c 2000000 /dev/urandom > big.bin",
    "printf 'changed' > bin.dat",
    "rm -f sub/f1*.txt",
    "mv bin.dat sub/bin2.dat",
    "printf '\\000\\001\\002' > nul.bin",
    "printf 'v2' > c.txt",
    "rm link.txt && ln -s b.txt link.txt",
    "head -c 600000 /dev/urandom > mid.bin",
    "printf 'again' > sub/f2.txt",
    "rm big.bin",
    "printf 'last\\n' > z.txt",
    "mv sub sub2",
    "printf 'atomic' > .z.tmp && mv .z.tmp z.txt",
    "cp b.txt b.txt~ && printf 'edited\\n' > b.txt.new && mv b.txt.new b.txt && rm b.txt~",
    "chmod 755 z.txt",
    # empty directories: made, nested, emptied, moved, removed
    "mkdir empty1 && mkdir -p nest/a/b && mkdir keep && printf k > keep/k.txt",
    "rm keep/k.txt && mv nest nest2 && rmdir empty1",
    "rm -r nest2/a/b && mkdir -p sub2/newdir",
    # ignored names: in the checkpoints, not in the record
    "printf swap > .x.swp && printf bak > f~ && mkdir -p __pycache__ && printf pyc > __pycache__/m.pyc",
    # a real editor's save: vim, backup by rename (b.txt -> b.txt~, a new b.txt)
    "vim -i NONE -u NONE -N -es -c 'set nobackup writebackup backupcopy=no' -c '1s/edited/vim-edited/'"
    " -c 'wq' b.txt </dev/null",
    "printf more > .x.swp && rm f~ && printf 'after\\n' >> b.txt",
]
BULK_ADD = "mkdir -p many && for i in $(seq 1 1200); do printf \"m$i\" > many/m$i.txt; done"
BULK_CHANGE = "for i in $(seq 1 1100); do printf \"n$i\" > many/m$i.txt; done; rm -f many/m11[5-9]?.txt"


def tar_matches(env: CapEnv, sid: str, seq: int, want_dir: str) -> None:
    """--out - writes the same tree as a tar stream, the same bytes twice."""
    import io
    import tarfile
    args = ["workspace", "--sandbox", sid, "--at", str(seq), "--out", "-",
            "--ingest", env.ingest.http_base, "--secret", env.secret]
    p1, p2 = env.run(*args), env.run(*args)
    d = tempfile.mkdtemp(prefix="sgt-tar-", dir=env.root)
    try:
        with tarfile.open(fileobj=io.BytesIO(p1.stdout)) as tf:
            tf.extractall(d, filter="tar")
        ok = snapshot(d) == snapshot(want_dir)
    except (tarfile.TarError, OSError) as e:
        ok = False
        print(f"# tar: {e}")
    tap.ok(ok and p1.stdout == p2.stdout and p1.stdout,
           "--out - gives the same tree as a tar stream, deterministically", p1.stderr.decode(errors="replace"))


def seeded(env: CapEnv) -> None:
    """A --workspace directory's files are the session's first events: the
    rebuilt tree at the last of them equals the directory."""
    d = tempfile.mkdtemp(prefix="sgt-seed-", dir=env.root)
    os.makedirs(os.path.join(d, "src/pkg"))
    open(os.path.join(d, "README.md"), "w").write("# seed\n")
    open(os.path.join(d, "src/pkg/mod.py"), "w").write("x = 1\n" * 100)
    open(os.path.join(d, "data.bin"), "wb").write(os.urandom(70000))
    open(os.path.join(d, "empty"), "wb").close()
    os.symlink("README.md", os.path.join(d, "readme-link"))
    open(os.path.join(os.fsencode(d), b"bad\xff name.txt"), "wb").write(b"not utf-8 named\n")
    os.makedirs(os.path.join(d, "emptyd/inner"))
    want = snapshot(d)
    # one seed event per file and link, and per empty directory (the others are implied)
    nseeds = sum(1 for k, v in want.items() if v[0] != "dir" or not os.listdir(os.path.join(d, k)))
    sid = env.create_captured("--workspace", d)
    rows = env.wait_rows(sid, lambda r: sum(1 for x in r if x["kind"] == "file_diff"
                                            and x["payload"].get("seed")) >= nseeds, 120)
    seeds = [x for x in rows if x["kind"] == "file_diff" and x["payload"].get("seed")]
    tap.ok(len(seeds) == nseeds and any(x["payload"].get("path") == "emptyd/inner" and x["payload"].get("dir")
                                        for x in seeds),
           "each file of the starting workspace, and each empty directory, is a seed event",
           [x["payload"].get("path") for x in seeds])
    env.destroy(sid)
    out = os.path.join(env.root, "seed-out")
    at = max(x["seq"] for x in seeds) if seeds else 0
    p = env.run("workspace", "--sandbox", sid, "--at", str(at), "--out", out,
                "--ingest", env.ingest.http_base, "--secret", env.secret)
    got = snapshot(out) if os.path.isdir(out) else {}
    tap.ok(p.returncode == 0 and got == want, "the starting workspace rebuilt from the store",
           {"want": sorted(want), "got": sorted(got), "stderr": p.stderr.decode(errors="replace")[-300:]})


def max_file(env: CapEnv) -> None:
    """--capture-max-file: the limit is the sandbox's own."""
    sid = env.create_captured("--capture-max-file", "10K")
    env.sh(sid, "head -c 5000 /dev/urandom > small.bin; head -c 20000 /dev/urandom > large.bin")
    rows = env.wait_rows(sid, lambda r: {"small.bin", "large.bin"} <= {x["payload"].get("path") for x in r
                                                                       if x["kind"] == "file_diff"}, 120)
    last = {x["payload"]["path"]: x["payload"].get("content", {}) for x in rows if x["kind"] == "file_diff"}
    tap.ok(last.get("small.bin", {}).get("stored") is True and last.get("large.bin", {}).get("over_limit") is True
           and last["large.bin"].get("size") == 20000, "--capture-max-file 10K: 5 KB stored, 20 KB by hash and size",
           last)
    p = env.run("create", "--learner", "x", "--capture-max-file", "0")
    tap.ok(p.returncode == 2, "--capture-max-file 0 is a usage error", p.stderr)
    env.destroy(sid)


def ingest_killed(env: CapEnv) -> None:
    """The ingest SIGKILLed mid-session and restarted: every content still
    arrives (the spool replays what was not acked; the store keeps each
    once by its key), and the workspace is rebuilt whole."""
    import signal
    sid = env.create_captured()
    env.sh(sid, "for i in $(seq 1 40); do head -c $((i * 997)) /dev/urandom > k$i.bin; done")
    env.ingest.kill(signal.SIGKILL)
    env.sh(sid, "for i in $(seq 41 80); do head -c $((i * 997)) /dev/urandom > k$i.bin; done; rm k3.bin")
    env.ingest.start()
    ws = env.workspace(sid)
    want = snapshot(ws)
    seq = settle(env, sid, want)
    tap.ok(seq >= 0, "after the ingest's restart the store catches up with the workspace", "")
    env.destroy(sid)
    out = os.path.join(env.root, "killed-out")
    p = env.run("workspace", "--sandbox", sid, "--at", str(seq), "--out", out,
                "--ingest", env.ingest.http_base, "--secret", env.secret)
    tap.ok(p.returncode == 0 and snapshot(out) == want, "the workspace rebuilt whole after the ingest's crash",
           p.stderr.decode(errors="replace"))


def contents_http(env: CapEnv) -> None:
    """GET /v1/contents's answers, read off the ingest's loop by its readers:
    a stored content's bytes, the framed batch (an unknown hash "HEX -1"),
    404 for one unknown content, 400 for a bad hash, 401 without a token."""
    import urllib.error
    import urllib.request
    tok = subprocess.run([SANDGLASSD, "token", "--read", "--secret", env.secret], capture_output=True, text=True,
                         env=env.env, check=True).stdout.strip()

    def get(q, auth=True):
        req = urllib.request.Request(f"{env.ingest.http_base}/v1/contents?sha256={q}",
                                     headers={"Authorization": f"Bearer {tok}"} if auth else {})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()
    sha, size = env._query("SELECT sha256, size FROM sg_contents ORDER BY size DESC LIMIT 1", ())[0]
    st, body = get(sha)
    tap.ok(st == 200 and len(body) == size and hashlib.sha256(body).hexdigest() == sha,
           "one content: its bytes", (st, len(body), size))
    unknown = "0" * 64
    st, body = get(f"{sha},{unknown}")
    head = f"{sha} {size}\n".encode()
    tap.ok(st == 200 and body.startswith(head) and body[len(head) + size:] == f"{unknown} -1\n".encode(),
           "a batch: framed, the unknown hash -1", (st, body[:80], body[len(head) + size:]))
    st, body = get(unknown)
    tap.ok(st == 404 and b"not in the store" in body, "one unknown content: 404", (st, body[:200]))
    st, body = get("xyz")
    tap.ok(st == 400, "a bad hash: 400", (st, body[:200]))
    st, _ = get(sha, auth=False)
    tap.ok(st == 401, "no token: 401", st)


def special_files(env: CapEnv) -> None:
    """A FIFO, a unix socket (made in the sandbox) and a character device
    (made by the host in the workspace: the sandbox's user cannot mknod)
    are recorded as their type: no content read, no diff, no hash; the
    capture never opens them (a writer blocked on a learner's FIFO stays
    blocked until the learner's reader comes, and gets its bytes through);
    a regular file replaced by a FIFO is a change; `workspace --at` names
    them on stderr and writes the rest (exit 3)."""
    import stat
    sid = env.create_captured()
    p = env.sh(sid, "printf 'text\\n' > was.txt && mkfifo p.fifo q.fifo \"$(printf 'e\\033[31mred.fifo')\" && "
                    "python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"s.sock\")'")
    tap.ok(p.returncode == 0, "a FIFO and a socket made in the sandbox", p.stderr)
    os.mknod(os.path.join(env.workspace(sid), "null.dev"), stat.S_IFCHR | 0o644, os.makedev(1, 3))
    env.sh(sid, "printf x > marker.txt")
    want = {"p.fifo": "fifo", "q.fifo": "fifo", "s.sock": "socket", "null.dev": "chardev"}
    rows = env.wait_rows(sid, lambda r: set(want) | {"marker.txt"} <= {x["payload"].get("path") for x in r
                                                                     if x["kind"] == "file_diff"}, 120)
    got = {x["payload"]["path"]: x["payload"] for x in rows if x["kind"] == "file_diff"}
    for path, typ in want.items():
        g = got.get(path, {})
        c = g.get("content", {})
        tap.ok(c.get("type") == typ and g.get("type") == typ and c.get("stored") is not True and not g.get("diff")
               and "sha256" not in g and g.get("size") == 0,
               f"{path}: recorded as a {typ}, no content, diff or hash", g)
    # A writer blocked on q.fifo (a background job left between execs);
    # then its attributes change, so the watcher looks at it again. Had the
    # capture opened the FIFO, the writer would have been released into a
    # reader that went away: its bytes lost, the learner's reader stuck.
    env.sh(sid, "(printf hi > q.fifo; echo \"w:$?\" > w.txt) > /dev/null 2>&1 &")
    env.sh(sid, "chmod 600 q.fifo && printf y > marker2.txt")
    env.wait_rows(sid, lambda r: "marker2.txt" in {x["payload"].get("path") for x in r if x["kind"] == "file_diff"},
                  120)
    r = env.sh(sid, "timeout 60 cat q.fifo; for i in $(seq 600); do [ -s w.txt ] && break; sleep 0.1; done; cat w.txt")
    tap.ok(r.stdout == b"hiw:0\n", "a writer blocked on the learner's FIFO meets the learner's reader "
           "(the capture never opened it)", (r.stdout, r.stderr))
    # was.txt replaced by a FIFO: a change of type, recorded as such.
    env.sh(sid, "rm was.txt && mkfifo was.txt && printf z > marker3.txt")
    rows = env.wait_rows(sid, lambda r: "marker3.txt" in {x["payload"].get("path") for x in r
                                                           if x["kind"] == "file_diff"}, 120)
    last = [x for x in rows if x["kind"] == "file_diff" and x["payload"].get("path") == "was.txt"][-1]
    tap.ok(last["payload"].get("change") in ("modified", "created") and last["payload"].get("type") == "fifo",
           "a file replaced by a FIFO: the path is a FIFO now", last["payload"])
    q_mods = [x for x in rows if x["kind"] == "file_diff" and x["payload"].get("path") == "q.fifo"]
    tap.ok(len(q_mods) == 1, "a FIFO written through and chmodded is not a change of content", q_mods)
    seq = max(x["seq"] for x in rows)
    out = os.path.join(env.root, f"special-{sid[:8]}")
    w = env.run("workspace", "--sandbox", sid, "--at", str(seq), "--out", out,
                "--ingest", env.ingest.http_base, "--secret", env.secret)
    err = w.stderr.decode(errors="replace")
    tap.ok(w.returncode == 3 and all(f"not written: {n} is a {t}" in err for n, t in
                                     {**want, "was.txt": "fifo"}.items())
           and open(os.path.join(out, "marker3.txt")).read() == "z"
           and not any(os.path.lexists(os.path.join(out, n)) for n in [*want, "was.txt"]),
           "workspace --at: the FIFOs, the socket and the device named on stderr, not made; the rest written (exit 3)",
           (w.returncode, err))
    tap.ok(b"\x1b" not in w.stderr and "not written: e\\x1b[31mred.fifo is a fifo" in err,
           "a FIFO's hostile name is escaped on stderr", err)
    env.destroy(sid)


def config_ignore(env: CapEnv) -> None:
    """capture-ignore in the config file ([caps]) replaces the default list."""
    conf = os.path.join(env.root, "ignore.conf")
    open(conf, "w").write("[caps]\ncapture-ignore = *.log,build/\n")
    env.env["SANDGLASS_CONFIG"] = conf
    try:
        sid = env.create_captured()
    finally:
        env.env["SANDGLASS_CONFIG"] = "none"
    caps = json.load(open(env.sbdir(sid, "meta.json"))).get("caps", {})
    tap.ok(caps.get("capture_ignore") == "*.log,build/", "the config's list is the sandbox's", caps)
    env.sh(sid, "printf a > a.log; printf s > s.swp; mkdir build; printf o > build/o.txt; printf k > k.txt")
    rows = env.wait_rows(sid, lambda r: {"k.txt", "s.swp"} <= {x["payload"].get("path") for x in r
                                                             if x["kind"] == "file_diff"}, 120)
    said = {x["payload"].get("path") for x in rows if x["kind"] == "file_diff"}
    tap.ok({"k.txt", "s.swp"} <= said and not said & {"a.log", "build", "build/o.txt"},
           "the config's capture-ignore replaces the default list (*.swp reported, *.log and build/ not)",
           sorted(said))
    env.destroy(sid)


def main() -> None:
    env = CapEnv()
    try:
        run(env)
        contents_http(env)
        seeded(env)
        max_file(env)
        ingest_killed(env)
        config_ignore(env)
        special_files(env)
    finally:
        env.cleanup()
    tap.done()


def replayed(rows: list[dict]) -> dict:
    """path -> sha256 (or link target hash) as the store's file_diffs say, in
    seq order; a directory -> "dir": one a `dir` event made (until one
    removes it and what is under it), or one a path is under."""
    st: dict = {}
    dirs: set = set()
    for x in rows:
        if x["kind"] == "bulk":  # a command's changes past --max-file-events
            for f in x["payload"].get("files", []):
                if f.get("change") == "deleted":
                    st.pop(f.get("path"), None)
                    continue
                if f.get("change") == "renamed":
                    st.pop(f.get("old_path"), None)
                st[f.get("path")] = f.get("sha256")
            continue
        if x["kind"] != "file_diff":
            continue
        p = x["payload"]
        ch, path = p.get("change"), p.get("path")
        if p.get("dir"):
            if ch == "deleted":
                dirs.discard(path)
                dirs -= {k for k in dirs if k.startswith(path + "/")}
                for k in [k for k in st if k.startswith(path + "/")]:
                    del st[k]
            else:
                dirs.add(path)
            continue
        if ch == "deleted":
            st.pop(path, None)
            continue
        if ch == "renamed":
            st.pop(p.get("old_path"), None)
        st[path] = (p.get("content") or {}).get("sha256")
    for k in list(st) + list(dirs):
        while "/" in k:
            k = k.rsplit("/", 1)[0]
            dirs.add(k)
    return dict(st, **{k: "dir" for k in dirs})


def host_hashes(snap: dict) -> dict:
    return {k: "dir" if v[0] == "dir" else hashlib.sha256(v[1].encode()).hexdigest() if v[0] == "link" else v[1]
            for k, v in snap.items()}


def settle(env: CapEnv, sid: str, snap: dict) -> int:
    """The seq at which the store's file_diffs have caught up with the host's
    view of the workspace (the watcher settles in its own time)."""
    want = host_hashes(unignored(snap))
    rows = env.wait_rows(sid, lambda r: replayed(r) == want, 120)
    return max(x["seq"] for x in rows) if replayed(rows) == want else -1


def run(env: CapEnv) -> None:
    sid = env.create_captured()
    ws = env.workspace(sid)
    points = []  # (label, host snapshot, seq)
    ck = {}
    steps = STEPS[:9] + ["ROLLBACK p7"] + STEPS[9:-1] + [BULK_ADD, STEPS[-1], BULK_CHANGE, "printf end > end.txt"]
    for i, step in enumerate(steps):
        if step.startswith("ROLLBACK"):
            p = env.run("rollback", sid, "--to", ck[step.split()[1]], "--yes")
        else:
            p = env.sh(sid, step)
        tap.ok(p.returncode == 0, f"step {i}: {step[:40]}", p.stderr)
        label = f"p{i}"
        c = env.run("checkpoint", sid, "--label", label, "--json")
        tap.ok(c.returncode == 0, f"checkpoint {label}", c.stderr)
        if c.returncode == 0:
            ck[label] = json.loads(c.stdout)["id"]
        snap = snapshot(ws)
        seq = settle(env, sid, snap)
        tap.ok(seq >= 0, f"{label}: the store caught up with the workspace", "")
        points.append((label, snap, seq))
    tap.ok(len(points) >= 20, "20 or more points", len(points))
    # each point's checkpoint, read from its store (before destroy removes it)
    trees = {}
    for label, snap, _ in points:
        try:
            trees[label] = checkpoint_tree(env, sid, ck[label])
        except (subprocess.CalledProcessError, KeyError, ValueError) as e:
            print(f"# checkpoint {label}: {e}")
            trees[label] = {}
    tap.ok(all(trees[label] == snap for label, snap, _ in points),
           "each checkpoint's tree is the workspace as it was then",
           [label for label, snap, _ in points if trees[label] != snap][:5])
    ign = {".x.swp", "f~", "__pycache__", "__pycache__/m.pyc"}
    tap.ok(any(ign - {"f~"} <= set(t) and "f~" in t for t in trees.values()),
           "the ignored files are in a checkpoint", "")
    rows = env.rows(sid)
    bulk = [x["payload"] for x in rows if x["kind"] == "bulk"]
    bulked = {(f.get("path"), f.get("change")) for b in bulk for f in b.get("files", [])}
    tap.ok(len({p for p, _ in bulked if p.startswith("many/")}) >= 200
           and any(c == "modified" for _, c in bulked),
           "the 1,200-file command and the 1,100 rewrites past --max-file-events give bulk events",
           (len(bulk), len(bulked)))
    said = {x["payload"].get("path") for x in rows if x["kind"] == "file_diff"} | {p for p, _ in bulked}
    tap.ok(not said & ign, "no event reports an ignored path", sorted(said & ign))
    vim = [x["payload"] for x in rows if x["kind"] == "file_diff" and x["payload"].get("path") == "b.txt"
           and "+vim-edited" in x["payload"].get("diff", "").splitlines()]
    tap.ok(len(vim) == 1 and vim[0].get("change") == "modified",
           "vim's save (backup by rename) is one modified with the edit's diff", vim)
    diffs = [x["payload"] for x in rows if x["kind"] == "file_diff"]
    tap.ok(len(diffs) > 0, "file_diff events in the store", "")
    tap.ok(all("content" in d for d in diffs if d.get("change") != "deleted"),
           "every file_diff but a deletion says its content", [d for d in diffs if "content" not in d][:3])
    # (the watcher may see big.bin part-written first: that state is stored as it was)
    big = [d for d in diffs if d.get("path") == "big.bin" and d.get("content", {}).get("size", 0) > LIMIT]
    tap.ok(big and big[0]["content"].get("over_limit") is True and big[0]["content"]["stored"] is False,
           "a file over the limit: hash and size only, the payload says so", big[:1])
    link = [d for d in diffs if d.get("path") == "link.txt" and d.get("change") != "deleted"]
    tap.ok(link and link[0]["content"]["type"] == "link", "a symlink is recorded as a link", link[:1])
    # a terminal session: its recording streams to the ingest and outlives the sandbox
    import subprocess
    sb = os.environ.get("SANDGLASS_BIN", "sandglass")
    subprocess.run(["script", "-qec", f"{sb} exec -t {sid} -- /bin/sh -c 'echo hello-cast; sleep 1; echo bye-cast'",
                    "/dev/null"], env=env.env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, timeout=120)
    casts = sorted(os.listdir(env.sbdir(sid, "casts"))) if os.path.isdir(env.sbdir(sid, "casts")) else []
    local = open(env.sbdir(sid, "casts/" + casts[-1]), "rb").read() if casts else b""
    tap.ok(b"hello-cast" in local and b"bye-cast" in local, "the terminal session is recorded on the host", casts)
    # the recording's last part goes with the next event: a checkpoint brings one
    env.run("checkpoint", sid, "--label", "after-cast")
    env.wait_rows(sid, lambda r: any(x["payload"].get("label") == "after-cast" for x in r
                                     if x["kind"] == "checkpoint"), 120)
    env.destroy(sid)
    p = env.run("cast", sid, "--ingest", env.ingest.http_base, "--secret", env.secret)
    tap.ok(p.returncode == 0 and p.stdout == local and local != b"",
           "sandglass cast reads the recording from the ingest after destroy, byte for byte",
           p.stderr.decode(errors="replace") + f" got {len(p.stdout)} want {len(local)}")
    # deduplicated: each distinct content stored once
    n, distinct = env._query("SELECT count(*), count(DISTINCT sha256) FROM sg_contents", ())[0]
    tap.ok(n == distinct and n > 0, "contents stored once each", (n, distinct))
    stored = env._query("SELECT coalesce(sum(length(data)), 0) FROM sg_content_parts", ())[0][0]
    sizes = env._query("SELECT coalesce(sum(size), 0) FROM sg_contents", ())[0][0]
    tap.ok(stored == sizes, "the parts hold exactly the contents' bytes", (stored, sizes))
    out = tempfile.mkdtemp(prefix="sgt-ws-", dir=env.root)
    for label, _, seq in points:
        snap = trees[label]
        d = os.path.join(out, label)
        p = env.run("workspace", "--sandbox", sid, "--at", str(seq), "--out", d,
                    "--ingest", env.ingest.http_base, "--secret", env.secret)
        got = snapshot(d) if os.path.isdir(d) else {}
        want = unignored(snap)
        over = {k: v for k, v in want.items() if v[0] == "file" and v[2] > LIMIT}
        for k in over:
            del want[k]
        said = p.stderr.decode(errors="replace")
        tap.ok(got == want and all(f"{k} (over the size limit) size {v[2]} sha256 {v[1]}" in said
                                   for k, v in over.items()),
               f"workspace at {label} (seq {seq}) equals the checkpoint's tree, less the ignored paths",
               {"missing": sorted(set(want) - set(got))[:5], "extra": sorted(set(got) - set(want))[:5],
                "differ": [k for k in want if k in got and got[k] != want[k]][:5], "stderr": said[-500:]})
    tar_matches(env, sid, points[-1][2], os.path.join(out, points[-1][0]))


if __name__ == "__main__":
    main()
