#!/usr/bin/env python3
"""`sandglass serve`'s watchers (issue 25, "Watch live"): a WebSocket
authenticated with a watch token follows the learner's open terminal,
read-only. A real client (RFC 6455, tests/adversarial/serve_common.py's)
checks: the watcher sees the learner's current screen (the replay) and
then its output live; its keys and resizes are refused with an ERROR and
never reach the shell; a 5th watcher of the sandbox is refused; a token of
another kind is refused; the learner is told how many watch; the
watchers are closed when the learner's terminal ends. The ingest names two
serves, one where nothing listens first; the sandbox's host registered in
the store (a real `sandglass host --serve-url`) puts its serve first, and a
registered serve the ingest does not name is said to be unlisted."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "adversarial"))
from serve_common import WS, key_file, start_serve  # noqa: E402
from sgtest import SANDGLASS, SANDGLASSD, Env, tap, wait_for  # noqa: E402


def watchers_said(ws: WS) -> list[int]:
    return [json.loads(t)["watchers"] for t in ws.texts if '"watchers"' in t]


NOBODY = 9  # the discard port: no serve listens there (a host's serve that is down)
env = Env()
secret = key_file(os.path.join(env.root, "secret"), "ab")
serve, port = start_serve(env, secret)
# A real ingest takes the session's events (without one, destroy would
# wait out its delivery), and mints watch tokens for this serve.
ingest = subprocess.Popen([SANDGLASSD, "ingest", "--listen", "127.0.0.1:0", "--store",
                           f"sqlite:{os.path.join(env.root, 'events.db')}", "--secret", secret,
                           "--serve", f"http://127.0.0.1:{NOBODY}", "--serve", f"http://127.0.0.1:{port}/"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env.env, text=True)
ingest_url = ingest.stdout.readline().strip().split(" ")[-1].rstrip("/")
ingest_http = ingest_url.replace("ws://", "http://")
sid = env.create("--task", "watched", "--ingest", ingest_url, "--secret", secret)


def token(*kind: str) -> str:
    return env.run("token", "--secret", secret, *kind, check=True).stdout.decode().strip()


term_tok = token("--terminal", "--sandbox", sid)
watch_tok = token("--watch", "--sandbox", sid)
read_tok = token("--read", "--sandbox", sid)
watchers: list[WS] = []


def get(path: str, tok: str | None) -> tuple[int, dict, dict]:
    """An ingest's answer: status, JSON body, headers."""
    req = urllib.request.Request(ingest_http + path, headers={"Authorization": f"Bearer {tok}"} if tok else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            body = r.read()
            return r.status, json.loads(body) if body.startswith(b"{") else {}, dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}"), dict(e.headers)


def refused(tok: str, code: int, why: str, name: str) -> None:
    """A WebSocket authenticated with tok is closed with code and why."""
    ws = WS(port)
    ws.auth(tok)
    tap.ok(ws.wait(lambda w: w.close_code is not None, 30) and ws.close_code == code and why in ws.close_reason,
           name, f"{ws.close_code} {ws.close_reason!r}")
    ws.close()


