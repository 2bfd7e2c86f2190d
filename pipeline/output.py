"""What topics write through: files, JSON data, tables, figures.

Everything a topic writes goes through ``Output`` (passed to its
``render``), which writes atomically and only when the bytes change, so
``mkdocs serve`` does not rebuild in a loop; figures are drawn by
figures.py. Both files are part of every topic's cache key: a change
here reruns them all.

matplotlib is imported only when a figure is drawn, so a fully cached
build never pays for it.
"""

import json
import math
import os
import tempfile
from pathlib import Path

from pipeline.figures import THEMES, render_svg

# --------------------------------------------------------------- writing


def atomic_write(path, data):
    """Write ``data`` (str or bytes) to ``path`` unless it already holds it.

    The bytes go to a temporary file in the same folder, then
    ``os.replace`` swaps it in: a reader (or an interrupted build) sees
    the old file or the new one, never half of one. Returns True when
    the file changed.
    """
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        if path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True


def plain(value):
    """Turn NumPy/torch values into JSON-able Python, deterministically.

    Arrays and tensors become (nested) lists, NumPy scalars Python
    numbers; NaN and infinities become the strings "nan", "inf", "-inf"
    (JSON has no such numbers). Tuples become lists.
    """
    if hasattr(value, "detach"):  # torch.Tensor, without importing torch
        value = value.detach().cpu().numpy()
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):
        value = value.tolist()  # NumPy array or scalar
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(
        f"cannot store {type(value).__name__} {value!r} in generated JSON"
    )


def to_json(data):
    """The canonical JSON text of ``data``: sorted keys, full float repr."""
    return (
        json.dumps(plain(data), sort_keys=True, indent=1, allow_nan=False)
        + "\n"
    )


# --------------------------------------------------------------- numbers


def fmt(x, digits=4):
    """Format a number for a table: ``digits`` significant figures.

    Values that would round to 0 or +-1 without being exactly that get
    more digits, so 0.99999989 shows as 0.9999999, never as 1.
    """
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
    return text


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
        cells = [fmt(c) if not isinstance(c, str) else c for c in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- output


class Output:
    """What a topic's ``render(data, out)`` writes through.

    ``out.table(name, markdown)`` -> tables/<name>.md;
    ``out.figure(name, draw, alt)`` -> figures/<name>-light.svg and
    -dark.svg, with ``draw(fig, theme)`` called once per theme, and the
    alt text stored in the topic's data under data["figures"][name].
    """

    def __init__(self, root, data, written=None):
        self.root = Path(root)
        self.data = data
        # paths relative to root, in order; the caller may pass its own
        # list, to know what was written even when render fails
        self.written = [] if written is None else written

    def _write(self, relative, content):
        if relative in self.written:
            raise ValueError(f"{relative} written twice by one topic")
        self.written.append(relative)
        atomic_write(self.root / relative, content)

    def data_file(self, topic):
        """data/<topic>.json from ``self.data`` (after the figures)."""
        self._write(f"data/{topic}.json", to_json(self.data))

    def table(self, name, markdown):
        if not markdown.endswith("\n"):
            markdown += "\n"
        self._write(f"tables/{name}.md", markdown)

    def figure(self, name, draw, alt, figsize=(7.0, 3.2)):
        if not alt or not alt.strip():
            raise ValueError(f"figure {name} needs alt text")
        files = {}
        for theme in THEMES:
            relative = f"figures/{name}-{theme.name}.svg"
            self._write(relative, render_svg(draw, theme, figsize))
            files[theme.name] = relative
        self.data.setdefault("figures", {})[name] = {"alt": alt, **files}
