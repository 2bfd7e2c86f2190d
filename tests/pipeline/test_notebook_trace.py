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
trace.start()
from mha_ref import model
from mha_ref.sub import deep
model.Layer().forward([1, 2])
deep.go()
try:
    model.fails()
except ValueError as exc:
    line = traceback.extract_tb(exc.__traceback__)[-1].lineno
print(json.dumps([model.called.__doc__, line]))
trace.report()
"""


def run_traced(tmp_path):
    package = tmp_path / "mha_ref"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "model.py").write_text(MODULE)
    (package / "sub" / "__init__.py").write_text("")
    (package / "sub" / "deep.py").write_text("def go():\n    return 1\n")
    trace = Path(notebook_trace.__file__)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(RUN), str(trace)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    first, last = done.stdout.strip().splitlines()[-2:]
    assert last.startswith(notebook_trace.MARK)
    return json.loads(first), json.loads(last[len(notebook_trace.MARK) :])


def test_trace_names_each_function_the_run_called(tmp_path):
    (doc, line), ran = run_traced(tmp_path)
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
