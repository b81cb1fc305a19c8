#!/usr/bin/env python3
"""Issue 26: TLS. The ingest, `serve` and the uplink speak wss:// and
https:// with configured certificates; plain listeners only on loopback
unless the operator says --insecure-plaintext.

The test makes its own CA, a server certificate for 127.0.0.1 and
localhost, one for another host name, and a second CA that signed nothing
of the server's, with the `openssl` CLI in a temporary directory. Then, all
real: a TLS ingest; a captured sandbox created with `--ingest wss://...
--ingest-ca ca.pem` whose commands' events arrive (read back over https by
`sandglass events`); clients without the CA, with the wrong CA, or facing a
certificate for another host are refused with "certificate verify failed"
and nothing is stored; plain ws:// and http:// to the TLS port fail saying
it may be a TLS port; the uplink itself (through `sandglass flush` of an
undelivered spool) refuses the same certificates and delivers with the CA;
`serve` and `--metrics-listen` serve over https; bad flags and files are
refused with messages naming them; a plain listener off loopback is
refused without --insecure-plaintext (and, in a network namespace of its
own, starts with it, loudly). Every wait is for a condition. TAP."""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sqlite3
import ssl
import subprocess
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import SANDGLASS, SANDGLASSD, Env, await_true, refused_port, tap  # noqa: E402
import sgtest  # noqa: E402

T = 30  # bound of one command

env = Env()
pki = os.path.join(env.root, "pki")
os.makedirs(pki)
secret = os.path.join(env.root, "secret")
db = os.path.join(env.root, "events.db")


def P(name: str) -> str:
    return os.path.join(pki, name)


def make_ca(name: str) -> None:
    sgtest.make_ca(pki, name)


def make_cert(name: str, san: str, ca: str = "ca") -> None:
    sgtest.make_cert(pki, name, san, ca)


make_ca("ca")
make_ca("otherca")
make_cert("server", "IP:127.0.0.1,DNS:localhost")
make_cert("otherhost", "DNS:other.example")
shutil.copy(P("server.key"), P("open.key"))
os.chmod(P("open.key"), 0o644)  # a key every user may read
shutil.copy(P("ca.pem"), P("notakey.key"))
os.chmod(P("notakey.key"), 0o600)
with open(P("garbage.pem"), "w") as f:
    f.write("not a certificate\n")
with open(secret, "w") as f:
    f.write("cd" * 32 + "\n")
os.chmod(secret, 0o600)


def run(*args: str, bin: str = SANDGLASSD, extra: dict | None = None, timeout: float = T):
    e = dict(env.env)
    e.update(extra or {})
    return subprocess.run([bin, *args], capture_output=True, text=True, env=e, timeout=timeout)


class Server:
    """A `sandglassd ingest` or `serve` started with args; its first line
    says where it listens."""

    def __init__(self, *args: str, cmd: str = "ingest", prefix: list[str] | None = None) -> None:
        self.log = open(os.path.join(env.root, f"{cmd}-{len(env.procs)}.log"), "w+")
        self.proc = env.spawn([*(prefix or []), SANDGLASSD, cmd, *args], stdout=subprocess.PIPE, stderr=self.log,
                              text=True)
        self.line = self.proc.stdout.readline().strip()
        m = re.search(r":(\d+)/?$", self.line)
        self.port = int(m.group(1)) if m else 0

    def stderr(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=T)


def ingest(*args: str) -> Server:
    return Server("--listen", "127.0.0.1:0", "--store", f"sqlite:{db}", "--secret", secret, *args)


def https_get(url: str, ca: str | None = P("ca.pem")):
    """(status, body) of a GET over TLS, or (None, the error's text)."""
    ctx = ssl.create_default_context(cafile=ca) if ca else ssl.create_default_context()
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=T) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as e:
        return None, str(getattr(e, "reason", e))


def stored(where: str, arg: str) -> int:
    """Rows of the store whose column `where` is arg (0 when there is no
    store file yet: nothing was stored)."""
    if not os.path.exists(db):
        return 0
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return con.execute(f"SELECT count(*) FROM sg_events WHERE {where} = ?", (arg,)).fetchone()[0]
    finally:
        con.close()


