"""Compute every number, table and figure of the site, with a cache.

Usage::

    python -m scripts.build              # run what changed
    python -m scripts.build --force      # ignore the cache
    python -m scripts.build --only parity

Writes under ``docs/generated/`` (or ``--out`` / $MHA_GENERATED_DIR):
``data/<topic>.json``, ``tables/<name>.md``,
``figures/<name>-light.svg`` and ``-dark.svg``, ``notebooks/<name>.ipynb``.
Files are replaced atomically and only when their bytes change, so
``mkdocs serve`` (which watches docs/) does not rebuild forever. Exit
status 1 when any topic fails: stale numbers are never published silently.

Adding a topic: the topic module interface
-------------------------------------------
Create ``scripts/<topic>.py``; no edit here is needed. Every
``scripts/*.py`` with a top-level ``def compute`` is a topic, except
build, common, macros, mkdocs_hook, bench and names starting with "_".
Discovery reads the source (``ast``) without importing it.

``compute() -> dict``
    Plain data only (numbers, strings, bools, lists, dicts; NumPy arrays
    and tensors are converted, NaN becomes "nan"); no prose. Written to
    ``data/<topic>.json``, which pages read as the variable ``<topic>``.
    Fix every seed. Import torch/numpy inside the function, not at the
    top, so a cached build stays fast.
``render(data, out)`` (optional)
    ``out.table(name, markdown)`` writes ``tables/<name>.md``;
    ``out.figure(name, draw, alt, figsize=(7, 3.2))`` calls
    ``draw(fig, theme)`` on a fresh matplotlib Figure once per colour
    scheme (``theme.name`` is "light" or "dark"; ``theme.text``,
    ``theme.series``, ``theme.masked``, ``theme.cmap``...), writes
    ``figures/<name>-<scheme>.svg`` and stores ``alt`` in
    ``data["figures"][name]``. Helpers: ``scripts.common.markdown_table``
    and ``fmt``. Names must not clash with another topic's.
``DEPENDS = ["mha_ref/tiled.py", ...]`` (optional)
    A literal list of paths or globs relative to the repository root that
    the outputs depend on; default: every ``mha_ref/*.py``.

The cache
---------
A topic's key is the sha256 of its own source, scripts/common.py, its
DEPENDS files, the numpy/torch/matplotlib versions, the Python version,
the platform and a device fingerprint (CUDA_VISIBLE_DEVICES and the GPUs
the NVIDIA driver lists; torch is not imported for it). The key and the
sha256 of each output go to ``.cache/generated/<topic>.json``
($MHA_CACHE_DIR), written LAST; before a topic runs its key is cleared,
so an interrupted run leaves no valid key. A key whose outputs are
missing or edited reruns the topic. Files a topic no longer writes, and
the outputs of deleted topics, are removed.

Notebooks: every ``scripts/notebooks/<name>.py`` (jupytext percent
format) is executed with nbclient (kernel python3) into
``notebooks/<name>.ipynb``, cached the same way on its source, this file
and mha_ref; a failing cell fails the build. Volatile metadata (timings,
kernel versions, random cell ids) is stripped so the bytes reproduce.

For live reload, run this as a subprocess rather than calling ``main``
in a long-lived process: topics are reloaded on each run, but the
``mha_ref`` modules they import would not be.
"""

import argparse
import ast
import glob
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from scripts import common

ROOT = Path(__file__).resolve().parent.parent
KEY_VERSION = "mha-ref generated v1"  # bump when outputs change meaning
NOT_TOPICS = {"__init__", "build", "common", "macros", "mkdocs_hook",
              "bench"}
PACKAGES = ("numpy", "torch", "matplotlib")
NOTEBOOK_PACKAGES = ("jupytext", "nbclient", "nbformat", "ipykernel")
NOTEBOOK_TIMEOUT_S = 300  # per cell


@dataclass
class Project:
    """Where sources are read from and outputs and keys are written to."""

    root: Path = ROOT
    package: str = "scripts"  # the folder (and package) of the topics
    out: Path | None = None
    cache: Path | None = None

    def __post_init__(self):
        self.root = Path(self.root).resolve()
        env_out = os.environ.get("MHA_GENERATED_DIR")
        env_cache = os.environ.get("MHA_CACHE_DIR")
        self.out = Path(self.out or env_out or self.root / "docs/generated")
        self.cache = Path(
            self.cache or env_cache or self.root / ".cache/generated"
        )
        self.out, self.cache = self.out.resolve(), self.cache.resolve()

    @property
    def scripts(self):
        return self.root / self.package


@dataclass
class Task:
    name: str
    source: Path  # reported when the task fails
    inputs: list = field(default_factory=list)  # files hashed into the key
    packages: tuple = PACKAGES
    kind: str = "topic"  # or "notebook"
    error: str | None = None  # a discovery error: the task fails


# ------------------------------------------------------------- discovery


