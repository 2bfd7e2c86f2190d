"""The report: bench/report.json (every run) and bench/report.md."""

import json

from bench.roofline import markdown as roofline_md
from bench.site_perf.build_times import TARGETS as BUILD_TARGETS
from bench.site_perf.build_times import serve_md
from bench.site_perf.engines import markdown as engines_md
from bench.site_perf.weight import markdown as weight_md

# The parts a page quotes, each also written alone beside report.json
# (out/<part>.json): the page reads that file, and its notebook carries
# it instead of the whole report. Part -> the page that reads it.
PAGE_PARTS = {"decode": "grouped-heads", "impl": "tiled", "roofline": "cost"}


def write(report, out):
    """Write report.json, report.md and each page part's own file to the
    folder out."""
    out.mkdir(parents=True, exist_ok=True)
    strip_shapes(report)
    report["targets"] = targets(report)
    (out / "report.json").write_text(_json(report))
    (out / "report.md").write_text(markdown(report))
    for part in PAGE_PARTS:
        if part in report:
            (out / f"{part}.json").write_text(_json(report[part]))


def _json(value):
    return json.dumps(value, indent=1, sort_keys=True) + "\n"


def merge(report, out, parts):
    """This run's parts over out/report.json's, for a run of some parts.

    The earlier run's environment and total stay at the top (they
    describe the parts kept); this run's is added to "partial_runs",
    after the earlier partial runs' (each names its parts).
    """
    try:
        earlier = json.loads((out / "report.json").read_text())
    except FileNotFoundError:
        return report
    merged = {**earlier, **{p: report[p] for p in parts if p in report}}
    for part in parts:  # what measured it, where it is read
        if isinstance(merged.get(part), dict):
            merged[part]["measured_in"] = {
                key: report["environment"].get(key) for key in MEASURED_IN
            }
    earlier_runs = merged.pop("partial_runs", [])
    if "partial_run" in merged:  # one run, as reports kept it before
        earlier_runs.append(merged.pop("partial_run"))
    earlier_runs = [  # each with the parts of it this report still shows
        {**run, "parts": [p for p in run["parts"] if p not in parts]}
        for run in earlier_runs
    ]
    merged["partial_runs"] = [
        *(run for run in earlier_runs if run["parts"]),
        {
            "parts": list(parts),
            "environment": report["environment"],
            "seconds": report["seconds_total"],
        },
    ]
    return merged


def _measured_in(part, top=None):
    """A line saying where a part rerun alone was measured (the
    environment above describes the run that wrote it): from its
    ``measured_in``, or from an environment of its own whose commit is
    not the full run's (a part a page quotes, written alone)."""
    if not isinstance(part, dict):
        return []
    found = part.get("measured_in")
    own = part.get("environment")
    commit = own.get("commit") if isinstance(own, dict) else None
    if not found and commit and commit != (top or {}).get("commit"):
        found = {key: own.get(key) for key in MEASURED_IN if key in own}
    if not found:
        return []
    said = ", ".join(f"{key} {value}" for key, value in found.items())
    return ["", f"Measured in a later run: {said}."]


def _section(part, section, value):
    """A part's Markdown; a part kept from an older report format (a
    run of some parts keeps the others) says so instead of failing."""
    try:
        return section(value)
    except (KeyError, TypeError) as exc:
        return [
            "",
            f"## {part}",
            "",
            f"Kept from an earlier run in an older format (no {exc}): "
            f"rerun `python -m bench --only {part}`.",
        ]


# What a part rerun alone says of the run that measured it.
MEASURED_IN = ("commit", "cpu", "cores_available", "cpu_probe_s", "tree_dirty")


