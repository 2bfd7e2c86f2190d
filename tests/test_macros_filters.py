"""The filters that print generated numbers on the pages."""

import json
import math
from types import SimpleNamespace

import pytest

from scripts import macros
from scripts.macros import num, sci, vec


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1.50, "1.5"),
        (1.0, "1"),
        (-0.25, "-0.25"),
        (0.333333333, "0.3333"),
        (0.99996, "1"),
        (1048576, "1048576"),
        (-0.00001, "0"),  # never "-0"
        (8, "8"),
    ],
)
def test_num_rounds_and_strips_trailing_zeros(value, expected):
    assert num(value) == expected


def test_num_digits_argument_sets_decimals():
    assert num(math.pi, 2) == "3.14"
    assert num(math.pi, digits=0) == "3"
    assert num(2.5e-5, 6) == "0.000025"


@pytest.mark.parametrize("value", [float("nan"), "nan", "NaN", " nan "])
def test_num_sci_vec_print_nan(value):
    assert num(value) == "NaN"
    assert sci(value) == "NaN"
    assert vec([value, 1.0]) == "[NaN, 1]"


def test_num_prints_infinities():
    assert num(float("inf")) == "inf"
    assert sci(float("-inf")) == "-inf"


@pytest.mark.parametrize("value", ["1.5", "abc", None, True, [1.0]])
def test_num_rejects_non_numbers(value):
    with pytest.raises(TypeError, match="expected a number"):
        num(value)


@pytest.mark.parametrize(
    ("value", "digits", "expected"),
    [
        (1.1920929e-07, 2, "1.19e-07"),
        (0.0, 2, "0.00e+00"),
        (-3.5e10, 1, "-3.5e+10"),
        (123456.0, 3, "1.235e+05"),
    ],
)
def test_sci_prints_mantissa_and_exponent(value, digits, expected):
    assert sci(value, digits) == expected


def test_vec_formats_flat_and_nested_lists():
    assert vec([1.5, 1.0]) == "[1.5, 1]"
    assert vec([[1.0, 0.0], [0.5, 0.5]]) == "[[1, 0], [0.5, 0.5]]"
    assert vec((0.123456, -2), digits=2) == "[0.12, -2]"
    assert vec([]) == "[]"


def test_vec_prints_booleans_as_python_does():
    assert vec([[False, True], [False, False]]) == (
        "[[False, True], [False, False]]"
    )


def test_filters_read_json_exponents_as_numbers(tmp_path):
    # PyYAML would load 1e-07 as the string "1e-07"; json loads a float.
    (tmp_path / "parity.json").write_text('{"diff": 1e-07, "x": NaN}')
    data = macros.load_data(tmp_path)
    assert sci(data["parity"]["diff"]) == "1.00e-07"
    assert num(data["parity"]["x"]) == "NaN"


def test_load_data_names_variables_after_file_stems(tmp_path):
    (tmp_path / "weighted_sum.json").write_text(
        json.dumps({"output": [1.5, 1.0]})
    )
    (tmp_path / "runtime.json").write_text(json.dumps({"torch": "2.13.0"}))
    data = macros.load_data(tmp_path)
    assert sorted(data) == ["runtime", "weighted_sum"]
    assert vec(data["weighted_sum"]["output"]) == "[1.5, 1]"


def test_load_data_missing_dir_says_run_make_generate(tmp_path):
    with pytest.raises(FileNotFoundError, match="make generate"):
        macros.load_data(tmp_path / "absent")


@pytest.mark.parametrize("stem", ["page", "config", "kv-cache"])
def test_load_data_rejects_unusable_variable_names(tmp_path, stem):
    (tmp_path / f"{stem}.json").write_text("{}")
    with pytest.raises(ValueError, match="template variable"):
        macros.load_data(tmp_path)


def test_hooks_register_filters_and_expose_data(tmp_path):
    data_dir = tmp_path / "generated" / "data"
    data_dir.mkdir(parents=True)
    (data_dir / "scaling.json").write_text('{"sqrt_d_head": 8.0}')
    registered = []
    env = SimpleNamespace(
        conf={"docs_dir": str(tmp_path)},
        variables={"page": None},
        filter=registered.append,
    )
    macros.define_env(env)
    macros.on_pre_page_macros(env)
    assert registered == [num, sci, vec]
    assert num(env.variables["scaling"]["sqrt_d_head"]) == "8"
    assert env.variables["page"] is None
