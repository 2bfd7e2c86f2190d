"""Helpers every part uses: a log line, medians, timed commands."""

import os
import statistics
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Builds run as `make site` would run them: the environment as it was
# when this module was imported, before main() pins the thread counts.
CHILD_ENV = dict(os.environ)


def say(*args):
    print("[bench]", *args, flush=True)


def summary(values):
    """Median and the runs it came from."""
    return {"median": statistics.median(values), "runs": list(values)}


def ratios(numerators, denominators):
    """Per-round ratios (same round, same load) and their median."""
    return summary(
        [a / b for a, b in zip(numerators, denominators, strict=True)]
    )


def run(command, cwd, env=None):
    """Run command; return (seconds, stdout). Raise with its output."""
    start = time.perf_counter()
    done = subprocess.run(
        command,
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**CHILD_ENV, **(env or {})},
        check=False,
    )
    seconds = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(
            f"{' '.join(map(str, command))} failed ({done.returncode}):\n"
            f"{(done.stdout + done.stderr)[-3000:]}"
        )
    return seconds, done.stdout + done.stderr
