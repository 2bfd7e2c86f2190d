"""The page filters and the figure macro (macros.py)."""

import jinja2
import pytest

import macros


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (1.5, "1.5"),
        (8.0, "8"),
        (0.88079708, "0.8808"),
        (-0.00001, "0"),
        ("nan", "NaN"),
        (float("inf"), "inf"),
    ],
)
def test_num_rounds_without_trailing_zeros(value, shown):
    assert macros.num(value) == shown


def test_sci_and_vec_format_numbers():
    assert macros.sci(1.1920929e-07) == "1.19e-07"
    assert macros.vec([[1.0, 0.0], [0.5, 0.25]]) == "[[1, 0], [0.5, 0.25]]"


def test_filters_fail_on_missing_value():
    missing = jinja2.StrictUndefined(name="no_such_key")
    with pytest.raises(jinja2.UndefinedError, match="no_such_key"):
        macros.num(missing)
    with pytest.raises(TypeError, match="expected a number"):
        macros.num("12")


def test_figure_shows_both_schemes_with_alt():
    data = {"topic": {"figures": {"f": {"alt": "a line"}}}}
    assert macros.figure(data, "f", "../").split("\n") == [
        "![a line](../generated/figures/f-light.svg#only-light)",
        "![a line](../generated/figures/f-dark.svg#only-dark)",
    ]
    with pytest.raises(KeyError, match="no topic drew a figure named 'g'"):
        macros.figure(data, "g")
