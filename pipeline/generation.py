"""Generation: run the pages whose inputs changed, side by side.

One task per page notebook (pages.py finds them: a page with ``mha_ref``
code or a page script). A task's inputs are found, never declared: its
page script, the files its notebook carries, the runner files below and
the package versions (cache.py keys them). Before anything runs, the
mistakes that need no run are named, one line each with file:line: a
page script without a page, an include of a section that does not
exist, a file that does not parse; the pages they touch do not run, the
others do. The kernels' fork server (warm_kernels.py) starts as soon
as a page is known to be stale, so it imports while the pages whose
code changed but not what they ran get their new code (refresh).
Tasks run in a pool of threads, one kernel each, two per
core (JOBS_PER_CORE), the slowest first (by the seconds each took last,
from the cache records; a page never run here first of all). Each page
prints a line as it starts and as it ends; a long one says every few
seconds that it still runs. A page script that raises is named by its
file:line and the exception's last line (``traceback=True``: all of it).

A page's files are written only when their bytes change, so
``mkdocs serve`` (which watches docs/) does not rebuild for nothing;
``together=True`` (the watcher under ``make serve``) writes the pages'
files only once all have run, so the server rebuilds once, with the new
code, its numbers and its notebook download all from the same run; a
page that took longer than LATE_S last time (the one that trains a
model) runs last and is written on its own when done, so the others do
not wait for it. A
failing page keeps its last outputs and fails the run: stale numbers are
never published silently.
"""

import ast
import contextlib
import os
import re
import threading
import time
import traceback as tracebacks
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from pipeline import cache, config, kernel, notebook, page_data, pages
from pipeline.files import atomic_write

# A page's kernel waits part of its life (its start, its messages), so
# two pages per core keep both cores busy.
JOBS_PER_CORE = 2
PROGRESS_S = 5.0  # a page that runs longer says so this often
LATE_S = 15.0  # together, a page slower than this publishes on its own


def runner_files(start="generation"):
    """The files that turn a page script into its outputs, in every key:
    ``pipeline/<start>.py``, each pipeline module it imports at any
    depth (in functions too), and each file they read beside themselves
    (``Path(__file__).with_name("x")``). Found, not listed: the second
    engine's code (zensical.py) is not among them, so editing it reruns
    no page."""
    folder = Path(__file__).parent
    found, todo = set(), [f"{start}.py"]
    while todo:
        name = todo.pop()
        if name in found or not (folder / name).is_file():
            continue
        found.add(name)
        tree = config.parse_python((folder / name).read_text("utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == "pipeline":
                    todo += [f"{a.name}.py" for a in node.names]
                elif node.module.startswith("pipeline."):
                    todo.append(node.module.split(".", 1)[1] + ".py")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "with_name"
                and node.args
                and isinstance(node.args[0], ast.Constant)
            ):
                todo.append(node.args[0].value)
    return tuple(f"pipeline/{name}" for name in sorted(found))


RUNNERS = runner_files()


@dataclass
class Project:
    """Where sources are read and outputs and cache records written."""

    root: Path = config.ROOT
    out: Path | None = None  # default <root>/docs/generated
    cache: Path | None = None  # default <root>/.cache/generated

    def __post_init__(self):
        self.root = Path(self.root).resolve()
        self.out = Path(self.out or self.root / config.GENERATED).resolve()
        default_cache = self.root / config.CACHE / "generated"
        self.cache = Path(self.cache or default_cache).resolve()

    @property
    def figures(self):
        """Rendered figures by what they were drawn from (glue.py)."""
        return self.cache.parent / "figures"

    @property
    def traced(self):
        """Traced mha_ref modules' code by their source
        (notebook_trace.py)."""
        return self.cache.parent / "traced"


@contextlib.contextmanager
def figure_cache(project, force=False):
    """Page kernels started inside find the figure cache (their glue
    reads a figure drawn the same way before instead of laying it out
    again); figures, and traced modules' code (Project.traced), unused
    for FIGURE_CACHE_DAYS go first. ``force``:
    no cache, every figure is drawn."""
    name = config.FIGURE_CACHE_ENV
    before = os.environ.get(name)
    if force:
        os.environ.pop(name, None)
    else:
        cutoff = time.time() - config.FIGURE_CACHE_DAYS * 86400
        for old in [
            *project.figures.glob("*/*.svg"),
            *project.traced.glob("*/*.code"),  # compiled code, the same
        ]:
            if old.stat().st_mtime < cutoff:
                old.unlink(missing_ok=True)
        os.environ[name] = str(project.figures)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


@dataclass
class Task:
    name: str  # the page: docs/<name>.md
    source: Path  # its script, or its page: named when it fails
    recipe: dict
    inputs: list = field(default_factory=list)  # files hashed into the key
    packages: tuple = cache.PACKAGES
    key: str | None = None  # taken as it starts: what it read
    seconds: float = 0.0  # how long it ran
    texts: dict = field(default_factory=dict)  # its inputs, as it read them
    ran: dict = field(default_factory=dict)  # mha_ref functions it called


class PageError(Exception):
    """A page that failed through its own content: one line says it."""


def discover(project):
    """The page tasks of ``project``, in a stable order."""
    tasks = []
    for name, recipe in pages.page_notebooks(project.root).items():
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
        if not cache.is_fresh(project, t.name, cache.task_key(project, t))
    ]


