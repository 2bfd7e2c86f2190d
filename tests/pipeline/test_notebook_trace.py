"""pipeline/notebook_trace.py: which mha_ref functions a run called."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from pipeline import code_units, notebook_trace

MODULE = '''"""A module."""


def called(x):
    """Its docstring stays."""
    def inner(y):
        return y + 1

    return [inner(v) for v in x]


def never():
    return 0


def fails():
    raise ValueError("line 17")


class Layer:
    def forward(self, x):
        return called(x)

    def unused(self):
        pass
'''

RUN = """
import importlib.util, json, sys, traceback
spec = importlib.util.spec_from_file_location("trace", sys.argv[1])
trace = importlib.util.module_from_spec(spec)
spec.loader.exec_module(trace)
trace.start(sys.argv[2] if len(sys.argv) > 2 else None)
from mha_ref import model
from mha_ref.sub import deep
model.Layer().forward([1, 2])
deep.go()
try:
    model.fails()
except ValueError as exc:
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    line, where = frame.lineno, frame.filename
print(json.dumps([model.called.__doc__, line, where]))
trace.report()
"""


def run_traced(tmp_path, compiled=None, module=MODULE):
    package = tmp_path / "mha_ref"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text(module)
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "deep.py").write_text("def go():\n    return 1\n")
    trace = Path(notebook_trace.__file__)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(RUN), str(trace)]
        + ([str(compiled)] if compiled else []),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    first, last = done.stdout.strip().splitlines()[-2:]
    assert last.startswith(notebook_trace.MARK)
    return json.loads(first), json.loads(last[len(notebook_trace.MARK) :])


def test_trace_names_each_function_the_run_called(tmp_path):
    (doc, line, _), ran = run_traced(tmp_path)
    assert ran == {  # a file imported, none of its functions run: []
        "mha_ref/__init__.py": [],
        "mha_ref/model.py": [
            "Layer.forward",
            "called",
            "called.<locals>.inner",
            "fails",
        ],
        "mha_ref/sub/__init__.py": [],
        "mha_ref/sub/deep.py": ["go"],
    }
    # what the page shows is the file as written
    assert doc == "Its docstring stays."
    assert line == 17
    # each name maps to a unit of the file (what the run key reads)
    _, units = code_units.units(MODULE)
    named = {code_units.unit_of(q) for q in ran["mha_ref/model.py"]}
    assert named <= set(units)
    assert "never" not in named
    assert "Layer.unused" not in named


def test_compiled_code_is_kept_by_source_and_named_for_its_file(tmp_path):
    compiled = tmp_path / "compiled"
    first = run_traced(tmp_path / "one", compiled)
    kept = sorted(compiled.glob("*/*.code"))
    assert len(kept) == 3  # one per source: both empty __init__.py share
    before = {path: path.read_bytes() for path in kept}
    again = run_traced(tmp_path / "two", compiled)  # read back, not made
    assert sorted(compiled.glob("*/*.code")) == kept
    assert {path: path.read_bytes() for path in kept} == before
    assert again[1] == first[1]  # the same functions noted
    (_, line, where), _ = again
    assert line == 17
    # the traceback names this run's file, not the one that compiled it
    assert where == str(tmp_path / "two" / "mha_ref" / "model.py")
    # an edited source is compiled anew: its line, its names
    edited = MODULE.replace(
        '    raise ValueError("line 17")', "\n" * 3 + "    raise ValueError"
    )
    (_, line, _), _ = run_traced(tmp_path / "three", compiled, edited)
    assert line == 20
    assert len(list(compiled.glob("*/*.code"))) == 4
