"""The generation cache: page keys, records and freshness.

A page's key is the sha256 of its input files (its script, the files its
notebook carries, the runner files; pipeline/build.py finds them), its
recipe (the sections it shows), the package versions, the Python
version, the platform and a device fingerprint (CUDA_VISIBLE_DEVICES and
the GPUs the NVIDIA driver lists; torch is not imported for it). The key
and the sha256 of each output go to ``.cache/generated/<page>.json``,
written LAST; before a page runs its key is cleared, so an interrupted
run leaves no valid key. A key whose outputs are missing or edited
reruns the page. Files a page no longer writes, and the outputs of
deleted pages, are removed.
"""

import collections
import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import sys
from pathlib import Path

from pipeline.output import atomic_write

KEY_VERSION = "mha-ref generated v2"  # bump when outputs change meaning
PACKAGES = ("numpy", "torch", "matplotlib")  # versions in every key
REPORT = "bench/report.json"
TRAINED = "trained-heads"  # timed apart there (bench/build_times.py)


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


def _record_path(project, name):
    return project.cache / f"{name}.json"


def read_record(project, name):
    try:
        return json.loads(_record_path(project, name).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def write_record(project, name, key, outputs, seconds=None):
    record = {"key": key, "out": str(project.out), "outputs": outputs}
    if seconds is not None:  # how long it ran: the longest start first
        record["seconds"] = round(seconds, 1)
    atomic_write(
        _record_path(project, name),
        json.dumps(record, sort_keys=True, indent=1) + "\n",
    )


def last_seconds(project, name):
    """How long the page took when it last ran here; on a fresh clone,
    what the committed benchmark report measured (0 if neither)."""
    seconds = (read_record(project, name) or {}).get("seconds")
    return seconds if seconds is not None else _reported(project.root)[name]


@functools.cache
def _reported(root):
    """{page: seconds} of the last cold generation in bench/report.json
    (`make bench`), so a cold build starts the slowest page first."""
    seconds = collections.defaultdict(float)
    try:
        build = json.loads((root / REPORT).read_text())["build"]
        for page, took in build["cold_pages_s"].items():
            seconds[page] = took["median"]
        seconds[TRAINED] = build["trained_heads"]["ran_s"]
    except (OSError, ValueError, KeyError, TypeError):
        pass  # no report, or an older one: every page counts as 0
    return seconds


def is_fresh(project, record, key):
    """True when the record has this key and every output is intact."""
    if not record or record.get("key") != key:
        return False
    if record.get("out") != str(project.out):
        return False
    for relative_path, digest in record["outputs"].items():
        path = project.out / relative_path
        if not path.is_file() or sha256(path) != digest:
            return False
    return True


def remove_outputs(project, relatives):
    for relative_path in relatives:
        (project.out / relative_path).unlink(missing_ok=True)


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
        say(f"  removed outputs of {name} (no such page)")
