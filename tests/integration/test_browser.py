"""Issue 16: the learner's terminal in a browser. `sandglass serve` on the
sandbox host serves web/terminal.html (xterm.js) and relays a WebSocket to
`sandglass shell` of one sandbox, authorized by a terminal token. A real
browser (Debian's chromium, driven by playwright-core) types a command,
reads it on the screen, resizes, and the command is then found in the
ingest's store; a Node WebSocket client checks every refusal."""
from __future__ import annotations

import json
import os
import queue
import shutil
import sqlite3
import subprocess
import threading
import time

from sgtest import SANDGLASSD, Env, cgroup_pids, cmdline, tap, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODE_DIR = os.path.join(ROOT, "tests", "node")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

env = Env()
secret = os.path.join(env.root, "secret")
db = os.path.join(env.root, "events.db")


def start(args: list[str], marker: str) -> tuple[subprocess.Popen, int]:
    log = open(os.path.join(env.root, f"{args[0]}.log"), "a")
    p = subprocess.Popen([SANDGLASSD, *args], stdout=subprocess.PIPE, stderr=log, env=env.env, text=True)
    log.close()
    line = p.stdout.readline()
    if marker not in line:
        p.kill()
        raise RuntimeError(f"{args[0]} did not start: {line!r}")
    return p, int(line.strip().rstrip("/").rsplit(":", 1)[1])


with open(os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
    f.write(os.urandom(32).hex() + "\n")  # the secret both share (serve starts first: its port is the ingest's --serve)
serve, port = start(["serve", "--listen", "127.0.0.1:0", "--secret", secret], "serving terminals on http://")
# The console's watch page connects to this serve (and no other host).
ingest, ingest_port = start(["ingest", "--listen", "127.0.0.1:0", "--store", f"sqlite:{db}",
                             "--secret", secret, "--serve", f"http://127.0.0.1:{port}"], "listening on ws://")
sid = env.create("--learner", "ada", "--task", "t1", "--ingest", f"ws://127.0.0.1:{ingest_port}",
                 "--secret", secret)
other = env.create("--learner", "bob", "--task", "t1", "--ingest", f"ws://127.0.0.1:{ingest_port}",
                   "--secret", secret)


def token(*args: str) -> str:
    p = env.run("token", "--secret", secret, *args)
    return p.stdout.decode().strip()


def ws(script: dict) -> dict:
    return ws_all([script], jobs=1)[0]


def ws_all(scripts: list[dict], jobs: int = 4) -> list[dict]:
    """The conversations, each on a connection of its own, `jobs` at a
    time in one Node client: their results in the scripts' order."""
    p = subprocess.run(["node", os.path.join(NODE_DIR, "terminal_ws.mjs"), str(port),
                        json.dumps({"all": scripts, "jobs": jobs})],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120, cwd=NODE_DIR)
    try:
        got = json.loads(p.stdout.strip().splitlines()[-1])
        if isinstance(got, list) and len(got) == len(scripts):
            return got
    except (ValueError, IndexError):
        pass
    return [{"error": f"no answer from the client: {p.stdout[-500:]!r} {p.stderr[-500:]!r}"}] * len(scripts)


class Browser:
    """One chromium for the program's browser cases (browser_cases.mjs):
    launched while the first cases run, each case in a context of its own."""

    def __init__(self) -> None:
        self.proc = None
        self.lines: queue.Queue = queue.Queue()
        if os.path.exists(os.path.join(NODE_DIR, "node_modules", "playwright-core")):
            self.proc = subprocess.Popen(["node", os.path.join(NODE_DIR, "browser_cases.mjs"), CHROMIUM],
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True, cwd=NODE_DIR)
            env.procs.append(self.proc)
            threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def run(self, module: str, *args: str, timeout: float = 240) -> dict:
        """The case's result, or {"ok": False, "error"} saying why none came."""
        if self.proc is None:
            return {"ok": False, "error": "playwright-core is not installed (npm install in tests/node)"}
        try:
            self.proc.stdin.write(json.dumps({"module": module, "args": args}) + "\n")
            self.proc.stdin.flush()
        except OSError as e:
            return {"ok": False, "error": f"the browser's node process is gone: {e}"}
        end, seen = time.monotonic() + timeout, []
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, end - time.monotonic()))
            except queue.Empty:
                return {"ok": False, "error": f"no result from {module} in {timeout} s: {''.join(seen)[-1000:]}"}
            if line is None:
                return {"ok": False, "error": f"the browser's node process ended: {''.join(seen)[-1000:]} "
                                              f"{self.proc.stderr.read()[-1000:]}"}
            if line.startswith("RESULT "):
                try:
                    return json.loads(line[len("RESULT "):])
                except ValueError:
                    return {"ok": False, "error": line[-1000:]}
            seen.append(line)

    def close(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


browser = Browser()


def http(path: str) -> tuple[int, str]:
    p = subprocess.run(["curl", "-s", "-o", "-", "-w", "\n%{http_code}", f"http://127.0.0.1:{port}{path}"],
                       stdout=subprocess.PIPE, text=True, timeout=30)
    body, _, code = p.stdout.rpartition("\n")
    return int(code or 0), body


@tap.case("the page and xterm.js are served; anything else is a JSON 404")
def _http():
    code, body = http("/")
    tap.ok(code == 200 and "/xterm.js" in body and "/terminal.js" in body, "GET / is the terminal page", body[:200])
    code, body = http("/xterm.js")
    tap.ok(code == 200 and "Terminal" in body, "GET /xterm.js is xterm.js")
    code, body = http("/healthz")
    tap.eq((code, json.loads(body).get("ok")), (200, True), "GET /healthz")
    code, body = http("/../../etc/passwd")
    tap.ok(code in (400, 403, 404) and "root:" not in body, "no path leaves the web directory", f"{code} {body[:100]}")
    code, body = http("/v1/terminal")
    tap.ok(code == 400 and "upgrade" in body, "the terminal path without an upgrade is a 400", body)
    # issue 22: no other site may frame the page (it could lay itself over
    # the terminal and catch what the learner types).
    p = subprocess.run(["curl", "-s", "-D", "-", "-o", "/dev/null", f"http://127.0.0.1:{port}/"],
                       stdout=subprocess.PIPE, text=True, timeout=30)
    hdrs = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in p.stdout.splitlines()[1:]) if v}
    tap.ok("frame-ancestors 'none'" in hdrs.get("content-security-policy", ""),
           "the page's CSP has frame-ancestors 'none'", hdrs.get("content-security-policy", ""))
    tap.eq(hdrs.get("x-frame-options"), "DENY", "and X-Frame-Options: DENY")


