#!/usr/bin/env python3
"""create --from DIR|TARBALL|ID@CHECKPOINT (issue 26): the workspace seeded
before its capture starts. Each source's contents seen inside by an exec,
the sandbox user's; the record's and the `sandbox` event's `from`; the
seeded files in the real store only as the session's seed (`seed: true`,
no exec or command as their cause: the creator's seeding, `operator:
{action: "seed", actor}`, the `sandbox` created event's actor, issue 24),
never as a learner's change; the first
checkpoint holds the seed, so a rollback to it restores it; hostile
archives (`..`, an absolute path, a symlink out then a file through it, a
1 TiB sparse entry, hard links out) refused with a message naming the entry, a device
node, a FIFO and a set-uid bit neutralised, nothing written outside the
workspace; errors naming what was wrong. Real sandboxes, a real ingest and
store (CapEnv). TAP."""
from __future__ import annotations

import io
import json
import os
import pwd
import shutil
import stat
import subprocess
import tarfile

from sgtest import sh_out, tap, write_file
from test_capture import CapEnv, creator_check, seeds_by_operator

env = CapEnv()


def host(*parts: str) -> str:
    return os.path.join(env.root, *parts)


def err(p: subprocess.CompletedProcess) -> str:
    return p.stderr.decode(errors="replace")


write = write_file


def inside(sid: str, script: str) -> str:
    return sh_out(env, sid, script)


def record(sid: str) -> dict:
    return json.load(open(env.sbdir(sid, "meta.json")))


def create_from(src: str, *args: str) -> subprocess.CompletedProcess:
    return env.run("create", "--learner", "t", "--from", src, *args, timeout=120)


def make_tree() -> str:
    src = host("seed-src")
    write(os.path.join(src, "a.txt"), b"hello seed\n")
    write(os.path.join(src, "bin", "run.sh"), b"#!/bin/sh\necho ran\n", 0o755)
    write(os.path.join(src, "sub", "deep", "b.txt"), b"deep\n", 0o600)
    os.symlink("a.txt", os.path.join(src, "link"))
    return src


SEEDED = {"a.txt", "bin/run.sh", "sub/deep/b.txt", "link"}
WANT = "hello seed\n755\n600\na.txt\nran"
LOOK = "cat a.txt; stat -c %a bin/run.sh sub/deep/b.txt; readlink link; ./bin/run.sh"


def seed_rows_ok(sid: str, rows: list[dict], kind: str) -> None:
    created = [r["payload"] for r in rows if r["kind"] == "sandbox" and r["payload"].get("state") == "created"]
    frm = created[0].get("from", {}) if created else {}
    tap.ok(frm.get("kind") == kind and frm.get("files", 0) >= 3 and frm.get("bytes", 0) > 0,
           f"{kind}: the sandbox created event says where the session started (from)", repr(frm))
    actor = creator_check(rows, record(sid), kind)
    # before the learner's first command: the session's start
    cut = next((i for i, r in enumerate(rows) if r["kind"] in ("stdin", "command")), len(rows))
    diffs = [r["payload"] for r in rows[:cut] if r["kind"] == "file_diff" and r["payload"].get("path") in SEEDED]
    later = [r["payload"] for r in rows[cut:] if r["kind"] == "file_diff" and r["payload"].get("seed")]
    tap.ok(cut < len(rows) and later == [], f"{kind}: no seed event after the session's first command",
           repr(later)[:600])
    tap.ok({d["path"] for d in diffs} == SEEDED and
           all(d.get("seed") is True and "exec_id" not in d and "command_id" not in d for d in diffs),
           f"{kind}: the seeded files are in the store only as the session's seed, no learner change",
           repr(diffs)[:2000])
    seeds_by_operator(rows, cut, actor, kind)


@tap.case("from a directory: contents, owner, the record, the store, rollback to the seed")
def _():
    src = make_tree()
    sid = env.create_captured("--from", src)
    uid = env.uid_of(sid)
    tap.eq(inside(sid, LOOK), WANT, "the tree is in the workspace: contents, modes, the symlink, runnable")
    tap.eq(inside(sid, "stat -c %u a.txt sub/deep/b.txt link | sort -u"), uid, "every entry is the sandbox user's")
    frm = record(sid).get("from") or {}
    tap.ok(frm.get("kind") == "dir" and frm.get("source") == os.path.realpath(src) and frm.get("files") == 3 and
           frm.get("links") == 1, "the record's from: kind, source, counts", repr(frm))
    ls = {s["id"]: s for s in env.ls()}
    tap.eq((ls.get(sid) or {}).get("from"), frm, "ls --json shows it")
    first = json.loads(env.run("checkpoints", sid, "--json", check=True).stdout)[0]["id"]
    env.sh(sid, "echo learner > a.txt && rm -r sub && echo x > new.txt", check=True)
    rows = env.wait_rows(sid, lambda r: any(x["kind"] == "run_result" for x in r) and
                         any(x["kind"] == "file_diff" and x["payload"].get("path") == "new.txt" for x in r))
    seed_rows_ok(sid, rows, "dir")
    mod = [r["payload"] for r in rows if r["kind"] == "file_diff" and r["payload"].get("path") == "a.txt" and
           not r["payload"].get("seed")]
    tap.ok(len(mod) == 1 and mod[0].get("change") == "modified" and "exec_id" in mod[0],
           "the learner's change of a seeded file is a learner's file_diff (modified, its exec)", repr(mod)[:600])
    p = env.run("rollback", sid, "--to", first, "--yes", timeout=120)
    tap.ok(p.returncode == 0, "rollback to the first checkpoint", err(p))
    tap.eq(inside(sid, LOOK + "; test -e new.txt || echo gone"), WANT + "\ngone",
           "the first checkpoint holds the seed: the rollback restores it")
    env.destroy(sid)


