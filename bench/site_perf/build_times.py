"""Build times, in a temporary copy of the repository.

The working tree is never edited. A build is what `make site` runs
(the Makefile's steps, as it types them): `python -m pipeline`, then
`python -m pipeline.check` beside `.venv/bin/mkdocs build --strict`,
then `python -m pipeline.postbuild site`. Measured:

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
import os
import re
import shutil
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.timing import ROOT, ratios, run, say, summary

TARGETS = {
    "cold_generation_s": 20.0,
    "numpy_ref_edit_s": 15.0,
    "warm_prose_over_floor": 1.3,
}
TRAINED = "trained-heads"  # trains a model: timed apart, no target
CODE_EDIT = "mha_ref/numpy_ref.py"
# The function edited: the one the contributor's-loop issue names,
# numpy_ref.causal_mask (its whole section; its end marker sits in its
# body, so the edit is one of the function and reruns the pages that ran
# it, not every page carrying the file).
CODE_SECTION = "causal-mask"
# The Makefile's commands, relative to the copy's root (its .venv links
# to ours): VENV := .venv, PY := $(VENV)/bin/python.
VENV = ".venv"
STAMP = f"{VENV}/.installed-stamp"
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
# emptied when cold: every cache (the pages' records, the figures, the
# facts of each file, the templates, the notebook pages) and the outputs
COLD = (".cache", "docs/generated", "site")
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
    """The steps of `make site`, as it runs them (the check beside
    MkDocs): (wall seconds, {step: its own seconds}, output). Raises on
    the first step that fails."""
    start, steps, output = time.perf_counter(), {}, ""
    steps["generate"], output = run(GENERATE, repo)
    with ThreadPoolExecutor(max_workers=1) as beside:
        checking = beside.submit(run, CHECK, repo)
        steps["mkdocs"], built = run(MKDOCS, repo)
        steps["check"], checked = checking.result()
    steps["typeset"], typeset = run(TYPESET, repo)
    output += checked + built + typeset
    return time.perf_counter() - start, steps, output


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
    """The copy's pages with a notebook: generation.discover, run
    by the copy's own code."""
    code = (
        "import json; from pipeline.generation import Project, discover; "
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
    _, section = shown_section(repo)
    result["code_section"] = section
    result["prose_edit"] = str(page.relative_to(repo))
    floor, prose, edit, comment = [], [], [], []
    prose_steps, edit_steps = {s: [] for s in STEPS}, {s: [] for s in STEPS}
    reran, commented = set(), set()
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
        # a code edit, of the function a page shows: the pages that ran
        # it rerun
        _edit_section(code, section, f"bench edit {i}")
        took, steps, output = run_build(repo)
        edit.append(took)
        for name, seconds in steps.items():
            edit_steps[name].append(seconds)
        reran |= set(ran_seconds(output))
        result["numpy_ref_edit_s"] = summary(edit)
        result["numpy_ref_edit_steps_s"] = _summaries(edit_steps)
        result["numpy_ref_edit_reran"] = sorted(reran)
        result["numpy_ref_edit_over_floor"] = ratios(edit, floor)
        # a comment in the same function: shown at once, nothing reruns
        _edit_section(code, section, f"bench comment {i}", comment=True)
        took, _, output = run_build(repo)
        comment.append(took)
        commented |= set(ran_seconds(output))
        result["numpy_ref_comment_s"] = summary(comment)
        result["numpy_ref_comment_reran"] = sorted(commented)
        say(
            f"round {i + 1}/{runs}: floor {floor[-1]:.1f} s, prose "
            f"{prose[-1]:.1f} s, {CODE_EDIT} {edit[-1]:.1f} s, its "
            f"comment {comment[-1]:.1f} s"
        )


def _summaries(by_step):
    return {name: summary(values) for name, values in by_step.items()}


def longest_pages(repo):
    """Pages (relative to docs/) by source length, longest first."""
    pages = list((repo / "docs").glob("*.md"))
    pages.sort(key=lambda p: (-p.stat().st_size, p.name))
    return [p.name for p in pages]


# ------------------------------------------------------------ make serve

SERVE_TARGETS = {"fresh_serve_s": 60.0, "numpy_ref_edit_served_s": 15.0}
SERVE_TIMEOUT_S = 600.0
RE_SHOWN = re.compile(
    r'^\s*--8<--\s+"mha_ref/numpy_ref\.py:([a-z][-_0-9a-z]*)"'
)


def shown_section(repo, section=CODE_SECTION):
    """(page, section): the first page that shows ``section`` of
    numpy_ref."""
    for page in sorted((repo / "docs").glob("*.md")):
        for line in page.read_text(encoding="utf-8").splitlines():
            match = RE_SHOWN.match(line)
            if match and match[1] == section:
                return page.stem, match[1]
    raise RuntimeError(f"no page shows mha_ref/numpy_ref.py:{section}")


def _fetch(url):
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return reply.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError):
        return None


def _wait(predicate, timeout, process):
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if predicate():
            return time.perf_counter() - start
        if process.poll() is not None:
            raise RuntimeError(f"make serve exited ({process.returncode})")
        time.sleep(0.1)
    raise RuntimeError(f"not served within {timeout:.0f} s")


