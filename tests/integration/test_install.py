"""Issues 23 and 26: installable. `meson install` puts the binaries and everything
they read at run time (the page of `sandglass serve`: web/ and xterm.js from
npm, as $datadir/sandglass/web) under the prefix, and an installed
`sandglass` from PATH works with no source tree; `ninja uninstall` then
removes everything the install put there.

The build is installed into a temporary DESTDIR; every installed command
then runs in a mount namespace of its own where a tmpfs lies over the
source tree and the build tree (the supervisors it starts stay in it), so
nothing it reads can come from there: `sandglass serve` serves /xterm.js,
and a sandbox is created, runs a command and is destroyed. The systemd
units (checked by systemd-analyze verify) and the bash completion (run in
a real bash: COMP_WORDS in, COMPREPLY out) are where meson puts them."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import urllib.request

from sgtest import Env, tap

SRC = os.path.realpath(os.environ["SG_SOURCE_ROOT"])
BUILD = os.path.realpath(os.environ["SG_BUILD_ROOT"])

env = Env()
dest = os.path.join(os.path.realpath(env.root), "destdir")
meson = shutil.which("meson") or "meson"


def under(path: str, top: str) -> bool:
    return path == top or path.startswith(top + os.sep)


# A tmpfs over the source tree, and over the build tree when it is not in
# it, for this command only; then the command.
HIDE = ('mount -t tmpfs -o size=64k,mode=0755 sg-hidden "$1" && '
        '{ case "$2" in "$1"|"$1"/*) ;; *) mount -t tmpfs -o size=64k,mode=0755 sg-hidden "$2" ;; esac; } && '
        'shift 2 && exec "$@"')


def hidden(argv: list[str]) -> list[str]:
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", HIDE, "sh", SRC, BUILD, *argv]


opts = json.loads(subprocess.run([meson, "introspect", "--buildoptions", BUILD], capture_output=True,
                                 text=True, timeout=120).stdout or "[]")
opt = {o["name"]: o["value"] for o in opts}
prefix = opt.get("prefix", "/usr/local")
bindir = dest + os.path.join(prefix, opt.get("bindir", "bin"))
datadir = dest + os.path.join(prefix, opt.get("datadir", "share"))

tap.ok(not under(dest, SRC) and not under(dest, BUILD),
       "the DESTDIR is outside the source and build trees", f"{dest} (source {SRC}, build {BUILD})")
p = subprocess.run([meson, "install", "-C", BUILD, "--destdir", dest, "--no-rebuild", "--quiet"],
                   capture_output=True, text=True, timeout=300)
tap.ok(p.returncode == 0, "meson install into a DESTDIR", p.stdout[-2000:] + p.stderr[-2000:])
tap.ok(os.access(os.path.join(bindir, "sandglass"), os.X_OK), "sandglass is installed in $bindir", bindir)
web = os.path.join(datadir, "sandglass", "web")
for f in ("terminal.html", "terminal.js", "vendor/xterm.js", "vendor/xterm.css", "vendor/addon-fit.js"):
    tap.ok(os.path.isfile(os.path.join(web, f)), f"$datadir/sandglass/web/{f} is installed")
mandir = dest + os.path.join(prefix, opt.get("mandir", "share/man"))
# sandglass.conf.md is section 5 (the config files), the others section 1
pages = sorted(os.path.join("man5", f[:-3] + ".5") if f == "sandglass.conf.md" else os.path.join("man1", f[:-3] + ".1")
               for f in os.listdir(os.path.join(SRC, "docs", "man")) if f.endswith(".md"))
absent = [p for p in pages if not os.path.isfile(os.path.join(mandir, p))]
tap.ok(len(pages) > 1 and not absent, f"every man page is installed in $mandir/man1 and man5 ({len(pages)})",
       "missing: " + ", ".join(absent))

# The installed commands' environment: the installed bin first in PATH, and
# nothing that points at the build (the test harness's SANDGLASSD).
ienv = dict(env.env)
for k in ("SANDGLASSD", "SANDGLASS_WEB_DIR", "SANDGLASS_SUPERVISOR", "SANDGLASS_INIT"):
    ienv.pop(k, None)
ienv["PATH"] = bindir + os.pathsep + ienv.get("PATH", "/usr/bin:/bin")

# A sanitized build's reports and archived supervisor logs (scripts/test.sh
# points them into the checkout) go to a directory of this test's while the
# trees are hidden, and are handed to the run's own directories at the end,
# where its check reads them.
san = os.path.join(env.root, "san")
os.makedirs(os.path.join(san, "logs"), mode=0o1777)
os.chmod(san, 0o1777)
handback: list[tuple[str, str]] = []  # (ours, the run's)
for var in ("ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS"):
    parts = ienv.get(var, "").split(":")
    for i, kv in enumerate(parts):
        if kv.startswith("log_path="):
            path = os.path.realpath(kv[len("log_path="):])
            if under(path, SRC) or under(path, BUILD):
                parts[i] = "log_path=" + os.path.join(san, os.path.basename(path))
                handback.append((os.path.join(san, os.path.basename(path)), path))
    if var in ienv:
        ienv[var] = ":".join(parts)
archive = ienv.get("SANDGLASS_LOG_ARCHIVE")
if archive and (under(os.path.realpath(archive), SRC) or under(os.path.realpath(archive), BUILD)):
    ienv["SANDGLASS_LOG_ARCHIVE"] = os.path.join(san, "logs")
    handback.append((os.path.join(san, "logs") + os.sep, archive))


def hand_back() -> None:
    for ours, theirs in handback:
        if ours.endswith(os.sep):
            for f in os.listdir(ours):
                shutil.copy(os.path.join(ours, f), theirs)
            continue
        for f in os.listdir(san):
            if f.startswith(os.path.basename(ours) + "."):
                shutil.copy(os.path.join(san, f), os.path.dirname(theirs))


def run(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(hidden(list(argv)), capture_output=True, text=True, env=ienv, timeout=timeout)


p = run("sh", "-c", 'test ! -e "$1/web" && test ! -e "$1/meson.build" && test ! -e "$2/build.ninja" && '
        'command -v sandglass', "sh", SRC, BUILD)
tap.ok(p.returncode == 0 and p.stdout.strip() == os.path.join(bindir, "sandglass"),
       "in the commands' view the source and build trees are empty and sandglass comes from the DESTDIR",
       p.stdout + p.stderr)

# serve: its page and xterm.js, from the installed web directory alone
secret = os.path.join(env.root, "secret")
with open(os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
    f.write(os.urandom(32).hex() + "\n")
log = open(os.path.join(env.root, "serve.log"), "w")
serve = subprocess.Popen(hidden(["sandglass", "serve", "--listen", "127.0.0.1:0", "--secret", secret]),
                         stdout=subprocess.PIPE, stderr=log, env=ienv, text=True)
env.procs.append(serve)
log.close()
line = serve.stdout.readline()
tap.ok("serving terminals on http://" in line, "the installed sandglass serve starts",
       line + open(os.path.join(env.root, "serve.log")).read()[-2000:])
if "serving terminals on http://" in line:
    port = int(line.strip().rstrip("/").rsplit(":", 1)[1])
    for path, local in (("/xterm.js", "vendor/xterm.js"), ("/", "terminal.html")):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
                code, body = r.status, r.read()
        except OSError as e:
            code, body = 0, str(e).encode()
        with open(os.path.join(web, local), "rb") as f:
            want = f.read()
        tap.ok(code == 200 and body == want, f"GET {path}: the installed {local}", f"{code} {body[:200]!r}")
    serve.terminate()
    tap.eq(serve.wait(timeout=60), 0, "serve stops cleanly on SIGTERM")
else:
    serve.kill()
    serve.wait(timeout=60)
    for path in ("/xterm.js", "/"):
        tap.ok(False, f"GET {path}: served")
    tap.ok(False, "serve stops cleanly on SIGTERM")

# create, exec, destroy with the installed binaries (CLI, sandglassd's
# siblings in $libexecdir: supervisor, init, checkpoint worker)
p = run("sandglass", "create", "--learner", "installed")
sid = p.stdout.strip()
tap.ok(p.returncode == 0 and sid != "", "the installed sandglass creates a sandbox", p.stderr[-2000:])
if sid:
    env.record_sandboxes()
    p = run("sandglass", "exec", sid, "--", "sh", "-c", "echo installed-$((6 * 7))")
    tap.ok(p.returncode == 0 and p.stdout == "installed-42\n", "and runs a command in it",
           p.stdout[-500:] + p.stderr[-2000:])
    p = run("sandglass", "destroy", sid)
    tap.ok(p.returncode == 0, "and destroys it", p.stderr[-2000:])
    p = run("sandglass", "ls", "--json")
    tap.ok(p.returncode == 0 and sid not in p.stdout, "it is gone", p.stdout[-500:] + p.stderr[-500:])
else:
    for what in ("runs a command", "destroys it", "it is gone"):
        tap.ok(False, what)
hand_back()

# The operator's files (dist/meson.build): systemd's units in systemd's
# unit directory (pkg-config's, rebased on the prefix; else
# $prefix/lib/systemd/system), bash completion in bash-completion's
# completionsdir (else $datadir/bash-completion/completions).
def pc_var(pkg: str, var: str, define: str) -> str | None:
    if not shutil.which("pkg-config"):
        return None
    q = subprocess.run(["pkg-config", f"--define-variable={define}", f"--variable={var}", pkg],
                       capture_output=True, text=True, timeout=60)
    return q.stdout.strip() if q.returncode == 0 and q.stdout.strip() else None


libexecdir = os.path.join(prefix, opt.get("libexecdir", "libexec"))
unitdir = opt.get("systemdunitdir") or pc_var("systemd", "systemdsystemunitdir", f"root_prefix={prefix}") or \
    os.path.join(prefix, "lib", "systemd", "system")
units = ("sandglass-ingest.service", "sandglass-serve.service", "sandglass-host.service")
for u in units:
    tap.ok(os.path.isfile(dest + os.path.join(unitdir, u)), f"{u} is installed in {unitdir}")
execs = {}
for u in units:
    text = open(dest + os.path.join(unitdir, u)).read() if os.path.isfile(dest + os.path.join(unitdir, u)) else ""
    execs[u] = [ln.split("=", 1)[1] for ln in text.splitlines() if ln.startswith("ExecStart=")]
tap.ok(execs["sandglass-ingest.service"] == [os.path.join(libexecdir, "sandglassd") + " ingest"] and
       execs["sandglass-serve.service"] == [os.path.join(libexecdir, "sandglassd") + " serve"] and
       execs["sandglass-host.service"] == [os.path.join(libexecdir, "sandglassd") + " host"],
       "each unit runs the installed sandglassd's command", repr(execs))
analyze = shutil.which("systemd-analyze")
if analyze and all(os.path.isfile(dest + os.path.join(unitdir, u)) for u in units):
    # A copy of each unit whose programs are the DESTDIR's (verify checks
    # that ExecStart's program exists); --man=no: the pages are not in the
    # host's man path. Any line it prints (an unknown key, a bad value) fails.
    vdir = os.path.join(env.root, "units")
    os.makedirs(vdir, exist_ok=True)
    for u in units:
        text = open(dest + os.path.join(unitdir, u)).read()
        with open(os.path.join(vdir, u), "w") as f:
            f.write(text.replace("=" + libexecdir + "/", "=" + dest + libexecdir + "/"))
    p = subprocess.run([analyze, "verify", "--man=no", *[os.path.join(vdir, u) for u in units]],
                       capture_output=True, text=True, timeout=120, cwd=vdir)
    tap.ok(p.returncode == 0 and not (p.stdout + p.stderr).strip(), "systemd-analyze verify: the units are clean",
           f"exit {p.returncode}\n{p.stdout[-3000:]}{p.stderr[-3000:]}")
    # The ingest needs no privilege: systemd's own measure of its unit's
    # exposure stays in its "OK" band (2.0 and under; the host's and
    # serve's are not, and say why in their files).
    p = subprocess.run([analyze, "security", "--offline=yes", "--threshold=20",
                        os.path.join(vdir, "sandglass-ingest.service")], capture_output=True, text=True, timeout=120)
    tap.ok(p.returncode == 0, "systemd-analyze security: the ingest's unit is exposed 2.0 or less",
           (p.stdout + p.stderr)[-1500:])
else:
    for what in ("verify: the units are clean", "security: the ingest's unit is exposed 2.0 or less"):
        tap.skip(f"systemd-analyze {what}",
                 "no systemd-analyze (Debian's systemd)" if not analyze else "the units are not installed")

compdir = opt.get("bashcompletiondir") or \
    pc_var("bash-completion", "completionsdir", "datadir=" + os.path.join(prefix, opt.get("datadir", "share"))) or \
    os.path.join(datadir, "bash-completion", "completions")[len(dest):]
comp = {n: dest + os.path.join(compdir, n) for n in ("sandglass", "sandglassd")}
tap.ok(all(os.path.isfile(f) for f in comp.values()), f"bash completion for sandglass and sandglassd in {compdir}")


def complete(words: list[str]) -> list[str]:
    """COMPREPLY of the installed completion for the command line words
    (the last one the word being completed), in a bash of its own."""
    script = ('source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMP_LINE="$*"; '
              'COMP_POINT=${#COMP_LINE}; _sandglass_complete; printf "%s\\n" "${COMPREPLY[@]}"')
    q = subprocess.run(["bash", "--norc", "--noprofile", "-c", script, "bash", comp["sandglass"], *words],
                       capture_output=True, text=True, timeout=60)
    return [w for w in q.stdout.split("\n") if w] if q.returncode == 0 and not q.stderr else ["<bash failed>", q.stderr]


if os.path.isfile(comp["sandglass"]):
    p = run("sandglass", "--help")
    cmds = sorted(set(re.findall(r"^  ([a-z]+)  ", p.stdout, re.M)))
    got = complete(["sandglass", ""])
    tap.ok(len(cmds) > 10 and set(cmds) <= set(got), "sandglass <TAB>: every command of 'sandglass --help'",
           f"--help: {cmds}\ncompletion: {got}")
    tap.eq(complete(["sandglass", "cre"]), ["create"], "sandglass cre<TAB>: create")
    tap.eq(complete(["sandglass", "create", "--mem"]), ["--memory"], "sandglass create --mem<TAB>: --memory")
    tap.eq(complete(["sandglass", "create", "--memory", ""]), [],
           "after an option that takes a value, no option is offered")
    dcmds = complete(["/usr/libexec/sandglassd", ""])
    tap.ok("ingest" in dcmds and "serve" in dcmds and "create" not in dcmds,
           "sandglassd <TAB>: its own commands only", repr(dcmds))
    for c in ("ingest", "create"):
        p = run("sandglass", c, "--help")
        want = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", p.stdout)) - {"--help"}
        got = set(complete(["sandglass", c, "--"]))
        tap.ok(p.returncode == 0 and want and want <= got, f"sandglass {c} --<TAB>: every option its --help names",
               f"missing: {sorted(want - got)}")
    # bash-completion's own loader finds it where it was installed, by the
    # command's name, as an interactive bash would on first <TAB>.
    loader = "/usr/share/bash-completion/bash_completion"
    if os.path.isfile(loader) and compdir.endswith("/completions"):
        script = ('source "$1"; for c in sandglass sandglassd; do __load_completion "$c" || exit 1; '
                  'complete -p "$c"; done; COMP_WORDS=(sandglassd ing); COMP_CWORD=1; _sandglass_complete; '
                  'printf "%s\\n" "${COMPREPLY[@]}"')
        q = subprocess.run(["bash", "--norc", "--noprofile", "-c", script, "bash", loader], capture_output=True,
                           text=True, timeout=60,
                           env=dict(os.environ, BASH_COMPLETION_USER_DIR=os.path.dirname(dest + compdir)))
        tap.ok(q.returncode == 0 and q.stdout.split("\n") == [
                   "complete -o default -F _sandglass_complete sandglass",
                   "complete -o default -F _sandglass_complete sandglassd", "ingest", ""],
               "bash-completion's loader loads it for sandglass and sandglassd by name", q.stdout + q.stderr)
    else:
        tap.skip("bash-completion's loader loads it for sandglass and sandglassd by name",
                 "no bash-completion (Debian's bash-completion)" if not os.path.isfile(loader)
                 else f"{compdir} is not a completions directory")
    tap.ok(complete(["sandglass", "ingest", "--log-level", ""]) == [] and
           "--log-level" in complete(["sandglass", "serve", "--lo"]), "--log-level is completed for serve, and its value is not an option")
else:
    for what in ("every command", "cre", "--mem", "no option after --memory", "sandglassd", "ingest's options",
                 "create's options", "bash-completion's loader", "--log-level"):
        tap.ok(False, f"bash completion: {what} (not installed)")

# uninstall: meson's log of what it installed (the web directory with it,
# and every directory it made) is removed, and nothing is left in the DESTDIR
ninja = shutil.which("ninja") or "ninja"
p = subprocess.run([ninja, "-C", BUILD, "uninstall"], capture_output=True, text=True, timeout=300)
tap.ok(p.returncode == 0, "ninja uninstall", p.stdout[-2000:] + p.stderr[-2000:])
left = [os.path.join(d, x) for d, dirs, files in os.walk(dest) for x in dirs + files]
tap.ok(not left, "uninstall leaves nothing in the DESTDIR (no file, no directory)",
       "\n".join(sorted(left)[:40]))
tap.done()
