#!/usr/bin/env python3
"""Issue 25, tokens revoked by id without rotating the secret, checked on
every node: `sandglass token revoke ID|TOKEN` (a revoke token the secret
signs for that id only, GET /v1/revoke) records the token's id (the first
16 hex digits of its SHA-256) in the store's sg_revoked_tokens; from then
on the token gets 401 on reads, on /v1/stream (and an open stream of it is
ended with a `revoked` event: at once on the node that took the revoke,
at its next ping on another), and at the /v1/ingest handshake, on this
node and on a second node sharing the PostgreSQL store. Other tokens are
untouched; a read token cannot revoke; each read is logged with its
token's id, never the token. On SQLite, and on PostgreSQL (two nodes)
when its server binaries are here (else that part is skipped, said so).
Every wait is for a condition."""

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_ingest import HandshakeError, Ingest, check, check_sanitizers, connect, run, token  # noqa: E402
import test_ingest  # noqa: E402
from test_ingest_pg import PG, free_port, pg  # noqa: E402
from test_stream import SSE  # noqa: E402


def tid(tok):
    return hashlib.sha256(tok.encode()).hexdigest()[:16]


def revoke(state, what, ing):
    return run("token", "revoke", what, "--ingest", f"http://127.0.0.1:{ing.port}", state=state)


def refused_handshake(ing, tok):
    try:
        connect(ing, tok).close()
        return None
    except HandshakeError as e:
        return e


# The node that takes the revoke ends its streams of the token at once: its
# ping (the other way a stream ends) is an hour away, so only the revoke can
# end them within the wait. Another node's ping, short here, is its way.
NO_PING = {"SANDGLASS_STREAM_PING_MS": "3600000"}
FAST_PING = {"SANDGLASS_STREAM_PING_MS": "300"}


def stream_ended_revoked(s):
    """The open stream gets a `revoked` event, then its end."""
    saw = False
    try:
        while True:
            m = s.next(120)
            if m is None:
                return saw
            saw = saw or m["event"] == "revoked"
    except TimeoutError:
        return False


