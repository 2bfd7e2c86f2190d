"""Two clean generations of the same sources are byte-identical.

The generation of this `make test` (docs/generated/, from a clean clone
on CI) is compared with one more clean generation in a copy of the
repository (tracked and unignored files, as `make bench` copies it):
every data file, table, figure, export and executed notebook must match
byte for byte. Timings, dates, random seeds or absolute paths that leak
into an output show up here, named by file. The engines' builds are not
repeated: they only render these files (tests/engines compares the two
engines' pages). The second run repeats the faster half of the
pages, ranked by how long each took in this build (read from the
build's own cache; a rank, so a busy machine changes little): every
kind of output and every part of the pipeline is in it, and it stays
within make test's budget. The slower half (the trained heads, which
train a model; the cost, conventions, masks, positions and latent
pages, which measure or build several models) is left out, its seeds
fixed in its script (tests/unit/test_induction.py shows the training
is deterministic); the test's output names them.

Slow (a cold generation): marked `build`; `make fast` skips it.
"""

import filecmp
import subprocess
import sys
from pathlib import Path

import pytest

from bench.site_perf.build_times import copy_repo
from pipeline import cache
from pipeline.generation import Project, discover

ROOT = Path(__file__).resolve().parents[2]
REPEATED = 1 / 2  # the share of the pages the second run repeats


def left_out(project=None):
    """The slower half of the pages, by their time in this build (a
    page that never ran counts as slowest)."""
    project = project or Project()
    names = [task.name for task in discover(project)]
    by_time = sorted(
        names, key=lambda n: cache.last_seconds(project, n) or float("inf")
    )
    return set(by_time[round(len(names) * REPEATED) :])


def generate_copy(tmp_path, skip):
    """A copy of the repository, generated from nothing."""
    repo = tmp_path / "repo"
    copy_repo(repo)
    pages = [t.name for t in discover(Project(root=repo))]
    only = [f"--only={p}" for p in pages if p not in skip]
    run = subprocess.run(
        # untraced: the trace changes no output, and this cache is
        # thrown away with the copy
        [sys.executable, "-m", "pipeline", "--force", "--no-trace", *only],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    if run.returncode:
        pytest.fail(f"generation failed in {repo}:\n{run.stdout[-3000:]}")
    pages = subprocess.run(  # the notebooks' pages for Zensical, as
        [sys.executable, "-m", "pipeline.zensical"],  # make site-zensical
        cwd=repo,
        capture_output=True,
        text=True,
    )
    if pages.returncode:
        pytest.fail(f"pipeline.zensical failed in {repo}:\n{pages.stderr}")
    return repo / "docs/generated"


def differing_files(a, b):
    """Relative paths that differ, or exist on one side only."""
    found = []

    def walk(cmp, prefix):
        found.extend(prefix + n for n in cmp.left_only + cmp.right_only)
        found.extend(prefix + n for n in cmp.funny_files)
        _, mismatch, errors = filecmp.cmpfiles(
            cmp.left, cmp.right, cmp.common_files, shallow=False
        )
        found.extend(prefix + n for n in mismatch + errors)
        for name, sub in cmp.subdirs.items():
            walk(sub, f"{prefix}{name}/")

    walk(filecmp.dircmp(a, b, ignore=[]), "")
    return sorted(found)


@pytest.mark.build
def test_two_clean_generations_are_byte_identical(tmp_path):
    skip = left_out()
    print(f"left out of the second run: {sorted(skip)}")
    here, there = ROOT / "docs/generated", generate_copy(tmp_path, skip)
    left_out_files = {  # the files the pages left out wrote here
        relative
        for page in skip
        for relative in cache.outputs(Project(), page)
    }
    left_out_files |= {  # and the second engine's pages of their notebooks
        str(Path(r).with_suffix(".md"))
        for r in left_out_files
        if r.endswith(".ipynb")
    }
    folders = {str(Path(r).parent) for r in left_out_files}  # only theirs
    differ = sorted(
        set(differing_files(here, there)) - left_out_files - folders
    )
    assert not differ, (
        f"{len(differ)} files differ between two clean generations:\n  "
        + "\n  ".join(differ)
    )


def test_differing_files_names_changed_and_missing_files(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        (root / "page").mkdir(parents=True)
        (root / "page/index.html").write_text("same")
    (a / "page/timing.json").write_text('{"ms": 1.5}')
    (b / "page/timing.json").write_text('{"ms": 1.7}')
    (a / "only-here.txt").write_text("")
    assert differing_files(a, b) == ["only-here.txt", "page/timing.json"]
