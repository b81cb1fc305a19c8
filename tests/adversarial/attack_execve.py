#!/usr/bin/env python3
"""An execve storm: 200 threads of the learner fork and exec /bin/true flat
out; each execve is held for the supervisor to read and recorded as a
process event (bounded to 16 per wakeup). That work is the sandbox's: it is
charged to the supervisor's own cgroup, and the abort still answers and
empties the sandbox at once."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attack_common import run_attack_test  # noqa: E402

run_attack_test("execve", rss_growth_max_kb=None, cpu_share_max=None)
