"""Each downloadable notebook runs alone, as a reader's copy does.

Every docs/generated/notebooks/<page>.ipynb (written by `make generate`,
one per page that shows mha_ref code: pipeline/compose.py) is copied into
an empty temporary folder and executed there by nbclient with a kernel
started in that folder, with no PYTHONPATH and no site hooks (so not the
editable install's finder): only numpy, torch, matplotlib and ipykernel
from site-packages. A first cell proves the repository's mha_ref cannot
be imported; a last cell proves the mha_ref the notebook used is the
copy it wrote into that folder. Slow (a kernel per notebook): not in
`make fast`; `make test` runs it.

    .venv/bin/python -m pytest tests/notebooks/test_standalone.py
"""

import shutil
import sys
from pathlib import Path

import nbformat
import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "docs" / "generated" / "notebooks"
sys.path.insert(0, str(REPO))  # pipeline, when run as a lone file

from pipeline.compose import page_notebooks  # noqa: E402
from pipeline.notebooks import _execute  # noqa: E402

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


@pytest.mark.parametrize("name", _names() or [None])
def test_notebook_runs_without_repository(name, tmp_path):
    if name is None:
        pytest.fail("no notebooks in docs/generated: run `make generate`")
    copy = tmp_path / f"{name}.ipynb"
    shutil.copyfile(NOTEBOOKS / copy.name, copy)
    nb = nbformat.read(copy, as_version=4)
    source = BEFORE.replace("NOTEBOOK", repr(copy.name))
    nb.cells.insert(0, nbformat.v4.new_code_cell(source))
    nb.cells.append(nbformat.v4.new_code_cell(AFTER))
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []  # the outputs below are this run's
    _execute(nb, cwd=tmp_path)  # CellExecutionError names the cell
    first, last = nb.cells[0].outputs, nb.cells[-1].outputs
    assert first[0]["text"].startswith("no mha_ref before"), first
    assert last[0]["text"].startswith(f"mha_ref from {tmp_path.resolve()}")
    assert (tmp_path / "mha_ref" / "__init__.py").is_file()
