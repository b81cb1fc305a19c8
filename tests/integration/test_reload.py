#!/usr/bin/env python3
"""Issue 26: a unit-started ingest (and serve) reloads its secret on SIGHUP
(`systemctl reload`), and logs what it refuses and why.

A real `sandglassd ingest` on loopback with its own secret and metrics token
files, real tokens from `sandglass token`, real WebSocket and HTTP clients:
- a bad secret file (malformed, readable by others, missing) or metrics
  token file on SIGHUP keeps the old one, logs an error, and the ingest goes
  on: the open stream still stores, an old token still connects;
- the same secret read again changes nothing;
- a replaced secret: tokens of the old one are refused (handshake, reads),
  the open stream it let in is closed (1008, saying why), a /v1/stream
  subscriber gets its `revoked` notice, and tokens of the new secret work
  (the stream resumes where it was); the new metrics token scrapes, the old
  one is refused;
- each refusal is one log line with the peer's address and why; a line at
  start and stop; --log-level error keeps info lines (and every
  libwebsockets line) off stderr; a bad level is a usage error naming it;
- `sandglassd serve` the same: a bad file keeps the secret; a replaced one
  refuses the old tokens, closes the terminal one of them opened, and
  takes the new one's;
- a running captured sandbox after a rotation: its capture is refused and
  kept in its spool (ls: rejected) until its uplink daemon starts anew and
  signs its token with the new secret; then it is delivered.
TAP output."""
from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "adversarial"))
from ingest_common import (T, WS, HandshakeError, Ingest, connect, http, read_token,  # noqa: E402
                           run, token, wait_until)
from sgtest import Env, hermetic_env, stop_uplink_daemon, tap  # noqa: E402

BIN = os.environ.get("SANDGLASSD_BIN", "sandglassd")

root = tempfile.mkdtemp(prefix="sg-reload-", dir=os.environ.get("SG_TEST_ROOT") or None)
state = os.path.join(root, "state")
os.makedirs(state, mode=0o700)
secret = os.path.join(root, "secret")
mtok = os.path.join(root, "metrics-token")
_hermetic = hermetic_env()  # no config file, no SANDGLASS_* default of the caller's
os.environ.clear()
os.environ.update(_hermetic)


def write(path: str, text: str, mode: int = 0o600) -> None:
    """Replaces path whole (a new inode, as an operator's `install -m 600`)."""
    tmp = path + ".new"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode), "w") as f:
        f.write(text)
    os.chmod(tmp, mode)
    os.rename(tmp, path)


def log_lines(ing, since: int) -> list[str]:
    return ing.stderr[since:]


def hup_and_wait(ing, want: str) -> list[str]:
    """SIGHUP, then the log lines up to the one that says want."""
    since = len(ing.stderr)
    ing.proc.send_signal(signal.SIGHUP)
    ok = wait_until(lambda: any(want in ln for ln in log_lines(ing, since)), timeout=T)
    lines = log_lines(ing, since)
    if not ok:
        tap.ok(False, f"after SIGHUP the log says '{want}'", "".join(lines[-20:]))
    return lines


