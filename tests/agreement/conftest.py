"""Fixtures for the agreement tests: the real repository, and small
drifted copies written into tmp_path."""

import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # scripts/ is not installed; import it
    sys.path.insert(0, str(ROOT))


@pytest.fixture
def root():
    """The repository root."""
    return ROOT


def write_files(base, files):
    """Write {relative path: text} under base; text is dedented and its
    first newline dropped, so line 1 is the first line written."""
    for relative, text in files.items():
        path = Path(base) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return Path(base)


@pytest.fixture
def repo(tmp_path):
    """Factory: repo({path: text}) -> a small repository in tmp_path."""
    def make(files):
        return write_files(tmp_path, files)

    return make


def reported(problems, path, line, *words):
    """True if one problem names path and line and has all the words."""
    return any(p.path == path and p.line == line
               and all(w in p.message for w in words) for p in problems)


def reported_alone(problems, path, line, *words):
    """True if there is exactly one problem and reported() finds it."""
    return len(problems) == 1 and reported(problems, path, line, *words)


def describe(problems):
    return "\n".join(str(p) for p in problems) or "(no problems)"
