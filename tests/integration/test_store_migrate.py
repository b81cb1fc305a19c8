#!/usr/bin/env python3
"""Stores made by the release before the one schema vocabulary (issue 23),
opened by this build's ingest.

The fixtures in tests/fixtures/store_v1/ were made by that release's ingest
from a real captured session (make_store_v1.py): a SQLite file and a
PostgreSQL dump, with `sandglass events --json --all` of each as that
release printed it. For each store, a copy is opened by a real
`sandglassd ingest` (PostgreSQL: the dump restored into a throwaway cluster
made by scripts/pg-server.sh; that half skips without its binaries):
- the store is migrated at open: sg_schema records this build's version,
  SQLite's "events" table is gone (renamed sg_events);
- every event survives: `sandglass events --json --all` prints the same
  rows (ids, seqs, kinds, times, payloads) as the release did, and the
  timeline reads;
- the migrated store takes the stream's next event (the order rule and the
  unique key came along) and a new stream; a second open changes nothing;
- a store whose version is newer than this build's is refused: the ingest
  exits non-zero naming both versions, and the store is left as it was."""
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_ingest import BIN, Ingest, check, check_sanitizers, connect, token  # noqa: E402
import test_ingest  # noqa: E402
from test_ingest_pg import PG, free_port, pg  # noqa: E402

ROOT = os.environ.get("SG_SOURCE_ROOT") or os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures", "store_v1")
SANDGLASS = os.environ.get("SANDGLASS_BIN", "sandglass")
VERSION = 7  # SG_STORE_SCHEMA_VERSION


def fixture_rows(name):
    with open(os.path.join(FIX, name)) as f:
        return [json.loads(ln) for ln in f if ln.strip()]


def events(ing, state, *args):
    env = dict(os.environ, SANDGLASS_STATE_DIR=state, TZ="UTC")
    return subprocess.run([SANDGLASS, "events", *args, "--ingest", f"http://127.0.0.1:{ing.port}"],
                          capture_output=True, text=True, env=env, timeout=60)


def survives(where, ing, state, want):
    sid = want[0]["sandbox"]
    p = events(ing, state, "--json", "--all", "--sandbox", sid)
    got = [json.loads(ln) for ln in p.stdout.splitlines() if ln.strip()]
    diff = [(w, g) for w, g in zip(want, got) if w != g][:3]
    check(f"{where}: every event of the release's store survives, as `sandglass events --json` printed it then "
          f"({len(want)} rows)", p.returncode == 0 and len(got) == len(want) and not diff,
          p.stderr + json.dumps(diff, indent=1)[:3000])
    p = events(ing, state, "--sandbox", sid)
    check(f"{where}: and the timeline reads it", p.returncode == 0 and "$ ./run_tests" in p.stdout
          and "SESSION ABORTED" in p.stdout, p.stdout[-2000:] + p.stderr)
    return sid


def takes_more(where, ing, state, want):
    """The next seq of the migrated stream is taken (and acked), a new
    stream too; both read back."""
    last = want[-1]
    c = connect(ing, token(state, last["learner"], last["task"], last["sandbox"]))
    c.wait_ack(None)
    c.send_event(last["seq"] + 1, "stdout", {"data": "after the migration"})
    c.wait_ack(last["seq"] + 1)
    c.close()
    c = connect(ing, token(state, "new", "t", "fresh"))
    c.wait_ack(None)
    c.send_event(0, "command", {"cmd": "true"})
    c.wait_ack(0)
    c.close()
    after = ing.events(last["sandbox"], after_seq=last["seq"])
    fresh = ing.events("fresh")
    check(f"{where}: the migrated store takes the stream's next event and a new stream",
          [e["payload"] for e in after] == [{"data": "after the migration"}]
          and [e["kind"] for e in fresh] == ["command"] and after[0]["id"] > last["id"], (after, fresh))


def refused(where, store, state):
    env = dict(os.environ, SANDGLASS_STATE_DIR=state)
    p = subprocess.run([BIN, "ingest", "--listen", "127.0.0.1:0", "--store", store], capture_output=True,
                       text=True, env=env, timeout=60)
    check(f"{where}: a store of a newer schema (99) is refused, both versions named",
          p.returncode != 0 and "version 99" in p.stderr and f"knows ({VERSION})" in p.stderr
          and "listening" not in p.stdout, p.stdout + p.stderr)


