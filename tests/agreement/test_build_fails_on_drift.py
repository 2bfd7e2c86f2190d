"""The build is a test: the strict build and the generation step fail on
drift the page checkers might miss.

The mkdocs tests build tiny pages with the real mkdocs.yml (its plugins,
extensions and hook), only docs_dir, site_dir and nav replaced, in one
subprocess: a control page must build, and each drifted page must not.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from .conftest import write_files

# Runs in the repository root (snippets' base_path is "."), one build per
# case folder; prints {case: [outcome, message, log]} as JSON.
RUNNER = textwrap.dedent("""
    import json, logging, os, sys
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    os.environ["MHA_REF_SKIP_GENERATION"] = "1"
    log = []

    class Keep(logging.Handler):
        def emit(self, record):
            log.append(record.getMessage())

    logging.getLogger().addHandler(Keep(logging.WARNING))
    results = {}
    for case in sys.argv[2:]:
        folder = os.path.join(sys.argv[1], case)
        del log[:]
        try:
            config = load_config(
                config_file="mkdocs.yml", strict=True,
                docs_dir=os.path.join(folder, "docs"),
                site_dir=os.path.join(folder, "site"),
                nav=[{"Home": "index.md"}],
            )
            build(config)
            outcome, message = "built", ""
        except BaseException as error:  # macros calls exit() on errors
            outcome, message = type(error).__name__, str(error)
        results[case] = [outcome, message, "\\n".join(log)]
    print(json.dumps(results))
""")

CASES = {
    "control": """
        # Control

        ```python
        --8<-- "mha_ref/numpy_ref.py:softmax"
        ```

        The value is << demo.value | num >>.
        """,
    "missing_section": """
        # Missing section

        ```python
        --8<-- "mha_ref/numpy_ref.py:no-such-section"
        ```
        """,
    "missing_file": """
        # Missing file

        ```python
        --8<-- "mha_ref/no_such_file.py:softmax"
        ```
        """,
    "undefined_key": """
        # Undefined key

        The value is << demo.no_such_key >>.
        """,
    "undefined_key_filtered": """
        # Undefined key, through a filter

        The value is << demo.no_such_key | num >>.
        """,
    "undefined_name": """
        # Undefined name

        The value is << no_such_data.value >>.
        """,
}


@pytest.fixture(scope="module")
def builds(tmp_path_factory, request):
    root = request.config.rootpath
    base = tmp_path_factory.mktemp("builds")
    for case, page in CASES.items():
        write_files(base / case, {
            "docs/index.md": page,
            "docs/generated/data/demo.json": '{"value": 1.5}\n',
        })
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(base), *CASES],
        cwd=root, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    return base, results


@pytest.mark.build
def test_build_control_page_builds(builds):
    base, results = builds
    outcome, message, log = results["control"]
    assert outcome == "built", f"{message}\n{log}"
    page = (base / "control/site/index.html").read_text(encoding="utf-8")
    assert '<span class="nf">softmax</span>' in page
    assert "The value is 1.5." in page


# What keeps each drift from building, or from naming itself in the
# failure; the test names it when the build lets the drift through.
SNIPPETS_FIX = ("check_paths: true under pymdownx.snippets in "
                "mkdocs.yml")
MACROS_FIX = ("on_undefined: strict for macros in mkdocs.yml, and the "
              "filters in scripts/macros.py re-raising a jinja2 Undefined "
              "they receive (x._fail_with_undefined_error())")


@pytest.mark.build
@pytest.mark.parametrize("case, words, fix", [
    ("missing_section", "no-such-section", SNIPPETS_FIX),
    ("missing_file", "no_such_file.py", SNIPPETS_FIX),
    ("undefined_key", "no_such_key", MACROS_FIX),
    ("undefined_key_filtered", "no_such_key", MACROS_FIX),
    ("undefined_name", "no_such_data", MACROS_FIX),
])
def test_build_fails_naming_the_drift(builds, case, words, fix):
    _, results = builds
    outcome, message, log = results[case]
    assert outcome != "built", f"{case} built: check {fix}"
    assert words in message + log, (
        f"{case}: the build fails, but its message does not name "
        f"'{words}', so a contributor cannot find it: check {fix}.\n"
        f"{message}\n{log[-1500:]}")


# --------------------------------------------------- configuration


def mkdocs_config(root):
    from mkdocs.utils.yaml import yaml_load

    with open(root / "mkdocs.yml", encoding="utf-8") as handle:
        return yaml_load(handle)


def options(config, key, name):
    """The options of `name` in the list under `key` ("plugins",
    "markdown_extensions"), {} when it has none."""
    for entry in config.get(key, []):
        if isinstance(entry, dict) and name in entry:
            return entry[name] or {}
        if entry == name:
            return {}
    raise AssertionError(f"mkdocs.yml has no {name} under {key}:")


def test_mkdocs_config_notebook_errors_fail(root):
    jupyter = options(mkdocs_config(root), "plugins", "mkdocs-jupyter")
    assert jupyter.get("allow_errors") is False, (
        "mkdocs.yml: mkdocs-jupyter must set allow_errors: false, or a "
        "raising notebook cell is published as if it worked")
    assert jupyter.get("execute", False) is False, (
        "mkdocs.yml: notebooks are executed by scripts/build.py (cached); "
        "set mkdocs-jupyter's execute: false")


def test_mkdocs_config_strict_snippets_and_macros(root):
    config = mkdocs_config(root)
    snippets = options(config, "markdown_extensions",
                       "pymdownx.snippets")
    assert snippets.get("check_paths") is True, (
        "mkdocs.yml: pymdownx.snippets needs check_paths: true, or a "
        "missing file or section vanishes from the page silently")
    macros = options(config, "plugins", "macros")
    assert macros.get("on_undefined") == "strict", macros
    assert macros.get("on_error_fail") is True, macros
    # The checkers in drift.py read these delimiters.
    assert [macros.get(f"j2_{kind}_{end}_string")
            for kind in ("variable", "block", "comment")
            for end in ("start", "end")] == [
        "<<", ">>", "<%", "%>", "<#", "#>"]


def test_makefile_site_builds_strictly_after_generation(root):
    text = (root / "Makefile").read_text(encoding="utf-8")
    site = next(line for line in text.splitlines()
                if line.startswith("site:"))
    assert "generate" in site and "doctest" in site, site
    assert "mkdocs build --strict" in text
    test = next(line for line in text.splitlines()
                if line.startswith("test:"))
    assert "site" in test, test


# -------------------------------------------------- notebook execution


@pytest.mark.build
def test_generation_fails_on_a_raising_notebook_cell(tmp_path, request):
    sys.path.insert(0, str(request.config.rootpath))
    from scripts import build

    write_files(tmp_path, {
        "mha_ref/__init__.py": "",
        "scripts/notebooks/good.py": """
            # %%
            x = 6 * 7
            print(x)
            """,
        "scripts/notebooks/bad.py": """
            # %%
            x = 1
            # %%
            raise RuntimeError("cell 2 fails on purpose")
            """,
    })
    project = build.Project(root=tmp_path, out=tmp_path / "out",
                            cache=tmp_path / "cache")
    said = []
    environ = dict(os.environ)
    try:
        failed = build.build(project, say=said.append)
    finally:
        os.environ.clear()
        os.environ.update(environ)
    assert failed == ["notebooks/bad"], said
    assert not (tmp_path / "out/notebooks/bad.ipynb").exists()
    good = json.loads((tmp_path / "out/notebooks/good.ipynb").read_text())
    outputs = good["cells"][0]["outputs"]
    assert "".join(outputs[0]["text"]) == "42\n", outputs
