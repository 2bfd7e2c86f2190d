"""What there is to build: the project's folders and its tasks.

Every ``scripts/*.py`` with a top-level ``def compute`` is a topic,
except the modules of the build itself (NOT_TOPICS) and names starting
with "_"; every ``scripts/notebooks/*.py`` is a notebook. Discovery
reads the source (``ast``) without importing it, so a cached build
imports no topic.
"""

import ast
import glob
import os
from dataclasses import dataclass, field
from pathlib import Path

from scripts import common, figures, notebook_runner
from scripts.cache import PACKAGES

ROOT = Path(__file__).resolve().parent.parent
# Modules of scripts/ that are not topics, even with a `compute`.
NOT_TOPICS = {"__init__", "build", "cache", "common", "figures", "macros",
              "mkdocs_hook", "notebook_runner", "site_server", "tasks"}


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
    # every topic's key: the helpers it writes and draws through
    shared = [Path(m.__file__).resolve() for m in (common, figures)]
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
    runner = Path(notebook_runner.__file__).resolve()
    for path in sorted((project.scripts / "notebooks").glob("*.py")):
        inputs = [path, runner, *shared,
                  *_resolve(project, ["mha_ref/*.py"])]
        packages = PACKAGES + notebook_runner.NOTEBOOK_PACKAGES
        tasks.append(Task(f"notebooks/{path.stem}", path, inputs,
                          packages, kind="notebook"))
    return tasks