@tap.case("from a tarball and from another sandbox's checkpoint")
def _():
    src = host("seed-src")
    tgz = host("seed.tar.gz")
    with tarfile.open(tgz, "w:gz") as t:
        t.add(src, arcname=".")
    sid = env.create_captured("--from", tgz)
    tap.eq(inside(sid, LOOK), WANT, "the tarball's entries are in the workspace")
    tap.eq(inside(sid, "stat -c %u a.txt sub/deep/b.txt link | sort -u"), env.uid_of(sid),
           "the sandbox user's, not the archive's owners")
    env.sh(sid, "echo later > later.txt", check=True)
    rows = env.wait_rows(sid, lambda r: any(x["kind"] == "file_diff" and x["payload"].get("path") == "later.txt"
                                            for x in r))
    seed_rows_ok(sid, rows, "tar")
    shown = env.run("events", "--sandbox", sid, "--ingest", env.ingest.http_base, "--secret", env.secret)
    tap.ok(f"sandbox created, seeded from tar {os.path.realpath(tgz)} (3 files)" in shown.stdout.decode(),
           "sandglass events says where the session started", shown.stdout.decode()[:1500] + err(shown))
    me = pwd.getpwuid(os.geteuid()).pw_name
    tap.ok(f"(3 files) (by {me})\n" in shown.stdout.decode(), "and who created the sandbox",
           shown.stdout.decode()[:1500])
    tap.eq((record(sid).get("from") or {}).get("source"), os.path.realpath(tgz), "the record names the tarball")
    # another sandbox's checkpoint: its state at that checkpoint, not now
    ck = json.loads(env.run("checkpoints", sid, "--json", check=True).stdout)[0]["id"]
    env.sh(sid, "echo changed > a.txt", check=True)
    other = env.create_captured("--from", f"{sid[:6]}@{ck[:8]}")
    tap.eq(inside(other, LOOK + "; test -e later.txt || echo none"), WANT + "\nnone",
           "ID@CHECKPOINT: the checkpoint's tree, as it was then")
    tap.eq(inside(other, "stat -c %u a.txt sub/deep/b.txt link | sort -u"), env.uid_of(other),
           "the new sandbox user's, not the other sandbox's")
    env.sh(other, "echo mine > mine.txt", check=True)  # a learner's change, after the seed
    rows = env.wait_rows(other, lambda r: any(x["kind"] == "file_diff" and x["payload"].get("path") == "mine.txt"
                                              for x in r))
    seed_rows_ok(other, rows, "checkpoint")
    tap.eq(inside(sid, "cat a.txt"), "changed", "the other sandbox is untouched")
    env.destroy(other)
    env.destroy(sid)


def tar_of(name: str, members: list[tuple[tarfile.TarInfo, bytes]]) -> str:
    path = host(name)
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
        for ti, data in members:
            ti.size = len(data) if ti.isreg() else 0
            t.addfile(ti, io.BytesIO(data) if ti.isreg() else None)
    return path


def ti(name: str, type_: bytes = tarfile.REGTYPE, mode: int = 0o644, linkname: str = "") -> tarfile.TarInfo:
    t = tarfile.TarInfo(name)
    t.type, t.mode, t.linkname = type_, mode, linkname
    return t


