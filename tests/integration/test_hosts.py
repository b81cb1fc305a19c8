#!/usr/bin/env python3
"""Hosts in the store (issue 26, "Many hosts, one store";
sandglass-host(1) "Registration", sandglass-ls(1) --all-hosts).

Real parts only: a real ingest on a loopback port with its SQLite store,
then the same on PostgreSQL (scripts/pg-server.sh), two `sandglass host`
daemons with state directories of their own, each with a real sandbox.

- both hosts register (name, serve URL, capacity, version, their
  sandboxes) and `sandglass ls --all-hosts` lists both sandboxes with their
  HOST, --json too; a host stopped is marked stale once it has missed more
  than 3 heartbeats, the other is not;
- hostile registrations are refused, each with a message naming what was
  wrong: a Content-Length over the bound (before any body), no
  Content-Length, invalid UTF-8, an unknown field, a bad field, another
  host's name, a read token (wrong kind), an expired host token, a bad
  signature; a host token cannot read /v1/hosts, a scoped read token may
  not either;
- a learner name the store holds with terminal escapes (written into the
  SQLite store directly: the ingest would refuse it) reaches the terminal
  escaped.

No check depends on speed: every wait polls for its event with a deadline.
TAP output."""

import base64
import hashlib
import hmac
import http.client
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import SANDGLASS, SANDGLASSD, Env, await_true, tap  # noqa: E402
from test_ingest_pg import PG, free_port, pg  # noqa: E402

T = 60


def b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def mint(secret_file: str, claims: dict, key: bytes | None = None) -> str:
    """A token as wire/token.c signs it (claims compact, keys sorted)."""
    with open(secret_file) as f:
        secret = bytes.fromhex(f.read().strip())
    body = b64(json.dumps(claims, separators=(",", ":"), sort_keys=True).encode())
    sig = hmac.new(key or secret, body.encode(), hashlib.sha256).digest()
    return f"{body}.{b64(sig)}"


