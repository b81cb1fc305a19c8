#!/usr/bin/env python3
"""No raw print of a learner's bytes to a terminal or a log (issue 22).

    check-raw-print.py SRC_DIR

Every message that reaches stderr or a log file goes through the one
escaping printer, sg_print_vis / sg_vprint_vis (src/base/log.h: sg_log,
sg_cli_fail, sg_cli_sayf use it), which writes a learner's control bytes,
ESC, newlines, invalid UTF-8 and bidi marks escaped. This lint finds, in
every .c file under SRC_DIR:

  - a printf-family call or raw write to stderr: fprintf/vfprintf/fputs/
    fputc/fwrite/putc(..., stderr), write(2 or STDERR_FILENO, ...), perror,
    err/warn and their kin, syslog;
  - every dprintf/vdprintf (its fd may be a terminal or a log);
  - a printf/vprintf/puts/fprintf(stdout) to the user's terminal whose
    arguments take a path, a name or an error text (an identifier holding
    path, name, file, msg, reason or label) not passed through sg_vis.

Each hit must be in ALLOW below, with the reason it cannot carry a learner's
bytes to a terminal or a log (or goes where a learner writes anyway); an
ALLOW entry that matches nothing fails too, so the list stays true. TAP: one
check per file with a hit, then one for the allow-list.
"""
import os
import re
import sys

# (file under SRC_DIR, a substring of the call's text) -> why it may be raw.
ALLOW = {
    ("cli/report.c", "write(2, s, n)"):
        "a --json error: JSON_ENSURE_ASCII output, checked printable ASCII byte by byte before the write",
    ("base/util.c", "write(2, msg, sizeof msg - 1)"):
        "sg_oom's fixed text, no argument (no stdio: it may allocate)",
    ("sandbox/execchild.c", 'dprintf(2, "sandglass: %s%s%s: %s\\n"'):
        "inside the sandbox, on the exec's own stderr: the learner's output stream, "
        "which the learner writes anything to and the capture and the CLI relay as output",
    ("sandbox/execchild.c", 'dprintf(2, "sandglass: %s: command not found\\n", file)'):
        "inside the sandbox, on the exec's own stderr (the learner's output stream)",
    ("sandbox/init.c", "dprintf(fds[2], \"sandglass: cannot join the exec's cgroup: %s\\n\", strerror(e))"):
        "the exec's own stderr (the learner's output stream); fixed text and strerror",
    ("sandbox/init.c", "dprintf(fds[2], \"sandglass: cannot join the exec's cgroup: %s\\n\", strerror(errno))"):
        "the exec's own stderr (the learner's output stream); fixed text and strerror",
    ("sandbox/init.c", 'dprintf(ready_fd, "error: %s\\n", err->msg)'):
        "the ready pipe to the supervisor, a protocol line: its reader reports it through sg_err, "
        "printed by the escaping printer",
    ("supervisor/supervisor.c", 'dprintf(ready_fd, "error: %s\\n", err->msg)'):
        "the ready pipe to `sandglass create`, which prints it through sg_cli_fail (escaped)",
    ("wire/revive.c", 'dprintf(rfd, "error: cannot run %s: %s\\n", daemon, strerror(errno))'):
        "the ready pipe of a takeover: read back as an sg_err, printed escaped",
    ("bin/sandglass-init.c", "dprintf(4, "):
        "init's ready pipe (fd 4) to the supervisor: fixed texts and strerror, reported through sg_err",
    ("state/state.c", 'dprintf(fd, "%s\\n", owner)'):
        "the owner mark file of a cgroup (a state file, not a log): the operator's state directory",
}

STDERR_CALL = re.compile(
    r"\b(?:(?:fprintf|vfprintf|fputs|fputc|fwrite|putc)\s*\((?:[^;]*?)\bstderr\b"
    r"|(?:perror|warnx?|errx?|verrx?|vwarnx?|syslog)\s*\("
    r"|write\s*\(\s*(?:2|STDERR_FILENO)\s*,)")
FD_CALL = re.compile(r"\b(?:dprintf|vdprintf)\s*\(")
STDOUT_CALL = re.compile(r"\b(?:printf|vprintf|puts)\s*\(|\bfprintf\s*\(\s*stdout\b")
TAKES_TEXT = re.compile(r"\w*(?:path|name|file|msg|reason|label)\w*", re.I)


def strip_comments(text):
    """Comments blanked (newlines kept, so line numbers hold); strings kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text[i] in "\"'":
            q, j = text[i], i + 1
            while j < n and text[j] != q:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def call_text(text, start):
    """The call starting at start, to its closing parenthesis."""
    depth, i, n = 0, text.index("(", start), len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return text[start:i + 1]
        i += 1
    return text[start:]


def args_take_text(call):
    """Whether the arguments after the format name a path, name or error
    text that is not passed through sg_vis."""
    no_strings = re.sub(r'"(?:\\.|[^"\\])*"', '""', call)
    if "sg_vis" in no_strings or "vis(" in no_strings:
        return False
    inner = no_strings[no_strings.index("(") + 1:]
    return bool(TAKES_TEXT.search(inner))


def blank_strings(text):
    """String and character literals' contents blanked (same length): a
    call named inside a help text is not a call."""
    return re.sub(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
                  lambda m: m.group(0)[0] + " " * (len(m.group(0)) - 2) + m.group(0)[-1], text)


def hits(path):
    with open(path, errors="replace") as f:
        text = strip_comments(f.read())
    masked = blank_strings(text)
    found = []
    for rx, stdout in ((STDERR_CALL, False), (FD_CALL, False), (STDOUT_CALL, True)):
        for m in rx.finditer(masked):
            call = call_text(text, m.start())
            if stdout and not args_take_text(call):
                continue
            line = text.count("\n", 0, m.start()) + 1
            found.append((line, " ".join(call.split())))
    return sorted(set(found))


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "src")
    used = set()
    checks = []
    for root, _dirs, files in sorted(os.walk(src)):
        for fn in sorted(files):
            if not fn.endswith(".c"):
                continue
            path = os.path.join(root, fn)
            rel = os.path.relpath(path, src)
            bad = []
            for line, call in hits(path):
                key = next((k for k in ALLOW if k[0] == rel and k[1] in call), None)
                if key:
                    used.add(key)
                else:
                    bad.append(f"{rel}:{line}: {call[:160]}")
            if bad:
                checks.append((False, f"{rel}: a raw print outside the escaping printer", bad))
            else:
                checks.append((True, f"{rel}: every message through the escaping printer", []))
    stale = [f"{k[0]}: {k[1]}" for k in ALLOW if k not in used]
    checks.append((not stale, "every allow-list entry matches a call", stale))
    print(f"1..{len(checks)}")
    failed = 0
    for i, (ok, name, diag) in enumerate(checks, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        for d in diag:
            print(f"#   {d}")
        failed += not ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
