#!/usr/bin/env python3
"""Attack (issue 22): file names that are terminal escape sequences, renamed
in a loop while the operator checkpoints and rolls back. A name holding
ESC ] 0 ; title BEL, ESC [ 2 K, a bidi override and "\\n[fake] restored OK",
caught mid-rename by the checkpoint walk, made the error message
("checkpoint diff: readlink NAME: ...") print raw on the operator's terminal
(the title set, the line erased, a fake "restored OK" shown while the
rollback had failed), and supervisor.log got the same bytes, its lines
forged by the newline. Now every CLI message and log line goes through one
escaping printer (base/log.h: sg_print_vis), and a walk broken by renames is
taken again (SG_CKPT_RACE_TRIES; a symlink or directory gone mid-walk is
simply not in the snapshot): the operator's stderr and supervisor.log
hold no byte a terminal acts on and no forged line, and the checkpoints and
rollbacks taken while the learner renames all succeed (before: one of 30
rounds failed, raw; the error quoting a hostile checkpoint id is always raw
on the old code)."""
from __future__ import annotations

import json
import os
import re

from workspace_common import SLOW, new_env, sh, tap

HOSTILE = "\x1b]0;owned\x07\x1b[2K\r\n[fake] restored OK \u202e"
N = 40  # names of each kind
HOT = 2  # of them, renamed in the loop
ROUNDS = int(os.environ.get("SG_ROUNDS", "30"))  # checkpoints, plans and rollbacks each

MAKE = ("import os\n"
        "os.chdir('/workspace')\n"
        f"h = {HOSTILE!r}\n"
        f"for i in range({N}):\n"
        "    os.symlink('target', h + 'l%da' % i)\n"
        "    open(h + 'f%da' % i, 'w').write('x')\n"
        "    os.mkdir(h + 'd%da' % i)\n")
# In the background (rollback refuses to run under an exec, and kills
# background processes before it restores, after its plan): renames every
# symlink and directory of the first HOT back and forth, as fast as it can
# (a name the walk has just listed is then gone or renamed when it reads the
# link or opens the directory); /tmp/looping says it started.
LOOP = ("import os\n"
        "os.chdir('/workspace')\n"
        f"h = {HOSTILE!r}\n"
        "open('/tmp/looping', 'w').close()\n"
        "while True:\n"
        f"    for i in range({HOT}):\n"
        "        for k in 'ld':\n"
        "            a, b = h + '%s%da' % (k, i), h + '%s%db' % (k, i)\n"
        "            try:\n"
        "                os.rename(a, b)\n"
        "            except OSError:\n"
        "                try:\n"
        "                    os.rename(b, a)\n"
        "                except OSError:\n"
        "                    pass\n")
START = ('rm -f /tmp/looping; for i in 1 2 3; do python3 -c "$0" </dev/null >/dev/null 2>&1 & done; '
         'while [ ! -e /tmp/looping ]; do sleep 0.05; done')

# What a terminal acts on: C0 controls but the newline, DEL, C1 (raw or as
# UTF-8), bidi overrides and isolates, line and paragraph separators.
UNSAFE = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]|\xe2\x80[\xa8-\xae]|\xe2\x81[\xa6-\xa9]")


def unsafe(data: bytes) -> list[bytes]:
    return [data[max(0, m.start() - 40):m.end() + 40] for m in UNSAFE.finditer(data)][:3]


def forged(data: bytes) -> list[bytes]:
    return [ln for ln in data.split(b"\n") if ln.startswith(b"[fake]")]


env = new_env()
try:
    sid = env.create_captured()
    p = env.run("exec", sid, "--", "python3", "-c", MAKE, timeout=SLOW)
    tap.eq(p.returncode, 0, f"the learner makes {3 * N} files, symlinks and directories named with escapes")
    first = env.run("checkpoint", sid, "--json", timeout=SLOW)
    tap.eq(first.returncode, 0, "a checkpoint of them")
    ck = json.loads(first.stdout)["id"]
    errs = b""
    fails = {"loop": 0, "exec": 0, "checkpoint": 0, "dry run": 0, "rollback": 0}
    for _ in range(ROUNDS):
        bg = env.run("exec", sid, "--", "/bin/sh", "-c", START, LOOP, timeout=SLOW)
        fails["loop"] += bg.returncode != 0
        # each exec is checkpointed first by the supervisor (its failures
        # are supervisor.log lines)
        x = env.run("exec", sid, "--", "true", timeout=SLOW)
        fails["exec"] += x.returncode != 0
        c = env.run("checkpoint", sid, timeout=SLOW)
        fails["checkpoint"] += c.returncode != 0
        # without --yes and a terminal: the plan (a diff), then a usage error
        # (or 0: the renames had put the workspace back as it was)
        d = env.run("rollback", sid, "--to", ck, timeout=SLOW)
        fails["dry run"] += d.returncode not in (0, 2)
        # the plan again, then the loop killed and the workspace restored
        r = env.run("rollback", sid, "--to", ck, "--yes", timeout=SLOW)
        fails["rollback"] += r.returncode != 0
        errs += bg.stderr + x.stderr + c.stderr + d.stderr + r.stderr
    tap.ok(not unsafe(errs), "the operator's stderr holds no byte a terminal acts on", repr(unsafe(errs)))
    tap.ok(not forged(errs), "and no forged line", repr(forged(errs)))
    log = open(env.sbdir(sid, "supervisor.log"), "rb").read()
    tap.ok(not unsafe(log), "supervisor.log holds no byte a terminal acts on", repr(unsafe(log)))
    tap.ok(not forged(log), "and no forged line", repr(forged(log)))
    tap.ok(not any(fails.values()),
           f"all {ROUNDS} checkpoints, plans and rollbacks taken while the learner renames succeed",
           f"{fails}: {[ln for ln in errs.splitlines() if b'stdin is not a terminal' not in ln][:4]!r}")
    # and an error naming a hostile string is printed escaped
    bad = env.run("rollback", sid, "--to", HOSTILE, "--yes", timeout=SLOW)
    tap.ok(bad.returncode != 0 and not unsafe(bad.stderr) and b"\\x1b]0;owned\\x07" in bad.stderr,
           "an error quoting a hostile string shows it escaped", repr(bad.stderr[:300]))
    bad = env.run("rollback", sid, "--to", HOSTILE.encode() + b"\xff", "--yes", timeout=SLOW)
    tap.ok(bad.returncode == 1 and not unsafe(bad.stderr) and bad.stderr.count(b"\n") == 1,
           "one that is not UTF-8 is an error in one line (it crashed the CLI)",
           f"{bad.returncode}: {bad.stderr[:300]!r}")
    r = env.destroy(sid)
    tap.ok(r.returncode == 0, "destroy succeeds", r.stderr.decode(errors="replace"))
finally:
    env.cleanup()
tap.done()
