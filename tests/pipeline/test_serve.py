"""``make serve`` through a contributor's mistakes: it keeps serving,
says each in one line, recovers by itself, and leaves nothing running.

The first test drives the loop's parts in-process (serve.Watcher, as
``make serve`` polls it) on a tiny project in tmp_path, through the six
mistakes: a page whose data does not exist yet, a wrong placeholder, a
wrong section, hand-typed code, a page script that raises, a syntax
error in mha_ref. The second runs ``python -m pipeline.serve`` itself on
that project, with MkDocs' server: it serves through a wrong section,
and Ctrl-C (or the server exiting) stops every process it started.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from pipeline import pages, serve
from pipeline.typeset_math import Typesetter
from tests.pipeline.test_pipeline import make_project

pytestmark = pytest.mark.slow  # kernels: make fast skips it

ROOT = Path(__file__).resolve().parents[2]
SECTION_A = (
    "from mha_ref import b\n\n\n"
    "# --8<-- [start:add-one]\n"
    "A = b.B + 1\n"
    "# --8<-- [end:add-one]\n"
)
ALPHA = (
    '# Alpha\n\n<< alpha.x | vec >>\n\n```python\n--8<-- "{include}"\n```\n'
)
GOOD_INCLUDE = "mha_ref/a.py:add-one"
LINE = re.compile(r"^\S+:\d+: ")  # file:line: what to do


def tiny(root):
    project = make_project(root)
    (root / "mha_ref/a.py").write_text(SECTION_A)
    (root / "docs/alpha.md").write_text(ALPHA.format(include=GOOD_INCLUDE))
    return project


def mistakes(lines):
    """The file:line lines of a round (the rest is progress)."""
    return [line for line in lines if LINE.match(line)]


@pytest.fixture
def watcher(tmp_path):
    project = tiny(tmp_path)
    log = []
    with serve.Watcher(project, say=log.append) as w:
        w.typesetter = Typesetter()  # not the repository's formula cache
        w.log = log
        assert w.step() == [], "\n".join(log)
        yield w


def edit(watcher, relative, text):
    """Write a file as a contributor saves it; one round of the loop."""
    path = watcher.project.root / relative
    path.write_text(text)
    os.utime(path, ns=(time.time_ns(), time.time_ns()))  # a new mtime
    watcher.log.clear()
    assert watcher.poll(), f"{relative}: the watcher saw no change"
    assert not any("Traceback" in line for line in watcher.log), watcher.log
    return list(watcher.log)


def test_watcher_says_each_mistake_in_one_line_and_recovers(watcher):
    root = watcher.project.root
    alpha = (root / "docs/alpha.md").read_text()
    data = root / "docs/generated/data"

    # 1. a page whose data does not exist yet (its script comes next)
    lines = edit(watcher, "docs/gamma.md", "# Gamma\n\n<< gamma.z >>\n")
    (line,) = mistakes(lines)
    assert line.startswith("docs/gamma.md:3: << gamma.z >>: no page ")
    assert "alpha, beta" in line  # the page variables that exist
    lines = edit(
        watcher,
        "scripts/gamma.py",
        '# %%\nimport glue\n\nglue.value("z", 7)\n',
    )
    assert mistakes(lines) == []
    assert (data / "gamma.json").read_text() == '{\n "z": 7\n}\n'
    assert lines[-1] == "the pages agree with the code and the data again"

    # 2. a wrong placeholder: the names that exist there
    lines = edit(
        watcher, "docs/alpha.md", alpha.replace("alpha.x", "alpha.xx")
    )
    (line,) = mistakes(lines)
    assert line.startswith("docs/alpha.md:3: << alpha.xx >>: alpha has no")
    assert "did you mean x?" in line
    assert mistakes(edit(watcher, "docs/alpha.md", alpha)) == []

    # 3. a wrong section: named before anything runs, the nearest first
    wrong = ALPHA.format(include="mha_ref/a.py:add-on")
    lines = edit(watcher, "docs/alpha.md", wrong)
    (line,) = mistakes(lines)
    assert line == (
        "docs/alpha.md:6: mha_ref/a.py has no section 'add-on': did you "
        "mean add-one? (its sections: add-one)"
    )
    assert not any(line.startswith("  start") for line in lines)
    assert mistakes(edit(watcher, "docs/alpha.md", alpha)) == []

    # 4. code typed on the page
    typed = alpha + "\n```python\nprint('typed')\n```\n"
    (line,) = mistakes(edit(watcher, "docs/alpha.md", typed))
    assert line.startswith("docs/alpha.md:10: code typed on the page")
    assert mistakes(edit(watcher, "docs/alpha.md", alpha)) == []

    # 5. a page script that raises: its file:line, the error's last line
    beta = (root / "scripts/beta.py").read_text()
    broken = beta.replace(
        "glue.value", "raise ValueError('on purpose')\nglue.value"
    )
    lines = edit(watcher, "scripts/beta.py", broken)
    (line,) = mistakes(lines)
    assert line == "scripts/beta.py:5: ValueError: on purpose"
    assert (data / "beta.json").read_text() == '{\n "y": 3\n}\n'  # kept
    lines = edit(watcher, "scripts/beta.py", beta)
    assert mistakes(lines) == []
    assert "  ran    beta" in "\n".join(lines)

    # 6. a syntax error in mha_ref: before anything runs
    b = (root / "mha_ref/b.py").read_text()
    lines = edit(watcher, "mha_ref/b.py", "B = = 1\n")
    (line,) = mistakes(lines)
    assert line == "mha_ref/b.py:1: SyntaxError: invalid syntax"
    assert not any(line.startswith("  start") for line in lines)
    assert mistakes(edit(watcher, "mha_ref/b.py", b)) == []
    assert (data / "alpha.json").is_file()


def test_an_edit_publishes_the_pages_that_show_it_first(watcher):
    """An edit of a section reruns every page that carries its file; the
    page that shows the section runs first and is published on its own,
    then the loop waits (``between``: the server rebuilds it), then the
    others run."""
    root = watcher.project.root
    beta = (root / "scripts/beta.py").read_text()
    carries_a = beta.replace("import c\n", "import a, c\n")  # not shown
    assert mistakes(edit(watcher, "scripts/beta.py", carries_a)) == []
    calls = []

    def between():
        data = (root / "docs/generated/data/alpha.json").read_text()
        calls.append((list(watcher.log), data))

    watcher.between = between
    section = (root / "mha_ref/a.py").read_text()
    lines = edit(
        watcher, "mha_ref/a.py", section.replace("b.B + 1", "b.B + 2")
    )
    assert mistakes(lines) == []
    ((before, alpha),) = calls  # called once, between the two rounds
    assert "  ran    alpha" in "\n".join(before)
    assert "  ran    beta" not in "\n".join(before)
    assert "3.0" in alpha  # published before beta started: A = 1 + 2
    assert "  ran    beta" in "\n".join(lines)


def test_edited_sections_are_those_whose_text_changed():
    source = (
        "# --8<-- [start:outer]\nx = 1\n# --8<-- [start:inner]\ny = 2\n"
        "# --8<-- [end:inner]\n# --8<-- [end:outer]\nz = 3\n"
    )
    assert set(pages.sections(source)) == {"outer", "inner"}
    assert pages.edited_sections(source, source) == set()
    assert pages.edited_sections(source, source + "w = 4\n") == set()
    assert pages.edited_sections(source, source.replace("x = 1", "x = 5")) == {
        "outer"
    }
    assert pages.edited_sections(source, source.replace("y = 2", "y = 0")) == {
        "outer",
        "inner",
    }
    recipes = {
        "alpha": {"blocks": [{"file": "mha_ref/a.py", "section": "inner"}]},
        "beta": {"blocks": [{"file": "mha_ref/b.py", "section": "inner"}]},
    }
    assert pages.pages_showing(recipes, "mha_ref/a.py", {"inner"}) == {"alpha"}


def test_engine_filter_keeps_what_a_person_acts_on():
    shown = serve.EngineFilter()
    lines = [
        "INFO    -  Building documentation...",
        "INFO    -  [macros] - Macros arguments: {...}",
        "INFO    -  DeprecationWarning: GitWildMatchPattern is deprecated",
        '  File "/x/site-packages/pathspec/pathspec.py", line 326',
        "WARNING -  Doc file 'a.md' contains a link 'b.md', not found",
        "Traceback (most recent call last):",
        '  File "/x/mkdocs/livereload/__init__.py", line 211, in _build',
        "pymdownx.snippets.SnippetMissingError: Snippet 'x' not found",
        "INFO    -  [21:03:51] Serving on http://127.0.0.1:8123/",
    ]
    assert [s for s in map(shown, lines) if s] == [
        "engine: Doc file 'a.md' contains a link 'b.md', not found",
        "engine: pymdownx.snippets.SnippetMissingError: Snippet 'x' not found",
        "serving at http://127.0.0.1:8123/ (Ctrl-C stops it)",
    ]


# ------------------------------------------- python -m pipeline.serve


def tiny_mkdocs_yml():
    """The repository's mkdocs.yml with the tiny project's nav."""
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    nav = "nav:\n  - Tiny: index.md\n  - Alpha: alpha.md\n  - Beta: beta.md\n"
    return re.sub(r"^nav:\n(?:[ -].*\n)+", nav, text, flags=re.M)


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Served:
    """``python -m pipeline.serve`` in a copy, its output line by line."""

    def __init__(self, root, background=False, parent=False):
        self.url = f"http://127.0.0.1:{free_port()}/"
        self.lines, self.seen = [], threading.Condition()
        # its own temporary folder, to see what the loop leaves there:
        # short, as the kernels' sockets (ipc://) live in it and a socket
        # path has at most 107 characters
        self.tmp = Path(tempfile.mkdtemp(prefix="mha-t-"))
        env = {**os.environ, "PYTHONPATH": str(root), "TMPDIR": str(self.tmp)}
        command = [
            sys.executable,
            "-m",
            "pipeline.serve",
            "-a",
            self.url[7:-1],
        ]
        if parent:  # under a parent of its own, as make runs it
            command = [sys.executable, "-c", PARENT, *command]
        self.process = subprocess.Popen(
            command,
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            # as a shell starts a background job: SIGINT ignored
            preexec_fn=_ignore_sigint if background else None,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            with self.seen:
                self.lines.append(line.rstrip("\n"))
                self.seen.notify_all()

    def wait_for(self, text, timeout=60):
        deadline = time.monotonic() + timeout
        with self.seen:
            while not any(text in line for line in self.lines):
                left = deadline - time.monotonic()
                if left <= 0 or self.process.poll() is not None:
                    pytest.fail(f"no {text!r} in:\n" + "\n".join(self.lines))
                self.seen.wait(min(left, 0.5))

    def page(self, path):
        with urllib.request.urlopen(self.url + path, timeout=10) as reply:
            return reply.status, reply.read().decode()


@pytest.fixture
def copy(tmp_path):
    root = tmp_path / "tiny"
    tiny(root)
    (root / "mkdocs.yml").write_text(tiny_mkdocs_yml())
    shutil.copy(ROOT / "macros.py", root / "macros.py")
    shutil.copytree(ROOT / "overrides", root / "overrides")
    shutil.copytree(ROOT / "docs/assets", root / "docs/assets")
    # the glossary every page appends (mkdocs.yml's snippets auto_append)
    shutil.copytree(ROOT / "docs/includes", root / "docs/includes")
    (root / "docs/index.md").write_text("# Tiny\n")
    return root


# a parent that runs the loop and waits, as `make serve`'s make does
PARENT = (
    "import subprocess, sys; sys.exit(subprocess.Popen(sys.argv[1:]).wait())"
)


def _ignore_sigint():
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def gone(pids):
    return [p for p in pids if serve._alive(p)]


def stopped(served, started):
    """The loop exited and every process it started is gone."""
    try:
        served.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        said = "\n".join(served.lines)
        pytest.fail(f"the loop still runs 20 s later; it said:\n{said}")
    deadline = time.monotonic() + 5
    while gone(started) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone(started) == [], [_command(p) for p in gone(started)]
    said = "\n".join(served.lines)
    assert "Traceback" not in said, said
    # no temporary folder left: not the warm kernels', not the engine's
    # (mkdocs serve's build folder, which a SIGTERM or SIGKILL leaves)
    assert sorted(p.name for p in served.tmp.iterdir()) == []
    served.tmp.rmdir()


def test_serve_survives_a_mistake_and_leaves_nothing_running(copy):
    """Served through a wrong section; the engine's server killed, the
    loop stops the rest; started again (all cached), Ctrl-C stops all;
    each time nothing is left running, nor any temporary folder."""
    served = Served(copy)
    try:
        served.wait_for("serving at")
        status, html = served.page("alpha/")
        assert status == 200
        assert "1.5" in html
        started = serve.descendants(served.process.pid)
        engine = [p for p in started if "mkdocs" in _command(p)]
        assert engine, [_command(p) for p in started]
        assert len(started) > len(engine)  # the warm kernels too
        alpha = copy / "docs/alpha.md"
        good = alpha.read_text()
        alpha.write_text(good.replace("add-one", "add-on"))
        served.wait_for("did you mean add-one?")
        time.sleep(1.5)  # the engine rebuilt too: still serving
        assert served.page("alpha/")[0] == 200
        alpha.write_text(good)
        served.wait_for("agree with the code and the data again")
        os.kill(engine[0], signal.SIGKILL)  # the server exits on its own
        served.wait_for("server exited")
        stopped(served, started)

        # again, everything cached, started as a background job (SIGINT
        # ignored, which its children inherit): Ctrl-C still stops all
        served = Served(copy, background=True)
        served.wait_for("serving at")
        started = serve.descendants(served.process.pid)
        served.process.send_signal(signal.SIGINT)
        stopped(served, started)
    finally:
        if served.process.poll() is None:
            serve.stop_all(served.process.pid, wait=1)
            served.process.kill()
        shutil.rmtree(served.tmp, ignore_errors=True)


def _one_named(loop, words):
    """The loop's own child whose command has ``words`` (the warm
    kernels' forks keep their server's command line: not them)."""
    children = [p for p in serve.descendants(loop) if _parent(p) == loop]
    found = [p for p in children if words in _command(p)]
    assert len(found) == 1, [_command(p) for p in children]
    return found[0]


def _parent(pid):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])


def test_serve_ends_every_process_whatever_ends_first(copy):
    """The engine's server killed while a page script runs, the warm
    kernels' server killed while a page's kernel runs, the loop's parent
    killed: each time the loop and every process it started end within
    seconds, and no temporary folder is left."""
    beta = copy / "scripts/beta.py"
    slow = beta.read_text() + "\nimport time\n\ntime.sleep(60)\n"
    served = Served(copy)
    try:
        served.wait_for("serving at")
        started = serve.descendants(served.process.pid)
        engine = _one_named(served.process.pid, "mkdocs serve")
        beta.write_text(slow)  # a page that runs for a minute
        served.wait_for("start  beta")
        os.kill(engine, signal.SIGTERM)
        served.wait_for("server exited")
        stopped(served, started + serve.descendants(served.process.pid))
        beta.write_text(slow.replace("time.sleep(60)", "time.sleep(0)"))

        served = Served(copy)
        served.wait_for("serving at")
        started = serve.descendants(served.process.pid)
        kernels = _one_named(served.process.pid, "warm_kernels.py server")
        beta.write_text(slow)  # its kernel busy: the server's child
        served.wait_for("start  beta")
        time.sleep(1.0)  # the kernel forked
        started += serve.descendants(served.process.pid)
        os.kill(kernels, signal.SIGKILL)  # it can kill no kernel itself
        served.wait_for("kernel server exited")
        stopped(served, started)
        beta.write_text(slow.replace("time.sleep(60)", "time.sleep(0)"))

        served = Served(copy, parent=True)
        served.wait_for("serving at")
        started = serve.descendants(served.process.pid)
        served.process.kill()  # the parent, by SIGKILL: no word to anyone
        served.process.wait()
        deadline = time.monotonic() + 20
        while gone(started) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert gone(started) == [], [_command(p) for p in gone(started)]
        time.sleep(0.5)  # the loop's last cleanup
        assert sorted(p.name for p in served.tmp.iterdir()) == []
    finally:
        if served.process.poll() is None:
            serve.stop_all(served.process.pid, wait=1)
            served.process.kill()
        shutil.rmtree(served.tmp, ignore_errors=True)


def _command(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


class _File:
    """What serve_hook reads of an MkDocs File (a page of docs/)."""

    def __init__(self, root, src_uri):
        self.src_uri = src_uri
        self.abs_src_path = str(root / "docs" / src_uri)
        stem = Path(src_uri).with_suffix("").as_posix()
        self.abs_dest_path = str(root / "site" / stem / "index.html")

    def is_documentation_page(self):
        return True

    def is_modified(self):
        src, dest = Path(self.abs_src_path), Path(self.abs_dest_path)
        return not dest.exists() or src.stat().st_mtime > dest.stat().st_mtime


def _write(root, files):
    """Each {relative path: text} under root, its folders made."""
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text)


def test_dirty_rebuild_renders_the_pages_whose_shown_files_changed(
    tmp_path, monkeypatch
):
    """Under `mkdocs serve --dirty`: a page is out of date when a file it
    includes, or the data of a page it quotes, is newer than its built
    page; a change every page shares (mkdocs.yml) rebuilds them all."""
    from types import SimpleNamespace

    from pipeline import serve_hook

    root = tmp_path
    _write(
        root,
        {
            "mkdocs.yml": "site_name: tiny\n",
            "mha_ref/a.py": SECTION_A,
            "docs/alpha.md": ALPHA.format(include=GOOD_INCLUDE),
            "docs/beta.md": "# Beta\n\n<< gamma.z >>\n",
            "docs/delta.md": "# Delta\n",
            "docs/generated/data/gamma.json": '{"z": 1}\n',
        },
    )
    files = [_File(root, f"{n}.md") for n in ("alpha", "beta", "delta")]
    for f in files:  # built a second after their sources
        Path(f.abs_dest_path).parent.mkdir(parents=True)
        Path(f.abs_dest_path).write_text("<html></html>")
        os.utime(f.abs_dest_path, (time.time() + 1,) * 2)
    config = SimpleNamespace(config_file_path=str(root / "mkdocs.yml"))
    monkeypatch.setattr(serve_hook, "_shared", None)
    serve_hook.on_startup("serve", dirty=True)
    try:

        def stale():
            fresh = [_File(root, f.src_uri) for f in files]
            serve_hook.on_files(fresh, config)
            return [f.src_uri for f in fresh if f.is_modified()]

        assert stale() == ["alpha.md", "beta.md", "delta.md"]  # 1st build
        assert stale() == []
        later = (time.time() + 5,) * 2
        os.utime(root / "mha_ref/a.py", later)  # alpha shows a section
        os.utime(root / "docs/generated/data/gamma.json", later)  # beta's
        assert stale() == ["alpha.md", "beta.md"]
        (root / "mkdocs.yml").write_text("site_name: tinier\n")
        assert stale() == ["alpha.md", "beta.md", "delta.md"]
    finally:
        serve_hook.on_startup(None, dirty=False)


def test_a_file_changed_while_its_page_was_built_rebuilds_it(
    tmp_path, monkeypatch
):
    """A build reads a page's inputs, then writes the page: an input
    that changes between the two is older than the written page but
    newer than the build's start, so the next build renders the page
    again (before, the page kept what it read: code ahead of, or behind,
    its numbers until some other edit)."""
    from types import SimpleNamespace

    from pipeline import serve_hook

    root = tmp_path
    _write(
        root,
        {
            "mkdocs.yml": "site_name: tiny\n",
            "docs/beta.md": "# Beta\n\n<< gamma.z >>\n",
            "docs/generated/data/gamma.json": '{"z": 1}\n',
        },
    )
    page = _File(root, "beta.md")
    written = SimpleNamespace(file=page)  # what on_post_page gets
    built = Path(page.abs_dest_path)
    built.parent.mkdir(parents=True)
    config = SimpleNamespace(config_file_path=str(root / "mkdocs.yml"))
    monkeypatch.setattr(serve_hook, "_shared", None)
    monkeypatch.setattr(serve_hook, "_built_from", {})
    serve_hook.on_startup("serve", dirty=True)
    try:
        now = time.time()

        def stale():
            fresh = _File(root, "beta.md")
            serve_hook.on_files([fresh], config)
            return fresh.is_modified()

        stale()  # the first build: every page
        serve_hook.on_pre_build(config)  # a build starts at `now` ...
        monkeypatch.setattr(serve_hook, "_build_started", now)
        data = root / "docs/generated/data/gamma.json"
        os.utime(data, (now + 1,) * 2)  # ... the data changes ...
        built.write_text("<html></html>")  # ... and the page is written
        os.utime(built, (now + 2,) * 2)
        serve_hook.on_post_page("", page=written, config=config)
        assert stale()  # newer than the build's start: rendered again
        serve_hook.on_pre_build(config)
        monkeypatch.setattr(serve_hook, "_build_started", now + 3)
        os.utime(built, (now + 4,) * 2)
        serve_hook.on_post_page("", page=written, config=config)
        assert not stale()  # built from it since
    finally:
        serve_hook.on_startup(None, dirty=False)
