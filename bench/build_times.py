"""Build times, in a temporary copy of the repository.

The working tree is never edited. A cold build (empty cache), a warm
build after a prose-only edit, a warm build after an mha_ref edit, and
the floor: `mkdocs build --strict` alone. A build is what `make site`
runs: `python -m pipeline`, `mkdocs build --strict`, then
`python -m pipeline.postbuild site`.
"""

import re
import shutil
import subprocess
import sys

from bench.timing import ROOT, ratios, run, say, summary

TARGETS = {"warm_prose_over_floor": 1.3, "cold_s": 60.0}
MKDOCS = [sys.executable, "-m", "mkdocs", "build", "--strict", "-q"]
GENERATE = [sys.executable, "-m", "pipeline"]
TYPESET = [sys.executable, "-m", "pipeline.postbuild", "site"]


def run_build(repo):
    """Generation, the strict build, the math typeset: as `make site`."""
    took, output = 0.0, ""
    for step in (GENERATE, MKDOCS, TYPESET):
        seconds, out = run(step, repo)
        took, output = took + seconds, output + out
    return took, output


def copy_repo(dest):
    """Copy the tracked and unignored files to dest; link the .venv."""
    listing = subprocess.run(
        [
            "git",
            "-C",
            str(ROOT),
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ],
        capture_output=True,
        check=True,
    ).stdout.decode()
    for relative in sorted(set(filter(None, listing.split("\0")))):
        source = ROOT / relative
        if source.is_file() and not source.is_symlink():
            target = dest / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    (dest / ".venv").symlink_to(ROOT / ".venv")


def build_site(repo):
    """One build of the copy, untimed: the site the other parts read."""
    run_build(repo)


def bench_build(repo, runs, cold_runs):
    """Cold, warm-after-prose, warm-after-code and floor builds."""
    cold, generation = [], []
    for i in range(cold_runs):
        for folder in (".cache/generated", "docs/generated", "site"):
            shutil.rmtree(repo / folder, ignore_errors=True)
        seconds, output = run_build(repo)
        cold.append(seconds)
        total = re.findall(r"total\s+([\d.]+) s", output)
        generation.append(float(total[-1]) if total else None)
        say(f"cold build {i + 1}/{cold_runs}: {seconds:.1f} s")
    page = repo / "docs" / longest_pages(repo)[0]
    code = repo / "mha_ref" / "pitfalls.py"
    floor, prose, mha = [], [], []
    # one round = the three builds back to back, so load affects all;
    # floor and prose swap places every other round
    for i in range(runs):

        def build_floor():
            floor.append(run(MKDOCS, repo)[0])

        def build_prose(i=i):
            with page.open("a") as handle:  # a prose-only edit
                handle.write(f"\n<!-- bench edit {i} -->\n")
            prose.append(run_build(repo)[0])

        for step in (build_floor, build_prose)[:: 1 if i % 2 else -1]:
            step()
        with code.open("a") as handle:  # an mha_ref edit: topics rerun
            handle.write(f"\n# bench edit {i}\n")
        mha.append(run_build(repo)[0])
        say(
            f"round {i + 1}/{runs}: floor {floor[-1]:.1f} s, prose "
            f"{prose[-1]:.1f} s, mha_ref {mha[-1]:.1f} s"
        )
    result = {
        "cold_s": summary(cold),
        "cold_generation_s": summary([g for g in generation if g]),
        "floor_s": summary(floor),
        "warm_prose_s": summary(prose),
        "warm_mha_ref_s": summary(mha),
        "prose_edit": str(page.relative_to(repo)),
        "code_edit": str(code.relative_to(repo)),
    }
    ratio = ratios(prose, floor)
    result["warm_prose_over_floor"] = ratio
    result["warm_mha_ref_over_floor"] = ratios(mha, floor)
    result["targets"] = {
        "warm_prose_over_floor": {
            "max": TARGETS["warm_prose_over_floor"],
            "met": ratio["median"] <= TARGETS["warm_prose_over_floor"],
        },
        "cold_s": {
            "max": TARGETS["cold_s"],
            "met": result["cold_s"]["median"] < TARGETS["cold_s"],
        },
    }
    return result


def longest_pages(repo):
    """Pages (relative to docs/) by source length, longest first."""
    pages = list((repo / "docs").glob("*.md"))
    pages.sort(key=lambda p: (-p.stat().st_size, p.name))
    return [p.name for p in pages]
