#!/usr/bin/env python3
"""Attack (issue 22, low): paste 4 MiB into a browser terminal whose
program does not read. Before, the supervisor took every STDIN message
the relay sent and killed the terminal at 256 KiB ("typed input
overflowed the terminal's queue"), although the docs promise that serve
stops reading the browser. Now each side holds the other back: the
supervisor stops reading serve's connection while its terminal's queue is
full, serve stops reading the WebSocket at 256 KiB (lws_rx_flow_control),
and the rest waits in the sender's socket. The terminal must survive,
and once the program reads, every byte arrives, in order."""
from __future__ import annotations

import hashlib
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_common import WS, key_file, start_serve  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import Env, tap, wait_for  # noqa: E402

PASTE = 4 * 1024 * 1024
CHUNK = 64 * 1024

env = Env()
secret = key_file(os.path.join(env.root, "secret"), "cd")
sid = env.create("--task", "paste")
serve, port = start_serve(env, secret)
tok = env.run("token", "--secret", secret, "--terminal", "--sandbox", sid, check=True).stdout.decode().strip()


def serve_rx_queue(client_port: int) -> int:
    """Bytes of this connection waiting unread in serve's socket
    (/proc/net/tcp: serve's end has serve's port, ours the client's)."""
    for l in open("/proc/net/tcp").read().splitlines()[1:]:
        f = l.split()
        if int(f[1].rsplit(":", 1)[1], 16) == port and int(f[2].rsplit(":", 1)[1], 16) == client_port:
            return int(f[4].split(":")[1], 16)
    return 0


try:
    ws = WS(port)
    ws.auth(tok)
    tap.ok(ws.wait(lambda w: b"$ " in w.output, 60), "the shell's prompt comes", repr(ws.output[-200:]))
    # Raw mode, so that the terminal keeps every byte (a line of 4 MiB in
    # canonical mode would be cut at 4 KiB); the program reads only once
    # the test says so (a file), then counts what it reads.
    ws.binary(b"stty raw -echo; echo READ''Y; while [ ! -e /workspace/go ]; do sleep 0.1; done; "
              b"head -c 4194304 | sha256sum; stty sane\r")
    tap.ok(ws.wait(lambda w: b"READY" in w.output, 60), "the program waits, in raw mode, without reading")
    sent = [0]
    err: list[str] = []

    def paste() -> None:
        try:
            for i in range(PASTE // CHUNK):
                ws.binary(bytes([ord("a") + i % 26]) * CHUNK)
                sent[0] += CHUNK
        except OSError as e:
            err.append(str(e))
    th = threading.Thread(target=paste, daemon=True)
    th.start()
    cport = ws.sock.getsockname()[1]
    # Held: all of it sent into the buffers, or serve leaves bytes unread
    # in its socket - or (before) the terminal is killed.
    held = wait_for(lambda: not ws.pump(0.05) or err or sent[0] >= PASTE or
                    (sent[0] >= 1024 * 1024 and serve_rx_queue(cport) >= CHUNK), 120)
    tap.ok(held, "the paste is sent or held", f"sent {sent[0]}, unread in serve {serve_rx_queue(cport)}")
    print(f"# held with {sent[0]} bytes sent, {serve_rx_queue(cport)} unread in serve's socket")
    tap.ok(ws.close_code is None and not err, "the terminal survives a 4 MiB paste its program does not read",
           f"closed {ws.close_code} {ws.close_reason!r}; texts {ws.texts}; {err}")
    tap.ok(not any("overflow" in t for t in ws.texts), "no input overflow", repr(ws.texts))
    r = env.run("exec", sid, "--", "/bin/touch", "/workspace/go")
    tap.eq(r.returncode, 0, "the program is told to read")
    th.join(timeout=120)
    tap.ok(not th.is_alive() and sent[0] == PASTE and not err, "then the whole paste is taken",
           f"sent {sent[0]} of {PASTE}; {err}")
    want = hashlib.sha256(b"".join(bytes([ord("a") + i % 26]) * CHUNK
                                   for i in range(PASTE // CHUNK))).hexdigest().encode()
    tap.ok(ws.wait(lambda w: want in w.output, 120),
           "the program read the 4 MiB, every byte in order (its sha256)", repr(ws.output[-300:]))
    tap.ok(want in ws.output and ws.wait(lambda w: b"$ " in w.output.split(want, 1)[-1], 60), "and the prompt is back",
           repr(ws.output[-300:]))
    ws.binary(b"exit 3\r")
    tap.ok(ws.wait(lambda w: w.close_code is not None, 60) and ws.close_code == 1000 and
           any('"exit":3' in t.replace(" ", "") for t in ws.texts),
           "the shell ends normally (exit 3)", f"{ws.close_code} {ws.close_reason!r} {ws.texts}")
    ws.close()
    tap.ok(serve.poll() is None, "serve still runs")
finally:
    serve.terminate()
    serve.wait(timeout=30)
    env.cleanup()
    tap.done()