def markdown(report):
    env = report["environment"]
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (bench/): medians of the runs shown; "
        "each ratio compares runs of the same round.",
        "",
        "## Environment",
        "",
        "Of the full run that wrote this report. A part measured in a "
        "later run names that run's commit and CPU under its tables; the "
        "last line lists those runs (`python -m bench --only`).",
        "",
        "| | |",
        "|:--|:--|",
    ]
    for key, value in env.items():
        lines.append(f"| {key} | {value} |")
    for part, section in (
        ("build", _build_md),
        ("reading", _reading_md),
        ("impl", _impl_md),
        ("katex", _katex_md),
        ("decode", _decode_md),
        ("roofline", roofline_md),
        ("engines", engines_md),
        ("suite", _suite_md),
        ("serve", serve_md),
        ("weight", weight_md),
    ):
        if part in report:
            lines += _section(part, section, report[part])
            lines += _measured_in(report[part], report.get("environment"))
    lines += ["", f"Total bench time: {report['seconds_total']:.0f} s."]
    reruns = report.get("partial_runs", [])
    if "partial_run" in report:  # a report kept from before the list
        reruns = [*reruns, report["partial_run"]]
    if reruns:
        lines.append(
            "Parts measured in later runs, in this order (each run's "
            "environment is in report.json under partial_runs): "
            + "; ".join(_rerun(r) for r in reruns)
            + "."
        )
    lines.append("")
    return "\n".join(lines)


def _rerun(run):
    """One partial run in a few words: its parts, time, commit, CPU."""
    env = run.get("environment", {})
    said = [f"{run['seconds']:.0f} s"]
    said += [
        f"{key} {env[key]}"
        for key in ("commit", "cores_available", "cpu_probe_s")
        if env.get(key) is not None
    ]
    return f"{', '.join(run['parts'])} ({', '.join(said)})"


def _met(target):
    return "met" if target["met"] else "NOT met"


def _runs(values, digits=1):
    return ", ".join(f"{x:.{digits}f}" for x in values)


