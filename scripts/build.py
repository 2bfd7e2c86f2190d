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
What is a task: tasks.py; what reruns: cache.py; notebooks:
notebook_runner.py.

Adding a topic: the topic module interface
-------------------------------------------
Create ``scripts/<topic>.py``; no edit here is needed. Every
``scripts/*.py`` with a top-level ``def compute`` is a topic, except
the modules of the build itself (``tasks.NOT_TOPICS``) and names
starting with "_". Discovery reads the source without importing it.

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
    ``data["figures"][name]`` (themes: scripts/figures.py). Helpers:
    ``scripts.common.markdown_table``, ``fmt`` and ``fmt_list``. Names
    must not clash with another topic's.
``DEPENDS = ["mha_ref/tiled.py", ...]`` (optional)
    A literal list of paths or globs relative to the repository root that
    the outputs depend on; default: every ``mha_ref/*.py``.

For live reload, run this as a subprocess rather than calling ``main``
in a long-lived process: topics are reloaded on each run, but the
``mha_ref`` modules they import would not be.
"""

import argparse
import importlib.util
import sys
import time
import traceback
from pathlib import Path

from scripts import cache, common
from scripts.notebook_runner import run_notebook
from scripts.tasks import ROOT, Project, Task, discover

__all__ = ["ROOT", "Project", "Task", "build", "discover", "main"]


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
    # ``written`` is the caller's: a failure still knows what was written
    out = common.Output(project.out, data, written)
    render = getattr(module, "render", None)
    if render is not None:
        render(data, out)
    out.data_file(task.name)


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
        cache.remove_orphans(project, {t.name for t in tasks}, say)
    width = max([14, *(len(t.name) for t in tasks)])
    owner, failed, ran = {}, [], 0
    start = time.perf_counter()
    for task in tasks:
        record = cache.read_record(project, task.name) or {}
        old = dict(record.get("outputs", {})) \
            if record.get("out") == str(project.out) else {}
        try:
            if task.error:
                raise RuntimeError(task.error)
            key = cache.task_key(project, task)
            if not force and cache.is_fresh(project, record, key):
                _claim(owner, task.name, record["outputs"])
                say(f"  {'cached':<6} {task.name}")
                continue
            began = time.perf_counter()
            # no valid key until the task is done
            cache.write_record(project, task.name, None, old)
            written = []
            try:
                if task.kind == "notebook":
                    run_notebook(project, task, written)
                else:
                    run_topic(project, task, written)
                _claim(owner, task.name, written)
            except BaseException:
                cache.write_record(project, task.name, None,
                                   {**old, **dict.fromkeys(written, "")})
                raise
            cache.remove_outputs(project,
                                 set(old) - set(written) - set(owner))
            outputs = {r: cache.sha256(project.out / r) for r in written}
            cache.write_record(project, task.name, key, outputs)  # last
            ran += 1
            elapsed = time.perf_counter() - began
            say(f"  {'ran':<6} {task.name:<{width}} {elapsed:5.2f} s")
        except Exception:
            say(traceback.format_exc().rstrip())
            source = cache.relative(project, task.source)
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