try:
    refused(watch_tok, 1013, "nothing to watch", "a watch before any terminal is open: refused, try again later")

    learner = WS(port)
    learner.auth(term_tok)
    tap.ok(learner.wait(lambda w: b"$ " in w.output, 60), "the learner's prompt comes", repr(learner.output[-200:]))
    learner.binary(b"echo before-$((6*7))\r")
    tap.ok(learner.wait(lambda w: b"before-42" in w.output, 30), "the learner runs a command")

    # The ingest mints a watch token for a read token that covers the sandbox.
    op_tok = token("--read")
    tap.ok(wait_for(lambda: get(f"/v1/watch?sandbox={sid}", op_tok)[0] == 200, 30),
           "GET /v1/watch answers an operator's read token once the sandbox's events are stored",
           repr(get(f"/v1/watch?sandbox={sid}", op_tok)))
    st, minted, _ = get(f"/v1/watch?sandbox={sid}", op_tok)
    real, down = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{NOBODY}"
    tap.ok(st == 200 and minted.get("serves") == [down, real] and minted.get("serve") == down and
           minted.get("host") is None and minted.get("unlisted") is None and minted.get("expires_in") == 60 and
           minted.get("sandbox") == sid and minted.get("task") == "watched",
           "with a 60 s watch token and the serves in the order named (no host registered)", repr(minted)[:300])

    def host(serve_url: str) -> subprocess.Popen:
        """`sandglass host` registering this state directory's sandboxes."""
        h = env.spawn([SANDGLASS, "host", "--metrics-listen", "127.0.0.1:0", "--ingest", ingest_url, "--secret",
                       secret, "--name", "watch-host", "--heartbeat", "1", "--serve-url", serve_url],
                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        h.stdout.readline()  # "metrics on ...": started
        return h

    def minted_host() -> dict:
        return get(f"/v1/watch?sandbox={sid}", op_tok)[1]

    h = host(real)
    tap.ok(wait_for(lambda: minted_host().get("host") == "watch-host", 30) and
           minted_host().get("serves") == [real, down] and minted_host().get("serve") == real and
           minted_host().get("unlisted") is None,
           "the sandbox's host registered its serve: that serve comes first", repr(minted_host()))
    h.terminate()
    tap.eq(h.wait(timeout=30), 0, "the host daemon stops cleanly")
    unnamed = "http://127.0.0.1:8"
    h = host(unnamed)
    tap.ok(wait_for(lambda: minted_host().get("unlisted") == unnamed, 30) and
           minted_host().get("serves") == [down, real] and minted_host().get("host") == "watch-host",
           "a registered serve the ingest does not name is not tried, and is said to be unlisted",
           repr(minted_host()))
    h.terminate()
    tap.eq(h.wait(timeout=30), 0, "the host daemon stops cleanly again")
    st, _, _ = get(f"/v1/watch?sandbox={sid}", token("--read", "--sandbox", sid))
    tap.eq(st, 200, "a read token scoped to the sandbox gets one too")
    for why, args, want in [("no token", None, 401), ("no sandbox=", "", 400),
                            ("a token scoped to another sandbox", ("--read", "--sandbox", "0" * 32), 403),
                            ("a token scoped to another learner", ("--read", "--learner", "someone-else"), 404),
                            ("a stream token", ("--learner", "x", "--task", "y", "--sandbox", sid), 401)]:
        path = f"/v1/watch?sandbox={sid}" if args != "" else "/v1/watch"
        st, body, _ = get(path, None if args is None else op_tok if args == "" else token(*args))
        tap.ok(st == want and body.get("error"), f"/v1/watch with {why}: {want}, saying why", f"{st} {body}")
    st, _, hdrs = get("/watch.html", None)
    csp = {k.lower(): v for k, v in hdrs.items()}.get("content-security-policy", "")
    tap.ok(st == 200 and f"connect-src 'self' ws://127.0.0.1:{NOBODY} ws://127.0.0.1:{port};" in csp,
           "the watch page's policy lets it connect to the serves named, and only them", f"{st} {csp}")

    w1 = WS(port)
    watchers.append(w1)
    w1.auth(minted["token"], rows=10, cols=20)  # the ingest's
    tap.ok(w1.wait(lambda w: b"before-42" in w.output, 30),
           "a watcher sees the learner's screen as it was (the replay)", repr(w1.output[-200:]))
    tap.ok(learner.wait(lambda w: 1 in watchers_said(w), 30), "the learner is told: watched by 1",
           repr(learner.texts))

    learner.binary(b"echo live-$((50+5))\r")
    tap.ok(w1.wait(lambda w: b"live-55" in w.output, 30), "the watcher sees the learner's output live",
           repr(w1.output[-200:]))

    w1.binary(b"echo typed-by-$((1+1))-watcher\r")
    w1.text(json.dumps({"resize": {"rows": 5, "cols": 5}}))
    tap.ok(w1.wait(lambda w: sum("read-only" in t for t in w.texts) >= 2, 30),
           "the watcher's keys and resize are refused with an ERROR naming why", repr(w1.texts))
    tap.ok(any("input was not sent" in t for t in w1.texts) and any("cannot resize" in t for t in w1.texts),
           "... one for the keys, one for the resize", repr(w1.texts))
    learner.binary(b"echo after-$((60+6))\r")
    tap.ok(learner.wait(lambda w: b"after-66" in w.output, 30) and w1.wait(lambda w: b"after-66" in w.output, 30),
           "the learner's next command runs, and the watcher sees it")
    tap.ok(b"typed-by-2-watcher" not in learner.output and b"typed-by-2-watcher" not in w1.output,
           "the watcher's keys never reached the shell", repr(learner.output[-300:]))
    tap.ok(w1.close_code is None, "the watcher stays open after its refused input",
           f"{w1.close_code} {w1.close_reason!r}")

    # A watcher that does not read: its own queue fills (1.5 MiB) and it
    # is closed; the learner and the other watcher get every byte.
    slow = WS(port, rcvbuf=4096)
    slow.auth(watch_tok)
    tap.ok(learner.wait(lambda w: watchers_said(w)[-1:] == [2], 30), "a second watcher: watched by 2",
           repr(learner.texts[-3:]))
    learner.binary(b"head -c 4000000 /dev/zero | tr '\\0' x; echo; echo big-$((50*2))\r")
    done = lambda w: b"big-100" in w.output[-200:]  # noqa: E731
    while (not done(learner) or not done(w1)) and learner.pump(0.02) and w1.pump(0.02):
        pass
    tap.ok(done(learner) and done(w1) and learner.output.count(b"x" * 1000) >= 4000,
           "4 MB of output reach the learner and a watcher that reads", f"{learner.close_code} {w1.close_code}")
    tap.ok(slow.wait(lambda w: w.close_code is not None, 60) and slow.close_code == 1013 and
           "fell behind" in slow.close_reason, "the watcher that does not read is closed, saying why",
           f"{slow.close_code} {slow.close_reason!r}")
    slow.close()
    tap.ok(learner.wait(lambda w: watchers_said(w)[-1:] == [1], 30), "and the learner is told: watched by 1",
           repr(learner.texts[-3:]))

    for _ in range(3):
        w = WS(port)
        watchers.append(w)
        w.auth(watch_tok)
    tap.ok(all(w.wait(lambda x: b"big-100" in x.output, 30) for w in watchers),
           "4 watchers of one sandbox all see the screen")
    tap.ok(learner.wait(lambda w: 4 in watchers_said(w), 30), "the learner is told: watched by 4",
           repr(learner.texts))
    refused(watch_tok, 1013, "too many watchers", "a 5th watcher is refused with why")
    refused(read_tok, 1008, "read token cannot", "a read token is refused by serve")

    watchers.pop().close()
    tap.ok(learner.wait(lambda w: watchers_said(w)[-1:] == [3], 30), "a watcher leaves: watched by 3",
           repr(learner.texts))

    learner.binary(b"exit 0\r")
    tap.ok(learner.wait(lambda w: w.close_code is not None, 30) and learner.close_code == 1000,
           "the learner's terminal ends", f"{learner.close_code} {learner.close_reason!r}")
    tap.ok(all(w.wait(lambda x: x.close_code is not None, 30) and w.close_code == 1000 and
               "terminal ended" in w.close_reason for w in watchers),
           "its watchers are closed with it", repr([(w.close_code, w.close_reason) for w in watchers]))
    tap.ok(all('"exit":0' in "".join(w.texts).replace(" ", "") and "terminal ended" in w.texts[-1] for w in watchers),
           "... told the shell's exit code and why, as messages", repr([w.texts[-2:] for w in watchers]))
    learner.close()
    tap.ok(serve.poll() is None, "serve still runs")
    serve.terminate()
    tap.eq(serve.wait(timeout=30), 0, "serve stops cleanly (no sanitizer report)")
finally:
    for w in watchers:
        w.close()
    if serve.poll() is None:
        serve.terminate()
        serve.wait(timeout=30)
    env.run("destroy", sid)  # while its ingest runs: nothing left to deliver
    ingest.terminate()
    tap.eq(ingest.wait(timeout=30), 0, "the ingest stops cleanly (no sanitizer report)")
    env.cleanup()
    tap.done()
