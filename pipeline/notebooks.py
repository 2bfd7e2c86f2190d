"""Execute a jupytext script into a notebook whose bytes reproduce.

Every ``topics/notebooks/<name>.py`` (jupytext percent format) is
executed with nbclient (kernel python3) into
``notebooks/<name>.ipynb``, cached like a topic on its source, this file
and mha_ref (pipeline/build.py); a failing cell fails the build. Volatile
metadata (timings, kernel versions, random cell ids) is stripped so the
bytes reproduce. jupytext and nbclient are imported only when a notebook
runs, so a cached build never loads them.
"""

import os
import tempfile
from pathlib import Path

from pipeline.output import atomic_write

# Their versions go into a notebook's key, with the topics' packages.
NOTEBOOK_PACKAGES = ("jupytext", "nbclient", "nbformat", "ipykernel")
NOTEBOOK_TIMEOUT_S = 300  # per cell


def run_notebook(task, project, written):
    """Execute a jupytext percent script into a reproducible .ipynb."""
    import jupytext
    import nbformat

    nb = jupytext.read(task.source, fmt="py:percent")
    _prepare(nb)
    _execute(nb, cwd=project.root)
    _strip(nb)
    nbformat.validate(nb)
    relative = f"notebooks/{Path(task.name).name}.ipynb"
    written.append(relative)
    atomic_write(project.out / relative, nbformat.writes(nb) + "\n")


def _prepare(nb):
    """A fixed kernelspec and cell ids, no jupytext metadata."""
    nb.metadata = {
        "kernelspec": {
            "display_name": "Python 3",
            "language": "python",
            "name": "python3",
        },
    }
    for index, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{index:02d}"  # not random: reproducible bytes
        cell.metadata.pop("lines_to_next_cell", None)


def _execute(nb, cwd):
    """Run every cell in a fresh python3 kernel started in ``cwd``."""
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    # ipc: local socket files in a temporary folder, no TCP port
    with tempfile.TemporaryDirectory(prefix="mha-kernel-") as runtime:
        kernel = KernelManager(
            kernel_name="python3",
            transport="ipc",
            connection_file=os.path.join(runtime, "kernel.json"),
        )
        client = NotebookClient(
            nb,
            km=kernel,
            timeout=NOTEBOOK_TIMEOUT_S,
            kernel_name="python3",
            record_timing=False,
            resources={"metadata": {"path": str(cwd)}},
        )
        try:
            client.execute()  # CellExecutionError: the cell, traceback
        finally:
            if kernel.has_kernel:  # we own it: nbclient won't stop it
                kernel.shutdown_kernel(now=True)


def _strip(nb):
    """Drop what changes from run to run: versions and timings."""
    language = nb.metadata.get("language_info", {})
    nb.metadata["language_info"] = {
        k: v for k, v in language.items() if k != "version"
    }
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
