"""The machine and the tools a report's figures came from."""

import os
import platform
import subprocess
from pathlib import Path

from bench.timing import ROOT

CHROMIUM = "/usr/bin/chromium"
KATEX_VERSION = ROOT / "docs/assets/katex/VERSION"


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


def _version(command):
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None