def sqlite_half(tmp):
    state = os.path.join(tmp, "state-sqlite")
    os.makedirs(state)
    db = os.path.join(tmp, "events.db")
    shutil.copyfile(os.path.join(FIX, "events.db"), db)
    want = fixture_rows("sqlite.jsonl")
    ing = Ingest(state, extra=("--store", f"sqlite:{db}"))
    con = sqlite3.connect(db)
    names = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    ver = con.execute("SELECT version FROM sg_schema").fetchall() if "sg_schema" in names else None
    con.close()
    check(f"SQLite: migrated at open: sg_events, sg_schema (version {VERSION}), sg_contents, sg_revoked_tokens,"
          " sg_purges and sg_hosts, no table 'events'",
          {"sg_events", "sg_schema", "sg_contents", "sg_casts", "sg_revoked_tokens", "sg_purges", "sg_hosts"} <= names and "events" not in names and ver == [(VERSION,)], (names, ver))
    survives("SQLite", ing, state, want)
    takes_more("SQLite", ing, state, want)
    ing.stop()
    ing = Ingest(state, extra=("--store", f"sqlite:{db}"))
    n = len(ing.events(want[0]["sandbox"]))
    check("SQLite: opened again: nothing changes", n == len(want) + 1, n)
    ing.stop()
    con = sqlite3.connect(db)
    con.execute("UPDATE sg_schema SET version = 99")
    con.commit()
    con.close()
    refused("SQLite", f"sqlite:{db}", state)
    con = sqlite3.connect(db)
    ver = con.execute("SELECT version FROM sg_schema").fetchall()
    n = con.execute("SELECT count(*) FROM sg_events").fetchone()[0]
    con.close()
    check("SQLite: the newer store is left as it was", ver == [(99,)] and n == len(want) + 2, (ver, n))


def psql(url, *args, stdin=None):
    pgbin = os.environ.get("PGBIN") or sorted(
        d for d in (os.path.join("/usr/lib/postgresql", v, "bin") for v in os.listdir("/usr/lib/postgresql"))
        if os.path.exists(os.path.join(d, "psql")))[-1]
    return subprocess.run([os.path.join(pgbin, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-At", "-d", url, *args],
                          input=stdin, capture_output=True, text=True, timeout=120)


def pg_half(tmp):
    if subprocess.run(["bash", PG, "have"]).returncode != 0:
        check("PostgreSQL # SKIP server binaries not found (scripts/install-deps.sh installs them)", True)
        return
    pgdir, port = os.path.join(tmp, "pg"), free_port()
    url = pg("start", pgdir, port)
    try:
        with open(os.path.join(FIX, "pg.sql")) as f:
            p = psql(url, stdin=f.read())
        check("PostgreSQL: the release's dump restored", p.returncode == 0, p.stderr)
        state = os.path.join(tmp, "state-pg")
        os.makedirs(state)
        want = fixture_rows("pg.jsonl")
        ing = Ingest(state, extra=("--store", url))
        p = psql(url, "-c", "SELECT version FROM sg_schema")
        check(f"PostgreSQL: migrated at open: sg_schema records version {VERSION}",
              p.returncode == 0 and p.stdout.strip() == str(VERSION), p.stdout + p.stderr)
        p = psql(url, "-c", "SELECT count(*) FROM sg_hosts")
        check("PostgreSQL: migrated at open: sg_hosts made (empty)",
              p.returncode == 0 and p.stdout.strip() == "0", p.stdout + p.stderr)
        survives("PostgreSQL", ing, state, want)
        takes_more("PostgreSQL", ing, state, want)
        ing.stop()
        ing = Ingest(state, extra=("--store", url))
        n = len(ing.events(want[0]["sandbox"]))
        check("PostgreSQL: opened again: nothing changes", n == len(want) + 1, n)
        ing.stop()
        psql(url, "-c", "UPDATE sg_schema SET version = 99")
        refused("PostgreSQL", url, state)
        p = psql(url, "-c", "SELECT version, (SELECT count(*) FROM sg_events) FROM sg_schema")
        check("PostgreSQL: the newer store is left as it was",
              p.stdout.strip() == f"99|{len(want) + 2}", p.stdout + p.stderr)
    finally:
        pg("stop", pgdir, port)


def main():
    tmp = tempfile.mkdtemp(prefix="sg-store-migrate-")
    os.chmod(tmp, 0o711)  # the PostgreSQL server runs as `postgres` when we are root
    try:
        sqlite_half(tmp)
        pg_half(tmp)
    finally:
        for ing in Ingest.started:
            if ing.proc.poll() is None:
                ing.stop()
    check_sanitizers()
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"1..{test_ingest._n}")
    return 1 if test_ingest._failed else 0


if __name__ == "__main__":
    sys.exit(main())
