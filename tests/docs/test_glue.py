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
