#!/usr/bin/env python3
"""The arrows of src/ run one way: a folder includes only folders below it.

    check-layers.py [SRC_DIR]   (default: the src/ beside this script's folder)
    check-layers.py --order     the layers, lowest first, one a line (meson.build
                                builds one library per folder in this order)

The order, lowest first, is LAYERS below (docs/ARCHITECTURE.md draws it).
Prints TAP: one check per folder, listing every include that goes up or
sideways into a folder that is not below it, and one that every file sits
in a known folder and every quoted include is path-qualified ("dir/x.h").
"""
import os
import re
import sys

LAYERS = ["base", "state", "wire", "sandbox", "checkpoint", "delivery", "capture", "ingest",
          "serve", "supervisor", "mcp", "cli", "bin"]
rank = {name: i for i, name in enumerate(LAYERS)}
if sys.argv[1:] == ["--order"]:
    print("\n".join(LAYERS))
    sys.exit(0)
src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
inc_re = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

bad = {name: [] for name in LAYERS}
stray = []
for d, _dirs, files in os.walk(src):
    for f in files:
        if not f.endswith((".c", ".h")):
            continue
        path = os.path.join(d, f)
        rel = os.path.relpath(path, src)
        folder = rel.split(os.sep)[0] if os.sep in rel else None
        if folder not in rank:
            stray.append(f"{rel}: not in a known folder")
            continue
        for inc in inc_re.findall(open(path, errors="replace").read()):
            top = inc.split("/")[0] if "/" in inc else None
            if top is None:
                stray.append(f"{rel}: #include \"{inc}\" is not path-qualified")
            elif top not in rank:
                stray.append(f"{rel}: #include \"{inc}\" names no known folder")
            elif rank[top] > rank[folder]:
                bad[folder].append(f"{rel} includes {inc} ({top} is above {folder})")

n = 0
failed = 0
for name in LAYERS:
    n += 1
    ok = not bad[name]
    failed += not ok
    print(f"{'ok' if ok else 'not ok'} {n} - {name}/ includes only folders below it")
    for line in bad[name]:
        print(f"#   {line}")
n += 1
print(f"{'ok' if not stray else 'not ok'} {n} - every file in a layer folder, every include path-qualified")
for line in stray:
    print(f"#   {line}")
failed += bool(stray)
print(f"1..{n}")
sys.exit(1 if failed else 0)
