#!/usr/bin/env python3
"""Issue 25, "Tokens can be revoked (by id, checked on every node)": the
tokens `sandglass serve` checks (terminal, watch, action) are revoked
too. serve has no store: with --ingest it asks the ingest for the store's
revoked ids (GET /v1/revoked, an operator read token it makes for the one
request) every --revoked-poll seconds and at SIGHUP. Checked with a real
ingest, a real serve and real WebSocket clients: a revoked terminal
token's open terminal is closed (1008, saying why) and the token refused
from then on, a revoked watch token's watcher likewise while the learner's
terminal goes on, other tokens untouched; with the ingest down the last
list stays in force; /v1/revoked answers an operator's read token only.
Every wait is for a condition; the poll is 1 s so that the waits are
short, never a bound that is asserted."""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "adversarial"))
from serve_common import WS, key_file, open_terminal, start_serve  # noqa: E402
from sgtest import SANDGLASSD, Env, tap, wait_for  # noqa: E402
from test_hosts import mint, post  # noqa: E402


def tid(tok: str) -> str:
    return hashlib.sha256(tok.encode()).hexdigest()[:16]


env = Env()
secret = key_file(os.path.join(env.root, "secret"), "cd")
db = os.path.join(env.root, "events.db")


def start_ingest(port: int = 0) -> tuple[subprocess.Popen, str]:
    p = subprocess.Popen([SANDGLASSD, "ingest", "--listen", f"127.0.0.1:{port}", "--store", f"sqlite:{db}",
                          "--secret", secret], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env.env,
                         text=True)
    env.procs.append(p)
    return p, p.stdout.readline().strip().split(" ")[-1].rstrip("/")


ingest, ingest_url = start_ingest()
ingest_http = ingest_url.replace("ws://", "http://")
serve, port = start_serve(env, secret, "--ingest", ingest_http, "--revoked-poll", "1")
sid = env.create("--task", "revoked", "--ingest", ingest_url, "--secret", secret)


def token(*kind: str) -> str:
    return env.run("token", "--secret", secret, *kind, check=True).stdout.decode().strip()


def revoke(tok: str) -> subprocess.CompletedProcess:
    return env.run("token", "revoke", tid(tok), "--ingest", ingest_http, "--secret", secret)


