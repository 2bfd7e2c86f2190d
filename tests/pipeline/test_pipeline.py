"""The generation step: page scripts, glue, found dependencies, cache.

The first tests run the real pipeline on a tiny project in tmp_path (two
pages, two mha_ref files, the real glue.py). Each page still runs in a
kernel of its own, forked from one warm process that the whole module
shares (starting one imports torch, about 4.5 CPU-seconds, more than
the tiny pages compute), and they share one module-scoped project where
they can.
The last one computes the real repository's keys in a copy and shows an
edit of one mha_ref file makes exactly the pages that carry it stale.
"""

import json
import shutil
import textwrap
from pathlib import Path

import nbformat
import pytest

from pipeline import cache, pages
from pipeline.generation import Project, discover, generate, stale
from pipeline.page_data import glued_names
from pipeline.warm_kernels import WARM, started

pytestmark = pytest.mark.slow  # make fast skips it; make test runs it

ROOT = Path(__file__).resolve().parents[2]

FILES = {
    "docs/alpha.md": "# Alpha\n\n<< alpha.x | vec >>\n",
    "docs/beta.md": "# Beta\n\n<< beta.y >>\n",
    "mha_ref/__init__.py": '"""A tiny mha_ref."""\n',
    "mha_ref/a.py": "from mha_ref import b\n\nA = b.B + 1\n",
    "mha_ref/b.py": "B = 1\n",
    "mha_ref/c.py": "C = 3\n",
    "scripts/alpha.py": """\
        # %% [markdown]
        # The line and the table the page shows.

        # %%
        import glue
        from mha_ref import a

        glue.value("x", [1.5, float(a.A)])
        glue.value("nan", float("nan"))
        glue.table("alpha", ["x"], [[1.5]])


        def draw(fig, theme):
            fig.subplots().plot([0, 1], color=theme.series[0])


        glue.figure("alpha-line", draw, alt="a line")
        glue.export("alpha-weights", {"w": [0.25]})
        """,
    "scripts/beta.py": """\
        # %%
        import glue
        from mha_ref import c

        glue.value("y", c.C)
        """,
}


def make_project(root):
    for relative, text in FILES.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    shutil.copy(ROOT / "scripts/glue.py", root / "scripts/glue.py")
    for runner in ("pipeline",):  # the runner files are part of each key
        shutil.copytree(ROOT / runner, root / runner)
    return Project(root=root)


@pytest.fixture(scope="module")
def kernels():
    """One warm process for the module's generations, as the watcher of
    `make serve` keeps one for its session."""
    with started() as warm:
        yield warm


def run(project, kernels, **kwargs):
    log = []
    failed = generate(project, say=log.append, kernels=kernels, **kwargs)
    ran = sorted(line.split()[1] for line in log if line.startswith("  ran"))
    return failed, ran, log


@pytest.fixture(scope="module")
def built(tmp_path_factory, kernels):
    """The tiny project, generated once."""
    project = make_project(tmp_path_factory.mktemp("pipeline"))
    failed, ran, log = run(project, kernels)
    assert failed == [], "\n".join(log)
    assert ran == ["alpha", "beta"]
    return project


def test_the_fork_server_imports_what_the_pages_import(built):
    """Torch is warmed for a run of pages that import it, not for these
    (glue imports numpy and matplotlib, in its functions)."""
    from pipeline.generation import imported_packages

    found = imported_packages(built, discover(built))
    assert {"glue", "mha_ref", "numpy", "matplotlib"} <= found
    assert "torch" not in found
    warm = started(found).warm
    assert "torch" not in warm
    assert {"numpy", "matplotlib.figure", "ipykernel.debugger"} <= set(warm)
    assert "torch" in started(found | {"torch"}).warm
    assert started().warm == [module for module, _ in WARM]


def test_build_writes_what_the_script_glued(built):
    out = built.out
    data = json.loads((out / "data/alpha.json").read_text())
    assert data["x"] == [1.5, 2.0]  # a.A = b.B + 1
    assert data["nan"] == "nan"  # JSON has no NaN
    assert data["figures"]["alpha-line"]["alt"] == "a line"
    assert (out / "tables/alpha.md").read_text().startswith("| x |")
    for scheme in ("light", "dark"):
        assert (out / f"figures/alpha-line-{scheme}.svg").is_file()
    assert json.loads((out / "exports/alpha-weights.json").read_text()) == {
        "w": [0.25]
    }
    assert json.loads((out / "data/beta.json").read_text()) == {"y": 3}


