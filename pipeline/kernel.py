"""Execute a composed notebook in a kernel that sees no repository.

The notebook runs with nbclient in an empty folder, by a kernel that
cannot import the repository (standalone_kernel_argv) and uses one
thread, so it runs on what it carries, as a reader's download does. A
failing cell fails its page. Volatile metadata (timings, kernel
versions, random cell ids) is stripped, so the bytes reproduce.
jupyter_client and nbclient are imported only when a notebook runs, so
a cached generation never loads them.
"""

import json
import os
import sys
import tempfile
from pathlib import Path

NOTEBOOK_TIMEOUT_S = 300  # per cell
# One thread per kernel: pages run side by side (two per core), and a
# page's numbers do not depend on how many cores the machine has.
KERNEL_ENV = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def prepare(nb):
    """A fixed kernelspec and cell ids, no jupytext metadata."""
    nb.metadata = {
        "kernelspec": {
            "display_name": "Python 3",
            "language": "python",
            "name": "python3",
        },
    }
    number_cells(nb)
    for cell in nb.cells:
        cell.metadata.pop("lines_to_next_cell", None)


def number_cells(nb):
    for index, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{index:02d}"  # not random: reproducible bytes


# The two cells a traced run adds around the page's: they load
# notebook_trace.py (copied beside the notebook) by path, so nothing is
# put on the kernel's sys.path, and call its start() and report().
TRACE = Path(__file__).with_name("notebook_trace.py")
TRACE_START = (
    "import importlib.util as __mha_util\n"
    "__mha_spec = __mha_util.spec_from_file_location("
    "'notebook_trace', 'notebook_trace.py')\n"
    "__mha_trace = __mha_util.module_from_spec(__mha_spec)\n"
    "__mha_spec.loader.exec_module(__mha_trace)\n"
    "__mha_trace.start({compiled!r})"
)
TRACE_REPORT = "__mha_trace.report()"


def standalone_paths():
    """sys.path for a kernel that sees no repository: this interpreter's
    site-packages (numpy, torch, ipykernel), minus any folder holding an
    mha_ref package."""
    return [
        p
        for p in sys.path
        if p and os.path.isdir(p) and not os.path.isdir(f"{p}/mha_ref")
    ]


def standalone_kernel_argv():
    """A python3 kernel's argv that sees no repository and no PYTHONPATH.

    ``-E`` ignores PYTHONPATH (and every PYTHON* variable), ``-S`` skips
    site, so no .pth file runs: not the editable install's finder, which
    would import this repository's mha_ref from anywhere. The kernel gets
    standalone_paths() back on sys.path; its own folder comes first, as
    in any kernel. (warm_kernels.py forks kernels with the same paths.)
    """
    boot = (
        f"import sys; sys.path[1:1] = {standalone_paths()!r}; "
        "from ipykernel import kernelapp; kernelapp.launch_new_instance()"
    )
    return [sys.executable, "-E", "-S", "-c", boot, "-f", "{connection_file}"]


def execute(nb, cwd, argv=None):
    """Run every cell in a fresh standalone kernel started in ``cwd``
    (by ``argv``, a kernelspec's; default standalone_kernel_argv)."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    # ipc: local socket files in a temporary folder, no TCP port
    with tempfile.TemporaryDirectory(prefix="mha-kernel-") as runtime:
        spec = Path(runtime, "kernels", "mha-standalone")
        spec.mkdir(parents=True)
        (spec / "kernel.json").write_text(
            json.dumps(
                {
                    "argv": argv or standalone_kernel_argv(),
                    "display_name": "Python 3 (no repository)",
                    "language": "python",
                    "env": KERNEL_ENV,
                }
            )
        )
        kernel = KernelManager(
            kernel_name="mha-standalone",
            kernel_spec_manager=KernelSpecManager(
                kernel_dirs=[str(spec.parent)]
            ),
            transport="ipc",
            connection_file=os.path.join(runtime, "kernel.json"),
        )
        client = NotebookClient(
            nb,
            km=kernel,
            timeout=NOTEBOOK_TIMEOUT_S,
            kernel_name="mha-standalone",
            record_timing=False,
            resources={"metadata": {"path": str(cwd)}},
        )
        try:
            client.execute()  # CellExecutionError: the cell, traceback
        finally:
            if kernel.has_kernel:  # we own it: nbclient won't stop it
                kernel.shutdown_kernel(now=True)


def run_alone(nb, argv=None, trace=False, compiled=None):
    """Prepare ``nb`` and execute it in an empty folder of its own.

    ``trace``: also return which functions of the carried mha_ref files
    ran ({file: [qualname]}, notebook_trace.py); the two cells that find
    out are taken out again, run or not, so ``nb`` is the page's alone.
    ``compiled``: the folder where the trace keeps compiled modules.
    """
    import nbformat.v4 as v4

    prepare(nb)
    if trace:
        start = TRACE_START.format(compiled=compiled and str(compiled))
        nb.cells.insert(1, v4.new_code_cell(start))
        nb.cells.append(v4.new_code_cell(TRACE_REPORT))
    try:
        with tempfile.TemporaryDirectory(prefix="mha-notebook-") as folder:
            if trace:
                Path(folder, TRACE.name).write_text(TRACE.read_text())
            execute(nb, cwd=folder, argv=argv)
    finally:
        if trace:
            last = nb.cells.pop()
            nb.cells.pop(1)
            number_cells(nb)
            _uncount_first(nb)
    check_sections(nb)
    strip(nb)
    if trace:
        return _traced(last)
    return None


def _uncount_first(nb):
    """Execution counts as if the trace's first cell had never run."""
    for cell in nb.cells:
        if cell.cell_type != "code" or not cell.get("execution_count"):
            continue
        cell.execution_count -= 1
        for output in cell.get("outputs", []):
            if output.get("execution_count"):
                output["execution_count"] -= 1


def _traced(cell):
    """The report() line of the trace's last cell, as a dict."""
    from pipeline.notebook_trace import MARK

    for output in cell.get("outputs", []):
        for line in output.get("text", "").splitlines():
            if line.startswith(MARK):
                return json.loads(line[len(MARK) :])
    raise ValueError("the traced run printed no report")


def check_sections(nb):
    """A %%section cell prints only when its text differs from its file:
    run unchanged, it must print nothing, or the page and the carried
    file disagree."""
    for cell in nb.cells:
        shown = cell.cell_type == "code" and cell.source.startswith("%%sec")
        if shown and cell.outputs:
            first = cell.source.splitlines()[0]
            raise ValueError(f"{first}: differs from its carried file")


def strip(nb):
    """Drop what changes from run to run: versions, timings, and where
    the kernel happened to split a cell's printed text."""
    language = nb.metadata.get("language_info", {})
    nb.metadata["language_info"] = {
        k: v for k, v in language.items() if k != "version"
    }
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type == "code":
            cell.outputs = _joined_streams(cell.outputs)


def _joined_streams(outputs):
    """Adjacent stdout (or stderr) outputs as one, as a reader sees them."""
    joined = []
    for output in outputs:
        last = joined[-1] if joined else None
        if (
            output.output_type == "stream"
            and last is not None
            and last.output_type == "stream"
            and last.name == output.name
        ):
            last.text += output.text
        else:
            joined.append(output)
    return joined