# ------------------------------------------------------------ one page


def run_page(task, project, argv=None, trace=True):
    """Compose, execute and collect one page: {relative path: text}.
    Which mha_ref functions the run called goes to ``task.ran`` (None
    untraced: then no later run can reuse its outputs for new code)."""
    import nbformat

    nb = notebook.compose(project.root, task.name, task.recipe)
    try:
        task.ran = kernel.run_alone(nb, argv, trace, project.traced)
    except Exception as exc:
        if type(exc).__name__ == "CellExecutionError":
            raise PageError(_cell_error(nb, task, project)) from exc
        if isinstance(exc, ValueError):  # a %%section that differs
            where = cache.relative(project, task.source)
            raise PageError(f"{where}: {exc}") from exc
        raise
    try:
        files = page_data.page_files(nb, task.name, _script(task, project))
    except ValueError as exc:  # glued twice, a taken name
        raise PageError(str(exc)) from exc
    nbformat.validate(nb)  # once: nbformat.writes would check it again
    files[notebook_path(task.name)] = nbformat.v4.writes(nb) + "\n"
    return files


def notebook_path(name):
    """Where a page's executed notebook goes, under the out folder."""
    return f"{config.NOTEBOOKS}/{name}.ipynb"


def refresh_page(task, project):
    """The page's notebook with the code it carries and shows now, and
    the outputs of its last run: for a page none of whose functions
    changed (cache.run_key). {path: text}, or None when the saved
    notebook does not line up with the new one (then it runs)."""
    import nbformat

    saved = project.out / notebook_path(task.name)
    if not saved.is_file():
        return None
    old = nbformat.reads(saved.read_text("utf-8"), as_version=4)
    new = notebook.compose(project.root, task.name, task.recipe)
    kernel.prepare(new)
    if [c.cell_type for c in old.cells] != [c.cell_type for c in new.cells]:
        return None
    for was, now in zip(old.cells, new.cells, strict=True):
        ran = was.cell_type == "code" and not now.source.startswith("%%")
        if ran and was.source != now.source:  # a cell of the run itself
            return None
        was.source = now.source  # the title and links too
    # checked as it was read; sources are strings still
    return {notebook_path(task.name): nbformat.v4.writes(old) + "\n"}


def _script(task, project):
    return task.recipe["script"] or cache.relative(project, task.source)


ANSI = re.compile(r"\x1b\[[0-9;]*m")
CELL_FRAME = re.compile(r"^Cell In\[\d+\], line (\d+)", re.M)
FILE_FRAME = re.compile(r"^File (\S+?):(\d+)(?:, in |$)", re.M)


def _cell_error(nb, task, project):
    """file:line of the failing cell (in the page script when it is one
    of its cells) and the exception's last line."""
    index, error = next(
        (i, o)
        for i, cell in enumerate(nb.cells)
        for o in cell.get("outputs", [])
        if o.get("output_type") == "error"
    )
    text = ANSI.sub("", "\n".join(error.get("traceback", [])))
    last = f"{error.get('ename')}: {error.get('evalue')}"
    starts = notebook.script_lines(project.root, task.recipe)
    first = len(nb.cells) - len(starts)
    cell = CELL_FRAME.search(text)
    within = int(cell[1]) if cell else 1
    carried = [  # frames in a file the notebook carries, deepest last
        (f"{config.MHA_REF}/{path.split('/mha_ref/', 1)[1]}", line)
        for path, line in FILE_FRAME.findall(text)
        if "/mha_ref/" in path
    ]
    if index >= first and starts:
        where = f"{task.recipe['script']}:{starts[index - first] + within - 1}"
        if carried:
            last += f" (raised at {carried[-1][0]}:{carried[-1][1]})"
    elif carried:
        where = f"{carried[-1][0]}:{carried[-1][1]}"
    else:
        where = f"{cache.relative(project, task.source)}:0"
    return f"{where}: {last}"