def test_notebook_names_each_output_and_links_its_page(built):
    nb = nbformat.read(built.out / "notebooks/alpha.ipynb", as_version=4)
    assert glued_names(nb) == {
        ("value", "x"),
        ("value", "nan"),
        ("table", "alpha"),
        ("figure", "alpha-line"),
        ("export", "alpha-weights"),
    }
    shown = [
        o.get("text", "") + o.get("data", {}).get("text/plain", "")
        for c in nb.cells
        for o in c.get("outputs", [])
    ]
    assert any(s.startswith("glue: x = [1.5, 2.0]") for s in shown)
    assert "](http://127.0.0.1:8000/alpha/)" in nb.cells[0].source
    # the dark SVG and the export's JSON are not in the download
    saved = (built.out / "notebooks/alpha.ipynb").read_text()
    assert '{"w":[0.25]}' not in saved
    assert saved.count("<svg") == 1  # the light figure only


def test_carried_files_are_found_import_by_import(built):
    recipe = pages.page_notebooks(built.root)["alpha"]
    assert recipe["files"] == [
        "mha_ref/__init__.py",
        "mha_ref/a.py",
        "mha_ref/b.py",  # imported by a.py, not by the script
        "scripts/glue.py",
    ]


def test_each_notebook_is_titled_after_its_page():
    """A notebook's title is "Notebook: " and its page's title (the
    page's first "# " line, not a comment of its front matter)."""
    wrong = []
    for name, recipe in pages.page_notebooks(ROOT).items():
        text = (ROOT / recipe["page"]).read_text(encoding="utf-8")
        h1 = next(
            line[2:]
            for line in pages.without_front_matter(text).splitlines()
            if line.startswith("# ")
        )
        if recipe["title"] != h1:
            wrong.append(f"{name}: {recipe['title']!r}, not {h1!r}")
    assert not wrong, "\n".join(wrong)
    page = "---\ntags: [a]\n# a comment\n---\n\n# The page\n"
    assert pages.page_blocks(page) == ([], "The page")


def test_notebooks_carry_the_doors_their_modules_import():
    # kv_cache.py imports mha_ref/guards/kv_cache.py, which imports
    # guards/chunks.py: carried, with the package's __init__; another
    # module's doors are not; the import cell names top-level modules
    from pipeline import notebook

    recipe = pages.page_notebooks(ROOT)["kv-cache"]
    files = recipe["files"]
    for name in ("__init__", "kv_cache", "chunks"):
        assert f"mha_ref/guards/{name}.py" in files
    assert "mha_ref/guards/serving.py" not in files
    cells = notebook.compose(ROOT, "kv-cache", recipe).cells
    (line,) = [c.source for c in cells if c.source.startswith("from mha_ref")]
    assert "kv_cache" in line
    assert "__init__" not in line
    assert "chunks" not in line


def test_notebook_intro_names_each_carried_file_once():
    """The intro lists mha_ref's files by their path inside it, so a
    module and its guard (numpy_ref.py, guards/numpy_ref.py) are two
    names, and no name is listed twice."""
    from pipeline import notebook

    recipe = pages.page_notebooks(ROOT)["check-your-attention"]
    intro = notebook._intro(recipe)
    listed = intro.split("uses (", 1)[1].split(") next to", 1)[0]
    names = [n.strip().strip("`") for n in listed.split(",")]
    assert len(names) == len(set(names)), names
    assert "guards/numpy_ref.py" in names
    assert "numpy_ref.py" in names


def test_notebooks_carry_their_benchmark_part_not_the_report():
    """A page that quotes the benchmark reads its part's own file
    (bench/<part>.json, written beside report.json: bench/report.py,
    PAGE_PARTS), so its notebook carries that file and not the whole
    report; and no other page carries a part."""
    from bench.report import PAGE_PARTS

    reader = {f"bench/{part}.json": page for part, page in PAGE_PARTS.items()}
    wrong = [
        f"{name} carries {f}"
        for name, recipe in pages.page_notebooks(ROOT).items()
        for f in recipe["files"]
        if f.startswith("bench/") and reader.get(f) != name
    ]
    assert not wrong, "\n".join(wrong)
    carried = {
        f for r in pages.page_notebooks(ROOT).values() for f in r["files"]
    }
    assert set(reader) <= carried, "a page part that no page reads"


def test_second_build_is_cached(built, kernels):
    assert run(built, kernels)[:2] == ([], [])


def test_edit_reruns_exactly_the_pages_that_carry_it(built, kernels):
    b = built.root / "mha_ref/b.py"
    b.write_text("B = 10\n")
    assert run(built, kernels)[:2] == ([], ["alpha"])
    data = json.loads((built.out / "data/alpha.json").read_text())
    assert data["x"] == [1.5, 11.0]
    (built.root / "mha_ref/c.py").write_text("C = 4\n")
    (built.root / "scripts/glue.py").touch()  # same bytes: no rerun
    assert run(built, kernels)[:2] == ([], ["beta"])


