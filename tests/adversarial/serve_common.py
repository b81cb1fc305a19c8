"""Helpers of the serve_*.py attacks: start `sandglass serve` on an
ephemeral port, and a small WebSocket client (RFC 6455, client side) that
can choose its source address on loopback, hold many connections open and
send large binary messages without waiting for them."""
from __future__ import annotations

import base64
import json
import os
import select
import socket
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import SANDGLASSD  # noqa: E402


def start_serve(env, secret: str, *extra: str) -> tuple[subprocess.Popen, int]:
    log = open(os.path.join(env.root, "serve.log"), "a")
    p = subprocess.Popen([SANDGLASSD, "serve", "--listen", "127.0.0.1:0", "--secret", secret, *extra],
                         stdout=subprocess.PIPE, stderr=log, env=env.env, text=True)
    log.close()
    line = p.stdout.readline()
    if "serving terminals on http://" not in line:
        p.kill()
        raise RuntimeError(f"serve did not start: {line!r}")
    return p, int(line.strip().rstrip("/").rsplit(":", 1)[1])


def healthz(port: int, timeout: float = 10) -> dict | None:
    """/healthz's answer, or None when none comes within timeout."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                b = s.recv(4096)
                if not b:
                    break
                data += b
            body = data.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in data else b""
            return json.loads(body[body.index(b"{"):]) if b"{" in body else None
    except (OSError, ValueError):
        return None


class Closed(Exception):
    pass


class WS:
    """One WebSocket to serve's /v1/terminal. frames() collects what came:
    binary output, text messages, the close code and reason."""

    def __init__(self, port: int, src: str = "127.0.0.1", timeout: float = 10, rcvbuf: int = 0) -> None:
        self.sock = socket.socket()
        if rcvbuf:  # a client that reads slowly: a small window
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.bind((src, 0))
        self.sock.connect(("127.0.0.1", port))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET /v1/terminal HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
                           "Sec-WebSocket-Protocol: sandglass-terminal\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            b = self.sock.recv(4096)
            if not b:
                raise Closed("closed during the handshake")
            head += b
        self.status = int(head.split(b" ", 2)[1])
        self.buf = head.split(b"\r\n\r\n", 1)[1]
        if self.status != 101:
            raise Closed(f"handshake answered {self.status}")
        self.sock.settimeout(None)  # reads wait in select(); a paste may block its sender
        self.output = bytearray()  # appended to in place: a large output costs no copies
        self.texts: list[str] = []
        self.close_code: int | None = None
        self.close_reason = ""

    def _send_frame(self, op: int, payload: bytes) -> None:
        mask = os.urandom(4)
        n = len(payload)
        hdr = bytes([0x80 | op])
        if n < 126:
            hdr += bytes([0x80 | n])
        elif n < 65536:
            hdr += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            hdr += bytes([0x80 | 127]) + struct.pack("!Q", n)
        key = (mask * (n // 4 + 1))[:n]
        masked = (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(n, "big") if n else b""
        self.sock.sendall(hdr + mask + masked)

    def text(self, s: str) -> None:
        self._send_frame(1, s.encode())

    def binary(self, b: bytes) -> None:
        self._send_frame(2, b)

    def auth(self, token: str, rows: int = 24, cols: int = 80) -> None:
        self.text(json.dumps({"token": token, "rows": rows, "cols": cols}))

    def _frame(self) -> bool:
        """Parses one frame from the buffer; False when it is incomplete."""
        b = self.buf
        if len(b) < 2:
            return False
        op, n, off = b[0] & 0x0F, b[1] & 0x7F, 2
        if n == 126:
            if len(b) < 4:
                return False
            n, off = struct.unpack("!H", b[2:4])[0], 4
        elif n == 127:
            if len(b) < 10:
                return False
            n, off = struct.unpack("!Q", b[2:10])[0], 10
        if len(b) < off + n:
            return False
        payload, self.buf = b[off:off + n], b[off + n:]
        if op == 2 or op == 0:
            self.output += payload
        elif op == 1:
            self.texts.append(payload.decode(errors="replace"))
        elif op == 8:
            self.close_code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
            self.close_reason = payload[2:].decode(errors="replace")
        return True

    def pump(self, timeout: float = 0.1) -> bool:
        """Reads what has come within timeout; False once the server closed."""
        while self._frame():  # what came with the handshake's answer, first
            pass
        if self.close_code is not None:
            return False
        r, _, _ = select.select([self.sock], [], [], timeout)
        if r:
            try:
                b = self.sock.recv(1 << 16)
            except OSError:
                b = b""
            if not b:
                if self.close_code is None:
                    self.close_code = 1006
                return False
            self.buf += b
            while self._frame():
                pass
        return self.close_code is None

    def wait(self, pred, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if pred(self):
                return True
            if not self.pump(0.1) and not pred(self):
                return False
        return pred(self)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def open_terminal(port: int, tok: str, src: str = "127.0.0.1") -> tuple[WS | None, str]:
    """A terminal from src that shows its prompt and runs a command, or why not."""
    try:
        ws = WS(port, src=src, timeout=30)
    except (OSError, Closed) as e:
        return None, f"no handshake: {e!r}"
    ws.auth(tok)
    if not ws.wait(lambda w: b"$ " in w.output, 60):
        return ws, f"no prompt: {ws.close_code} {ws.close_reason!r} {ws.texts} {ws.output[-200:]!r}"
    ws.binary(b"echo term-$((40+2))\r")
    if not ws.wait(lambda w: b"term-42" in w.output, 60):
        return ws, f"no output: {ws.output[-200:]!r}"
    return ws, ""


def key_file(path: str, hexbyte: str) -> str:
    """A valid secret file for tokens (64 hex characters, 0600)."""
    with open(path, "w") as f:
        f.write(hexbyte * 32 + "\n")
    os.chmod(path, 0o600)
    return path
