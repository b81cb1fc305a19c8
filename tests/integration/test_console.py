"""Issue 25, the console: the ingest serves the teachers' web console at /
(web/console). Its page and scripts need no token and carry strict headers;
every read needs a read token (401 without one). A real browser (Debian's
chromium, driven by playwright-core: tests/node/browser_console.mjs) opens
it with a token link (the token leaves the URL), lists the sessions,
filters them, sees an exec update the list live, opens a session and a
diff, sees an exec made meanwhile appear (pushed, no reload), and reads a
session full of hostile names and output as plain text with nothing run:
no dialog, no page error, no CSP violation, no element but text.
SG_CONSOLE_SCREENSHOTS=DIR also writes console-sessions.png and
console-session.png there (docs/)."""
from __future__ import annotations

import http.client
import http.server
import json
import os
import shutil
import subprocess
import threading

from sgtest import SANDGLASS, SANDGLASSD, Env, tap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODE_DIR = os.path.join(ROOT, "tests", "node")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"

env = Env()
env.env["SANDGLASS_WEB_DIR"] = os.path.join(ROOT, "web")
secret = os.path.join(env.root, "secret")
db = os.path.join(env.root, "events.db")

def start_ingest(listen: str) -> tuple[subprocess.Popen, int]:
    with open(os.path.join(env.root, "ingest.log"), "a") as log:
        p = subprocess.Popen([SANDGLASSD, "ingest", "--listen", listen, "--store", f"sqlite:{db}",
                              "--secret", secret], stdout=subprocess.PIPE, stderr=log, env=env.env, text=True)
    env.procs.append(p)
    line = p.stdout.readline()
    assert "listening on ws://" in line, line
    return p, int(line.strip().rstrip("/").rsplit(":", 1)[1])


ingest, port = start_ingest("127.0.0.1:0")
base = f"http://127.0.0.1:{port}/"
ws = f"ws://127.0.0.1:{port}"


def token(*args: str) -> str:
    return env.run("token", "--secret", secret, *args, check=True).stdout.decode().strip()


def curl(path: str, *extra: str) -> tuple[int, dict, str]:
    p = subprocess.run(["curl", "-s", "-D", "-", "-o", "-", *extra, base + path.lstrip("/")],
                       stdout=subprocess.PIPE, text=True, timeout=30)
    head, _, body = p.stdout.partition("\n\n")  # text mode: CR-LF read as LF
    lines = head.splitlines()
    code = int(lines[0].split()[1]) if lines else 0
    hdrs = {k.strip().lower(): v.strip() for k, _, v in (l.partition(":") for l in lines[1:])}
    return code, hdrs, body


class Proxy(http.server.BaseHTTPRequestHandler):
    """A reverse proxy that puts the ingest under /sg/ (as a school's web
    server would): GETs forwarded with their headers, answers streamed as
    they come (the pushed stream too)."""
    PREFIX = "/sg/"

    def do_GET(self):  # noqa: N802 (http.server's name)
        if not self.path.startswith(self.PREFIX):
            self.send_error(404)
            return
        up = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        hdrs = {k: v for k, v in self.headers.items() if k.lower() in ("authorization", "accept", "last-event-id")}
        up.request("GET", "/" + self.path[len(self.PREFIX):], headers=hdrs)
        res = up.getresponse()
        self.send_response(res.status)
        for k, v in res.getheaders():
            if k.lower() not in ("connection", "transfer-encoding", "content-length"):
                self.send_header(k, v)
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            while True:
                chunk = res.read1(65536)
                if not chunk:
                    break
                self.wfile.write(chunk)
                self.wfile.flush()
        except OSError:
            pass
        up.close()

    def log_message(self, *args):
        pass


proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
proxy.daemon_threads = True
threading.Thread(target=proxy.serve_forever, daemon=True).start()

sid = env.create("--learner", "ada", "--task", "t1", "--ingest", ws, "--secret", secret)
env.sh(sid, "printf 'first line\\nsecond\\n' > notes.txt; echo wrote notes")
env.sh(sid, "printf 'first line\\nchanged\\n' > notes.txt; ls")
env.sh(sid, "printf 'def test_one():\\n    assert 1\\ndef test_two():\\n    assert 1 == 2\\n' > test_a.py")
env.exec(sid, "python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_a.py")
other = env.create("--learner", "bob", "--task", "t2", "--ingest", ws, "--secret", secret)
env.sh(other, "echo bob was here")