def _module_names(tree):
    """Top-level function names and the literal DEPENDS, if any."""
    names, depends = set(), None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            names.update(targets)
            if "DEPENDS" in targets:
                depends = ast.literal_eval(node.value)
    return names, depends


def _resolve(project, patterns):
    files = set()
    for pattern in patterns:
        matches = glob.glob(pattern, root_dir=project.root, recursive=True)
        if not matches:
            raise ValueError(f"DEPENDS entry {pattern!r} matches no file")
        files.update(project.root / m for m in matches)
    return sorted(f for f in files if f.is_file())


def discover(project):
    """The topic and notebook tasks of ``project``, in a stable order."""
    tasks = []
    shared = [Path(common.__file__).resolve()]
    for path in sorted(project.scripts.glob("*.py")):
        if path.stem in NOT_TOPICS or path.stem.startswith("_"):
            continue
        task = Task(path.stem, path)
        try:
            names, depends = _module_names(ast.parse(path.read_bytes()))
            if "compute" not in names:
                continue
            if depends is None:
                depends = ["mha_ref/*.py"]
            if not isinstance(depends, list | tuple) or not all(
                isinstance(d, str) for d in depends
            ):
                raise TypeError(
                    f"DEPENDS must be a list of strings, got {depends!r}"
                )
            task.inputs = [path, *shared, *_resolve(project, depends)]
        except (SyntaxError, ValueError, TypeError) as exc:
            task.error = f"{type(exc).__name__}: {exc}"
        tasks.append(task)
    for path in sorted((project.scripts / "notebooks").glob("*.py")):
        inputs = [path, Path(__file__).resolve(), *shared,
                  *_resolve(project, ["mha_ref/*.py"])]
        tasks.append(Task(f"notebooks/{path.stem}", path, inputs,
                          PACKAGES + NOTEBOOK_PACKAGES, kind="notebook"))
    return tasks


# ------------------------------------------------------------- the key


def _version(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def device_fingerprint():
    """What decides the device, without importing torch (slow)."""
    parts = ["CUDA_VISIBLE_DEVICES=" + os.environ.get(
        "CUDA_VISIBLE_DEVICES", "<unset>")]
    gpus = Path("/proc/driver/nvidia/gpus")
    for info in sorted(gpus.glob("*/information")):
        for line in info.read_text(errors="replace").splitlines():
            if line.startswith("Model:"):
                parts.append(line.split(":", 1)[1].strip())
    return ";".join(parts)


def environment(packages):
    return {
        "packages": {p: _version(p) for p in packages},
        "python": sys.version,
        "platform": f"{platform.system()} {platform.machine()}",
        "device": device_fingerprint(),
    }


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def task_key(project, task):
    """sha256 of everything the task's outputs depend on."""
    digest = hashlib.sha256()
    parts = {
        "version": KEY_VERSION,
        "task": task.name,
        "environment": environment(task.packages),
        "inputs": [
            [_relative(project, f), sha256(f)] for f in task.inputs
        ],
    }
    digest.update(json.dumps(parts, sort_keys=True).encode())
    return digest.hexdigest()


def _relative(project, path):
    try:
        return str(Path(path).relative_to(project.root))
    except ValueError:
        return str(path)


# ------------------------------------------------------------- records


def _record_path(project, name):
    return project.cache / f"{name}.json"


def read_record(project, name):
    try:
        return json.loads(_record_path(project, name).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def write_record(project, name, key, outputs):
    record = {"key": key, "out": str(project.out), "outputs": outputs}
    common.atomic_write(_record_path(project, name),
                        json.dumps(record, sort_keys=True, indent=1) + "\n")


def is_fresh(project, record, key):
    """True when the record has this key and every output is intact."""
    if not record or record.get("key") != key:
        return False
    if record.get("out") != str(project.out):
        return False
    for relative, digest in record["outputs"].items():
        path = project.out / relative
        if not path.is_file() or sha256(path) != digest:
            return False
    return True


# ------------------------------------------------------------- running


def load_module(project, task):
    """Import the topic's file afresh (so edits take effect)."""
    name = f"{project.package}.{task.name}"
    spec = importlib.util.spec_from_file_location(name, task.source)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def run_topic(project, task, written):
    module = load_module(project, task)
    data = module.compute()
    if not isinstance(data, dict):
        raise TypeError(
            f"{task.name}.compute() must return a dict, got "
            f"{type(data).__name__}"
        )
    data = common.plain(data)  # render sees what the pages will see
    out = common.Output(project.out, data)
    out.written = written  # shared: a failure still knows what was written
    render = getattr(module, "render", None)
    if render is not None:
        render(data, out)
    out.data_file(task.name)


def run_notebook(project, task, written):
    """Execute a jupytext percent script into a reproducible .ipynb."""
    import jupytext
    import nbformat
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    nb = jupytext.read(task.source, fmt="py:percent")
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3", "language": "python",
                       "name": "python3"},
    }
    for index, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{index:02d}"  # not random: reproducible bytes
        cell.metadata.pop("lines_to_next_cell", None)
    os.environ.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    # ipc: local socket files in a temporary folder, no TCP port
    with tempfile.TemporaryDirectory(prefix="mha-kernel-") as runtime:
        kernel = KernelManager(
            kernel_name="python3", transport="ipc",
            connection_file=os.path.join(runtime, "kernel.json"),
        )
        client = NotebookClient(
            nb, km=kernel, timeout=NOTEBOOK_TIMEOUT_S,
            kernel_name="python3", record_timing=False,
            resources={"metadata": {"path": str(project.root)}},
        )
        try:
            client.execute()  # CellExecutionError: the cell, traceback
        finally:
            if kernel.has_kernel:  # we own it: nbclient won't stop it
                kernel.shutdown_kernel(now=True)
    language = nb.metadata.get("language_info", {})
    nb.metadata["language_info"] = {
        k: v for k, v in language.items() if k != "version"
    }
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
    nbformat.validate(nb)
    relative = f"notebooks/{Path(task.name).name}.ipynb"
    written.append(relative)
    common.atomic_write(project.out / relative, nbformat.writes(nb) + "\n")


