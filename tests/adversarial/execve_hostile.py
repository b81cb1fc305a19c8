#!/usr/bin/env python3
"""The learner's execve calls are held until the supervisor has read their
path and argv from the caller's memory (src/sandbox/execnotify.h). A
learner controls those pointers: unmapped, wrapping, pointing into the
middle of nowhere, or argv arrays that never end. Each read must stop at
what is mapped and at the bounds (256 arguments, 4 KiB), the call must go
on (the kernel then fails it with EFAULT, as without us), and the
supervisor must keep serving: the next exec runs and is recorded."""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
from sgtest import EXEC_HELD, tap  # noqa: E402
from test_capture import CapEnv  # noqa: E402

# execve(2) through ctypes with hostile pointers; each call fails in the
# kernel (EFAULT or ENOENT), none may hang or kill anything but itself.
HOSTILE = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
NR = 59  # execve on x86_64
P = ctypes.c_void_p
PAGE = 4096

def guarded(n):
    # n bytes of memory right before a page that is not mapped
    size = (n + PAGE - 1) // PAGE * PAGE
    a = libc.mmap(None, size + PAGE, 3, 0x22, -1, 0)  # rw, private|anonymous
    assert libc.munmap(a + size, PAGE) == 0
    return a + size - n

calls = [
    (P(0xdead0000), P(0), P(0)),                                   # unmapped path
    (ctypes.c_char_p(b"/bin/true"), P(0xdead0000), P(0)),          # unmapped argv
    (ctypes.c_char_p(b"/bin/true"), P(0xfffffffffffff000), P(0)),  # the kernel's half
]
# an argv array with no NULL end, running into the unmapped page
s = ctypes.create_string_buffer(b"x" * 100)
arr = guarded(512 * 8)
ctypes.memmove(arr, (P * 512)(*[ctypes.addressof(s)] * 512), 512 * 8)
calls.append((ctypes.c_char_p(b"/bin/true"), P(arr), P(0)))
# a 1 MiB argument with no NUL, running into the unmapped page
big = guarded(1 << 20)
ctypes.memset(big, ord("y"), 1 << 20)
calls.append((ctypes.c_char_p(b"/bin/true"), (P * 3)(big, big, None), P(0)))
for i in range(200):
    for c in calls[:3]:
        libc.syscall(NR, *c)
for c in calls[3:]:
    libc.syscall(NR, *c)
print("survived", flush=True)
"""

env = CapEnv()
try:
    sid = env.create_captured()
    p = env.exec(sid, "python3", "-c", HOSTILE, timeout=300)
    tap.ok(p.returncode == 0 and b"survived" in p.stdout,
           "600 execve calls with unmapped, wrapping and endless pointers fail as the kernel fails them, "
           "and the caller goes on", p.stdout.decode()[-300:] + p.stderr.decode()[-600:])
    r = env.exec(sid, "/bin/echo", "still-serving")
    tap.eq((r.returncode, r.stdout), (0, b"still-serving\n"), "the supervisor still serves execs")
    rows = env.wait_rows(sid, lambda rs: any(x["kind"] == "process" and
                                             (x["payload"].get("argv") or [None])[0] == "/bin/echo" for x in rs))
    echo = next((x["payload"] for x in rows if x["kind"] == "process" and
                 (x["payload"].get("argv") or [None])[0] == "/bin/echo"), None)
    tap.ok(echo is not None and echo.get("argv") == ["/bin/echo", "still-serving"] and
           (not EXEC_HELD or echo.get("argv_source") == "execve"),
           "and records the next program, read while held", repr(echo))
    tap.ok(all(len(json_argv) <= 256 for json_argv in
               ((x["payload"].get("argv") or []) for x in rows if x["kind"] == "process")),
           "no recorded argv passes 256 arguments")
    env.destroy(sid)
finally:
    env.cleanup()
tap.done()
