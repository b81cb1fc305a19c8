#!/usr/bin/env python3
"""abort and destroy of a sandbox on another host, through that host's
serve (issue 26, "Many hosts, one store"; sandglass-abort(1),
sandglass-destroy(1), sandglass-serve(1) "POST /v1/abort").

Real parts only: one ingest on a loopback port (SQLite store), two hosts
on this machine with state directories of their own: host B runs
`sandglass serve` and `sandglass host --serve-url` (registering its
sandboxes), host A only the CLI.

- from A, `sandglass abort ID --ingest ...` of B's sandbox aborts it on B
  and prints what a local abort prints (--json too); `destroy ID` destroys
  it on B; a prefix is destroyed only with --yes;
- refusals name what went wrong: a sandbox no host lists, a host that
  registered no serve URL, a host whose serve cannot be reached;
- B's serve refuses, each with its reason: no token, an expired token, a
  replayed one (single use), a tampered one, one of another key, one for
  another sandbox, one for the other action, one that claims to live an
  hour, a read token (wrong kind), a body with an unknown field;
- over https (a CA the test makes): refused without --ingest-ca (the
  certificate is verified), done with it.

No check depends on speed: every wait polls for its event with a deadline.
TAP output."""

import json
import os
import secrets
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import SANDGLASS, Env, await_true, make_ca, make_cert, refused_port, tap, wait_for  # noqa: E402
from test_hosts import Host, Ingest, clean, ls_json, mint, post, registration  # noqa: E402

T = 60


class Serve:
    def __init__(self, env: Env, secret: str, *tls: str):
        self.log = os.path.join(env.root, f"serve-{len(env.procs)}.log")
        with open(self.log, "w") as log:
            self.p = env.spawn([SANDGLASS, "serve", "--listen", "127.0.0.1:0", "--secret", secret, *tls],
                               stdout=subprocess.PIPE, stderr=log, text=True)
        line = self.p.stdout.readline()
        scheme = "https" if tls else "http"
        if not line.startswith(f"serving terminals on {scheme}://127.0.0.1:"):
            raise RuntimeError(f"serve did not start: {line!r}")
        self.port = int(line.strip().rstrip("/").rsplit(":", 1)[1])
        self.url = f"{scheme}://127.0.0.1:{self.port}"

    def stop(self):
        self.p.terminate()
        rc = self.p.wait(timeout=T)
        with open(self.log, errors="replace") as f:
            return rc, f.read()


