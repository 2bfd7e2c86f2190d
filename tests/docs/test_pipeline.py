"""The generation step: outputs, cache, failures, reproducible bytes.

Each test runs the real pipeline on a tiny project in tmp_path: two
topics, one of which depends on a file of mha_ref/.
"""

import textwrap

import pytest

from pipeline.build import Project, build

ALPHA = """
DEPENDS = ["mha_ref/a.py"]


def compute():
    return {"x": [1.5, 1.0], "nan": float("nan")}


def render(data, out):
    out.table("alpha", "| x |\\n| - |\\n| 1.5 |")

    def draw(fig, theme):
        fig.subplots().plot(data["x"], color=theme.series[0])

    out.figure("alpha-line", draw, alt="a line")
"""
BETA = """
DEPENDS = []


def compute():
    return {"y": 2}
"""


@pytest.fixture
def project(tmp_path):
    files = {
        "topics/__init__.py": 'TOPICS = ["alpha", "beta"]\n',
        "topics/alpha.py": ALPHA,
        "topics/beta.py": BETA,
        "mha_ref/a.py": "A = 1\n",
    }
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return Project(root=tmp_path)


def run(project, **kwargs):
    log = []
    failed = build(project, say=log.append, **kwargs)
    ran = sorted(line.split()[1] for line in log if line.startswith("  ran"))
    return failed, ran


def test_build_writes_data_tables_and_both_figures(project):
    assert run(project) == ([], ["alpha", "beta"])
    out = project.out
    assert (out / "data/beta.json").read_text() == '{\n "y": 2\n}\n'
    assert '"nan": "nan"' in (out / "data/alpha.json").read_text()
    assert (out / "tables/alpha.md").read_text().endswith("| 1.5 |\n")
    for scheme in ("light", "dark"):
        svg = (out / f"figures/alpha-line-{scheme}.svg").read_text()
        assert svg.startswith("<?xml")


def test_build_reruns_only_what_changed(project):
    run(project)
    assert run(project) == ([], [])
    (project.root / "mha_ref/a.py").write_text("A = 2\n")  # alpha's input
    assert run(project) == ([], ["alpha"])
    (project.root / "topics/beta.py").write_text(BETA + "# edit\n")
    assert run(project) == ([], ["beta"])
    (project.out / "tables/alpha.md").write_text("edited by hand\n")
    assert run(project) == ([], ["alpha"])


def test_build_failure_is_reported_and_retried(project):
    source = project.root / "topics/beta.py"
    source.write_text(BETA.replace('{"y": 2}', "{1 / 0: 0}"))
    assert run(project) == (["beta"], ["alpha"])
    assert run(project) == (["beta"], [])  # no key was recorded
    source.write_text(BETA)
    assert run(project) == ([], ["beta"])


def test_build_removes_outputs_of_a_dropped_topic(project):
    run(project)
    (project.root / "topics/__init__.py").write_text('TOPICS = ["beta"]\n')
    run(project)
    assert sorted(p.name for p in project.out.rglob("*.*")) == ["beta.json"]


def test_build_bytes_reproduce(project, tmp_path):
    run(project)
    again = Project(root=project.root, out=tmp_path / "again")
    run(again, force=True)
    for path in project.out.rglob("*.*"):
        relative = path.relative_to(project.out)
        assert (again.out / relative).read_bytes() == path.read_bytes()
