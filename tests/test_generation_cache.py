"""The generation cache: what reruns, what is reused, what is removed.

Each test builds a tiny project in a temporary folder (a topics package
and a fake mha_ref/) so nothing here imports torch or touches docs/.
"""

import functools
import json
import textwrap

import pytest

from scripts import build, cache

ALPHA = '''
DEPENDS = ["mha_ref/a.py"]


def compute():
    return {"x": 1.5}


def render(data, out):
    out.table("alpha", "| x |\\n| --: |\\n| 1.5 |\\n")
'''

BETA = '''
def compute():
    return {"y": [1, 2]}
'''


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))


@pytest.fixture
def project(tmp_path):
    root = tmp_path / "root"
    write(root / "mha_ref/a.py", "A = 1\n")
    write(root / "mha_ref/b.py", "B = 1\n")
    write(root / "topics/alpha.py", ALPHA)
    write(root / "topics/beta.py", BETA)
    write(root / "topics/helper.py", "def not_a_topic():\n    pass\n")
    return build.Project(root=root, package="topics",
                         out=tmp_path / "out", cache=tmp_path / "cache")


def run(project, **kwargs):
    """Build; return ({status: [names]}, failed, lines)."""
    lines = []
    failed = build.build(project, say=lines.append, **kwargs)
    status = {}
    for line in lines:
        words = line.split()
        if words and words[0] in ("ran", "cached", "FAILED"):
            status.setdefault(words[0], []).append(words[1])
    return status, failed, "\n".join(lines)


def test_build_cold_runs_warm_caches(project):
    status, failed, _ = run(project)
    assert failed == []
    assert status == {"ran": ["alpha", "beta"]}
    data = json.loads((project.out / "data/alpha.json").read_text())
    assert data == {"x": 1.5}
    assert (project.out / "tables/alpha.md").read_text().endswith("1.5 |\n")
    status, failed, _ = run(project)
    assert status == {"cached": ["alpha", "beta"]}


def test_build_dependency_edit_reruns_dependents_only(project):
    run(project)
    (project.root / "mha_ref/b.py").write_text("B = 2\n")
    status, _, _ = run(project)
    # alpha depends on a.py only; beta on every mha_ref/*.py
    assert status == {"cached": ["alpha"], "ran": ["beta"]}
    (project.root / "mha_ref/a.py").write_text("A = 2\n")
    status, _, _ = run(project)
    assert status == {"ran": ["alpha", "beta"]}


def test_build_topic_edit_reruns_that_topic(project):
    run(project)
    write(project.root / "topics/beta.py", BETA.replace("[1, 2]", "[3]"))
    status, _, _ = run(project)
    assert status == {"cached": ["alpha"], "ran": ["beta"]}
    data = json.loads((project.out / "data/beta.json").read_text())
    assert data == {"y": [3]}


def test_build_environment_change_reruns_all(project, monkeypatch):
    run(project)
    monkeypatch.setattr(cache, "device_fingerprint", lambda: "a new GPU")
    status, _, _ = run(project)
    assert status == {"ran": ["alpha", "beta"]}


def test_build_missing_or_edited_output_reruns(project):
    run(project)
    table = project.out / "tables/alpha.md"
    table.unlink()
    status, _, _ = run(project)
    assert status == {"ran": ["alpha"], "cached": ["beta"]}
    assert table.is_file()
    (project.out / "data/beta.json").write_text("{}\n")
    status, _, _ = run(project)
    assert status == {"cached": ["alpha"], "ran": ["beta"]}
    assert json.loads((project.out / "data/beta.json").read_text()) == {
        "y": [1, 2]
    }


def test_build_force_reruns_without_rewriting(project):
    run(project)
    table = project.out / "tables/alpha.md"
    before = table.stat().st_mtime_ns
    status, _, _ = run(project, force=True)
    assert status == {"ran": ["alpha", "beta"]}
    assert table.stat().st_mtime_ns == before  # same bytes: not rewritten


def test_build_only_runs_the_named_topic(project):
    status, failed, _ = run(project, only=["beta"])
    assert status == {"ran": ["beta"]} and failed == []
    assert not (project.out / "data/alpha.json").exists()
    status, failed, text = run(project, only=["gamma"])
    assert failed == ["gamma"] and "unknown topic" in text


