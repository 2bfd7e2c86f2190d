"""Benchmarks: build times, reading time, implementations, KaTeX on build.

    python -m scripts.bench                    # everything (make bench)
    python -m scripts.bench --only impl,katex  # build, reading, impl, katex
    python -m scripts.bench --quick            # fewer runs and sizes

Writes bench/report.json and bench/report.md. Every figure is the median
of several runs, and every ratio compares figures measured in the same
run, so a busy machine slows both sides. This is a benchmark, not a test:
it asserts nothing, and reports each target as met or not.

- build: in a temporary copy of the repository (the working tree is never
  edited): a cold build (empty cache), a warm build after a prose-only
  edit, a warm build after an mha_ref edit, and the floor, `mkdocs build
  --strict` with generation skipped (MHA_REF_SKIP_GENERATION=1).
- reading: headless Chromium against the built site on 127.0.0.1, a new
  browser context (cold cache) per run: milliseconds from navigation
  start until every formula is typeset, and bytes transferred.
- impl: causal attention, B=1, H=8, d_head=64, float32, on this CPU:
  median time and peak memory of each implementation, as ratios to SDPA.
  One thread per library by default (--threads): on a shared machine,
  BLAS and OpenMP threads that wait for busy cores swamp the comparison.
- katex: formulas typeset at build time (node + the vendored KaTeX)
  against in the browser: time to typeset math, bytes, same rendering.
"""

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from scripts.tiled import peak_bytes_numpy, peak_bytes_torch_cpu

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench"
PARTS = ("build", "reading", "impl", "katex")
TARGETS = {"warm_prose_over_floor": 1.3, "cold_s": 60.0}
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu",
                 "--disable-background-networking",
                 "--disable-component-update", "--disable-sync",
                 "--no-first-run"]
KATEX_JS = "docs/assets/katex/katex.min.js"
IMPL_SHAPE = {"batch": 1, "n_head": 8, "d_head": 64}
IMPL_LENGTHS = {256: 7, 512: 5, 1024: 5, 2048: 3, 4096: 2}  # T: runs
QUICK_LENGTHS = {256: 3, 512: 3, 1024: 2}


def say(*args):
    print("[bench]", *args, flush=True)


def summary(values):
    """Median and the runs it came from."""
    return {"median": statistics.median(values), "runs": list(values)}


# ------------------------------------------------------------ environment


def environment():
    import numpy as np
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "cores_available": len(os.sched_getaffinity(0)),
        "load_average_at_start": os.getloadavg(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__,
        "platform": platform.platform(),
        "chromium": _version([CHROMIUM, "--version"]),
        "node": _version(["node", "--version"]),
        "katex": (ROOT / "docs/assets/katex/VERSION").read_text().strip()
        if (ROOT / "docs/assets/katex/VERSION").is_file() else None,
        "commit": _version(["git", "-C", str(ROOT), "rev-parse",
                            "--short", "HEAD"]),
        "tree_dirty": bool(_version(["git", "-C", str(ROOT), "status",
                                     "--porcelain"])),
    }


def _version(command):
    try:
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


# ------------------------------------------------------------------ build


def copy_repo(dest):
    """Copy the tracked and unignored files to dest; link the .venv."""
    listing = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others",
         "--exclude-standard"],
        capture_output=True, check=True).stdout.decode()
    for relative in sorted(set(filter(None, listing.split("\0")))):
        source = ROOT / relative
        if source.is_file() and not source.is_symlink():
            target = dest / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    (dest / ".venv").symlink_to(ROOT / ".venv")


THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
CHILD_ENV = dict(os.environ)  # builds run as `make site` would run them


