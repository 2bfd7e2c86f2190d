"""The report: bench/report.json (every run) and bench/report.md."""

import json


def write(report, out):
    """Write report.json and report.md to the folder out."""
    out.mkdir(parents=True, exist_ok=True)
    strip_shapes(report)
    (out / "report.json").write_text(
        json.dumps(report, indent=1, sort_keys=True) + "\n"
    )
    (out / "report.md").write_text(markdown(report))


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
    if "build" in report:
        lines += _build_md(report["build"])
    if "reading" in report:
        lines += _reading_md(report["reading"])
    if "impl" in report:
        lines += _impl_md(report["impl"])
    if "katex" in report:
        lines += _katex_md(report["katex"])
    lines += ["", f"Total bench time: {report['seconds_total']:.0f} s.", ""]
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
    lines = [
        "",
        "## Server-side KaTeX",
        "",
        f"**{'Adopt' if k['adopt'] else 'Not adopted'}**: {k['reason']}.",
        "",
        "| page | formulas | client math (ms) | build-time "
        "math (ms) | client bytes | build-time bytes | same |",
        "|:--|--:|--:|--:|--:|--:|:--|",
    ]
    for p in k["pages"]:
        lines.append(
            f"| {p['page']} | {p['formulas']} | "
            f"{p['client_math_ms']:.0f} | "
            f"{p['prerendered_math_ms']:.0f} | "
            f"{p['client_transfer_bytes']:,} | "
            f"{p['prerendered_transfer_bytes']:,} | "
            f"{'yes' if p['same_rendering'] else 'no'} |"
        )
    step = k["build_step"]
    lines += [
        "",
        f"The node step typesets {step['formulas']} "
        f"formulas on {step['pages']} pages in "
        f"{step['render_ms']['median']:.0f} ms "
        f"({step['node_total_s']['median']:.2f} s with node's "
        f"start-up), {step['errors']} errors.",
    ]
    return lines


def strip_shapes(report):
    """The per-formula shapes served the comparison; keep counts only."""
    for variant in report.get("reading", {}).values():
        for stats in variant.values():
            stats.pop("shapes", None)
