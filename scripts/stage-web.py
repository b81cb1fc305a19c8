#!/usr/bin/env python3
"""Stages the page of `sandglass serve` into one directory, as installed.

    stage-web.py WEB_SRC STAMP DEPFILE    stage into the directory beside STAMP
                                          named web (the custom target `web`)

The staged directory gets every file and folder of WEB_SRC (web/: the page, its script,
web/console/ ...) but node_modules and npm's package files, and, under
vendor/, the files the page loads from npm (VENDOR below), taken from
WEB_SRC/node_modules as `npm ci` made it from web/package-lock.json
(scripts/install-deps.sh). Nothing is fetched. DEPFILE names every input
file and folder, so that ninja stages again when one changes, appears or
goes. The target's output is a stamp file, not the directory, so that
`ninja -t clean` can remove it; meson installs the directory
(meson.build: install_subdir, so that uninstall removes it).
"""
import os
import shutil
import sys

# served name under vendor/ -> path under node_modules (src/serve/terminal.c serves them)
VENDOR = {
    "xterm.js": "@xterm/xterm/lib/xterm.js",
    "xterm.css": "@xterm/xterm/css/xterm.css",
    "addon-fit.js": "@xterm/addon-fit/lib/addon-fit.js",
    # the console's replay (src/ingest/ingest_console.c serves them)
    "asciinema-player.min.js": "asciinema-player/dist/bundle/asciinema-player.min.js",
    "asciinema-player.css": "asciinema-player/dist/bundle/asciinema-player.css",
}
SKIP = {"node_modules", "package.json", "package-lock.json"}


def main() -> int:
    src, stamp, depfile = sys.argv[1:4]
    out = os.path.join(os.path.dirname(stamp) or ".", "web")
    missing = [p for p in VENDOR.values() if not os.path.isfile(os.path.join(src, "node_modules", p))]
    if missing:
        print(f"stage-web: {src}/node_modules lacks {', '.join(missing)}: run `npm ci` in {src} "
              "(scripts/install-deps.sh does)", file=sys.stderr)
        return 1
    tmp = out + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    inputs = []
    for d, dirs, files in os.walk(src):
        if d == src:
            dirs[:] = [x for x in dirs if x not in SKIP]
            files = [x for x in files if x not in SKIP]
        inputs.append(d)
        rel = os.path.relpath(d, src)
        os.makedirs(os.path.join(tmp, rel), exist_ok=True)
        for f in files:
            inputs.append(os.path.join(d, f))
            shutil.copy2(os.path.join(d, f), os.path.join(tmp, rel, f))
    os.makedirs(os.path.join(tmp, "vendor"))
    for name, p in VENDOR.items():
        inputs.append(os.path.join(src, "node_modules", p))
        shutil.copy2(os.path.join(src, "node_modules", p), os.path.join(tmp, "vendor", name))
    inputs.append(os.path.join(src, "node_modules", ".package-lock.json"))
    shutil.rmtree(out, ignore_errors=True)
    os.rename(tmp, out)
    with open(depfile, "w") as f:
        esc = [i.replace(" ", "\\ ") for i in inputs if os.path.exists(i)]
        f.write(f"{stamp}: {' '.join(esc)}\n")
    with open(stamp, "w") as f:
        f.write("staged\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