@tap.case("a real browser: prompt, a typed command on screen, resize, exit")
def _browser():
    if not os.path.exists(os.path.join(NODE_DIR, "node_modules", "playwright-core")):
        tap.ok(False, "playwright-core is installed (npm install in tests/node)")
        return
    tap.ok(os.access(CHROMIUM, os.X_OK), f"Debian's chromium is installed ({CHROMIUM})")
    tok = token("--terminal", "--sandbox", sid)
    r = browser.run("browser_terminal.mjs", f"http://127.0.0.1:{port}/#token={tok}")
    tap.ok(r.get("ok"), "the browser saw the prompt, the output, the new size and the end", r.get("error", ""))
    tap.eq(r.get("steps"), ["prompt", "command output", "size after resize", "exit"], "in that order")
    tap.ok(r.get("size_before") and r.get("size_after") and r["size_before"] != r["size_after"],
           "a larger window is a larger terminal (stty size inside)", f"{r.get('size_before')} -> {r.get('size_after')}")
    tap.eq(r.get("status"), "the shell ended (7)", "the page says how the shell ended")
    tap.ok(r.get("url_after") and "token" not in r["url_after"], "the token left the page's URL and history at load",
           r.get("url_after", ""))
    h = r.get("headers") or {}
    tap.ok("frame-ancestors 'none'" in h.get("content-security-policy", "") and h.get("x-frame-options") == "DENY",
           "the browser got the page with frame-ancestors 'none' and X-Frame-Options", json.dumps(h)[:300])
    tap.eq(r.get("framed"), False, "another page cannot show the terminal page in a frame")

    # Captured: the shell is an exec (command, run_result 7), and what was
    # typed in it left its trail (the process events of /bin/echo).
    def rows():
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
        try:
            return con.execute("SELECT kind, payload FROM sg_events WHERE sandbox=? ORDER BY seq", (sid,)).fetchall()
        finally:
            con.close()
    env.run("flush", sid)  # best effort: events reach the store as they come anyway

    def found():
        ev = [(k, json.loads(p)) for k, p in rows()]
        typed = [p for k, p in ev if k == "command" and p.get("cmd", "").startswith("/bin/echo browser-")]
        return (any(k == "command" and p.get("cmd") == "/bin/sh /etc/sandglass/shell" for k, p in ev) and
                typed and any(k == "stdout" and "browser-42" in p.get("data", "") and
                              p.get("exec_id") == typed[0].get("exec_id") for k, p in ev) and
                any(k == "run_result" and p.get("exit_code") == 7 for k, p in ev))
    tap.ok(wait_for(found, 60), "the store holds the shell's exec, the command typed in the page with its "
           "output, and the shell's exit status 7", repr(rows()[-14:]))