def run(command, cwd, env=None):
    """Run command; return (seconds, stdout). Raise with its output."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                          env={**CHILD_ENV, **(env or {})}, check=False)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise RuntimeError(
            f"{' '.join(map(str, command))} failed ({done.returncode}):\n"
            f"{(done.stdout + done.stderr)[-3000:]}")
    return seconds, done.stdout + done.stderr


def bench_build(repo, runs, cold_runs):
    """Cold, warm-after-prose, warm-after-code and floor builds."""
    mkdocs = [sys.executable, "-m", "mkdocs", "build", "--strict", "-q"]
    cold, generation = [], []
    for i in range(cold_runs):
        for folder in (".cache/generated", "docs/generated", "site"):
            shutil.rmtree(repo / folder, ignore_errors=True)
        seconds, output = run(mkdocs, repo)
        cold.append(seconds)
        total = re.findall(r"total\s+([\d.]+) s", output)
        generation.append(float(total[-1]) if total else None)
        say(f"cold build {i + 1}/{cold_runs}: {seconds:.1f} s")
    page = repo / "docs" / longest_pages(repo)[0]
    code = repo / "mha_ref" / "pitfalls.py"
    floor, prose, mha = [], [], []
    # one round = the three builds back to back, so load affects all;
    # floor and prose swap places every other round
    for i in range(runs):
        def build_floor():
            floor.append(run(mkdocs, repo,
                             {"MHA_REF_SKIP_GENERATION": "1"})[0])

        def build_prose(i=i):
            with page.open("a") as handle:  # a prose-only edit
                handle.write(f"\n<!-- bench edit {i} -->\n")
            prose.append(run(mkdocs, repo)[0])

        for step in (build_floor, build_prose)[::1 if i % 2 else -1]:
            step()
        with code.open("a") as handle:  # an mha_ref edit: topics rerun
            handle.write(f"\n# bench edit {i}\n")
        mha.append(run(mkdocs, repo)[0])
        say(f"round {i + 1}/{runs}: floor {floor[-1]:.1f} s, prose "
            f"{prose[-1]:.1f} s, mha_ref {mha[-1]:.1f} s")
    result = {
        "cold_s": summary(cold),
        "cold_generation_s": summary([g for g in generation if g]),
        "floor_s": summary(floor),
        "warm_prose_s": summary(prose),
        "warm_mha_ref_s": summary(mha),
        "prose_edit": str(page.relative_to(repo)),
        "code_edit": str(code.relative_to(repo)),
    }
    ratio = _ratios(prose, floor)
    result["warm_prose_over_floor"] = ratio
    result["warm_mha_ref_over_floor"] = _ratios(mha, floor)
    result["targets"] = {
        "warm_prose_over_floor": {
            "max": TARGETS["warm_prose_over_floor"],
            "met": ratio["median"] <= TARGETS["warm_prose_over_floor"]},
        "cold_s": {"max": TARGETS["cold_s"],
                   "met": result["cold_s"]["median"] < TARGETS["cold_s"]},
    }
    return result


def _ratios(numerators, denominators):
    """Per-round ratios (same round, same load) and their median."""
    return summary([a / b for a, b in zip(numerators, denominators,
                                          strict=True)])


def longest_pages(repo):
    """Pages (relative to docs/) by source length, longest first."""
    pages = [p for p in (repo / "docs").glob("*.md")]
    pages.sort(key=lambda p: (-p.stat().st_size, p.name))
    return [p.name for p in pages]


def site_url_of(page):
    return "" if page == "index.md" else page.removesuffix(".md") + "/"


# --------------------------------------------------------------- reading

# Records performance.now() (ms since navigation start) once the DOM is
# parsed and every .arithmatex element holds KaTeX output (.katex), and
# adds up the time spent inside katex.render (the browser's typesetting).
MATH_OBSERVER = """
(() => {
  let real;
  Object.defineProperty(window, 'katex', {
    configurable: true,
    get() { return real; },
    set(value) {
      const render = value.render;
      value.render = function (...args) {
        const start = performance.now();
        try { return render.apply(this, args); }
        finally {
          window.__katexMs = (window.__katexMs || 0)
            + performance.now() - start;
        }
      };
      real = value;
    },
  });
  const typeset = () => {
    const all = document.querySelectorAll('.arithmatex');
    if (!all.length) return false;
    for (const el of all) if (!el.querySelector('.katex')) return false;
    return true;
  };
  const check = () => {
    if (window.__mathDone === undefined
        && document.readyState !== 'loading' && typeset()) {
      window.__mathDone = performance.now();
      observer.disconnect();
    }
  };
  const observer = new MutationObserver(check);
  observer.observe(document, {childList: true, subtree: true});
  document.addEventListener('DOMContentLoaded', check);
})();
"""

PAGE_STATS = """
async () => {
  await document.fonts.ready;
  const nav = performance.getEntriesByType('navigation')[0];
  const res = performance.getEntriesByType('resource');
  const math = [...document.querySelectorAll('.arithmatex')];
  return {
    math_ms: window.__mathDone,
    typeset_ms: window.__katexMs || 0,
    dom_interactive_ms: nav.domInteractive,
    dom_content_loaded_ms: nav.domContentLoadedEventEnd,
    load_ms: nav.loadEventEnd,
    fonts_ready_ms: performance.now(),
    transfer_bytes: nav.transferSize
      + res.reduce((s, r) => s + r.transferSize, 0),
    requests: 1 + res.length,
    formulas: math.length,
    katex_errors: document.querySelectorAll('.katex-error').length,
    shapes: math.map(e => {
      const r = e.getBoundingClientRect();
      return [e.textContent, Math.round(r.width * 2) / 2,
              Math.round(r.height * 2) / 2];
    }),
  };
}
"""


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a context closed mid-download (the search index, fonts)


class Server:
    """A static server for one folder on 127.0.0.1, on a free port."""

    def __init__(self, folder):
        handler = partial(QuietHandler, directory=str(folder))
        self.httpd = QuietServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever,
                                       daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def load_page(browser, url):
    """One cold-cache visit: a fresh context, stats once math is done."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        context.add_init_script(MATH_OBSERVER)
        page = context.new_page()
        page.goto(url, wait_until="load")
        page.wait_for_function("window.__mathDone !== undefined",
                               timeout=60_000)
        return page.evaluate(PAGE_STATS)
    finally:
        context.close()


