"""MkDocs against Zensical, in a temporary copy of the repository.

Three measurements, each engine in the same round so load hits both:

- build: the bare engine build of the generated tree, nothing changed
  since that engine's last build (``mkdocs build --strict`` /
  ``zensical build --strict``);
- warm ``make site`` after a prose-only edit, the Makefile's steps run
  directly (generation, cached; the check, beside MkDocs or before
  Zensical; for Zensical its config and notebook pages; the build; the
  math step), and its ratio to the bare build of the same round;
- reload: each engine's server (``mkdocs serve``, ``zensical serve``)
  on 127.0.0.1; a visible sentence is appended to a page and the page
  is fetched every 20 ms until the server returns it. That is the
  rebuild the live reload waits for (the browser's own reload of the
  page then follows, the same on both).
"""

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request

from bench.site_perf.build_times import (
    CHECK,
    GENERATE,
    MKDOCS,
    VENV,
    run_build,
)
from bench.site_perf.build_times import PY as VENV_PY
from bench.timing import CHILD_ENV, ratios, run, say, summary

PY = sys.executable
CONFIG = [VENV_PY, "-m", "pipeline.zensical"]
# as the Makefile types them: the console scripts of the copy's .venv
BUILD = {
    "mkdocs": MKDOCS,
    "zensical": [
        *(f"{VENV}/bin/zensical", "build", "--strict"),
        *("-f", "zensical.yml"),
    ],
}
SITE = {"mkdocs": "site", "zensical": "site-zensical"}
SERVE = {
    "mkdocs": [PY, "-m", "mkdocs", "serve", "--strict", "-a"],
    "zensical": [PY, "-m", "zensical", "serve", "-f", "zensical.yml", "-a"],
}
TARGET = 1.3  # warm make site / bare engine build
PAGE = "scaling"  # the page edited and fetched


def make_site(repo, engine):
    """The steps of `make site` (the check beside MkDocs: run_build) or
    `make site-zensical` (the check, Zensical's config and notebook
    pages, the build, the math, one after the other); wall seconds."""
    if engine == "mkdocs":
        return run_build(repo)[0]
    typeset = [VENV_PY, "-m", "pipeline.postbuild", SITE[engine]]
    steps = [GENERATE, CHECK, CONFIG, BUILD[engine], typeset]
    return sum(run(c, repo)[0] for c in steps)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read().decode("utf-8", "replace")
    except OSError:
        return None


def _wait_for(url, marker, timeout=300.0):
    """Seconds until url's body holds marker (polled every 20 ms)."""
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        body = _fetch(url)
        if body is not None and marker in body:
            return time.perf_counter() - start
        time.sleep(0.02)
    raise TimeoutError(f"{url} never showed {marker!r} in {timeout:.0f} s")


@contextlib.contextmanager
def _server(repo, engine):
    port = _free_port()
    log = repo / f".bench-serve-{engine}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*SERVE[engine], f"127.0.0.1:{port}"],
            cwd=repo,
            env=CHILD_ENV,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield f"http://127.0.0.1:{port}/{PAGE}/"
    except TimeoutError as exc:
        tail = log.read_text(errors="replace")[-2000:]
        raise TimeoutError(f"{exc}; {engine} serve said:\n{tail}") from exc
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def reload_times(repo, engine, edits):
    """Seconds from a prose edit to the server returning it, per edit."""
    page = repo / "docs" / f"{PAGE}.md"
    original = page.read_text(encoding="utf-8")
    times = []
    try:
        with _server(repo, engine) as url:
            _wait_for(url, "</html>")  # the first build is served
            time.sleep(1.0)  # watchers settle
            for i in range(edits):
                marker = f"Bench reload sentence {engine} {i}."
                page.write_text(f"{original}\n{marker}\n", encoding="utf-8")
                times.append(_wait_for(url, marker))
                time.sleep(0.5)
    finally:
        page.write_text(original, encoding="utf-8")
    return times


def bench_engines(repo, rounds, edits=5):
    """Build times, warm make site ratios and reload times of both."""
    run(GENERATE, repo)
    run(CONFIG, repo)
    for engine in BUILD:  # a first build of each: caches warm
        make_site(repo, engine)
    page = repo / "docs" / f"{PAGE}.md"
    bare = {e: [] for e in BUILD}
    warm = {e: [] for e in BUILD}
    for i in range(rounds):
        order = list(BUILD)[:: 1 if i % 2 else -1]  # swap every round
        for engine in order:
            # untimed first: the other engine's edit, built; then the
            # bare build, of a tree with nothing changed since
            run(BUILD[engine], repo)
            bare[engine].append(run(BUILD[engine], repo)[0])
            with page.open("a") as handle:  # a prose-only edit
                handle.write(f"\n<!-- bench edit {engine} {i} -->\n")
            warm[engine].append(make_site(repo, engine))
        say(
            f"engines round {i + 1}/{rounds}: "
            + ", ".join(
                f"{e} build {bare[e][-1]:.2f} s, make site {warm[e][-1]:.2f} s"
                for e in BUILD
            )
        )
    result = {"page_edited": f"docs/{PAGE}.md", "target": TARGET}
    for engine in BUILD:
        ratio = ratios(warm[engine], bare[engine])
        result[engine] = {
            "build_s": summary(bare[engine]),
            "warm_make_site_s": summary(warm[engine]),
            "warm_make_site_over_build": ratio,
            "target_met": ratio["median"] <= TARGET,
            "reload_s": summary(reload_times(repo, engine, edits)),
        }
        say(f"{engine}: reload {result[engine]['reload_s']['median']:.2f} s")
    return result


def markdown(e):
    """The report's section on the two engines."""
    rows = [
        ("bare build", "build_s"),
        ("warm `make site`, prose edit", "warm_make_site_s"),
        ("server reload after a prose edit", "reload_s"),
    ]
    lines = [
        "",
        "## Engines: MkDocs and Zensical",
        "",
        "Bare build: the engine alone, on a tree with nothing changed since "
        "its last build. Warm `make site`: the target's steps after a "
        "prose edit, the engine's rebuild of the edited tree among them.",
        "",
        "| measure | MkDocs (s) | Zensical (s) | runs MkDocs / Zensical |",
        "|:--|--:|--:|:--|",
    ]
    for label, key in rows:
        m, z = e["mkdocs"][key], e["zensical"][key]
        runs = " / ".join(
            ", ".join(f"{x:.2f}" for x in r["runs"]) for r in (m, z)
        )
        lines.append(
            f"| {label} | {m['median']:.2f} | {z['median']:.2f} | {runs} |"
        )
    lines.append("")
    for engine, name in (("mkdocs", "MkDocs"), ("zensical", "Zensical")):
        r = e[engine]["warm_make_site_over_build"]["median"]
        met = "met" if e[engine]["target_met"] else "NOT met"
        lines.append(
            f"- {name}: warm `make site` / bare build = {r:.2f} "
            f"(target <= {e['target']}: {met})"
        )
    lines.append(f"- prose edits appended to {e['page_edited']}")
    return lines