# Hostile: output, file names, a failing test's name, an abort's reason.
evil = env.create("--learner", "eve@-.x", "--task", "t.-@1", "--ingest", ws, "--secret", secret)
HOSTILE = ("printf '<script>alert(1)</script>\\n\"><img src=x onerror=alert(2)>\\n"
           "javascript:alert(3)\\nab\\342\\200\\256cd zw\\342\\200\\213x \\033[31mred\\033[0m \\033]0;title\\007\\n'; "
           "printf '<script>alert(1)</script>' > '\"><img src=x onerror=alert(2)>.txt'; "
           "printf x > 'javascript:alert(3)'; printf y > \"$(printf 'rev\\342\\200\\256txt.exe')\"; "
           "mkdir -p t && printf 'import pytest\\n@pytest.mark.parametrize(\"v\", [\"<script>alert(1)</script>\"])\\n"
           "def test_p(v):\\n    assert 0\\n' > t/test_h.py")
env.sh(evil, HOSTILE)
env.exec(evil, "python3", "-m", "pytest", "-q", "t")
env.run("abort", evil, "--reason", "<img src=x onerror=alert(4)> \u202e")
env.run("flush", sid, evil, other)


@tap.case("the page: no token needed, strict headers; every read: 401 without a token")
def _http():
    code, h, body = curl("/")
    tap.ok(code == 200 and "console.js" in body and "<script type=\"module\" src=\"console.js\">" in body,
           "GET / is the console page (relative links)", body[:200])
    csp = h.get("content-security-policy", "")
    for part in ("default-src 'none'", "script-src 'self'", "style-src 'self'", "connect-src 'self'",
                 "frame-ancestors 'none'", "require-trusted-types-for 'script'"):
        tap.ok(part in csp, f"CSP has {part}", csp)
    tap.ok("unsafe" not in csp, "CSP allows no unsafe-inline / unsafe-eval", csp)
    tap.eq((h.get("x-content-type-options"), h.get("x-frame-options")), ("nosniff", "DENY"),
           "nosniff and X-Frame-Options: DENY")
    code, h, body = curl("/console.js")
    tap.ok(code == 200 and h.get("content-type", "").startswith("text/javascript"), "a script, as JavaScript")
    files = sorted(os.listdir(os.path.join(ROOT, "web", "console")))
    served = [f for f in files if curl("/" + f)[0] == 200]
    tap.eq(served, files, "every file of web/console is served (and the page's imports are all there)")
    for path in ("/v1/sessions", "/v1/events", f"/v1/events?sandbox={sid}", "/v1/stream", "/v1/sandboxes",
                 "/console.js/../v1/events", "/web/console/index.html", "/../../etc/passwd"):
        code, h, body = curl(path)
        tap.ok(code in (401, 404) and "root:" not in body and "ada" not in body,
               f"{path} without a token: nothing", f"{code} {body[:120]}")
    code, h, body = curl("/v1/sessions")
    tap.eq(code, 401, "GET /v1/sessions without a token: 401")
    code, h, body = curl("/v1/sessions", "-H", "Authorization: Bearer " + token("--read")[:-4] + "AAAA")
    tap.eq(code, 401, "a forged token: 401")
    code, h, body = curl("/v1/sessions", "-H", "Authorization: Bearer " + token("--read"))
    tap.ok(code == 200 and sid in body, "with a read token: the sessions", body[:200])
    tap.eq((h.get("cache-control"), h.get("x-content-type-options")), ("no-store", "nosniff"),
           "an API answer: Cache-Control: no-store, nosniff")


