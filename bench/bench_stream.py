#!/usr/bin/env python3
"""GET /v1/stream (the ingest's pushed event stream): commit-to-client
latency with 1 and 100 subscribers, and the ingest's throughput with 100
subscribers against none. Prints the figures and writes
bench/results/stream.json. Asserts nothing (not a test).

    python3 bench/bench_stream.py [--build build] [--events 500] [--rate 100]
                                  [--tput-events 80000] [--runs 3] [--curl]

Latency: one writer sends --events events of one stream, one every
1/--rate s; subscribers (in 4 processes of their own) note when each event
arrives (CLOCK_MONOTONIC, shared by the processes). The writer notes when
it sent each event and when the ack covering it came (the ingest acks
after the commit). Commit time lies between the two, so:
  send->client  is an upper bound of commit->client (it includes the
                group commit and its fsync);
  ack->client   is commit->client less commit->ack (the ack's own trip):
                about commit->client, slightly under.
Throughput: 8 connections each send --tput-events/8 pre-built frames as
fast as they can; the clock stops when every last seq is acked (committed).
With 100 subscribers reading everything (each one checked to get every
event), against none; --runs of each, alternating; the median of each and
their ratio. The subscribers are bench_stream_reader (C, epoll, 4
processes of 25 connections; --curl: one curl | grep -c each, as before:
200 processes that on 2 CPUs take the CPU the ingest needs, so that
figure measured the readers). With the C readers, also the delivered
rate: the events over the time until every subscriber had every one
(the fan-out may trail the commits: the ingest's own work comes first).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import re
import selectors
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SEQ = re.compile(rb'"seq":(\d+)')


def start_ingest(bin_, state):
    env = dict(os.environ, SANDGLASS_STATE_DIR=state)
    p = subprocess.Popen([bin_, "ingest", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, env=env, text=True)
    line = p.stdout.readline()
    return p, int(line.rsplit(":", 1)[1])


def tok(bin_, state, *args):
    env = dict(os.environ, SANDGLASS_STATE_DIR=state)
    return subprocess.run([bin_, "token", *args], capture_output=True, text=True, env=env,
                          check=True).stdout.strip()


def sse_connect(port, token, query):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"GET /v1/stream?{query} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\n\r\n"
              .encode())
    buf = b""
    while b"event: live" not in buf:  # subscribed and caught up
        c = s.recv(65536)
        if not c:
            raise RuntimeError(f"stream refused: {buf[:200]!r}")
        buf += c
    return s


def subscriber_proc(port, token, query, n, want, mode, ready, out):
    """n subscribers in this process. mode "lat": arrival time of each seq;
    "count": how many events each got (until want each, or the end)."""
    socks = [sse_connect(port, token, query) for _ in range(n)]
    ready.put(n)
    sel = selectors.DefaultSelector()
    state = {}
    for i, s in enumerate(socks):
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, i)
        state[i] = {"tail": b"", "count": 0, "times": {}}
    left = n
    deadline = time.monotonic() + 600
    while left and time.monotonic() < deadline:
        for k, _ in sel.select(1.0):
            i = k.data
            st = state[i]
            try:
                c = k.fileobj.recv(1 << 20)
            except BlockingIOError:
                continue
            t = time.monotonic()
            if not c:
                sel.unregister(k.fileobj)
                left -= 1
                continue
            data = st["tail"] + c
            if mode == "lat":
                for m in SEQ.finditer(data):
                    st["times"].setdefault(int(m.group(1)), t)
                st["tail"] = data[-40:]
                st["count"] = len(st["times"])
            else:
                st["count"] += data.count(b"\ndata: ") - st["tail"].count(b"\ndata: ")
                st["tail"] = data[-8:]
            if st["count"] >= want:
                sel.unregister(k.fileobj)
                left -= 1
    out.put([(state[i]["count"], state[i]["times"]) for i in range(n)])
    for s in socks:
        s.close()


def start_subscribers(port, token, query, nsubs, want, mode):
    while stats(port, token)["subscribers"] > 0:  # the last run's have gone
        time.sleep(0.05)
    ctx = mp.get_context("fork")
    ready, out = ctx.Queue(), ctx.Queue()
    nprocs = min(4, nsubs)
    procs = []
    for k in range(nprocs):
        n = nsubs // nprocs + (1 if k < nsubs % nprocs else 0)
        p = ctx.Process(target=subscriber_proc, args=(port, token, query, n, want, mode, ready, out))
        p.start()
        procs.append(p)
    got = 0
    while got < nsubs:
        got += ready.get(timeout=120)
    return procs, out


def collect(procs, out):
    res = []
    for _ in procs:
        res += out.get(timeout=900)
    for p in procs:
        p.join(60)
    return res


class WS:
    """A bare WebSocket client (zero mask key: payload bytes as they are)."""

    def __init__(self, port, token):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.s.sendall((f"GET /v1/ingest HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n"
                        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                        f"Sec-WebSocket-Version: 13\r\nAuthorization: Bearer {token}\r\n\r\n").encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += self.s.recv(4096)
        self.buf = buf.split(b"\r\n\r\n", 1)[1]

    @staticmethod
    def frame(seq, data):
        p = json.dumps({"seq": seq, "kind": "stdout", "payload": {"data": data},
                        "ts": "2026-01-01T00:00:00.000000+00:00"}).encode()
        n = len(p)
        hdr = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack("!H", n))
        return hdr + b"\0\0\0\0" + p

    def acks(self):
        """Yields each ack as it comes."""
        while True:
            while len(self.buf) >= 2:
                n = self.buf[1] & 0x7F
                off = 2
                if n == 126:
                    n, off = struct.unpack("!H", self.buf[2:4])[0], 4
                if len(self.buf) < off + n:
                    break
                body, self.buf = self.buf[off:off + n], self.buf[off + n:]
                yield json.loads(body)["ack"]
            c = self.s.recv(65536)
            if not c:
                return
            self.buf += c


def stats(port, token):
    import urllib.request
    r = urllib.request.Request(f"http://127.0.0.1:{port}/v1/stats",
                               headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(r, timeout=60) as f:
        return json.loads(f.read())


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))] if xs else float("nan")


def latency(bin_, state, port, rtok, nsubs, events, rate, sandbox):
    procs, out = start_subscribers(port, rtok, f"sandbox={sandbox}", nsubs, events, "lat")
    ws = WS(port, tok(bin_, state, "--learner", "bench", "--task", "lat", "--sandbox", sandbox))
    t_send, t_ack = {}, {}

    def reader():
        hi = -1
        for a in ws.acks():
            t = time.monotonic()
            for s in range(hi + 1, a + 1):
                t_ack[s] = t
            hi = max(hi, a)
            if hi >= events - 1:
                return
    th = threading.Thread(target=reader, daemon=True)
    th.start()
    start = time.monotonic()
    for i in range(events):
        delay = start + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        f = WS.frame(i, f"line {i}")
        t_send[i] = time.monotonic()
        ws.s.sendall(f)
    th.join(120)
    res = collect(procs, out)
    ws.s.close()
    send_lat, ack_lat, missing = [], [], 0
    for count, times in res:
        missing += events - count
        for s, t in times.items():
            send_lat.append((t - t_send[s]) * 1000)
            if s in t_ack:
                ack_lat.append((t - t_ack[s]) * 1000)
    return {"subscribers": nsubs, "events": events, "rate_per_s": rate, "missing": missing,
            "send_to_client_ms": {"p50": pct(send_lat, 50), "p99": pct(send_lat, 99)},
            "ack_to_client_ms": {"p50": pct(ack_lat, 50), "p99": pct(ack_lat, 99)}}


READER_PROCS = 4  # reader processes, as the latency subscribers' (2 CPUs: the ingest needs them)


def curl_subscribers(port, token, queries, reader, want=0):
    """The subscribers of a throughput run, each counting the events it
    gets. reader: bench_stream_reader (C, epoll: READER_PROCS processes of
    many connections, every byte read and scanned), or None: one curl per
    query piped to grep -c (200 processes and two pipe copies per
    subscriber: on 2 CPUs that measures the readers more than the ingest).
    The same readers whatever the run: only the 100-subscriber runs have
    any. Returns [(proc, grep or None, file, nconns)]."""
    # the last run's have gone: else the ingest's 128 subscribers an
    # address refuses some of these (429), which then miss events (the
    # 72 = 100 + 100 - 128 subscribers short of the runs before)
    while stats(port, token)["subscribers"] > 0:
        time.sleep(0.05)
    subs = []
    if reader:
        k = min(READER_PROCS, len(queries))
        for i in range(k):
            part = queries[i::k]
            f = tempfile.TemporaryFile()
            c = subprocess.Popen([reader, str(port), token, str(want), *part], stdout=f)
            subs.append((c, None, f, len(part)))
    for q in queries if not reader else ():
        f = tempfile.TemporaryFile()
        c = subprocess.Popen(["curl", "-sN", "-H", f"Authorization: Bearer {token}",
                              f"http://127.0.0.1:{port}/v1/stream?{q}"], stdout=subprocess.PIPE)
        g = subprocess.Popen(["grep", "-c", "^id: "], stdin=c.stdout, stdout=f)
        c.stdout.close()
        subs.append((c, g, f, 1))
    deadline = time.monotonic() + 120
    while stats(port, token)["subscribers"] < len(queries) and time.monotonic() < deadline:
        time.sleep(0.05)
    return subs


def curl_counts(subs, wait=0):
    """Each subscriber's count, and when the last had all it wanted
    (CLOCK_MONOTONIC, as time.monotonic(); None: not known, or not all).
    wait: seconds the readers have to end on their own (having it all)."""
    deadline = time.monotonic() + wait
    for c, _, _, _ in subs:
        try:
            c.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for c, _, _, _ in subs:
        c.terminate()  # the reader (or curl) this bench started; it (or its grep) then prints its counts
    counts, t_all = [], []
    for c, g, f, n in subs:
        c.wait(60)
        if g:
            g.wait(60)
        f.seek(0)
        lines = f.read().decode().split("\n")
        got = [int(x) for x in lines if x.strip().isdigit()]
        t_all += [float(x.split()[1]) for x in lines if x.startswith("all ")]
        counts += got + [0] * (n - len(got))
    done = None if any(g for _, g, _, _ in subs) or not t_all or min(t_all) < 0 else max(t_all)
    return counts, done


def throughput(bin_, state, port, rtok, nsubs, total, run_id, conns, own, reader):
    """Events/s through conns writers; nsubs subscribers each reading every
    event of the run (own False) or one writer's stream each (own True)."""
    per = total // conns
    task = f"tput{run_id}"
    queries = [f"task={task}" + (f"&sandbox=c{k % conns}" if own else "") for k in range(nsubs)]
    want = per if own else per * conns
    subs = curl_subscribers(port, rtok, queries, reader, want) if nsubs else []
    wss = [WS(port, tok(bin_, state, "--learner", "bench", "--task", task, "--sandbox", f"c{k}"))
           for k in range(conns)]
    blobs = [b"".join(WS.frame(i, "x" * 100) for i in range(per)) for _ in range(conns)]
    done = []

    def one(ws, blob):
        ws.s.sendall(blob)
        for a in ws.acks():
            if a >= per - 1:
                break
        done.append(time.monotonic())
    ths = [threading.Thread(target=one, args=(w, b)) for w, b in zip(wss, blobs)]
    t0 = time.monotonic()
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    secs = max(done) - t0
    if nsubs and not reader:  # every subscriber has had the time to read it all (a loaded machine is slow)
        time.sleep(5)
    counts, t_all = curl_counts(subs, 60 if reader else 0) if nsubs else ([], None)
    short = sum(1 for c in counts if c < want)
    for w in wss:
        w.s.close()
    # delivered: every subscriber had every event by t_all
    return per * conns / secs, short, (per * conns / (t_all - t0) if t_all else None)