def _edit_section(path, section, marker, comment=False):
    """A line inside ``section``, just above its end marker: the page
    shows it, the notebook download carries it. A function's end marker
    sits in its body (CONTRIBUTING), so the edit is one of that function,
    as a contributor's is. By default a statement (``_edit = "<marker>"``,
    after the function's return: it changes the code, not what it
    computes), so the pages that ran the function rerun; ``comment``: a
    comment line, which changes no code (code_units.code_digest), so the
    pages show it without a rerun."""
    lines = path.read_text(encoding="utf-8").split("\n")
    end = next(
        i
        for i, s in enumerate(lines)
        if s.strip() == f"# --8<-- [end:{section}]"
    )
    indent = lines[end][: len(lines[end]) - len(lines[end].lstrip())]
    line = f"# {marker}" if comment else f"_edit = {marker!r}"
    lines.insert(end, indent + line)
    path.write_text("\n".join(lines), encoding="utf-8")


def make_command(repo, target):
    """make in the copy, with the Makefile's venv (the link) and its
    stamp left alone: never a venv set-up or pip install in ours."""
    return [
        "make",
        "-C",
        str(repo),
        "-o",
        STAMP,
        f"VENV={VENV}",
        f"PY={VENV}/bin/python",
        target,
    ]


def bench_serve(repo, runs):
    """`make serve` as typed, in the copy: from empty outputs to the site
    served (the venv exists: set-up not timed), then an edit of a
    numpy_ref section to the moment its page and its notebook download,
    as served, both show it. Ctrl-C then must leave nothing running."""
    import signal
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/"
    page, section = shown_section(repo)
    _empty(repo, (".cache", "docs/generated", "site"))
    command = [*make_command(repo, "serve"), f"HOST=127.0.0.1:{port}"]
    result = {"command": " ".join(command), "page": page, "section": section}
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    said = []  # its lines: the first round's end is its "total" line
    threading.Thread(
        target=lambda: said.extend(process.stdout), daemon=True
    ).start()
    edits = []
    try:
        fresh = _wait(
            lambda: _fetch(url) is not None, SERVE_TIMEOUT_S, process
        )
        result["fresh_serve_s"] = summary([fresh])
        say(f"fresh make serve: serving after {fresh:.1f} s")
        page_url = f"{url}{page}/"
        download = f"{url}generated/notebooks/{page}/{page}.ipynb"
        _wait(lambda: _fetch(download) is not None, SERVE_TIMEOUT_S, process)
        first = _wait(  # the first round done (its slowest page too)
            lambda: any(line.startswith("  total") for line in said),
            SERVE_TIMEOUT_S,
            process,
        )
        result["first_round_after_serving_s"] = first
        time.sleep(2.0)  # its reload
        for i in range(runs):
            marker = f"bench serve edit {i} {time.time_ns()}"
            _edit_section(repo / CODE_EDIT, section, marker)

            def both(marker=marker):
                shown = _fetch(page_url) or ""
                carried = _fetch(download) or ""
                return marker in shown and marker in carried

            edits.append(_wait(both, SERVE_TIMEOUT_S, process))
            took = edits[-1]
            say(f"edit {i + 1}/{runs}: page and download after {took:.1f} s")
            time.sleep(1.0)
        result["numpy_ref_edit_served_s"] = summary(edits)
    except RuntimeError as exc:
        say(f"serve failed: {exc}")
        result["failed"] = str(exc)
    finally:
        try:
            os.killpg(process.pid, signal.SIGINT)  # Ctrl-C, as typed
            process.wait(timeout=30)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(process.pid, signal.SIGKILL)
        time.sleep(1.0)
        result["left_running"] = _session_left(process.pid)
    result["targets"] = {
        key: _target(maximum, result[key]["median"])
        for key, maximum in SERVE_TARGETS.items()
        if key in result
    }
    return result


def _session_left(session):
    """How many processes of make serve's session still run."""
    left = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == session and fields[0] != "Z":  # session id
            left += 1
    return left


def serve_md(s):
    """The report's section on `make serve`."""
    t = s["targets"]
    lines = [
        "",
        "## Serve",
        "",
        f"`{s['command']}` in a fresh copy, from empty docs/generated/ and "
        ".cache/ (the .venv exists: its set-up is not timed), until the "
        "site answers; then a statement added to the section "
        f"`{s['section']}` of mha_ref/numpy_ref.py (the pages that ran it "
        f"rerun) until the served page `{s['page']}/` and its notebook "
        "download both show it.",
        "",
        "| measure | median (s) | target | met | runs (s) |",
        "|:--|--:|--:|:--|:--|",
    ]
    for key, what in (
        ("fresh_serve_s", "fresh `make serve`, until it serves"),
        ("numpy_ref_edit_served_s", "numpy_ref.py edit, to page and download"),
    ):
        if key in s:
            runs = ", ".join(f"{v:.1f}" for v in s[key]["runs"])
            met = "met" if t[key]["met"] else "NOT met"
            lines.append(
                f"| {what} | {s[key]['median']:.1f} | "
                f"<= {t[key]['max']:.0f} s | {met} | {runs} |"
            )
    lines.append("")
    if s.get("first_round_after_serving_s", 0) > 0:  # a page still ran
        lines.append(
            "It serves before its first round of generation has ended (the "
            "slowest page still runs); that round ended "
            f"{s['first_round_after_serving_s']:.1f} s after the notebook "
            f"download of `{s['page']}/` was first served."
        )
    lines.append(
        f"Processes of its session left after Ctrl-C: {s['left_running']}."
    )
    if "failed" in s:
        lines.append(f"Failed: {s['failed']}")
    return lines