# ---------------------------------------------------------------- flags
# tap.case runs each case where it is defined, in this order.
@tap.case("ingest and serve refuse bad TLS flags and files, naming them, before anything is stored")
def bad_flags():
    cases = [
        (["--tls-cert", P("server.pem")], 2, "--tls-cert needs --tls-key"),
        (["--tls-key", P("server.key")], 2, "--tls-key needs --tls-cert"),
        (["--tls-cert", P("server.pem"), "--tls-key", P("server.key"), "--insecure-plaintext"], 2,
         "--insecure-plaintext and --tls-cert"),
        (["--tls-cert", P("missing.pem"), "--tls-key", P("server.key")], 1, "missing.pem: cannot read"),
        (["--tls-cert", P("garbage.pem"), "--tls-key", P("server.key")], 1, "not a PEM certificate"),
        (["--tls-cert", P("server.pem"), "--tls-key", P("notakey.key")], 1, "not a PEM private key"),
        (["--tls-cert", P("server.pem"), "--tls-key", P("otherhost.key")], 1, "does not match the certificate"),
        (["--tls-cert", P("server.pem"), "--tls-key", P("open.key")], 1, "every user may read the private key"),
    ]
    for args, code, msg in cases:
        for cmd in ("ingest", "serve"):
            p = run(cmd, "--listen", "127.0.0.1:0", "--store", f"sqlite:{db}", "--secret", secret, *args) \
                if cmd == "ingest" else run(cmd, "--listen", "127.0.0.1:0", "--secret", secret, *args)
            tap.ok(p.returncode == code and msg in p.stderr, f"{cmd} {' '.join(os.path.basename(a) for a in args)}: "
                   f"exit {code}, '{msg}'", f"rc {p.returncode}: {p.stderr}")
    tap.ok(not os.path.exists(db), "no store was made by a refused start", db)


@tap.case("a plain listener off loopback is refused without --insecure-plaintext")
def plain_off_loopback():
    for cmd, args in (("ingest", ["--listen", "0.0.0.0:0"]),
                      ("ingest", ["--listen", "127.0.0.1:0", "--metrics-listen", "0.0.0.0:0"]),
                      ("serve", ["--listen", "0.0.0.0:0", "--secret", secret])):
        p = run(cmd, *args, "--store", f"sqlite:{db}") if cmd == "ingest" else run(cmd, *args)
        flag = args[-2] if cmd == "ingest" else "--listen"
        tap.ok(p.returncode == 2 and f"{flag} 0.0.0.0: not a loopback address, and no TLS" in p.stderr and
               "--insecure-plaintext" in p.stderr, f"{cmd} {' '.join(args)}: refused, naming {flag} and the way out",
               f"rc {p.returncode}: {p.stderr}")


@tap.case("off loopback (a network namespace's 10.9.9.1): TLS starts; plain only with --insecure-plaintext, loudly")
def netns_listeners():
    ns = ["unshare", "-n", "sh", "-c", 'ip link set lo up && ip addr add 10.9.9.1/32 dev lo && exec "$@"', "sh"]
    s = Server("--listen", "10.9.9.1:0", "--store", f"sqlite:{os.path.join(env.root, 'ns.db')}", "--secret", secret,
               "--tls-cert", P("server.pem"), "--tls-key", P("server.key"), prefix=ns)
    tap.ok(s.line.startswith("listening on wss://10.9.9.1:"), "with TLS: listening on wss://10.9.9.1", s.line + s.stderr())
    s.stop()
    s = Server("--listen", "10.9.9.1:0", "--store", f"sqlite:{os.path.join(env.root, 'ns.db')}", "--secret", secret,
               "--insecure-plaintext", prefix=ns)
    tap.ok(s.line.startswith("listening on ws://10.9.9.1:"), "--insecure-plaintext: listening on ws://10.9.9.1",
           s.line + s.stderr())
    s.stop()
    tap.ok("warning: --listen 10.9.9.1 without TLS (--insecure-plaintext)" in s.stderr(),
           "and it says so on stderr", s.stderr())



# ---------------------------------------------------------------- the TLS ingest
ing = ingest("--tls-cert", P("server.pem"), "--tls-key", P("server.key"), "--metrics-listen", "127.0.0.1:0")
tap.ok(ing.line == f"listening on wss://127.0.0.1:{ing.port}", "the ingest listens on wss://", ing.line + ing.stderr())
metrics_line = ing.proc.stdout.readline().strip()
other = ingest("--tls-cert", P("otherhost.pem"), "--tls-key", P("otherhost.key"))
https = f"https://127.0.0.1:{ing.port}"
wss = f"wss://127.0.0.1:{ing.port}"


