"""Shared by the ingest attacks (tests/adversarial/ingest_*.py) and
tests/integration/test_ingest_security.py: the real ingest on loopback, a
raw HTTP client (any source address in 127/8), tokens, and the check that
the ingest still serves after an attack. Loopback traffic only."""
from __future__ import annotations

import json
import os
import socket
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from test_ingest import (T, WS, HandshakeError, Ingest, connect, run, token,  # noqa: E402,F401
                         wait_until)


def read_token(state: str, *scope: str, secret: str | None = None) -> str:
    """`sandglass token --read [scope...]`."""
    args = ["token", "--read", *scope] + (["--secret", secret] if secret else [])
    p = run(*args, state=state)
    if p.returncode != 0:
        raise RuntimeError(p.stderr)
    return p.stdout.strip()


def http(port: int, path: str, tok: str | None = None, src: str = "127.0.0.1",
         host: str = "127.0.0.1", timeout: float = T, method: str = "GET", body: bytes | None = None,
         headers: str = ""):
    """A request (GET unless told) over a fresh connection from src:
    (status, parsed JSON body); status 0 when the server closes the
    connection without an answer. body goes with its Content-Length;
    headers: raw lines of its own ("Name: value\\r\\n"...)."""
    s = socket.create_connection((host, port), timeout=timeout, source_address=(src, 0))
    buf = b""
    try:
        req = f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n" + headers
        if tok:
            req += f"Authorization: Bearer {tok}\r\n"
        if body is not None:
            req += f"Content-Length: {len(body)}\r\n"
        s.sendall((req + "\r\n").encode() + (body or b""))
        while True:
            c = s.recv(1 << 20)
            if not c:
                break
            buf += c
            head, sep, body = buf.partition(b"\r\n\r\n")
            if sep:
                lens = [l.split(b":", 1)[1] for l in head.split(b"\r\n")
                        if l.lower().startswith(b"content-length:")]
                if lens and len(body) >= int(lens[0]):
                    break
    except (ConnectionResetError, BrokenPipeError):
        pass  # closed by the server: whatever came is the answer
    finally:
        s.close()
    head, _, body = buf.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head else 0
    try:
        return status, json.loads(body) if body else None
    except ValueError:
        return status, body


def still_serving(ing: Ingest, state: str, sandbox: str) -> bool:
    """/healthz answers, a fresh stream is stored and acked, and an operator
    read token reads it back."""
    code, body = http(ing.port, "/healthz")
    if code != 200 or not isinstance(body, dict) or body.get("ok") is not True:
        return False
    ws = connect(ing, token(state, "probe", "alive", sandbox))
    try:
        if ws.wait_ack(None) != -1:
            return False
        for i in range(3):
            ws.send_event(i)
        if ws.wait_ack(2) != 2:
            return False
    finally:
        ws.close()
    code, body = http(ing.port, f"/v1/events?sandbox={sandbox}", read_token(state))
    return code == 200 and [e["seq"] for e in body["events"]] == [0, 1, 2]


def new_state() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="sg-adv-ingest-")


def tcp_sockets(port: int) -> list[tuple[str, str, str, str]]:
    """(file, local address hex, state hex, inode) of every socket whose
    local port is port, from /proc/net/tcp and tcp6."""
    out = []
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(f).read().splitlines()[1:]
        except OSError:
            continue
        for l in lines:
            parts = l.split()
            addr, p = parts[1].rsplit(":", 1)
            if int(p, 16) == port:
                out.append((os.path.basename(f), addr, parts[3], parts[9]))
    return out


def tcp_listeners(port: int) -> list[tuple[str, str]]:
    """(file, local address hex) of every LISTEN socket (state 0A) on port."""
    return [(f, addr) for f, addr, state, _ino in tcp_sockets(port) if state == "0A"]
