"""Writing generated files: atomically, and only when bytes change.

Everything the generation step writes goes through ``atomic_write``, so
``mkdocs serve`` (which watches docs/) does not rebuild in a loop and an
interrupted build never leaves half a file; ``to_json`` is the one JSON
form of a page's data (sorted keys, no NaN).
"""

import json
import math
import os
import tempfile
from pathlib import Path

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