def _build_md(b):
    """The build section; a build that failed part-way shows what it
    measured before the failing step, then that step's output."""
    t, steps, code = b["targets"], b["steps"], b["code_edit"]
    prose = b.get("prose_edit", "a page")
    lines = [
        "",
        "## Build",
        "",
        "In a temporary copy of the repository. A build is what `make "
        f"site` runs (Makefile): `{steps['generate']}`, then "
        f"`{steps['check']}` beside `{steps['mkdocs']}` (two processes at "
        f"once), then `{steps['typeset']}`; a build's time is its wall "
        "time, each step's its own. Warm builds keep the cache of the "
        "build before.",
        "",
        "| measure | what was measured | median | target | met | runs |",
        "|:--|:--|--:|--:|:--|:--|",
    ]
    for key, label, what in (
        (
            "cold_generation_s",
            "cold generation",
            "`python -m pipeline --only P ...`, every page but "
            "trained-heads"
            + (f" ({len(b['cold_pages'])} pages)" if "cold_pages" in b else "")
            + ", from an empty cache and docs/generated",
        ),
        (
            "numpy_ref_edit_s",
            f"{code} edit",
            f"warm `make site` after a statement added to the function "
            f"of {code} that section `{b.get('code_section', '?')}` shows, "
            "after its `return` (the code changes, not what it computes: "
            "the pages that ran it rerun)",
        ),
        (
            "warm_prose_over_floor",
            "prose edit / floor",
            f"warm `make site` after a comment appended to {prose}, over "
            f"`{steps['mkdocs']}` alone, warm, in the same round (the "
            "floor, below)",
        ),
    ):
        maximum = BUILD_TARGETS[key]
        seconds = key.endswith("_s")
        bound = f"<= {maximum:.0f} s" if seconds else f"<= {maximum}"
        if key not in b:
            lines.append(
                f"| {label} | {what} | not measured (a step failed "
                f"first) | {bound} | - | |"
            )
            continue
        digits, unit = (1, " s") if seconds else (2, "")
        lines.append(
            f"| {label} | {what} | {b[key]['median']:.{digits}f}{unit} | "
            f"{bound} | {_met(t[key])} | "
            f"{_runs(b[key]['runs'], digits)}{unit} |"
        )
    rows = [
        (label, key)
        for label, key in (
            (
                "cold generation, every page but trained-heads",
                "cold_generation_s",
            ),
            (
                "cold generation, as the pipeline's `total` line says",
                "cold_generation_total_s",
            ),
            ("warm `make site`, prose edit", "warm_prose_s"),
            (f"warm `make site`, {code} edit", "numpy_ref_edit_s"),
            (
                "warm `make site`, a comment in the same function (no "
                "page reruns: its code is unchanged)",
                "numpy_ref_comment_s",
            ),
            (
                "floor: `mkdocs build --strict` alone, warm (every page's "
                "HTML and search entries from the page cache, none "
                "converted)",
                "floor_s",
            ),
        )
        if key in b
    ]
    trained = b.get("trained_heads")
    if rows or trained:
        lines += ["", "| build | median (s) | runs (s) |", "|:--|--:|:--|"]
    for label, key in rows:
        lines.append(
            f"| {label} | {b[key]['median']:.1f} | {_runs(b[key]['runs'])} |"
        )
    if trained:
        ran = trained["ran_s"]
        lines.append(
            "| trained-heads alone, cold (no target: it trains a model) | "
            f"{trained['wall_s']['median']:.1f} | "
            f"{_runs(trained['wall_s']['runs'])}"
            f"{f' (its `ran` line: {ran:.1f})' if ran is not None else ''} |"
        )
    if "warm_prose_steps_s" in b:
        edit = b.get("numpy_ref_edit_steps_s", {})
        lines += [
            "",
            f"| step of a warm `make site` | prose edit (s) | {code} edit "
            "(s) |",
            "|:--|--:|--:|",
            *(
                f"| `{command}`{' (beside MkDocs)' if name == 'check' else ''}"
                f" | {b['warm_prose_steps_s'][name]['median']:.2f} | "
                + (f"{edit[name]['median']:.2f}" if name in edit else "-")
                + " |"
                for name, command in steps.items()
            ),
        ]
    notes = []
    if "numpy_ref_edit_over_floor" in b:
        notes.append(
            f"- warm {code} rebuild / floor: "
            f"{b['numpy_ref_edit_over_floor']['median']:.2f}; pages it "
            f"reran: {', '.join(b['numpy_ref_edit_reran']) or 'none'}"
        )
    if "numpy_ref_comment_reran" in b:
        notes.append(
            "- pages the comment edit reran: "
            f"{', '.join(b['numpy_ref_comment_reran']) or 'none'}"
        )
    if b.get("cold_pages_s"):
        per_page = sorted(
            b["cold_pages_s"].items(), key=lambda kv: -kv[1]["median"]
        )
        notes.append(
            "- cold generation per page (its `ran` line, median s; pages "
            "run side by side, two per core): "
            + ", ".join(f"{page} {s['median']:.1f}" for page, s in per_page)
        )
    if "trained_heads" in b and not trained:
        notes.append("- no trained-heads page in this tree: not timed")
    if notes:
        lines += ["", *notes]
    if "failed" in b:
        lines += [
            "",
            "A build step failed, so the measures after it are missing:",
            "",
            "```text",
            b["failed"].rstrip(),
            "```",
        ]
    return lines


