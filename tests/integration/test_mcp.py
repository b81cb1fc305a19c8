"""`sandglass mcp` driven over pipes as an MCP client would: both protocol
eras, every tool, rollback of a shell-made change, cancellation that kills
exactly one call, progress notifications, every bad request answered with
the right JSON-RPC error while the session goes on, and the end of the
session on EOF / SIGTERM (an abort, the sandbox kept)."""
from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from sgtest import SANDGLASS, Env, await_true, cgroup_dirs, cgroup_pids, cmdline, pid_alive, tap  # noqa: E402

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "sgtest", "version": "1"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


class Session:
    """One `sandglass mcp` process and a reader thread for its stdout."""

    def __init__(self, env: Env, *args: str) -> None:
        self.p = env.spawn([SANDGLASS, "mcp", *args], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.msgs: queue.Queue = queue.Queue()
        self.notes: list[dict] = []
        self.pending: dict = {}
        self.stderr: list[str] = []
        self.raw: list[bytes] = []
        self.next_id = 1
        threading.Thread(target=self._read, daemon=True).start()
        self.err_reader = threading.Thread(target=self._read_err, daemon=True)
        self.err_reader.start()
        self.sid = None
        await_true(lambda: self._sid() is not None, "mcp names its sandbox on stderr", timeout=60,
                   diag=lambda: "".join(self.stderr))
        self.sid = self._sid()

    def _sid(self):
        for line in self.stderr:
            m = re.search(r"for sandbox ([0-9a-zA-Z._@-]+)", line)
            if m:
                return m.group(1)
        return None

    def _read(self) -> None:
        for line in self.p.stdout:
            self.raw.append(line)
            self.msgs.put(json.loads(line))
        self.msgs.put(None)

    def _read_err(self) -> None:
        for line in self.p.stderr:
            self.stderr.append(line.decode(errors="replace"))

    def send_raw(self, data: bytes) -> None:
        self.p.stdin.write(data)
        self.p.stdin.flush()

    def send(self, msg: dict) -> None:
        self.send_raw(json.dumps(msg).encode() + b"\n")

    def request(self, method: str, params: dict | None = None, id=None) -> object:
        if id is None:
            id = self.next_id
            self.next_id += 1
        m = {"jsonrpc": "2.0", "id": id, "method": method}
        if params is not None:
            m["params"] = params
        self.send(m)
        return id

    def wait(self, id, timeout: float = 60) -> dict:
        """The response to id; notifications are kept in self.notes."""
        end = time.monotonic() + timeout
        while True:
            key = json.dumps(id)
            if key in self.pending:
                return self.pending.pop(key)
            left = end - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no answer to {id!r}")
            try:
                m = self.msgs.get(timeout=left)
            except queue.Empty:
                continue
            if m is None:
                raise EOFError("the server closed stdout")
            if "id" in m and "method" not in m:
                self.pending[json.dumps(m["id"])] = m
            else:
                self.notes.append(m)

    def pump(self) -> None:
        """Takes what the server sent so far: responses into pending,
        notifications into notes (for waits on a notification)."""
        while True:
            try:
                m = self.msgs.get_nowait()
            except queue.Empty:
                return
            if m is None:
                self.msgs.put(None)
                return
            if "id" in m and "method" not in m:
                self.pending[json.dumps(m["id"])] = m
            else:
                self.notes.append(m)

    def call(self, method: str, params: dict | None = None, timeout: float = 60) -> dict:
        return self.wait(self.request(method, params), timeout)

    def tool(self, name: str, args: dict, modern: bool = False, timeout: float = 60) -> dict:
        params = {"name": name, "arguments": args}
        if modern:
            params["_meta"] = dict(META)
        r = self.call("tools/call", params, timeout)
        if "result" not in r:
            raise AssertionError(f"tools/call {name} failed: {r}")
        return r["result"]

    def initialize(self, version: str = LEGACY) -> dict:
        r = self.call("initialize", {"protocolVersion": version, "capabilities": {},
                                     "clientInfo": {"name": "sgtest", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        return r

    def close(self, timeout: float = 30) -> int:
        """Ends the session (EOF) and returns its exit status once all it
        wrote to stderr has been read (its last lines come at its exit)."""
        try:
            self.p.stdin.close()
        except BrokenPipeError:
            pass
        rc = self.p.wait(timeout=timeout)
        self.err_reader.join(timeout=timeout)
        return rc


def text(result: dict) -> str:
    return "".join(c.get("text", "") for c in result.get("content", []))


def procs_of(sid: str, marker: str) -> list[int]:
    """Host pids of the sandbox's live processes whose command line holds
    marker: seen from the host (the cgroup), so also after an abort, when
    the sandbox refuses execs."""
    return sorted(x for x in cgroup_pids(sid) if marker in cmdline(x) and pid_alive(x))


def user_procs(sid: str) -> list[tuple[int, str]]:
    """Every live process of the sandbox but init, with its command line."""
    return [(x, cmdline(x)) for x in sorted(cgroup_pids(sid)) if pid_alive(x) and
            not cmdline(x).startswith("sandglass-init")]


def await_procs(sid: str, marker: str, what: str) -> list[int]:
    """The processes with marker in their command line, as first seen (a
    second look could fall in an execve, when /proc/PID/cmdline reads empty)."""
    seen: list[int] = []

    def look() -> bool:
        seen[:] = procs_of(sid, marker)
        return bool(seen)
    await_true(look, what, timeout=60, diag=lambda: repr(user_procs(sid)))
    return list(seen)


def workspace_of(env: Env, sid: str) -> str:
    return next(sb["workspace"] for sb in env.ls() if sb["id"] == sid)


def main() -> None:
    env = Env()
    try:
        run(env)
    finally:
        env.cleanup()
    from test_capture import CapEnv  # a real ingest and its store
    cap = CapEnv()
    try:
        captured(cap)
        concurrent(cap)
    finally:
        cap.cleanup()
    tap.done()


def captured(cap) -> None:
    """README: every call is captured like an exec: its events reach the
    store, each naming the tool and its arguments."""
    @tap.case("calls are captured like execs")
    def _():
        s = Session(cap, "--learner", "t", "--task", "mcpcap", "--ingest", cap.ingest.ws, "--secret", cap.secret)
        s.initialize(LEGACY)
        r = s.tool("write_file", {"path": "cap.txt", "content": "hello\ncaptured\n"})
        tap.ok(not r.get("isError"), "a write_file call in a captured session", text(r))
        r = s.tool("run_bash", {"command": "echo from-bash"})
        tap.ok("from-bash" in text(r), "and a run_bash call")

        def tool_of(row: dict) -> str:
            return (row["payload"].get("tool") or {}).get("name", "")

        def seen() -> dict:
            rows = cap.rows(s.sid)
            return {
                "command": [r for r in rows if r["kind"] == "command" and tool_of(r) == "write_file"
                            and r["payload"]["tool"]["arguments"].get("path") == "cap.txt"],
                "diff": [r for r in rows if r["kind"] == "file_diff" and r["payload"].get("path") == "cap.txt"
                         and "+captured" in r["payload"].get("diff", "")],
                "result": [r for r in rows if r["kind"] in ("run_result", "test_result")
                           and tool_of(r) == "write_file" and r["payload"].get("exit_code") == 0],
                "bash": [r for r in rows if r["kind"] == "command" and tool_of(r) == "run_bash"],
            }
        await_true(lambda: all(seen().values()), "the store has the calls' command, file_diff and result events, "
                   "each naming its tool", timeout=60, diag=lambda: repr(cap.rows(s.sid))[-3000:])
        got = seen()
        if all(got.values()):
            tap.ok(got["command"][0]["seq"] < got["diff"][0]["seq"] < got["result"][0]["seq"],
                   "in order: the call's command, its file change, its result",
                   repr([(r["seq"], r["kind"]) for r in cap.rows(s.sid)]))
            tap.eq((got["command"][0]["payload"]["cmd"], got["result"][0]["payload"]["cmd"]),
                   ("write_file cap.txt", "write_file cap.txt"),
                   "a file tool's call is recorded as what it does, not as its shell script")
            tap.eq(got["bash"][0]["payload"]["cmd"], "echo from-bash", "a run_bash call as its command")
        r = s.tool("edit_file", {"path": "cap.txt", "old_string": "captured", "new_string": "edited"})
        tap.ok(not r.get("isError") and "replaced 1" in text(r), "an edit_file call in a captured session", text(r))

        def edit_programs() -> list | None:
            rows = cap.rows(s.sid)
            ids = [r["payload"].get("exec_id") for r in rows if r["kind"] == "command" and tool_of(r) == "edit_file"]
            if not ids or not any(r["kind"] in ("run_result", "test_result") and r["payload"].get("exec_id") == ids[0]
                                  for r in rows):
                return None
            return [r["payload"].get("argv") or [] for r in rows
                    if r["kind"] == "process" and r["payload"].get("exec_id") == ids[0]]
        await_true(lambda: edit_programs() is not None, "the edit's result is stored", timeout=60)
        progs = edit_programs() or []
        tap.ok(progs and not any("perl" in os.path.basename(a[0]) for a in progs if a),
               "edit_file runs no interpreter in the sandbox (sh and coreutils, as the other file tools)",
               repr(progs))
        # issue 24: the operator's actions an agent takes name the MCP
        # client (initialize's clientInfo.name) beside the credentials
        r = s.tool("checkpoint", {"label": "by-agent"})
        tap.ok(not r.get("isError") and text(r).startswith("checkpoint "), "a checkpoint call", text(r))
        ck = text(r).split()[1]
        s.tool("write_file", {"path": "after.txt", "content": "undone\n"})
        r = s.tool("rollback", {"to": ck})
        tap.ok(not r.get("isError") and "rolled back" in text(r), "a rollback call", text(r))
        tap.eq(s.close(timeout=120), 0, "the session ends on EOF")

        def acted() -> dict:
            rows = cap.rows(s.sid)
            return {"checkpoint": [r for r in rows if r["kind"] == "checkpoint"
                                   and r["payload"].get("label") == "by-agent"],
                    "rollback": [r for r in rows if r["kind"] == "rollback"],
                    "session_abort": [r for r in rows if r["kind"] == "session_abort"]}
        await_true(lambda: all(acted().values()), "the store has the agent's checkpoint, rollback and abort",
                   timeout=60, diag=lambda: repr(acted()))
        for kind, got in acted().items():
            actor = got[0]["payload"].get("actor") if got else None
            tap.ok(isinstance(actor, dict) and actor.get("via") == "mcp: sgtest" and actor.get("uid") == os.getuid(),
                   f"the {kind} names the MCP client it was done for, and the caller's uid", repr(actor))
        p = cap.run("events", "--sandbox", s.sid, "--ingest", cap.ingest.http_base, "--secret", cap.secret)
        line = [ln for ln in p.stdout.decode().splitlines() if "rolled back" in ln]
        tap.ok(len(line) == 1 and line[0].endswith(" via mcp: sgtest)"),
               "the timeline says who rolled back, and for which client", p.stdout.decode()[-1500:])
        cap.destroy(s.sid)


def concurrent(cap) -> None:
    """Three calls sent together (one write of three lines): the writes run
    one at a time in the order sent, each after its own checkpoint, each
    file change reported between its own call's command and result, and
    each reply under its own id."""
    @tap.case("three calls sent together")
    def _():
        s = Session(cap, "--learner", "t", "--task", "mcpconc", "--ingest", cap.ingest.ws, "--secret", cap.secret)
        s.initialize(LEGACY)

        def ckpts() -> list[dict]:
            return json.loads(cap.run("checkpoints", s.sid, "--json", check=True).stdout)
        before = ckpts()
        calls = [
            ("w1", "write_file", {"path": "f.txt", "content": "one\n"}),
            ("b2", "run_bash", {"command": "cat f.txt; echo two > f.txt"}),
            ("e3", "edit_file", {"path": "f.txt", "old_string": "two", "new_string": "three"}),
        ]
        s.send_raw(b"".join(json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                                        "params": {"name": n, "arguments": a}}).encode() + b"\n"
                            for i, n, a in calls))
        got = {i: s.wait(i, timeout=120) for i, _, _ in calls}
        t = {i: text(r.get("result", {})) for i, r in got.items()}
        tap.ok(t["w1"] == "wrote 4 bytes to /workspace/f.txt", "w1's reply is the write's", t["w1"])
        tap.ok(t["b2"].startswith("one\n") and "[exit code 0]" in t["b2"],
               "b2's reply is the command's, which saw w1's write", t["b2"])
        tap.ok(t["e3"].startswith("replaced 1 occurrence"), "e3's reply is the edit's, which saw b2's write", t["e3"])
        order = [json.loads(line).get("id") for line in s.raw]
        order = [i for i in order if i in got]
        tap.eq(order, ["w1", "b2", "e3"], "the replies come in the order the calls were sent")
        ws = cap.workspace(s.sid)
        tap.eq(open(os.path.join(ws, "f.txt")).read(), "three\n", "the three ran, in order")
        new = [c for c in ckpts() if c["id"] not in {b["id"] for b in before}]
        # w1 wrote into the workspace as create left it: its checkpoint is
        # create's (an unchanged workspace reuses the newest); b2 and e3
        # each get a new one.
        tap.ok(len(new) == 2, "each later write got a checkpoint of its own", json.dumps(new))

        def tool_of(row: dict) -> str:
            return (row["payload"].get("tool") or {}).get("name", "")

        def rows() -> list[dict]:
            return cap.rows(s.sid)
        await_true(lambda: len([r for r in rows() if r["kind"] == "run_result" and tool_of(r) == "edit_file"]) == 1,
                   "the store has the three calls", timeout=60, diag=lambda: repr(rows())[-2000:])
        rs = rows()
        diffs = [r for r in rs if r["kind"] == "file_diff" and r["payload"].get("path") == "f.txt"]
        tap.ok([r["payload"].get("change") for r in diffs] == ["created", "modified", "modified"],
               "f.txt: created once, then modified twice", repr([r["payload"] for r in diffs]))
        tap.ok(all(r["payload"].get("diff") for r in diffs) and len(diffs) == 3
               and "+one" in diffs[0]["payload"]["diff"]
               and "-one" in diffs[1]["payload"]["diff"] and "+two" in diffs[1]["payload"]["diff"]
               and "-two" in diffs[2]["payload"]["diff"] and "+three" in diffs[2]["payload"]["diff"],
               "each change carries its own content (no empty +0 -0 create)", repr([r["payload"] for r in diffs]))
        for k, (_, name, _) in enumerate(calls):
            cmd = [r["seq"] for r in rs if r["kind"] == "command" and tool_of(r) == name]
            res = [r["seq"] for r in rs if r["kind"] in ("run_result", "test_result") and tool_of(r) == name]
            ok = len(cmd) == 1 and len(res) == 1 and k < len(diffs) and cmd[0] < diffs[k]["seq"] < res[0]
            tap.ok(ok, f"{name}'s file change is reported between its command and its result",
                   repr((cmd, res, [d["seq"] for d in diffs])))
        if len(new) == 2:
            newest_first = sorted(new, key=lambda c: c["label"])  # "before exec N", N of one digit here
            for c, want in zip(newest_first, ["one\n", "two\n"]):
                p = cap.run("rollback", s.sid, "--to", c["id"], "--yes")
                tap.ok(p.returncode == 0 and open(os.path.join(ws, "f.txt")).read() == want,
                       f"checkpoint {c['label']!r} holds the state right before its call ({want.strip()})",
                       p.stderr.decode(errors="replace"))
        tap.eq(s.close(timeout=120), 0, "the session ends on EOF")
        cap.destroy(s.sid)


def run(env: Env) -> None:
    s = Session(env, "--learner", "t", "--task", "mcp")
    tap.ok(s.sid is not None, "mcp creates a sandbox and names it on stderr", "".join(s.stderr))

    @tap.case("legacy era before initialize")
    def _():
        r = s.call("tools/list")
        tap.eq(r.get("error", {}).get("code"), -32600, "a request before initialize is refused")
        r = s.call("ping")
        tap.eq(r.get("result"), {}, "ping works before initialize")

    @tap.case("legacy initialize")
    def _():
        r = s.initialize(LEGACY)
        res = r["result"]
        tap.eq(res["protocolVersion"], LEGACY, "initialize answers the client's version")
        tap.eq(res["capabilities"], {"tools": {}}, "capabilities are {tools:{}}")
        tap.eq(res["serverInfo"]["name"], "sandglass", "serverInfo names sandglass")
        r = s.call("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}})
        tap.eq(r["result"]["protocolVersion"], "2025-06-18", "an older supported version is echoed")
        r = s.call("initialize", {"protocolVersion": "1999-01-01", "capabilities": {}})
        tap.eq(r["result"]["protocolVersion"], LEGACY, "an unknown version gets our latest")

    @tap.case("tools/list (legacy)")
    def _():
        r = s.call("tools/list")["result"]
        names = sorted(t["name"] for t in r["tools"])
        tap.eq(names, sorted(["run_bash", "write_file", "edit_file", "read_file", "checkpoint", "rollback"]),
               "tools/list lists the six tools")
        tap.ok(all(t["inputSchema"]["type"] == "object" for t in r["tools"]), "every tool has an object input schema")
        rb = next(t for t in r["tools"] if t["name"] == "run_bash")
        tap.eq(rb["inputSchema"]["required"], ["command"], "run_bash requires command")
        tap.ok("resultType" not in r, "a legacy result carries no resultType")

    @tap.case("modern era")
    def _():
        r = s.call("server/discover", {"_meta": dict(META)})["result"]
        tap.ok(MODERN in r["supportedVersions"], "server/discover lists 2026-07-28", json.dumps(r))
        tap.eq(r["resultType"], "complete", "discover result has resultType complete")
        tap.eq(r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "sandglass", "serverInfo is in result _meta")
        tap.ok("tools" in r["capabilities"] and isinstance(r["ttlMs"], int) and r["cacheScope"] in ("public", "private"),
               "discover has capabilities, ttlMs and cacheScope")
        r = s.call("tools/list", {"_meta": dict(META)})["result"]
        tap.ok(len(r["tools"]) == 6 and r["resultType"] == "complete" and "ttlMs" in r and "cacheScope" in r,
               "modern tools/list has resultType, ttlMs, cacheScope", json.dumps(r)[:300])
        bad = dict(META, **{"io.modelcontextprotocol/protocolVersion": "1900-01-01"})
        r = s.call("tools/list", {"_meta": bad})
        tap.eq(r.get("error", {}).get("code"), -32022, "an unsupported version gets -32022")
        tap.eq(r.get("error", {}).get("data", {}).get("supported"), [MODERN], "the error lists the supported versions")
        tap.eq(r.get("error", {}).get("data", {}).get("requested"), "1900-01-01", "and the requested one")
        nocaps = {"io.modelcontextprotocol/protocolVersion": MODERN}
        r = s.call("server/discover", {"_meta": nocaps})
        tap.eq(r.get("error", {}).get("code"), -32602, "missing clientCapabilities gets -32602")
        res = s.tool("run_bash", {"command": "echo modern"}, modern=True)
        tap.ok("modern" in text(res) and res.get("resultType") == "complete" and not res.get("isError"),
               "a modern tools/call runs and answers with resultType", json.dumps(res))
        r = s.call("initialize", {"protocolVersion": LEGACY, "capabilities": {}, "_meta": dict(META)})
        tap.ok("error" in r, "initialize with modern _meta is refused")

    @tap.case("run_bash")
    def _():
        r = s.tool("run_bash", {"command": "echo out; echo err >&2; pwd"})
        t = text(r)
        tap.ok("out\n" in t and "err" in t and "/workspace" in t and "[exit code 0]" in t and not r.get("isError"),
               "run_bash returns stdout, stderr and exit code 0", t)
        r = s.tool("run_bash", {"command": "exit 7"})
        tap.ok(r.get("isError") is True and "[exit code 7]" in text(r), "a non-zero exit is a tool error", json.dumps(r))
        r = s.tool("run_bash", {"command": "id -u"})
        tap.ok(text(r).split("\n")[0] != "0", "commands do not run as root", text(r))
        r = s.tool("run_bash", {"command": "sleep 3600", "timeout": 0.5}, timeout=120)
        tap.ok(r.get("isError") is True and "timed out" in text(r), "run_bash timeout kills the command", text(r))
        r = s.tool("run_bash", {"command": "head -c 300000 /dev/zero | tr '\\0' a"})
        t = text(r)
        tap.ok("truncated" in t and len(t) < 200000, "large output is cut with a note", t[-200:])

    @tap.case("file tools")
    def _():
        content = "line1\nline2 ünïcödé\nline3\n"
        r = s.tool("write_file", {"path": "dir/sub/a.txt", "content": content})
        tap.ok(not r.get("isError") and "wrote" in text(r), "write_file creates a file and its directories", text(r))
        p = env.exec(s.sid, "cat", "/workspace/dir/sub/a.txt")
        tap.eq(p.stdout.decode(), content, "the file holds exactly the content (seen by exec)")
        st = env.exec(s.sid, "stat", "-c", "%u", "/workspace/dir/sub/a.txt").stdout.decode().strip()
        tap.ok(st not in ("", "0"), "the file belongs to the sandbox user, not root", st)
        r = s.tool("read_file", {"path": "/workspace/dir/sub/a.txt"})
        tap.eq(text(r), content, "read_file returns the content")
        r = s.tool("read_file", {"path": "dir/sub/a.txt", "offset": 2, "limit": 1})
        tap.eq(text(r), "line2 ünïcödé\n", "read_file offset/limit select lines")
        r = s.tool("read_file", {"path": "nope.txt"})
        tap.ok(r.get("isError") and "no such file" in text(r), "read_file of a missing file is a tool error", text(r))
        r = s.tool("edit_file", {"path": "dir/sub/a.txt", "old_string": "line2", "new_string": "LINE-2"})
        tap.ok(not r.get("isError") and "replaced 1" in text(r), "edit_file replaces a unique string", text(r))
        tap.eq(text(s.tool("read_file", {"path": "dir/sub/a.txt"})), content.replace("line2", "LINE-2"),
               "the edit is in the file")
        s.tool("write_file", {"path": "bin.txt", "content": "a\u0001b\r\n\u00ff-x-x-\n"})
        r = s.tool("edit_file", {"path": "bin.txt", "old_string": "\r\n\u00ff", "new_string": ""})
        tap.ok(not r.get("isError") and "replaced 1" in text(r), "edit_file: control bytes and UTF-8 alike", text(r))
        r = s.tool("edit_file", {"path": "bin.txt", "old_string": "-x", "new_string": "-yy", "replace_all": True})
        tap.eq(text(s.tool("read_file", {"path": "bin.txt"})), "a\u0001b-yy-yy-\n", "edit_file: replace_all, left to right")
        r = s.tool("edit_file", {"path": "nothere.txt", "old_string": "a", "new_string": "b"})
        tap.ok(r.get("isError") and "no such file" in text(r), "edit_file: a missing file is an error", text(r))
        r = s.tool("edit_file", {"path": "dir/sub/a.txt", "old_string": "absent", "new_string": "x"})
        tap.ok(r.get("isError") and "not found" in text(r), "edit_file: a missing old_string is an error", text(r))
        r = s.tool("edit_file", {"path": "dir/sub/a.txt", "old_string": "line", "new_string": "L"})
        tap.ok(r.get("isError") and "2 times" in text(r), "edit_file: a non-unique old_string is an error", text(r))
        r = s.tool("edit_file", {"path": "dir/sub/a.txt", "old_string": "line", "new_string": "L", "replace_all": True})
        tap.ok(not r.get("isError") and "replaced 2" in text(r), "edit_file replace_all replaces every one", text(r))
        tap.eq(text(s.tool("read_file", {"path": "dir/sub/a.txt"})), "L1\nLINE-2 ünïcödé\nL3\n", "replace_all result")
        r = s.tool("write_file", {"path": "../etc/x", "content": "x"})
        tap.ok(r.get("isError") and "outside the workspace" in text(r), "a path outside /workspace is refused", text(r))
        r = s.tool("read_file", {"path": "/etc/passwd"})
        tap.ok(r.get("isError") and "outside the workspace" in text(r), "an absolute path outside is refused", text(r))
        # A symlink to the host is impossible: the write happens in the sandbox.
        s.tool("run_bash", {"command": "ln -sf /etc/hostname link"})
        r = s.tool("write_file", {"path": "link", "content": "pwned"})
        tap.ok(r.get("isError") is True, "writing through a symlink to a read-only system file fails", text(r))

    @tap.case("checkpoint and rollback")
    def _():
        s.tool("write_file", {"path": "keep.txt", "content": "original\n"})
        r = s.tool("checkpoint", {"label": "before shell"})
        m = re.search(r"checkpoint (\S+)", text(r))
        tap.ok(not r.get("isError") and m is not None, "checkpoint returns an id", text(r))
        cid = m.group(1) if m else ""
        s.tool("run_bash", {"command": "echo changed > keep.txt; echo new > created.txt; rm -rf dir"})
        r = s.tool("rollback", {"to": cid})
        tap.ok(not r.get("isError") and "rolled back" in text(r), "rollback restores the checkpoint", text(r))
        tap.eq(env.exec(s.sid, "cat", "/workspace/keep.txt").stdout.decode(), "original\n",
               "a file changed by a shell command is restored")
        tap.ok(env.exec(s.sid, "test", "-e", "/workspace/created.txt").returncode != 0, "a created file is gone")
        tap.ok(env.exec(s.sid, "test", "-f", "/workspace/dir/sub/a.txt").returncode == 0, "a deleted tree is back")

    @tap.case("cancellation")
    def _():
        # A call in flight and, beside it, a process of another client of
        # the same sandbox (`sandglass exec`) the host can tell apart: the
        # cancel must kill exactly the call's processes. A second call,
        # sent while the first runs, waits its turn (it may write) and says
        # so in its progress; the cancel lets it run.
        ws = workspace_of(env, s.sid)
        release = os.path.join(ws, "release-501")
        if os.path.exists(release):
            os.unlink(release)
        other = env.spawn([SANDGLASS, "exec", s.sid, "--", "sh", "-c",
                           "while [ ! -e /workspace/release-501 ]; do sleep 0.1; done; echo done"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        # the loop's shell: its forks (each a moment, before their execve)
        # share its command line, and a later look may catch other ones
        theirs = await_procs(s.sid, "release-501", "another client's exec runs in the sandbox")[:1]
        sleeper = s.request("tools/call", {"name": "run_bash", "arguments": {"command": "sleep 3601"},
                                           "_meta": {"progressToken": "tok-1"}}, id="long-1")
        mine = await_procs(s.sid, "sleep 3601", "the call to be cancelled runs in the sandbox")
        after = s.request("tools/call", {"name": "run_bash", "arguments": {"command": "echo after-501"},
                                         "_meta": {"progressToken": 77}}, id=501)

        def progress(tok) -> list:
            s.pump()
            return [n["params"] for n in s.notes if n.get("method") == "notifications/progress"
                    and n["params"]["progressToken"] == tok]
        # two of the long call's (one a second), so that their order means something
        await_true(lambda: len(progress("tok-1")) >= 2 and progress(77),
                   "calls in flight send progress notifications with their token", timeout=60,
                   diag=lambda: repr(s.notes[-5:]))
        tap.ok(all("waiting for 1 earlier call" in p["message"] for p in progress(77)),
               "the call sent second waits for the first, and its progress says so", repr(progress(77)))
        s.pump()
        tap.ok(json.dumps(after) not in s.pending, "it has not run while the first runs")
        s.send({"jsonrpc": "2.0", "method": "notifications/cancelled",
                "params": {"requestId": "long-1", "reason": "test"}})
        await_true(lambda: mine and not any(pid_alive(x) for x in mine),
                   "cancelling kills the call's process (seen from the host)", timeout=60,
                   diag=lambda: repr((mine, user_procs(s.sid))))
        tap.ok(theirs and all(pid_alive(x) for x in theirs) and procs_of(s.sid, "release-501")[:1] == theirs,
               "and no other: the other client's process still runs",
               repr((theirs, user_procs(s.sid))))
        r = s.wait(after, timeout=60)
        tap.ok("after-501" in text(r.get("result", {})) and not r["result"].get("isError"),
               "the waiting call then runs and completes normally", json.dumps(r))
        open(release, "w").close()
        out, _ = other.communicate(timeout=60)
        tap.ok(other.returncode == 0 and b"done" in out, "the other client's exec ends normally", repr(out))
        prog = [p["progress"] for p in progress("tok-1")]
        tap.ok(len(prog) >= 2 and all(b > a for a, b in zip(prog, prog[1:])), "progress increases", str(prog))
        r = s.call("ping")
        tap.eq(r.get("result"), {}, "the session goes on after a cancellation")
        # The cancelled call's process died before the other call ended and
        # before this ping: an answer to it would have come by now.
        s.pump()
        tap.ok(json.dumps(sleeper) not in s.pending, "no response is sent for the cancelled request",
               repr(s.pending.get(json.dumps(sleeper))))
        # Cancelling an unknown or finished request is ignored.
        s.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 424242}})
        tap.eq(s.call("ping").get("result"), {}, "a cancel of an unknown id is ignored")
        s.send({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 501}})
        tap.eq(s.call("ping").get("result"), {}, "a cancel of a finished call is ignored")

    @tap.case("every call that may write is checkpointed before it writes")
    def _():
        def ckpts() -> list[dict]:
            return json.loads(env.run("checkpoints", s.sid, "--json", check=True).stdout)
        s.tool("write_file", {"path": "ck.txt", "content": "before\n"})
        before = ckpts()
        r = s.tool("write_file", {"path": "ck.txt", "content": "after\n"})
        tap.ok(not r.get("isError"), "write_file overwrites a file", text(r))
        after = ckpts()
        new = [c for c in after if c not in before]
        tap.ok(len(after) == len(before) + 1 and len(new) == 1 and new[0]["label"].startswith("before exec ")
               and new[0]["id"] not in {c["id"] for c in before},
               "the write_file call made one new checkpoint", json.dumps(new))
        r = s.tool("read_file", {"path": "ck.txt"})
        tap.eq(text(r), "after\n", "the write happened")
        tap.eq(ckpts(), after, "a read_file call makes none (it cannot write)")
        if new:
            p = env.run("rollback", s.sid, "--to", new[0]["id"], "--yes")
            tap.eq(p.returncode, 0, "a rollback to that checkpoint runs")
            tap.eq(open(os.path.join(workspace_of(env, s.sid), "ck.txt")).read(), "before\n",
                   "and restores the content before the write: the checkpoint was taken before it wrote")

    @tap.case("bad requests")
    def _():
        def err_of(raw: bytes):
            s.send_raw(raw + b"\n")
            # Errors for unparsable requests carry id null: read the next such answer.
            return s.wait(None, timeout=30)

        r = err_of(b'{"jsonrpc":"2.0","id":1,"method":')
        tap.eq((r["error"]["code"], r["id"]), (-32700, None), "invalid JSON: -32700 with id null")
        r = err_of(b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]')
        tap.eq(r["error"]["code"], -32600, "a batch: -32600")
        r = err_of(b'"just a string"')
        tap.eq(r["error"]["code"], -32600, "a non-object: -32600")
        r = err_of(b'{"jsonrpc":"2.0","id":null,"method":"ping"}')
        tap.eq(r["error"]["code"], -32600, "id null: -32600")
        r = err_of(b'{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}')
        tap.eq(r["error"]["code"], -32700, "duplicate keys are refused")
        big = b'{"jsonrpc":"2.0","id":9,"method":"ping","params":{"x":"' + b"a" * (17 * 1024 * 1024) + b'"}}'
        r = err_of(big)
        tap.eq(r["error"]["code"], -32600, "an oversized message: -32600")
        tap.ok("too large" in r["error"]["message"], "the message says it is too large", r["error"]["message"])
        r = s.call("no/such/method")
        tap.eq(r["error"]["code"], -32601, "unknown method: -32601")
        r = s.call("tools/call", {"arguments": {}})
        tap.eq(r["error"]["code"], -32602, "tools/call without a name: -32602")
        r = s.call("tools/call", {"name": "launch_missiles", "arguments": {}})
        tap.eq(r["error"]["code"], -32602, "unknown tool: -32602")
        r = s.call("tools/call", {"name": "run_bash", "arguments": {"command": 5}})
        tap.eq(r["error"]["code"], -32602, "wrong argument type: -32602")
        r = s.call("tools/call", {"name": "run_bash", "arguments": {}})
        tap.eq(r["error"]["code"], -32602, "missing required argument: -32602")
        r = s.call("tools/call", {"name": "run_bash", "arguments": {"command": "true", "bogus": 1}})
        tap.eq(r["error"]["code"], -32602, "unknown argument: -32602")
        r = s.call("tools/call", "not an object")
        tap.eq(r["error"]["code"], -32602, "params not an object: -32602")
        r = s.call("tools/call", {"name": "run_bash", "arguments": {"command": "x" * (40 * 1024)}})
        tap.ok(r["result"].get("isError") is True, "an over-long command is a tool error")
        s.send({"jsonrpc": "2.0", "method": "no/such/notification"})
        s.send({"jsonrpc": "2.0", "id": 77, "result": {}})
        r = s.call("ping")
        tap.eq(r.get("result"), {}, "the session goes on after every bad request")
        tap.ok(s.raw and all(line.endswith(b"\n") and b"\n" not in line[:-1] for line in s.raw),
               "every message on stdout is one JSON line")

    @tap.case("EOF ends the session with an abort")
    def _():
        s.request("tools/call", {"name": "run_bash", "arguments": {"command": "sleep 3602"}}, id="eof-sleeper")
        inflight = await_procs(s.sid, "sleep 3602", "a call is in flight (seen from the host)")
        init = next(sb["init_pid"] for sb in env.ls() if sb["id"] == s.sid)
        rc = s.close(timeout=120)
        tap.eq(rc, 0, "mcp exits 0 on EOF")
        err = "".join(s.stderr)
        tap.ok("stdin closed" in err and "abort" in err, "the session is aborted with reason 'stdin closed'", err)
        tap.ok(f"sandbox {s.sid} kept" in err, "the kept sandbox is named on stderr", err)
        tap.ok(any(sb["id"] == s.sid for sb in env.ls()), "the sandbox is left in place")
        tap.ok(inflight and not any(pid_alive(x) for x in inflight), "the call in flight was killed",
               repr((inflight, user_procs(s.sid))))
        tap.eq(cgroup_pids(s.sid), {init}, "nothing but init is left in the sandbox's cgroup")
        r = env.exec(s.sid, "true")
        tap.ok(b"aborted" in r.stderr, "the aborted session refuses new execs", r.stderr.decode(errors="replace"))

    @tap.case("attach and SIGTERM")
    def _():
        sid = env.create("--task", "mcp2")
        a = Session(env, "--sandbox", sid)
        tap.eq(a.sid, sid, "--sandbox attaches to an existing sandbox")
        r = a.tool("run_bash", {"command": "echo attached"}, modern=True)
        tap.ok("attached" in text(r), "tools run in the attached sandbox")
        a.request("tools/call", {"name": "run_bash", "arguments": {"command": "sleep 3603"},
                                 "_meta": dict(META)}, id="term")
        inflight = await_procs(sid, "sleep 3603", "a call is in flight (seen from the host)")
        init = next(sb["init_pid"] for sb in env.ls() if sb["id"] == sid)
        a.p.send_signal(signal.SIGTERM)
        rc = a.p.wait(timeout=120)
        tap.eq(rc, 0, "mcp exits 0 on SIGTERM")
        tap.ok("received SIGTERM" in "".join(a.stderr), "the abort reason is 'received SIGTERM'", "".join(a.stderr))
        tap.ok(inflight and not any(pid_alive(x) for x in inflight), "SIGTERM killed the call in flight",
               repr((inflight, user_procs(sid))))
        tap.eq(cgroup_pids(sid), {init}, "nothing but init is left in the sandbox's cgroup")
        r = a.wait("term", timeout=60)
        tap.ok(r.get("result", {}).get("isError") is True, "the killed call is answered as failed", json.dumps(r))
        p = env.run("mcp", "--sandbox", sid)
        err = p.stderr.decode()
        tap.ok(p.returncode != 0 and "is aborted" in err and "sandglass resume" in err,
               "attaching to the aborted sandbox says so at once, and how to resume", err)

    @tap.case("an ended session's sandbox goes after its keep")
    def _():
        s = Session(env, "--learner", "t", "--task", "keep", "--keep", "1")
        s.initialize(LEGACY)
        r = s.tool("run_bash", {"command": "echo kept"})
        tap.ok("kept" in text(r), "a call runs")
        tap.eq(s.close(timeout=120), 0, "the session ends on EOF")
        tap.ok("kept for 1 s" in "".join(s.stderr), "mcp says how long the sandbox is kept", "".join(s.stderr))
        await_true(lambda: not any(sb["id"] == s.sid for sb in env.ls()),
                   "the sandbox is destroyed once its keep has passed", timeout=120, diag=lambda: repr(env.ls()))
        tap.ok(not any(os.path.isdir(d) for d in cgroup_dirs(s.sid)), "and nothing of it is left (cgroups)")
        f = Session(env, "--learner", "t", "--task", "keep", "--keep", "forever")
        f.initialize(LEGACY)
        tap.eq(f.close(timeout=120), 0, "a --keep forever session ends")
        tap.ok("for good" in "".join(f.stderr), "and says its sandbox stays", "".join(f.stderr))
        p = env.run("mcp", "--sandbox", f.sid, "--keep", "5")
        tap.ok(p.returncode == 2 and b"--keep" in p.stderr, "--keep with --sandbox is refused", p.stderr.decode())
        tap.ok(any(sb["id"] == f.sid for sb in env.ls()), "the --keep forever sandbox is still there")

    @tap.case("options")
    def _():
        p = env.run("mcp", "--sandbox", "nosuchsandbox")
        tap.ok(p.returncode == 1 and b"cannot attach" in p.stderr, "attaching to a missing sandbox fails clearly")

        def usage(args: list[str], flag: str, what: str) -> None:
            p = env.run("mcp", *args)
            err = p.stderr.decode(errors="replace")
            tap.ok(p.returncode == 2 and err.count("\n") == 1 and flag in err and not p.stdout,
                   f"{what}: exit 2, one line naming {flag}", f"rc={p.returncode} {err!r}")
        usage(["--learner", "x"], "--task", "--task is required to create")
        usage(["--sandbox", "abc", "--max-calls", "3"], "--max-", "caps with --sandbox are refused")
        usage(["--learner", "x", "--task", "t", "--bogus"], "--bogus", "an unknown option")
        usage(["--learner", "x", "--task", "t", "--pids", "0"], "--pids", "a bad option of create's")
        usage(["--learner", "x", "--task", "t", "stray"], "stray", "an argument")
        usage(["--keep", "soon", "--learner", "x", "--task", "t"], "--keep", "a bad --keep")
        p = env.run("mcp", "--help")
        tap.ok(p.returncode == 0 and b"--keep" in p.stdout, "--help explains the options on stdout")


if __name__ == "__main__":
    main()