def get(path: str, tok: str | None) -> tuple[int, dict]:
    req = urllib.request.Request(ingest_http + path, headers={"Authorization": f"Bearer {tok}"} if tok else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def serve_log() -> str:
    with open(os.path.join(env.root, "serve.log"), errors="replace") as f:
        return f.read()


def closed_with(ws: WS, code: int, why: str) -> bool:
    return ws.wait(lambda w: w.close_code is not None, 60) and ws.close_code == code and why in ws.close_reason


def refused(tok: str, why: str, name: str) -> None:
    ws = WS(port)
    ws.auth(tok)
    tap.ok(closed_with(ws, 1008, why), name, f"{ws.close_code} {ws.close_reason!r}")
    ws.close()


def revoked_closes(tok: str, name: str, ws: WS, what: str) -> None:
    """Revoking tok closes the open ws it let in, and tok opens no more."""
    p = revoke(tok)
    tap.ok(p.returncode == 0, f"sandglass token revoke ({name})", p.stderr.decode()[-300:])
    why = f"token revoked (id {tid(tok)})"
    tap.ok(closed_with(ws, 1008, why), f"the open {what} of {name} is closed (1008), saying why",
           f"{ws.close_code} {ws.close_reason!r}")
    refused(tok, why, f"{name}, revoked, opens no {what} any more")


def watch(tok: str, seen: bytes, name: str) -> WS:
    """A watcher of the open terminal, which has shown seen."""
    ws = WS(port)
    ws.auth(tok)
    tap.ok(ws.wait(lambda w: seen in w.output, 60), f"a watcher opens with {name}",
           f"{ws.close_code} {ws.close_reason!r}")
    return ws


# Two of a kind differ by their lifetimes (two made within a second with
# the same claims would be the same token, with the same id).
term_a, term_b = token("--terminal", "--sandbox", sid), token("--terminal", "--sandbox", sid, "--ttl", "2h")
watch_a, watch_b = token("--watch", "--sandbox", sid), token("--watch", "--sandbox", sid, "--ttl", "2h")
assert len({tid(term_a), tid(term_b), tid(watch_a), tid(watch_b)}) == 4
op = token("--read")
try:
    # /v1/revoked: an operator's read token only, the ids in order.
    st, body = get("/v1/revoked", op)
    tap.ok(st == 200 and body == {"revoked": []}, "GET /v1/revoked: an empty list at first", f"{st} {body}")
    for why, tok, want in [("no token", None, 401), ("a scoped read token", token("--read", "--sandbox", sid), 403),
                           ("a terminal token", term_a, 401)]:
        st, body = get("/v1/revoked", tok)
        tap.ok(st == want and body.get("error"), f"/v1/revoked with {why}: {want}, saying why", f"{st} {body}")
    tap.ok(wait_for(lambda: "revoked tokens: 0, from the ingest at" in serve_log(), 60),
           "serve reads the (empty) list from the ingest at start", serve_log()[-600:])

    learner, why = open_terminal(port, term_a)
    tap.ok(learner is not None and not why, "a terminal opens with token A", why)
    other, why = open_terminal(port, term_b)
    tap.ok(other is not None and not why, "a second terminal opens with token B", why)

    revoked_closes(term_a, "terminal token A", learner, "terminal")
    other.binary(b"echo still-$((3*3))\r")
    tap.ok(other.wait(lambda w: b"still-9" in w.output, 60) and other.close_code is None,
           "the terminal of token B goes on", f"{other.close_code} {other.close_reason!r}")

    watcher = watch(watch_a, b"still-9", "watch token A")
    revoked_closes(watch_a, "watch token A", watcher, "watch")
    other.binary(b"echo after-watch-$((4*4))\r")
    tap.ok(other.wait(lambda w: b"after-watch-16" in w.output, 60) and other.close_code is None,
           "the learner's terminal goes on while its watcher is closed")
    watch(watch_b, b"after-watch-16", "watch token B").close()

    st, body = get("/v1/revoked", op)
    tap.ok(st == 200 and body.get("revoked") == sorted([tid(term_a), tid(watch_a)]),
           "GET /v1/revoked lists both ids, in order", f"{st} {body}")

    # The ingest goes down: the last list stays in force, B still works.
    ingest_port = int(ingest_http.rsplit(":", 1)[1])
    ingest.send_signal(signal.SIGTERM)
    tap.eq(ingest.wait(timeout=60), 0, "the ingest stops")
    tap.ok(wait_for(lambda: "cannot read the revoked tokens from the ingest" in serve_log(), 60),
           "serve says it cannot read the list, and keeps the last one", serve_log()[-600:])
    tap.ok("the last list, 2 ids, stays in force" in serve_log(), "... naming how many ids stay in force",
           serve_log()[-600:])
    refused(term_a, "token revoked", "with the ingest down the revoked terminal token is still refused")
    third, why = open_terminal(port, term_b)
    tap.ok(third is not None and not why, "and token B still opens a terminal", why)

    # The ingest back on its port: the serve reads the list again at SIGHUP.
    ingest, _ = start_ingest(ingest_port)
    serve.send_signal(signal.SIGHUP)
    tap.ok(wait_for(lambda: serve_log().count("revoked tokens: 2, from the ingest at") >= 1, 60),
           "the ingest back: serve reads its list again, and says so", serve_log()[-600:])

    # An action token (another host's abort through this serve) revoked
    # before its use is refused by serve's POST; unrevoked, it would abort.
    atok = mint(secret, {"a": "abort", "s": sid, "n": secrets.token_hex(16), "exp": int(time.time()) + 50})
    p = revoke(atok)
    tap.ok(p.returncode == 0, "sandglass token revoke (an action token)", p.stderr.decode()[-300:])
    tap.ok(wait_for(lambda: "revoked tokens: 3 (were 2)" in serve_log(), 60), "serve takes the new list",
           serve_log()[-600:])
    st, ans = post(port, atok, json.dumps({"sandbox": sid}).encode(), path="/v1/abort")
    tap.ok(st == 401 and f"token revoked (id {tid(atok)})" in ans.get("error", ""),
           "the revoked action token is refused (401), saying why", f"{st} {ans}")
    tap.ok(any(s["id"] == sid and s.get("state") == "running" for s in env.ls()), "the sandbox was not aborted",
           repr(env.ls()))

    for ws in (other, third):
        ws.close()
finally:
    serve.terminate()
    tap.eq(serve.wait(timeout=60), 0, "serve stops cleanly")
    p = subprocess.run([SANDGLASSD, "serve", "--revoked-poll", "0"], capture_output=True, env=env.env)
    tap.ok(p.returncode == 2 and b"--revoked-poll: seconds, 1..3600" in p.stderr, "--revoked-poll 0 is refused",
           p.stderr.decode()[-200:])
    e2 = dict(env.env)
    e2.pop("SANDGLASS_INGEST", None)
    p = subprocess.run([SANDGLASSD, "serve", "--ingest-ca", "/dev/null"], capture_output=True, env=e2)
    tap.ok(p.returncode == 2 and b"--ingest-ca needs an ingest" in p.stderr, "--ingest-ca without an ingest is refused",
           p.stderr.decode()[-200:])
    env.cleanup()
tap.done()
