"""CONTRIBUTING.md's walkthrough, followed as written, in a copy.

The files its steps show (the code, its unit test, the page script,
the page) and its nav line go into a copy of the repository, with the
generated outputs of this build (every other page cached); then the
loop of ``make serve`` (serve.Watcher) sees the edit, runs the new page
alone and finds the pages in agreement (its unit test, with the whole
unit suite, runs in make test's unit run: walkthrough_tree.py); the
two things derived from the nav (the start page's map, the README's
counts) are named by their checks exactly as the guide says, and pass
once done as told.

Reads docs/generated (the build's): marked `build`, as make test runs
it after building; one kernel runs.
"""

import json
import re
import shutil
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


def test_the_whole_unit_suite_runs_where_the_walkthrough_was_followed(
    tmp_path,
):
    """make test's unit tests (beside the build) run in a copy with the
    walkthrough's code and unit test added (walkthrough_tree.py): the
    new module meets the whole unit suite on every make test."""
    from tests.docs import walkthrough_tree

    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    beside = re.search(
        r"^BESIDE_THE_BUILD := (.*?)(?<!\\)$", makefile, re.M | re.S
    )
    assert beside, "no BESIDE_THE_BUILD in the Makefile"
    assert "-m tests.docs.walkthrough_tree " in beside[1]
    assert "$(NO_BUILD)" in beside[1]
    units = re.search(r"^NO_BUILD := (.*?)[^\\]$", makefile, re.M | re.S)
    assert "tests/unit" in units[0].split()

    added = walkthrough_tree.prepare(tmp_path / "repo")
    assert added == ["mha_ref/rms.py", "tests/unit/test_rms.py"]
    assert "def rms_norm" in (tmp_path / "repo/mha_ref/rms.py").read_text()
    assert (
        tmp_path / "repo/tests/unit/test_public_functions_property.py"
    ).is_file()
    # a guide whose steps moved or lost their form adds nothing: the
    # unit run then refuses to start (main returns 2), never passes
    # without the walkthrough's module
    assert (
        walkthrough_tree.prepare(tmp_path / "other", guide="# no steps") == []
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

    # its unit test, with the whole unit suite, runs in make test's unit
    # run, in a copy with the walkthrough's code added (walkthrough_tree)

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
