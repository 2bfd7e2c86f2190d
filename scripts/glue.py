"""Name what a cell computes, so the page can show it: glue.

A page script (``scripts/<page>.py``) calls these in the cells whose
results its page shows. Each call displays the result in the notebook,
with its name, and tags the output so the site's build can collect it:

    glue.value("sqrt_d_head", 8.0)     # page: << scaling.sqrt_d_head >>
    glue.table("scaling", header, rows)  # generated/tables/scaling.md
    glue.figure("scaling-sweep", draw, alt)  # << figure("scaling-sweep") >>

``draw(fig, theme)`` is called on a fresh matplotlib Figure once per
colour scheme of the site (light and dark); the notebook shows the
light one. This file travels with every notebook (a reader's download
carries it), so it needs numpy and matplotlib only.
"""

import io
import json
import math
import re
from dataclasses import dataclass

MIME = "application/vnd.mha-ref.glue+json"  # what the build collects

# --------------------------------------------------------------- values


def plain(value):
    """NumPy/torch values as JSON-able Python, deterministically.

    Arrays and tensors become (nested) lists, NumPy scalars Python
    numbers; NaN and infinities the strings "nan", "inf", "-inf".
    """
    if hasattr(value, "detach"):  # a torch.Tensor, without importing torch
        value = value.detach().cpu().numpy()
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()  # a NumPy array or scalar
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"cannot glue {type(value).__name__} {value!r}")


def fmt(x, digits=4):
    """A number for a table, ``digits`` significant figures; values that
    would round to 0 or +-1 without being exactly that get more digits."""
    if isinstance(x, str):
        return x
    if isinstance(x, int):  # bool too
        return str(x)
    x = float(x)
    if not math.isfinite(x):
        return str(x)
    for precision in range(digits, 18):
        text = f"{x:.{precision}g}"
        if float(text) not in (0.0, 1.0, -1.0) or float(text) == x:
            break
    if "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent):+03d}"
    return _unsigned_zero(text)


# a number that rounded to zero with a minus sign: -0, -0.0, -0.00
_NEGATIVE_ZERO = re.compile(r"(?<![\w.])[-−](0(?:\.0+)?)(?![\w.])")


def _unsigned_zero(text):
    """``text`` with every -0.0 written 0.0: a value rounded to zero reads
    as zero, whatever side of it it was on."""
    return _NEGATIVE_ZERO.sub(r"\1", text)


def fmt_list(values, digits=4):
    """``fmt`` each value, as a list: [0.8808, 0.1192]."""
    return "[" + ", ".join(fmt(v, digits) for v in values) + "]"


def markdown_table(header, rows, align=None):
    """A Markdown table; ``align`` is a string of l/r/c, one per column."""
    align = align or "l" * len(header)
    if len(align) != len(header):
        raise ValueError(f"align {align!r} does not match header {header}")
    marks = {"l": ":--", "r": "--:", "c": ":-:"}
    lines = [
        "| " + " | ".join(header) + " |",
        "| " + " | ".join(marks[a] for a in align) + " |",
    ]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"row {row} does not match header {header}")
        cells = [
            _unsigned_zero(c) if isinstance(c, str) else fmt(c) for c in row
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------- figures


@dataclass(frozen=True)
class Theme:
    """Colours for one of the site's schemes; figures are transparent."""

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
        light = 0.299 * r + 0.587 * g + 0.114 * b > 0.5
        return "#111111" if light else "#ffffff"


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
    "font.sans-serif": ["DejaVu Sans", "Arial", "Helvetica"],
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "figure.titlesize": 10,
    "figure.titleweight": "bold",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "figure.facecolor": "none",
    "axes.facecolor": "none",
    "savefig.facecolor": "none",
    "savefig.transparent": True,
    "path.simplify": True,
}


# A log axis labels its ticks in mathtext ($\mathdefault{10^{3}}$), which
# matplotlib parses again at every draw of every figure (its parse cache
# is per renderer): half of a log-log figure's time. The same labels in
# plain text with Unicode superscripts (10³, 2¹⁰, 5×10²) draw as ordinary
# text, and read the same.
_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
_MATHTEXT_POWER = re.compile(
    r"^\$\\mathdefault\{(?:([-\d.]+)\\times)?(-?\d+)\^\{(-?\d+)\}\}\$$"
)