def bench_reading(sites, pages, runs):
    """{variant: {page: stats}} over cold-cache visits of each page.

    Variants alternate visit by visit, so a change in the machine's load
    falls on both sides of a comparison.
    """
    from contextlib import ExitStack

    from playwright.sync_api import sync_playwright

    visits = {v: {page: [] for page in pages} for v in sites}
    with sync_playwright() as p, ExitStack() as stack:
        urls = {v: stack.enter_context(Server(folder)).url
                for v, folder in sites.items()}
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=CHROMIUM_ARGS)
        try:
            for _ in range(runs):
                for page in pages:
                    for variant, url in urls.items():
                        visits[variant][page].append(
                            load_page(browser, url + site_url_of(page)))
        finally:
            browser.close()
    results = {v: {page: _summarise(visits[v][page]) for page in pages}
               for v in sites}
    for variant, stats in results.items():
        say(f"reading ({variant}): " + ", ".join(
            f"{page} {r['math_ms']['median']:.0f} ms"
            for page, r in stats.items()))
    return results


def _summarise(visits):
    last = visits[-1]
    out = {key: summary([v[key] for v in visits])
           for key in ("math_ms", "typeset_ms", "dom_interactive_ms",
                       "dom_content_loaded_ms",
                       "load_ms", "fonts_ready_ms", "transfer_bytes")}
    out.update(formulas=last["formulas"], requests=last["requests"],
               katex_errors=last["katex_errors"], shapes=last["shapes"])
    return out


# ------------------------------------------------------ server-side KaTeX

# Replaces each arithmatex element's \( \) or \[ \] with KaTeX's HTML,
# with the options docs/assets/javascripts/katex.js uses in the browser.
PRERENDER_JS = r"""
const fs = require('fs');
const katex = require(process.argv[2]);
const files = process.argv.slice(3);
const start = process.hrtime.bigint();
let formulas = 0, errors = 0;
const unescape = s => s.replace(/&lt;/g, '<').replace(/&gt;/g, '>')
  .replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&amp;/g, '&');
for (const file of files) {
  const text = fs.readFileSync(file, 'utf8');
  const out = text.replace(
    /(<(span|div) class="arithmatex">)([\s\S]*?)(<\/\2>)/g,
    (all, open, tag, body, close) => {
      const m = /^\s*\\\(([\s\S]*)\\\)\s*$|^\s*\\\[([\s\S]*)\\\]\s*$/
        .exec(unescape(body));
      if (m === null) return all;
      formulas += 1;
      const html = katex.renderToString(m[2] !== undefined ? m[2] : m[1], {
        displayMode: m[2] !== undefined, throwOnError: false,
        errorColor: '#cc0000'});
      if (html.includes('katex-error')) errors += 1;
      return open + html + close;
    });
  fs.writeFileSync(file, out);
}
const ms = Number(process.hrtime.bigint() - start) / 1e6;
console.log(JSON.stringify({formulas, errors, render_ms: ms}));
"""