def test_a_second_edit_leaves_the_rest_of_a_round_for_the_next(
    tmp_path, kernels
):
    """The loop's rounds (make serve): the pages of ``first`` run and
    publish; once ``interrupt()`` says another edit came, the others
    neither start nor publish, and stay stale for the next round."""
    project = make_project(tmp_path)
    assert run(project, kernels)[:2] == ([], ["alpha", "beta"])
    (project.root / "mha_ref/a.py").write_text(
        "from mha_ref import b\n\nA = 5\n"
    )
    (project.root / "mha_ref/c.py").write_text("C = 4\n")
    failed, ran, log = run(
        project,
        kernels,
        together=True,
        first={"alpha"},
        interrupt=lambda: True,
    )
    assert (failed, ran) == ([], ["alpha"])
    assert "  later  beta (edited again meanwhile)" in log
    assert log[-1].endswith(
        "(1 ran, 0 cached, 0 failed, 1 left for the next round)"
    )
    assert json.loads((project.out / "data/alpha.json").read_text())["x"] == [
        1.5,
        5.0,
    ]
    assert json.loads((project.out / "data/beta.json").read_text()) == {"y": 3}
    assert stale(project) == ["beta"]
    assert run(project, kernels, together=True)[:2] == ([], ["beta"])


def test_a_round_interrupted_midway_publishes_none_of_the_rest(
    tmp_path, kernels
):
    """One of the other pages ran before the new edit came, the next not:
    neither is published (the first may show what the edit changed)."""
    project = make_project(tmp_path)
    (project.root / "docs/gamma.md").write_text("# Gamma\n\n<< gamma.z >>\n")
    (project.root / "scripts/gamma.py").write_text(
        '# %%\nimport glue\nfrom mha_ref import c\n\nglue.value("z", c.C)\n'
    )
    assert run(project, kernels)[0] == []
    (project.root / "mha_ref/a.py").write_text(
        "from mha_ref import b\n\nA = 5\n"
    )
    (project.root / "mha_ref/c.py").write_text("C = 4\n")
    log = []

    def interrupt():  # the edit comes once one of the others has run
        return any(
            line.startswith(("  ran    beta", "  ran    gamma"))
            for line in log
        )

    failed = generate(
        project,
        say=log.append,
        together=True,
        first={"alpha"},
        interrupt=interrupt,
        jobs=1,
        kernels=kernels,
    )
    ran = [line.split()[1] for line in log if line.startswith("  ran")]
    assert failed == []
    assert len(ran) == 2  # alpha, and beta or gamma
    assert "  later  beta, gamma (edited again meanwhile)" in log
    assert sorted(stale(project)) == ["beta", "gamma"]
    assert json.loads((project.out / "data/beta.json").read_text()) == {"y": 3}


def test_failing_script_fails_and_names_the_page(tmp_path, kernels):
    project = make_project(tmp_path)
    script = project.root / "scripts/beta.py"
    script.write_text("# %%\nraise ValueError('broken on purpose')\n")
    failed, _, log = run(project, kernels, only=["beta"])
    assert failed == ["beta"]
    assert "broken on purpose" in "\n".join(log)
    assert "FAILED beta" in "\n".join(log)
    assert not (project.out / "data/beta.json").exists()


def test_script_without_a_page_is_refused(tmp_path, kernels):
    project = make_project(tmp_path)
    (project.root / "scripts/gamma.py").write_text("# %%\n")
    failed, ran, log = run(project, kernels)
    assert failed == ["gamma"]
    assert ran == ["alpha", "beta"]  # the other pages still run
    assert "scripts/gamma.py:1: no page docs/gamma.md" in "\n".join(log)


def test_repository_edit_makes_exactly_its_carriers_stale(tmp_path):
    """On a copy of the real tree: keys only, nothing executed."""
    root = tmp_path / "repo"
    for folder in ("docs", "mha_ref", "scripts", "pipeline", "bench"):
        shutil.copytree(
            ROOT / folder,
            root / folder,
            ignore=shutil.ignore_patterns("generated", "__pycache__"),
        )
    project = Project(root=root)
    tasks = discover(project)
    before = {t.name: t for t in tasks}
    for task in tasks:  # pretend every page was just generated
        key = cache.task_key(project, task)
        cache.store(project, task.name, key, [], 1.0)
    assert stale(project) == []
    edited = "mha_ref/kv_cache.py"
    path = root / edited
    path.write_text(path.read_text() + "\n# an edit\n")
    carriers = sorted(
        n for n, t in before.items() if edited in t.recipe["files"]
    )
    assert carriers, f"no page carries {edited}"
    assert sorted(stale(project)) == carriers