def remove_outputs(project, relatives):
    for relative in relatives:
        (project.out / relative).unlink(missing_ok=True)


def remove_orphans(project, names, say):
    """Outputs and records of tasks that no longer exist."""
    if not project.cache.is_dir():
        return
    for path in sorted(project.cache.rglob("*.json")):
        name = path.relative_to(project.cache).with_suffix("").as_posix()
        if name in names:
            continue
        record = read_record(project, name) or {}
        if record.get("out") == str(project.out):
            remove_outputs(project, record.get("outputs", {}))
        path.unlink()
        say(f"  removed outputs of {name} (no such topic)")


def build(project=None, force=False, only=None, say=print):
    """Run every task that is not cached; return the names that failed."""
    project = project or Project()
    tasks = discover(project)
    if only:
        known = [t.name for t in tasks]
        unknown = sorted(set(only) - set(known))
        if unknown:
            say(f"unknown topic(s) {unknown}; known: {', '.join(known)}")
            return unknown
        tasks = [t for t in tasks if t.name in only]
    else:
        remove_orphans(project, {t.name for t in tasks}, say)
    width = max([14, *(len(t.name) for t in tasks)])
    owner, failed, ran = {}, [], 0
    start = time.perf_counter()
    for task in tasks:
        record = read_record(project, task.name) or {}
        old = dict(record.get("outputs", {})) \
            if record.get("out") == str(project.out) else {}
        try:
            if task.error:
                raise RuntimeError(task.error)
            key = task_key(project, task)
            if not force and is_fresh(project, record, key):
                _claim(owner, task.name, record["outputs"])
                say(f"  {'cached':<6} {task.name}")
                continue
            began = time.perf_counter()
            write_record(project, task.name, None, old)  # invalid until done
            written = []
            try:
                if task.kind == "notebook":
                    run_notebook(project, task, written)
                else:
                    run_topic(project, task, written)
                _claim(owner, task.name, written)
            except BaseException:
                write_record(project, task.name, None,
                             {**old, **dict.fromkeys(written, "")})
                raise
            remove_outputs(project, set(old) - set(written) - set(owner))
            outputs = {r: sha256(project.out / r) for r in written}
            write_record(project, task.name, key, outputs)  # last
            ran += 1
            elapsed = time.perf_counter() - began
            say(f"  {'ran':<6} {task.name:<{width}} {elapsed:5.2f} s")
        except Exception:
            say(traceback.format_exc().rstrip())
            source = _relative(project, task.source)
            say(f"  FAILED {task.name:<{width}} ({source})")
            failed.append(task.name)
    total = time.perf_counter() - start
    cached = len(tasks) - ran - len(failed)
    say(f"  {'total':<6} {'':<{width}} {total:5.2f} s "
        f"({ran} ran, {cached} cached, {len(failed)} failed)")
    return failed


def _claim(owner, name, relatives):
    for relative in relatives:
        other = owner.setdefault(relative, name)
        if other != name:
            raise ValueError(
                f"{relative} is written by both {other} and {name}: "
                "rename one"
            )


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m scripts.build", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--force", action="store_true",
                        help="ignore the cache, rerun every topic")
    parser.add_argument("--only", action="append", metavar="TOPIC",
                        help="run only this topic (repeatable)")
    parser.add_argument("--out", type=Path, help="output root "
                        "(default docs/generated, or $MHA_GENERATED_DIR)")
    parser.add_argument("--cache-dir", type=Path, help="key folder "
                        "(default .cache/generated, or $MHA_CACHE_DIR)")
    args = parser.parse_args(argv)
    project = Project(out=args.out, cache=args.cache_dir)
    failed = build(project, force=args.force, only=args.only)
    if failed:
        print(f"build failed: {', '.join(failed)}; see above",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