def action(port: int, what: str, token: str | None, body: dict | bytes):
    """POST /v1/<what> to a serve: (status, the answer's JSON)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return post(port, token, data, path=f"/v1/{what}")


def state_of(env: Env, sid: str):
    return next((s.get("state") for s in env.ls() if s["id"] == sid), None)


def remote_cases(a: Env, b: Env, ing: Ingest, secret: str, sbs: list[str]):
    opts = ["--ingest", ing.url, "--secret", secret]
    s1, s2, s3, s4 = sbs

    p = a.run("abort", s1, "--reason", "remote test", *opts, timeout=T)
    out = p.stdout.decode()
    tap.ok(p.returncode == 0 and out.startswith(f"aborted {s1} (by operator: remote test)\n") and
           "proof: the cgroup holds only init: yes" in out,
           "abort from host A of host B's sandbox: aborted, with the proof, as a local abort prints it",
           out + p.stderr.decode())
    tap.eq(state_of(b, s1), "aborted", "the sandbox is aborted on host B")
    p = a.run("abort", s1, "--json", *opts, timeout=T)
    try:
        j = json.loads(p.stdout)
    except ValueError:
        j = {}
    tap.ok(p.returncode == 0 and j.get("already") is True, "abort --json again: the JSON of a local abort "
           "(already aborted)", p.stdout.decode() + p.stderr.decode())
    # s4 is captured: its session_abort, in the store, names who acted
    p = a.run("abort", s4, *opts, timeout=T)
    tap.ok(p.returncode == 0, "abort from host A of host B's captured sandbox", p.stderr.decode())

    def abort_actor() -> dict:
        q = b.run("events", "--sandbox", s4, "--json", "--ingest", ing.url, "--secret", secret, timeout=T)
        rows = [json.loads(line) for line in q.stdout.decode().splitlines() if line.startswith("{")]
        return next((r["payload"].get("actor") or {} for r in rows if r.get("kind") == "session_abort"), {})
    tap.ok(wait_for(lambda: abort_actor().get("via", "").startswith("remote: "), 30) and
           abort_actor()["via"].count("@") == 1 and len(abort_actor()["via"]) > len("remote: @"),
           "the session_abort's actor names who asked from the other host (via \"remote: USER@HOST\"), beside "
           "host B's operator that ran it", repr(abort_actor()))

    p = a.run("destroy", s1[:6], *opts, timeout=T)
    tap.ok(p.returncode == 1 and b"--yes" in p.stderr and state_of(b, s1) is not None,
           "destroy of another host's sandbox by a prefix, no terminal: refused without --yes", p.stderr.decode())
    p = a.run("destroy", s1, "--json", *opts, timeout=T)
    try:
        j = json.loads(p.stdout)
    except ValueError:
        j = {}
    tap.ok(p.returncode == 0 and j.get("destroyed") == s1 and j.get("cgroup_empty") is True,
           "destroy from host A of host B's sandbox: the proof of a local destroy", p.stdout.decode() +
           p.stderr.decode())
    tap.eq(state_of(b, s1), None, "the sandbox is gone from host B")
    p = a.run("destroy", s2[:6], "--yes", *opts, timeout=T)
    tap.ok(p.returncode == 0 and p.stdout.decode() == f"destroyed {s2}\n" and state_of(b, s2) is None,
           "destroy by a prefix with --yes: destroyed on host B", p.stdout.decode() + p.stderr.decode())

    p = a.run("abort", "feedfacecafe", *opts, timeout=T)
    tap.ok(p.returncode == 1 and b"no sandbox 'feedfacecafe' here nor on any host registered" in p.stderr,
           "a sandbox no host lists: named", p.stderr.decode())
    now = int(time.time())
    for name, url, sid in (("host-c", f"http://127.0.0.1:{refused_port().getsockname()[1]}", "cccccccccccc"),
                           ("host-d", None, "dddddddddddd")):
        reg = registration(name, serve_url=url, heartbeat_s=60)
        reg["sandboxes"][0]["id"] = sid
        st, ans = post(ing.port, mint(secret, {"h": name, "exp": now + 300}), json.dumps(reg).encode())
        tap.ok(st == 200, f"{name} registered by hand", f"{st} {ans}")
    p = a.run("abort", "cccccccccccc", *opts, timeout=T)
    tap.ok(p.returncode == 1 and b"host host-c is unreachable (its serve at http://127.0.0.1:" in p.stderr,
           "a host whose serve does not answer: unreachable, named", p.stderr.decode())
    p = a.run("destroy", "dddddddddddd", *opts, timeout=T)
    tap.ok(p.returncode == 1 and b"host-d, which registered no serve URL" in p.stderr,
           "a host with no serve URL: named", p.stderr.decode())
    p = a.run("abort", "cccccccccccc", "--ingest", ing.url, "--token", "x.y", "--secret",
              os.path.join(a.root, "none"), timeout=T)
    tap.ok(p.returncode == 1 and b"ingest answered HTTP 401" in p.stderr,
           "a bad read token: the ingest's refusal is named", p.stderr.decode())
    return s3


def serve_cases(b: Env, srv: Serve, secret: str, sid: str, other: str):
    now = int(time.time())

    def tok(claims: dict, key: bytes | None = None) -> str:
        base = {"a": "abort", "s": sid, "n": secrets.token_hex(16), "exp": now + 60}
        base.update(claims)
        return mint(secret, base, key)

    def refused(name, what, token, body, status, want):
        st, ans = action(srv.port, what, token, body)
        tap.ok(st == status and want in ans.get("error", ""), f"serve refuses {name} ({status})", f"{st} {ans}")

    body = {"sandbox": sid}
    refused("an action without a token", "abort", None, body, 401, "missing action token")
    refused("an expired token", "abort", tok({"exp": now - 1}), body, 401, "token expired")
    refused("a token of another key", "abort", tok({}, key=b"k" * 32), body, 401, "bad signature")
    good = tok({})
    claims, sig = good.split(".")
    bent = ("A" if claims[5] != "A" else "B").join([claims[:5], claims[6:]]) + "." + sig
    refused("a tampered token", "abort", bent, body, 401, "")
    refused("a token that claims to live an hour", "abort", tok({"exp": now + 3600}), body, 401, "lives too long")
    refused("a read token (wrong kind)", "abort", mint(secret, {"r": 1, "exp": now + 60}), body, 401,
            "not an action token")
    refused("an abort token on /v1/destroy", "destroy", tok({}), body, 403, "may abort, not destroy")
    refused("a token for another sandbox", "abort", tok({}), {"sandbox": other}, 403, "wrong sandbox")
    refused("a body with an unknown field", "abort", tok({}), {"sandbox": sid, "x": 1}, 400, "does not take")
    for bad in ("eve", "eve@a@b", "ev e@host", "eve@\x1b[31mred", "e" * 60 + "@host"):
        refused(f"a body whose asker is not USER@HOST ({bad!r})", "abort", tok({}), {"sandbox": sid, "by": bad}, 400,
                "by: USER@HOST")
    tap.eq(state_of(b, sid), "running", "none of those touched the sandbox")
    st, ans = action(srv.port, "abort", good, {"sandbox": sid, "reason": "by hand"})
    tap.ok(st == 200 and ans.get("aborted") is True and "by hand" in ans.get("reason", ""),
           "a good action token aborts (200, the abort's JSON)", f"{st} {ans}")
    refused("the same token again (replayed)", "abort", good, {"sandbox": sid}, 401, "already used")
    st, ans = action(srv.port, "destroy", tok({"a": "destroy", "s": "feedfacecafe"}), {"sandbox": "feedfacecafe"})
    tap.ok(st == 409 and "no sandbox 'feedfacecafe'" in ans.get("error", ""),
           "a destroy of a sandbox this host does not have: the local command's error (409)", f"{st} {ans}")


def tls_case(a: Env, b: Env, ing: Ingest, secret: str):
    """Host B's serve on https: the CLI verifies it by --ingest-ca, and
    refuses it without the CA that signed it. B's host daemon is stopped:
    the host is registered by hand, listing a sandbox made since."""
    pki = os.path.join(a.root, "pki")
    os.makedirs(pki)
    make_ca(pki, "ca")
    make_cert(pki, "serve", "IP:127.0.0.1")
    sid = b.create("--learner", "carol")
    srv = Serve(b, secret, "--tls-cert", os.path.join(pki, "serve.pem"), "--tls-key", os.path.join(pki, "serve.key"))
    try:
        reg = registration("host-tls", serve_url=srv.url, heartbeat_s=60)
        reg["sandboxes"][0]["id"] = sid
        st, ans = post(ing.port, mint(secret, {"h": "host-tls", "exp": int(time.time()) + 300}),
                       json.dumps(reg).encode())
        tap.ok(st == 200, "host-tls registered with an https serve URL", f"{st} {ans}")
        opts = ["--ingest", ing.url, "--secret", secret]
        p = a.run("abort", sid, *opts, timeout=T)
        tap.ok(p.returncode == 1 and b"TLS with serve at 127.0.0.1:" in p.stderr and
               b"certificate verify failed" in p.stderr and state_of(b, sid) == "running",
               "https serve, no CA given: refused (certificate verify failed), nothing done", p.stderr.decode())
        p = a.run("abort", sid, "--ingest-ca", os.path.join(pki, "ca.pem"), *opts, timeout=T)
        tap.ok(p.returncode == 0 and p.stdout.decode().startswith(f"aborted {sid} ") and state_of(b, sid) == "aborted",
               "https serve verified by --ingest-ca: aborted", p.stdout.decode() + p.stderr.decode())
        p = a.run("destroy", sid, "--ingest-ca", os.path.join(pki, "ca.pem"), *opts, timeout=T)
        tap.ok(p.returncode == 0 and state_of(b, sid) is None, "and destroyed over https",
               p.stdout.decode() + p.stderr.decode())
    finally:
        clean("host B", "its https serve", *srv.stop())


def main() -> int:
    if os.geteuid() != 0:
        tap.skip("abort and destroy on another host", "needs root (real sandboxes)")
        tap.done()
        return 0
    a, b = Env(), Env()
    secret = os.path.join(a.root, "ingest-secret")
    try:
        sbs = [b.create("--learner", "bob") for _ in range(3)]
        ing = Ingest(a, f"sqlite:{os.path.join(a.root, 'events.db')}", secret)
        sbs.append(b.create("--learner", "bob", "--task", "remote", "--ingest", ing.url.replace("http:", "ws:"),
                            "--secret", secret))
        srv = Serve(b, secret)
        # a heartbeat of 600 s: what the store learns sooner comes from the
        # host daemon's watch of its sandboxes
        host = Host(b, ing, secret, "host-b", "--serve-url", srv.url, "--heartbeat", "600")
        listed = lambda: {s["id"] for s in ls_json(a, ing, secret).get("host-b", {}).get("sandboxes", [])}  # noqa: E731
        try:
            await_true(lambda: listed() == set(sbs), "host-b registered its sandboxes", timeout=T)
            fresh = b.create("--learner", "dave")
            await_true(lambda: fresh in listed(), "a sandbox made on host B is in the store within seconds, "
                       "not at the next heartbeat (600 s)", timeout=T)
            b.run("destroy", fresh, timeout=T)
            await_true(lambda: fresh not in listed(), "and one destroyed leaves it as soon", timeout=T)
            s3 = remote_cases(a, b, ing, secret, sbs)
            serve_cases(b, srv, secret, s3, sbs[0])
            clean("host B", "its host daemon", *host.stop())
            tls_case(a, b, ing, secret)
        finally:
            if host.p.poll() is None:
                clean("host B", "its host daemon", *host.stop())
            rc, log = srv.stop()
            clean("host B", "serve", rc, log)
            tap.ok("refused abort" in log and "abort of " in log, "serve logs the actions and the refusals",
                   log[-2000:])
            clean("the ingest", "the ingest", *ing.stop())
    finally:
        a.cleanup()
        b.cleanup()
    tap.done()
    return 0


if __name__ == "__main__":
    sys.exit(main())