FUNCTIONS = """\
def one():
    return 1


def two():
    return 2


def both():
    return 10


def neither():
    return 0
"""


def test_a_function_edit_reruns_only_the_pages_that_ran_it(tmp_path, kernels):
    """Pages are keyed on the mha_ref functions their run called: an
    edit of one reruns the pages that called it; a page that carries the
    file but never called the function gets the new code in its notebook,
    its outputs kept, and nothing runs."""
    project = make_project(tmp_path)
    root = project.root
    (root / "mha_ref/f.py").write_text(FUNCTIONS)
    for page, call in (("alpha", "one"), ("beta", "two")):
        script = root / f"scripts/{page}.py"
        script.write_text(
            script.read_text()
            + f"\nfrom mha_ref import f\n\nglue.value('f', f.{call}() + "
            "f.both())\n"
        )
    assert run(project, kernels)[:2] == ([], ["alpha", "beta"])

    def edit(name, value):
        text = (root / "mha_ref/f.py").read_text()
        old = text.split(f"def {name}():\n    return ")[1].split("\n")[0]
        (root / "mha_ref/f.py").write_text(
            text.replace(
                f"def {name}():\n    return {old}\n",
                f"def {name}():\n    return {value}\n",
            )
        )

    edit("one", 5)  # alpha's only
    failed, ran, log = run(project, kernels)
    assert (failed, ran) == ([], ["alpha"])
    assert any(line.startswith("  code   beta") for line in log), log
    beta = nbformat.read(project.out / "notebooks/beta.ipynb", as_version=4)
    assert any("return 5" in cell.source for cell in beta.cells)  # carried
    assert json.loads((project.out / "data/beta.json").read_text())["f"] == 12
    assert json.loads((project.out / "data/alpha.json").read_text())["f"] == 15
    edit("both", 20)  # shared: each page that ran it
    assert run(project, kernels)[:2] == ([], ["alpha", "beta"])
    edit("neither", 7)  # no page ran it: nothing runs
    failed, ran, log = run(project, kernels)
    assert (failed, ran) == ([], [])
    assert sum(line.startswith("  code") for line in log) == 2
    assert stale(project) == []


def test_runner_files_are_found_and_leave_the_second_engine_out(tmp_path):
    """The page keys hash the pipeline files generation runs, found by
    their imports: an edit of zensical.py (the second engine's) makes no
    page stale, an edit of kernel.py makes every page stale."""
    from pipeline.generation import RUNNERS

    assert "pipeline/kernel.py" in RUNNERS
    assert "pipeline/notebook_setup.py" in RUNNERS  # read, not imported
    assert "pipeline/zensical.py" not in RUNNERS
    project = make_project(tmp_path)
    for task in discover(project):  # pretend every page was generated
        cache.store(project, task.name, cache.task_key(project, task), [], 1)
    assert stale(project) == []
    zensical = project.root / "pipeline/zensical.py"
    zensical.write_text(zensical.read_text() + "\n# an edit\n")
    assert stale(project) == []
    kernel = project.root / "pipeline/kernel.py"
    kernel.write_text(kernel.read_text() + "\n# an edit\n")
    assert sorted(stale(project)) == ["alpha", "beta"]


def test_mistakes_found_before_generation_stop_the_command(
    tmp_path, monkeypatch, capsys
):
    """A misspelt placeholder, a missing section, typed code: found from
    the files alone, and `python -m pipeline` stops on them before any
    page runs, one line each."""
    import pipeline.__main__ as entry
    from pipeline.page_linter import before_generation

    project = make_project(tmp_path)
    assert before_generation(project.root) == []
    beta = project.root / "docs/beta.md"
    beta.write_text("# Beta\n\n<< beta.yy >>\n\n```python\nx = 1\n```\n")
    problems = [str(p) for p in before_generation(project.root)]
    assert problems[0].startswith("docs/beta.md:3: << beta.yy >>: ")
    assert "scripts/beta.py glues no 'yy'; did you mean y?" in problems[0]
    assert problems[1].startswith("docs/beta.md:6: code typed on the page")

    def refuse(*args, **kwargs):
        raise AssertionError("generation started")

    monkeypatch.setattr(entry, "generate", refuse)
    monkeypatch.setattr(
        entry, "before_generation", lambda root: before_generation(tmp_path)
    )
    assert entry.main([]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("docs/beta.md:3: << beta.yy >>")
    assert err[-1] == "generation not started: fix the lines above"