@tap.case("a real browser: token, list, filter, live, a session, a diff, hostile content")
def _browser():
    if not os.path.exists(os.path.join(NODE_DIR, "node_modules", "playwright-core")):
        tap.ok(False, "playwright-core is installed (npm install in tests/node)")
        return
    tap.ok(os.access(CHROMIUM, os.X_OK), f"Debian's chromium is installed ({CHROMIUM})")
    marker = "live-7f3a"
    plan = {
        "base": base, "token": token("--read"), "scoped_token": token("--read", "--sandbox", other),
        "learner": "ada", "task": "t1", "sandbox": sid,
        "hostile": {"learner": "eve@-.x", "task": "t.-@1", "sandbox": evil},
        "list_cmd": [SANDGLASS, "exec", sid, "--", "echo", "from-the-list"],
        "live_cmd": [SANDGLASS, "exec", sid, "--", "sh", "-c", f"echo {marker}; echo more >> notes.txt"],
        "marker": marker, "marker2": "after-restart-51c",
        "proxy_base": f"http://127.0.0.1:{proxy.server_address[1]}/sg/",
        "screenshots": os.environ.get("SG_CONSOLE_SCREENSHOTS") or None,
    }
    global ingest
    node = subprocess.Popen(["node", os.path.join(NODE_DIR, "browser_console.mjs"), CHROMIUM, json.dumps(plan)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=NODE_DIR, env=env.env)
    env.procs.append(node)
    out = []
    restarted = None
    for line in node.stdout:  # the script's last line is its JSON; RESTART asks for a restart
        out.append(line)
        if line.strip() == "RESTART":
            ingest.terminate()
            ingest.wait(60)
            ingest, _ = start_ingest(f"127.0.0.1:{port}")
            restarted = env.exec(sid, "echo", plan["marker2"]).returncode
            node.stdin.write("go\n")
            node.stdin.flush()
    node.wait(400)
    try:
        r = json.loads(out[-1])
    except (ValueError, IndexError):
        r = {"ok": False, "error": "".join(out)[-1000:] + node.stderr.read()[-1000:]}
    tap.ok(r.get("ok"), "the browser went through every step", r.get("error", ""))
    tap.eq(r.get("steps"), ["asked for a token", "list", "list updated live", "session", "diff", "live exec",
                            "resumed after a restart", "hostile", "scoped", "behind a proxy"], "in that order")
    tap.eq((r.get("no_token_rows"), r.get("no_token_status")), (0, 401),
           "without a token: a token form, no rows, the API says 401")
    tap.ok(r.get("url_after") and "token" not in r["url_after"] and r.get("history_has_token") is False,
           "the token left the URL and the history entry at once", r.get("url_after", ""))
    tap.ok(r.get("list_has_session") and r.get("list_rows") == 3, "the list: every session",
           f"{r.get('list_rows')} rows")
    tap.ok(r.get("filtered_rows") == 1 and r.get("filtered_all_match"), "filtered by learner: ada's only",
           str(r.get("filtered_rows")))
    tap.eq(r.get("list_cmd_rc"), 0, "an exec while the list was open (its row's commands went up, pushed)")
    tap.ok(r.get("session_url", "").endswith(f"#/s/ada/t1/{sid}"), "the row's link opens the session",
           r.get("session_url", ""))
    tap.ok("+changed" in [x.strip() for x in r.get("diff_added") or []], "the diff opened: its added line, classed",
           json.dumps(r.get("diff_added")))
    tap.ok(r.get("live_cmd_rc") == 0 and "exit 0" in r.get("live_text", "") and "notes.txt" in r.get("live_text", ""),
           "an exec made with the session open appeared, with its status and change", r.get("live_text", "")[:300])
    tap.ok(restarted == 0 and r.get("resumed_same_document") and r.get("resumed_markers") == 1,
           "the ingest restarted: an exec made then appeared in the same page (the stream resumed), "
           "nothing shown twice", f"{restarted} {r.get('resumed_same_document')} {r.get('resumed_markers')}")
    h = r.get("hostile") or {}
    tap.ok(h.get("has_script_text") and h.get("has_img_text") and h.get("has_js_url_text"),
           "hostile output, names and test names are shown as text", json.dumps(h)[:400])
    tap.ok(h.get("has_bidi_escaped") and h.get("has_zw_escaped") and h.get("has_esc_escaped")
           and not h.get("raw_bidi") and not h.get("raw_esc"),
           "bidi, zero-width and escape characters are shown escaped, never raw", json.dumps(h)[:400])
    tap.eq((h.get("imgs"), h.get("handlers"), h.get("pwned")), (0, 0, False),
           "no element or handler came from the content")
    tap.eq(h.get("scripts"), ["console.js"], "the page's own script only")
    tap.ok(all(x.startswith(("#/", "replay.html#/", "watch.html#/")) for x in h.get("hrefs") or ["?"]),
           "every link is a console route (or the replay or watch page's, its parts encoded after #/)",
           json.dumps(h.get("hrefs"))[:300])
    tap.eq((r.get("dialogs"), r.get("page_errors"), r.get("console_errors")), (0, [], []),
           "no dialog, no page error, no console error")
    tap.eq(r.get("csp_violations"), [], "no CSP violation")
    tap.eq(r.get("scoped_rows"), [other], "a token scoped to a sandbox lists that session only")
    px = r.get("proxy") or {}
    tap.ok(px.get("rows") == 3 and px.get("live") and px.get("session_cmds", 0) > 0
           and all(u.startswith(plan["proxy_base"]) for u in px.get("requests") or ["?"]),
           "behind a reverse proxy under /sg/: the list, live, a session; every request under /sg/",
           json.dumps(px)[:400])


# Destroyed while the ingest runs (the cleanup would stop it first): a
# captured sandbox whose ingest is gone waits out its delivery (10 s).
for sb in (sid, other, evil):
    env.run("destroy", sb)
tap.done()