def plain_power(label):
    r"""A log tick's mathtext label in plain text; other labels as given.

    >>> plain_power(r"$\mathdefault{10^{-3}}$")
    '10⁻³'
    >>> plain_power(r"$\mathdefault{5\times10^{2}}$"), plain_power("0.5")
    ('5×10²', '0.5')
    """
    m = _MATHTEXT_POWER.match(label)
    if not m:
        return label
    factor, base, exponent = m.groups()
    power = base + exponent.translate(_SUPERSCRIPT)
    return f"{factor}×{power}" if factor else power


def _plain_log_ticks(fig):
    """Every log axis of ``fig`` labels its ticks with plain_power."""
    from matplotlib import ticker

    class Plain(ticker.Formatter):
        def __init__(self, inner):
            self.inner = inner

        def __call__(self, x, pos=None):
            return plain_power(self.inner(x, pos))

        def set_locs(self, locs):
            self.inner.set_locs(locs)

    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for get, put in (
                (axis.get_major_formatter, axis.set_major_formatter),
                (axis.get_minor_formatter, axis.set_minor_formatter),
            ):
                inner = get()
                if isinstance(inner, ticker.LogFormatterMathtext):
                    put(Plain(inner))  # inner keeps its axis


# The build sets this to a folder: a figure whose drawing is the same as
# one rendered before is read back, not laid out and written again (the
# slow part of most pages). A reader's notebook has no such folder.
FIGURE_CACHE = "MHA_REF_FIGURE_CACHE"


class _Digest:
    """A file-like object that hashes what a pickler writes to it."""

    def __init__(self, digest):
        self.write = digest.update


def _figure_key(fig):
    """sha256 of everything the figure's SVG is made from: its artists
    (pickled: data, styles, sizes, texts), every rcParam in force,
    matplotlib's version and this file's text; None when the figure does
    not pickle (a lambda formatter, say): then it is simply drawn."""
    import hashlib
    import pickle
    from pathlib import Path

    import matplotlib
    from matplotlib.transforms import TransformNode

    class Stable(pickle.Pickler):
        # a transform lists its parents by id(): different in every
        # process; the parents are pickled anyway, as the children's
        # owners, so their number stands in for them
        def reducer_override(self, obj):
            if not isinstance(obj, TransformNode):
                return NotImplemented
            rv = obj.__reduce_ex__(4)
            if len(rv) < 3 or not isinstance(rv[2], dict):
                return NotImplemented
            state = {**rv[2], "_parents": len(rv[2].get("_parents", ()))}
            return (*rv[:2], state, *rv[3:])

    digest = hashlib.sha256()
    digest.update(matplotlib.__version__.encode())
    digest.update(Path(__file__).read_bytes())
    digest.update(repr(sorted(matplotlib.rcParams.items())).encode())
    try:
        Stable(_Digest(digest), protocol=4).dump(fig)
    except Exception:  # unpicklable: draw it every time
        return None
    return digest.hexdigest()


def _cached_svg(fig):
    """(path in the build's figure cache or None, the SVG if there)."""
    import os
    from pathlib import Path

    folder = os.environ.get(FIGURE_CACHE)
    key = _figure_key(fig) if folder else None
    if key is None:
        return None, None
    path = Path(folder, key[:2], f"{key}.svg")
    try:
        svg = path.read_text("utf-8")
    except OSError:
        return path, None
    os.utime(path)  # used: kept by the build's pruning
    return path, svg


def _store_svg(path, svg):
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.part")
    partial.write_text(svg, "utf-8")
    os.replace(partial, path)  # whole or absent, as two pages race


def render_svg(draw, theme, figsize=(7.0, 3.2)):
    """Call ``draw(fig, theme)`` on a fresh figure; return the SVG text."""
    import matplotlib
    from matplotlib.figure import Figure  # not pyplot: no backend to set

    with matplotlib.rc_context({**BASE_RC, **theme.rc}):
        fig = Figure(figsize=figsize, layout="constrained")
        draw(fig, theme)
        path, svg = _cached_svg(fig)
        if svg is not None:
            return svg
        _plain_log_ticks(fig)
        buffer = io.BytesIO()
        fig.savefig(
            buffer, format="svg", metadata={"Date": None, "Creator": None}
        )
    svg = buffer.getvalue().decode("utf-8")
    if path is not None:
        _store_svg(path, svg)
    return svg


# ------------------------------------------------------------ diagrams
# Drawing helpers that several pages share (the head split is drawn on
# the pitfalls page and on Why several heads): one drawing, one place.
# A diagram's axes count in cells, y pointing down, as a matrix reads.


