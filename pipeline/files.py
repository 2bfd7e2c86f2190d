"""Writing generated files: atomically, and only when bytes change.

Everything the generation step writes goes through ``atomic_write``, so
``mkdocs serve`` (which watches docs/) does not rebuild in a loop and an
interrupted build never leaves half a file; ``to_json`` is the one JSON
form of a page's data (sorted keys, no NaN).
"""

import json
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


def to_json(data):
    """The canonical JSON text of ``data`` (plain already: glue.plain
    made it so): sorted keys, full float repr."""
    return json.dumps(data, sort_keys=True, indent=1, allow_nan=False) + "\n"
