"""An exec runs once (issue 24): never twice, whatever the supervisor's
timing.

The hand-off to the ready child: the supervisor gives an exec to the
child init readied for it and waits SG_SPAWN_READY_ACK_MS for its "k"
(sent just before the command runs); without it the exec is cloned by
init instead. On a loaded host the child may take the exec just after
that wait ended: the supervisor must not clone it then (the command
would run twice, its output twice in the exec's stdout and in the
capture). $SANDGLASS_TEST_READY_ACK_MS=0 makes every wait end before the
child can answer: the window a loaded host hits by chance, at every exec."""
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


def main() -> None:
    env = Env()
    env.env["SANDGLASS_TEST_READY_ACK_MS"] = "0"
    try:
        tap.case("the ready child's answer after the wait")(lambda: test_handoff_wait_over(env))
    finally:
        env.cleanup()
    tap.done()


if __name__ == "__main__":
    main()
