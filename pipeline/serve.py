"""``make serve``: the contributor's loop, which no page mistake stops.

    python -m pipeline.serve [-a 127.0.0.1:8000] [--engine mkdocs]

One process owns the loop. It generates what is stale (generation.py)
and lints the pages (page_linter.py), then starts the engine's own
server (``mkdocs serve``, or ``zensical serve``), and watches the files
that decide the pages: an edit of ``mha_ref/``, a page script or a page
reruns exactly the pages it affects, in two rounds. First the pages
that show what changed (the page or script edited, or the pages that
include a section whose text the edit changed) run and are published
together, each page's files at once (its page, numbers and notebook
download come from the same run); the loop waits for the server to
rebuild them, then runs the other affected pages, fastest first, and
publishes them together. Another edit meanwhile starts no further page
of that round (those running end, unpublished) and the next round
begins. Then the pages are linted again. Each mistake is one line,
``file:line: what to do``, with the nearest names; the server goes on
serving the last good outputs (or a page that shows the error), and the
next edit that fixes the file recovers by itself. MkDocs serves with
``--dirty``: a rebuild renders only the pages out of date (serve_hook).
The engine's own output is cut to what a person acts on (a warning, an
error's last line, where it serves).

A fresh start serves once every page but the slowest has run; the
slowest publishes when done (the server reloads). Whatever ends first,
Ctrl-C, SIGTERM, the engine's server or the warm kernels' server
exiting for any reason (a page still running or not), or the process
that started the loop dying (make, even by SIGKILL), every process this
one started (the server, the warm kernels, their clients) ends within
seconds, and every temporary folder with them. ``python -m pipeline
--watch`` is the same loop without a server.
"""

import argparse
import contextlib
import ctypes
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback as tracebacks
from pathlib import Path

from pipeline import config, generation, page_linter, pages
from pipeline.zensical import write_notebook_pages

# the files whose edit can change a page or its numbers
WATCHED = (
    f"{config.MHA_REF}/*.py",
    f"{config.MHA_REF}/guards/*.py",
    f"{config.SCRIPTS}/*.py",
    f"{config.DOCS}/*.md",
    "pipeline/*.py",
)
POLL_S = 0.5
STOP_S = 3.0  # a process asked to stop gets this long before SIGKILL
REBUILD_S = 60.0  # the longest the loop waits for the engine's rebuild
ENGINES = {
    "mkdocs": ["mkdocs", "serve", "--dirty"],  # serve_hook: what is stale
    "zensical": ["zensical", "serve", "-f", "zensical.yml"],
}
# Set for the engine's server: pipeline/serve_hook.py then leaves the
# reloads to this loop (it publishes the generated files together).
WATCHER_ENV = "MHA_REF_WATCHER"


def _mha_sources(root):
    """{relative path: text} of the mha_ref files."""
    found = {}
    for path in sorted(Path(root).glob(f"{config.MHA_REF}/**/*.py")):
        with contextlib.suppress(OSError, UnicodeDecodeError):
            found[path.relative_to(root).as_posix()] = path.read_text("utf-8")
    return found


def snapshot(root):
    """{path: mtime_ns} of the watched files."""
    stamps = {}
    for pattern in WATCHED:
        for path in Path(root).glob(pattern):
            with contextlib.suppress(FileNotFoundError):  # just removed
                stamps[path] = path.stat().st_mtime_ns
    return stamps


