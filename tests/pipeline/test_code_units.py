"""pipeline/code_units.py: a file's functions, and what a run read."""

from pipeline import code_units

TEXT = '''"""A module."""

import math

SCALE = 2


def plain(x):
    return x * SCALE
    # a note inside plain, after its last line


# a note at the module's level


@staticmethod
def decorated():
    return 1


class Layer:
    size = 3

    def forward(self, x):
        def inner(y):
            return y + 1

        return [inner(v) for v in x]
'''


def test_units_split_functions_from_the_skeleton():
    skeleton, found = code_units.units(TEXT)
    assert sorted(found) == ["Layer.forward", "decorated", "plain"]
    assert found["decorated"].startswith("@staticmethod\n")
    assert "return x * SCALE" not in skeleton
    assert "SCALE = 2" in skeleton
    assert "size = 3" in skeleton


def test_unit_of_maps_nested_code_to_its_definition():
    assert (
        code_units.unit_of("Layer.forward.<locals>.inner") == "Layer.forward"
    )
    assert code_units.unit_of("Layer.forward.<locals>.<listcomp>") == (
        "Layer.forward"
    )
    assert code_units.unit_of("<module>") is None
    assert code_units.unit_of("<listcomp>") is None


def test_fingerprint_moves_only_with_what_ran():
    ran = ["plain"]
    before = code_units.fingerprint(TEXT, ran)
    body = TEXT.replace("return 1", "return 2")  # decorated: not run
    assert code_units.fingerprint(body, ran) == before
    used = TEXT.replace("x * SCALE", "x * SCALE * 1")
    assert code_units.fingerprint(used, ran) != before
    # comments are no code: an edited, added or moved comment, and a
    # line broken inside brackets, move nothing; a docstring does
    for edited in (
        TEXT.replace("inside plain", "inside plain, edited"),
        TEXT.replace("module's level", "module's level, edited"),
        TEXT.replace(
            "    return x * SCALE\n", "    # new\n    return x * SCALE  # y\n"
        ),
        TEXT.replace("import math\n", "import math  # for nothing\n"),
    ):
        assert edited != TEXT
        assert code_units.fingerprint(edited, ran) == before
    forward = ["Layer.forward"]
    broken = TEXT.replace(
        "return [inner(v) for v in x]",
        "return [\n    inner(v)  # each\n    for v in x\n]",
    )
    assert broken != TEXT
    assert code_units.fingerprint(broken, forward) == (
        code_units.fingerprint(TEXT, forward)
    )
    doc = TEXT.replace("def plain(x):\n", 'def plain(x):\n    """Doc."""\n')
    assert code_units.fingerprint(doc, ran) != before
    string = TEXT.replace('"""A module."""', '"""A module, edited."""')
    assert code_units.fingerprint(string, ran) != before  # the skeleton
    constant = TEXT.replace("SCALE = 2", "SCALE = 3")  # the skeleton
    assert code_units.fingerprint(constant, ran) != before
    gone = TEXT.replace("def plain", "def renamed")
    assert code_units.fingerprint(gone, ran)["ran"] == {"plain": None}
    # a class body ran (its definition): the skeleton holds it, so an
    # edit of a method the run never called moves nothing
    method = TEXT.replace("return y + 1", "return y + 2")
    with_class = ["Layer", "plain"]
    assert code_units.fingerprint(method, with_class) == (
        code_units.fingerprint(TEXT, with_class)
    )


def test_no_page_script_reads_the_source_it_runs():
    """A comment edit reruns no page (code_digest), so no page may show
    what a comment moves: mha_ref's source text or line numbers."""
    from pathlib import Path

    readers = ("getsource", "linecache", "co_firstlineno", "f_lineno")
    for script in sorted(Path("scripts").glob("*.py")):
        text = script.read_text(encoding="utf-8")
        found = [r for r in readers if r in text]
        assert not found, f"{script} reads source text or lines: {found}"