@tap.case("https with the CA answers; without it, or in plain HTTP, nothing does")
def https_basics():
    code, body = https_get(https + "/healthz")
    tap.ok(code == 200 and '"ok":true' in body, "GET /healthz over https with the CA: 200", f"{code} {body}")
    code, body = https_get(https + "/healthz", ca=None)
    tap.ok(code is None and "CERTIFICATE_VERIFY_FAILED" in body, "without the CA: certificate verify failed",
           f"{code} {body}")
    s = socket.create_connection(("127.0.0.1", ing.port), timeout=T)
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    try:
        got = s.recv(4096)
    except ConnectionResetError:
        got = b""
    s.close()
    tap.ok(not got.startswith(b"HTTP/"), "a plain HTTP request to the TLS port gets no HTTP answer", repr(got[:80]))
    m = re.match(r"metrics on https://127\.0\.0\.1:(\d+)/metrics$", metrics_line)
    code, body = https_get(f"https://127.0.0.1:{m.group(1)}/metrics") if m else (None, metrics_line)
    tap.ok(code == 200 and "sandglass_ingest" in body, "--metrics-listen speaks https too", f"{code} {body[:300]}")


sid = ""


@tap.case("a sandbox created with --ingest wss:// --ingest-ca streams its events over TLS")
def capture_over_tls():
    global sid
    p = env.run("create", "--learner", "lt", "--task", "tls", "--ingest", wss, "--ingest-ca", P("ca.pem"),
                "--secret", secret)
    sid = p.stdout.decode().strip()
    if not tap.ok(p.returncode == 0 and sid, "create --ingest wss:// --ingest-ca ca.pem", p.stderr.decode()):
        return
    with open(os.path.join(env.state, "sb", sid, "meta.json")) as f:
        meta = json.load(f)
    tap.eq(meta.get("ingest_ca"), P("ca.pem"), "its record carries the CA file, absolute, for the uplink daemon")
    for i in range(3):
        r = env.sh(sid, f"echo tls-mark-{i}")
        tap.ok(r.returncode == 0 and f"tls-mark-{i}" in r.stdout.decode(), f"exec {i} runs", r.stderr.decode())

    def arrived() -> bool:
        q = run("events", "--ingest", https, "--ingest-ca", P("ca.pem"), "--secret", secret, "--sandbox", sid,
                "--json")
        return q.returncode == 0 and all(f"echo tls-mark-{i}" in q.stdout for i in range(3))
    await_true(arrived, "every command is in the store, read back over https by events",
               diag=lambda: run("events", "--ingest", https, "--ingest-ca", P("ca.pem"), "--secret", secret,
                           "--sandbox", sid).stdout[-2000:])
    q = run("events", "--ingest", https, "--secret", secret, "--sandbox", sid,
            extra={"SANDGLASS_INGEST_CA": P("ca.pem")})
    tap.ok(q.returncode == 0 and "tls-mark-0" in q.stdout, "SANDGLASS_INGEST_CA gives events the CA too",
           q.stderr)
    q = run("events", "--ingest", https, "--secret", secret, extra={"SANDGLASS_INGEST_CA": "ca.pem"})
    tap.ok(q.returncode != 0 and "SANDGLASS_INGEST_CA: 'ca.pem' is not an absolute path" in q.stderr,
           "a relative SANDGLASS_INGEST_CA is refused, naming it", q.stderr)




@tap.case("clients without the CA, with another CA, or facing another host's certificate are refused")
def refusals():
    ls_before = len(env.ls())
    for args, why, what in (
        ([], "unable to get local issuer certificate", "create without the CA"),
        (["--ingest-ca", P("otherca.pem")], "not signed by the CAs of --ingest-ca", "create with another CA"),
    ):
        p = env.run("create", "--learner", "lt", "--task", "noca", "--ingest", wss, "--secret", secret, *args)
        err = p.stderr.decode()
        tap.ok(p.returncode == 1 and "certificate verify failed" in err and why in err,
               f"{what}: refused, certificate verify failed", f"rc {p.returncode}: {err}")
    p = env.run("create", "--learner", "lt", "--task", "noca", "--ingest", f"wss://127.0.0.1:{other.port}",
                "--ingest-ca", P("ca.pem"), "--secret", secret)
    err = p.stderr.decode()
    tap.ok(p.returncode == 1 and "IP address mismatch" in err and "for another host" in err,
           "create against a certificate for another host: refused", f"rc {p.returncode}: {err}")
    tap.eq(len(env.ls()), ls_before, "no sandbox was made by the refused creates")
    tap.eq(stored("task", "noca"), 0, "and nothing of theirs is stored")
    p = env.run("create", "--learner", "lt", "--task", "noca", "--ingest", wss, "--ingest-ca", P("garbage.pem"))
    tap.ok(p.returncode == 2 and "no PEM certificate" in p.stderr.decode(), "create --ingest-ca with no certificate "
           "in it: a usage error", p.stderr.decode())
    p = env.run("create", "--learner", "lt", "--ingest-ca", P("ca.pem"))
    tap.ok(p.returncode == 2 and "go with --task" in p.stderr.decode(), "--ingest-ca without --task: refused",
           p.stderr.decode())
    for args, msg, what in (
        (["--ingest", https], "certificate verify failed: unable to get local issuer certificate",
         "events without the CA"),
        (["--ingest", f"https://127.0.0.1:{other.port}", "--ingest-ca", P("ca.pem")],
         "certificate verify failed: IP address mismatch", "events against another host's certificate"),
        (["--ingest", f"http://127.0.0.1:{ing.port}"], "(a TLS port? then use https:// or wss://)",
         "events in plain http:// to the TLS port"),
        (["--ingest", https, "--ingest-ca", P("garbage.pem")], "no PEM certificate", "events with a CA file "
         "that holds none"),
    ):
        q = run("events", *args, "--secret", secret)
        tap.ok(q.returncode != 0 and msg in q.stderr, f"{what}: refused, saying so", f"rc {q.returncode}: {q.stderr}")




