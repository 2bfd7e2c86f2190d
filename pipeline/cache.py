"""The generation cache: page keys and records. The only file that knows
a record's fields.

A page's key is the sha256 of its input files (its script, the files its
notebook carries, the runner files; generation.py finds them), its
recipe (the sections it shows), the package versions, the Python
version, the platform and a device fingerprint (CUDA_VISIBLE_DEVICES and
the GPUs the NVIDIA driver lists; torch is not imported for it). The key
and the sha256 of each output go to ``.cache/generated/<page>.json``,
written LAST, with the seconds the page took; before a page's outputs
are written its key is cleared, so an interrupted run leaves no valid
key. A key whose outputs are missing or edited reruns the page. Files a
page no longer writes, and the outputs of deleted pages, are removed.
"""

import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import sys
from pathlib import Path

from pipeline import code_units
from pipeline.files import atomic_write

KEY_VERSION = "mha-ref generated v2"  # bump when outputs change meaning
# Versions in every key: what a page computes with, and what runs it.
PACKAGES = (
    "numpy",
    "torch",
    "matplotlib",
    "jupytext",
    "nbclient",
    "nbformat",
    "ipykernel",
)


# ------------------------------------------------------------- the key


@functools.cache  # once per process, not once per task (slow: ~1 ms)
def _version(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def device_fingerprint():
    """What decides the device, without importing torch (slow)."""
    parts = [
        "CUDA_VISIBLE_DEVICES="
        + os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
    ]
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


def read_inputs(project, task):
    """{relative path: bytes} of the task's input files, read once: its
    key and its run key are computed from the same bytes."""
    return {relative(project, f): Path(f).read_bytes() for f in task.inputs}


def _key(project, task, inputs):
    digest = hashlib.sha256()
    parts = {
        "version": KEY_VERSION,
        "task": task.name,
        "environment": environment(task.packages),
        "inputs": inputs,
    }
    if getattr(task, "recipe", None):  # a notebook: what its page shows
        parts["recipe"] = task.recipe
    digest.update(json.dumps(parts, sort_keys=True).encode())
    return digest.hexdigest()


def task_key(project, task, texts=None):
    """sha256 of everything the task's outputs depend on."""
    texts = read_inputs(project, task) if texts is None else texts
    return _key(
        project,
        task,
        [
            [path, hashlib.sha256(data).hexdigest()]
            for path, data in texts.items()
        ],
    )


def ran_units(ran):
    """{file: [unit]} of what the kernel reported ({file: [qualname]})."""
    return {
        path: sorted({code_units.unit_of(q) for q in names} - {None})
        for path, names in sorted(ran.items())
    }


def run_key(project, task, texts, units):
    """sha256 of what a run that called ``units`` ({file: [unit]}) read:
    as task_key, but of each carried mha_ref module only its skeleton
    and the functions the run called (code_units.py)."""
    inputs = []
    for path, data in texts.items():
        python = path.startswith("mha_ref/") and path.endswith(".py")
        if python:
            text = data.decode("utf-8", errors="surrogateescape")
            shown = code_units.fingerprint(text, units.get(path, ()))
        else:
            shown = hashlib.sha256(data).hexdigest()
        inputs.append([path, shown])
    return _key(project, task, inputs)


def relative(project, path):
    """``path`` relative to the project root where it is inside it."""
    try:
        return str(Path(path).relative_to(project.root))
    except ValueError:
        return str(path)


# ------------------------------------------------------------- records


def _path(project, name):
    return project.cache / f"{name}.json"


def _read(project, name):
    try:
        return json.loads(_path(project, name).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _write(project, name, key, outputs, seconds=None, run=None):
    record = {"key": key, "out": str(project.out), "outputs": outputs}
    if seconds is not None:  # how long it ran: the longest start first
        record["seconds"] = round(seconds, 1)
    if run is not None:  # (run key, units it called): see run_key
        record["run_key"], record["ran"] = run
    atomic_write(
        _path(project, name),
        json.dumps(record, sort_keys=True, indent=1) + "\n",
    )


def _here(project, record):
    """The record, if it describes outputs in this project's out folder."""
    return record if record and record.get("out") == str(project.out) else {}


def is_fresh(project, name, key):
    """True when the page's record has this key and every output is
    intact."""
    record = _here(project, _read(project, name))
    if not record or record.get("key") != key:
        return False
    return _intact(project, record)


def _intact(project, record):
    for relative_path, digest in record["outputs"].items():
        path = project.out / relative_path
        if not path.is_file() or sha256(path) != digest:
            return False
    return True


def last_run(project, name):
    """(run key, {file: [unit]}) of the page's last run, if its outputs
    are intact and it was traced; else None."""
    record = _here(project, _read(project, name))
    if not record or "run_key" not in record or not _intact(project, record):
        return None
    return record["run_key"], record["ran"]


def outputs(project, name):
    """The files (relative to the out folder) the page last wrote."""
    return sorted(_here(project, _read(project, name)).get("outputs", {}))


def last_seconds(project, name):
    """How long the page took when it last ran here (None: never)."""
    return (_read(project, name) or {}).get("seconds")


def begin(project, name):
    """Before a page's outputs change: its key is cleared (an
    interrupted run leaves no valid key); its old outputs stay listed."""
    old = _here(project, _read(project, name)).get("outputs", {})
    _write(project, name, None, old, last_seconds(project, name))


def store(project, name, key, written, seconds, run=None):
    """After a page's outputs are written: the key, LAST. Outputs it no
    longer writes are removed. ``run``: (run key, units it called)."""
    old = set(outputs(project, name))
    digests = {
        r: sha256(project.out / r)
        for r in written
        if (project.out / r).is_file()
    }
    remove_outputs(project, old - set(written))
    _write(project, name, key, digests, seconds, run)


def failed(project, name, seconds):
    """A page that failed keeps its last outputs, without a valid key,
    and the time it took (so it starts early next time)."""
    old = _here(project, _read(project, name)).get("outputs", {})
    _write(project, name, None, old, seconds)


def remove_outputs(project, relatives):
    for relative_path in relatives:
        (project.out / relative_path).unlink(missing_ok=True)


def remove_orphans(project, names, say):
    """Outputs and records of pages that no longer exist."""
    if not project.cache.is_dir():
        return
    for path in sorted(project.cache.rglob("*.json")):
        name = path.relative_to(project.cache).with_suffix("").as_posix()
        if name in names:
            continue
        remove_outputs(project, outputs(project, name))
        path.unlink()
        say(f"  removed outputs of {name} (no such page)")
