"""CONTRIBUTING.md's walkthrough, followed as written, in a copy.

The files its steps show (the code, its unit test, the page script,
the page) and its nav line go into a copy of the repository, with the
generated outputs of this build (every other page cached); then the
loop of ``make serve`` (serve.Watcher) sees the edit, runs the new page
alone and finds the pages in agreement; the new unit test passes; the
two things derived from the nav (the start page's map, the README's
counts) are named by their checks exactly as the guide says, and pass
once done as told.

Reads docs/generated (the build's): marked `build`, as make test runs
it after building; one kernel runs.
"""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import cache, serve
from pipeline.generation import Project, discover, stale
from tests.docs.test_readme_counts import count_problems
from tests.docs.test_site_map import MAP, map_problems

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "CONTRIBUTING.md"
# **3. The page script, which is also the page's notebook:
# `scripts/rms.py`** then a ```text block (````text for the page)
STEP = re.compile(
    r"^\*\*\d\. [^*]*?`(?P<path>[\w/.-]+)`\*\*\n\n"
    r"(?P<fence>`{3,})text\n(?P<body>.*?)\n(?P=fence)\n",
    re.M | re.S,
)
NAV = re.compile(
    r"\*\*5\. The nav line, in `mkdocs.yml`: `(?P<line>- [^`]+)`\*\*,\s+"
    r"under the part of `nav:` it belongs to \(here `(?P<part>[^`]+):`"
)
COPIED = ("docs", "mha_ref", "scripts", "pipeline", "overrides", "tests/unit")
# The unit tests that read mha_ref as a whole (every module, every public
# function), which a new module can break; every other unit test imports
# the modules it names, so the new page's own test and these are the
# unit suite as the new module sees it (held below).
WHOLE_PACKAGE = (
    "tests/unit/test_public_functions_property.py"
    "::test_every_public_function_has_an_entry",
)
# what reading the package as a whole looks like in a test: listing its
# modules or its files (a test that only knows where the package lies,
# to tell its frames from others, reads no module it does not name)
READS_PACKAGE = re.compile(
    r"pkgutil|iter_modules|walk_packages|__path__|\.r?glob\("
)


def steps(guide):
    """{path: text} of the files the walkthrough shows, as written."""
    return {
        m["path"]: m["body"].replace(";--8<--", "--8<--") + "\n"
        for m in STEP.finditer(guide)
    }


def add_nav_line(mkdocs_yml, part, line):
    """mkdocs.yml with ``line`` last under the nav part ``part``."""
    lines = mkdocs_yml.split("\n")
    at = lines.index(f"  - {part}:") + 1
    while lines[at].startswith("      - "):
        at += 1
    lines.insert(at, f"      {line}")
    return "\n".join(lines)


def test_the_walkthrough_runs_each_unit_test_that_reads_the_package():
    readers = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "tests/unit").rglob("*.py")
        if READS_PACKAGE.search(path.read_text(encoding="utf-8"))
    )
    run = sorted({test.split("::")[0] for test in WHOLE_PACKAGE})
    assert readers == run, (
        "a unit test module that reads mha_ref as a whole is not run by "
        f"the walkthrough (WHOLE_PACKAGE): {sorted(set(readers) - set(run))}"
    )


def test_walkthrough_steps_are_found():
    found = steps(GUIDE.read_text(encoding="utf-8"))
    assert sorted(found) == [
        "docs/rms.md",
        "mha_ref/rms.py",
        "scripts/rms.py",
        "tests/unit/test_rms.py",
    ]
    assert "--8<-- [start:rms-norm]" in found["mha_ref/rms.py"]
    assert NAV.search(GUIDE.read_text(encoding="utf-8"))


@pytest.fixture
def copy(tmp_path):
    """The repository's sources and this build's outputs, all cached."""
    if not (ROOT / "docs/generated/data").is_dir():
        pytest.fail("no docs/generated: run `make generate` first")
    root = tmp_path / "repo"
    for folder in COPIED:
        shutil.copytree(
            ROOT / folder,
            root / folder,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        )
    for name in (
        "mkdocs.yml",
        "macros.py",
        "README.md",
        "conftest.py",
        "pyproject.toml",
    ):
        shutil.copy(ROOT / name, root / name)
    project = Project(root=root)
    here = Project()
    for task in discover(project):  # as they are here: nothing stale
        key = cache.task_key(project, task)
        outputs = cache.outputs(here, task.name)
        cache.store(project, task.name, key, outputs, 1.0)
    assert stale(project) == []
    return project


@pytest.mark.build
def test_walkthrough_adds_a_page_under_make_serve(copy):
    root = copy.root
    guide = GUIDE.read_text(encoding="utf-8")
    log = []
    with serve.Watcher(copy, say=log.append) as watcher:
        for relative, text in steps(guide).items():
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            (root / relative).write_text(text, encoding="utf-8")
        nav = NAV.search(guide)
        mkdocs_yml = (root / "mkdocs.yml").read_text(encoding="utf-8")
        (root / "mkdocs.yml").write_text(
            add_nav_line(mkdocs_yml, nav["part"], nav["line"])
        )
        assert watcher.poll(), "the loop saw no edit"
    said = "\n".join(log)
    assert re.search(r"^  ran    rms ", said, re.M), said
    assert "ran    attention" not in said  # only the new page ran
    mistakes = [line for line in log if re.match(r"^\S+:\d+: ", line)]
    assert not [line for line in mistakes if "rms" in line], mistakes
    data = json.loads((copy.out / "data/rms.json").read_text())
    assert data["normed"] == pytest.approx([0.848528, 1.131371], rel=1e-6)
    for scheme in ("light", "dark"):
        assert (copy.out / f"figures/rms-bars-{scheme}.svg").is_file()
    assert (copy.out / "notebooks/rms.ipynb").is_file()

    unit = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/unit/test_rms.py",
            *WHOLE_PACKAGE,
        ],
        cwd=root,
        capture_output=True,
        text=True,
    )
    assert unit.returncode == 0, unit.stdout[-2000:]

    # what the nav implies, named exactly, then done as told
    (row,) = map_problems(root)
    assert row == (
        "docs/index.md: the map of the site lacks rms.md: add the row "
        f'| [RMS normalisation](rms.md) | ... | to the table under "{MAP}"'
    )
    index = root / "docs/index.md"
    text = index.read_text(encoding="utf-8")
    table_end = text.index("\n\n", text.index(MAP) + len(MAP) + 2)
    added = "\n| [RMS normalisation](rms.md) | RMS normalisation |"
    index.write_text(text[:table_end] + added + text[table_end:])
    assert map_problems(root) == []
    counts = count_problems(root)
    assert counts, "the README's counts did not notice the new page"
    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8")
    for problem in counts:
        right, wrong = re.findall(r"\*\*\d+ \w+\*\*", problem)
        text = text.replace(wrong, right)
    readme.write_text(text)
    assert count_problems(root) == []
