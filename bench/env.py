"""The machine and the tools a report's figures came from."""

import os
import platform
import statistics
import subprocess
import time
from pathlib import Path

from bench.timing import ROOT

CHROMIUM = "/usr/bin/chromium"
PROBE_N, PROBE_RUNS = 5_000_000, 5
KATEX_VERSION = ROOT / "docs/assets/katex/VERSION"


# What a timed part records of the machine it met (a run of some parts
# keeps the others, each with its own).
PART_KEYS = (
    "cpu",
    "cores_available",
    "torch",
    "python",
    "commit",
    "tree_dirty",
    "load_average_at_start",
)


def part_environment(*extra):
    """environment() as a part records it: PART_KEYS, then extra."""
    env = environment()
    return {k: env[k] for k in (*PART_KEYS, *extra)}


def environment():
    import numpy as np
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cores_available": len(os.sched_getaffinity(0)),
        "load_average_at_start": os.getloadavg(),
        "cpu_probe_s": cpu_probe(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "platform": platform.platform(),
        "chromium": _version([CHROMIUM, "--version"]),
        "node": _version(["node", "--version"]),
        "katex": KATEX_VERSION.read_text().strip()
        if KATEX_VERSION.is_file()
        else None,
        "commit": _version(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"]
        ),
        "tree_dirty": bool(
            _version(["git", "-C", str(ROOT), "status", "--porcelain"])
        ),
    }


def cpu_probe():
    """Median seconds of a fixed pure-Python loop on one core: the same
    machine kind runs it in very different times on different days (a
    shared host), and the suite's seconds scale with it, so a report's
    times are read against it."""
    times = []
    for _ in range(PROBE_RUNS):
        start = time.perf_counter()
        total = 0
        for i in range(PROBE_N):
            total += i
        times.append(time.perf_counter() - start)
    return round(statistics.median(times), 3)


def _version(command):
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None
