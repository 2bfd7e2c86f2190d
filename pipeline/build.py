"""Run the tasks that are not cached; report the ones that fail.

A task is a topic (``topics/__init__.py`` lists them) or a notebook
(``topics/notebooks/*.py``). Topic files are read with ``ast`` for their
DEPENDS, so a fully cached build imports none of them. Outputs are
written only when their bytes change, so ``mkdocs serve`` (which watches
docs/) does not rebuild forever. A failing topic fails the run: stale
numbers are never published silently.
"""

import ast
import glob
import importlib.util
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import cache, compose, figures, output
from pipeline.notebooks import NOTEBOOK_PACKAGES, run_notebook

ROOT = Path(__file__).resolve().parent.parent


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
    name: str
    source: Path  # reported when the task fails
    inputs: list = field(default_factory=list)  # files hashed into the key
    packages: tuple = cache.PACKAGES
    kind: str = "topic"  # or "notebook"
    error: str | None = None  # a discovery error: the task fails
    recipe: dict | None = None  # a notebook's recipe (compose.py): keyed


def _literal(path, name, default):
    """The literal value assigned to ``name`` at the top of ``path``."""
    for node in ast.parse(path.read_bytes()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return ast.literal_eval(node.value)
    return default


def _resolve(project, patterns):
    if not isinstance(patterns, list | tuple) or not all(
        isinstance(p, str) for p in patterns
    ):
        raise TypeError(f"DEPENDS must be a list of paths, not {patterns!r}")
    files = set()
    for pattern in patterns:
        matches = glob.glob(pattern, root_dir=project.root, recursive=True)
        if not matches:
            raise ValueError(f"DEPENDS entry {pattern!r} matches no file")
        files.update(project.root / m for m in matches)
    return sorted(f for f in files if f.is_file())


def discover(project):
    """The topic and notebook tasks of ``project``, in a stable order."""
    topics = project.root / "topics"
    names = _literal(topics / "__init__.py", "TOPICS", [])
    shared = [Path(m.__file__).resolve() for m in (output, figures)]
    tasks = []
    for name in names:
        task = Task(name, topics / f"{name}.py")
        try:
            depends = _literal(task.source, "DEPENDS", ["mha_ref/*.py"])
            task.inputs = [
                task.source,
                *shared,
                *_resolve(project, depends),
            ]
        except (OSError, SyntaxError, ValueError, TypeError) as exc:
            task.error = f"{type(exc).__name__}: {exc}"
        tasks.append(task)
    runners = [
        project.root / "pipeline/notebooks.py",
        project.root / "pipeline/notebook_page.py",
        project.root / "pipeline/compose.py",
    ]
    # one notebook per page that shows mha_ref code, plus its script in
    # topics/notebooks/<page>.py if any (pipeline/compose.py)
    for name, recipe in compose.page_notebooks(project.root).items():
        script = recipe["script"] and project.root / recipe["script"]
        source = project.root / (recipe["page"] or recipe["script"])
        inputs = [*runners, *_resolve(project, ["mha_ref/*.py"])]
        packages = cache.PACKAGES + NOTEBOOK_PACKAGES
        task = Task(f"notebooks/{name}", source, inputs, packages, "notebook")
        task.inputs += [script] if script else []
        task.recipe = recipe
        tasks.append(task)
    return tasks


def run_topic(task, project, written):
    """Import the topic's file afresh, compute, render, write its data."""
    spec = importlib.util.spec_from_file_location(
        f"topics.{task.name}", task.source
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    data = module.compute()
    if not isinstance(data, dict):
        raise TypeError(f"{task.name}.compute() must return a dict")
    data = output.plain(data)  # render sees what the pages will see
    out = output.Output(project.out, data, written)
    if hasattr(module, "render"):
        module.render(data, out)
    out.data_file(task.name)


def build(project=None, force=False, only=None, say=print):
    """Run every task that is not cached; return the names that failed."""
    project = project or Project()
    tasks = discover(project)
    if only:
        unknown = sorted(set(only) - {t.name for t in tasks})
        if unknown:
            known = ", ".join(t.name for t in tasks)
            say(f"unknown topic(s) {unknown}; known: {known}")
            return unknown
        tasks = [t for t in tasks if t.name in only]
    else:
        cache.remove_orphans(project, {t.name for t in tasks}, say)
    width = max(14, *(len(t.name) for t in tasks))
    owner, failed, ran = {}, [], 0
    start = time.perf_counter()
    for task in tasks:
        try:
            if task.error:
                raise RuntimeError(task.error)
            key = cache.task_key(project, task)
            record = cache.read_record(project, task.name)
            if not force and cache.is_fresh(project, record, key):
                _claim(owner, task.name, record["outputs"])
                say(f"  cached {task.name}")
                continue
            began = time.perf_counter()
            same_out = record and record.get("out") == str(project.out)
            old = record.get("outputs", {}) if same_out else {}
            cache.write_record(project, task.name, None, old)  # no key yet
            written = []
            try:
                runner = run_notebook if task.kind == "notebook" else run_topic
                runner(task, project, written)
                _claim(owner, task.name, written)
            finally:  # on failure too: the record lists what was written
                outputs = {
                    r: cache.sha256(project.out / r)
                    for r in written
                    if (project.out / r).is_file()
                }
                cache.write_record(project, task.name, None, outputs)
            cache.remove_outputs(project, set(old) - set(written) - set(owner))
            cache.write_record(project, task.name, key, outputs)  # last
            ran += 1
            took = time.perf_counter() - began
            say(f"  ran    {task.name:<{width}} {took:5.2f} s")
        except Exception:
            say(traceback.format_exc().rstrip())
            source = cache.relative(project, task.source)
            say(f"  FAILED {task.name:<{width}} ({source})")
            failed.append(task.name)
    total = time.perf_counter() - start
    cached = len(tasks) - ran - len(failed)
    say(
        f"  total  {'':<{width}} {total:5.2f} s "
        f"({ran} ran, {cached} cached, {len(failed)} failed)"
    )
    return failed


def _claim(owner, name, relatives):
    for relative in relatives:
        other = owner.setdefault(relative, name)
        if other != name:
            raise ValueError(f"{relative} is written by {other} and {name}")
