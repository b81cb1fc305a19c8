#!/usr/bin/env python3
"""An inotify overflow storm: 130,000 files touched over and over overflow
the kernel's queue; each overflow asks for a full rescan, which runs at
most every SG_WATCH_RESCAN_MIN_MS and 4x its own duration. The
supervisor's CPU is charged to its own cgroup and the abort answers."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attack_common import run_attack_test  # noqa: E402

# The watcher's tree of the 130,000 files stays (~330 bytes a file
# measured): the bound is 512 bytes a file, nothing else kept.
run_attack_test("overflow", rss_growth_max_kb=None, cpu_share_max=None, rss_after_max_kb=130000 * 512 // 1024)
