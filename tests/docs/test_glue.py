"""scripts/glue.py: what the page scripts name and draw with.

A log axis's tick labels reach the SVG as plain text (10³, not
matplotlib's mathtext, which it parses again at every draw): the
figures read the same and draw in half the time.
"""

import doctest
import sys

from pipeline.config import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import glue  # scripts/ is not a package: found by its folder


def test_glue_doctests():
    failed, tried = doctest.testmod(glue)
    assert tried
    assert not failed


def test_log_axes_label_their_ticks_in_plain_text():
    def draw(fig, theme):
        ax = fig.add_subplot()
        ax.loglog([2**4, 2**12], [1e-2, 1e3])
        ax.set_xscale("log", base=2)

    svg = glue.render_svg(draw, glue.THEMES[0])
    assert "mathdefault" not in svg
    for label in ("2¹⁰", "10⁻²", "10³"):
        assert f">{label}<" in svg, f"no tick label {label} in the SVG"


def test_diagram_helpers_draw_shapes_labels_and_the_head_split():
    import numpy as np

    positions = np.array([[[0, 0], [1, 1]], [[0, 0], [1, 1]]])  # (H, T, dh)
    channels = np.array([[[0, 1], [0, 1]], [[2, 3], [2, 3]]])
    edges = []

    def draw(fig, theme):
        ax = glue.diagram_axes(fig, 6, 3)
        blocked = np.triu(np.ones((2, 2), bool), 1)
        edges.append(
            glue.draw_matrix(ax, 1, 0.5, theme, np.eye(2), blocked=blocked)
        )
        glue.draw_matrix(ax, 4, 0.5, theme, shape=(2, 1), label="X")
        glue.draw_arrow(ax, (3.2, 1.5), (3.8, 1.5), theme, "× W")
        glue.draw_head_split(
            fig.add_axes((0, 0, 0.1, 0.1)), theme, positions, channels
        )

    svg = glue.render_svg(draw, glue.THEMES[1])
    assert edges == [3]  # the 2-wide grid at x = 1 ends at x = 3
    for text in ("X", "× W", "t0 c0", "t1 c3", "head 1, row 1"):
        assert f">{text}<" in svg, f"no text {text!r} in the SVG"


def _heat(values, title="A"):
    def draw(fig, theme):
        ax = fig.add_subplot()
        ax.imshow(values, cmap=theme.cmap)
        ax.set_title(title)

    return draw


def test_a_cached_figure_is_the_figure_drawn_again(tmp_path, monkeypatch):
    """The build's figure cache (glue.FIGURE_CACHE): a figure drawn the
    same way is read back, byte for byte what drawing it gives; a
    figure drawn differently (other data, other text, other theme) is
    drawn, not read back."""
    import numpy as np

    theme = glue.THEMES[0]
    values = np.arange(12.0).reshape(3, 4)
    drawn = glue.render_svg(_heat(values), theme)  # no cache: drawn
    monkeypatch.setenv(glue.FIGURE_CACHE, str(tmp_path))
    assert glue.render_svg(_heat(values), theme) == drawn  # stored
    assert len(list(tmp_path.glob("*/*.svg"))) == 1
    assert glue.render_svg(_heat(values), theme) == drawn  # read back
    assert len(list(tmp_path.glob("*/*.svg"))) == 1
    changed = values.copy()
    changed[1, 2] += 1e-9  # one value, one ulp-scale step
    variants = [
        glue.render_svg(_heat(changed), theme),
        glue.render_svg(_heat(values, title="B"), theme),
        glue.render_svg(_heat(values), glue.THEMES[1]),
    ]
    assert len(list(tmp_path.glob("*/*.svg"))) == 4
    assert ">B<" in variants[1]
    assert variants[2] != drawn


def test_a_figure_keys_the_same_in_every_process(tmp_path):
    """The key must not hold what differs between processes (a
    transform lists its parents by id()): two fresh interpreters key
    the same drawing the same."""
    import subprocess

    program = (
        "import sys; sys.path.insert(0, sys.argv[1]); import glue\n"
        "from matplotlib.figure import Figure\n"
        "fig = Figure(layout='constrained')\n"
        "ax = fig.add_subplot(); ax.plot([1, 3, 2]); ax.set_title('t')\n"
        "print(glue._figure_key(fig))\n"
    )
    keys = {
        subprocess.run(
            [sys.executable, "-c", program, str(ROOT / "scripts")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for _ in range(2)
    }
    assert len(keys) == 1
    assert None not in keys
    assert "None" not in keys
