"""Docstring examples run: pytest collects every one in mha_ref, and the
examples a page shows run as shown."""

import doctest
import importlib
import re
import subprocess
import sys
import tomllib

import pytest

from . import drift
from .conftest import describe, reported

# Examples the pages rely on; removing one, or --doctest-modules, fails.
REQUIRED = {
    "mha_ref.numpy_ref": ["softmax", "softmax_backward", "causal_mask"],
}


def doctest_names(module_name):
    """Names of the doctests DocTestFinder finds in a module."""
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder()
    return {t.name for t in finder.find(module) if t.examples}


def test_pyproject_runs_doctests_in_mha_ref(root):
    config = tomllib.loads((root / "pyproject.toml").read_text())
    pytest_options = config["tool"]["pytest"]["ini_options"]
    assert "--doctest-modules" in pytest_options["addopts"].split(), (
        "pyproject.toml: [tool.pytest.ini_options] addopts lost "
        "--doctest-modules; the docstring examples on pages would not run")
    assert "mha_ref" in pytest_options["testpaths"]


def test_makefile_doctest_target_runs_mha_ref(root):
    text = (root / "Makefile").read_text(encoding="utf-8")
    block = text.split("\ndoctest:", 1)[1].split("\n\n", 1)[0]
    assert "--doctest-modules" in block and "mha_ref" in block, block


def test_mha_ref_required_functions_have_examples():
    for module, names in REQUIRED.items():
        found = doctest_names(module)
        for name in names:
            assert f"{module}.{name}" in found, (
                f"{module}.{name} has no >>> example in its docstring")


@pytest.mark.build
def test_pytest_collects_every_mha_ref_doctest(root):
    """Collect mha_ref with the project's own pytest configuration."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q",
         "-p", "no:cacheprovider", "mha_ref"],
        cwd=root, capture_output=True, text=True, timeout=300,
    )
    collected = set(re.findall(r"::(mha_ref\.[\w.]+)", done.stdout))
    expected = set()
    for path in sorted((root / "mha_ref").glob("*.py")):
        module = f"mha_ref.{path.stem}".removesuffix(".__init__")
        expected |= doctest_names(module)
    assert {f"{m}.{n}" for m, ns in REQUIRED.items() for n in ns} \
        <= expected
    missing = sorted(expected - collected)
    assert not missing, (
        f"pytest does not collect these doctests: {missing}\n"
        + done.stdout[-2000:] + done.stderr[-2000:])


def test_page_examples_run_as_shown(root):
    problems = drift.check_page_examples(root)
    assert not problems, describe(problems)
    shown = drift.page_examples(root)
    assert shown, "no page shows a section with a >>> example"


def test_page_examples_report_failing_and_cut_examples(repo):
    base = repo({
        "mha_ref/demo.py": '''
            # --8<-- [start:add]
            def add(a, b):
                """Add.

                >>> add(1, 2)
                4
                """
                return a + b
            # --8<-- [end:add]


            # --8<-- [start:half]
            def half(x):
                """Half.

                >>> y = 3
            # --8<-- [end:half]
                >>> half(y)
                1.5
                """
                return x / 2
            ''',
        "docs/index.md": '''
            # Examples

            ```python
            --8<-- "mha_ref/demo.py:add"
            ```

            ```python
            --8<-- "mha_ref/demo.py:half"
            ```
            ''',
    })
    problems = drift.check_page_examples(base)
    assert reported(problems, "docs/index.md", 4, "mha_ref/demo.py:add",
                    "Expected: 4 Got: 3"), describe(problems)
    assert reported(problems, "docs/index.md", 8, "mha_ref/demo.py:half",
                    "cut off", "move the end marker below"), \
        describe(problems)
    assert len(problems) == 2, describe(problems)

