"""The page "Write the layer yourself": its notebook in both states.

As handed out, every stub raises NotImplementedError and every check
cell says "not written yet" (the build runs it so). With the solutions
of mha_ref/solutions.py put in place of the stubs, every check cell
says ok. The solutions replace the stubs by name, so a stub renamed or
a solution lost fails here."""

import ast
import contextlib
import io
import os
import sys
from pathlib import Path

import pytest

from mha_ref import diagnose, solutions

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "write-the-layer.py"


def stubs(tree):
    """The script's top-level functions whose body ends in raising
    NotImplementedError."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            last = node.body[-1]
            if isinstance(last, ast.Raise) and "NotImplementedError" in (
                ast.unparse(last.exc)
            ):
                found[node.name] = node
    return found


def run(source):
    """Run the script's text as the notebook does; its printed lines."""
    out = io.StringIO()
    cwd = os.getcwd()
    sys.path.insert(0, str(SCRIPT.parent))  # glue, as the notebook has it
    try:
        os.chdir(SCRIPT.parent)
        with contextlib.redirect_stdout(out):
            exec(compile(source, str(SCRIPT), "exec"), {"__name__": "nb"})
    finally:
        os.chdir(cwd)
        sys.path.remove(str(SCRIPT.parent))
    return out.getvalue().splitlines()


def checks(lines):
    """What each check cell printed, before the planted attempts."""
    return [line for line in lines if line.startswith("glue: check_")]


def test_write_the_layer_stubs_are_the_five_functions():
    tree = ast.parse(SCRIPT.read_text("utf-8"))
    assert list(stubs(tree)) == [
        "softmax",
        "attention",
        "split_heads",
        "merge_heads",
        "layer",
    ]


def test_write_the_layer_handed_out_says_not_written_yet():
    lines = checks(run(SCRIPT.read_text("utf-8")))
    assert len(lines) == 4
    assert all("not written yet" in line for line in lines), lines


def test_write_the_layer_with_the_solutions_passes_every_check():
    text = SCRIPT.read_text("utf-8")
    tree = ast.parse(text)
    solved = ast.parse(Path(solutions.__file__).read_text("utf-8"))
    answers = {
        node.name: node
        for node in solved.body
        if isinstance(node, ast.FunctionDef)
    }
    stubbed = stubs(tree)
    tree.body = [
        answers[node.name] if node in stubbed.values() else node
        for node in tree.body
    ]
    lines = checks(run(ast.unparse(tree)))
    assert len(lines) == 4
    assert all('= "ok: agrees' in line for line in lines), lines


@pytest.mark.parametrize(
    ("check", "fn"),
    [
        (diagnose.attention, solutions.attention),
        (diagnose.layer, solutions.layer),
    ],
)
def test_solutions_pass_the_checker(check, fn):
    assert check(fn).ok


def test_write_the_layer_a_broken_solution_fails_its_check():
    """The drifted case: a solution with its transpose taken out."""

    def split_heads(x, n_head):
        b, t, d_model = x.shape
        return x.reshape(b, n_head, t, d_model // n_head)

    def layer(x, w_q, w_k, w_v, w_o, n_head, causal):
        saved = solutions.split_heads
        solutions.split_heads = split_heads
        try:
            return solutions.layer(x, w_q, w_k, w_v, w_o, n_head, causal)
        finally:
            solutions.split_heads = saved

    assert [f.name for f in diagnose.layer(layer).findings] == ["head_split"]