def _suite_md(s):
    lines = [
        "",
        "## Test suite",
        "",
        "`make test` and `make fast` as typed, in a fresh copy of the "
        "repository (made a git repository with one commit, as a clone "
        "is): `make test` from an empty "
        + ", ".join(f"{f}/" for f in s["emptied"])
        + " (generation and both sites' builds), then `make fast` on "
        "what `make test` left (its generation has nothing to run); the "
        ".venv exists, so its set-up is not timed: "
        f"`{s['command']}`, on {s['cores']} cores. A target is met only "
        "by runs that all passed. Seconds on this shared machine kind "
        "vary by day with the host's load; read them against "
        "`cpu_probe_s` of the run that measured them (a fixed loop on "
        "one core, timed as the bench starts).",
        "",
        "| command | median (s) | target | met | runs (s) | pytest | passed |",
        "|:--|--:|--:|:--|:--|:--|:--|",
    ]
    failures = []
    for target in ("test", "fast"):
        r = s.get(target)
        if not r:
            why = "--quick" if s.get("quick") else "0 runs"
            lines.append(f"| `make {target}` | not run ({why}) | | | | | |")
            continue
        t = r["target"]
        pytest = "; ".join(_pytest_lines(run) for run in r["runs"])
        lines.append(
            f"| `make {target}` | {r['seconds']['median']:.1f} | "
            f"<= {t['max']:.0f} s | {_met(t)} | "
            f"{_runs(r['seconds']['runs'])} | {pytest} | "
            f"{'yes' if r['passed'] else 'NO'} |"
        )
        for i, run in enumerate(r["runs"]):
            if not run["passed"]:
                failures.append((target, i, run))
    parts = []
    for target in ("test", "fast"):
        for i, run in enumerate((s.get(target) or {}).get("runs", [])):
            gen, th = run["generation_total_s"], run["trained_heads_ran_s"]
            tests = (run["pytest"] or {}).get("seconds")
            units = (run.get("pytest_units") or {}).get("seconds")
            said = [
                *([f"generation {gen:.1f} s"] if gen is not None else []),
                *([f"trained-heads {th:.1f} s"] if th is not None else []),
                *(
                    [f"unit tests beside the build {units:.1f} s"]
                    if units is not None
                    else []
                ),
                *([f"pytest {tests:.1f} s"] if tests is not None else []),
            ]
            if said:
                parts.append(f"`make {target}` run {i + 1}: {', '.join(said)}")
    if parts:
        lines += [
            "",
            "- its parts, some side by side (the pipeline's `total` line, "
            "trained-heads within it, the unit tests beside the build, "
            "pytest's own time): " + "; ".join(parts),
        ]
    for target, i, run in failures:
        lines += [
            "",
            f"`make {target}` run {i + 1} failed (exit status "
            f"{run['returncode']}); its last lines:",
            "",
            "```text",
            *run["tail"],
            "```",
        ]
    return lines


