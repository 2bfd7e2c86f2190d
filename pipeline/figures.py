"""The two colour schemes of every figure, and drawing one to SVG.

Material's light and dark schemes each get their own variant of a
figure (``Theme``); ``render_svg`` draws one with fixed settings so the
bytes reproduce. Topics reach it through ``Output.figure``. Like
output.py, this file is part of every topic's cache key. matplotlib is
imported only when a figure is drawn.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Theme:
    """Colours for one of Material's schemes; figures are transparent."""

    name: str  # "light" or "dark": the file suffix
    text: str  # labels, ticks, titles
    muted: str  # grid lines, reference lines
    series: tuple  # line/bar colours, in order
    masked: str  # fill of masked (blocked) cells
    cmap: str = "viridis"

    @property
    def rc(self):
        return {
            "text.color": self.text,
            "axes.labelcolor": self.text,
            "axes.edgecolor": self.text,
            "axes.titlecolor": self.text,
            "xtick.color": self.text,
            "ytick.color": self.text,
            "grid.color": self.muted,
            "hatch.color": self.muted,
            "legend.facecolor": "none",
            "legend.edgecolor": self.muted,
            "legend.labelcolor": self.text,
        }

    def text_on(self, rgba):
        """Black or white, whichever reads on a cell of colour ``rgba``."""
        r, g, b = rgba[:3]
        return (
            "#111111" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "#ffffff"
        )


THEMES = (
    Theme(
        "light",
        text="#1f1f1f",
        muted="#9e9e9e",
        series=("#1565c0", "#d84315", "#2e7d32", "#6a1b9a"),
        masked="#d6d6d6",
    ),
    Theme(
        "dark",
        text="#e3e5ea",
        muted="#7a7f8c",
        series=("#64b5f6", "#ffab70", "#81c784", "#ce93d8"),
        masked="#4a4e59",
    ),
)

BASE_RC = {
    "svg.hashsalt": "mha-ref",  # fixed element ids: reproducible bytes
    "svg.fonttype": "none",  # real text: small files, selectable
    "font.family": "sans-serif",
    # a short fallback list: it is repeated on every text element
    "font.sans-serif": ["DejaVu Sans", "Arial", "Helvetica"],
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "figure.titlesize": 10,  # fig.suptitle
    "figure.titleweight": "bold",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.facecolor": "none",
    "axes.facecolor": "none",
    "savefig.facecolor": "none",
    "savefig.transparent": True,
    "path.simplify": True,
}


def render_svg(draw, theme, figsize):
    """Call ``draw(fig, theme)`` on a fresh figure; return the SVG bytes."""
    import io

    import matplotlib

    matplotlib.use("Agg")  # no display; must precede pyplot anywhere
    from matplotlib.figure import Figure

    with matplotlib.rc_context({**BASE_RC, **theme.rc}):
        fig = Figure(figsize=figsize, layout="constrained")
        draw(fig, theme)
        buffer = io.BytesIO()
        fig.savefig(
            buffer, format="svg", metadata={"Date": None, "Creator": None}
        )
    return buffer.getvalue()
