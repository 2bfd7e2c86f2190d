"""Run the pages whose inputs changed, side by side; report failures.

One task per page notebook (compose.py finds them: a page with
``mha_ref`` code or a page script). A task's inputs are found, never
declared: its page script, the files its notebook carries (the
``mha_ref`` modules it imports, followed import by import, and
glue.py), the runner files below and the package versions. Tasks run
in a pool of threads, one kernel each, two per core (JOBS_PER_CORE),
longest first (by the time each took last). Outputs are written only
when their bytes change, so ``mkdocs serve`` (which watches docs/) does
not rebuild forever. A failing page fails the run: stale numbers are
never published silently.
"""

import os
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import cache, compose, zygote

ROOT = Path(__file__).resolve().parent.parent
# A page's kernel waits part of its life (its start, its messages), so
# two pages per core keep both cores busy: after an edit of numpy_ref.py
# on 2 cores, 11 pages took 9.1 s with 2 at once, 7.7 s with 4; a cold
# build, where the trained-heads page shares its core, 46 s -> 49 s.
JOBS_PER_CORE = 2
# The code that turns a page script into its outputs: in every key.
RUNNERS = (
    "pipeline/notebooks.py",
    "pipeline/notebook_page.py",
    "pipeline/compose.py",
    "pipeline/collect.py",
    "pipeline/output.py",
    "pipeline/zygote.py",
)
PACKAGES = (*cache.PACKAGES, "jupytext", "nbclient", "nbformat", "ipykernel")


@dataclass
class Project:
    """Where sources are read and outputs and cache records written."""

    root: Path = ROOT
    out: Path | None = None  # default <root>/docs/generated
    cache: Path | None = None  # default <root>/.cache/generated

    def __post_init__(self):
        self.root = Path(self.root).resolve()
        self.out = Path(self.out or self.root / "docs/generated").resolve()
        default_cache = self.root / ".cache/generated"
        self.cache = Path(self.cache or default_cache).resolve()


@dataclass
class Task:
    name: str  # the page: docs/<name>.md
    source: Path  # its script, or its page: named when it fails
    recipe: dict
    inputs: list = field(default_factory=list)  # files hashed into the key
    packages: tuple = PACKAGES


def discover(project):
    """The page tasks of ``project``, in a stable order."""
    tasks = []
    for name, recipe in compose.page_notebooks(project.root).items():
        source = project.root / (recipe["script"] or recipe["page"])
        files = [project.root / f for f in recipe["files"]]
        if recipe["script"]:
            files.insert(0, project.root / recipe["script"])
        runners = [project.root / r for r in RUNNERS]
        tasks.append(Task(name, source, recipe, runners + files))
    return tasks


def stale(project, tasks=None):
    """The names of the tasks whose key or outputs changed."""
    tasks = discover(project) if tasks is None else tasks
    return [
        t.name
        for t in tasks
        if not cache.is_fresh(
            project,
            cache.read_record(project, t.name),
            cache.task_key(project, t),
        )
    ]


def run_task(task, project, argv=None):
    """Execute one page's notebook; record its key last. Returns seconds."""
    from pipeline.notebooks import run_notebook

    key = cache.task_key(project, task)
    record = cache.read_record(project, task.name)
    same_out = record and record.get("out") == str(project.out)
    old = record.get("outputs", {}) if same_out else {}
    cache.write_record(project, task.name, None, old)  # no key yet
    began = time.perf_counter()
    written = []
    try:
        run_notebook(task, project, written, argv)
    finally:  # on failure too: the record lists what was written
        outputs = {
            r: cache.sha256(project.out / r)
            for r in written
            if (project.out / r).is_file()
        }
        cache.write_record(project, task.name, None, outputs)
    took = time.perf_counter() - began
    cache.remove_outputs(project, set(old) - set(written))
    cache.write_record(project, task.name, key, outputs, took)  # last
    return took


def build(project=None, force=False, only=None, jobs=None, say=print):
    """Run every page that is not cached; return the names that failed."""
    project = project or Project()
    tasks = discover(project)
    orphans = compose.orphan_scripts(project.root)
    for name in orphans:
        say(
            f"  FAILED {compose.SCRIPTS}/{name}.py: no page docs/{name}.md "
            "(a page script is named after its page)"
        )
    if only:
        unknown = sorted(set(only) - {t.name for t in tasks})
        if unknown:
            known = ", ".join(t.name for t in tasks)
            say(f"unknown page(s) {unknown}; pages with notebooks: {known}")
            return unknown
        tasks = [t for t in tasks if t.name in only]
    else:
        cache.remove_orphans(project, {t.name for t in tasks}, say)
    old = set(stale(project, tasks))
    todo = [t for t in tasks if force or t.name in old]
    for task in tasks:
        if task not in todo:
            say(f"  cached {task.name}")
    # longest first, so the slowest page starts at once, beside the rest
    todo.sort(key=lambda t: -cache.last_seconds(project, t.name))
    width = max(14, *(len(t.name) for t in tasks))
    failed, start = list(orphans), time.perf_counter()
    jobs = jobs or JOBS_PER_CORE * len(os.sched_getaffinity(0))
    with ExitStack() as stack:
        argv = None
        if todo:  # kernels forked from one process that imported torch
            argv = stack.enter_context(zygote.started()).kernel_argv()
        pool = stack.enter_context(ThreadPoolExecutor(max_workers=jobs))
        futures = [(t, pool.submit(run_task, t, project, argv)) for t in todo]
        for task, future in futures:
            try:
                took = future.result()
                say(f"  ran    {task.name:<{width}} {took:5.2f} s")
            except Exception as exc:
                say(_explain(exc))
                source = cache.relative(project, task.source)
                say(f"  FAILED {task.name:<{width}} ({source})")
                failed.append(task.name)
    if not failed:
        try:
            _check_owners(tasks, project)
        except ValueError as exc:
            say(f"  FAILED {exc}")
            failed.append("outputs")
    total = time.perf_counter() - start
    ran = len(todo) - len(set(failed) - set(orphans))
    cached = len(tasks) - len(todo)
    say(
        f"  total  {'':<{width}} {total:5.2f} s "
        f"({ran} ran, {cached} cached, {len(failed)} failed)"
    )
    return failed


def _explain(exc):
    """A failed cell as nbclient tells it (its source and the error);
    anything else with its traceback."""
    if type(exc).__name__ == "CellExecutionError":
        return str(exc).rstrip()
    return "".join(traceback.format_exception(exc)).rstrip()


def _check_owners(tasks, project):
    """No two pages write the same output (a figure name, say)."""
    owner = {}
    for task in tasks:
        record = cache.read_record(project, task.name) or {}
        for relative in record.get("outputs", {}):
            other = owner.setdefault(relative, task.name)
            if other != task.name:
                raise ValueError(
                    f"{relative} is written by {other} and {task.name}"
                )