class Watcher:
    """Regenerate what an edit affects, then lint; one line a mistake."""

    def __init__(self, project, say=print, jobs=None, traceback=False):
        self.project, self.say, self.jobs = project, say, jobs
        self.traceback = traceback
        self.before = snapshot(project.root)
        self.sources = _mha_sources(project.root)  # to see what an edit did
        self.between = None  # after the edit's own pages: wait for the server
        self.typesetter = None  # one V8 for the whole session
        self.problems = None  # what the last lint said
        self.kernels = None  # one warm process for the whole session
        self.started_kernels = None  # told of the warm process: serve()

    def close(self):
        """Stop the session's warm kernels."""
        if self.kernels is not None:
            self.kernels.__exit__(None, None, None)
            self.kernels = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def changed(self):
        """The watched files edited, added or removed since last time."""
        now = snapshot(self.project.root)
        edited = {p for p in now if self.before.get(p) != now[p]}
        paths = sorted(
            str(p.relative_to(self.project.root))
            for p in (set(now) ^ set(self.before)) | edited
        )
        self.before = now
        return paths

    def edited_again(self):
        """A watched file changed since this round began (the change is
        left for the next poll to see)."""
        return snapshot(self.project.root) != self.before

    def shown_first(self, paths):
        """The pages that show what ``paths`` edited: their own page or
        script, or a section of mha_ref whose text changed. They run,
        and are published, before the other pages the edit affects."""
        root = self.project.root
        sources, self.sources = self.sources, _mha_sources(root)
        recipes = pages.page_notebooks(root)
        first = set()
        for path in paths:
            folder, name = os.path.split(path)
            stem = Path(name).stem
            if folder in (config.DOCS, config.SCRIPTS):
                first.add(stem)
            elif path in sources or path in self.sources:
                edited = pages.edited_sections(
                    sources.get(path, ""), self.sources.get(path, "")
                )
                first |= pages.pages_showing(recipes, path, edited)
        return first

    def step(self, together=True, events=None, first=()):
        """Generate what is stale, then lint. Returns the failed pages."""
        from pipeline.warm_kernels import started

        if self.kernels is None:  # started once, used by every round
            every = generation.discover(self.project)  # a new page: its own
            imports = generation.imported_packages(self.project, every)
            self.kernels = started(imports).__enter__()
            if self.started_kernels is not None:
                self.started_kernels(self.kernels.process, "kernel server")
        said = set()

        def once(line):  # generation and the linter name some alike
            if line not in said:
                said.add(line)
                self.say(line)

        failed = generation.generate(
            self.project,
            jobs=self.jobs,
            say=once,
            together=together,
            traceback=self.traceback,
            events=events,
            kernels=self.kernels,
            first=first,
            between=self.between,
            interrupt=self.edited_again,
        )
        write_notebook_pages(self.project.out, self.project.cache.parent)
        self.lint(once)
        return failed

    def lint(self, say=None):
        """The page linter's problems, one line each."""
        from pipeline.typeset_math import FORMULA_CACHE, Typesetter

        say = say or self.say
        if self.typesetter is None:
            self.typesetter = Typesetter(cache=FORMULA_CACHE)
        try:
            problems = page_linter.lint(self.project.root, self.typesetter)
        except (FileNotFoundError, ValueError) as exc:  # nothing generated
            problems = [str(exc)]
        self.typesetter.save()
        for problem in problems:
            say(str(problem))
        if not problems and self.problems:
            say("the pages agree with the code and the data again")
        self.problems = problems
        return problems

    def poll(self):
        """One look at the files: a round if any changed."""
        paths = self.changed()
        if paths:
            self.say(f"changed: {', '.join(paths)}")
            try:
                first = self.shown_first(paths)
            except (OSError, ValueError, SyntaxError):  # the lint says it
                first = set()
            self.step(first=first)
        return paths


# ------------------------------------------------- the engine's output

RE_LEVEL = re.compile(r"^(INFO|WARNING|ERROR|DEBUG)\s+-\s+(.*)$")
RE_CLOCK = re.compile(r"^\[\d\d:\d\d:\d\d\] ")
QUIET = (  # an engine's lines that tell a person nothing to do
    "Building documentation",
    "Cleaning site directory",
    "Detected file changes",
    "Reloading browsers",
    "Watching paths for changes",
    "[macros]",
    "Converting notebook",
    "Copied jupyter file",
    "Cache miss",
    "DeprecationWarning",
    "Documentation built in",
    "The following pages exist in the docs directory, but are not",
    "Build started",
    "Build finished",
    "A 'dirty' build is being performed",  # make serve's own choice
)


class EngineFilter:
    """The engine's lines a person acts on: where it serves, each warning
    and error (one line each; of a traceback, its last line)."""

    def __init__(self):
        self.in_traceback = False

    def __call__(self, line):
        line = line.rstrip("\n")
        if line.startswith("Traceback (most recent call last)"):
            self.in_traceback = True
            return None
        if self.in_traceback:
            if line.startswith((" ", "\t")) or not line.strip():
                return None
            self.in_traceback = False  # its last line: the error itself
            return f"engine: {line.strip()}"
        match = RE_LEVEL.match(line.strip())
        level, text = (match[1], match[2]) if match else ("", line.strip())
        text = RE_CLOCK.sub("", text)  # the server's "[21:03:51] "
        if not text or text.startswith(QUIET) or level == "DEBUG":
            return None
        if text.startswith(("Serving on", "Serving at")):
            url = text.split()[-1]
            return f"serving at {url} (Ctrl-C stops it)"
        if level == "INFO":
            return None
        if line.startswith((" ", "\t")):  # a warning's stack: not ours
            return None
        return f"engine: {text}"


