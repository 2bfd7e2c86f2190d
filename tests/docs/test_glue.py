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