def prerender(site, dest, runs):
    """Copy site to dest with every page's math typeset by node."""
    shutil.copytree(site, dest)
    script = dest.parent / "prerender.js"
    script.write_text(PRERENDER_JS)
    pages = sorted(str(p) for p in dest.rglob("*.html"))
    katex_js = str(ROOT / KATEX_JS)
    timings, stats = [], None
    for i in range(runs):  # every run re-renders the pristine pages
        if i:
            shutil.rmtree(dest)
            shutil.copytree(site, dest)
        seconds, output = run(["node", str(script), katex_js, *pages],
                              dest)
        stats = json.loads(output.strip().splitlines()[-1])
        timings.append((seconds, stats["render_ms"]))
    return {
        "pages": len(pages),
        "formulas": stats["formulas"],
        "errors": stats["errors"],
        "node_total_s": summary([t for t, _ in timings]),
        "render_ms": summary([r for _, r in timings]),
        "site_bytes_before": _folder_bytes(site, "*.html"),
        "site_bytes_after": _folder_bytes(dest, "*.html"),
    }


def _folder_bytes(folder, pattern):
    return sum(p.stat().st_size for p in Path(folder).rglob(pattern))


def katex_decision(build, reading):
    """Adopt build-time KaTeX only if math is ready sooner and the same."""
    client, server = reading["client"], reading["prerendered"]
    pages = []
    for page, c in client.items():
        s = server[page]
        same = (c["formulas"] == s["formulas"]
                and c["shapes"] == s["shapes"])
        differ = sum(a != b for a, b in zip(c["shapes"], s["shapes"],
                                            strict=False))
        pages.append({
            "page": page, "formulas": c["formulas"],
            "client_math_ms": c["math_ms"]["median"],
            "client_typeset_ms": c["typeset_ms"]["median"],
            "prerendered_math_ms": s["math_ms"]["median"],
            "client_parsed_ms": c["dom_interactive_ms"]["median"],
            "prerendered_parsed_ms": s["dom_interactive_ms"]["median"],
            "client_transfer_bytes": c["transfer_bytes"]["median"],
            "prerendered_transfer_bytes": s["transfer_bytes"]["median"],
            "same_rendering": same, "formulas_that_differ": differ,
            "katex_errors": [c["katex_errors"], s["katex_errors"]],
        })
    faster = all(p["prerendered_math_ms"] < p["client_math_ms"]
                 for p in pages)
    same = all(p["same_rendering"] for p in pages) and not build["errors"]
    adopt = faster and same
    saved = ", ".join(f"{p['client_math_ms'] - p['prerendered_math_ms']:.0f}"
                      for p in pages)
    typeset = ", ".join(f"{p['client_typeset_ms']:.0f}" for p in pages)
    names = ", ".join(p["page"] for p in pages)
    parsed = ", ".join(
        f"{p['client_parsed_ms']:.0f} -> {p['prerendered_parsed_ms']:.0f}"
        for p in pages)
    reason = (
        f"math ready {'sooner' if faster else 'not sooner'} (saves "
        f"{saved} ms on {names}, where typesetting in the browser takes "
        f"{typeset} ms; the pre-typeset HTML finishes parsing at "
        f"{parsed} ms), rendering {'identical' if same else 'differs'}; "
        f"it would add node to the build and grow the HTML from "
        f"{build['site_bytes_before']:,} to {build['site_bytes_after']:,} "
        "bytes")
    return {"adopt": adopt, "reason": reason, "pages": pages,
            "build_step": {k: v for k, v in build.items()}}


# ---------------------------------------------------------- implementations