def post(port: int, token: str | None, body: bytes | None, length: int | None = None, path: str = "/v1/hosts"):
    """POST path (/v1/hosts): (status, the answer's JSON). length: a
    Content-Length other than the body's (and then no body sent)."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=T)
    c.putrequest("POST", path)
    if token:
        c.putheader("Authorization", f"Bearer {token}")
    if length is not None:
        c.putheader("Content-Length", str(length))
    elif body is not None:
        c.putheader("Content-Length", str(len(body)))
    c.putheader("Connection", "close")
    c.endheaders()
    if body is not None and length is None:
        c.send(body)
    r = c.getresponse()
    data = r.read()
    c.close()
    try:
        return r.status, json.loads(data)
    except ValueError:
        return r.status, {"raw": data.decode(errors="replace")}


def get_hosts(port: int, token: str, query: str = ""):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=T)
    c.request("GET", "/v1/hosts" + query, headers={"Authorization": f"Bearer {token}"})
    r = c.getresponse()
    data = json.loads(r.read())
    c.close()
    return r.status, data


def registration(name: str, **over) -> dict:
    reg = {"v": 1, "name": name, "serve_url": None, "version": "test", "heartbeat_s": 1,
           "capacity": {"cpus": 1, "memory_bytes": 1 << 30, "max_sandboxes": 10, "pool_size": 0},
           "sandboxes_total": 1,
           "sandboxes": [{"id": "0123456789ab", "learner": "eve", "task": None, "state": "running",
                          "created": "2026-01-01T00:00:00Z", "last_active": None}]}
    reg.update(over)
    return reg


class Ingest:
    def __init__(self, env: Env, store: str, secret: str):
        self.log = os.path.join(env.root, f"ingest-{len(env.procs)}.log")
        with open(self.log, "w") as log:
            self.p = env.spawn([SANDGLASSD, "ingest", "--listen", "127.0.0.1:0", "--store", store, "--secret",
                                secret], stdout=subprocess.PIPE, stderr=log, text=True)
        line = self.p.stdout.readline()
        if not line.startswith("listening on ws://127.0.0.1:"):
            raise RuntimeError(f"the ingest did not start: {line!r}")
        self.port = int(line.rsplit(":", 1)[1])
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.p.terminate()
        rc = self.p.wait(timeout=T)
        with open(self.log, errors="replace") as f:
            return rc, f.read()


def clean(where: str, what: str, rc: int, err: str) -> None:
    """A daemon stopped by SIGTERM: exit 0, no sanitizer report (ASan builds)."""
    tap.ok(rc == 0 and "Sanitizer" not in err and "runtime error" not in err,
           f"{where}: {what} stops cleanly (exit 0, no sanitizer report)", f"rc {rc}: {err[-2000:]}")


class Host:
    """`sandglass host` on env's state directory, registering with ing."""

    def __init__(self, env: Env, ing: Ingest, secret: str, name: str, *extra: str):
        self.p = env.spawn([SANDGLASS, "host", "--metrics-listen", "127.0.0.1:0", "--ingest", ing.url,
                            "--secret", secret, "--name", name, "--heartbeat", "1", *extra],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        if not line.startswith("metrics on "):
            self.p.kill()
            raise RuntimeError(f"sandglass host did not start: {line!r} {self.p.stderr.read()}")

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        rc = self.p.wait(timeout=T)
        return rc, self.p.stderr.read()


def ls_all(env: Env, ing: Ingest, secret: str, *args: str):
    return env.run("ls", "--all-hosts", "--ingest", ing.url, "--secret", secret, *args, timeout=T)


def ls_json(env, ing, secret) -> dict:
    p = ls_all(env, ing, secret, "--json")
    if p.returncode != 0:
        return {}
    return {h["name"]: h for h in json.loads(p.stdout)}


def listing_case(where, a: Env, b: Env, ing, secret, sa, sb):
    ha = Host(a, ing, secret, "host-a", "--serve-url", "https://a.example:7681")
    hb = Host(b, ing, secret, "host-b")
    try:
        def both():
            hosts = ls_json(a, ing, secret)
            return {s["id"] for s in hosts.get("host-a", {}).get("sandboxes", [])} == {sa} and \
                {s["id"] for s in hosts.get("host-b", {}).get("sandboxes", [])} == {sb}
        await_true(both, f"{where}: both hosts registered with their sandboxes", timeout=T)
        hosts = ls_json(a, ing, secret)
        one = hosts.get("host-a", {})
        tap.ok(one.get("serve_url") == "https://a.example:7681" and one.get("version") and
               one.get("capacity", {}).get("cpus", 0) >= 1 and one.get("capacity", {}).get("memory_bytes", 0) > 0 and
               one.get("heartbeat_s") == 1 and one.get("sandboxes_total") == 1 and one.get("stale") is False,
               f"{where}: host-a's registration: serve URL, version, capacity, heartbeat", json.dumps(one))
        sbx = (one.get("sandboxes") or [{}])[0]
        tap.ok(sbx.get("learner") == "alice" and sbx.get("state") == "running" and sbx.get("task") is None and
               re.match(r"\d{4}-\d\d-\d\dT", sbx.get("created", "")),
               f"{where}: its sandbox: learner, state, created", json.dumps(sbx))
        tap.ok(hosts.get("host-b", {}).get("serve_url") is None, f"{where}: host-b has no serve URL")
        p = ls_all(b, ing, secret)
        out = p.stdout.decode()
        rows = {line.split()[1]: line.split()[0] for line in out.splitlines()[1:] if line.strip()}
        tap.ok(p.returncode == 0 and out.startswith("HOST ") and rows.get(sa) == "host-a" and rows.get(sb) == "host-b",
               f"{where}: ls --all-hosts shows both sandboxes with their HOST", out + p.stderr.decode())
        p = ls_all(b, ing, secret, "--learner", "bob")
        out = p.stdout.decode()
        tap.ok(sb in out and sa not in out, f"{where}: ls --all-hosts --learner filters", out)
        rc, err = hb.stop()
        clean(where, "host-b's daemon", rc, err)
        tap.ok("registered as host-b" in err, f"{where}: host-b's log says it registered", err)
        await_true(lambda: ls_json(a, ing, secret).get("host-b", {}).get("stale") is True,
                   f"{where}: host-b is stale once it missed 3 heartbeats", timeout=T)
        hosts = ls_json(a, ing, secret)
        tap.ok(hosts["host-b"]["stale"] and hosts["host-b"]["age_s"] > 3 and not hosts["host-a"]["stale"],
               f"{where}: host-b stale (age over 3 heartbeats), host-a not", json.dumps(
                   {k: (v["stale"], v["age_s"]) for k, v in hosts.items()}))
        out = ls_all(a, ing, secret).stdout.decode()
        line = next((x for x in out.splitlines() if x.startswith("host-b ")), "")
        tap.ok("(stale: not seen for" in line, f"{where}: the table marks host-b stale", out)
    finally:
        for h in (ha, hb):
            if h.p.poll() is None:
                clean(where, "host-a's daemon", *h.stop())


def hostile_case(where, ing, secret):
    now = int(time.time())
    ht = mint(secret, {"h": "host-x", "exp": now + 300})

    def refused(name, token, body, status, want, length=None):
        st, ans = post(ing.port, token, body, length)
        tap.ok(st == status and want in ans.get("error", ""), f"{where}: {name} is refused ({status})",
               f"{st} {ans}")

    good = json.dumps(registration("host-x")).encode()
    st, ans = post(ing.port, ht, good)
    tap.ok(st == 200 and ans.get("name") == "host-x", f"{where}: a well-formed registration is taken", f"{st} {ans}")
    refused("a Content-Length over 1 MiB (no body read)", ht, b"", 413, "Content-Length", length=2 * 1024 * 1024)
    refused("a registration without a token", None, good, 401, "missing host token")
    refused("a registration with a read token (wrong kind)", mint(secret, {"r": 1, "exp": now + 300}), good, 401,
            "not a host token")
    refused("a registration with a stream token (wrong kind)",
            mint(secret, {"l": "a", "t": "t", "s": "s", "exp": now + 300}), good, 401, "not a host token")
    refused("an expired host token", mint(secret, {"h": "host-x", "exp": now - 1}), good, 401, "token expired")
    refused("a host token of another key", mint(secret, {"h": "host-x", "exp": now + 300}, key=b"k" * 32), good, 401,
            "bad signature")
    refused("another host's name", mint(secret, {"h": "host-y", "exp": now + 300}), good, 403,
            "registers the host host-y, not host-x")
    refused("invalid UTF-8", ht, good.replace(b'"test"', b'"te\xffst"'), 400, "registration: not JSON")
    refused("an unknown field", ht, json.dumps(registration("host-x", extra=1)).encode(), 400, "unknown field 'extra'")
    bad_sb = registration("host-x")
    bad_sb["sandboxes"][0]["state"] = "\x1b[31mrunning"
    refused("a bad sandbox state", ht, json.dumps(bad_sb).encode(), 400, "sandboxes[0].state")
    bad_sb = registration("host-x")
    bad_sb["sandboxes"][0]["learner"] = "x" * 200
    refused("an overlong learner", ht, json.dumps(bad_sb).encode(), 400, "sandboxes[0].learner")
    refused("a serve_url that is no URL", ht, json.dumps(registration("host-x", serve_url="javascript:x")).encode(),
            400, "serve_url")
    refused("a heartbeat out of range", ht, json.dumps(registration("host-x", heartbeat_s=0)).encode(), 400,
            "heartbeat_s")
    refused("more sandboxes listed than the total", ht,
            json.dumps(registration("host-x", sandboxes_total=0)).encode(), 400, "sandboxes_total")
    many = registration("host-x", sandboxes_total=2000)
    many["sandboxes"] = many["sandboxes"] * 1025
    refused("more than 1024 sandboxes", ht, json.dumps(many).encode(), 400, "more than 1024")
    st, ans = get_hosts(ing.port, ht)
    tap.ok(st == 401 and "a host token can only register its host" in ans.get("error", ""),
           f"{where}: a host token cannot read /v1/hosts", f"{st} {ans}")
    st, ans = get_hosts(ing.port, mint(secret, {"r": 1, "l": "eve", "exp": now + 300}))
    tap.ok(st == 403, f"{where}: a learner's read token cannot list the hosts", f"{st} {ans}")
    st, ans = get_hosts(ing.port, mint(secret, {"r": 1, "exp": now + 300}))
    xs = [h for h in ans.get("hosts", []) if h["name"] == "host-x"]
    tap.ok(st == 200 and len(xs) == 1 and xs[0]["info"]["version"] == "test",
           f"{where}: only the well-formed registration is stored", f"{st} {ans}")


def paging_case(where, env, ing, secret):
    """More hosts than a page (256): GET /v1/hosts pages by name with
    after=/next, and ls --all-hosts follows every page."""
    now = int(time.time())
    names = [f"bulk-{i:03d}" for i in range(300)]
    bad = []
    for i, name in enumerate(names):
        reg = registration(name, heartbeat_s=600)
        reg["sandboxes"][0]["id"] = f"b{i:011x}"
        st, ans = post(ing.port, mint(secret, {"h": name, "exp": now + 300}), json.dumps(reg).encode())
        if st != 200:
            bad.append((name, st, ans))
    tap.ok(not bad, f"{where}: 300 more hosts registered", repr(bad[:3]))
    rt = mint(secret, {"r": 1, "exp": now + 300})
    seen, after, pages = [], None, 0
    while pages < 10:
        st, ans = get_hosts(ing.port, rt, f"?after={after}" if after else "")
        pages += 1
        if st != 200:
            break
        seen += [h["name"] for h in ans["hosts"]]
        after = ans.get("next")
        if after is None:
            break
    stored = [n for n in seen]
    tap.ok(pages == 2 and len(seen) == len(set(seen)) and seen == sorted(seen, key=lambda n: n.encode()) and
           set(names) <= set(seen), f"{where}: /v1/hosts in pages of 256 by name, each host once ({len(seen)} hosts, "
           f"{pages} pages)", f"{st} {pages} {seen[:3]} {seen[-3:]}")
    st, ans = get_hosts(ing.port, rt, "?after=bulk-298")
    tap.ok(st == 200 and [h["name"] for h in ans["hosts"]][:1] == ["bulk-299"] and ans.get("next") is None,
           f"{where}: after= starts after that name; the last page's next is null", f"{st} {ans.get('next')}")
    st, ans = get_hosts(ing.port, rt, "?sandbox=b000000000ff")
    hs = ans.get("hosts", [])
    tap.ok(st == 200 and [h["name"] for h in hs] == ["bulk-255"] and
           [s["id"] for s in hs[0]["info"]["sandboxes"]] == ["b000000000ff"],
           f"{where}: sandbox=ID: the host that lists it, with that sandbox only", f"{st} {ans}")
    st, ans = get_hosts(ing.port, rt, "?sandbox=b00")
    tap.ok(st == 400 and "4 characters" in ans.get("error", ""), f"{where}: sandbox= shorter than 4: refused",
           f"{st} {ans}")
    st, ans = get_hosts(ing.port, rt, "?after=a%20b")
    tap.ok(st == 400 and "after=" in ans.get("error", ""), f"{where}: a bad after= is refused", f"{st} {ans}")
    p = ls_all(env, ing, secret, "--json")
    listed = [h["name"] for h in json.loads(p.stdout)] if p.returncode == 0 else []
    tap.ok(listed == stored and set(names) <= set(listed),
           f"{where}: ls --all-hosts --json follows the pages: every host once ({len(listed)})",
           p.stderr.decode()[-500:])
    p = ls_all(env, ing, secret)
    rows = [line.split()[0] for line in p.stdout.decode().splitlines()[1:] if line.startswith("bulk-")]
    tap.ok(p.returncode == 0 and rows == names, f"{where}: ls --all-hosts prints all 300 (the table)",
           f"{len(rows)} rows")
    metrics_case(where, ing, len(set(seen)))


def scrape(port: int) -> str:
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=T)
    c.request("GET", "/metrics")
    text = c.getresponse().read().decode()
    c.close()
    return text


def metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return -1


def metrics_case(where, ing, known):
    """The ingest's /metrics counts the registrations and the hosts, and
    names none."""
    # host-a, host-b (their daemons stopped) and host-x (one registration,
    # heartbeat 1 s) are stale once 3 s passed since their last
    await_true(lambda: (lambda t: metric(t, "sandglass_ingest_hosts") == known and
                        metric(t, "sandglass_ingest_hosts_stale") == 3)(scrape(ing.port)),
               f"{where}: /metrics counts the {known} hosts in the store and the 3 stale (counted every 10 s)",
               timeout=T, diag=lambda: scrape(ing.port)[-3000:])
    text = scrape(ing.port)
    tap.ok(metric(text, "sandglass_ingest_host_registrations_total") >= 301 and
           metric(text, "sandglass_ingest_host_registrations_refused_total") >= 14,
           f"{where}: /metrics: stale hosts, registrations stored and refused",
           "\n".join(x for x in text.splitlines() if "host" in x))
    tap.ok("bulk-" not in text and "host-a" not in text and "host-x" not in text,
           f"{where}: /metrics names no host (counts only)")


def reload_case(env, ing, secret):
    """sandglass host on SIGHUP: the config and the secret read again; a
    config that cannot be read changes nothing; SIGHUP at the first line
    does not kill it (held from the start)."""
    conf = os.path.join(env.root, "host.conf")
    wrong = os.path.join(env.root, "wrong-secret")
    with open(wrong, "w") as f:
        f.write("ab" * 32 + "\n")
    os.chmod(wrong, 0o600)

    def write_conf(secret_file: str, extra: str = "") -> None:
        with open(conf + ".tmp", "w") as f:
            f.write(f"[ingest]\nurl = {ing.url}\nsecret = {secret_file}\n{extra}")
        os.rename(conf + ".tmp", conf)

    write_conf(wrong)
    e = dict(env.env, SANDGLASS_CONFIG=conf)
    e.pop("SANDGLASS_INGEST", None)
    log = os.path.join(env.root, "host-reload.log")
    with open(log, "w") as lf:
        d = subprocess.Popen([SANDGLASS, "host", "--metrics-listen", "127.0.0.1:0", "--name", "host-hup",
                              "--heartbeat", "1"], env=e, stdout=subprocess.PIPE, stderr=lf, text=True)
    env.procs.append(d)

    def logged(what: str) -> bool:
        with open(log, errors="replace") as f:
            return what in f.read()
    try:
        line = d.stdout.readline()
        d.send_signal(signal.SIGHUP)  # at once: the handler's, not the default action's (death)
        tap.ok(line.startswith("metrics on ") and await_true(lambda: logged("SIGHUP: reading"),
                                                             "the daemon logs the SIGHUP", timeout=T)
               and d.poll() is None, "sandglass host: SIGHUP right after its first line is handled, not fatal",
               line)
        await_true(lambda: logged("cannot register as host-hup"), "the wrong secret's registration is refused",
                   timeout=T)
        tap.ok("host-hup" not in ls_json(env, ing, secret), "with the config's wrong secret host-hup is not listed")
        write_conf(secret)
        d.send_signal(signal.SIGHUP)
        tap.ok(await_true(lambda: "host-hup" in ls_json(env, ing, secret), "host-hup registered", timeout=T) and
               logged("reload: registering as host-hup"),
               "SIGHUP: the config's new secret is read and the host registers", open(log).read()[-1500:])
        with open(conf, "a") as f:
            f.write("bogus = 1\n")
        d.send_signal(signal.SIGHUP)
        await_true(lambda: logged("(nothing changed)"), "a broken config's reload is refused", timeout=T)
        seen = ls_json(env, ing, secret)["host-hup"]["last_seen"]
        tap.ok(await_true(lambda: ls_json(env, ing, secret)["host-hup"]["last_seen"] > seen,
                          "host-hup keeps registering", timeout=T) and d.poll() is None,
               "a config that cannot be read: logged, nothing changed, the host keeps registering",
               open(log).read()[-1500:])
    finally:
        d.send_signal(signal.SIGTERM)
        rc = d.wait(timeout=T)
        clean("SIGHUP", "the reloaded host daemon", rc, open(log, errors="replace").read())


