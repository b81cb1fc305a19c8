#!/usr/bin/env python3
"""The CLI's reference from one source: docs/man/sandglass*.md.

    gen-cli-docs.py --man PAGE.md OUT.1     one man page (troff), for meson
    gen-cli-docs.py --cli-md [OUT]          docs/CLI.md (default: write it in place)
    gen-cli-docs.py --bash-completion OUT [OUT2]
                                            bash completion of sandglass and sandglassd
                                            (commands, each command's options), for meson
    gen-cli-docs.py --check [SANDGLASS]     lint: docs/CLI.md is what --cli-md makes, every
                                            command of src/bin/sandglass.c has a page (and
                                            every page a command) with the same one-line
                                            summary, built by docs/man/meson.build; with the
                                            built SANDGLASS binary, every option its
                                            `CMD --help` names is in the page

Adding a command: its docs/man/sandglass-NAME.md, a line in
docs/man/sandglass.md's COMMANDS and in docs/man/meson.build, then
`scripts/gen-cli-docs.py --cli-md`.

Why Markdown pages and not troff as the source: they read as they are on a
forge and in an editor, CLI.md is made of them by joining (troff would need
a converter the other way), and the subset used here (below) turns into
troff with a hundred lines of this script, so no pandoc or ronn is needed
at build time. A page:

    # sandglass-NAME(1) -- one-line summary (as in sandglass --help)
    ## SYNOPSIS          a fenced block: the usage lines
    ## DESCRIPTION       paragraphs
    ## OPTIONS           "- `--opt ARG`: what it does" items
    ## ANY OTHER         paragraphs, fenced blocks, "- " lists

The config files' page, docs/man/sandglass.conf.md, is sandglass.conf(5)
(installed in man5) and CLI.md's "Configuration".

Inline: `code` (bold in troff), **bold**, *italic*, [text](link) (the text).
The overview page docs/man/sandglass.md lists the commands under
"## COMMANDS" in "### Group" subsections, one "- sandglass-NAME(1)" a line:
CLI.md follows that order and those groups.

Prints TAP with --check (one check per rule).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
MAN = os.path.join(ROOT, "docs", "man")
CLI_MD = os.path.join(ROOT, "docs", "CLI.md")
CONF_MD = os.path.join(MAN, "sandglass.conf.md")  # the config files' page, section 5
VERSION_RE = re.compile(r"version\s*:\s*'([^']+)'")


class Page:
    def __init__(self, path: str):
        self.path = path
        text = open(path, encoding="utf-8").read()
        lines = text.split("\n")
        m = re.match(r"^# (sandglass(?:-([a-z]+))?)\(1\) -- (.+)$", lines[0]) or \
            re.match(r"^# (sandglass\.conf)()\(5\) -- (.+)$", lines[0])
        if not m:
            raise SystemExit(f"{path}:1: want '# sandglass-NAME(1) -- summary' or '# sandglass.conf(5) -- summary'")
        self.title, self.name, self.summary = m.group(1), m.group(2) or "", m.group(3).strip()
        self.mansect = "5" if self.title == "sandglass.conf" else "1"
        self.sections: list[tuple[str, list[str]]] = []
        for line in lines[1:]:
            if line.startswith("## "):
                self.sections.append((line[3:].strip(), []))
            elif self.sections:
                self.sections[-1][1].append(line)
            elif line.strip():
                raise SystemExit(f"{path}: text before the first '## ' section")

    def section(self, name: str) -> list[str] | None:
        for n, body in self.sections:
            if n == name:
                return body
        return None


def blocks(lines: list[str]) -> list[tuple[str, object]]:
    """Paragraphs ("p", text), fenced blocks ("pre", lines), list items
    ("li", text), option items ("opt", (term, text)), subheadings ("h3", text)."""
    out: list[tuple[str, object]] = []
    i, para = 0, []

    def flush() -> None:
        if para:
            out.append(("p", " ".join(s.strip() for s in para)))
            para.clear()

    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            flush()
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append(("pre", lines[i + 1:j]))
            i = j + 1
            continue
        if line.startswith("### "):
            flush()
            out.append(("h3", line[4:].strip()))
        elif line.startswith("- "):
            flush()
            item = [line[2:]]
            while i + 1 < len(lines) and lines[i + 1].startswith("  ") and lines[i + 1].strip():
                i += 1
                item.append(lines[i].strip())
            text = " ".join(item)
            m = re.match(r"^(`[^`]+`(?:, `[^`]+`)*): (.*)$", text)
            out.append(("opt", (m.group(1), m.group(2))) if m else ("li", text))
        elif not line.strip():
            flush()
        else:
            para.append(line)
        i += 1
    flush()
    return out


# ---- troff ------------------------------------------------------------------

def roff_text(s: str) -> str:
    s = s.replace("\\", "\\e").replace("-", "\\-")
    s = re.sub(r"\[([^\]]+)\]\([^)]+\)", r"\1", s)
    s = re.sub(r"`([^`]+)`", r"\\fB\1\\fR", s)
    s = re.sub(r"\*\*([^*]+)\*\*", r"\\fB\1\\fR", s)
    s = re.sub(r"(?<![\w*])\*([^*\s][^*]*)\*(?![\w*])", r"\\fI\1\\fR", s)
    return "".join(c if ord(c) < 128 else f"\\[u{ord(c):04X}]" for c in s)  # troff input is ASCII


def roff_line(s: str) -> str:
    s = roff_text(s)
    return "\\&" + s if s.startswith((".", "'")) else s


def to_man(page: Page, version: str) -> str:
    name = page.title
    out = [f'.TH "{name.upper()}" "{page.mansect}" "" "sandglass {version}" "sandglass manual"',
           ".SH NAME", f"{name} \\- {roff_text(page.summary)}"]
    for sec, body in page.sections:
        out.append(f".SH {sec}")
        for kind, val in blocks(body):
            if kind == "p":
                out += [".PP", roff_line(val)]
            elif kind == "pre":
                out += [".PP", ".nf", ".RS 4"] + [roff_line(l) if l else "" for l in val] + [".RE", ".fi"]
            elif kind == "li":
                out += [".IP \\(bu 2", roff_line(val)]
            elif kind == "opt":
                term, text = val
                out += [".TP", roff_line(term), roff_line(text)]
            elif kind == "h3":
                out += [".SS " + roff_text(val)]
    return "\n".join(out) + "\n"


# ---- CLI.md -----------------------------------------------------------------

def md_body(lines: list[str]) -> list[str]:
    """A section's lines as they are, without leading and trailing blanks."""
    while lines and not lines[0].strip():
        lines = lines[1:]
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    return lines


