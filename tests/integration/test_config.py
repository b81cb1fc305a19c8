#!/usr/bin/env python3
"""The config file and SANDGLASS_* defaults (sandglass.conf(5), issue 26).

A file names the ingest, the secret, limits and lifecycle; `create` with
no flag for them uses its values (the sandbox's record says so, and the
session's events reach the ingest the file names with its secret);
`events` reads with the file's ingest and secret; the environment
overrides the file and a flag the environment; a bad value, an unknown
key or section names the file and line; SANDGLASS_CONFIG=none reads no
file; the user's file is found through XDG_CONFIG_HOME and ~/.config; a
state-dir from the file is the one every process uses.

Every run of the CLI here gets its config from the test alone:
SANDGLASS_CONFIG names a file of this test's, or none (sgtest's Env sets
none and drops the caller's SANDGLASS_* defaults)."""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sgtest import config_vars, hermetic_env, tap  # noqa: E402
from test_capture import CapEnv  # noqa: E402

env = CapEnv()
SYSTEM_FILE = "/etc/sandglass/sandglass.conf"


def conf(name: str, text: str) -> str:
    path = os.path.join(env.root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def run(*args: str, config: str | None, drop: tuple[str, ...] = ("SANDGLASS_INGEST",), **extra: str):
    """sandglass ARGS with SANDGLASS_CONFIG=config (None: unset) and the
    variables in drop removed, so that the file's value is the one left."""
    e = dict(env.env)
    for k in drop:
        e.pop(k, None)
    e.pop("SANDGLASS_CONFIG", None)
    if config is not None:
        e["SANDGLASS_CONFIG"] = config
    e.update(extra)
    saved, env.env = env.env, e
    try:
        return env.run(*args)
    finally:
        env.env = saved


def meta(sid: str) -> dict:
    with open(env.sbdir(sid, "meta.json")) as f:
        return json.load(f)


def created(p) -> str:
    if p.returncode != 0:
        raise RuntimeError(f"create failed ({p.returncode}): {p.stderr.decode(errors='replace')}")
    return p.stdout.decode().strip()


MAIN = conf("main.conf", f"""# the operator's defaults
[ingest]
url = {env.ingest.ws}
secret = {env.secret}

[limits]
memory = 64M   ; inline comment
pids = 77

[session]
idle-timeout = 15m
""")
sids: list[str] = []


@tap.case("a file's ingest, secret, limits and lifecycle are create's defaults")
def _():
    sid = created(run("create", "--learner", "conf", "--task", "T", config=MAIN))
    sids.append(sid)
    m = meta(sid)
    tap.eq(m.get("ingest"), env.ingest.ws, "the record's ingest is the file's url")
    tap.eq(m.get("secret_file"), os.path.realpath(env.secret), "the record's secret is the file's")
    tap.eq((m["limits"]["memory"], m["limits"]["pids"]), (64 << 20, 77), "memory 64M and pids 77 from the file")
    tap.eq(m["lifecycle"]["idle_timeout_s"], 900.0, "idle-timeout 15m from the file")
    tap.eq(m["limits"]["timeout_s"], 600.0, "a key the file leaves out keeps its built-in default")
    env.sh(sid, "echo configured")
    rows = env.wait_rows(sid, lambda r: any(x["kind"] == "run_result" for x in r))
    tap.ok(any(x["kind"] == "run_result" for x in rows),
           "its events reached the ingest the file names, with the file's secret")


@tap.case("events reads from the file's ingest with the file's secret")
def _():
    p = run("events", "--learner", "conf", "--task", "T", "--json", config=MAIN,
            drop=("SANDGLASS_INGEST",))
    out = p.stdout.decode(errors="replace")
    tap.ok(p.returncode == 0 and "configured" in out, "events without --ingest and --secret",
           out[-2000:] + p.stderr.decode(errors="replace"))


@tap.case("the environment overrides the file, a flag the environment")
def _():
    sid = created(run("create", "--learner", "conf", config=MAIN, SANDGLASS_MEMORY="96M", SANDGLASS_TTL="2h"))
    sids.append(sid)
    m = meta(sid)
    tap.eq(m["limits"]["memory"], 96 << 20, "SANDGLASS_MEMORY over the file's memory")
    tap.eq(m["limits"]["pids"], 77, "the file's pids still")
    tap.eq(m["lifecycle"]["ttl_s"], 7200.0, "SANDGLASS_TTL=2h")
    sid = created(run("create", "--learner", "conf", "--memory", "128M", "--ttl", "off", config=MAIN,
                      SANDGLASS_MEMORY="96M", SANDGLASS_TTL="2h"))
    sids.append(sid)
    m = meta(sid)
    tap.eq(m["limits"]["memory"], 128 << 20, "--memory over SANDGLASS_MEMORY")
    tap.eq(m["lifecycle"]["ttl_s"], 0.0, "--ttl off over SANDGLASS_TTL")


@tap.case("a bad value names the file and the line")
def _():
    bad = conf("bad.conf", "[limits]\npids = 10\n\nmemory = 12Q\n")
    for args in (("ls",), ("create", "--learner", "conf")):
        p = run(*args, config=bad)
        err = p.stderr.decode(errors="replace")
        tap.ok(p.returncode == 1 and f"{bad}:4: memory: invalid size '12Q'" in err,
               f"{args[0]}: refused, naming {os.path.basename(bad)}:4 and memory", err)
    low = conf("low.conf", "[limits]\nmemory = 1M\n")
    p = run("create", "--learner", "conf", config=low)
    err = p.stderr.decode(errors="replace")
    tap.ok(p.returncode == 2 and f"{low}:2: memory 1M: at least 4M" in err,
           "create's own bound, naming the file and line", err)
    p = run("create", "--learner", "conf", config="none", SANDGLASS_CPUS="lots")
    err = p.stderr.decode(errors="replace")
    tap.ok(p.returncode == 1 and "SANDGLASS_CPUS: 'lots' is not a positive number of cores" in err,
           "a bad variable is named", err)


@tap.case("an unknown key or section is refused, naming it")
def _():
    cases = [("[limits]\nmemroy = 1G\n", ":2: unknown key 'memroy' in [limits]"),
             ("[limit]\nmemory = 1G\n", ":2: unknown section [limit]"),
             ("memory = 1G\n", ":1: 'memory' is outside a section: put it under [limits]"),
             ("[caps]\nmemory = 1G\n", ":2: 'memory' belongs in [limits], not [caps]"),
             ("[limits]\nmemory = 1G\npids = 9\nmemory = 2G\n", ":4: 'memory' is given twice (lines 2 and 4"),
             ("[limits]\nthis is not ini\n", ":2: not a [section], a key = value or a comment")]
    for i, (text, want) in enumerate(cases):
        path = conf(f"unknown{i}.conf", text)
        p = run("ls", config=path)
        err = p.stderr.decode(errors="replace")
        tap.ok(p.returncode == 1 and path + want in err, f"refused: {want}", err)


@tap.case("SANDGLASS_CONFIG=none reads no file; a named file must exist")
def _():
    xdg = os.path.join(env.root, "xdg")
    conf("xdg/sandglass/sandglass.conf", "[limits]\npids = oops\n")
    for value in ("none", ""):
        p = run("ls", config=value, XDG_CONFIG_HOME=xdg)
        tap.ok(p.returncode == 0, f"SANDGLASS_CONFIG={value!r}: the user's broken file is not read",
               p.stderr.decode(errors="replace"))
    p = run("ls", config=os.path.join(env.root, "missing.conf"))
    err = p.stderr.decode(errors="replace")
    tap.ok(p.returncode == 1 and "missing.conf: cannot read" in err, "a missing SANDGLASS_CONFIG file", err)


@tap.case("the user's file: $XDG_CONFIG_HOME, else ~/.config")
def _():
    if os.path.exists(SYSTEM_FILE):
        tap.skip("the user's file", f"this host has {SYSTEM_FILE}, which would be read too")
        return
    xdg = os.path.join(env.root, "xdg2")
    conf("xdg2/sandglass/sandglass.conf", "[limits]\npids = 55\n")
    sid = created(run("create", "--learner", "conf", config=None, XDG_CONFIG_HOME=xdg))
    sids.append(sid)
    tap.eq(meta(sid)["limits"]["pids"], 55, "pids from $XDG_CONFIG_HOME/sandglass/sandglass.conf")
    home = os.path.join(env.root, "home")
    conf("home/.config/sandglass/sandglass.conf", "[limits]\npids = 66\n")
    e = {"HOME": home}
    p = run("create", "--learner", "conf", config=None, drop=("SANDGLASS_INGEST", "XDG_CONFIG_HOME"), **e)
    sid = created(p)
    sids.append(sid)
    tap.eq(meta(sid)["limits"]["pids"], 66, "pids from ~/.config/sandglass/sandglass.conf")


@tap.case("a state-dir from the file is every process's")
def _():
    sid = sids[0]
    path = conf("state.conf", f"[sandglass]\nstate-dir = {env.state}\n")
    p = run("ls", "--json", config=path, drop=("SANDGLASS_STATE_DIR",))
    ids = [r["id"] for r in json.loads(p.stdout or b"[]")] if p.returncode == 0 else []
    tap.ok(sid in ids, "ls lists the sandboxes of the file's state directory", p.stderr.decode(errors="replace"))
    p = run("exec", sid, "--", "/bin/echo", "here", config=path, drop=("SANDGLASS_STATE_DIR",))
    tap.eq((p.returncode, p.stdout), (0, b"here\n"), "exec reaches a sandbox there")


@tap.case("the tests' environment holds none of the caller's defaults")
def _():
    names = config_vars()
    tap.ok(len(names) >= 27 and "SANDGLASS_MEMORY" in names and "SANDGLASS_MAX_CHECKPOINTS_PER_MIN" in names,
           "every key's variable is read from src/cli/config.c", repr(names))
    saved = {k: os.environ.get(k) for k in ("SANDGLASS_MEMORY", "SANDGLASS_CONFIG")}
    os.environ.update(SANDGLASS_MEMORY="1G", SANDGLASS_CONFIG="/etc/elsewhere.conf")
    try:
        e = hermetic_env()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    tap.ok("SANDGLASS_MEMORY" not in e and e.get("SANDGLASS_CONFIG") == "none", "sgtest drops them, reads no file")
    # each of those names is a variable the CLI reads: a bad value of it is refused by name
    unread = []
    for name in names:
        if name in ("SANDGLASS_INGEST", "SANDGLASS_CAPTURE_IGNORE"):  # free text, checked by its command
            continue
        p = run("ls", config="none", **{name: "x!"})
        if p.returncode != 1 or name not in p.stderr.decode(errors="replace"):
            unread.append(name)
    tap.ok(not unread, "every other key's variable is read and checked", ", ".join(unread))


for s in sids:
    env.destroy(s)
env.cleanup()
tap.done()