@tap.case("the uplink (flush of an undelivered spool) verifies the ingest as create does, and delivers with the CA")
def uplink_tls():
    dead = refused_port()
    dead_url = f"wss://127.0.0.1:{dead.getsockname()[1]}"
    p = env.run("create", "--learner", "lu", "--task", "flush", "--ingest", dead_url, "--ingest-ca", P("ca.pem"),
                "--secret", secret)
    fid = p.stdout.decode().strip()
    if not tap.ok(p.returncode == 0 and fid, "create towards an ingest that is down (a warning only)",
                  p.stderr.decode()):
        return
    env.sh(fid, "echo flush-mark")
    d = env.run("destroy", fid, timeout=T)
    undelivered = os.path.join(env.state, "undelivered", fid)
    tap.ok(d.returncode == 0 and os.path.isdir(undelivered), "destroy keeps the spool it could not deliver",
           d.stderr.decode())
    for args, msg, what in (
        (["--ingest", wss], "TLS: certificate verify failed: unable to get local issuer certificate",
         "without the CA"),
        (["--ingest", f"wss://127.0.0.1:{other.port}", "--ingest-ca", P("ca.pem")],
         "certificate verify failed: IP address mismatch (the certificate is for another host)",
         "facing another host's certificate"),
        (["--ingest", f"ws://127.0.0.1:{ing.port}"], "before the WebSocket handshake (a TLS port? then use wss://)",
         "in plain ws:// to the TLS port"),
    ):
        f = env.run("flush", "--timeout", "3", *args, fid, timeout=T)
        err = f.stderr.decode()
        tap.ok(f.returncode == 1 and msg in err and os.path.isdir(undelivered), f"flush {what}: refused, kept",
               f"rc {f.returncode}: {err}")
    tap.eq(stored("sandbox", fid), 0, "nothing of it is stored")
    f = env.run("flush", "--ingest", f"wss://localhost:{ing.port}", "--ingest-ca", P("ca.pem"), fid, timeout=T)
    tap.ok(f.returncode == 0 and "events delivered" in f.stdout.decode(),
           "flush --ingest wss://localhost (a DNS name) --ingest-ca: delivered", f.stderr.decode())
    q = run("events", "--ingest", https, "--ingest-ca", P("ca.pem"), "--secret", secret, "--sandbox", fid)
    tap.ok("flush-mark" in q.stdout, "and its events are in the store", q.stdout[-1500:] + q.stderr)
    dead.close()




@tap.case("serve speaks https: its page over TLS with the CA")
def serve_tls():
    s = Server("--listen", "127.0.0.1:0", "--secret", secret, "--tls-cert", P("server.pem"), "--tls-key",
               P("server.key"), cmd="serve")
    tap.ok(s.line == f"serving terminals on https://127.0.0.1:{s.port}/", "serve says https://", s.line + s.stderr())
    code, body = https_get(f"https://127.0.0.1:{s.port}/")
    tap.ok(code == 200 and "<html" in body.lower(), "its page over https with the CA", f"{code} {body[:200]}")
    code, body = https_get(f"https://127.0.0.1:{s.port}/", ca=P("otherca.pem"))
    tap.ok(code is None and "CERTIFICATE_VERIFY_FAILED" in body, "with another CA: certificate verify failed",
           f"{code} {body}")
    s.stop()


if sid:
    d = env.run("destroy", sid, timeout=T)
    tap.ok(d.returncode == 0 and not d.stderr.decode().strip(), "the TLS sandbox is destroyed with its spool "
           "delivered", d.stderr.decode())
for s in (ing, other):
    s.stop()
    tap.ok(s.proc.returncode == 0, "an ingest stops cleanly", s.stderr()[-1500:])
tap.done()