def load_pages() -> tuple[Page, dict[str, Page]]:
    top = Page(os.path.join(MAN, "sandglass.md"))
    pages = {}
    for f in sorted(os.listdir(MAN)):
        if f.startswith("sandglass-") and f.endswith(".md"):
            p = Page(os.path.join(MAN, f))
            if f != f"sandglass-{p.name}.md":
                raise SystemExit(f"{p.path}: its title names sandglass-{p.name}")
            pages[p.name] = p
    return top, pages


def groups(top: Page) -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for line in top.section("COMMANDS") or []:
        if line.startswith("### "):
            out.append((line[4:].strip(), []))
        m = re.match(r"^- sandglass-([a-z]+)\(1\)", line)
        if m and out:
            out[-1][1].append(m.group(1))
    return out


def cli_md() -> str:
    top, pages = load_pages()
    out = ["# The sandglass CLI", "",
           "<!-- Generated from docs/man/sandglass*.md by scripts/gen-cli-docs.py --cli-md:",
           "     edit those pages, not this file (lint/cli_docs checks it). -->", "",
           "The reference of every command; each is also a man page (`man sandglass-create`,",
           "installed by `meson install`).", ""]
    out += md_body(top.section("DESCRIPTION") or [])
    for group, names in groups(top):
        out += ["", f"## {group}"]
        for n in (n for n in names if n in pages):  # a page missing: --check says so
            p = pages[n]
            out += ["", f"### sandglass {n}", "", f"{p.summary[0].upper()}{p.summary[1:]}.", ""]
            out += md_body(p.section("SYNOPSIS") or [])
            for sec, body in p.sections:
                if sec in ("SYNOPSIS", "SEE ALSO"):
                    continue
                if sec != "DESCRIPTION":
                    out += ["", f"**{sec.capitalize()}**", ""]
                else:
                    out.append("")
                out += md_body([l.replace("### ", "#### ", 1) if l.startswith("### ") else l for l in body])
    conf = Page(CONF_MD)
    out += ["", "## Configuration", "", f"{conf.summary[0].upper()}{conf.summary[1:]}: sandglass.conf(5).", ""]
    out += md_body(conf.section("SYNOPSIS") or [])
    for sec, body in conf.sections:
        if sec in ("SYNOPSIS", "SEE ALSO"):
            continue
        out += ["", f"### {sec.capitalize()}", ""] if sec != "DESCRIPTION" else [""]
        out += md_body([l.replace("### ", "#### ", 1) if l.startswith("### ") else l for l in body])
    for sec, body in top.sections:
        if sec in ("NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "SEE ALSO"):
            continue
        out += ["", f"## {sec.capitalize()}", ""] + md_body(body)
    return "\n".join(out) + "\n"


# ---- check ------------------------------------------------------------------

def commands(binary: str = "sandglass") -> dict[str, str]:
    """src/bin/BINARY.c's commands: name -> its help line."""
    src = open(os.path.join(ROOT, "src", "bin", binary + ".c"), encoding="utf-8").read()
    return {m.group(1): m.group(2) for m in
            re.finditer(r'\{"([a-z]+)",\s*(?:sg_cmd_[a-z_]+,\s*)?"([^"]*)"\}', src)}


# ---- bash completion --------------------------------------------------------

# An option in a SYNOPSIS line or an OPTIONS item's code: "--name", then its
# argument when one follows (a word that is not another option, "|" or a
# bracket: "--ttl D", "--checkpoints exec|manual", but not "--destroy |").
OPT_RE = re.compile(r"(?<![\w-])(--?[a-zA-Z][a-zA-Z0-9-]*)(=| (?=[^\s\]\[|`.-]))?")


def page_options(page: Page) -> tuple[list[str], list[str]]:
    """A page's options, and those of them that take an argument."""
    text, own = [], False
    for line in page.section("SYNOPSIS") or []:
        if line.startswith("sandglass"):  # a usage line: this command's, or another's shown beside it
            own = line.split()[:2] == ["sandglass", page.name]
        if own and not line.startswith("```"):
            text.append(line)
    for line in page.section("OPTIONS") or []:
        text += [c for c in re.findall(r"`([^`]*)`", line) if c.startswith("-")] if line.startswith("- ") else []
    opts: dict[str, bool] = {}
    for chunk in text:
        for m in OPT_RE.finditer(chunk):
            opts[m.group(1)] = opts.get(m.group(1), False) or bool(m.group(2))
    opts.pop("--help", None)
    return sorted(opts), sorted(o for o, arg in opts.items() if arg)


def bash_completion() -> str:
    """One script for both programs: the function tells them apart by
    COMP_WORDS[0]. Built-ins only (compgen), so it needs no bash-completion
    helpers; after an option that takes an argument, and for a word that is
    not an option, bash's default (file names) is left to work."""
    _, pages = load_pages()
    progs = {"sandglass": commands("sandglass"), "sandglassd": commands("sandglassd")}
    out = ["# bash completion for sandglass and sandglassd: generated by scripts/gen-cli-docs.py",
           "# --bash-completion from docs/man/ (each page's SYNOPSIS and OPTIONS) and the",
           "# command tables of src/bin/sandglass.c and src/bin/sandglassd.c. Do not edit.",
           "",
           "_sandglass_complete()",
           "{",
           "    local cur=\"${COMP_WORDS[COMP_CWORD]}\" prev=\"\" cmd=\"\" cmds opts=\"\" argopts=\"\" i",
           "    [ \"$COMP_CWORD\" -gt 0 ] && prev=\"${COMP_WORDS[COMP_CWORD-1]}\"",
           "    case \"${COMP_WORDS[0]##*/}\" in"]
    for prog in ("sandglassd", "sandglass"):
        pat = prog if prog == "sandglassd" else "*"
        out.append(f"        {pat}) cmds=\"{' '.join(sorted(progs[prog]))}\" ;;")
    out += ["    esac",
            "    for ((i = 1; i < COMP_CWORD; i++)); do",
            "        case \"${COMP_WORDS[i]}\" in",
            "            -*) ;;",
            "            *) cmd=\"${COMP_WORDS[i]}\"; break ;;",
            "        esac",
            "    done",
            "    if [ -z \"$cmd\" ]; then",
            "        COMPREPLY=($(compgen -W \"$cmds --help --version\" -- \"$cur\"))",
            "        return 0",
            "    fi",
            "    case \"$cmd\" in"]
    for name in sorted(set(progs["sandglass"]) | set(progs["sandglassd"])):
        if name not in pages:
            continue
        opts, argopts = page_options(pages[name])
        out.append(f"        {name}) opts=\"{' '.join(opts)}\"; argopts=\"{' '.join(argopts)}\" ;;")
    out += ["    esac",
            "    case \" $argopts \" in",
            "        *\" $prev \"*) [ -n \"$prev\" ] && return 0 ;;",
            "    esac",
            "    case \"$cur\" in",
            "        -*) COMPREPLY=($(compgen -W \"$opts --help\" -- \"$cur\")) ;;",
            "    esac",
            "    return 0",
            "}",
            "complete -o default -F _sandglass_complete sandglass sandglassd",
            ""]
    return "\n".join(out)


def check(binary: str | None) -> int:
    n, failed = 0, 0

    def ok(cond: bool, what: str, diag: str = "") -> None:
        nonlocal n, failed
        n += 1
        print(("ok" if cond else "not ok") + f" {n} - {what}")
        if not cond:
            failed += 1
            for line in diag.splitlines()[:40]:
                print("# " + line)

    top, pages = load_pages()
    cmds = commands()
    ok(bool(cmds), "src/bin/sandglass.c's command table is read", "no {\"name\", ..., \"help\"} entries found")
    missing = sorted(set(cmds) - set(pages))
    ok(not missing, "every command has a page in docs/man/",
       "add docs/man/sandglass-NAME.md (see scripts/gen-cli-docs.py) for: " + ", ".join(missing))
    extra = sorted(set(pages) - set(cmds))
    ok(not extra, "every page is a command's", "no such command: " + ", ".join(extra))
    listed = [c for _, names in groups(top) for c in names]
    ok(sorted(listed) == sorted(pages) and len(listed) == len(set(listed)),
       "docs/man/sandglass.md's COMMANDS lists every page once",
       f"listed {sorted(listed)}, pages {sorted(pages)}")
    bad = [f"{c}: page '{pages[c].summary}', sandglass --help '{cmds[c]}'" for c in sorted(set(cmds) & set(pages))
           if pages[c].summary != cmds[c]]
    ok(not bad, "each page's summary is the command's line in sandglass --help", "\n".join(bad))
    built = set(re.findall(r"'(sandglass[a-z.-]*)'", open(os.path.join(MAN, "meson.build"), encoding="utf-8").read()))
    want_built = {"sandglass", "sandglass.conf"} | {f"sandglass-{c}" for c in pages}
    ok(built == want_built, "docs/man/meson.build builds and installs every page",
       f"missing: {sorted(want_built - built)}; no such page: {sorted(built - want_built)}")
    nosyn = [c for c, p in pages.items() if not p.section("SYNOPSIS") or not p.section("DESCRIPTION")]
    ok(not nosyn, "each page has a SYNOPSIS and a DESCRIPTION", ", ".join(nosyn))
    want = cli_md()
    have = open(CLI_MD, encoding="utf-8").read() if os.path.exists(CLI_MD) else ""
    ok(have == want, "docs/CLI.md is generated from docs/man/ (scripts/gen-cli-docs.py --cli-md)",
       "docs/CLI.md differs from what docs/man/ makes: run scripts/gen-cli-docs.py --cli-md" +
       ("" if have else " (it is missing)"))
    if binary:
        env = dict(os.environ, SANDGLASS_STATE_DIR=os.environ.get("SANDGLASS_STATE_DIR", "/nonexistent"))
        for c in sorted(set(cmds) & set(pages)):
            p = subprocess.run([binary, c, "--help"], capture_output=True, text=True, timeout=60, env=env)
            opts = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", p.stdout + p.stderr)) - {"--help"}
            text = open(pages[c].path, encoding="utf-8").read()
            absent = sorted(o for o in opts if not re.search(re.escape(o) + r"(?![a-z0-9-])", text))
            ok(p.returncode == 0 and not absent, f"every option 'sandglass {c} --help' names is in its page",
               f"exit {p.returncode}; not in {os.path.relpath(pages[c].path, ROOT)}: {', '.join(absent)}")
    print(f"1..{n}")
    return 1 if failed else 0


def main() -> int:
    args = sys.argv[1:]
    if args[:1] == ["--man"] and len(args) == 3:
        meson = open(os.path.join(ROOT, "meson.build"), encoding="utf-8").read()
        m = VERSION_RE.search(meson)
        with open(args[2], "w", encoding="utf-8") as f:
            f.write(to_man(Page(args[1]), m.group(1) if m else "?"))
        return 0
    if args[:1] == ["--cli-md"] and len(args) <= 2:
        with open(args[1] if len(args) == 2 else CLI_MD, "w", encoding="utf-8") as f:
            f.write(cli_md())
        return 0
    if args[:1] == ["--bash-completion"] and len(args) in (2, 3):
        text = bash_completion()
        for out in args[1:]:
            with open(out, "w", encoding="utf-8") as f:
                f.write(text)
        return 0
    if args[:1] == ["--check"] and len(args) <= 2:
        return check(args[1] if len(args) == 2 else None)
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
