"""MkDocs hook: run the generation step before every build.

All the work is in scripts/build.py (`make generate`); this only calls it,
so `mkdocs serve` recomputes numbers when mha_ref/ or scripts/ change.
It runs in a fresh interpreter because an import here would keep serving
the first version of every module. MHA_REF_SKIP_GENERATION=1 skips it.
"""

import os
import subprocess
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[1]


def on_pre_build(config):
    if os.environ.get("MHA_REF_SKIP_GENERATION") == "1":
        return
    command = [sys.executable, "-m", "scripts.build"]
    done = subprocess.run(command, cwd=ROOT, check=False)
    if done.returncode != 0:
        raise PluginError(
            f"generation failed: python -m scripts.build exited with "
            f"{done.returncode} (output above)"
        )