@tap.case("hostile archives: refused with the entry named, or neutralised; nothing written outside")
def _():
    outside = host("outside")
    os.makedirs(outside)
    sparse = host("sparse")
    write(os.path.join(outside, "x"), b"host file\n")
    os.makedirs(sparse)
    with open(os.path.join(sparse, "huge"), "wb") as f:
        f.truncate(1 << 40)  # 1 TiB, all hole
    huge = host("huge.tar")
    subprocess.run(["tar", "--sparse", "-cf", huge, "-C", sparse, "huge"], check=True, timeout=120)
    refused = [
        ("a '..' entry", tar_of("dotdot.tar", [(ti("ok.txt"), b"ok\n"), (ti("../escape.txt"), b"evil\n")]),
         "escape.txt"),
        ("an absolute path", tar_of("abs.tar", [(ti(os.path.join(outside, "abs.txt")), b"evil\n")]), "abs.txt"),
        ("a symlink out, then a file through it",
         tar_of("link.tar", [(ti("out", tarfile.SYMTYPE, 0o777, outside), b""), (ti("out/pwned"), b"evil\n")]),
         "pwned"),
        ("a 1 TiB sparse file", huge, "huge"),
        ("a hard link to an absolute path",
         tar_of("hlabs.tar", [(ti("hl1", tarfile.LNKTYPE, 0o644, os.path.join(outside, "x")), b"")]), "hl1"),
        ("a hard link with '..'", tar_of("hldd.tar", [(ti("hl2", tarfile.LNKTYPE, 0o644, "../../etc/passwd"), b"")]),
         "hl2"),
        ("a hard link through a symlink out",
         tar_of("hlsym.tar", [(ti("out2", tarfile.SYMTYPE, 0o777, outside), b""),
                              (ti("hl3", tarfile.LNKTYPE, 0o644, "out2/x"), b"")]), "hl3"),
    ]
    for what, tar, name in refused:
        p = create_from(tar)
        tap.ok(p.returncode == 1 and name in err(p) and "--from" in err(p),
               f"refused: {what}, the entry named", err(p))
    tap.eq((os.listdir(outside), os.stat(os.path.join(outside, "x")).st_nlink), (["x"], 1),
           "nothing was written into (or linked from) the directory the archives aim at")
    tap.ok(not os.path.lexists("/run/sandglass-disk/escape.txt") and not os.path.lexists("/run/escape.txt") and
           not any(os.path.lexists(os.path.join(env.state, "sb", n)) for n in ("escape.txt", "../escape.txt")),
           "no '..' entry landed beside a workspace")
    tap.eq([s["id"] for s in env.ls()], [], "a refused create leaves no sandbox behind")
    dev = ti("null", tarfile.CHRTYPE, 0o666)
    dev.devmajor, dev.devminor = 1, 3
    neut = tar_of("neutral.tar", [(ti("suid", mode=0o4755), b"#!/bin/sh\n"), (dev, b""),
                                  (ti("fifo", tarfile.FIFOTYPE), b""), (ti("plain.txt"), b"plain\n")])
    p = create_from(neut)
    tap.ok(p.returncode == 0, "an archive with a device node, a FIFO and a set-uid file is taken", err(p))
    if p.returncode == 0:
        sid = p.stdout.decode().strip()
        tap.eq(inside(sid, "stat -c %a suid; ls -a | sort | tr '\\n' ' '; cat plain.txt"),
               "755\n. .. plain.txt suid plain", "the set-uid bit dropped, the device and FIFO not made")
        tap.eq((record(sid).get("from") or {}).get("skipped"), 2, "the record counts what was left out")
        env.destroy(sid)
    else:
        tap.ok(False, "(no sandbox to look into)")
        tap.ok(False, "(no record)")


@tap.case("a hostile directory: neutralised as cp is; bounds")
def _():
    d = host("hostile-dir")
    write(os.path.join(d, "suid"), b"#!/bin/sh\n", 0o4755)
    os.mkfifo(os.path.join(d, "fifo"))
    os.mknod(os.path.join(d, "null"), 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.symlink(host("outside"), os.path.join(d, "out"))
    sid = env.create("--from", d)
    tap.eq(inside(sid, "stat -c %a suid; ls -a | sort | tr '\\n' ' '; readlink out"),
           f"755\n. .. out suid {host('outside')}", "set-uid dropped, FIFO and device skipped, the symlink a link")
    env.destroy(sid)
    deep = host("deep-dir")
    os.makedirs(os.path.join(deep, *(["d"] * 300)))
    p = create_from(deep)
    tap.ok(p.returncode == 1 and "nested too deep" in err(p), "a tree deeper than the bound is refused, saying so", err(p))
    shutil.rmtree(deep)


@tap.case("usage and errors name what was wrong")
def _():
    p = create_from(host("no-such-dir"))
    tap.ok(p.returncode == 1 and "no-such-dir" in err(p), "a missing directory is named", err(p))
    write(host("not-a-tar"), b"just text\n")
    p = create_from(host("not-a-tar"))
    tap.ok(p.returncode == 1 and "not a tarball" in err(p), "a file that is no tarball", err(p))
    p = create_from("zzzzzzzz@abcdef")
    tap.ok(p.returncode == 1 and "zzzzzzzz" in err(p), "an unknown sandbox is named", err(p))
    sid = env.create()
    p = create_from(f"{sid}@abcdef12")
    tap.ok(p.returncode == 1 and "abcdef12" in err(p), "an unknown checkpoint is named", err(p))
    p = create_from(f"{sid}@")
    tap.ok(p.returncode == 1 and "CHECKPOINT" in err(p), "ID@ without a checkpoint", err(p))
    env.destroy(sid)
    p = env.run("create", "--learner", "t", "--from", host("seed-src"), "--workspace", host("seed-src"))
    tap.ok(p.returncode == 2 and "--workspace" in err(p), "--from with --workspace is a usage error", err(p))


env.cleanup()
tap.done()