@tap.case("a teacher watches the learner's terminal from the console (issue 25)")
def _watch():
    term_tok = token("--terminal", "--sandbox", sid)
    read_tok = token("--read")
    r = browser.run("browser_watch.mjs", f"http://127.0.0.1:{port}/#token={term_tok}",
                    f"http://127.0.0.1:{ingest_port}/?token={read_tok}", sid)
    tap.ok(r.get("ok"), "the console's watch link opened the watch page, which showed the learner's screen, "
           "then its output live, until it ended",
           r.get("error", ""))
    tap.eq(r.get("steps"), ["learner prompt", "learner output", "watch link", "watch replay", "learner told", "watch live",
                            "watch after", "watch closed"], "in that order")
    tap.ok(r.get("watched") == "watched by 1", "the learner's page says it is watched", repr(r.get("watched")))
    tap.eq(r.get("teacher_typed"), False, "keys typed into the watch page reach no terminal")
    tap.ok(r.get("url_after") and "token" not in r["url_after"] and r["url_after"].endswith(f"/watch.html#/{sid}"),
           "the watch page's URL names the sandbox, and holds no token",
           r.get("url_after", ""))
    csp = r.get("watch_csp", "")
    tap.ok(f"connect-src 'self' ws://127.0.0.1:{port};" in csp and "script-src 'self';" in csp and
           "trusted-types 'none'" in csp, "the watch page may connect to the ingest and the named serve only", csp)
    hosts = {u.split("/")[2] for u in r.get("requests", []) if "://" in u}
    tap.ok(hosts <= {f"127.0.0.1:{ingest_port}", f"127.0.0.1:{port}"}, "nothing loaded from another host",
           repr(sorted(hosts)))
    tap.eq(r.get("violations"), [], "no policy violation and no error on the watch page")


