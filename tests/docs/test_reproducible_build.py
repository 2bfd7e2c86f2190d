"""Two clean builds of the same sources are byte-identical.

Each build runs in its own copy of the repository (tracked and
unignored files, as `make bench` copies it), from nothing: generation
with --force, the strict MkDocs build, then the math typeset, as `make
site` does. Every file of both sites and of both docs/generated/ must
match, byte for byte. Timings, dates, random seeds or absolute paths
that leak into an output show up here, named by file.

Slow (two full builds, run side by side): marked `build`; `make fast`
skips it, `make test` runs it.
"""

import filecmp
import subprocess
import sys

import pytest

from bench.build_times import copy_repo

STEPS = [
    [sys.executable, "-m", "pipeline", "--force"],
    [sys.executable, "-m", "mkdocs", "build", "--strict", "-q"],
    [sys.executable, "-m", "pipeline.postbuild", "site"],
]
COMPARED = ["site", "docs/generated"]


def build_twice(tmp_path):
    """Two copies of the repository, built step by step side by side."""
    repos = [tmp_path / name / "repo" for name in ("a", "b")]
    for repo in repos:
        copy_repo(repo)
    for step in STEPS:
        running = [
            subprocess.Popen(
                step,
                cwd=repo,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for repo in repos
        ]
        for repo, proc in zip(repos, running, strict=True):
            output = proc.communicate()[0]
            if proc.returncode:
                pytest.fail(
                    f"{' '.join(step[1:])} failed in {repo}:\n{output[-3000:]}"
                )
    return repos


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
def test_two_clean_builds_are_byte_identical(tmp_path):
    first, second = build_twice(tmp_path)
    differ = []
    for folder in COMPARED:
        assert (first / folder).is_dir(), f"the build wrote no {folder}/"
        differ += [
            f"{folder}/{name}"
            for name in differing_files(first / folder, second / folder)
        ]
    assert not differ, (
        f"{len(differ)} files differ between two clean builds:\n  "
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
