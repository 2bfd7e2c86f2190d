"""The test suite: `make test` and `make fast`, timed as typed.

In a fresh copy of the repository (copy_repo: its .venv links to ours,
so the venv set-up is not timed; make is told not to remake its stamp),
made a git repository with one commit, as a clone is (a test copies the
tree by `git ls-files`). Each `make test` starts from an empty
docs/generated, .cache, site/ and site-zensical/: it generates, checks,
builds both sites and runs every test. `make fast` then runs as a
writer runs it, on what `make test` generated (its cache warm, as it is
after any build): it checks and runs the quick tests; with no `make
test` before it (--quick), it starts from empty outputs too. Targets:
`make test` <= 300 s, `make fast` <= 60 s, each met only by runs that
passed. A failing run is recorded (its exit
status, pytest's summary and its last lines), never raised.
"""

import os
import re
import shutil
import subprocess
import time

from bench.site_perf.build_times import (
    TRAINED,
    generation_total,
    make_command,
    ran_seconds,
)
from bench.timing import CHILD_ENV, say, summary

TARGETS = {"test": 300.0, "fast": 60.0}
EMPTIED = ("docs/generated", ".cache", "site", "site-zensical")
# make run by make (make bench) inherits these; the copy's make must not
# (a -j jobserver, command-line variables of the outer make)
MAKE_VARS = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")
TIMEOUT_S = 3600.0
TAIL_LINES = 30
# pytest's last line: "== 3 failed, 120 passed, 2 skipped in 4.56s ==",
# "12 passed in 130.20s (0:02:10)", "no tests ran in 0.01s"
RE_SUMMARY = re.compile(
    r"^=*[ ]*(?P<body>(?:\d+ [a-z]+(?:, )?)+|no tests ran)"
    r" in (?P<seconds>[\d.]+)s(?: \([\d:]+\))?[ ]*=*[ ]*$",
    re.M,
)
RE_COUNT = re.compile(r"(\d+) ([a-z]+)")
# make test prints the unit tests' report (run beside the build) after
# this line, then runs the other tests: one pytest summary each
UNITS_MARK = "--- unit tests, run beside the build"
PLURAL = {"error": "errors", "warning": "warnings"}


def pytest_summary(output):
    """pytest's final summary line, parsed: {"line", "counts", "seconds"}
    (counts like {"passed": 120, "failed": 3, "warnings": 2}), or None
    when the output holds none (pytest never ran, or was killed)."""
    found = list(RE_SUMMARY.finditer(output))
    if not found:
        return None
    match = found[-1]
    counts = {}
    for number, word in RE_COUNT.findall(match["body"]):
        word = PLURAL.get(word, word)
        counts[word] = counts.get(word, 0) + int(number)
    return {
        "line": match.group(0).strip().strip("=").strip(),
        "counts": counts,
        "seconds": float(match["seconds"]),
    }


def suite_summaries(output):
    """(unit tests' summary, the other tests' summary) of a make test
    output; the first is None where make printed no unit report (make
    fast, or a build that stopped first)."""
    if UNITS_MARK not in output:
        return None, pytest_summary(output)
    after = output.partition(UNITS_MARK)[2]
    units, starts, rest = after.partition("test session starts")
    return pytest_summary(units), pytest_summary(starts + rest)


GIT = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]


def as_clone(repo):
    """git init and commit the copy (not its .venv link), untimed; a
    failure is said, not raised (the tests that need git then fail)."""
    for command in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "commit.gpgsign=false", "commit", "-q", "-m", "bench copy"],
    ):
        done = subprocess.run(
            [*GIT, "-C", str(repo), *command],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            say(f"git {command[0]} in the copy failed: {done.stderr[-500:]}")
            return False
        if command[0] == "init":  # the link is no file of the clone
            with (repo / ".git/info/exclude").open("a") as handle:
                handle.write("/.venv\n")
    return True


def _empty(repo):
    for folder in EMPTIED:
        shutil.rmtree(repo / folder, ignore_errors=True)


def make_run(repo, target, empty=True, timeout=TIMEOUT_S):
    """One `make <target>` (from empty outputs if ``empty``); a record,
    never raises."""
    if empty:
        _empty(repo)
    env = {k: v for k, v in CHILD_ENV.items() if k not in MAKE_VARS}
    command = make_command(repo, target)
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
            check=False,
        )
        output, status = done.stdout + done.stderr, done.returncode
    except subprocess.TimeoutExpired as exc:
        output = _text(exc.stdout) + _text(exc.stderr)
        output += f"\n(bench: killed after {timeout:.0f} s)"
        status = None
    seconds = time.perf_counter() - start
    pages = ran_seconds(output)
    units, others = suite_summaries(output)
    return {
        "seconds": seconds,
        "passed": status == 0,
        "returncode": status,
        "pytest": others,
        "pytest_units": units,
        "generation_total_s": generation_total(output),
        "trained_heads_ran_s": pages.get(TRAINED),
        "tail": None if status == 0 else output.splitlines()[-TAIL_LINES:],
    }


def _text(data):
    if isinstance(data, bytes):
        return data.decode("utf-8", "replace")
    return data or ""


def bench_suite(repo, test_runs, fast_runs):
    """`make test` test_runs times (0: skipped), then `make fast`."""
    result = {
        "git_copy": as_clone(repo),
        "command": " ".join(make_command("<copy>", "<target>")),
        "emptied": list(EMPTIED),
        "cores": len(os.sched_getaffinity(0)),
    }
    for target, count in (("test", test_runs), ("fast", fast_runs)):
        runs = []
        for i in range(count):
            warm = target == "fast" and test_runs > 0
            record = make_run(repo, target, empty=not warm)
            runs.append(record)
            summary_line = (record["pytest"] or {}).get("line", "no summary")
            say(
                f"make {target} {i + 1}/{count}: {record['seconds']:.1f} s, "
                f"{'passed' if record['passed'] else 'FAILED'} "
                f"({summary_line})"
            )
        if not runs:
            result[target] = None
            continue
        seconds = summary([r["seconds"] for r in runs])
        passed = all(r["passed"] for r in runs)
        result[target] = {
            "seconds": seconds,
            "passed": passed,
            "runs": runs,
            "target": {
                "max": TARGETS[target],
                "median": seconds["median"],
                "met": passed and seconds["median"] <= TARGETS[target],
            },
        }
    result["targets"] = {
        f"make_{t}_s": result[t]["target"] for t in TARGETS if result[t]
    }
    return result
