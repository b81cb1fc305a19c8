#!/usr/bin/env python3
"""One convention for the whole CLI: exit codes (0 done, 1 failed, 2 usage;
exec: 125 its own errors), errors that name what was wrong, --json that is
pure JSON (errors as JSON on stderr), times in RFC 3339, ids at one length,
unique id prefixes, --version, rollback by label and a rollback that
changes nothing doing nothing, a y/n prompt that asks again."""
from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import SANDGLASS, SANDGLASSD, Env, await_true, tap  # noqa: E402

env = Env()
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def ls_shell(sid: str, rows) -> None:
    """A learner's shell on a terminal of ours (`sandglass shell`): ls
    counts the terminal attached, and shows the command typed at its
    prompt while it runs, nothing back at the prompt."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([SANDGLASS, "shell", sid], stdin=slave, stdout=slave, stderr=slave,
                            env=dict(env.env, TERM="xterm"), start_new_session=True)
    os.close(slave)
    seen = bytearray()

    def drain() -> bool:
        while select.select([master], [], [], 0)[0]:
            try:
                seen.extend(os.read(master, 65536))
            except OSError:
                break
        return True
    try:
        await_true(lambda: drain() and b"\x1b]133;B\x07" in seen, "the shell's prompt", timeout=60)
        tap.eq(rows().get(sid, {}).get("attached"), 1, "ls: a shell attached counts as a terminal")
        os.write(master, b"sleep 300\r")
        await_true(lambda: drain() and rows().get(sid, {}).get("now") == "sleep 300",
                   "ls: the command typed in the shell is what runs now", timeout=60, step=0.2,
                   diag=lambda: repr(rows().get(sid, {}).get("now")))
        os.write(master, b"\x03")  # ^C: back at the prompt
        await_true(lambda: drain() and rows().get(sid, {}).get("now") is None,
                   "back at its prompt, nothing runs now", timeout=60, step=0.2,
                   diag=lambda: repr(rows().get(sid, {}).get("now")))
        os.write(master, b"exit\r")
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    await_true(lambda: rows().get(sid, {}).get("attached") == 0, "the shell gone, no terminal attached", timeout=60,
               step=0.2)

try:
    sid = env.create()

    @tap.case("version")
    def _version():
        p = env.run("--version")
        tap.ok(p.returncode == 0 and re.fullmatch(rb"sandglass \d+\.\d+\.\d+\n", p.stdout), "--version",
               p.stdout.decode())

    @tap.case("usage errors exit 2 and name what was wrong")
    def _usage():
        for args, word in ((["abort", sid, "--bogus"], "--bogus"), (["destroy", sid, "--bogus"], "--bogus"),
                           (["checkpoint", sid, "--bogus"], "--bogus"), (["rollback", sid, "--bogus"], "--bogus"),
                           (["resume", sid, "--bogus"], "--bogus"), (["checkpoints", sid, "--bogus"], "--bogus"),
                           (["cp", "--bogus", "a", f"{sid}:b"], "--bogus"), (["cp", "a", "b"], "ID:PATH"),
                           (["cp", f"{sid}:a"], "destination"),
                           (["abort"], "missing sandbox id"), (["nosuchcommand"], "nosuchcommand")):
            p = env.run(*args)
            err = p.stderr.decode()
            tap.ok(p.returncode == 2 and word in err and err.count("\n") == 1,
                   f"{' '.join(args[:1])} {args[-1]}: exit 2, one line naming it", f"{p.returncode} {err}")
        p = env.run("exec", sid, "--bogus", "--", "true")
        tap.eq(p.returncode, 125, "exec: its own usage error is 125 (the command's codes stay the command's)")

    @tap.case("cp in and out through this build's CLI (the directory fd it sends)")
    def _cp():
        src = os.path.join(env.root, "cp-in.txt")
        with open(src, "w") as f:
            f.write("via cp\n")
        p = env.run("cp", src, f"{sid}:/workspace/cp-in.txt")
        tap.ok(p.returncode == 0 and env.sh(sid, "cat cp-in.txt").stdout == b"via cp\n", "cp LOCAL ID:PATH",
               p.stderr.decode())
        dst = os.path.join(env.root, "cp-out.txt")
        p = env.run("cp", f"{sid}:cp-in.txt", dst)
        tap.ok(p.returncode == 0 and open(dst).read() == "via cp\n", "cp ID:PATH LOCAL", p.stderr.decode())

    @tap.case("sandglassd speaks as sandglass does")
    def _daemon_usage():
        def d(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([SANDGLASSD, *args], capture_output=True, timeout=60, env=env.env)
        cases = ((["ingest", "--bogus"], "--bogus"), (["ingest", "--max-conns"], "--max-conns"),
                 (["ingest", "stray"], "stray"), (["ingest", "--max-conns", "0"], "--max-conns"),
                 (["token", "--learner", "a", "--task", "b"], "--sandbox"), (["token", "--ttl", "x"], "--ttl"),
                 (["token", "--bogus"], "--bogus"), (["events", "--bogus"], "--bogus"),
                 (["events", "--after-seq", "x"], "--after-seq"), (["events", "stray"], "stray"),
                 (["flush", "--bogus"], "--bogus"), (["flush", "--timeout", "x"], "--timeout"),
                 (["nosuchcommand"], "nosuchcommand"), (["supervisor"], "supervisor"), ([], "missing command"))
        for args, word in cases:
            p = d(*args)
            err = p.stderr.decode()
            prefix = "sandglassd " + args[0] + ": " if args and args[0] not in ("nosuchcommand", "supervisor") \
                else "sandglassd: "
            tap.ok(p.returncode == 2 and err.startswith(prefix) and word in err and err.count("\n") == 1
                   and not p.stdout, f"sandglassd {' '.join(args)}: exit 2, one line naming {word}",
                   f"{p.returncode} {err!r}")
        p = env.run("ingest", "--bogus")
        err = p.stderr.decode()
        tap.ok(p.returncode == 2 and err.startswith("sandglass ingest: ") and "--bogus" in err
               and "'sandglass ingest --help'" in err and err.count("\n") == 1,
               "through sandglass the same line names the command the user ran", err)
        for cmd in ("ingest", "token", "events", "flush"):
            p = d(cmd, "--help")
            tap.ok(p.returncode == 0 and p.stdout.startswith(b"usage: ") and b"--" in p.stdout and not p.stderr,
                   f"sandglassd {cmd} --help explains its options on stdout", p.stdout.decode()[:200])
        # the supervisor is its own binary (sandglassd no longer runs it)
        sup = os.path.join(os.path.dirname(shutil.which(SANDGLASSD) or SANDGLASSD), "sandglass-supervisor")
        p = subprocess.run([sup, "supervisor"], capture_output=True, timeout=60, env=env.env)
        err = p.stderr.decode()
        tap.ok(p.returncode == 2 and "sandbox id" in err and err.count("\n") == 1,
               "sandglass-supervisor supervisor: exit 2, one line naming the sandbox id", err)
        p = subprocess.run([sup, "supervisor", "--help"], capture_output=True, timeout=60, env=env.env)
        tap.ok(p.returncode == 0 and p.stdout.startswith(b"usage: sandglass-supervisor") and not p.stderr,
               "sandglass-supervisor supervisor --help explains its options on stdout", p.stdout.decode()[:200])
        for args, rc, word in ((["--after-seq", "x"], 2, "--after-seq"),
                               (["--ingest", "http://127.0.0.1:9", "--token", "t"], 1, "127.0.0.1:9")):
            p = env.run("events", "--json", *args)
            try:
                err = json.loads(p.stderr)
            except ValueError:
                err = {}
            tap.ok(p.returncode == rc and p.stdout == b"" and word in err.get("error", "")
                   and err.get("command") == "events", f"events --json {args[0]}: the error is JSON on stderr",
                   f"{p.returncode} {p.stderr!r}")
        p = d("--help")
        tap.ok(p.returncode == 0 and all(c.encode() in p.stdout for c in ("ingest", "token", "events", "flush")),
               "sandglassd --help lists its commands", p.stdout.decode())
        p = d("--version")
        tap.ok(p.returncode == 0 and re.fullmatch(rb"sandglassd \d+\.\d+\.\d+\n", p.stdout), "sandglassd --version",
               p.stdout.decode())

    @tap.case("a capture that cannot be delivered does not start in silence")
    def _capture_config():
        bad_secret = os.path.join(env.root, "bad-secret")
        with open(bad_secret, "w") as f:
            f.write("not a key\n")
        os.chmod(bad_secret, 0o600)
        n0 = len(env.ls())
        for args, words in ((["--ingest", "garbage"], ["--ingest", "ws://HOST:PORT"]),
                            (["--ingest", "http://127.0.0.1:7433"], ["WebSocket", "ws://"]),
                            (["--ingest", "ws://127.0.0.1:99999"], ["port"]),
                            (["--secret", bad_secret], ["--secret", "64 hex"])):
            p = env.run("create", "--learner", "t", "--task", "k", *args)
            err = p.stderr.decode()
            tap.ok(p.returncode == 2 and all(w in err for w in words), f"create {' '.join(args)} is refused", err)
        p = env.run("create", "--learner", "t", "--ingest", "ws://127.0.0.1:9")
        tap.ok(p.returncode == 2 and b"--task" in p.stderr, "--ingest without --task is refused", p.stderr.decode())
        n = len(env.ls())
        tap.eq(n, n0, "the refused creates made nothing")
        p = env.run("create", "--learner", "t", "--task", "k", "--ingest", "ws://127.0.0.1:9")
        tap.ok(p.returncode == 0 and b"not reachable" in p.stderr and b"spool" in p.stderr,
               "an unreachable ingest is a warning at create", p.stderr.decode())
        tap.eq(len(env.ls()), n + 1, "and the sandbox is made (the spool keeps everything)")

    @tap.case("create checks its token against the ingest; ls shows an ingest that does not take the events")
    def _token_check():
        import socket
        import urllib.error
        import urllib.request
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        url = f"ws://127.0.0.1:{port}"
        other = os.path.join(env.root, "other-key")
        with open(other, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        os.chmod(other, 0o600)

        def ingest_of(sid: str) -> dict:
            return next((sb.get("uplink") or {} for sb in env.ls() if sb["id"] == sid), {})

        def ls_line(sid: str) -> str:
            out = env.run("ls", check=True).stdout.decode()
            return next((line for line in out.splitlines() if line.startswith(sid)), "")
        p = env.run("create", "--learner", "t", "--task", "k", "--ingest", url)
        tap.ok(p.returncode == 0 and b"not reachable" in p.stderr and p.stderr.count(b"\n") == 1,
               "nothing listening: one warning line, the sandbox is made", p.stderr.decode())
        far = p.stdout.decode().strip()
        await_true(lambda: ingest_of(far).get("state") == "unreachable", "ls --json: its ingest is unreachable",
                   diag=lambda: repr(ingest_of(far)))
        tap.ok("ingest unreachable" in ls_line(far), "ls says so", ls_line(far))
        ing = env.spawn([SANDGLASS, "ingest", "--listen", f"127.0.0.1:{port}", "--secret", other,
                         "--store", f"sqlite:{os.path.join(env.root, 'other.db')}"],
                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        try:
            tap.ok(b"listening" in ing.stdout.readline(), "an ingest with another key runs")
            fresh = os.path.join(env.root, "fresh-state")
            p = env.run("create", "--learner", "t", "--task", "k", "--ingest", url,
                        env={"SANDGLASS_STATE_DIR": fresh})
            err = p.stderr.decode()
            tap.ok(p.returncode == 1 and "no key" in err and "--secret" in err and err.count("\n") == 1,
                   "a fresh state directory against a listening ingest: refused, not warned", err)
            tap.ok(not os.path.exists(os.path.join(fresh, "sb")) or not os.listdir(os.path.join(fresh, "sb")),
                   "and nothing is made there")
            n = len(env.ls())
            p = env.run("create", "--learner", "t", "--task", "k", "--ingest", url)
            err = p.stderr.decode()
            tap.ok(p.returncode == 1 and "rejects" in err and "bad signature" in err and "--secret" in err
                   and err.count("\n") == 1, "a key the ingest rejects: refused at create, in one line", err)
            tap.eq(len(env.ls()), n, "and nothing is made")
            await_true(lambda: ingest_of(far).get("state") == "rejected",
                       "ls --json: the earlier sandbox's ingest now rejects its token",
                       timeout=90, diag=lambda: repr(ingest_of(far)))
            tap.ok("ingest rejected" in ls_line(far) and "401" in ls_line(far), "ls says so", ls_line(far))
            p = env.run("create", "--learner", "t", "--task", "k", "--ingest", url, "--secret", other)
            tap.ok(p.returncode == 0 and p.stderr == b"", "the ingest's own key: made, without a word",
                   p.stderr.decode())
            near = p.stdout.decode().strip()
            p = env.run("create", "--learner", "t", "--task", "k", "--ingest", url)
            tap.ok(p.returncode == 1 and "rejects" in p.stderr.decode(),
                   "a passed check holds for its own key only: the other key is still refused", p.stderr.decode())
            env.exec(near, "true")
            await_true(lambda: ingest_of(near).get("state") == "connected", "ls --json: its ingest takes its events",
                       timeout=90, diag=lambda: repr(ingest_of(near)))
            tap.ok("(ingest" not in ls_line(near), "and ls adds nothing to its line", ls_line(near))
            for auth, what in ((None, "no token"), ("Bearer nonsense", "a malformed token")):
                req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/token")
                if auth:
                    req.add_header("Authorization", auth)
                try:
                    urllib.request.urlopen(req, timeout=30)
                    code, body = 200, {}
                except urllib.error.HTTPError as e:
                    code, body = e.code, json.loads(e.read() or b"{}")
                tap.ok(code == 401 and body.get("error"), f"/v1/token with {what}: 401 and why", repr((code, body)))
        finally:
            ing.terminate()
            ing.wait(timeout=60)

    @tap.case("the ingest refuses what it cannot do, clearly")
    def _ingest():
        import socket
        busy = socket.socket()
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        try:
            p = env.run("ingest", "--listen", f"127.0.0.1:{port}", timeout=60)
            err = p.stderr.decode()
            tap.ok(p.returncode == 1 and f"127.0.0.1:{port} is in use" in err and "LWS" not in err
                   and "vhost" not in err, "a port in use: one line, exit 1 (it segfaulted)", f"{p.returncode} {err}")
        finally:
            busy.close()
        missing = os.path.join(env.root, "no", "such", "dir")
        p = env.run("ingest", "--listen", "127.0.0.1:0", "--store", f"sqlite:{missing}/x.db", timeout=60)
        tap.ok(p.returncode != 0 and b"does not exist" in p.stderr, "a store in a missing directory is refused",
               p.stderr.decode())
        tap.ok(not os.path.exists(os.path.join(env.root, "no")), "and no directory was made")

    @tap.case("flush says why")
    def _flush():
        import socket
        p = env.run("flush", "nosuchid0000")
        tap.ok(p.returncode == 1 and b"no sandbox 'nosuchid0000' with an undelivered spool" in p.stderr,
               "flush of an unknown id says there is no such spool", p.stderr.decode())
        sid2 = env.create("--task", "k", "--ingest", "ws://127.0.0.1:9")
        env.exec(sid2, "echo", "hi")
        env.run("destroy", sid2, timeout=120)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        ing = env.spawn([SANDGLASS, "ingest", "--listen", f"127.0.0.1:{port}"], stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL)
        try:
            tap.ok(b"listening" in ing.stdout.readline(), "an ingest runs")
            other = os.path.join(env.root, "other-secret")
            with open(other, "w") as f:
                f.write(os.urandom(32).hex() + "\n")
            os.chmod(other, 0o600)
            p = env.run("flush", "--ingest", f"ws://127.0.0.1:{port}", "--secret", other, "--timeout", "30",
                        sid2, timeout=120)
            err = p.stderr.decode()
            tap.ok(p.returncode == 1 and "token rejected (401)" in err and "LWS" not in err
                   and err.count("\n") == 1, "a rejected token is said in one line, at once", err)
            p = env.run("flush", "--ingest", f"ws://127.0.0.1:{port}", sid2, timeout=120)
            tap.ok(p.returncode == 0 and b"events delivered" in p.stdout, "with the right key it delivers",
                   (p.stdout + p.stderr).decode())
        finally:
            ing.terminate()
            ing.wait(timeout=60)

    @tap.case("--json errors are JSON")
    def _json_errors():
        p = env.run("checkpoints", "nosuchid0000", "--json")
        tap.eq(p.stdout, b"", "nothing on stdout")
        try:
            err = json.loads(p.stderr)
        except ValueError:
            err = {}
        tap.ok(p.returncode == 1 and "nosuchid0000" in err.get("error", ""), "the error is a JSON object",
               p.stderr.decode())

    @tap.case("id prefixes")
    def _prefix():
        p = env.run("exec", sid[:5], "--", "echo", "by-prefix")
        tap.eq(p.stdout, b"by-prefix\n", "exec takes a unique prefix of the id")
        p = env.run("checkpoints", sid[:5])
        tap.ok(p.returncode == 0 and b"ID" in p.stdout, "checkpoints takes it", p.stderr.decode())
        p = env.run("checkpoint", "zzzz")
        tap.ok(p.returncode == 1 and b"no sandbox 'zzzz'" in p.stderr, "an unknown prefix is named",
               p.stderr.decode())
        for short in (sid[:1], sid[:3]):
            p = env.run("destroy", short)
            tap.ok(p.returncode != 0 and b"too short" in p.stderr and p.stderr.count(b"\n") == 1,
                   f"destroy {short!r}: a prefix under 4 characters is refused in one line", p.stderr.decode())
        p = env.run("exec", sid, "--", "true")
        tap.eq(p.returncode, 0, "the sandbox a short prefix matched still lives")
        p = env.run("destroy", "0")
        err = p.stderr.decode()
        tap.ok(p.returncode == 1 and "a sandbox id prefix needs at least 4 characters" in err,
               "destroy 0: refused, saying what a prefix needs", err)
        # six more ids sharing the first 4 characters (directories alone: no record)
        fakes = [sid[:4] + f"zzzzzzz{i}" for i in range(6)]
        for f in fakes:
            os.makedirs(os.path.join(env.state, "sb", f))
        total = len([d for d in os.listdir(os.path.join(env.state, "sb")) if d.startswith(sid[:4])])
        try:
            for args in (["destroy", sid[:4]], ["exec", sid[:4], "--", "true"], ["checkpoints", sid[:4]],
                         ["abort", sid[:4]], ["shell", sid[:4]], ["events", "--sandbox", sid[:4]]):
                p = env.run(*args, input=b"")
                err = p.stderr.decode()
                named = [c for c in os.listdir(os.path.join(env.state, "sb")) if c in err]
                tap.ok(p.returncode != 0 and f"is the start of {total} sandbox ids" in err and len(named) == 5
                       and ", ...)" in err and err.count("\n") == 1,
                       f"{args[0]} {sid[:4]}: an ambiguous prefix is refused naming 5 of its {total} candidates", err)
            p = env.run("exec", sid[:5], "--", "true")
            tap.eq(p.returncode, 0, "one more character names it")
        finally:
            for f in fakes:
                os.rmdir(os.path.join(env.state, "sb", f))
        p = env.run("flush", sid[:6])
        err = p.stderr.decode()
        tap.ok(p.returncode == 1 and f"no sandbox '{sid[:6]}' with an undelivered spool" in err,
               "flush: a prefix of no undelivered spool is named", err)

    @tap.case("no float noise")
    def _floats():
        lines = [env.run("exec", sid, "--json", "--", "true", check=True).stdout.splitlines()[-1],
                 env.run("checkpoint", sid, "--json", check=True).stdout]
        noisy = [ln for ln in lines if re.search(rb"\d\.\d*(\d)\1{5,}\d*|\.\d{11,}", ln)]
        tap.ok(not noisy, "reals are printed with at most 10 significant digits (no 0.0108314740000001)",
               repr(noisy))

    @tap.case("ids and times")
    def _ids_times():
        p = env.run("checkpoint", sid, "--label", "golden", check=True)
        tap.ok(re.fullmatch(rb"[0-9a-f]{12}\n", p.stdout), "checkpoint prints a 12-character id",
               p.stdout.decode())
        cps = json.loads(env.run("checkpoints", sid, "--json", check=True).stdout)
        tap.ok(cps and all(RFC3339.fullmatch(c["time"]) and len(c["id"]) == 40 for c in cps),
               "checkpoints --json: RFC 3339 times, whole ids", json.dumps(cps))
        rows = env.run("checkpoints", sid, check=True).stdout.decode().splitlines()[1:]
        tap.ok(rows and all(re.match(r"[0-9a-f]{12} \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ", r) for r in rows),
               "checkpoints: 12-character ids, RFC 3339 times", "\n".join(rows))

    @tap.case("learner text is printed escaped")
    def _escapes():
        env.exec(sid, "/bin/sh", "-c", "touch \"/workspace/evil$(printf '\\033')]0;pwned$(printf '\\007')\"",
                 "\x1b[2J\x1b]0;title\x07")
        p = env.run("checkpoints", sid, check=True)
        tap.ok(b"\x1b" not in p.stdout and b"\x07" not in p.stdout,
               "checkpoints prints no escape sequence of a label (a command)", repr(p.stdout[-300:]))
        first = json.loads(env.run("checkpoints", sid, "--json", check=True).stdout)[0]["id"]
        master, slave = pty.openpty()
        proc = subprocess.Popen([SANDGLASS, "rollback", sid, "--to", first], stdin=slave, stdout=slave,
                                stderr=slave, env=env.env)
        env.procs.append(proc)
        os.close(slave)
        out = b""
        while b"[y/n]" not in out and select.select([master], [], [], 60)[0]:
            try:
                out += os.read(master, 4096)
            except OSError:
                break
        os.write(master, b"n\n")
        proc.wait(timeout=60)
        os.close(master)
        tap.ok(b"evil\\x1b]0;pwned\\x07" in out and b"\x1b" not in out and b"\x07" not in out,
               "rollback's plan shows a file name's escape sequences as text", repr(out[-400:]))

    @tap.case("rollback by label; a rollback that changes nothing does nothing")
    def _rollback():
        env.exec(sid, "/bin/sh", "-c", "echo changed > /workspace/f")
        p = env.run("rollback", sid, "--to", "golden", "--yes", "--json", check=True)
        res = json.loads(p.stdout)
        tap.ok(res.get("restored") is True and any(c["path"] == "f" for c in res["changes"]),
               "--to takes a label", p.stdout.decode())
        before = len(json.loads(env.run("checkpoints", sid, "--json", check=True).stdout))
        p = env.run("rollback", sid, "--to", "golden", "--yes")
        tap.ok(p.returncode == 0 and b"nothing to roll back" in p.stdout, "a no-op rollback says so",
               (p.stdout + p.stderr).decode())
        after = len(json.loads(env.run("checkpoints", sid, "--json", check=True).stdout))
        tap.eq(after, before, "and takes no safety checkpoint")
        p = env.run("rollback", sid, "--to", "no such label", "--yes")
        tap.ok(p.returncode == 1 and b"no such label" in p.stderr, "an unknown label is named", p.stderr.decode())

    @tap.case("the y/n prompt asks again")
    def _prompt():
        env.exec(sid, "/bin/sh", "-c", "echo again > /workspace/g")
        master, slave = pty.openpty()
        proc = subprocess.Popen([SANDGLASS, "rollback", sid], stdin=slave, stdout=slave, stderr=slave,
                                env=env.env)
        env.procs.append(proc)
        os.close(slave)
        out = b""

        def read_until(word):
            nonlocal out
            while word not in out:
                if not select.select([master], [], [], 60)[0]:
                    return False
                try:
                    out += os.read(master, 4096)
                except OSError:
                    return False
            return True
        tap.ok(read_until(b"[y/n]"), "it asks", out.decode(errors="replace"))
        os.write(master, b"maybe\n")
        tap.ok(read_until(b"please answer y or n"), "an unclear answer is asked again", out.decode(errors="replace"))
        os.write(master, b"n\n")
        tap.ok(read_until(b"keeping the changes"), "n keeps the changes", out.decode(errors="replace"))
        proc.wait(timeout=60)
        os.close(master)
        tap.eq(env.exec(sid, "cat", "/workspace/g").stdout, b"again\n", "the file is untouched")

    @tap.case("destroy several: by ids, by filter, asked first")
    def _destroy_many():
        a, b, c = (env.create("--learner", lr) for lr in ("dm-one", "dm-one", "dm-two"))
        alive = lambda s: any(sb["id"] == s for sb in env.ls())  # noqa: E731
        for args, what in (([a, b], "two ids"), ([a[:6]], "a prefix"), (["--learner", "dm-one"], "a filter"),
                           (["--all"], "--all")):
            p = env.run("destroy", *args, input=b"")
            err = p.stderr.decode()
            tap.ok(p.returncode == 1 and "--yes" in err and err.count("\n") == 1,
                   f"destroy {what} with no terminal and no --yes: refused in one line", err)
        tap.ok(alive(a) and alive(b) and alive(c), "and nothing was destroyed")
        p = env.run("destroy", a, "zzzz", "--yes")
        tap.ok(p.returncode == 1 and b"no sandbox 'zzzz'" in p.stderr and alive(a),
               "an unknown id among several: none is destroyed", p.stderr.decode())
        p = env.run("destroy", a, a[:8], "--yes")
        tap.ok(p.returncode == 2 and b"named twice" in p.stderr and alive(a), "one sandbox named twice: a usage error",
               p.stderr.decode())
        p = env.run("destroy", "--all", "--learner", "x")
        tap.eq(p.returncode, 2, "--all with a filter: a usage error")
        master, slave = pty.openpty()
        proc = subprocess.Popen([SANDGLASS, "destroy", "--learner", "dm-one"], stdin=slave, stdout=slave,
                                stderr=slave, env=env.env)
        env.procs.append(proc)
        os.close(slave)
        out = b""
        while b"[y/n]" not in out and select.select([master], [], [], 60)[0]:
            out += os.read(master, 4096)
        tap.ok(a.encode() in out and b.encode() in out and c.encode() not in out and b"destroy 2 sandboxes" in out,
               "on a terminal it lists the learner's two sandboxes and asks", out.decode(errors="replace"))
        os.write(master, b"n\n")
        proc.wait(timeout=60)
        tap.ok(proc.returncode == 1 and alive(a) and alive(b), "n destroys nothing")
        os.close(master)
        p = env.run("destroy", "--learner", "dm-one", "--yes", "--json", timeout=120)
        lines = [json.loads(x) for x in p.stdout.decode().splitlines()]
        tap.ok(p.returncode == 0 and sorted(d.get("destroyed") for d in lines) == sorted([a, b]),
               "--learner --yes destroys that learner's sandboxes, one JSON line each", p.stdout.decode())
        tap.ok(not alive(a) and not alive(b) and alive(c), "and only those")
        p = env.run("destroy", c, timeout=120)
        tap.ok(p.returncode == 0 and not alive(c), "one full id needs no --yes", p.stderr.decode())

    @tap.case("ls for an operator: times, running execs, filters, --json; a wedged supervisor does not stall it")
    def _ls():
        import signal
        import time
        a = env.create("--learner", "ls-one")
        b = env.create("--learner", "ls-two", "--task", "ls-task", "--ingest", "ws://127.0.0.1:9")
        env.exec(b, "true")

        def rows(*args):
            p = env.run("ls", "--json", *args, check=True)
            return {r["id"]: r for r in json.loads(p.stdout)}
        now = rows()
        ra, rb = now.get(a, {}), now.get(b, {})
        tap.ok(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|\+00:00)", ra.get("created", ""))
               and ra.get("running_execs") == 0
               and "last_active" in ra and ra.get("state") == "running",
               "ls --json: created (RFC 3339), running_execs, last_active, state", json.dumps(ra))
        tap.ok(RFC3339.fullmatch(rb.get("last_active") or "") and rb["last_active"] >= rb["created"][:19],
               "a captured sandbox was last active at its last event", json.dumps(rb))
        hostile = "cat # \x1b]0;pwned\x07\x1b[2J"
        cat = env.spawn([SANDGLASS, "exec", a, "--", "sh", "-c", hostile], stdin=subprocess.PIPE,
                        stdout=subprocess.DEVNULL)
        await_true(lambda: rows().get(a, {}).get("running_execs") == 1, "ls: an exec running counts", timeout=60, step=0.2)
        tap.eq((rows().get(a, {}).get("now"), rows().get(a, {}).get("attached")), (hostile, 0),
               "ls --json: the command running now (its line as given), no terminal attached")
        line = next((ln for ln in env.run("ls", check=True).stdout.decode().splitlines() if ln.startswith(a)), "")
        tap.ok("\x1b" not in line and "\x07" not in line and "cat # \\x1b]0;pwned" in line,
               "the table shows the command escaped, never its raw control bytes", repr(line))
        cat.stdin.close()
        cat.wait(timeout=60)
        await_true(lambda: rows().get(a, {}).get("running_execs") == 0, "and no longer once it ended", timeout=60, step=0.2)
        tap.eq(rows().get(a, {}).get("now", ""), None, "nothing runs now: now is null")
        tap.ok((rows().get(b, {}).get("unacked_events") or 0) > 0 and rows().get(a, {}).get("unacked_events", 0) is None,
               "a captured sandbox whose ingest is away counts the events its spool keeps; an uncaptured one none",
               json.dumps({k: rows().get(b, {}).get(k) for k in ("unacked_events", "uplink")}))
        line = next((ln for ln in env.run("ls", check=True).stdout.decode().splitlines() if ln.startswith(b)), "")
        tap.ok(re.search(r"; \d+ events? kept in the spool\)", line), "and the table says how many", line)
        for args, want in ((["--learner", "ls-one"], {a}), (["--task", "ls-task"], {b}),
                           (["--learner", "ls-two", "--task", "ls-task"], {b}), (["--learner", "nobody"], set()),
                           (["--state", "dead"], set())):
            got = set(rows(*args)) & {a, b} if want else set(rows(*args))
            tap.eq(got, want, f"ls {' '.join(args)}")
        p = env.run("ls", "--state", "sleeping")
        tap.ok(p.returncode == 2 and "sleeping" in p.stderr.decode(), "--state of no state: a usage error",
               p.stderr.decode())
        text = env.run("ls", "--learner", "ls-one", check=True).stdout.decode().splitlines()
        tap.ok(len(text) == 2 and text[0].split()[:8] == ["ID", "STATE", "CREATED", "LAST", "ACTIVE", "EXECS",
                                                          "TERMS", "NOW"]
               and text[1].startswith(a) and " running " in text[1] and " 0 " in text[1]
               and len(RFC3339.findall(text[1])) == 1,
               "ls: the table's columns", "\n".join(text))
        ls_shell(a, rows)
        sup = ra.get("supervisor_pid", 0)
        os.kill(sup, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            p = env.run("ls", "--learner", "ls-one", timeout=60)
            took = time.monotonic() - t0
            line = p.stdout.decode().splitlines()[1:]
            tap.ok(p.returncode == 0 and line and " ? " in line[0] and took < 10,
                   "a stopped supervisor: its execs shown as ?, ls does not wait on it", f"{took:.1f}s {line}")
            tap.eq(rows("--learner", "ls-one").get(a, {}).get("running_execs", 0), None,
                   "--json: running_execs null")
        finally:
            os.kill(sup, signal.SIGCONT)
        p = env.run("destroy", "--task", "ls-task", input=b"")
        tap.ok(p.returncode == 1 and "--yes" in p.stderr.decode(), "destroy --task with no terminal needs --yes",
               p.stderr.decode())
        p = env.run("destroy", "--task", "ls-task", "--yes", timeout=120)
        tap.ok(p.returncode == 0 and p.stdout.decode() == f"destroyed {b}\n" and b not in rows() and a in rows(),
               "destroy --task --yes: that task's sandbox, one line", p.stdout.decode() + p.stderr.decode())
        p = env.run("destroy", "--task", "ls-task", "--yes")
        tap.ok(p.returncode == 1 and "no sandbox matches" in p.stderr.decode(), "a filter that matches none fails",
               p.stderr.decode())
        broken = os.path.join(env.state, "sb", "zzzzzzzzzz01")  # a directory without a record
        os.makedirs(broken)
        try:
            p = env.run("destroy", a, "zzzzzzzzzz01", "--yes", timeout=120)
            err = p.stderr.decode()
            tap.ok(p.returncode == 1 and p.stdout.decode() == f"destroyed {a}\n" and err.count("\n") == 1
                   and "zzzzzzzzzz01" in err and a not in rows(),
                   "destroy of two, one failing: each result on its own line, the other destroyed, exit 1",
                   p.stdout.decode() + err)
        finally:
            os.rmdir(broken)

    @tap.case("abort and resume")
    def _abort():
        p = env.run("abort", sid, "--reason", "break", check=True)
        out = p.stdout.decode()
        tap.ok(out.startswith(f"aborted {sid} (by operator: break)") and "proof" in out
               and not out.lstrip().startswith("{"), "abort prints words, not JSON", out)
        p = env.run("resume", sid, "--json", check=True)
        tap.eq(json.loads(p.stdout).get("resumed"), sid, "resume --json")
        p = env.run("abort", sid, "--destroy", "--json")
        doc = None
        try:
            doc = json.loads(p.stdout)
        except ValueError:
            pass
        tap.ok(p.returncode == 0 and doc and doc.get("destroy", {}).get("destroyed") == sid,
               "abort --destroy --json prints one JSON document", p.stdout.decode())
finally:
    env.cleanup()
tap.done()
