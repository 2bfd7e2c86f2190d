"""Build times, in a temporary copy of the repository.

The working tree is never edited. A build is what `make site` runs
(the Makefile's steps, as it types them): `python -m pipeline`,
`python -m pipeline.check`, `.venv/bin/mkdocs build --strict`, then
`python -m pipeline.postbuild site`. Measured:

- cold generation: `python -m pipeline --only P ...` for every page but
  trained-heads, from an empty cache and docs/generated (target
  <= 20 s), with each page's own seconds (its `ran` line);
- trained-heads alone (`--only trained-heads`, cold): it trains a small
  model, so it is reported apart, without a target;
- per round, back to back so load hits all three: the floor (`mkdocs
  build --strict` alone), a warm build after a prose-only edit (target:
  <= 1.3x the floor of the same round), and a warm build after an edit
  of mha_ref/numpy_ref.py (target <= 15 s), each step timed.
"""

import json
import re
import shutil
import subprocess

from bench.timing import ROOT, ratios, run, say, summary

TARGETS = {
    "cold_generation_s": 20.0,
    "numpy_ref_edit_s": 15.0,
    "warm_prose_over_floor": 1.3,
}
TRAINED = "trained-heads"  # trains a model: timed apart, no target
CODE_EDIT = "mha_ref/numpy_ref.py"
# The Makefile's commands, relative to the copy's root (its .venv links
# to ours): VENV := .venv, PY := $(VENV)/bin/python.
VENV = ".venv"
PY = f"{VENV}/bin/python"
GENERATE = [PY, "-m", "pipeline"]
CHECK = [PY, "-m", "pipeline.check"]
MKDOCS = [f"{VENV}/bin/mkdocs", "build", "--strict"]
TYPESET = [PY, "-m", "pipeline.postbuild", "site"]
STEPS = {
    "generate": GENERATE,
    "check": CHECK,
    "mkdocs": MKDOCS,
    "typeset": TYPESET,
}
COLD = (".cache/generated", "docs/generated", "site")  # emptied when cold
RE_RAN = re.compile(r"^\s*ran\s+(\S+)\s+([\d.]+) s\s*$", re.M)
RE_TOTAL = re.compile(r"^\s*total\s+([\d.]+) s", re.M)


def ran_seconds(output):
    """{page: seconds} from the `ran <page> <seconds> s` lines of
    `python -m pipeline`; a page named twice keeps its last."""
    return {page: float(s) for page, s in RE_RAN.findall(output)}


def generation_total(output):
    """Seconds of the last `total ... s` line, or None."""
    found = RE_TOTAL.findall(output)
    return float(found[-1]) if found else None


def run_build(repo):
    """The steps of `make site`, in order: (seconds, {step: seconds},
    output). Raises on the first step that fails."""
    took, steps, output = 0.0, {}, ""
    for name, command in STEPS.items():
        seconds, out = run(command, repo)
        took, steps[name], output = took + seconds, seconds, output + out
    return took, steps, output


def copy_repo(dest):
    """Copy the tracked and unignored files to dest; link the .venv."""
    listing = subprocess.run(
        [
            "git",
            "-C",
            str(ROOT),
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ],
        capture_output=True,
        check=True,
    ).stdout.decode()
    for relative in sorted(set(filter(None, listing.split("\0")))):
        source = ROOT / relative
        if source.is_file() and not source.is_symlink():
            target = dest / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    (dest / ".venv").symlink_to(ROOT / ".venv")


def build_site(repo):
    """One build of the copy, untimed: the site the other parts read."""
    run_build(repo)


def discover_pages(repo):
    """The copy's pages with a notebook: pipeline.build.discover, run
    by the copy's own code."""
    code = (
        "import json; from pipeline.build import Project, discover; "
        "print(json.dumps([t.name for t in discover(Project(root='.'))]))"
    )
    return json.loads(run([PY, "-c", code], repo)[1].strip().splitlines()[-1])


def _empty(repo, folders=COLD):
    for folder in folders:
        shutil.rmtree(repo / folder, ignore_errors=True)


def _target(maximum, measured):
    return {"max": maximum, "median": measured, "met": measured <= maximum}