# ------------------------------------------------------------ the run


def preflight(project, tasks):
    """{page: [Problem]} of the mistakes found before anything runs: an
    include of a section that does not exist, a file that does not
    parse."""
    found = {}
    for problem in pages.include_problems(project.root):
        found.setdefault(Path(problem.path).stem, []).append(problem)
    for task in tasks:
        files = [cache.relative(project, f) for f in task.inputs]
        ours = [f for f in files if not f.startswith("pipeline/")]
        for problem in pages.syntax_problems(project.root, ours):
            found.setdefault(task.name, []).append(problem)
    return found


def _expected(project, task):
    """Sort key, slowest first: a page never run here (new, or a fresh
    clone) first, the longest script first; then by its last seconds."""
    seconds = cache.last_seconds(project, task.name)
    if seconds is None:
        return (0, -task.source.stat().st_size)
    return (1, -seconds)


def _announce(project, todo, cached, say):
    if not todo:
        return
    known = [(cache.last_seconds(project, t.name), t.name) for t in todo]
    known = [(s, n) for s, n in known if s is not None]
    slow = ""
    if known:
        seconds, name = max(known)
        slow = f"; the slowest, {name}, took {seconds:.0f} s last time"
    say(
        f"generation: {len(todo)} page(s) to run, {cached} cached{slow}: "
        + ", ".join(t.name for t in todo)
    )


class _Progress:
    """Start lines, and every PROGRESS_S a line naming the pages that
    still run (a person sees a long page is not stuck)."""

    def __init__(self, say, width, events=None, last=None):
        self.say, self.width = say, width
        self.last = last or {}  # page -> seconds it took last time
        self.events = events or (lambda kind, name: None)
        self.lock, self.running = threading.Lock(), {}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._tick, daemon=True)

    def started(self, name):
        with self.lock:
            self.running[name] = time.perf_counter()
            self.say(f"  start  {name}")
        self.events("start", name)

    def ended(self, name):
        with self.lock:
            self.running.pop(name, None)
        self.events("end", name)

    def _tick(self):
        while not self.stopped.wait(PROGRESS_S):
            now = time.perf_counter()
            with self.lock:
                long = [
                    f"{n} {now - t:.0f} s{self._last(n)}"
                    for n, t in self.running.items()
                    if now - t >= PROGRESS_S
                ]
                if long:
                    self.say(f"  ...    still running: {', '.join(long)}")

    def _last(self, name):
        seconds = self.last.get(name)
        return "" if seconds is None else f" (last time {seconds:.0f} s)"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stopped.set()
        self.thread.join()


def _run(
    project,
    todo,
    jobs,
    say,
    width,
    traceback,
    done,
    events,
    kernels,
    stop=None,
    later=None,
    trace=True,
):
    """Run ``todo`` side by side; call ``done(task, files, seconds)`` in
    this thread as each page ends (``files`` None: it failed). Returns
    the names that failed. Once ``stop()`` is true, no page starts and
    the pages that end are dropped (not ``done``): left for later, and
    named in ``later``. ``kernels``: the started WarmKernels to fork
    the pages' kernels from."""
    from concurrent.futures import as_completed

    failed = []
    if not todo:
        return failed
    jobs = jobs or JOBS_PER_CORE * len(os.sched_getaffinity(0))
    last = {t.name: cache.last_seconds(project, t.name) for t in todo}
    progress = _Progress(say, width, events, last)
    with progress:
        argv = kernels.kernel_argv()  # kernels forked from one process

        def one(task):
            if stop is not None and stop():
                return _LATER  # not started: the next round runs it
            task.texts = cache.read_inputs(project, task)  # read once
            task.key = cache.task_key(project, task, task.texts)
            progress.started(task.name)
            began = time.perf_counter()
            try:
                return run_page(task, project, argv, trace)
            finally:
                progress.ended(task.name)
                task.seconds = time.perf_counter() - began

        pool = ThreadPoolExecutor(max_workers=jobs)
        later = [] if later is None else later
        try:
            futures = {pool.submit(one, t): t for t in todo}
            for future in as_completed(futures):
                task = futures[future]
                try:
                    files = future.result()
                    if files is _LATER or (stop is not None and stop()):
                        later.append(task.name)
                        continue
                except PageError as exc:
                    say(str(exc))
                    if traceback and exc.__cause__ is not None:
                        say(_explain(exc.__cause__))
                except Exception as exc:  # a fault of the pipeline's own
                    say(_explain(exc))
                else:
                    say(f"  ran    {task.name:<{width}} {task.seconds:5.2f} s")
                    done(task, files, task.seconds)
                    continue
                say(
                    f"  FAILED {task.name:<{width}} ({_script(task, project)})"
                )
                cache.failed(project, task.name, task.seconds)
                failed.append(task.name)
                done(task, None, task.seconds)
        finally:  # Ctrl-C too: the kernels stop first, then the threads
            pool.shutdown(wait=False, cancel_futures=True)
    pool.shutdown(wait=True)
    return failed


