"""Reading time: headless Chromium against the built site.

A new browser context (cold cache) per run, on 127.0.0.1: milliseconds
from navigation start until every formula is typeset, time spent inside
katex.render, and bytes transferred.
"""

from contextlib import ExitStack

from bench.env import CHROMIUM
from bench.site_perf.build_times import longest_pages
from bench.site_perf.server import CHROMIUM_ARGS, serve
from bench.timing import say, summary

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


def load_page(browser, url):
    """One cold-cache visit: a fresh context, stats once math is done."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        context.add_init_script(MATH_OBSERVER)
        page = context.new_page()
        page.goto(url, wait_until="load")
        page.wait_for_function(
            "window.__mathDone !== undefined", timeout=60_000
        )
        return page.evaluate(PAGE_STATS)
    finally:
        context.close()


def alternate_visits(sites, paths, runs, visit):
    """{variant: {key: [visit(browser, url), ...]}}, cold cache each time.

    ``sites`` maps a variant to a built folder, ``paths`` a key to a URL
    path. Variants alternate visit by visit, so a change in the machine's
    load falls on both sides of a comparison.
    """
    from playwright.sync_api import sync_playwright

    visits = {v: {key: [] for key in paths} for v in sites}
    with sync_playwright() as p, ExitStack() as stack:
        origins = {
            v: stack.enter_context(serve(folder))
            for v, folder in sites.items()
        }
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS
        )
        try:
            for _ in range(runs):
                for key, path in paths.items():
                    for variant, origin in origins.items():
                        visits[variant][key].append(
                            visit(browser, f"{origin}/{path}")
                        )
        finally:
            browser.close()
    return visits


def bench_reading(sites, pages, runs):
    """{variant: {page: stats}} over cold-cache visits of each page."""
    paths = {page: site_url_of(page) for page in pages}
    visits = alternate_visits(sites, paths, runs, load_page)
    results = {
        v: {page: _summarise(visits[v][page]) for page in pages} for v in sites
    }
    for variant, stats in results.items():
        say(
            f"reading ({variant}): "
            + ", ".join(
                f"{page} {r['math_ms']['median']:.0f} ms"
                for page, r in stats.items()
            )
        )
    return results


def _summarise(visits):
    last = visits[-1]
    out = {
        key: summary([v[key] for v in visits])
        for key in (
            "math_ms",
            "typeset_ms",
            "dom_interactive_ms",
            "dom_content_loaded_ms",
            "load_ms",
            "fonts_ready_ms",
            "transfer_bytes",
        )
    }
    out.update(
        formulas=last["formulas"],
        requests=last["requests"],
        katex_errors=last["katex_errors"],
        shapes=last["shapes"],
    )
    return out


def site_url_of(page):
    return "" if page == "index.md" else page.removesuffix(".md") + "/"


def reading_pages(repo):
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
