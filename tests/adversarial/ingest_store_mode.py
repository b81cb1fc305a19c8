#!/usr/bin/env python3
"""Finding: `ingest --store sqlite:PATH` created the file 0644, so any
local user could read every learner's events. Now it is created 0600, and
SQLite gives its -wal and -shm files the same mode."""
from __future__ import annotations

import os
import stat
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ingest_common import Ingest, new_state, still_serving  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from sgtest import tap  # noqa: E402

os.umask(0o022)
st = new_state()
os.chmod(st.name, 0o755)
db = os.path.join(st.name, "shared", "events.db")
os.makedirs(os.path.dirname(db), mode=0o755)
ing = Ingest(st.name, extra=("--store", f"sqlite:{db}"))
try:
    tap.ok(still_serving(ing, st.name, "alive"), "the ingest stores into the custom file")
    for p in (db, db + "-wal", db + "-shm"):
        mode = stat.S_IMODE(os.stat(p).st_mode) if os.path.exists(p) else None
        tap.eq(mode, 0o600, f"{os.path.basename(p)} is 0600")
finally:
    ing.stop()
    st.cleanup()
tap.done()
