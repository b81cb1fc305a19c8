#!/usr/bin/env python3
"""Attack: reach the ingest through an address it was not told to listen
on. `--listen 127.0.0.1:P` used to bind [::] (lws put the IPv4 address in
sin6_flowinfo), so every interface answered /v1/events. Now the socket is
bound to exactly 127.0.0.1: 127.0.0.2 (another local address; loopback
only) is refused, and nothing listens on IPv6."""
from __future__ import annotations

import errno
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ingest_common import T, Ingest, new_state, still_serving, tcp_listeners  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import tap  # noqa: E402

st = new_state()
ing = Ingest(st.name)
try:
    tap.eq(tcp_listeners(ing.port), [("tcp", "0100007F")], "one listener, on 127.0.0.1 (none on [::])")
    for addr in ("127.0.0.2", "127.1.2.3"):
        s = socket.socket()
        s.settimeout(T)
        tap.eq(s.connect_ex((addr, ing.port)), errno.ECONNREFUSED, f"{addr} is refused")
        s.close()
    s6 = socket.socket(socket.AF_INET6)
    s6.settimeout(T)
    r = s6.connect_ex(("::1", ing.port))
    s6.close()
    tap.ok(r != 0, "[::1] is refused", os.strerror(r) if r else "connected")
    tap.ok(still_serving(ing, st.name, "alive"), "the ingest still serves on 127.0.0.1")
finally:
    ing.stop()
    st.cleanup()
tap.done()
