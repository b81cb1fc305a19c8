#!/usr/bin/env python3
"""Attack: reach `sandglass serve` (the browser's terminal, which runs code
in sandboxes for a terminal token) through an address it was not told to
listen on. It binds exactly 127.0.0.1 like the ingest (ingest/http.c's one
setup for both): 127.0.0.2 is refused, nothing listens on IPv6, and a
flood of half-open handshakes does not keep it from answering."""
from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ingest_common import T, new_state, tcp_listeners, tcp_sockets  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import SANDGLASSD, tap, wait_for  # noqa: E402



def server_ends(port: int) -> int:
    """Connections serve holds on port: its accepted sockets (not LISTEN,
    with an inode: an orphan in TIME_WAIT or FIN_WAIT after serve closed it
    has none)."""
    return sum(1 for _f, _a, state, ino in tcp_sockets(port) if state != "0A" and ino != "0")


st = new_state()
env = dict(os.environ, SANDGLASS_STATE_DIR=st.name)
secret = os.path.join(st.name, "secret")
subprocess.run([SANDGLASSD, "token", "--read", "--secret", secret], env=env, capture_output=True)
with open(secret, "w") as f:  # a valid key file: 64 hex characters, 0600
    f.write("ab" * 32 + "\n")
os.chmod(secret, 0o600)
p = subprocess.Popen([SANDGLASSD, "serve", "--listen", "127.0.0.1:0", "--secret", secret],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
try:
    line = p.stdout.readline()
    tap.ok(line.startswith("serving terminals on http://127.0.0.1:"), "serve starts", line)
    port = int(line.strip().rstrip("/").rsplit(":", 1)[1])
    tap.eq(tcp_listeners(port), [("tcp", "0100007F")], "one listener, on 127.0.0.1 (none on [::])")
    for addr in ("127.0.0.2", "127.1.2.3"):
        s = socket.socket()
        s.settimeout(T)
        tap.eq(s.connect_ex((addr, port)), errno.ECONNREFUSED, f"{addr} is refused")
        s.close()
    s6 = socket.socket(socket.AF_INET6)
    s6.settimeout(T)
    r = s6.connect_ex(("::1", port))
    s6.close()
    tap.ok(r != 0, "[::1] is refused", os.strerror(r) if r else "connected")
    # 200 connections that send half a request line and stay.
    held = []
    for _ in range(200):
        s = socket.create_connection(("127.0.0.1", port), timeout=T)
        s.sendall(b"GET /v1/termi")
        held.append(s)
    def healthz() -> bool:
        try:
            out = subprocess.run(["curl", "-s", "-m", "5", f"http://127.0.0.1:{port}/healthz"],
                                 capture_output=True, text=True, timeout=10).stdout
            return '"ok":true' in out
        except subprocess.TimeoutExpired:
            return False
    tap.ok(healthz(), "/healthz answers with 200 half-open connections held")
    tap.ok(wait_for(lambda: server_ends(port) >= 200, 60), "serve has accepted the 200 connections",
           f"{server_ends(port)}")
    for s in held:
        s.close()
    # Gone when serve has closed its side of each (their end read, or its
    # own timeout for a half-open request): then it has dealt with them all.
    tap.ok(wait_for(lambda: server_ends(port) == 0, 60), "serve lets go of each of them",
           f"{server_ends(port)} left")
    alive = p.poll() is None
    tap.ok(alive and healthz(), "and serve still runs after they go", "" if alive else f"exit {p.returncode}: {p.stderr.read()[-800:]}")
finally:
    p.terminate()
    p.wait(timeout=30)
    st.cleanup()
tap.done()