def test_build_removes_outputs_a_topic_stopped_writing(project):
    run(project)
    write(project.root / "topics/alpha.py",
          ALPHA.split("def render")[0])  # no render: no table
    status, _, _ = run(project)
    assert status["ran"] == ["alpha"]
    assert not (project.out / "tables/alpha.md").exists()
    assert (project.out / "data/alpha.json").exists()


def test_build_removes_outputs_of_a_deleted_topic(project):
    run(project)
    (project.root / "topics/beta.py").unlink()
    status, _, text = run(project)
    assert status == {"cached": ["alpha"]}
    assert not (project.out / "data/beta.json").exists()
    assert not (project.cache / "beta.json").exists()
    assert "removed outputs of beta" in text


def test_build_failing_topic_is_reported_and_keeps_no_key(project):
    run(project)
    broken = BETA.replace('return {"y"', 'raise ZeroDivisionError("boom")'
                          '\n    return {"y"')
    write(project.root / "topics/beta.py", broken)
    status, failed, text = run(project)
    assert failed == ["beta"]
    assert status == {"cached": ["alpha"], "FAILED": ["beta"]}
    assert "ZeroDivisionError: boom" in text
    assert "topics/beta.py" in text
    assert json.loads((project.cache / "beta.json").read_text())["key"] \
        is None
    # back to the source that once succeeded: it must run, not be cached
    write(project.root / "topics/beta.py", BETA)
    status, failed, _ = run(project)
    assert status == {"cached": ["alpha"], "ran": ["beta"]}
    assert failed == []


def test_build_interrupted_topic_keeps_no_key(project):
    interrupted = ALPHA.replace(
        '    out.table("alpha", "| x |\\n| --: |\\n| 1.5 |\\n")',
        '    out.table("alpha", "| x |\\n| --: |\\n| 1.5 |\\n")\n'
        '    raise KeyboardInterrupt',
    )
    write(project.root / "topics/alpha.py", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(project)
    record = json.loads((project.cache / "alpha.json").read_text())
    assert record["key"] is None
    assert "tables/alpha.md" in record["outputs"]  # known, for cleanup
    write(project.root / "topics/alpha.py", ALPHA)
    status, failed, _ = run(project)
    assert status["ran"][0] == "alpha" and failed == []


def test_main_returns_nonzero_naming_the_topic(project, monkeypatch,
                                               capsys):
    write(project.root / "topics/gamma.py",
          "def compute():\n    return [1]\n")  # not a dict
    monkeypatch.setattr(build, "Project", functools.partial(
        build.Project, root=project.root, package="topics"))
    code = build.main(["--out", str(project.out),
                       "--cache-dir", str(project.cache)])
    captured = capsys.readouterr()
    assert code == 1
    assert "FAILED gamma" in captured.out
    assert "topics/gamma.py" in captured.out
    assert "must return a dict" in captured.out
    assert "gamma" in captured.err


def test_build_syntax_error_in_a_topic_fails(project):
    write(project.root / "topics/delta.py", "def compute(:\n")
    status, failed, text = run(project)
    assert failed == ["delta"] and "SyntaxError" in text


def test_build_bad_depends_fails(project):
    write(project.root / "topics/delta.py",
          'DEPENDS = ["mha_ref/missing.py"]\ndef compute():\n    return {}\n')
    status, failed, text = run(project)
    assert failed == ["delta"] and "matches no file" in text


def test_build_two_topics_writing_one_file_fails(project):
    clash = ALPHA.replace('DEPENDS = ["mha_ref/a.py"]', "")
    write(project.root / "topics/zeta.py", clash)
    status, failed, text = run(project)
    assert failed == ["zeta"]
    assert "tables/alpha.md is written by both alpha and zeta" in text


def test_discover_finds_the_site_topics():
    names = {task.name for task in build.discover(build.Project())}
    expected = {"runtime", "weighted_sum", "attention_matrix", "scaling",
                "softmax_backward", "multiple_heads", "pitfalls",
                "parity", "kv_cache", "notebooks/experiment"}
    assert expected <= names
    assert not names & {"build", "cache", "common", "figures", "macros",
                        "mkdocs_hook", "notebook_runner", "site_server",
                        "tasks", "bench"}