def _die_with_parent():
    """In a child, before exec: SIGTERM when this process dies (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Rebuilds:
    """The engine's finished builds, counted from its output, so that the
    loop can wait for the rebuild its files started."""

    MARKS = ("Documentation built in", "Build finished in")

    def __init__(self):
        self.count, self.changed = 0, threading.Condition()

    def saw(self, line):
        if any(mark in line for mark in self.MARKS):
            with self.changed:
                self.count += 1
                self.changed.notify_all()

    def wait_next(self, timeout=REBUILD_S):
        """Until the engine finishes one more build (or ``timeout``)."""
        with self.changed:
            now = self.count
            return self.changed.wait_for(lambda: self.count > now, timeout)


def start_engine(engine, address, root, say, rebuilds=None, scratch=None):
    """The engine's server, its output filtered into ``say`` (and each
    finished build counted in ``rebuilds``). With ``scratch``, a folder
    the caller removes, the server keeps its temporary files there
    (TMPDIR): `mkdocs serve` builds into a temporary folder it removes
    only on Ctrl-C, and this loop stops it with SIGTERM or, if it hangs,
    SIGKILL."""
    bin_dir = Path(sys.executable).parent
    program, *args = ENGINES[engine]
    command = [str(bin_dir / program), *args, "-a", address]
    path = os.pathsep.join(
        filter(None, [str(root), os.environ.get("PYTHONPATH")])
    )
    env = {
        **os.environ,
        "PYTHONPATH": path,  # the hook imports this repository's pipeline
        WATCHER_ENV: "1",
        "NO_MKDOCS_2_WARNING": "1",
        "PYTHONWARNINGS": "ignore::DeprecationWarning",
    }
    if scratch is not None:
        env["TMPDIR"] = str(scratch)
    process = subprocess.Popen(
        command,
        cwd=root,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        start_new_session=True,  # stopped by this loop, group and all
        preexec_fn=_die_with_parent,
    )
    shown = EngineFilter()

    def relay():
        for line in process.stdout:
            if rebuilds is not None:
                rebuilds.saw(line)
            text = shown(line)
            if text:
                say(text)

    threading.Thread(target=relay, daemon=True).start()
    return process


# ------------------------------------------------- stopping everything


def descendants(pid):
    """The process ids below ``pid`` (Linux /proc), deepest last."""
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(
                int(stat.parent.name)
            )
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def stop_all(pid=None, wait=STOP_S):
    """SIGTERM every process below ``pid`` (default: this one), then
    SIGKILL those still there after ``wait`` seconds."""
    pid = os.getpid() if pid is None else pid
    doomed = descendants(pid)
    for child in doomed:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGTERM)
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        alive = [c for c in doomed if _alive(c)]
        if not alive:
            return
        time.sleep(0.05)
    for child in doomed + descendants(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGKILL)


def _alive(pid):
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1]
    except OSError:
        return False
    return state.split()[0] != "Z"  # a zombie has stopped


class Stop(Exception):  # noqa: N818 (what it asks for)
    """SIGTERM or SIGHUP: leave the loop as Ctrl-C does."""


def _raise_stop(number, _frame):
    raise Stop(signal.Signals(number).name)


def _stoppable():
    """SIGTERM and SIGHUP leave the loop as Ctrl-C does; and Ctrl-C
    raises KeyboardInterrupt even when this process started with SIGINT
    ignored (a shell's background job, and its children, do). The loop
    gets SIGTERM when the process that started it dies (`make serve`'s
    make, killed), so it never outlives it."""
    for number in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, _raise_stop)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _die_with_parent()


class Ending:
    """What ends the loop besides a signal: a process it started that
    exits (the engine's server, the warm kernels' server). A thread
    waits on each; the first to exit says so and sends this process
    SIGTERM, which leaves whatever the loop was doing (a page running
    too) for its ``finally``: every other process stopped."""

    def __init__(self, say):
        self.say, self.code = say, None
        self.stopping = threading.Event()  # the loop stops them itself

    def watch(self, process, name):
        def wait():
            code = process.wait()
            if not self.stopping.is_set():
                self.stopping.set()
                self.code = code or 1
                self.say(f"the {name} exited ({code}): stopping")
                os.kill(os.getpid(), signal.SIGTERM)

        threading.Thread(target=wait, daemon=True).start()


# ------------------------------------------------------------ the loop


def serve(
    project,
    engine="mkdocs",
    address="127.0.0.1:8000",
    say=print,
    jobs=None,
    traceback=False,
):
    """Generate, lint, serve and watch until stopped; 0 on Ctrl-C."""
    _stoppable()
    watcher = Watcher(project, say, jobs, traceback)
    ending = Ending(say)
    watcher.started_kernels = ending.watch  # the warm kernels' server
    rebuilds = Rebuilds()
    watcher.between = rebuilds.wait_next  # the edit's pages rebuilt first
    server, code = None, 0
    # every temporary file of the loop and of the server (the kernels'
    # folders, a page's run): gone with the loop, however it stops, even
    # with a page still running when it does
    scratch = tempfile.TemporaryDirectory(
        prefix="mha-serve-", ignore_cleanup_errors=True
    )
    tempfile.tempdir = scratch.name
    try:
        first = _FirstRound(watcher)
        while server is None:  # serve once all but the slowest have run
            if first.ready(POLL_S):
                server = start_engine(
                    engine,
                    address,
                    project.root,
                    say,
                    rebuilds,
                    scratch.name,
                )
                ending.watch(server, f"{engine} server")
        first.finish()
        while True:
            time.sleep(POLL_S)
            watcher.poll()
    except (KeyboardInterrupt, Stop):
        if ending.code is None:
            say("stopping")
        code = ending.code or 0
    finally:
        ending.stopping.set()  # what stops now is stopped by the loop
        stop_all()
        watcher.close()  # the warm kernels' folder
        scratch.cleanup()
    return code


class _FirstRound:
    """The first generation, beside the loop: the server may start once
    at most one page still runs (its files follow when it is done)."""

    def __init__(self, watcher):
        self.watcher = watcher
        self.queued, self.running = None, set()
        self.lock, self.done = threading.Lock(), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _event(self, kind, name):
        with self.lock:
            if kind == "todo":
                self.queued = set(name)
            elif kind == "start":
                self.queued.discard(name)
                self.running.add(name)
            else:
                self.running.discard(name)

    def _run(self):
        try:
            self.watcher.step(together=False, events=self._event)
        except Exception:  # a fault of the pipeline's own: all of it
            self.watcher.say(tracebacks.format_exc().rstrip())
        finally:
            self.done.set()

    def ready(self, timeout):
        if self.done.wait(timeout):
            return self._has_data()
        with self.lock:
            early = self.queued is not None and not self.queued
            early = early and len(self.running) <= 1
        return early and self._has_data()

    def _has_data(self):
        data = self.watcher.project.out / "data"
        if any(data.glob("*.json")):
            return True
        if self.done.is_set():  # nothing generated: wait for a fix
            self.watcher.say("nothing generated yet: fix the page above")
            while not self.watcher.poll():
                time.sleep(POLL_S)
        return any(data.glob("*.json"))

    def finish(self):
        """Wait for the first round (the slowest page) in the loop."""
        while not self.done.wait(POLL_S):
            pass


def watch(project, jobs=None, say=print, traceback=False):
    """``python -m pipeline --watch``: the loop without a server."""
    _stoppable()
    watcher = Watcher(project, say, jobs, traceback)
    say("watching mha_ref/, scripts/ and docs/ (Ctrl-C stops)")
    try:
        watcher.step(together=False)
        while True:
            time.sleep(POLL_S)
            watcher.poll()
    except (KeyboardInterrupt, Stop):
        return 0
    finally:
        stop_all()
        watcher.close()  # the warm kernels' folder


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m pipeline.serve",
        description="Generate, check and serve the site while you edit.",
    )
    parser.add_argument(
        "-a", "--address", default="127.0.0.1:8000", help="IP:PORT"
    )
    parser.add_argument("--engine", choices=sorted(ENGINES), default="mkdocs")
    parser.add_argument("--jobs", type=int, help="pages run at once")
    parser.add_argument(
        "--traceback",
        action="store_true",
        help="a failing page script's whole traceback, not its last line",
    )
    args = parser.parse_args(argv)
    # a line as soon as it is said, into a pipe too (`make serve | tee`,
    # the benchmark): block-buffered, the round's lines waited in a buffer
    sys.stdout.reconfigure(line_buffering=True)
    project = generation.Project()
    code = serve(
        project,
        args.engine,
        args.address,
        jobs=args.jobs,
        traceback=args.traceback,
    )
    sys.stdout.flush()
    os._exit(code)  # the pool's threads may wait on kernels just stopped


if __name__ == "__main__":
    main()
