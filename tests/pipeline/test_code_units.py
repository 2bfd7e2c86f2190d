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
    # a comment indented after plain's last line is plain's; a comment
    # at the module's column is the skeleton's
    trailing = TEXT.replace("inside plain", "inside plain, edited")
    assert code_units.fingerprint(trailing, ran) != before
    assert code_units.fingerprint(trailing, ["decorated"]) == (
        code_units.fingerprint(TEXT, ["decorated"])
    )
    module = TEXT.replace("module's level", "module's level, edited")
    assert code_units.fingerprint(module, ["decorated"]) != (
        code_units.fingerprint(TEXT, ["decorated"])
    )
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
