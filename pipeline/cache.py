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


def task_key(project, task):
    """sha256 of everything the task's outputs depend on."""
    digest = hashlib.sha256()
    parts = {
        "version": KEY_VERSION,
        "task": task.name,
        "environment": environment(task.packages),
        "inputs": [[relative(project, f), sha256(f)] for f in task.inputs],
    }
    if getattr(task, "recipe", None):  # a notebook: what its page shows
        parts["recipe"] = task.recipe
    digest.update(json.dumps(parts, sort_keys=True).encode())
    return digest.hexdigest()


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


def _write(project, name, key, outputs, seconds=None):
    record = {"key": key, "out": str(project.out), "outputs": outputs}
    if seconds is not None:  # how long it ran: the longest start first
        record["seconds"] = round(seconds, 1)
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
    for relative_path, digest in record["outputs"].items():
        path = project.out / relative_path
        if not path.is_file() or sha256(path) != digest:
            return False
    return True


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


def store(project, name, key, written, seconds):
    """After a page's outputs are written: the key, LAST. Outputs it no
    longer writes are removed."""
    old = set(outputs(project, name))
    digests = {
        r: sha256(project.out / r)
        for r in written
        if (project.out / r).is_file()
    }
    remove_outputs(project, old - set(written))
    _write(project, name, key, digests, seconds)


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
