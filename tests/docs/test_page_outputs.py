"""Every number, table and figure on a page comes from a notebook cell.

Each ``<< page.name >>`` on any page, each ``figure("name")`` and each
included ``generated/tables/<name>.md`` must be an output that a cell
of that page's executed notebook glued (docs/generated/notebooks/), so
the reader who sees a number can find the cell that produced it, and
the notebook they download reproduces it.
"""

import re
from pathlib import Path

import nbformat
import pytest

from pipeline import config
from pipeline.page_data import glued_names
from pipeline.page_linter import PLACEHOLDER, _names, pages

ROOT = Path(__file__).resolve().parents[2]
FIGURE = re.compile(r"""figure\(\s*["']([\w-]+)["']\s*\)""")
LOOP = re.compile(r"<%-?\s*for\s+(\w+)")
KEY = re.compile(r"""\[\s*["']([\w-]+)["']\s*\]""")
TABLE = re.compile(r'--8<--\s+"docs/generated/tables/([\w-]+)\.md"')


def glued(root):
    """{page variable: {(kind, name)}} from every executed notebook."""
    found = {}
    for path in sorted((root / "docs/generated/notebooks").glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        found[path.stem.replace("-", "_")] = glued_names(nb)
    if not found:
        pytest.fail("no executed notebooks: run `make generate` first")
    return found


def unglued(root):
    """page:line: what a page shows that no notebook cell glued."""
    outputs = {
        page: {name for kind, name in names if kind == "value"}
        for page, names in glued(root).items()
    }
    everything = set().union(*glued(root).values())
    figures = {name for kind, name in everything if kind == "figure"}
    tables = {name for kind, name in everything if kind == "table"}
    problems = []
    for page, text in pages(root):
        loops = set(LOOP.findall(text)) | {"loop"}  # <% for m in ... %>
        for number, line in enumerate(text.split("\n"), 1):
            where = f"{page}:{number}"
            line = KEY.sub(lambda m: "." + m[1].replace("-", "_"), line)
            for dotted in _names(line) if PLACEHOLDER.search(line) else []:
                variable, _, rest = dotted.partition(".")
                name = rest.split(".")[0]
                if variable in loops:
                    continue
                if variable in outputs and name not in outputs[variable]:
                    problems.append(f"{where}: {dotted} is no glued output")
                elif variable not in outputs and name:
                    problems.append(f"{where}: no notebook for {variable}")
            for name in FIGURE.findall(line):
                if name not in figures:
                    problems.append(f"{where}: figure {name} not glued")
            for name in TABLE.findall(line):
                if name not in tables:
                    problems.append(f"{where}: table {name} not glued")
    return problems


def test_every_shown_output_was_glued_by_a_notebook_cell():
    assert unglued(ROOT) == []


def test_unglued_output_is_reported(tmp_path):
    """A number in the data that no cell glued (a stale JSON, a value
    written by hand) is caught."""
    notebooks = tmp_path / "docs/generated/notebooks"
    notebooks.mkdir(parents=True)
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("glue.value('x', 1)")
    cell.outputs = [
        nbformat.v4.new_output(
            "display_data",
            data={
                config.glue_mime(): {
                    "name": "x",
                    "kind": "value",
                }
            },
        )
    ]
    nb.cells = [cell]
    nbformat.write(nb, notebooks / "demo-page.ipynb")
    (tmp_path / "docs/page.md").write_text(
        "Shown << demo_page.x >> and << demo_page.y | num >>.\n"
        '<< figure("nowhere") >>\n'
    )
    assert unglued(tmp_path) == [
        "docs/page.md:1: demo_page.y is no glued output",
        "docs/page.md:2: figure nowhere not glued",
    ]