def tput_compare(bin_, state, port, rtok, a, conns, own, label):
    tag = "own" if own else "all"
    t0, t100, short, deliv = [], [], 0, []
    before = stats(port, rtok)["stream_overflows"]
    for k in range(a.runs):
        t0.append(throughput(bin_, state, port, rtok, 0, a.tput_events, f"{tag}{k}a", conns, own, a.reader)[0])
        r, sh, d = throughput(bin_, state, port, rtok, 100, a.tput_events, f"{tag}{k}b", conns, own, a.reader)
        t100.append(r)
        short += sh
        deliv.append(d)
    overflows = stats(port, rtok)["stream_overflows"] - before
    m0, m100 = statistics.median(t0), statistics.median(t100)
    print(f"throughput, {label}: {m0:.0f} events/s with no subscriber, {m100:.0f} with 100 "
          f"(ratio {m100 / m0:.2f}; runs {[round(x) for x in t0]} / {[round(x) for x in t100]}; "
          f"subscribers short of events: {short}, closed for reading too slowly: {overflows}; "
          f"delivered to every subscriber at {[round(x) if x else None for x in deliv]} events/s; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs)")
    return {"writers": conns, "none": t0, "with_100": t100, "median_none": m0,
            "median_100": m100, "ratio": m100 / m0, "subscribers_short": short,
            "overflows": overflows, "loadavg": os.getloadavg()[0], "delivered_100": deliv,
            "readers": "bench_stream_reader" if a.reader else "curl | grep -c"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--events", type=int, default=500)
    ap.add_argument("--rate", type=float, default=100)
    ap.add_argument("--tput-events", type=int, default=80000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--curl", action="store_true",
                    help="throughput subscribers as curl | grep (else bench_stream_reader, built if need be)")
    a = ap.parse_args()
    a.reader = None
    if not a.curl:
        a.reader = os.path.join(a.build, "bench_stream_reader")
        if not os.path.exists(a.reader):
            subprocess.run(["ninja", "-C", a.build, "bench_stream_reader"], check=True, stdout=subprocess.DEVNULL)
    bin_ = os.path.join(a.build, "sandglassd")
    state = tempfile.mkdtemp(prefix="sg-bench-stream-")
    ing, port = start_ingest(bin_, state)
    try:
        rtok = tok(bin_, state, "--read")
        lat = [latency(bin_, state, port, rtok, n, a.events, a.rate, f"lat{n}") for n in (1, 100)]
        for r in lat:
            print(f"latency, {r['subscribers']:3d} subscriber(s), {r['events']} events at "
                  f"{r['rate_per_s']:.0f}/s: send->client p50 {r['send_to_client_ms']['p50']:.1f} ms "
                  f"p99 {r['send_to_client_ms']['p99']:.1f} ms; ack->client p50 "
                  f"{r['ack_to_client_ms']['p50']:.1f} ms p99 {r['ack_to_client_ms']['p99']:.1f} ms; "
                  f"missing {r['missing']}")
        own = tput_compare(bin_, state, port, rtok, a, 100, True,
                           "100 writers, each subscriber following one of their streams")
        every = tput_compare(bin_, state, port, rtok, a, 8, False,
                             "8 writers, every subscriber reading everything")
        res = {"latency": lat, "throughput_own_stream": own, "throughput_everything": every,
               "cpus": os.cpu_count()}
        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        with open(os.path.join(HERE, "results", "stream.json"), "w") as f:
            json.dump(res, f, indent=1)
    finally:
        ing.terminate()
        ing.wait(60)
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