def escape_case(env, ing, secret, db):
    """A hostile store's row (the ingest refuses such a registration)
    reaches the terminal escaped."""
    reg = registration("host-esc")
    reg["sandboxes"][0]["learner"] = "ev\x1b]0;pwned\x07il"
    con = sqlite3.connect(db)
    con.execute("INSERT INTO sg_hosts (name, info, last_seen) VALUES (?, ?, ?)",
                ("host-esc", json.dumps(reg), int(time.time())))
    con.commit()
    con.close()
    p = ls_all(env, ing, secret)
    out = p.stdout
    tap.ok(p.returncode == 0 and b"host-esc" in out and b"\x1b" not in out and b"\x07" not in out,
           "a learner name with terminal escapes is printed escaped", repr(out[-400:]))


def run(where, a, b, store, secret, sa, sb, db=None):
    ing = Ingest(a, store, secret)
    try:
        listing_case(where, a, b, ing, secret, sa, sb)
        hostile_case(where, ing, secret)
        paging_case(where, a, ing, secret)
        if db:
            escape_case(a, ing, secret, db)
            reload_case(a, ing, secret)
    finally:
        clean(where, "the ingest", *ing.stop())


def main() -> int:
    if os.geteuid() != 0:
        tap.skip("hosts in the store", "needs root (real sandboxes)")
        tap.done()
        return 0
    a, b = Env(), Env()
    secret = os.path.join(a.root, "ingest-secret")
    try:
        sa = a.create("--learner", "alice")
        sb = b.create("--learner", "bob")
        p = a.run("host", "--ingest", "http://127.0.0.1:9", "--secret", os.path.join(a.root, "none"),
                  "--name", "h", timeout=T)
        tap.ok(p.returncode == 1 and b"needs its secret" in p.stderr,
               "a host whose ingest secret is missing is refused at start", p.stderr.decode())
        p = a.run("host", "--ingest", "http://127.0.0.1:9", "--name", "bad name", timeout=T)
        tap.ok(p.returncode == 2 and b"--name" in p.stderr, "a bad --name is refused", p.stderr.decode())
        p = a.run("host", "--heartbeat", "0", timeout=T)
        tap.ok(p.returncode == 2 and b"--heartbeat" in p.stderr, "--heartbeat 0 is refused", p.stderr.decode())
        # the config's ingest (Env sets SANDGLASS_INGEST) without its secret:
        # the daemon runs, unregistered, and says so
        d = b.spawn([SANDGLASS, "host", "--metrics-listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, text=True)
        line = d.stdout.readline()
        d.send_signal(signal.SIGTERM)
        rc, err = d.wait(timeout=T), d.stderr.read()
        tap.ok(line.startswith("metrics on ") and rc == 0 and "not registering with the ingest" in err,
               "the config's ingest without a secret: the daemon runs unregistered and says so", line + err)
        db = os.path.join(a.root, "events.db")
        run("SQLite", a, b, f"sqlite:{db}", secret, sa, sb, db)
        if subprocess.run(["bash", PG, "have"]).returncode != 0:
            tap.skip("PostgreSQL: hosts in the store", "PostgreSQL server binaries not found")
        else:
            tmp = tempfile.mkdtemp(prefix="sg-hosts-pg-")
            os.chmod(tmp, 0o711)  # the server runs as `postgres` when we are root
            pgdir, port = os.path.join(tmp, "pg"), free_port()
            try:
                run("PostgreSQL", a, b, pg("start", pgdir, port), secret, sa, sb)
            finally:
                try:
                    pg("stop", pgdir, port)
                except RuntimeError:
                    pass
                subprocess.run(["rm", "-rf", tmp])
    finally:
        a.cleanup()
        b.cleanup()
    tap.done()
    return 0


if __name__ == "__main__":
    sys.exit(main())