def bench_build(repo, runs, cold_runs):
    """Cold generation, trained-heads, floor and warm builds.

    A failing step ends the measuring, not the bench: what was measured
    before it is kept, and "failed" holds the step's command and output.
    """
    result = {
        "steps": {name: " ".join(c) for name, c in STEPS.items()},
        "code_edit": CODE_EDIT,
    }
    try:
        _measure(repo, runs, cold_runs, result)
    except RuntimeError as exc:
        say(f"build failed:\n{exc}")
        result["failed"] = str(exc)[-3000:]
    result["targets"] = {
        key: _target(maximum, result[key]["median"])
        for key, maximum in TARGETS.items()
        if key in result
    }
    return result


def _measure(repo, runs, cold_runs, result):
    """bench_build's measures, into result as each is taken."""
    pages = discover_pages(repo)
    cold_pages = result["cold_pages"] = [p for p in pages if p != TRAINED]
    only = [f"--only={p}" for p in cold_pages]
    cold, totals, per_page = [], [], {}
    for i in range(cold_runs):
        _empty(repo)
        seconds, output = run([*GENERATE, *only], repo)
        cold.append(seconds)
        totals.append(generation_total(output))
        for page, took in ran_seconds(output).items():
            per_page.setdefault(page, []).append(took)
        result["cold_generation_s"] = summary(cold)
        if any(t is not None for t in totals):
            result["cold_generation_total_s"] = summary(
                [t for t in totals if t is not None]
            )
        result["cold_pages_s"] = {p: summary(s) for p, s in per_page.items()}
        say(
            f"cold generation {i + 1}/{cold_runs} ({len(cold_pages)} "
            f"pages): {seconds:.1f} s"
        )
    result["trained_heads"] = None
    if TRAINED in pages:  # cold too: its cache was emptied above
        seconds, output = run([*GENERATE, f"--only={TRAINED}"], repo)
        result["trained_heads"] = {
            "wall_s": summary([seconds]),
            "ran_s": ran_seconds(output).get(TRAINED),
        }
        say(f"{TRAINED} alone: {seconds:.1f} s")
    first, _, _ = run_build(repo)  # the rest of a cold build: caches warm
    result["first_site_after_generation_s"] = first
    say(f"first make site after generation: {first:.1f} s")
    page = repo / "docs" / longest_pages(repo)[0]
    code = repo / CODE_EDIT
    result["prose_edit"] = str(page.relative_to(repo))
    floor, prose, edit = [], [], []
    prose_steps, edit_steps = {s: [] for s in STEPS}, {s: [] for s in STEPS}
    reran = set()
    # one round = the three builds back to back, so load affects all;
    # floor and prose swap places every other round
    for i in range(runs):

        def build_floor():
            floor.append(run(MKDOCS, repo)[0])

        def build_prose(i=i):
            with page.open("a") as handle:  # a prose-only edit
                handle.write(f"\n<!-- bench edit {i} -->\n")
            took, steps, _ = run_build(repo)
            prose.append(took)
            for name, seconds in steps.items():
                prose_steps[name].append(seconds)

        for step in (build_floor, build_prose)[:: 1 if i % 2 else -1]:
            step()
        result["floor_s"] = summary(floor)
        result["warm_prose_s"] = summary(prose)
        result["warm_prose_steps_s"] = _summaries(prose_steps)
        result["warm_prose_over_floor"] = ratios(prose, floor)
        with code.open("a") as handle:  # a code edit: its carriers rerun
            handle.write(f"\n# bench edit {i}\n")
        took, steps, output = run_build(repo)
        edit.append(took)
        for name, seconds in steps.items():
            edit_steps[name].append(seconds)
        reran |= set(ran_seconds(output))
        result["numpy_ref_edit_s"] = summary(edit)
        result["numpy_ref_edit_steps_s"] = _summaries(edit_steps)
        result["numpy_ref_edit_reran"] = sorted(reran)
        result["numpy_ref_edit_over_floor"] = ratios(edit, floor)
        say(
            f"round {i + 1}/{runs}: floor {floor[-1]:.1f} s, prose "
            f"{prose[-1]:.1f} s, {CODE_EDIT} {edit[-1]:.1f} s"
        )


def _summaries(by_step):
    return {name: summary(values) for name, values in by_step.items()}


def longest_pages(repo):
    """Pages (relative to docs/) by source length, longest first."""
    pages = list((repo / "docs").glob("*.md"))
    pages.sort(key=lambda p: (-p.stat().st_size, p.name))
    return [p.name for p in pages]