def _reading_md(r):
    lines = [
        "",
        "## Reading (cold cache, headless Chromium)",
        "",
        "| page | formulas | all math typeset (ms) | in katex.render "
        "(ms) | parsed (ms) | DOMContentLoaded (ms) | load (ms) | "
        "bytes | requests |",
        "|:--|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for page, s in r["client"].items():
        lines.append(
            f"| {page} | {s['formulas']} | {s['math_ms']['median']:.0f} | "
            f"{s['typeset_ms']['median']:.0f} | "
            f"{s['dom_interactive_ms']['median']:.0f} | "
            f"{s['dom_content_loaded_ms']['median']:.0f} | "
            f"{s['load_ms']['median']:.0f} | "
            f"{s['transfer_bytes']['median']:,} | {s['requests']} |"
        )
    return lines


def _impl_md(m):
    lines = [
        "",
        f"## Implementations (causal, B={m['batch']}, "
        f"H={m['n_head']}, d_head={m['d_head']}, {m['dtype']}, "
        f"{m['threads']} thread(s))",
        "",
        "| T | implementation | time (ms) | time / SDPA | peak "
        "(MiB) | peak / SDPA |",
        "|--:|:--|--:|--:|--:|--:|",
    ]
    for r in m["rows"]:
        mem = r["memory_vs_sdpa"]
        lines.append(
            f"| {r['t']} | {r['impl']} | {r['seconds'] * 1e3:.1f} | "
            f"{r['time_vs_sdpa']:.2f} | {r['peak_bytes'] / 2**20:.1f} | "
            f"{'n/a' if mem is None else f'{mem:.2f}'} |"
        )
    lines += [
        "",
        "Peak memory: NumPy by tracemalloc, torch by the "
        "profiler's per-op CPU bytes (see report.json).",
    ]
    return lines


def _katex_md(k):
    step, t = k["typeset_step"], k["targets"]
    view = k["viewport"]
    lines = [
        "",
        "## Math on the first paint (typeset at build time)",
        "",
        f"`make site` typesets {step['formulas']} formulas on "
        f"{step['pages']} pages in {step['seconds']['median']:.2f} s "
        "(`python -m pipeline.postbuild`, KaTeX in an embedded V8); the "
        f"HTML grows from {step['html_bytes_before']:,} to "
        f"{step['html_bytes_after']:,} bytes. Every page, {k['runs']} "
        f"cold-cache visits at {view['width']} x {view['height']}: "
        "*build* is the site as `make site` ships it, *client* the same "
        "HTML typeset in the browser (as `make serve` shows it). Math / "
        "FCP: time until the first screen shows no raw TeX over the first "
        "contentful paint.",
        "",
        f"- worst math / FCP: {k['worst']['build']['math_over_fcp']:.2f} "
        f"(target <= {t['math_over_fcp']['max']}: "
        f"{'met' if t['math_over_fcp']['met'] else 'NOT met'}); client "
        f"{k['worst']['client']['math_over_fcp']:.2f}",
        f"- worst layout shift: {k['worst']['build']['layout_shift']:.3f} "
        f"(target <= {t['layout_shift']['max']}: "
        f"{'met' if t['layout_shift']['met'] else 'NOT met'}); client "
        f"{k['worst']['client']['layout_shift']:.3f}",
        *_measured_by(k),
        "",
        "| page | arithmatex formulas | FCP (ms) | math / FCP | layout "
        "shift | bytes "
        "| KaTeX JS | client: math / FCP | client: layout shift | "
        "client: bytes |",
        "|:--|--:|--:|--:|--:|--:|:--|--:|--:|--:|",
    ]
    for page, b in k["pages"]["build"].items():
        c = k["pages"]["client"][page]
        lines.append(
            f"| {page or '(start)'} | {b['formulas']} | "
            f"{b['fcp_ms']['median']:.0f} | "
            f"{b['math_over_fcp']['median']:.2f} | "
            f"{b['layout_shift']['median']:.3f} | "
            f"{b['transfer_bytes']:,} | {'yes' if b['katex_js'] else 'no'} "
            f"| {c['math_over_fcp']['median']:.2f} | "
            f"{c['layout_shift']['median']:.3f} | {c['transfer_bytes']:,} |"
        )
    return lines


def _decode_md(d):
    env = d["environment"]
    lines = [
        "",
        f"## One decode step against the number of KV heads "
        f"(d_model={d['d_model']}, H={d['n_head']}, RoPE, cache of "
        f"{d['cache_length']} positions, B={d['batch']}, {d['dtype']}, "
        f"{d['threads']} thread(s))",
        "",
        "| KV heads | reference step (ms) | SDPA step (ms) | cache "
        "K+V per layer (MiB) |",
        "|--:|--:|--:|--:|",
    ]
    for r in d["rows"]:
        lines.append(
            f"| {r['n_kv_head']} | {r['reference_s'] * 1e3:.2f} | "
            f"{r['sdpa_s'] * 1e3:.2f} | {r['cache_bytes'] / 2**20:.0f} |"
        )
    lines += [
        "",
        f"Medians of {d['runs']} runs; measured at commit "
        f"{env['commit']} with torch {env['torch']} on {env['cpu']} "
        f"({env['cores_available']} cores available).",
    ]
    return lines


def _measured_by(section):
    """A line naming the run that measured a section, when it says."""
    env = section.get("environment")
    if not env:
        return []
    return [
        f"- measured at commit {env['commit']}"
        f"{' (uncommitted changes)' if env.get('tree_dirty') else ''} on "
        f"{env['cpu']} ({env['cores_available']} cores), {env['chromium']}"
    ]


def strip_shapes(report):
    """The per-formula shapes served the comparison; keep counts only."""
    for variant in report.get("reading", {}).values():
        for stats in variant.values():
            stats.pop("shapes", None)


def targets(report):
    """Every part's targets in one place: {"part.name": {"max", "met",
    ...}}, from the parts this report holds."""
    found = {}
    for part, value in report.items():
        if isinstance(value, dict) and isinstance(value.get("targets"), dict):
            for name, target in value["targets"].items():
                found[f"{part}.{name}"] = target
    engines = report.get("engines")
    if isinstance(engines, dict) and "target" in engines:
        for engine in ("mkdocs", "zensical"):
            if engine in engines:
                ratio = engines[engine]["warm_make_site_over_build"]
                found[f"engines.{engine}.warm_make_site_over_build"] = {
                    "max": engines["target"],
                    "median": ratio["median"],
                    "met": engines[engine]["target_met"],
                }
    return found


def _pytest_lines(run):
    """pytest's summary of a run: the unit tests' (make test runs them
    beside the build) and the others'."""
    line = (run["pytest"] or {}).get("line", "no pytest summary")
    units = run.get("pytest_units")
    return f"units: {units['line']}; then: {line}" if units else line