def diagram_axes(fig, width, height):
    """One axes for a diagram ``width`` by ``height`` cells: equal
    aspect, no frame, row 0 at the top."""
    ax = fig.add_subplot()
    ax.set_xlim(-0.2, width + 0.2)
    ax.set_ylim(height + 0.2, -0.2)
    ax.set_aspect("equal")
    ax.set_axis_off()
    return ax


def draw_matrix(ax, x, y, theme, values=None, shape=None, **style):
    """A matrix as a grid of unit cells, top-left corner at (x, y).

    ``values`` (rows, cols) colour the cells with ``cmap`` (theme.cmap
    unless given) over ``vmin``..``vmax`` (their range unless given);
    without values, ``shape`` gives an empty grid. ``blocked`` (bool,
    same shape) hatches cells grey, as a masked score; ``outline`` frames
    the grid in a colour, with a thicker line; ``label`` goes above it,
    ``below`` under it. Returns the grid's right edge.
    """
    import matplotlib
    import numpy as np

    rows, cols = np.shape(values) if values is not None else shape
    if values is not None:
        values = np.asarray(values, dtype=float)
        finite = values[np.isfinite(values)]
        vmin = style.get("vmin", finite.min() if finite.size else 0.0)
        vmax = style.get("vmax", finite.max() if finite.size else 1.0)
        ax.pcolormesh(
            np.arange(cols + 1) + x,
            np.arange(rows + 1) + y,
            np.ma.masked_invalid(values),
            cmap=style.get("cmap", theme.cmap),
            vmin=vmin,
            vmax=vmax if vmax > vmin else vmin + 1,
            edgecolor=theme.muted,
            linewidth=0.4,
        )
    blocked = style.get("blocked")
    for (i, j), hidden in np.ndenumerate(
        blocked if blocked is not None else np.zeros((rows, cols), bool)
    ):
        if hidden:
            ax.add_patch(
                matplotlib.patches.Rectangle(
                    (x + j, y + i),
                    1,
                    1,
                    facecolor=theme.masked,
                    hatch="///",
                    edgecolor=theme.muted,
                    linewidth=0.4,
                )
            )
    if values is None:
        for i in range(rows + 1):
            ax.plot([x, x + cols], [y + i] * 2, color=theme.muted, lw=0.6)
        for j in range(cols + 1):
            ax.plot([x + j] * 2, [y, y + rows], color=theme.muted, lw=0.6)
    ax.add_patch(
        matplotlib.patches.Rectangle(
            (x, y),
            cols,
            rows,
            fill=False,
            edgecolor=style.get("outline", theme.text),
            linewidth=2.2 if "outline" in style else 1.2,
        )
    )
    for text, at, va in (
        (style.get("label"), y - 0.25, "bottom"),
        (style.get("below"), y + rows + 0.25, "top"),
    ):
        if text:
            ax.text(x + cols / 2, at, text, ha="center", va=va)
    return x + cols


def draw_arrow(ax, start, end, theme, text=None, **text_style):
    """An arrow from ``start`` to ``end`` (x, y), ``text`` beside it:
    above a horizontal arrow, right of a vertical one."""
    ax.annotate(
        "",
        xy=end,
        xytext=start,
        arrowprops={"arrowstyle": "-|>", "color": theme.text, "lw": 1.0},
    )
    if text:
        (x0, y0), (x1, y1) = start, end
        across = abs(x1 - x0) >= abs(y1 - y0)
        ax.text(
            (x0 + x1) / 2 + (0 if across else 0.3),
            (y0 + y1) / 2 - (0.25 if across else 0),
            text,
            ha="center" if across else "left",
            va="bottom" if across else "center",
            **text_style,
        )


