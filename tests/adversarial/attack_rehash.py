#!/usr/bin/env python3
"""A rehash storm: twenty 32 MiB files rewritten a byte at a time. The
watcher re-reads and re-hashes a file per change; its reads are bounded
per second and per loop turn (SG_WATCH_READ_*), its CPU is charged to its
own cgroup, and the abort is not stuck behind 640 MiB of hashing."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attack_common import run_attack_test  # noqa: E402

run_attack_test("rehash", rss_growth_max_kb=None, cpu_share_max=None)
