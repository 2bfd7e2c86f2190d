"""The report: bench/report.json (every run) and bench/report.md."""

import json

from bench.engines import markdown as engines_md


def write(report, out):
    """Write report.json and report.md to the folder out."""
    out.mkdir(parents=True, exist_ok=True)
    strip_shapes(report)
    (out / "report.json").write_text(
        json.dumps(report, indent=1, sort_keys=True) + "\n"
    )
    (out / "report.md").write_text(markdown(report))


def merge(report, out, parts):
    """This run's parts over out/report.json's, for a run of some parts.

    The earlier run's environment and total stay at the top (they
    describe the parts kept); this run's go under "partial_run".
    """
    try:
        earlier = json.loads((out / "report.json").read_text())
    except FileNotFoundError:
        return report
    merged = {**earlier, **{p: report[p] for p in parts if p in report}}
    merged["partial_run"] = {
        "parts": list(parts),
        "environment": report["environment"],
        "seconds": report["seconds_total"],
    }
    return merged


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


def markdown(report):
    env = report["environment"]
    lines = [
        "# Benchmark report",
        "",
        "Written by `make bench` (bench/): medians of "
        "several runs; each ratio compares runs of the same round.",
        "",
        "## Environment",
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
        ("engines", engines_md),
    ):
        if part in report:
            lines += _section(part, section, report[part])
    lines += ["", f"Total bench time: {report['seconds_total']:.0f} s."]
    if "partial_run" in report:
        rerun = report["partial_run"]
        lines.append(
            f"Rerun alone afterwards ({rerun['seconds']:.0f} s): "
            f"{', '.join(rerun['parts'])}; its environment is in "
            "report.json under partial_run."
        )
    lines.append("")
    return "\n".join(lines)


def _build_md(b):
    t = b["targets"]
    return [
        "",
        "## Build",
        "",
        "| build | median (s) | runs (s) |",
        "|:--|--:|:--|",
        *(
            f"| {label} | {b[key]['median']:.1f} | "
            f"{', '.join(f'{x:.1f}' for x in b[key]['runs'])} |"
            for label, key in (
                ("cold (empty cache)", "cold_s"),
                ("  of which generation", "cold_generation_s"),
                ("warm, prose edit", "warm_prose_s"),
                ("warm, mha_ref edit", "warm_mha_ref_s"),
                ("floor: mkdocs only", "floor_s"),
            )
        ),
        "",
        f"- warm prose rebuild / floor: "
        f"{b['warm_prose_over_floor']['median']:.2f} (target <= "
        f"{t['warm_prose_over_floor']['max']}: "
        f"{'met' if t['warm_prose_over_floor']['met'] else 'NOT met'})",
        f"- warm mha_ref rebuild / floor: "
        f"{b['warm_mha_ref_over_floor']['median']:.2f}",
        f"- cold build: {b['cold_s']['median']:.1f} s (target < "
        f"{t['cold_s']['max']:.0f} s: "
        f"{'met' if t['cold_s']['met'] else 'NOT met'})",
    ]


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