def imported_packages(project, tasks):
    """The top-level packages the tasks' scripts and carried Python files
    import, anywhere in them: what their kernels' fork server imports
    before the first fork (warm_kernels.WARM)."""
    found = set()
    for task in tasks:
        for name in [task.recipe["script"], *task.recipe["files"]]:
            if name and name.endswith(".py"):
                text = (project.root / name).read_text("utf-8")
                found.update(pages.top_level_imports(text))
    return found


def generate(
    project=None,
    force=False,
    only=None,
    jobs=None,
    say=print,
    together=False,
    traceback=False,
    events=None,
    kernels=None,
    first=(),
    between=None,
    interrupt=None,
    trace=True,
):
    """Run every page that is not cached; return the names that failed.

    ``trace=False``: the runs do not record which mha_ref functions they
    called (a run a few per cent faster; its outputs are then reused only
    when its inputs are unchanged, not for new code it never called).

    ``together``: write the pages' files only when every page has run
    (one rebuild for a server that watches them). ``events(kind,
    name)``: "todo" (the names to run), then "start" and "end" of each.
    ``kernels``: a started WarmKernels to fork from (the watcher keeps
    one for its session); by default one is started for this run.
    ``first``: with ``together``, the pages to run before the others
    and publish on their own (the ones that show what was edited);
    ``between()`` is called once they are published, before the others
    start (the server rebuilds meanwhile, on both cores). The others
    then run fastest first, and once ``interrupt()`` is true (another
    edit came) no other page starts, and no page of the others is
    published: they stay stale for the next round, which starts as soon
    as the pages running now end.
    """
    project = project or Project()
    say = _one_line_at_a_time(say)  # the pages' threads say things too
    tasks = discover(project)
    orphans = pages.orphan_scripts(project.root)
    for name in orphans:
        say(
            f"{config.SCRIPTS}/{name}.py:1: no page {config.DOCS}/{name}.md"
            " (a page script is named after its page)"
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
    blocked = preflight(project, tasks)
    if only:  # the pages asked for, and nothing else
        blocked = {n: ps for n, ps in blocked.items() if n in only}
    for problem in sorted({p for ps in blocked.values() for p in ps}):
        say(str(problem))
    old = set(stale(project, tasks))
    todo = [t for t in tasks if force or t.name in old]
    cached = len(tasks) - len(todo)
    failed = [*orphans, *sorted(blocked)]
    todo = [t for t in todo if t.name not in blocked]
    from pipeline.warm_kernels import started

    with contextlib.ExitStack() as warm:
        if todo and kernels is None:  # it imports while the code refreshes
            kernels = warm.enter_context(
                started(imported_packages(project, todo))
            )
        if not force:  # code changed that their runs never called
            new_code = refresh(project, todo, say)
            todo = [t for t in todo if t.name not in new_code]
            cached += len(new_code)
        if not todo:  # new code only: no page runs, no kernel
            warm.close()
        todo.sort(key=lambda t: _expected(project, t))  # slowest first
        # Together, a page that took over LATE_S last time runs last and
        # publishes on its own: the others' pages reload without waiting.
        late = {
            t.name
            for t in todo
            if together and (cache.last_seconds(project, t.name) or 0) > LATE_S
        }
        todo.sort(key=lambda t: t.name in late)  # stable: slowest first else
        _announce(project, todo, cached, say)
        if events:
            events("todo", [t.name for t in todo])
        width = max(14, *(len(t.name) for t in tasks)) if tasks else 14
        start, finished, running = time.perf_counter(), [], set()
        later = []  # left for the next round (another edit came)

        def done(task, files, seconds):
            running.discard(task.name)
            if files is not None:
                finished.append((task, files, seconds))
            if not together or running <= late:  # all but the late are done
                _publish(project, finished)
                finished.clear()

        groups = _groups(todo, first if together else (), late)
        with figure_cache(project, force):
            for n, group in enumerate(groups):
                if n:  # the pages that show the edit are out: the rest follow
                    _publish(project, finished)
                    finished.clear()
                    if between is not None:
                        between()
                running.update(t.name for t in group)
                failed += _run(
                    project,
                    group,
                    jobs,
                    say,
                    width,
                    traceback,
                    done,
                    events,
                    kernels,
                    stop=interrupt if n else None,
                    later=later,
                    trace=trace,
                )
        if later:  # another edit came: what ran before it may be stale too
            later += [task.name for task, _, _ in finished]
            finished.clear()
            again = ", ".join(sorted(later))
            say(f"  later  {again} (edited again meanwhile)")
        _publish(project, finished)  # together: all at once
        if not failed:
            try:
                _check_owners(tasks, project)
            except ValueError as exc:
                say(f"  FAILED {exc}")
                failed.append("outputs")
        total = time.perf_counter() - start
        names = {t.name for t in todo}
        ran = len(todo) - len(set(failed) & names) - len(later)
        failed = sorted(set(failed), key=failed.index)
        left = f", {len(later)} left for the next round" if later else ""
        say(
            f"  total  {'':<{width}} {total:5.2f} s "
            f"({ran} ran, {cached} cached, {len(failed)} failed{left})"
        )
        return failed


_LATER = object()  # a page left for the next round


def refresh(project, todo, say):
    """The pages of ``todo`` whose last run called none of the code that
    changed (cache.run_key): their notebooks get the new code and keep
    the outputs, nothing runs. Returns their names."""
    done = []
    for task in todo:
        last = cache.last_run(project, task.name)
        if last is None:
            continue
        texts = cache.read_inputs(project, task)
        if cache.run_key(project, task, texts, last[1]) != last[0]:
            continue
        files = refresh_page(task, project)
        if files is None:
            continue
        written = cache.outputs(project, task.name)
        seconds = cache.last_seconds(project, task.name)
        cache.begin(project, task.name)
        for relative, content in files.items():
            atomic_write(project.out / relative, content)
        key = cache.task_key(project, task, texts)
        cache.store(project, task.name, key, written, seconds, last)
        say(f"  code   {task.name} (new code only: none it ran changed)")
        done.append(task.name)
    return done


def _one_line_at_a_time(say):
    """``say`` for several threads: one whole line each call."""
    lock = threading.Lock()

    def said(line):
        with lock:
            say(line)

    return said


def _groups(todo, first, late=()):
    """``todo`` as the rounds it runs in: the pages of ``first`` alone,
    then the others, fastest first (the late last), so that another
    edit waits for short pages only; one round when either is empty."""
    head = [t for t in todo if t.name in first]
    rest = [t for t in todo if t.name not in first]
    if not head or not rest:
        return [todo]
    rest = rest[::-1]  # todo is slowest first
    rest.sort(key=lambda t: t.name in late)  # stable: the late still last
    return [head, rest]


def _publish(project, finished):
    """Write the pages' files, then their records (key last)."""
    for task, _, _ in finished:
        cache.begin(project, task.name)
    for _, files, _ in finished:
        for relative, content in files.items():
            atomic_write(project.out / relative, content)
    for task, files, seconds in finished:
        run = None
        if task.ran is not None:  # traced: its run key, for new code
            units = cache.ran_units(task.ran)
            run = (cache.run_key(project, task, task.texts, units), units)
        cache.store(project, task.name, task.key, list(files), seconds, run)


def _explain(exc):
    """A fault of the pipeline itself: with its traceback."""
    if type(exc).__name__ == "CellExecutionError":
        return str(exc).rstrip()
    return "".join(tracebacks.format_exception(exc)).rstrip()


def _check_owners(tasks, project):
    """No two pages write the same output (a figure name, say)."""
    owner = {}
    for task in tasks:
        for relative in cache.outputs(project, task.name):
            other = owner.setdefault(relative, task.name)
            if other != task.name:
                raise ValueError(
                    f"{relative} is written by {other} and {task.name}"
                )
