#!/usr/bin/env python3
"""GET /metrics on the ingest (Prometheus text format 0.0.4; docs/METRICS.md).

A real ingest on ephemeral loopback ports, real event streams through the
ingest protocol (the WebSocket client of test_ingest.py), then scrapes:

- bad --metrics-listen / --metrics-token values are refused, each with a
  message naming what is wrong;
- by default /metrics answers on the main port to a loopback peer, and
  403 to another (an ingest in a network namespace of its own, listening
  on a second address of its lo: no traffic leaves loopback);
- --metrics-listen serves it on its own address (404 on the main port),
  --metrics-token makes a scrape carry the token: none or a wrong one is
  401, counted as refusals{reason="metrics"};
- the counters move by exactly what was sent: events received, stored,
  duplicates, blobs... the commit and batch histograms count the commits,
  the stream and subscriber gauges follow connections opening and closing,
  each refusal (a bad stream token, a bad read token, a bad frame, a gap)
  lands on its reason;
- a connection past --max-conns-per-addr lands on refusals{addr_limit}
  (scraped on --metrics-listen's address, outside the main port's limits);
- `promtool check metrics` passes on a scrape;
- a real Prometheus server (started here, on a free loopback port, with a
  temporary config and storage) scrapes the ingest with the token file,
  and its HTTP API answers sandglass_ingest_events_stored_total with the
  value the ingest stored (polled with a deadline).

No check depends on speed. TAP output."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_ingest import (BIN, HandshakeError, Ingest, T, check, check_sanitizers, connect,  # noqa: E402
                         token, wait_until)
import test_ingest  # noqa: E402

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def get(port, path="/metrics", tok=None):
    """(status, content type, body text)."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 headers={"Authorization": f"Bearer {tok}"} if tok else {})
    try:
        with urllib.request.urlopen(req, timeout=T) as r:
            return r.status, r.headers.get("content-type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("content-type", ""), e.read().decode()


def parse(text):
    """{'name{labels}': value} of every sample."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            raise ValueError(f"not a sample line: {line!r}")
        out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


class Scraper:
    def __init__(self, port, tok=None):
        self.port, self.tok = port, tok

    def text(self):
        code, ctype, body = get(self.port, tok=self.tok)
        if code != 200:
            raise RuntimeError(f"scrape: {code} {body}")
        return body

    def __call__(self):
        return parse(self.text())


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def bad_options(state, tmp):
    env = dict(os.environ, SANDGLASS_STATE_DIR=state)

    def refused(args, want, name):
        p = subprocess.run([BIN, "ingest", "--listen", "127.0.0.1:0", *args], capture_output=True,
                           text=True, env=env, timeout=T)
        check(name, p.returncode != 0 and want in p.stderr, f"rc {p.returncode}: {p.stderr}")

    refused(["--metrics-listen", "localhost:9"], "--metrics-listen: listen address 'localhost:9': expected an IPv4",
            "--metrics-listen with a name is refused")
    refused(["--metrics-listen", "127.0.0.1:99999"], "bad port", "--metrics-listen with a bad port is refused")
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    refused(["--metrics-listen", f"127.0.0.1:{held.getsockname()[1]}"], "is in use",
            "--metrics-listen on a port in use is refused")
    held.close()
    missing = os.path.join(tmp, "no-such-token")
    refused(["--metrics-token", missing], missing, "a missing --metrics-token file is refused, named")
    loose = os.path.join(tmp, "loose-token")
    with open(loose, "w") as f:
        f.write("s3cret\n")
    os.chmod(loose, 0o644)
    refused(["--metrics-token", loose], "every user may read it", "a world-readable token file is refused")
    empty = os.path.join(tmp, "empty-token")
    open(empty, "w").close()
    os.chmod(empty, 0o600)
    refused(["--metrics-token", empty], "1 to 4096 bytes", "an empty token file is refused")
    spaced = os.path.join(tmp, "spaced-token")
    with open(spaced, "w") as f:
        f.write("two words\n")
    os.chmod(spaced, 0o600)
    refused(["--metrics-token", spaced], "printable ASCII without spaces", "a token with a space is refused")


def default_access(state):
    ing = Ingest(state)
    code, ctype, body = get(ing.port)
    check("default: /metrics answers a loopback peer on the main port", code == 200, f"{code} {body[:300]}")
    check("its content type is the text format 0.0.4", ctype.startswith("text/plain; version=0.0.4"), ctype)
    check("it starts at zero events", parse(body).get("sandglass_ingest_events_received_total") == 0, body[:300])
    ing.stop()


def other_peer(state):
    """A peer that is not loopback, without leaving loopback: the ingest in
    a network namespace of its own whose lo also holds 10.9.9.1, listening
    there; a client in that namespace connects from 10.9.9.1 (403), or
    from 127.0.0.1 with --interface (200). Plain HTTP off loopback needs
    --insecure-plaintext (ingest/tls.h)."""
    env = dict(os.environ, SANDGLASS_STATE_DIR=state)
    p = subprocess.Popen(["unshare", "-n", "sh", "-c",
                          'ip link set lo up && ip addr add 10.9.9.1/32 dev lo && exec "$0" ingest '
                          "--listen 10.9.9.1:0 --insecure-plaintext", BIN], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=env, text=True)
    line = p.stdout.readline()
    m = re.match(r"listening on ws://10\.9\.9\.1:(\d+)$", line.strip())
    if not check("an ingest in a network namespace of its own listens on 10.9.9.1", m is not None,
                 line + (p.stderr.read() if p.poll() is not None else "")):
        p.kill()
        return

    def curl(*args):
        r = subprocess.run(["nsenter", "-t", str(p.pid), "-n", "curl", "-s", "-w", "\n%{http_code}", *args,
                            f"http://10.9.9.1:{m.group(1)}/metrics"], capture_output=True, text=True, timeout=T)
        body, _, code = r.stdout.rpartition("\n")
        return code, body
    code, body = curl()
    check("default: a peer that is not loopback gets 403", code == "403" and "loopback peers only" in body,
          f"{code} {body}")
    code, body = curl("--interface", "127.0.0.1")
    check("a loopback peer of the same ingest gets 200", code == "200", f"{code} {body[:200]}")
    check("the refused scrape is counted", 'sandglass_ingest_refusals_total{reason="metrics"} 1' in body,
          body[-2000:])
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=T)
    hits = [l for l in err.splitlines() if "Sanitizer" in l or "runtime error:" in l]
    check("that ingest stopped cleanly, no sanitizer report", p.returncode == 0 and not hits,
          f"rc {p.returncode}\n" + "\n".join(hits[:20]))


def addr_limit(state):
    """A connection past --max-conns-per-addr is counted under addr_limit;
    the scrapes go to --metrics-listen's address, which the main port's
    limits do not hold."""
    ing = Ingest(state, extra=("--max-conns-per-addr", "2", "--metrics-listen", "127.0.0.1:0"))
    mport = int(ing.proc.stdout.readline().strip().rsplit(":", 1)[1].split("/")[0])
    scrape = Scraper(mport)
    key = 'sandglass_ingest_refusals_total{reason="addr_limit"}'
    # two streams hold the address's slots (an idle HTTP connection would
    # be closed after 5 s, a stream is not)
    held = [connect(ing, token(state, "lrn", "tsk", f"sb-limit-{i}")) for i in range(2)]
    for w in held:
        w.wait_ack(-1)
    check("two streams held: connections{kind=stream} 2",
          wait_until(lambda: scrape().get('sandglass_ingest_connections{kind="stream"}') == 2))
    third = socket.create_connection(("127.0.0.1", ing.port), timeout=T)
    try:
        closed = third.recv(1) == b""
    except OSError:
        closed = True
    check("a third connection from the address is closed at once", closed)
    third.close()
    check("refusals{reason=addr_limit} 1, conn_limit 0",
          wait_until(lambda: scrape().get(key) == 1) and
          scrape().get('sandglass_ingest_refusals_total{reason="conn_limit"}') == 0, scrape.text()[-1500:])
    for h in held:
        h.close()
    ing.stop()


def delta(before, after, key):
    return after.get(key, 0) - before.get(key, 0)


def traffic(ing, state, scrape):
    """Real streams; the counters move by what was sent."""
    b = scrape()
    tok = token(state, "lrn", "tsk", "sb-metrics-1")
    ws = connect(ing, tok)
    ws.wait_ack(-1)
    n = 25
    for seq in range(n):
        ws.send_event(seq)
    check("the ingest acks the 25 events", ws.wait_ack(n - 1) == n - 1)
    for seq in range(3):  # identical resends: duplicates
        ws.send_event(seq)
    ws.wait_ack(n - 1)
    open_now = scrape()
    check("one stream open: sandglass_ingest_streams 1", open_now.get("sandglass_ingest_streams") == 1,
          open_now.get("sandglass_ingest_streams"))
    check("connections{kind=stream} 1", open_now.get('sandglass_ingest_connections{kind="stream"}') == 1)

    def settled():
        a = scrape()
        return a if delta(b, a, "sandglass_ingest_events_received_total") == n + 3 and \
            delta(b, a, "sandglass_ingest_events_duplicate_total") == 3 else None
    wait_until(settled)
    a = scrape()
    check("events received moved by 28 (25 + 3 resends)", delta(b, a, "sandglass_ingest_events_received_total") == 28,
          delta(b, a, "sandglass_ingest_events_received_total"))
    check("events stored moved by 25", delta(b, a, "sandglass_ingest_events_stored_total") == n,
          delta(b, a, "sandglass_ingest_events_stored_total"))
    check("duplicates moved by 3", delta(b, a, "sandglass_ingest_events_duplicate_total") == 3)
    commits = delta(b, a, "sandglass_ingest_commits_total")
    check("commits moved", commits >= 1, commits)
    check("the commit histogram counts each commit",
          delta(b, a, "sandglass_ingest_commit_duration_seconds_count") == commits and
          delta(b, a, 'sandglass_ingest_commit_duration_seconds_bucket{le="+Inf"}') == commits,
          (commits, delta(b, a, "sandglass_ingest_commit_duration_seconds_count")))
    check("the commit time sum moved", delta(b, a, "sandglass_ingest_commit_duration_seconds_sum") > 0)
    check("the batch histogram's rows sum to the 28 frames", delta(b, a, "sandglass_ingest_batch_rows_sum") == 28,
          delta(b, a, "sandglass_ingest_batch_rows_sum"))
    check("the batch histogram counts each commit", delta(b, a, "sandglass_ingest_batch_rows_count") == commits)
    check("received bytes moved", delta(b, a, "sandglass_ingest_received_bytes_total") > 28 * 40)
    check("every event acked: no ack lag", a.get("sandglass_ingest_stream_unacked_events") == 0,
          a.get("sandglass_ingest_stream_unacked_events"))
    check("no store error", delta(b, a, "sandglass_ingest_store_errors_total") == 0)
    ws.close()
    check("the stream closed: sandglass_ingest_streams back to 0",
          wait_until(lambda: scrape().get("sandglass_ingest_streams") == 0))
    return n


def refusals(ing, state, scrape, read_tok):
    r = 'sandglass_ingest_refusals_total{reason="%s"}'
    b = scrape()
    try:
        connect(ing, "not-a-token").close()
        refused = False
    except HandshakeError as e:
        refused = e.status == 401
    check("a bad stream token is refused (401)", refused)
    code, _, _ = get(ing.port, "/v1/events", tok="not-a-token")
    check("a bad read token is refused (401)", code == 401, code)
    ws = connect(ing, token(state, "lrn", "tsk", "sb-metrics-2"))
    ws.wait_ack(-1)
    ws.send_text("{not json")
    check("a bad frame closes its stream", ws.wait_close() is not None)
    ws.close()
    ws = connect(ing, token(state, "lrn", "tsk", "sb-metrics-3"))
    ws.wait_ack(-1)
    ws.send_event(5)  # the stream's next seq is 0: a gap
    check("a gap closes its stream (1008)", ws.wait_close() == 1008, ws.close_code)
    ws.close()
    a = scrape()
    for reason, want in (("token", 1), ("read_token", 1), ("frame", 1), ("order", 1), ("conn_limit", 0)):
        check(f"refusals{{reason={reason}}} moved by {want}", delta(b, a, r % reason) == want,
              delta(b, a, r % reason))
    labels = sorted(re.findall(r'reason="([^"]*)"', scrape.text()))
    check("the reason label is a fixed set", labels == sorted(
        ["token", "read_token", "conn_limit", "addr_limit", "frame", "order", "subscribers", "metrics"]), labels)
    # a subscriber: the sse gauge follows it
    s = socket.create_connection(("127.0.0.1", ing.port), timeout=T)
    s.sendall(f"GET /v1/stream HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {read_tok}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        c = s.recv(4096)
        if not c:
            break
        head += c
    check("a subscriber is counted: connections{kind=sse} 1",
          wait_until(lambda: scrape().get('sandglass_ingest_connections{kind="sse"}') == 1), head[:100])
    s.close()
    check("and uncounted when it leaves",
          wait_until(lambda: scrape().get('sandglass_ingest_connections{kind="sse"}') == 0))
    text = scrape.text()
    for bad in ("lrn", "tsk", "sb-metrics"):
        check(f"no id in the scrape ({bad})", bad not in text)


def promtool(text):
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=T)
    check("promtool check metrics passes on a scrape", p.returncode == 0 and not p.stdout.strip(),
          f"rc {p.returncode}\n{p.stdout}\n{p.stderr}")


def start_prometheus(tmp, mport, token_file):
    """Prometheus on a free loopback port, with a config of its own: (proc,
    port, log). The port is found free, then bound by Prometheus: if another
    process took it meanwhile, Prometheus exits and this tries another."""
    cfg = os.path.join(tmp, "prometheus.yml")
    with open(cfg, "w") as f:
        f.write(f"""global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: sandglass-ingest
    authorization:
      credentials_file: {token_file}
    static_configs:
      - targets: ['127.0.0.1:{mport}']
""")
    for attempt in range(5):
        port = free_port()
        log = open(os.path.join(tmp, f"prometheus-{attempt}.log"), "w+")
        proc = subprocess.Popen(["prometheus", f"--config.file={cfg}",
                                 f"--storage.tsdb.path={os.path.join(tmp, f'prom-data-{attempt}')}",
                                 f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log)

        def ready():
            if proc.poll() is not None:
                return True
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=5) as r:
                    return r.status == 200
            except OSError:
                return False
        wait_until(ready, timeout=T, step=0.1)
        if proc.poll() is None:
            return proc, port, log
        log.seek(0)
        text = log.read()
        log.close()
        if "address already in use" not in text:
            raise RuntimeError(f"prometheus exited: {text[-2000:]}")
    raise RuntimeError("prometheus found no free port in 5 tries")


def prometheus(tmp, mport, token_file, want):
    """A real Prometheus server scrapes the ingest; its API answers the
    stored count."""
    proc, port, log = start_prometheus(tmp, mport, token_file)
    got = {}

    def value():
        try:
            q = urllib.parse.urlencode({"query": "sandglass_ingest_events_stored_total"})
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/query?{q}", timeout=5) as r:
                res = json.loads(r.read())["data"]["result"]
            got["res"] = res
            return bool(res) and float(res[0]["value"][1]) == want
        except (OSError, ValueError, KeyError):
            return False
    try:
        ok = wait_until(value, timeout=T, step=0.2)
        health = None
        if ok:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/targets", timeout=5) as r:
                health = json.loads(r.read())["data"]["activeTargets"][0]["health"]
        log.seek(0)
        check("Prometheus scraped the ingest: its API answers events_stored_total "
              f"= {want:g}", ok, f"{got}\n{log.read()[-3000:]}")
        check("Prometheus sees the target up (its scrapes carry the token)", health == "up", health)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=T)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def main():
    tmp_obj = tempfile.TemporaryDirectory(prefix="sg-metrics-test-")
    tmp = tmp_obj.name
    state = os.path.join(tmp, "state")
    os.mkdir(state)
    bad_options(state, tmp)
    default_access(state)
    other_peer(os.path.join(tmp, "state-ns"))
    addr_limit(state)

    token_file = os.path.join(tmp, "metrics-token")
    mtok = "m3trics-" + os.urandom(12).hex()
    with open(token_file, "w") as f:
        f.write(mtok + "\n")
    os.chmod(token_file, 0o600)
    ing = Ingest(state, extra=("--metrics-listen", "127.0.0.1:0", "--metrics-token", token_file))
    line = ing.proc.stdout.readline()
    m = re.match(r"metrics on http://127\.0\.0\.1:(\d+)/metrics$", line.strip())
    check("the ingest says where /metrics is", m is not None, line)
    mport = int(m.group(1))
    scrape = Scraper(mport, mtok)
    base = scrape()
    code, _, _ = get(ing.port)
    check("with --metrics-listen the main port has no /metrics (404)", code == 404, code)
    code, _, body = get(mport)
    check("no token: 401", code == 401 and "missing metrics token" in body, f"{code} {body}")
    code, _, body = get(mport, tok=mtok + "x")
    check("a wrong token: 401", code == 401 and "wrong metrics token" in body, f"{code} {body}")
    code, _, body = get(mport, "/v1/events", tok=mtok)
    check("only /metrics on the metrics address (404)", code == 404, code)
    r = 'sandglass_ingest_refusals_total{reason="metrics"}'
    check("each refused scrape counted: refusals{reason=metrics} +2", delta(base, scrape(), r) == 2)

    read_tok = ing.read_token = subprocess.run([BIN, "token", "--read"], capture_output=True, text=True,
                                               env=dict(os.environ, SANDGLASS_STATE_DIR=state)).stdout.strip()
    traffic(ing, state, scrape)
    refusals(ing, state, scrape, read_tok)
    text = scrape.text()
    check("process_start_time_seconds is about now",
          abs(parse(text)["process_start_time_seconds"] - time.time()) < 3600)
    if shutil.which("promtool") and shutil.which("prometheus"):
        promtool(text)
        prometheus(tmp, mport, token_file, scrape()["sandglass_ingest_events_stored_total"])
    else:
        for name in ("promtool check metrics", "a real Prometheus server scrapes the ingest"):
            print(f"ok {test_ingest._n + 1} - {name} # SKIP prometheus is not installed "
                  "(Debian's prometheus; scripts/install-deps.sh installs it)")
            test_ingest._n += 1
    ing.stop()
    check_sanitizers()
    print(f"1..{test_ingest._n}")
    return 1 if test_ingest._failed else 0


if __name__ == "__main__":
    sys.exit(main())
