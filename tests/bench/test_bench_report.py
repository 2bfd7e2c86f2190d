"""What `make bench` reads from the commands it times, and its report.

The pipeline's `ran <page> <seconds> s` and `total ... s` lines, pytest's
summary line (make test, make fast), the make command the suite part
runs, and the report's Markdown for a build and a suite record (a
failed run included): no command is run here.
"""

from bench import report
from bench.site_perf.build_times import (
    STAMP,
    generation_total,
    make_command,
    ran_seconds,
)
from bench.site_perf.suite import UNITS_MARK, pytest_summary, suite_summaries

GENERATION = """\
  cached about
  ran    tiled            3.25 s
  ran    trained-heads   88.10 s
  ran    attention-matrix 12.00 s
  total                  91.40 s (3 ran, 1 cached, 0 failed)
"""


def test_ran_lines_give_each_page_its_seconds():
    assert ran_seconds(GENERATION) == {
        "tiled": 3.25,
        "trained-heads": 88.1,
        "attention-matrix": 12.0,
    }
    assert ran_seconds("  cached about\n") == {}


def test_total_is_the_last_total_line():
    assert generation_total(GENERATION) == 91.4
    twice = GENERATION + "  total            0.10 s (0 ran, 4 cached)\n"
    assert generation_total(twice) == 0.1
    assert generation_total("nothing ran") is None


def test_pytest_summary_lines():
    decorated = "===== 3 failed, 120 passed, 2 skipped in 4.56s ====="
    parsed = pytest_summary("collected 125 items\n" + decorated + "\n")
    assert parsed == {
        "line": "3 failed, 120 passed, 2 skipped in 4.56s",
        "counts": {"failed": 3, "passed": 120, "skipped": 2},
        "seconds": 4.56,
    }
    quiet = pytest_summary(
        "....\n1 error, 1 warning, 12 passed in 130.20s (0:02:10)\n"
    )
    assert quiet["counts"] == {"errors": 1, "warnings": 1, "passed": 12}
    assert quiet["seconds"] == 130.2
    assert pytest_summary("no tests ran in 0.01s\n")["counts"] == {}


def test_pytest_summary_takes_the_last_and_may_be_missing():
    inner = "2 passed in 0.10s\n"  # a test that ran pytest itself
    output = inner + "stopping after 1 failures\n1 failed, 5 passed in 9s\n"
    assert pytest_summary(output)["counts"] == {"failed": 1, "passed": 5}
    assert pytest_summary("make: *** [Makefile:38: check] Error 1\n") is None
    assert pytest_summary("the tests passed in the end\n") is None


def test_suite_summaries_split_the_unit_report_from_the_rest():
    output = (
        "  ran    tiled  3.25 s\n"
        f"{UNITS_MARK} (build/unit-tests.log):\n"
        "....\n1 failed, 700 passed in 61.00s (0:01:01)\n"
        "============ test session starts ============\n"
        "2 workers [500 items]\n....\n"
        "========== 500 passed, 3 skipped in 180.50s ==========\n"
    )
    units, others = suite_summaries(output)
    assert units["counts"] == {"failed": 1, "passed": 700}
    assert others["counts"] == {"passed": 500, "skipped": 3}
    assert others["seconds"] == 180.5
    fast = "stopping\n3 passed in 1.00s\n"
    assert suite_summaries(fast) == (None, pytest_summary(fast))


def test_make_never_sets_up_the_linked_venv():
    command = make_command("/tmp/copy", "fast")
    assert command[:3] == ["make", "-C", "/tmp/copy"]
    assert command[command.index("-o") + 1] == STAMP
    assert command[-1] == "fast"


