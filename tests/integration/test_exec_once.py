"""An exec runs once (issue 24): never twice, whatever the supervisor's
timing.

The hand-off to the ready child: the supervisor gives an exec to the
child init readied for it and waits SG_SPAWN_READY_ACK_MS for its "k"
(sent just before the command runs); without it the exec is cloned by
init instead. On a loaded host the child may take the exec just after
that wait ended: the supervisor must not clone it then (the command
would run twice, its output twice in the exec's stdout and in the
capture). $SANDGLASS_TEST_READY_ACK_MS=0 makes every wait end before the
child can answer: the window a loaded host hits by chance, at every exec.

A request sent again: the CLI resends an exec whose connection was reset
before any answer (the kernel's sign that the supervisor never read it,
sg_revive_unread) — but a supervisor that closes with anything unread in
its socket resets it too, after it may have started the command. The
request's "rid" makes the copy a refusal, never a second run.
$SANDGLASS_TEST_DROP_EXEC makes the supervisor start an exec with its
request left unread, send nothing, and close at the exec's end."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from sgtest import Env, tap  # noqa: E402

EXECS = 40


def test_handoff_wait_over(env: Env) -> None:
    sid = env.create()
    twice, bad, killed = [], [], 0
    for i in range(EXECS):
        mark = f"once-{i}"
        p = env.exec(sid, "/bin/echo", mark)
        out = p.stdout.decode(errors="replace")
        n = out.split().count(mark)
        if n > 1:
            twice.append(f"exec {i}: rc {p.returncode}, stdout {out!r}")
        # killed when the child took it just as the wait ended: said so on stderr
        elif p.returncode == 137 and b"sandglass: killed:" in p.stderr:
            killed += 1
        elif not (p.returncode == 0 and n == 1):
            bad.append(f"exec {i}: rc {p.returncode}, stdout {out!r}, stderr {p.stderr[-300:]!r}")
    print(f"# {killed} of {EXECS} killed as their ready child took them late", flush=True)
    tap.ok(not twice, f"{EXECS} execs whose ready child answers after the wait: none ran twice",
           "\n".join(twice[:10]))
    tap.ok(not bad, "each ran once (or was killed, saying why)", "\n".join(bad[:10]))
    env.run("destroy", sid, check=True)


def test_resent_request(env: Env) -> None:
    # the hand-off's usual wait: an exec killed as its ready child took it
    # late (the case above) is not what this case looks at
    env.env.pop("SANDGLASS_TEST_READY_ACK_MS", None)
    sid = env.create()
    drop = env.env["SANDGLASS_TEST_DROP_EXEC"]
    open(drop, "w").close()
    p = env.exec(sid, "/bin/sh", "-c", "echo ran >> /workspace/count; echo out")
    err = p.stderr.decode(errors="replace")
    tap.ok(not os.path.exists(drop), "the supervisor started the exec and closed with its request unread", err)
    runs = env.exec(sid, "/bin/cat", "/workspace/count").stdout.decode(errors="replace").split()
    tap.eq(runs, ["ran"], "the command ran once: the copy the CLI sent after the reset was refused")
    tap.ok(p.returncode == 122 and "started already (exec 1)" in err and "its end is unknown" in err,
           "the CLI says the command was started and its end is unknown to it (exit 122)",
           f"rc {p.returncode}, stderr {err!r}")
    p = env.exec(sid, "/bin/echo", "after")
    tap.ok(p.returncode == 0 and p.stdout == b"after\n", "the next exec runs as usual", repr(p))
    env.run("destroy", sid, check=True)


def main() -> None:
    env = Env()
    env.env["SANDGLASS_TEST_READY_ACK_MS"] = "0"
    # inert until test_resent_request makes the file (sv_client.c, test_drop_exec)
    env.env["SANDGLASS_TEST_DROP_EXEC"] = os.path.join(env.root, "drop-exec")
    try:
        tap.case("the ready child's answer after the wait")(lambda: test_handoff_wait_over(env))
        tap.case("a request resent after a reset")(lambda: test_resent_request(env))
    finally:
        env.cleanup()
    tap.done()


if __name__ == "__main__":
    main()
