"""What a file's text says, read once: kept between runs, by its text.

A warm ``make site`` with nothing to run spent most of its own time
parsing the same Python files again: every page's script and each
``mha_ref`` module it carries, to find what they import, which files
they name, what they glue and whether they compile. Each of those is a
function of a file's text (and of the code that asks), so each answer
is kept in ``.cache/facts.json`` under (what was asked, sha256 of the
text) for one Python and one state of ``pipeline/`` (an edit there
asks everything again), and read back while the text is the same: a
run parses only the files that changed. An answer no run asked for in
STALE_DAYS goes.

    imports = memo.fact("mha-imports", source, find_imports)

``compute(text)`` must return JSON (lists, not sets); ``long_fact``
keeps a long text answer (a page's HTML) in a file of its own. The
file is written once, when the process ends (atexit), and only if an
answer was added; two processes that race lose an answer at most (it
is computed again), never a wrong one: each answer is keyed on its own
text.
"""

import atexit
import contextlib
import functools
import hashlib
import json
import os
import sys
import time
from pathlib import Path

from pipeline import config
from pipeline.files import atomic_write

STALE_DAYS = 14


@functools.cache
def version():
    """What every answer also depends on: the Python that parsed, and
    the pipeline's own code that asked (an edit there asks again)."""
    digest = hashlib.sha256(f"facts v1, Python {sys.version}".encode())
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


_facts = None  # {key: [day last asked, answer]}, loaded on first use
_dirty = False  # an answer added or asked on a new day: facts.json
_long_written = False  # a long answer added: time to prune the old ones
_saving = False  # save() registered with atexit


def _save_at_exit():
    global _saving
    if not _saving:
        atexit.register(save)
        _saving = True


def _path():
    return config.ROOT / config.CACHE / "facts.json"


def _load():
    global _facts
    if _facts is None:
        try:
            stored = json.loads(_path().read_text("utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            stored = {}
        same = stored.get("version") == version()
        _facts = stored.get("facts", {}) if same else {}
        _save_at_exit()
    return _facts


def _today():
    return int(time.time() // 86400)


def fact(kind, text, compute):
    """``compute(text)``, or its answer from an earlier run on the same
    text (``text``: str or bytes)."""
    global _dirty
    data = text
    if isinstance(text, str):
        data = text.encode("utf-8", "surrogateescape")
    key = f"{kind}:{hashlib.sha256(data).hexdigest()}"
    facts = _load()
    found = facts.get(key)
    if found is None:
        found = facts[key] = [_today(), compute(text)]
        _dirty = True
    elif found[0] != _today():
        found[0], _dirty = _today(), True
    return found[1]


def long_fact(kind, text, compute):
    """As ``fact``, for an answer that is a long text (a page's HTML):
    kept in a file of its own, .cache/facts/<sha256>, touched when read
    (once one is added, ``save`` removes the ones untouched for
    STALE_DAYS)."""
    answer = long_known(kind, text)
    if answer is None:
        answer = compute(text)
        long_keep(kind, text, answer)
    return answer


def long_known(kind, text):
    """The long answer kept for ``text``, or None."""
    path = _long_file(kind, text)
    try:
        answer = path.read_text("utf-8")
    except FileNotFoundError:
        return None
    os.utime(path)
    return answer


def long_keep(kind, text, answer):
    """Keep ``answer`` as the long answer for ``text``."""
    global _long_written
    with contextlib.suppress(OSError):  # read-only: computed again
        atomic_write(_long_file(kind, text), answer)
        _long_written = True
        _save_at_exit()


def _long_file(kind, text):
    data = f"{kind}\0{version()}\0{text}".encode("utf-8", "surrogateescape")
    digest = hashlib.sha256(data).hexdigest()
    return _long_path() / digest[:2] / digest


def _long_path():
    return config.ROOT / config.CACHE / "facts"


def save():
    """Write the answers if any was added, and prune the long ones if
    one was (atexit calls it)."""
    global _dirty, _long_written
    if _long_written:
        old = time.time() - STALE_DAYS * 86400
        for path in _long_path().glob("*/*"):
            if path.stat().st_mtime < old:
                path.unlink(missing_ok=True)
        _long_written = False
    if not _dirty or _facts is None:
        return
    cutoff = _today() - STALE_DAYS
    kept = {k: v for k, v in _facts.items() if v[0] >= cutoff}
    text = json.dumps({"version": version(), "facts": kept}, sort_keys=True)
    try:
        atomic_write(_path(), text + "\n")
    except OSError:  # a read-only checkout: the next run computes again
        return
    _dirty = False