def summary(*runs):
    return {"median": sorted(runs)[len(runs) // 2], "runs": list(runs)}


def make_record(seconds, passed, line):
    return {
        "seconds": seconds,
        "passed": passed,
        "returncode": 0 if passed else 2,
        "pytest": {"line": line, "counts": {}, "seconds": 1.0}
        if line
        else None,
        "generation_total_s": 12.5,
        "trained_heads_ran_s": None,
        "tail": None if passed else ["E   AssertionError", "1 failed"],
    }


def test_report_states_targets_and_failed_runs():
    steps = {
        s: f"{s} command" for s in ("generate", "check", "mkdocs", "typeset")
    }
    build = {
        "steps": {**steps, "mkdocs": ".venv/bin/mkdocs build --strict"},
        "cold_pages": ["tiled", "scaling"],
        "cold_generation_s": summary(18.0),
        "cold_generation_total_s": summary(17.5),
        "cold_pages_s": {"tiled": summary(9.0), "scaling": summary(8.0)},
        "trained_heads": {"wall_s": summary(80.0), "ran_s": 78.0},
        "floor_s": summary(3.0, 3.2),
        "warm_prose_s": summary(3.5, 3.6),
        "warm_prose_steps_s": {s: summary(1.0, 1.0) for s in steps},
        "numpy_ref_edit_s": summary(16.0, 17.0),
        "numpy_ref_edit_steps_s": {s: summary(5.0, 5.0) for s in steps},
        "numpy_ref_edit_reran": ["tiled"],
        "prose_edit": "docs/tiled.md",
        "code_edit": "mha_ref/numpy_ref.py",
        "warm_prose_over_floor": summary(1.17, 1.13),
        "numpy_ref_edit_over_floor": summary(5.3, 5.3),
        "targets": {
            "cold_generation_s": {"max": 20.0, "median": 18.0, "met": True},
            "numpy_ref_edit_s": {"max": 15.0, "median": 17.0, "met": False},
            "warm_prose_over_floor": {"max": 1.3, "median": 1.17, "met": 1},
        },
    }
    fast = make_record(50.0, False, "1 failed, 9 passed in 20.00s")
    suite = {
        "command": "make -C <copy> ...",
        "emptied": ["docs/generated", ".cache"],
        "cores": 2,
        "quick": True,
        "test": None,
        "fast": {
            "seconds": summary(50.0),
            "passed": False,
            "runs": [fast],
            "target": {"max": 60.0, "median": 50.0, "met": False},
        },
    }
    suite["targets"] = {"make_fast_s": suite["fast"]["target"]}
    text = report.markdown(
        {
            "environment": {"cpu": "test"},
            "build": build,
            "suite": suite,
            "seconds_total": 1.0,
        }
    )
    assert "| cold generation |" in text
    assert "<= 20 s | met | 18.0 s |" in text
    assert "<= 15 s | NOT met |" in text
    assert "trained-heads alone" in text
    assert "## Test suite" in text
    assert "`make test` | not run (--quick)" in text
    assert "1 failed, 9 passed in 20.00s" in text
    assert "E   AssertionError" in text
    assert "Kept from an earlier run" not in text
    found = report.targets({"build": build, "suite": suite})
    assert found["build.numpy_ref_edit_s"]["met"] is False
    assert found["suite.make_fast_s"]["max"] == 60.0


def test_a_build_that_failed_part_way_keeps_what_it_measured():
    build = {
        "steps": {
            "generate": "g",
            "check": "c",
            "mkdocs": "m",
            "typeset": "t",
        },
        "code_edit": "mha_ref/numpy_ref.py",
        "cold_pages": ["tiled"],
        "cold_generation_s": summary(19.0),
        "cold_pages_s": {"tiled": summary(9.0)},
        "trained_heads": None,
        "failed": "python -m pipeline.check failed (1):\ndocs/x.md:3: no",
        "targets": {
            "cold_generation_s": {"max": 20.0, "median": 19.0, "met": True}
        },
    }
    text = "\n".join(report._build_md(build))
    assert "<= 20 s | met | 19.0 s |" in text
    assert "not measured (a step failed first) | <= 15 s" in text
    assert "docs/x.md:3: no" in text
    assert "no trained-heads page in this tree" in text


def test_each_partial_run_is_kept_and_named(tmp_path):
    """A part rerun alone keeps the earlier partial runs' record (a
    report kept from before, with one "partial_run", too) and the
    footer names every one of them, in order."""
    full = {"environment": {"commit": "a"}, "seconds_total": 900.0}
    full["partial_run"] = {
        "parts": ["build"],
        "environment": {"commit": "b", "cores_available": 2},
        "seconds": 300.0,
    }
    (tmp_path / "report.json").write_text(report._json(full))

    def rerun(part, commit, seconds):
        run = {
            "environment": {"commit": commit, "cpu_probe_s": 0.14},
            "seconds_total": seconds,
            part: {"x": 1},
        }
        merged = report.merge(run, tmp_path, [part])
        (tmp_path / "report.json").write_text(report._json(merged))
        return merged

    rerun("suite", "c", 340.0)
    merged = rerun("engines", "d", 200.0)
    runs = merged["partial_runs"]
    assert [r["parts"] for r in runs] == [["build"], ["suite"], ["engines"]]
    assert "partial_run" not in merged
    assert merged["environment"] == {"commit": "a"}  # the full run's
    assert merged["engines"]["measured_in"]["commit"] == "d"
    footer = report.markdown(merged).splitlines()[-1]
    assert footer.index("build (300 s, commit b, cores_available 2)") < (
        footer.index("suite (340 s, commit c, cpu_probe_s 0.14)")
    )
    assert "engines (200 s, commit d" in footer
    # a part measured again: only its last run stays in the record
    again = rerun("suite", "e", 350.0)["partial_runs"]
    assert [r["parts"] for r in again] == [["build"], ["engines"], ["suite"]]
    assert again[-1]["environment"]["commit"] == "e"


def test_a_part_measured_at_another_commit_says_so():
    top = {"commit": "a"}
    later = {"environment": {"commit": "b", "cpu": "X"}, "rows": []}
    same = {"environment": {"commit": "a", "cpu": "X"}, "rows": []}
    said = report._measured_in(later, top)
    assert said[-1] == ("Measured in a later run: commit b, cpu X.")
    assert report._measured_in(same, top) == []
