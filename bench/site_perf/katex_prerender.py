"""Math on the first paint: formulas typeset when the site is built.

`make site` typesets every formula into the HTML after MkDocs
(pipeline/typeset_math.py), and pages load no KaTeX JavaScript unless
they still hold raw TeX. This part measures what a reader gets, on every
page, in two variants of the same build:

- build: the site as `make site` ships it (typeset at build time);
- client: the same HTML without that step, typeset in the browser by
  the lazily loaded KaTeX (what `make serve` shows).

Per page, over cold-cache visits at 1280 x 900: the time until the
first screen shows no raw TeX divided by the first contentful paint
(target <= 1.1), the cumulative layout shift until the page settles
(target <= 0.02), and the bytes transferred. Also the step itself:
formulas, seconds, and the HTML it adds.
"""

import shutil
import sys
from pathlib import Path

from bench.site_perf.reading import alternate_visits
from bench.timing import run, say, summary

TARGETS = {"math_over_fcp": 1.1, "layout_shift": 0.02}
VIEWPORT = {"width": 1280, "height": 900}
TYPESET = [sys.executable, "-m", "pipeline.postbuild"]
MKDOCS = [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d"]

# Runs before the page's own scripts. On every animation frame (what the
# reader is shown next), notes whether the first screen holds raw TeX:
# an arithmatex element without KaTeX output, or TeX delimiters in the
# text of a notebook cell. Sums the layout shifts as they come.
OBSERVER = r"""
(() => {
  const SKIP = "pre, code, script, style, textarea, .katex";
  const RAW = /\\\(|\\\)|\\\[|\\\]|\$\$|\$[^$\s][^$]*[\\^_{][^$]*\$/;
  const CELLS = ".jp-RenderedMarkdown, .jp-RenderedLatex";
  const seen = r => r.width > 0 && r.bottom > 0 && r.top < innerHeight
                    && r.right > 0 && r.left < innerWidth;
  const rawOnScreen = (all) => {
    for (const el of document.querySelectorAll(".arithmatex")) {
      if (el.querySelector(".katex")) continue;
      if (all || seen(el.getBoundingClientRect())) return true;
    }
    for (const cell of document.querySelectorAll(CELLS)) {
      if (!all && !seen(cell.getBoundingClientRect())) continue;
      const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
      for (let n = walk.nextNode(); n; n = walk.nextNode()) {
        if (n.parentElement.closest(SKIP) || !RAW.test(n.textContent))
          continue;
        const range = document.createRange();
        range.selectNodeContents(n);
        if (all || seen(range.getBoundingClientRect())) return true;
      }
    }
    return false;
  };
  const s = window.__mathScreen = {
    lastRaw: null, clearAfterRaw: null, shift: 0, rawOnScreen,
  };
  let raw = false;
  const frame = () => {
    if (document.body) {
      const now = rawOnScreen(false);
      if (now) s.lastRaw = performance.now();
      else if (raw) s.clearAfterRaw = performance.now();
      raw = now;
    }
    requestAnimationFrame(frame);
  };
  requestAnimationFrame(frame);
  new PerformanceObserver(list => {
    for (const e of list.getEntries())
      if (!e.hadRecentInput) s.shift += e.value;
  }).observe({type: "layout-shift", buffered: true});
})();
"""

# After the page settled: first contentful paint, when the first screen
# last showed raw TeX (null: never once painted), the shift, the bytes.
STATS = """
async () => {
  await document.fonts.ready;
  await new Promise(r => requestAnimationFrame(
    () => requestAnimationFrame(r)));
  const s = window.__mathScreen;
  const fcp = performance.getEntriesByName("first-contentful-paint")[0];
  const nav = performance.getEntriesByType("navigation")[0];
  const res = performance.getEntriesByType("resource");
  return {
    fcp_ms: fcp ? fcp.startTime : null,
    last_raw_ms: s.lastRaw,
    clear_ms: s.clearAfterRaw,
    layout_shift: s.shift,
    transfer_bytes: nav.transferSize
      + res.reduce((sum, r) => sum + r.transferSize, 0),
    requests: 1 + res.length,
    scripts: res.filter(r => r.initiatorType === "script"
                              || r.name.endsWith(".js")).length,
    katex_js: res.some(r => r.name.includes("katex.min.js")),
    formulas: document.querySelectorAll(".arithmatex").length,
  };
}
"""


def client_site(repo, dest):
    """The repository's pages built without the typesetting step."""
    run([*MKDOCS, str(dest)], repo)
    return dest


def bench_typeset_step(repo, raw_site, work, runs):
    """Time `python -m pipeline.postbuild` on fresh copies."""
    seconds, output, site = [], "", work / "typeset-site"
    for _ in range(runs):
        shutil.rmtree(site, ignore_errors=True)
        shutil.copytree(raw_site, site)
        took, output = run([*TYPESET, str(site)], repo)
        seconds.append(took)
    return {
        "pages": len(list(site.rglob("*.html"))),
        "formulas": int(output.split("typeset ")[-1].split()[0]),
        "seconds": summary(seconds),
        "html_bytes_before": _bytes(raw_site),
        "html_bytes_after": _bytes(site),
    }


def _bytes(folder):
    return sum(p.stat().st_size for p in Path(folder).rglob("*.html"))


def visit(browser, url):
    """One cold-cache visit; stats once the whole page's math is typeset."""
    context = browser.new_context(viewport=VIEWPORT)
    try:
        context.add_init_script(OBSERVER)
        page = context.new_page()
        page.goto(url, wait_until="load")
        page.wait_for_function(
            "!window.__mathScreen.rawOnScreen(true)", timeout=30_000
        )
        stats = page.evaluate(STATS)
    finally:
        context.close()
    fcp, clear = stats["fcp_ms"], stats["clear_ms"]
    if stats["last_raw_ms"] is None or (clear and clear <= fcp):
        stats["math_ms"] = fcp  # never painted raw TeX on the first screen
    else:
        stats["math_ms"] = max(fcp, clear)
    stats["math_over_fcp"] = stats["math_ms"] / fcp
    return stats


def bench_first_screen(sites, pages, runs):
    """{variant: {page: summary}}; variants alternate visit by visit."""
    visits = alternate_visits(sites, {p: p for p in pages}, runs, visit)
    keys = ("fcp_ms", "math_ms", "math_over_fcp", "layout_shift")
    return {
        v: {
            page: {
                **{k: summary([x[k] for x in got]) for k in keys},
                "transfer_bytes": got[-1]["transfer_bytes"],
                "requests": got[-1]["requests"],
                "katex_js": got[-1]["katex_js"],
                "formulas": got[-1]["formulas"],
            }
            for page, got in visits[v].items()
        }
        for v in sites
    }


def site_paths(site):
    """URL path of every page: '' for the start page, 'scaling/'..."""
    paths = []
    for index in sorted(Path(site).rglob("index.html")):
        relative = index.parent.relative_to(site).as_posix()
        paths.append("" if relative == "." else relative + "/")
    return paths


def bench_math(repo, work, runs):
    """The typesetting step, then every page in both variants."""
    raw = client_site(repo, work / "client-site")
    step = bench_typeset_step(repo, raw, work, runs)
    built = repo / "site"
    pages = site_paths(built)
    say(
        f"math: {step['formulas']} formulas typeset in "
        f"{step['seconds']['median']:.2f} s; {len(pages)} pages"
    )
    found = bench_first_screen({"build": built, "client": raw}, pages, runs)
    worst = {
        v: {
            "math_over_fcp": max(
                s["math_over_fcp"]["median"] for s in found[v].values()
            ),
            "layout_shift": max(
                s["layout_shift"]["median"] for s in found[v].values()
            ),
        }
        for v in found
    }
    for v, w in worst.items():
        say(
            f"math ({v}): worst math/FCP {w['math_over_fcp']:.2f}, "
            f"worst layout shift {w['layout_shift']:.3f}"
        )
    met = {k: worst["build"][k] <= limit for k, limit in TARGETS.items()}
    return {
        "viewport": VIEWPORT,
        "runs": runs,
        "typeset_step": step,
        "pages": found,
        "worst": worst,
        "targets": {k: {"max": TARGETS[k], "met": met[k]} for k in TARGETS},
    }
