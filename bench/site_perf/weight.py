"""Page weight: what a reader's browser downloads on a first view.

    python -m bench --only weight                # builds a copy, as
                                                 # the other parts do
    python -m bench --only weight --site site    # a site built already

Every page of the built site, each in a fresh Chromium context (a cold
cache) at 1280 x 900, served by the bench's own server
(bench/site_perf/server.py), which gzips text files as GitHub Pages, the
site's host, does: the bytes are what a reader's browser transfers
(a fraction of the files' own sizes). A first view is every
response from the navigation until the load event, and those still in
flight then, without a scroll or a click: what a reader who opens the
page waits for. Its bytes are the body and headers of each response.

Targets (1 kB = 1000 bytes): a text page at most 500 kB, a notebook
page (mkdocs-jupyter's, or Zensical's Markdown one) at most 700 kB. The
browser tests hold every page to the same budgets
(tests/browser/test_site_pages.py, through ``budget_problems``).
"""

import re
import time
from urllib.parse import urlsplit

KB = 1000
BUDGETS = {"text": 500 * KB, "notebook": 700 * KB}
VIEWPORT = {"width": 1280, "height": 900}
SETTLE_S = 5.0  # how long requests in flight at load may take to end
# A notebook's page: mkdocs-jupyter's jp-Notebook, or (Zensical) the
# Markdown page with the notebook's download link.
_NOTEBOOK = re.compile(r'jp-Notebook|<a download href="[^"]*\.ipynb"')


def page_kind(html):
    """'notebook' for the page of a notebook, else 'text'."""
    return "notebook" if _NOTEBOOK.search(html) else "text"


class Transfers:
    """Every response a browser context receives, with its size.

    Attach it before the navigation; ``settle`` waits (up to SETTLE_S)
    until no request is in flight; ``total`` and ``largest`` read it.
    """

    def __init__(self, context):
        self.pending = set()
        self.done = []  # (url, bytes)
        context.on("request", self._started)
        context.on("requestfinished", self._finished)
        context.on("requestfailed", self._failed)

    def _started(self, request):
        self.pending.add(request)

    def _failed(self, request):
        self.pending.discard(request)

    def _finished(self, request):
        self.pending.discard(request)
        try:
            sizes = request.sizes()
            size = sizes["responseBodySize"] + sizes["responseHeadersSize"]
        except Exception:  # the context closed meanwhile
            size = 0
        self.done.append((request.url, max(size, 0)))

    def settle(self, page, seconds=SETTLE_S):
        """Wait until nothing is in flight, or ``seconds`` pass."""
        end = time.monotonic() + seconds
        while self.pending and time.monotonic() < end:
            page.wait_for_timeout(25)  # lets the browser's events arrive

    def total(self):
        return sum(size for _, size in self.done)

    def largest(self, n=5):
        """The n largest responses: [(URL path, bytes)]."""
        ranked = sorted(self.done, key=lambda d: -d[1])[:n]
        return [(urlsplit(url).path or url[:60], size) for url, size in ranked]


def first_view(browser, url):
    """{bytes, requests, kind, largest} of one cold visit of ``url``."""
    context = browser.new_context(viewport=VIEWPORT)
    try:
        transfers = Transfers(context)
        page = context.new_page()
        response = page.goto(url, wait_until="load")
        transfers.settle(page)
        return {
            "bytes": transfers.total(),
            "requests": len(transfers.done),
            "kind": page_kind(response.text()),
            "largest": transfers.largest(),
        }
    finally:
        context.close()


def budget_problems(kind, total):
    """[] when ``total`` bytes fit the budget of a ``kind`` page."""
    budget = BUDGETS[kind]
    if total <= budget:
        return []
    return [
        f"first view transfers {total / KB:.0f} kB, over the "
        f"{budget / KB:.0f} kB budget of a {kind} page"
    ]


def site_paths(site):
    """URL paths of every page of a built site ("" is the start page)."""
    paths = []
    for file in sorted(site.rglob("index.html")):
        rel = file.parent.relative_to(site).as_posix()
        if rel == ".":
            paths.append("")
        elif not rel.startswith(("assets/", "404", "search")):
            paths.append(rel + "/")
    return paths


def bench_weight(site):
    """{pages: {path: first view}, worst: {kind: ...}, targets} of
    every page of the built ``site``."""
    from playwright.sync_api import sync_playwright

    from bench.env import CHROMIUM
    from bench.site_perf.server import CHROMIUM_ARGS, serve
    from bench.timing import say

    pages = {}
    with sync_playwright() as p, serve(site) as origin:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS
        )
        try:
            for path in site_paths(site):
                pages[path] = first_view(browser, f"{origin}/{path}")
        finally:
            browser.close()
    worst, targets = {}, {}
    for kind, budget in BUDGETS.items():
        of_kind = {p: v for p, v in pages.items() if v["kind"] == kind}
        if not of_kind:
            continue
        path = max(of_kind, key=lambda p: of_kind[p]["bytes"])
        worst[kind] = {"page": path, "bytes": of_kind[path]["bytes"]}
        targets[f"{kind}_page_bytes"] = {
            "max": budget,
            "median": of_kind[path]["bytes"],  # the worst page's
            "met": of_kind[path]["bytes"] <= budget,
            "page": path,
        }
    say(
        "weight: "
        + ", ".join(
            f"worst {kind} page {w['page'] or '/'} {w['bytes'] / KB:.0f} kB"
            for kind, w in worst.items()
        )
    )
    return {
        "pages": pages,
        "worst": worst,
        "targets": targets,
        "viewport": VIEWPORT,
        "compression": "gzip for text files, as GitHub Pages serves them",
    }


def markdown(w):
    """The report's section."""
    lines = [
        "",
        "## Page weight (first view, cold cache, headless Chromium)",
        "",
        "Every page at 1280 x 900, text served gzip-compressed as "
        "GitHub Pages serves it: the bytes of every response "
        "from the navigation to the load event and those in flight "
        "then, without a scroll or a click. 1 kB = 1000 bytes.",
        "",
    ]
    for name, t in w["targets"].items():
        kind = name.removesuffix("_page_bytes")
        lines.append(
            f"- {kind} pages: worst {t['page'] or '/'} "
            f"{t['median'] / KB:.0f} kB (target <= {t['max'] / KB:.0f} kB: "
            f"{'met' if t['met'] else 'NOT met'})"
        )
    lines += [
        "",
        "| page | kind | kB | requests | largest |",
        "|:--|:--|--:|--:|:--|",
    ]
    for path, v in w["pages"].items():
        largest = ", ".join(
            f"{p.rstrip('/').rsplit('/', 1)[-1] or '/'} {size / KB:.0f}"
            for p, size in v["largest"][:3]
        )
        lines.append(
            f"| {path or '/'} | {v['kind']} | {v['bytes'] / KB:.0f} | "
            f"{v['requests']} | {largest} |"
        )
    return lines
