"""The unit suite, run where CONTRIBUTING.md's walkthrough was followed.

``make test`` runs its unit tests (beside the build) through this: in a
copy of the repository (its tracked and unignored files) into which the
walkthrough's code and unit test were written as the guide shows them.
So every ``make test`` shows two things with one run: the tree's unit
tests pass, and the module a new contributor adds by the guide passes
the whole unit suite (the registry of public functions, every test
that reads the package as a whole, its doctests). The copy costs a
second or two, not a second run of the suite. The rest of the
walkthrough (its page, its script, the loop of ``make serve``) is
test_walkthrough.py's, after the build.

    python -m tests.docs.walkthrough_tree [pytest's arguments]
"""

import subprocess
import sys
import tempfile
from pathlib import Path

from bench.site_perf.build_times import copy_repo
from tests.docs.test_walkthrough import GUIDE, steps

# what the unit suite reads of the walkthrough: its code and unit test
UNIT_PARTS = ("mha_ref/", "tests/unit/")


def prepare(root, guide=None):
    """Copy the repository to ``root`` and write the walkthrough's files
    under UNIT_PARTS into it; returns their paths."""
    guide = GUIDE.read_text(encoding="utf-8") if guide is None else guide
    copy_repo(root)
    added = []
    for relative, text in steps(guide).items():
        if relative.startswith(UNIT_PARTS):
            path = root / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            added.append(relative)
    return added


def main(argv):
    with tempfile.TemporaryDirectory(prefix="mha-walkthrough-") as folder:
        root = Path(folder) / "repo"
        added = prepare(root)
        if not added:
            print("CONTRIBUTING.md's walkthrough shows no code to add")
            return 2
        print(
            "unit tests in a copy of the repository with the walkthrough's "
            f"{' and '.join(added)} added (CONTRIBUTING.md)",
            flush=True,
        )
        pytest = [sys.executable, "-m", "pytest", *argv]
        return subprocess.run(pytest, cwd=root, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