def scenario(where, state, nodes):
    a, b = nodes[0], nodes[-1]
    rtok = run("token", "--read", state=state).stdout.strip()
    other = run("token", "--read", "--learner", "ann", state=state).stdout.strip()
    stok = token(state, "ann", "t1", f"sb-{where}")
    ws = connect(a, stok)
    for seq in range(3):
        ws.send_event(seq, "command", {"cmd": f"echo {seq}"})
    ws.wait_ack(2)
    ws.close()
    q = f"/v1/events?sandbox=sb-{where}"
    check(f"{where}: before: the read token reads on every node",
          all(n.http(q, rtok)[0] == 200 for n in nodes))
    live = SSE(a.port, rtok, "after=0")
    check(f"{where}: before: its stream opens", live.status == 200, live.status)
    far = SSE(b.port, rtok, "after=0") if b is not a else None
    if far:
        check(f"{where}: before: its stream opens on node B too", far.status == 200, far.status)
    check(f"{where}: the read is logged with the token's id, not the token",
          test_ingest.wait_until(lambda: any(f"read /v1/events" in l and tid(rtok) in l for l in a.stderr), 30)
          and not any(rtok in l for l in a.stderr), "".join(a.stderr[-5:]))

    p = run("token", "revoke", tid(rtok), "--ingest", f"http://127.0.0.1:{a.port}", "--secret",
            os.path.join(state, "ingest", "secret"), state=state)
    check(f"{where}: sandglass token revoke ID: done", p.returncode == 0 and p.stdout.strip() == f"revoked {tid(rtok)}",
          p.stdout + p.stderr)
    for n, name in zip(nodes, ("node A", "node B")):
        st, body = n.http(q, rtok)
        check(f"{where}: {name}: the revoked token gets 401 on a read, saying so",
              st == 401 and "revoked" in (body or {}).get("error", ""), (st, body))
        st, _ = n.http("/v1/sessions", rtok)
        check(f"{where}: {name}: and on /v1/sessions", st == 401, st)
        s = SSE(n.port, rtok, "after=0")
        check(f"{where}: {name}: and on /v1/stream", s.status == 401 and "revoked" in s.body.get("error", ""),
              (s.status, s.body))
        check(f"{where}: {name}: another read token still reads", n.http(q, other)[0] == 200)
    check(f"{where}: its stream that was open is ended with a 'revoked' event by the revoke",
          stream_ended_revoked(live))
    live.close()
    if far:
        check(f"{where}: its stream open on node B is ended with a 'revoked' event at node B's ping",
              stream_ended_revoked(far))
        far.close()
    p = revoke(state, tid(rtok), b)
    check(f"{where}: revoking it again (through the last node) is no error", p.returncode == 0, p.stderr)

    # A stream token, revoked by the token itself: the handshake is refused.
    check(f"{where}: before: the stream token opens /v1/ingest", refused_handshake(b, stok) is None)
    open_a = connect(a, stok)  # open while it is revoked: ended by the revoke itself (node A's ping is an hour away)
    open_b = connect(b, stok) if b is not a else None  # ended at node B's ping
    p = revoke(state, stok, a)
    check(f"{where}: sandglass token revoke TOKEN: done, by its id",
          p.returncode == 0 and p.stdout.strip() == f"revoked {tid(stok)}", p.stdout + p.stderr)
    code = open_a.wait_close()
    check(f"{where}: its /v1/ingest stream open on the revoking node is closed at once (1008, saying why)",
          code == 1008 and "revoked" in (open_a.close_reason or ""), (code, open_a.close_reason))
    open_a.close()
    if open_b:
        code = open_b.wait_close()
        check(f"{where}: its /v1/ingest stream open on node B is closed at node B's ping (1008, saying why)",
              code == 1008 and "revoked" in (open_b.close_reason or ""), (code, open_b.close_reason))
        open_b.close()
    for n, name in zip(nodes, ("node A", "node B")):
        e = refused_handshake(n, stok)
        check(f"{where}: {name}: the revoked stream token is refused at the handshake (401)",
              e is not None and e.status == 401, e and (e.status, e.body))

    # Who may revoke: a revoke token only (the secret's); not a read token.
    st, body = a.http("/v1/revoke", other)
    check(f"{where}: a read token cannot revoke (401)", st == 401, (st, body))
    st, body = a.http("/v1/revoke", "")
    check(f"{where}: nor a request without a token", st == 401, (st, body))
    p = run("token", "revoke", "not-an-id", "--ingest", f"http://127.0.0.1:{a.port}", state=state)
    check(f"{where}: a malformed id is refused by the CLI", p.returncode != 0 and "16 hex" in p.stderr, p.stderr)


def main():
    tmp = tempfile.mkdtemp(prefix="sg-console-tokens-")
    os.chmod(tmp, 0o711)  # the PostgreSQL server runs as `postgres` when we are root
    try:
        state = os.path.join(tmp, "sqlite")
        os.makedirs(state)
        a = Ingest(state, extra=("--store", f"sqlite:{tmp}/events.db"), env=NO_PING)
        scenario("SQLite", state, [a])
        a.stop()
        if subprocess.run(["bash", PG, "have"]).returncode != 0:
            check("# SKIP PostgreSQL: server binaries not found (scripts/install-deps.sh installs them)", True)
        else:
            pgdir, port = os.path.join(tmp, "pg"), free_port()
            url = pg("start", pgdir, port)
            try:
                state = os.path.join(tmp, "pg-state")
                os.makedirs(state)
                a = Ingest(state, extra=("--store", url), env=NO_PING)
                b = Ingest(state, extra=("--store", url), env=FAST_PING)
                scenario("PostgreSQL", state, [a, b])
                a.stop()
                b.stop()
            finally:
                pg("stop", pgdir, port)
        check_sanitizers()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"1..{test_ingest._n}")
    return 1 if test_ingest._failed else 0


if __name__ == "__main__":
    sys.exit(main())
