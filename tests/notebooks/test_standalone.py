"""Each downloadable notebook runs alone, as a reader's copy does.

The generation step executes every docs/generated/notebooks/<page>.ipynb
once, in an empty folder, with a kernel that cannot import the
repository (pipeline/kernel.py, standalone_kernel_argv); the numbers
the page shows come from that run. These tests do not run the notebooks
again: one shows that kernel really is cut off from the repository (a
notebook of two cells, run as the generation runs one), the others that
every generated notebook ran every cell, without an error, on the
mha_ref files it carries.
"""

import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "docs" / "generated" / "notebooks"
sys.path.insert(0, str(REPO))  # pipeline, when run as a lone file

from pipeline.kernel import execute  # noqa: E402
from pipeline.pages import page_notebooks  # noqa: E402

BEFORE = """\
import importlib.util, os, sys
assert not os.environ.get("PYTHONPATH"), os.environ.get("PYTHONPATH")
assert os.listdir(".") == [NOTEBOOK], os.listdir(".")
assert importlib.util.find_spec("mha_ref") is None, (
    "the repository's mha_ref is importable: "
    + str(importlib.util.find_spec("mha_ref").origin)
)
print("no mha_ref before the notebook's own")
"""

AFTER = """\
import sys
from pathlib import Path
here = Path.cwd().resolve()
used = {
    name: Path(module.__file__).resolve()
    for name, module in sys.modules.items()
    if name == "mha_ref" or name.startswith("mha_ref.")
}
assert used, "the notebook imported no mha_ref"
outside = {n: str(p) for n, p in used.items() if here not in p.parents}
assert not outside, outside
print("mha_ref from", here, sorted(used))
"""


def _names():
    return sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))


def test_notebooks_one_per_page_with_code():
    expected = sorted(page_notebooks(REPO))
    assert _names() == expected, (
        f"docs/generated/notebooks has {_names()}, the pages and scripts "
        f"ask for {expected}: run `make generate`"
    )


def test_generation_kernel_cannot_import_the_repository(tmp_path):
    """The kernel the generation uses, on a notebook that carries a tiny
    mha_ref of its own: it sees that one, never the repository's."""
    notebook = "demo.ipynb"
    (tmp_path / notebook).write_text("{}")
    carry = (
        "from pathlib import Path\n"
        "Path('mha_ref').mkdir()\n"
        "Path('mha_ref/__init__.py').write_text('MINE = True\\n')"
    )
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell(BEFORE.replace("NOTEBOOK", repr(notebook))),
        nbformat.v4.new_code_cell(carry + "\nimport mha_ref\nmha_ref.MINE"),
        nbformat.v4.new_code_cell(AFTER),
    ]
    execute(nb, cwd=tmp_path)  # CellExecutionError names the cell
    assert nb.cells[0].outputs[0]["text"].startswith("no mha_ref before")
    shown = nb.cells[2].outputs[0]["text"]
    assert shown.startswith(f"mha_ref from {tmp_path.resolve()}"), shown


@pytest.mark.parametrize("name", _names() or [None])
def test_notebook_ran_every_cell_on_what_it_carries(name):
    if name is None:
        pytest.fail("no notebooks in docs/generated: run `make generate`")
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, f"{name}: no code cells"
    for index, cell in enumerate(code):
        assert cell.execution_count == index + 1, (
            f"{name}: code cell {index} did not run in order"
        )
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert not errors, f"{name}: cell {index} failed"
    carried = {
        c.source.split("\n", 1)[0].removeprefix("%%writefile ")
        for c in code
        if c.source.startswith("%%writefile ")
    }
    expected = set(page_notebooks(REPO)[name]["files"])
    expected = {"glue.py" if f.endswith("/glue.py") else f for f in expected}
    assert carried == expected