@tap.case("refusals: each one a reason, and the server keeps serving")
def _refusals():
    tok = token("--terminal", "--sandbox", sid)
    read_tok = token("--read", "--sandbox", sid)
    stream_tok = token("--learner", "ada", "--task", "t1", "--sandbox", sid)
    cases = [
        ("a read token", {"send": [{"text": json.dumps({"token": read_tok, "rows": 24, "cols": 80})}]},
         "a read token cannot open a terminal"),
        ("a stream token", {"send": [{"text": json.dumps({"token": stream_tok, "rows": 24, "cols": 80})}]},
         "a stream token cannot open a terminal"),
        ("a forged token", {"send": [{"text": json.dumps({"token": tok[:-4] + "AAAA", "rows": 24, "cols": 80})}]},
         "bad signature"),
        ("keystrokes before the token", {"send": [{"binary": "ls\r"}]}, "send the token first"),
        ("not JSON", {"send": [{"text": "hello"}]}, "a text message is a JSON object"),
        ("a size out of range", {"send": [{"text": json.dumps({"token": tok, "rows": 0, "cols": 80})}]},
         "the first message is"),
        ("an unknown key", {"send": [{"text": json.dumps({"token": tok, "rows": 24, "cols": 80, "x": 1})}]},
         "the first message is"),
        ("a text message over 4 KiB", {"send": [{"text": "x" * 5000}]}, "at most 4096 bytes"),
        ("no token in time", {"send": [], "timeout_ms": 20000}, "no token within 5 s"),
    ]
    # side by side, a few at a time (each on its own connection, as many
    # browsers would): the slowest, no token in time, waits out serve's 5 s
    # beside the others
    handshakes = [{"send": [{"text": "hello"}]}, {"protocol": None, "send": []}, {"protocol": "other", "send": []},
                  {"path": "/v1/other", "send": []}]
    got = ws_all([script for _, script, _ in cases] + handshakes)
    for (name, script, why), r in zip(cases, got):
        tap.ok(r.get("close_code") == 1008 and why in (r.get("close_reason") or ""),
               f"{name}: closed 1008 with the reason", json.dumps(r)[:400])
        tap.ok(any(why in t for t in r.get("texts", [])), f"{name}: and said so as {{\"error\"}} first",
               json.dumps(r.get("texts")))
    # A refusal at the handshake: the client ran and reported, reached a
    # serve that is up (not ECONNREFUSED), and the server ended the upgrade
    # (an HTTP answer, or it hung up) - not opened. The same client with the
    # right path and subprotocol opens (a control: the refusals are the
    # server's, not the client's). An empty subprotocol string never left
    # the client ("invalid subprotocol"): null asks for none.
    def refused_at_handshake(r: dict) -> bool:
        return ("opened" in r and not r["opened"] and serve.poll() is None and
                (r.get("http_status") in (400, 403, 404) or r.get("error") == "socket hang up"))
    r = got[len(cases)]
    tap.ok(r.get("opened") is True and r.get("close_code") == 1008, "the same client with the subprotocol opens",
           json.dumps(r)[:300])
    r = got[len(cases) + 1]
    tap.ok(refused_at_handshake(r), "a WebSocket without the subprotocol is refused at the handshake",
           json.dumps(r)[:300])
    r = got[len(cases) + 2]
    tap.ok(refused_at_handshake(r), "a WebSocket with another subprotocol is refused at the handshake",
           json.dumps(r)[:300])
    r = got[len(cases) + 3]
    tap.ok(refused_at_handshake(r), "a WebSocket on another path is refused", json.dumps(r)[:300])
    # A token of another learner's sandbox does not open this one's: the
    # sandbox is the token's, and its record must name the same learner.
    bob_tok = token("--terminal", "--sandbox", other)
    r = ws({"send": [{"text": json.dumps({"token": bob_tok, "rows": 24, "cols": 80})},
                     {"binary": "echo I-am-$(id -u)-in-$(hostname)\rexit 0\r"}], "timeout_ms": 30000})
    tap.ok(r.get("close_code") == 1000 and "I-am-" in r.get("output", ""), "bob's token opens bob's sandbox", json.dumps(r)[:300])
    code, body = http("/healthz")
    tap.eq(code, 200, "the server still answers after every refusal")
    tap.ok(serve.poll() is None, "and is still running")


@tap.case("a destroyed sandbox ends its terminal with a reason; the token no longer opens anything")
def _destroyed():
    tok = token("--terminal", "--sandbox", other)
    p = subprocess.Popen(["node", os.path.join(NODE_DIR, "terminal_ws.mjs"), str(port), json.dumps(
        {"send": [{"text": json.dumps({"token": tok, "rows": 24, "cols": 80})}, {"binary": "sleep 100\r"}],
         "timeout_ms": 60000})], stdout=subprocess.PIPE, text=True, cwd=NODE_DIR)
    tap.ok(wait_for(lambda: any(cmdline(q).startswith("sleep") for q in cgroup_pids(other)), 30),
           "the shell runs sleep")
    env.run("destroy", other)
    out, _ = p.communicate(timeout=60)
    r = json.loads(out.strip().splitlines()[-1])
    tap.ok(r.get("close_code") in (1000, 1008) and not r.get("timed_out"), "the browser's connection ends", json.dumps(r)[:300])
    r = ws({"send": [{"text": json.dumps({"token": tok, "rows": 24, "cols": 80})}]})
    tap.ok(r.get("close_code") == 1008 and "no such sandbox" in (r.get("close_reason") or ""),
           "a token for a destroyed sandbox is refused", json.dumps(r)[:300])


try:
    browser.close()
    # while its ingest runs: a captured sandbox whose ingest is gone waits
    # out its delivery (10 s) at destroy
    env.run("destroy", sid)
    serve.terminate()
    serve.wait(timeout=30)
    tap.eq(serve.returncode, 0, "serve stops cleanly on SIGTERM")
finally:
    ingest.terminate()
    ingest.wait(timeout=30)
    env.cleanup()
    tap.done()
