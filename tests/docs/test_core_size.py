"""The code a reader meets first stays small (the small-core contract).

Under the five steps, *The attention matrix* shows one function that
composes the steps: at most 15 non-blank lines as shown (signature,
docstring and comments included), at most one guard call, and only
(q, k, v, mask=None): no argument a later page introduces. *Why several
heads* shows the layer's forward: at most 30 non-blank lines. The
score modifiers are written once per framework and direction: at most
4 code lines call tanh outside the guards, conventions.py and
pitfalls.py. Each limit is read from the files the pages include.
"""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MIRRORS = ("mha_ref/numpy_ref.py", "mha_ref/torch_ref.py")
CORE, CORE_LINES = "dot-product-attention", 15
FORWARD, FORWARD_LINES = "mha-forward", 30
TANH_LINES = 4
TANH_ALLOWED = ("guards/", "checks", "conventions.py", "pitfalls.py")


def shown(source, name):
    """The lines a page shows of section ``name`` (markers left out)."""
    lines, inside = [], False
    for line in source.split("\n"):
        if f"[start:{name}]" in line:
            inside = True
        elif f"[end:{name}]" in line:
            return lines
        elif inside and "--8<--" not in line:
            lines.append(line)
    raise LookupError(f"no section {name!r}")


def size_problems(source, where):
    problems = []
    core = shown(source, CORE)
    n = sum(1 for line in core if line.strip())
    if n > CORE_LINES:
        problems.append(f"{where}:{CORE}: {n} lines (at most {CORE_LINES})")
    tree = ast.parse("\n".join(line for line in core))
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    args = [a.arg for a in fn.args.args + fn.args.kwonlyargs]
    if args != ["q", "k", "v", "mask"]:
        problems.append(f"{where}:{CORE}: takes {args}, not q, k, v, mask")
    guards = len(re.findall(r"\bchecks?\w*\.\w+\(", "\n".join(core)))
    if guards > 1:
        problems.append(f"{where}:{CORE}: {guards} guard calls (at most 1)")
    forward = sum(1 for line in shown(source, FORWARD) if line.strip())
    if forward > FORWARD_LINES:
        problems.append(
            f"{where}:{FORWARD}: {forward} lines (at most {FORWARD_LINES})"
        )
    return problems


@pytest.mark.parametrize("path", MIRRORS)
def test_the_core_and_the_layer_forward_stay_small(path):
    source = (ROOT / path).read_text(encoding="utf-8")
    assert size_problems(source, path) == []


def tanh_lines(root=ROOT):
    """Code lines of mha_ref that call tanh, outside the allowed files."""
    found = []
    for path in sorted((root / "mha_ref").rglob("*.py")):
        relative = str(path.relative_to(root / "mha_ref"))
        if any(part in relative for part in TANH_ALLOWED):
            continue
        for i, line in enumerate(path.read_text("utf-8").split("\n"), 1):
            code = line.split("#", 1)[0]
            if re.search(r"\btanh\(", code):
                found.append(f"mha_ref/{relative}:{i}")
    return found


def test_the_soft_cap_is_written_once_per_framework_and_direction():
    found = tanh_lines()
    assert len(found) <= TANH_LINES, found


GROWN = (
    '''
# --8<-- [start:dot-product-attention]
def dot_product_attention(q, k, v, mask=None, *, softcap=None):
    """Attention."""
    q, k, v, mask = check.dot_product_attention(q, k, v, mask)
    checks.finite(q)
    s = attention_scores(q, k)
    return s
    # --8<-- [end:dot-product-attention]
# --8<-- [start:mha-forward]
def forward(x):
'''
    + "    x = x\n" * 31
    + """    return x
    # --8<-- [end:mha-forward]
"""
)


def test_a_grown_core_is_named():
    assert size_problems(GROWN, "f.py") == [
        "f.py:dot-product-attention: takes ['q', 'k', 'v', 'mask', "
        "'softcap'], not q, k, v, mask",
        "f.py:dot-product-attention: 2 guard calls (at most 1)",
        "f.py:mha-forward: 33 lines (at most 30)",
    ]
