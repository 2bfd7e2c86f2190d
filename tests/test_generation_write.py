"""Writing generated files: atomic, only on change, canonical JSON."""

import json
import math
import os

import numpy as np
import pytest

from scripts import common


def test_atomic_write_skips_identical_bytes(tmp_path):
    path = tmp_path / "sub" / "table.md"
    assert common.atomic_write(path, "| a |\n") is True
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))  # an old mtime
    assert common.atomic_write(path, "| a |\n") is False
    assert path.stat().st_mtime_ns == 1_000_000_000  # untouched
    assert common.atomic_write(path, b"| b |\n") is True
    assert path.read_text() == "| b |\n"
    assert path.stat().st_mtime_ns != 1_000_000_000
    assert sorted(p.name for p in path.parent.iterdir()) == ["table.md"]


def test_atomic_write_failure_keeps_old_file_and_no_temp(tmp_path,
                                                         monkeypatch):
    path = tmp_path / "data.json"
    path.write_text("old\n")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(common.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        common.atomic_write(path, "new\n")
    assert path.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["data.json"]


def test_plain_converts_arrays_and_non_finite():
    data = {
        "a": np.array([[1.5, np.nan], [np.inf, -np.inf]]),
        "b": np.float32(0.25),
        "c": (np.int64(3), True),
        4: None,
    }
    assert common.plain(data) == {
        "a": [[1.5, "nan"], ["inf", "-inf"]],
        "b": 0.25,
        "c": [3, True],
        "4": None,
    }


def test_plain_rejects_unknown_objects():
    with pytest.raises(TypeError, match="object"):
        common.plain({"x": object()})


def test_to_json_is_sorted_and_keeps_full_floats():
    text = common.to_json({"b": 0.1 + 0.2, "a": [1]})
    assert text == '{\n "a": [\n  1\n ],\n "b": 0.30000000000000004\n}\n'
    assert json.loads(text)["b"] == 0.1 + 0.2


@pytest.mark.parametrize(("value", "text"), [
    (1.0, "1"),
    (1.5, "1.5"),
    (0.9999998874648379, "0.9999999"),
    (1.12535162055095e-07, "1.125e-07"),
    (0.8807970779778823, "0.8808"),
    (22.627416997969522, "22.63"),
    (-0.25, "-0.25"),
    (1048576, "1048576"),
    (0.0, "0"),
    (math.nan, "nan"),
])
def test_fmt_significant_digits(value, text):
    assert common.fmt(value) == text


def test_markdown_table_aligns_and_checks_width():
    table = common.markdown_table(["n", "x"], [[1, 0.5], ["a", "b"]], "rl")
    assert table == "| n | x |\n| --: | :-- |\n| 1 | 0.5 |\n| a | b |\n"
    with pytest.raises(ValueError, match="does not match"):
        common.markdown_table(["n", "x"], [[1]])


def test_output_figure_needs_alt_text(tmp_path):
    out = common.Output(tmp_path, {})
    with pytest.raises(ValueError, match="alt text"):
        out.figure("empty", lambda fig, theme: None, alt=" ")


def test_output_figure_writes_both_schemes_and_alt(tmp_path):
    data = {}
    out = common.Output(tmp_path, data)

    def draw(fig, theme):
        ax = fig.subplots()
        ax.plot([0, 1], [0, 1], color=theme.series[0])
        ax.set_xlabel("x (units)")

    out.figure("line", draw, alt="A rising line.", figsize=(2, 1.5))
    light = (tmp_path / "figures/line-light.svg").read_text()
    dark = (tmp_path / "figures/line-dark.svg").read_text()
    assert data["figures"]["line"] == {
        "alt": "A rising line.",
        "light": "figures/line-light.svg",
        "dark": "figures/line-dark.svg",
    }
    light_text, dark_text = (t.text for t in common.THEMES)
    assert light_text in light and dark_text not in light
    assert dark_text in dark and light_text not in dark
    assert "<dc:date>" not in light  # no timestamp
    with pytest.raises(ValueError, match="written twice"):
        out.figure("line", draw, alt="again")