def scrape(port: int, tok: str | None) -> int:
    s = socket.create_connection(("127.0.0.1", port), timeout=T)
    req = f"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
    if tok:
        req += f"Authorization: Bearer {tok}\r\n"
    s.sendall((req + "\r\n").encode())
    data = b""
    while b"\r\n" not in data:
        c = s.recv(4096)
        if not c:
            break
        data += c
    s.close()
    try:
        return int(data.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def sse_open(port: int, tok: str) -> tuple[socket.socket, bytes]:
    """GET /v1/stream (a subscriber), its answer's head read."""
    s = socket.create_connection(("127.0.0.1", port), timeout=T)
    s.sendall(f"GET /v1/stream HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {tok}\r\n\r\n".encode())
    head = b""
    deadline = time.monotonic() + T
    while b"\r\n\r\n" not in head and time.monotonic() < deadline:
        c = s.recv(4096)
        if not c:
            break
        head += c
    return s, head


def sse_read_until(s: socket.socket, data: bytes, want: bytes) -> bytes:
    deadline = time.monotonic() + T
    while want not in data and time.monotonic() < deadline:
        s.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            c = s.recv(65536)
        except (TimeoutError, OSError):
            break
        if not c:
            break
        data += c
    return data


def _at_exit() -> None:
    """Whatever raised: the ingests this file started end, its files go."""
    for i in Ingest.started:
        if i.proc.poll() is None:
            i.proc.kill()
            i.proc.wait()
    shutil.rmtree(root, ignore_errors=True)


atexit.register(_at_exit)
write(secret, os.urandom(32).hex() + "\n")
write(mtok, "metrics-one\n")
ing = Ingest(state, extra=("--secret", secret, "--metrics-token", mtok))
alive = lambda: ing.proc.poll() is None  # noqa: E731

tap.ok(wait_until(lambda: any("started (sandglass" in ln and "listening on 127.0.0.1:" in ln for ln in ing.stderr)),
       "the ingest logs a line when it starts", "".join(ing.stderr[-10:]))

# A sandbox of this host captured into this ingest: its uplink daemon signs
# its stream token with the secret file when the supervisor says hello.
env = Env()
sid = env.create("--task", "t-cap", "--ingest", f"ws://127.0.0.1:{ing.port}", "--secret", secret)


def stored(marker: str) -> bool:
    code, body = http(ing.port, f"/v1/events?sandbox={sid}", read_token(state, secret=secret))
    return code == 200 and marker in json.dumps(body)


p = env.sh(sid, "echo before-$((6 * 7))")
tap.ok(p.returncode == 0 and wait_until(lambda: stored("before-42"), timeout=T),
       "a captured sandbox's events reach the ingest", p.stderr.decode()[-500:])

tok_old = token(state, "alice", "t1", "sb-reload", secret=secret)
rtok_old = read_token(state, secret=secret)
a = connect(ing, tok_old)
tap.eq(a.wait_ack(None), -1, "a stream opens with a token of the first secret")
a.send_event(0)
tap.eq(a.wait_ack(0), 0, "and stores")
sub, sub_head = sse_open(ing.port, rtok_old)
tap.ok(b" 200 " in sub_head.split(b"\r\n", 1)[0], "a /v1/stream subscriber opens with a read token of it",
       sub_head[:300].decode("latin-1"))
tap.eq(scrape(ing.port, "metrics-one"), 200, "a scrape with the metrics token is answered")

# --- bad files: the old secret and metrics token are kept
good = open(secret).read()
bad_cases = (("not hex at all\n", 0o600, "a malformed secret"),
             (good, 0o644, "a secret readable by every user"),
             (None, 0, "a missing secret"))
for text, mode, what in bad_cases:
    if text is None:
        os.unlink(secret)
    else:
        write(secret, text, mode)
    lines = hup_and_wait(ing, "the old secret is kept")
    tap.ok(any(" error ingest: reload: the secret" in ln and "the old secret is kept" in ln for ln in lines),
           f"SIGHUP with {what}: an error is logged and the old secret kept", "".join(lines[-10:]))
    n = 1 + bad_cases.index((text, mode, what))
    a.send_event(n)
    tap.eq(a.wait_ack(n), n, f"the open stream still stores ({what})")
    b = connect(ing, tok_old)
    tap.eq(b.wait_ack(None), n, f"a token of the old secret still connects ({what})")
    b.close()
write(secret, good)
write(mtok, "")
lines = hup_and_wait(ing, "old metrics token is kept")
tap.ok(any("the secret" in ln and "is unchanged" in ln for ln in lines),
       "the same secret read again: logged as unchanged", "".join(lines[-10:]))
tap.ok(any(" error ingest: reload: --metrics-token" in ln and "old metrics token is kept" in ln for ln in lines),
       "an empty metrics token file: an error is logged, the old token kept", "".join(lines[-10:]))
tap.eq(scrape(ing.port, "metrics-one"), 200, "the old metrics token still scrapes")
a.send_event(4)
tap.eq(a.wait_ack(4), 4, "the open stream still stores after the same secret is read again")
tap.ok(alive(), "the ingest is still running after every bad reload")

# --- the secret replaced
write(secret, os.urandom(32).hex() + "\n")
write(mtok, "metrics-two\n")
lines = hup_and_wait(ing, "was replaced")
tap.ok(any(" warn ingest: reload: the secret" in ln and "was replaced" in ln for ln in lines),
       "SIGHUP with a new secret: logged", "".join(lines[-10:]))
code = a.wait_close()
tap.ok(code == 1008 and "secret was replaced" in (a.close_reason or ""),
       "the stream a token of the old secret opened is closed (1008, saying why)",
       f"{code} {getattr(a, 'close_reason', None)!r}")
data = sse_read_until(sub, sub_head, b"event: revoked")
tap.ok(b"event: revoked" in data and b"secret was replaced" in data,
       "the /v1/stream subscriber of an old read token gets its revoked notice", data[-400:].decode("latin-1"))
sub.close()
try:
    connect(ing, tok_old).close()
    refused = None
except HandshakeError as e:
    refused = e
tap.ok(refused is not None and refused.status == 401, "a token of the old secret is refused (401)",
       refused and refused.body)
code, body = http(ing.port, "/v1/events?sandbox=sb-reload", rtok_old)
tap.eq(code, 401, "a read token of the old secret is refused (401)")
tok_new = token(state, "alice", "t1", "sb-reload", secret=secret)
c = connect(ing, tok_new)
tap.eq(c.wait_ack(None), 4, "a token of the new secret connects, where the stream was")
c.send_event(5)
tap.eq(c.wait_ack(5), 5, "and stores")
c.close()
code, body = http(ing.port, "/v1/events?sandbox=sb-reload", read_token(state, secret=secret))
tap.ok(code == 200 and [e["seq"] for e in body["events"]] == list(range(6)),
       "a read token of the new secret reads every event, each once", f"{code} {body}")
tap.eq(scrape(ing.port, "metrics-one"), 401, "the old metrics token is refused")
tap.eq(scrape(ing.port, "metrics-two"), 200, "the new metrics token scrapes")
# The running sandbox: its stream was closed and its old token is refused,
# so its new events stay in its spool (ls: rejected) until its uplink daemon
# starts anew and signs its token with the new secret (docs/DEPLOY.md).
p = env.sh(sid, "echo after-$((6 * 7))")
tap.eq(p.returncode, 0, "the sandbox runs a command after the rotation")


def uplink_state() -> str:
    q = env.run("ls", "--json")
    try:
        rows = json.loads(q.stdout)
        rows = rows.get("sandboxes", rows) if isinstance(rows, dict) else rows
        return next((r.get("uplink") or {}).get("state", "") for r in rows if r.get("id") == sid)
    except (ValueError, StopIteration, AttributeError):
        return ""


tap.ok(wait_until(lambda: uplink_state() == "rejected", timeout=T) and not stored("after-42"),
       "its capture is refused with its old token (ls: rejected) and kept in its spool", uplink_state())
stop_uplink_daemon(env.state)
tap.ok(wait_until(lambda: stored("after-42"), timeout=T),
       "once its uplink daemon starts anew (the supervisor starts it), its spool is delivered with the new secret",
       uplink_state())
tap.ok(wait_until(lambda: uplink_state() == "connected", timeout=T), "and ls says connected", uplink_state())
log = "".join(ing.stderr)
tap.ok("info ingest: refused a WebSocket from 127.0.0.1 (401):" in log,
       "the refused handshake is logged with the peer's address and why", log[-2000:])
tap.ok("info ingest: refused a read from 127.0.0.1 (401):" in log, "the refused read is logged", log[-2000:])
tap.ok("info ingest: refused a scrape of /metrics from 127.0.0.1 (401): wrong metrics token" in log,
       "the refused scrape is logged", log[-2000:])
tap.ok("closed a stream from 127.0.0.1 (1008)" in log, "the closed stream is logged", log[-2000:])
tap.eq(ing.stop(), 0, "SIGTERM: the ingest stops cleanly")
ing.drain.join(T)
tap.ok(ing.stderr and " info ingest: stopped" in ing.stderr[-1], "its last line says it stopped",
       "".join(ing.stderr[-5:]))
tap.ok(not [ln for ln in ing.stderr if "lws:" in ln], "no libwebsockets line at level info",
       "".join(ln for ln in ing.stderr if "lws:" in ln)[:2000])
san = [ln for ln in ing.stderr if "Sanitizer" in ln or "runtime error:" in ln]
tap.ok(not san, "no sanitizer report from the ingest", "".join(san[:20]))

# --- --log-level
p = subprocess.run([BIN, "ingest", "--log-level", "loud"], capture_output=True, text=True, timeout=T,
                   env=dict(os.environ, SANDGLASS_STATE_DIR=state))
tap.ok(p.returncode == 2 and "--log-level 'loud'" in p.stderr, "a bad --log-level is a usage error naming it",
       p.stderr)
p = subprocess.run([BIN, "serve", "--log-level", "verbose"], capture_output=True, text=True, timeout=T,
                   env=dict(os.environ, SANDGLASS_STATE_DIR=state))
tap.ok(p.returncode == 2 and "--log-level 'verbose'" in p.stderr, "serve: a bad --log-level is a usage error",
       p.stderr)
quiet = Ingest(state, extra=("--secret", secret, "--log-level", "ERROR"))
try:
    connect(quiet, tok_old).close()
except HandshakeError:
    pass
tap.eq(quiet.stop(), 0, "an ingest at --log-level error stops cleanly")
quiet.drain.join(T)
tap.eq([ln for ln in quiet.stderr if "Sanitizer" not in ln], [],
       "at --log-level error nothing is logged (no start line, refusal or lws line)")

loud = Ingest(state, extra=("--secret", secret, "--log-level", "debug"))
tap.eq(loud.stop(), 0, "an ingest at --log-level debug stops cleanly")
loud.drain.join(T)
tap.ok(any(" ingest: lws: " in ln for ln in loud.stderr),
       "at --log-level debug libwebsockets' own lines are passed on", "".join(loud.stderr[:20]))

over = Ingest(state, extra=("--secret", secret, "--log-level", "info"), env={"SANDGLASS_LOG_LEVEL": "error"})
tap.eq(over.stop(), 0, "an ingest with SANDGLASS_LOG_LEVEL=error and --log-level info stops cleanly")
over.drain.join(T)
tap.ok(any(" info ingest: started" in ln for ln in over.stderr), "--log-level wins over SANDGLASS_LOG_LEVEL",
       "".join(over.stderr[:20]))

# --- serve: the captured sandbox of this host (a terminal token names its
# task; its ingest is stopped now: what the terminal records stays spooled)
serve_env = dict(env.env)
errlog = open(os.path.join(root, "serve.log"), "w+")
srv = subprocess.Popen([BIN, "serve", "--listen", "127.0.0.1:0", "--secret", secret], stdout=subprocess.PIPE,
                       stderr=errlog, env=serve_env, text=True)
env.procs.append(srv)
line = srv.stdout.readline()
tap.ok(line.startswith("serving terminals on http://127.0.0.1:"), "serve starts", line)
sport = int(line.strip().rstrip("/").rsplit(":", 1)[1]) if line.startswith("serving") else 0


def serve_log() -> str:
    errlog.flush()
    return open(errlog.name).read()


def serve_hup(want: str) -> bool:
    n = len(serve_log())
    srv.send_signal(signal.SIGHUP)
    return wait_until(lambda: want in serve_log()[n:], timeout=T)


def terminal_token() -> str:
    p = subprocess.run([BIN, "token", "--terminal", "--sandbox", sid, "--secret", secret], capture_output=True,
                       text=True, env=serve_env, timeout=T)
    return p.stdout.strip()


def serve_open(tok: str) -> tuple[WS, str]:
    """A terminal connection that sends tok: it, and the first message
    serve answers ({"error": ...} for a refusal, else the shell's)."""
    w = WS(sport, "/v1/terminal", headers={"Sec-WebSocket-Protocol": "sandglass-terminal"})
    w.send_text('{"token": "%s", "rows": 24, "cols": 80}' % tok)
    first = ""
    try:
        while True:
            op, payload = w.recv()
            if op in (0x1, 0x2):
                first = payload.decode("utf-8", "replace")
                break
            if op == 0x8:
                first = f"closed {w.close_code}: {w.close_reason}"
                break
    except (TimeoutError, OSError) as e:
        first = f"no answer: {e}"
    return w, first


tok_a = terminal_token()
w, first = serve_open(tok_a)
tap.ok(tok_a and '"error"' not in first and not first.startswith(("closed", "no answer")),
       "serve opens a terminal for a token of its secret", first)
good = open(secret).read()
write(secret, "garbage\n")
tap.ok(serve_hup("the old secret is kept") and srv.poll() is None,
       "serve: SIGHUP with a bad secret file logs an error and keeps serving", serve_log()[-1000:])
w2, first = serve_open(tok_a)
tap.ok('"error"' not in first and not first.startswith(("closed", "no answer")),
       "serve: the old secret is kept (its token still opens a terminal)", first)
w2.close()
write(secret, good)
tap.ok(serve_hup("is unchanged"), "serve: the same secret read again changes nothing", serve_log()[-1000:])
write(secret, os.urandom(32).hex() + "\n")
tap.ok(serve_hup("was replaced"), "serve: SIGHUP with a new secret is logged", serve_log()[-1000:])
code = w.wait_close()
tap.ok(code == 1008 and "secret was replaced" in (w.close_reason or ""),
       "serve: the terminal a token of the old secret opened is closed (1008, saying why)",
       f"{code} {getattr(w, 'close_reason', None)!r}")
w.close()
w3, first = serve_open(tok_a)
tap.ok('"error"' in first or first.startswith("closed 1008"), "serve: a token of the old secret is refused", first)
w3.close()
w4, first = serve_open(terminal_token())
tap.ok('"error"' not in first and not first.startswith(("closed", "no answer")),
       "serve: a token of the new secret opens a terminal", first)
w4.close()
tap.ok("closed the connection from 127.0.0.1" in serve_log(), "serve logs each refused connection with its peer",
       serve_log()[-1500:])
srv.terminate()
tap.eq(srv.wait(timeout=T), 0, "serve stops cleanly")
tap.ok(" info serve: stopped" in serve_log().strip().splitlines()[-1], "serve's last line says it stopped",
       serve_log()[-500:])
san = [ln for ln in serve_log().splitlines() if "Sanitizer" in ln or "runtime error:" in ln]
tap.ok(not san, "no sanitizer report from serve", "\n".join(san[:20]))
errlog.close()
tap.done()