def bench_impl(lengths, threads):
    """Time and peak memory per implementation, as ratios to SDPA."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from mha_ref import numpy_ref, tiled, torch_ref

    torch.set_num_threads(threads)
    b, h, d = (IMPL_SHAPE[k] for k in ("batch", "n_head", "d_head"))
    rows = []
    for t, runs in lengths.items():
        rng = np.random.default_rng(0)
        q, k, v = (rng.standard_normal((b, h, t, d)).astype(np.float32)
                   for _ in range(3))
        tq, tk, tv = (torch.from_numpy(a) for a in (q, k, v))
        mask, mask_t = numpy_ref.causal_mask(t), torch_ref.causal_mask(t)
        sdpa = partial(F.scaled_dot_product_attention, is_causal=True)
        impls = {  # name: (call, memory tool)
            "numpy_ref": (partial(numpy_ref.attention, q, k, v, mask),
                          peak_bytes_numpy),
            "torch_ref": (partial(torch_ref.attention, tq, tk, tv, mask_t),
                          peak_bytes_torch_cpu),
            "sdpa": (partial(sdpa, tq, tk, tv), peak_bytes_torch_cpu),
            "tiled_numpy": (partial(tiled.tiled_attention_numpy, q, k, v,
                                    causal=True), peak_bytes_numpy),
            "tiled_torch": (partial(tiled.tiled_attention_torch, tq, tk, tv,
                                    causal=True), peak_bytes_torch_cpu),
        }
        measured = {}
        with torch.no_grad():
            for name, (call, peak_of) in impls.items():
                peak = peak_of(call)  # also the warm-up call
                seconds = []
                for _ in range(runs):
                    start = time.perf_counter()
                    call()
                    seconds.append(time.perf_counter() - start)
                measured[name] = (statistics.median(seconds), peak)
        sdpa_s, sdpa_peak = measured["sdpa"]
        for name, (seconds, peak) in measured.items():
            rows.append({
                "t": t, "impl": name, "runs": runs, "seconds": seconds,
                "peak_bytes": peak, "time_vs_sdpa": seconds / sdpa_s,
                "memory_vs_sdpa": peak / sdpa_peak if sdpa_peak else None,
            })
        say(f"impl T={t}: " + ", ".join(
            f"{n} {s * 1e3:.1f} ms" for n, (s, _) in measured.items()))
    return {**IMPL_SHAPE, "dtype": "float32", "causal": True,
            "threads": threads,
            "block": tiled.BLOCK, "rows": rows,
            "memory_tools": {
                "numpy": "tracemalloc peak during the call",
                "torch": "sum of the profiler's per-op CPU bytes in "
                         "start order (an op's transient peak unseen)"}}


# ----------------------------------------------------------------- report


def markdown(report):
    env = report["environment"]
    lines = ["# Benchmark report", "",
             "Written by `make bench` (scripts/bench.py): medians of "
             "several runs; each ratio compares runs of the same round.",
             "", "## Environment", "", "| | |", "|:--|:--|"]
    for key, value in env.items():
        lines.append(f"| {key} | {value} |")
    if "build" in report:
        lines += _build_md(report["build"])
    if "reading" in report:
        lines += _reading_md(report["reading"])
    if "impl" in report:
        lines += _impl_md(report["impl"])
    if "katex" in report:
        k = report["katex"]
        lines += ["", "## Server-side KaTeX", "",
                  f"**{'Adopt' if k['adopt'] else 'Not adopted'}**: "
                  f"{k['reason']}.", "",
                  "| page | formulas | client math (ms) | build-time "
                  "math (ms) | client bytes | build-time bytes | same |",
                  "|:--|--:|--:|--:|--:|--:|:--|"]
        for p in k["pages"]:
            lines.append(
                f"| {p['page']} | {p['formulas']} | "
                f"{p['client_math_ms']:.0f} | "
                f"{p['prerendered_math_ms']:.0f} | "
                f"{p['client_transfer_bytes']:,} | "
                f"{p['prerendered_transfer_bytes']:,} | "
                f"{'yes' if p['same_rendering'] else 'no'} |")
        step = k["build_step"]
        lines += ["", f"The node step typesets {step['formulas']} "
                  f"formulas on {step['pages']} pages in "
                  f"{step['render_ms']['median']:.0f} ms "
                  f"({step['node_total_s']['median']:.2f} s with node's "
                  f"start-up), {step['errors']} errors."]
    lines += ["", f"Total bench time: {report['seconds_total']:.0f} s.", ""]
    return "\n".join(lines)


def _build_md(b):
    t = b["targets"]
    return [
        "", "## Build", "",
        "| build | median (s) | runs (s) |", "|:--|--:|:--|",
        *(f"| {label} | {b[key]['median']:.1f} | "
          f"{', '.join(f'{x:.1f}' for x in b[key]['runs'])} |"
          for label, key in (
              ("cold (empty cache)", "cold_s"),
              ("  of which generation", "cold_generation_s"),
              ("warm, prose edit", "warm_prose_s"),
              ("warm, mha_ref edit", "warm_mha_ref_s"),
              ("floor: mkdocs only", "floor_s"))),
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
    lines = ["", "## Reading (cold cache, headless Chromium)", "",
             "| page | formulas | all math typeset (ms) | in katex.render "
             "(ms) | parsed (ms) | DOMContentLoaded (ms) | load (ms) | "
             "bytes | requests |",
             "|:--|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for page, s in r["client"].items():
        lines.append(
            f"| {page} | {s['formulas']} | {s['math_ms']['median']:.0f} | "
            f"{s['typeset_ms']['median']:.0f} | "
            f"{s['dom_interactive_ms']['median']:.0f} | "
            f"{s['dom_content_loaded_ms']['median']:.0f} | "
            f"{s['load_ms']['median']:.0f} | "
            f"{s['transfer_bytes']['median']:,} | {s['requests']} |")
    return lines


def _impl_md(m):
    lines = ["", f"## Implementations (causal, B={m['batch']}, "
             f"H={m['n_head']}, d_head={m['d_head']}, {m['dtype']}, "
             f"{m['threads']} thread(s))",
             "", "| T | implementation | time (ms) | time / SDPA | peak "
             "(MiB) | peak / SDPA |", "|--:|:--|--:|--:|--:|--:|"]
    for r in m["rows"]:
        mem = r["memory_vs_sdpa"]
        lines.append(
            f"| {r['t']} | {r['impl']} | {r['seconds'] * 1e3:.1f} | "
            f"{r['time_vs_sdpa']:.2f} | {r['peak_bytes'] / 2**20:.1f} | "
            f"{'n/a' if mem is None else f'{mem:.2f}'} |")
    lines += ["", "Peak memory: NumPy by tracemalloc, torch by the "
              "profiler's per-op CPU bytes (see report.json)."]
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(PARTS),
                        help=f"comma-separated parts of {PARTS}")
    parser.add_argument("--quick", action="store_true",
                        help="fewer runs and sizes (a smoke test)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--threads", type=int, default=1,
                        help="threads for NumPy and torch in the impl part")
    args = parser.parse_args(argv)
    if "numpy" in sys.modules:
        say("numpy was imported early: --threads may not apply to it")
    for name in THREAD_VARS:  # read by BLAS when numpy is first imported
        os.environ[name] = str(args.threads)
    parts = [p for p in args.only.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; choose from {PARTS}")
    runs = 2 if args.quick else 3
    rounds = 2 if args.quick else 5
    start = time.perf_counter()
    report = {"environment": environment()}
    with tempfile.TemporaryDirectory(prefix="mha-bench-") as tmp:
        repo = Path(tmp) / "repo"
        needs_site = {"build", "reading", "katex"} & set(parts)
        if needs_site:
            copy_repo(repo)
            if "build" in parts:
                report["build"] = bench_build(repo, rounds,
                                              cold_runs=1 if args.quick
                                              else 3)
            else:
                run([sys.executable, "-m", "mkdocs", "build", "--strict",
                     "-q"], repo)
        pages = _reading_pages(repo) if needs_site else []
        sites = {"client": repo / "site"}
        prerendered = None
        if "katex" in parts:
            prerendered = prerender(repo / "site", Path(tmp) / "katex-site",
                                    runs)
            sites["prerendered"] = Path(tmp) / "katex-site"
        if "reading" in parts or "katex" in parts:
            reading = bench_reading(sites, pages, 3 if args.quick else 7)
            report["reading"] = {"client": reading["client"]}
            if prerendered:
                report["katex"] = katex_decision(prerendered, reading)
                report["reading"]["prerendered"] = reading["prerendered"]
    if "impl" in parts:
        report["impl"] = bench_impl(
            QUICK_LENGTHS if args.quick else IMPL_LENGTHS, args.threads)
    report["environment"]["load_average_at_end"] = os.getloadavg()
    report["seconds_total"] = time.perf_counter() - start
    args.out.mkdir(parents=True, exist_ok=True)
    _strip_shapes(report)
    (args.out / "report.json").write_text(
        json.dumps(report, indent=1, sort_keys=True) + "\n")
    (args.out / "report.md").write_text(markdown(report))
    say(f"wrote {args.out / 'report.md'} in {report['seconds_total']:.0f} s")


def _reading_pages(repo):
    """The longest page, and the page with the most formulas if other."""
    longest = longest_pages(repo)[0]
    counts = {}
    for page in longest_pages(repo):
        built = repo / "site" / site_url_of(page) / "index.html"
        if built.is_file():
            counts[page] = built.read_text().count('class="arithmatex"')
    most = max(counts, key=lambda p: (counts[p], p))
    if not counts.get(longest):  # no formula to wait for
        return [most]
    return [longest] if most == longest else [longest, most]


def _strip_shapes(report):
    """The per-formula shapes served the comparison; keep counts only."""
    for variant in report.get("reading", {}).values():
        for stats in variant.values():
            stats.pop("shapes", None)


if __name__ == "__main__":
    main()