def draw_head_split(
    ax, theme, positions, channels, row_labels=True, fontsize=7.5, short=False
):
    """One head split as a grid: a row per (head, row), a column per
    channel of the head, each cell coloured by the position ``t`` its
    entry came from and labelled ``t<position> c<channel>`` (``short``:
    ``<position>,<channel>``, readable larger on a phone); a thick
    line between heads. ``positions`` and ``channels`` are (H, T, dh)."""
    import matplotlib
    import numpy as np

    h, t, dh = positions.shape
    colours = matplotlib.colors.ListedColormap(theme.series[:t])
    grid = positions.reshape(h * t, dh)  # one row per (head, row)
    ax.pcolormesh(
        np.arange(dh + 1) - 0.5,
        np.arange(h * t + 1) - 0.5,
        grid,
        cmap=colours,
        vmin=-0.5,
        vmax=t - 0.5,
        edgecolor=theme.text,
        linewidth=0.3,
    )
    ax.set_ylim(h * t - 0.5, -0.5)  # head 0, row 0 at the top
    for (r, c), pos in np.ndenumerate(grid):
        channel = channels.reshape(h * t, dh)[r, c]
        ax.text(
            c,
            r,
            f"{pos},{channel}" if short else f"t{pos} c{channel}",
            ha="center",
            va="center",
            fontsize=fontsize,
            color=theme.text_on(colours(pos)),
        )
    for boundary in range(1, h):
        ax.axhline(boundary * t - 0.5, color=theme.text, lw=2)
    ax.set_xticks(range(dh))
    ax.set_xlabel("column within the head")
    if row_labels:  # else leave the ticks to a shared y axis
        labels = [f"head {i // t}, row {i % t}" for i in range(h * t)]
        ax.set_yticks(range(h * t), labels)


# ------------------------------------------------------------- the glue


# What glue returned in the cell that is running: shown already.
_SHOWN = []


def _show_once(shell):
    """A cell ending in a glue call shows its result once, as ``glue:``.

    IPython displays a cell's last value again (its ``Out``); the shell's
    display hook is told to skip a value glue returned in this cell.
    """
    hook = shell.displayhook
    if getattr(hook, "glue_shows_once", False):
        return
    compute = hook.compute_format_data

    def compute_unless_glued(result):
        if any(result is shown for shown in _SHOWN):
            return {}, {}  # nothing to display: no Out
        return compute(result)

    def forget(info=None):
        _SHOWN.clear()

    hook.compute_format_data = compute_unless_glued
    hook.glue_shows_once = True
    shell.events.register("pre_run_cell", forget)


def _returned(result):
    """``result``, which the cell has shown: glue's return value."""
    _SHOWN.append(result)
    return result


def _show(bundle, record):
    """Display ``bundle`` in a notebook (print its text elsewhere)."""
    bundle = {**bundle, MIME: record}
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        get_ipython = None
    shell = get_ipython() if get_ipython is not None else None
    if shell is not None:
        display(bundle, raw=True, metadata={MIME: {"glue": record["name"]}})
        _show_once(shell)
    else:  # run as a plain script
        print(bundle["text/plain"])


def _check_name(name):
    if not isinstance(name, str) or not name.replace("-", "_").isidentifier():
        raise ValueError(f"glue name {name!r}: letters, digits, _ and -")


def value(name, result):
    """Show ``result`` as the page's ``<< page.name >>``; return it."""
    _check_name(name)
    if "-" in name:
        raise ValueError(f"value name {name!r}: a page variable has no '-'")
    data = plain(result)
    text = json.dumps(data)
    if len(text) > 300:
        text = text[:300] + " ..."
    shown = f"glue: {name} = {text}"
    _show(
        {"text/plain": shown}, {"name": name, "kind": "value", "value": data}
    )
    return _returned(result)


def table(name, header, rows, align=None):
    """Show a table; the page includes generated/tables/<name>.md."""
    _check_name(name)
    markdown = markdown_table(header, rows, align)
    record = {"name": name, "kind": "table", "markdown": markdown}
    shown = f"glue: table {name}\n\n{markdown}"
    _show({"text/plain": shown, "text/markdown": shown}, record)
    return _returned(markdown)


def figure(name, draw, alt, figsize=(7.0, 3.2)):
    """Draw a figure in both schemes; the page shows << figure(name) >>."""
    _check_name(name)
    if not isinstance(alt, str) or not alt.strip():
        raise ValueError(f"figure {name!r} needs alt text")
    svg = {theme.name: render_svg(draw, theme, figsize) for theme in THEMES}
    record = {"name": name, "kind": "figure", "alt": alt, "svg": svg}
    shown = f"glue: figure {name}: {alt}"
    _show({"text/plain": shown, "image/svg+xml": svg["light"]}, record)


def export(name, data):
    """A JSON file the site serves at generated/exports/<name>.json, for
    a page's control to fetch (trained weights, say); returns its size."""
    _check_name(name)
    text = json.dumps(plain(data), separators=(",", ":"), allow_nan=False)
    record = {"name": name, "kind": "export", "json": text}
    shown = f"glue: export {name} ({len(text):,} bytes of JSON)"
    _show({"text/plain": shown}, record)
    return _returned(len(text))
