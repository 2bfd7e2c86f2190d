"""What a reader would see broken on a page, checked in a real browser.

Each check takes a Playwright page (already loaded) and returns a list of
problems, one readable line each, [] when the page is fine. The tests
collect every problem of a page before asserting, so one run names them
all. tests/browser/test_pagecheck.py shows each check failing on a small
broken page: a check that cannot fail checks nothing.

Waits are event-based: a check waits for a condition in the page (every
formula rendered, every image settled) with a timeout, and reports what
is still wrong when the timeout passes; nothing sleeps.
"""

import contextlib
import functools
import http.server
import os
import re
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

# Headless Chromium that never phones home; the profile is a fresh one
# (Playwright makes a temporary user-data-dir for each launch).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
INSTALL_HINT = (
    "install Chromium: `apt-get install chromium` (or `make browser`)"
)
REPO = Path(__file__).resolve().parents[2]
# The built site: site/ (make site), or another build named by MHA_SITE_DIR.
SITE = Path(os.environ.get("MHA_SITE_DIR") or REPO / "site")
SCREENSHOTS = REPO / "build" / "screenshots"
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


@dataclass(frozen=True)
class SitePage:
    """One page of the built site: its URL path and a short name."""

    path: str  # "" (the start page) or "scaling/": after the origin's /
    name: str  # "index", "scaling", "generated-notebooks-experiment"
    file: Path  # the index.html it is served from


def site_pages(site=SITE):
    """Every page of a built site: each **/index.html but the 404 page."""
    pages = []
    files = site.rglob("index.html")
    for file in sorted(files, key=lambda f: f.parent.relative_to(site).parts):
        rel = file.parent.relative_to(site).as_posix()
        if rel == ".":
            pages.append(SitePage("", "index", file))
        elif not rel.startswith(("assets/", "404")):
            pages.append(SitePage(rel + "/", rel.replace("/", "-"), file))
    return pages


WAIT_MS = 5000  # how long a page may take to settle before we report

# Schemes that are the local server itself or carry no network traffic.
LOCAL_SCHEMES = ("data:", "blob:", "about:")


def in_ci():
    """True when the environment says this is a CI run (CI=true)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false")


def find_chromium():
    """The path of a Chromium binary, or None where there is none."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves a folder without logging, with the types a site needs."""

    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".svg": "image/svg+xml",
        ".woff2": "font/woff2",
        ".js": "text/javascript",
        ".mjs": "text/javascript",
        ".json": "application/json",
        ".ipynb": "application/json",
    }

    def log_message(self, format, *args):
        pass


@contextlib.contextmanager
def serve(directory):
    """Serve `directory` on 127.0.0.1 at a free port; yield the origin."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def is_local(url, origin):
    """True for the local server's own URLs and for data:/blob: URLs."""
    if url.startswith(LOCAL_SCHEMES):
        return True
    return urlsplit(url)[:2] == urlsplit(origin)[:2]


class Recorder:
    """Records what a browser context asks for and complains about.

    Every request URL (pages, workers, fonts...) is kept, and requests to
    any other host are aborted before they leave: the attempt is what
    counts, and no test sends real traffic.
    """

    def __init__(self, context, origin):
        self.origin = origin
        self.requests = []
        self.failed = []
        self.console_errors = []
        self.blocked = []  # requests to other hosts, aborted here
        context.route(lambda url: not is_local(url, origin), self._block)
        context.on("request", lambda req: self.requests.append(req.url))
        context.on("requestfailed", self._on_failed)
        context.on("response", self._on_response)
        context.on("console", self._on_console)
        context.on("weberror", self._on_weberror)

    def _block(self, route):
        self.blocked.append(route.request.url)
        route.abort("blockedbyclient")

    def _on_failed(self, request):
        if is_local(request.url, self.origin):  # others: see external
            self.failed.append(f"{request.url} ({request.failure})")

    def _on_response(self, response):
        if response.status >= 400:
            self.failed.append(f"{response.url} (HTTP {response.status})")

    def _on_console(self, message):
        if message.type == "error":
            where = message.location.get("url", "")
            self.console_errors.append(f"{message.text} [{where}]")

    def _on_weberror(self, web_error):
        self.console_errors.append(f"uncaught: {web_error.error}")

    def problems(self):
        """Requests to other hosts, failed requests, console errors."""
        return (
            request_problems(self.requests, self.origin)
            + [f"failed request: {what}" for what in self.failed]
            + [f"console error: {text}" for text in self.console_errors]
        )


def request_problems(urls, origin):
    """One problem per request that went to a host other than `origin`."""
    seen = dict.fromkeys(u for u in urls if not is_local(u, origin))
    return [f"request to another host: {url}" for url in seen]


def localize_sitemap(context, origin):
    """Serve sitemap.xml as if the site were deployed at `origin`.

    Material's instant navigation only intercepts links listed in
    sitemap.xml, whose URLs start with the site_url the site was built
    with (a Pages URL, or 127.0.0.1:8000). It swaps in the protocol and
    host name of the page, but not the port nor the path, so on a test
    server at another port every click would be a full reload. Rewriting
    the site_url prefix to `origin` is what deploying there does.
    """

    def handle(route):
        response = route.fetch()
        text = response.text()
        locs = re.findall(r"<loc>\s*(\S+?)\s*</loc>", text)
        if locs:
            base = min(locs, key=len)  # the home page: site_url itself
            text = re.sub(
                r"(<loc>\s*|href=\")" + re.escape(base),
                lambda m: m.group(1) + origin + "/",
                text,
            )
        route.fulfill(response=response, body=text)

    context.route(f"{origin}/sitemap.xml", handle)


# JavaScript shared by the math checks. `count(root)` counts the formulas
# a document holds before any script runs: one per arithmatex span/div,
# plus the $...$, $$...$$, \(...\) and \[...\] in notebook Markdown cells
# (mkdocs-jupyter leaves those as text for a script to render).
_MATH_JS = r"""
const NOTEBOOK = ".jp-RenderedMarkdown, .jp-RenderedLatex";
const TEX = /\$\$[\s\S]+?\$\$|\\\[[\s\S]+?\\\]|\\\([\s\S]+?\\\)|\$[^$\n]+?\$/g;
function notebookMath(root) {
  let n = 0;
  for (const cell of root.querySelectorAll(NOTEBOOK)) {
    const copy = cell.cloneNode(true);
    copy.querySelectorAll("pre, code").forEach(e => e.remove());
    n += (copy.textContent.match(TEX) || []).length;
  }
  return n;
}
function count(root) {
  return root.querySelectorAll(".arithmatex").length + notebookMath(root);
}
"""


def source_math_count(page, html):
    """How many formulas `html` (a page's HTML as served) holds."""
    return page.evaluate(
        f"""html => {{ {_MATH_JS}
            return count(new DOMParser().parseFromString(html, "text/html"));
        }}""",
        html,
    )


def wait_for_math(page, expected, wait_ms=WAIT_MS):
    """Wait until `expected` formulas are rendered or errored (or wait_ms)."""
    try:
        page.wait_for_function(
            "n => document.querySelectorAll('.katex, .katex-error').length"
            " >= n",
            arg=expected,
            timeout=wait_ms,
        )
    except Exception:  # playwright's TimeoutError: the checks report it
        pass


def math_problems(page, html, wait_ms=WAIT_MS):
    """Every formula of the served `html` rendered once by KaTeX.

    Waits until the page holds as many rendered formulas (or KaTeX error
    boxes) as the source has formulas, then checks each arithmatex
    element holds exactly one .katex and no .katex-error, and that the
    page has no .katex-error anywhere.
    """
    expected = source_math_count(page, html)
    wait_for_math(page, expected, wait_ms)
    found = page.evaluate(
        """() => {
        const short = s => s.replace(/\\s+/g, " ").trim().slice(0, 80);
        const bad = [];
        for (const e of document.querySelectorAll(".arithmatex")) {
          const n = e.querySelectorAll(".katex").length;
          if (n !== 1) bad.push(`${n} .katex in: ${short(e.textContent)}`);
        }
        const errors = [...document.querySelectorAll(".katex-error")].map(
          e => `${short(e.textContent)} (${e.title})`);
        return {katex: document.querySelectorAll(".katex").length,
                bad, errors};
        }"""
    )
    problems = []
    if found["katex"] != expected:
        problems.append(
            f"{found['katex']} formulas rendered by KaTeX, the page's "
            f"source has {expected}"
        )
    problems += [f"formula not rendered once: {b}" for b in found["bad"]]
    problems += [f"KaTeX error: {e}" for e in found["errors"]]
    return problems


def raw_tex_problems(page):
    r"""TeX a reader can see as text: \(, \[, $$ or $..\x..$ left over.

    Code blocks, KaTeX's own output and hidden elements are skipped.
    """
    return page.evaluate(
        r"""() => {
        const SKIP = "pre, code, script, style, textarea, .katex, " +
                     "mjx-container, .MathJax";
        const RAW = /\\\(|\\\)|\\\[|\\\]|\$\$|\$[^$\s][^$]*[\\^_{][^$]*\$/;
        const walker = document.createTreeWalker(
          document.body, NodeFilter.SHOW_TEXT);
        const found = [];
        for (let n = walker.nextNode(); n; n = walker.nextNode()) {
          const el = n.parentElement;
          if (!el || el.closest(SKIP)) continue;
          const m = n.textContent.match(RAW);
          if (!m || !el.getClientRects().length) continue;
          if (getComputedStyle(el).visibility === "hidden") continue;
          const text = n.textContent.replace(/\s+/g, " ").trim();
          found.push(`raw TeX "${m[0]}" in visible text: ` +
                     text.slice(0, 80));
        }
        return found;
        }"""
    )


def wait_for_images(page):
    """Make lazy images eager; wait until every image settled, or WAIT_MS."""
    page.evaluate(
        "() => document.querySelectorAll('img[loading=lazy]')"
        ".forEach(i => { i.loading = 'eager'; })"
    )
    try:
        page.wait_for_function(
            "() => [...document.images].every(i => i.complete)",
            timeout=WAIT_MS,
        )
    except Exception:  # playwright's TimeoutError: the checks report it
        pass


def image_problems(page):
    """Every <img> loaded: complete with a natural width above zero.

    Lazy images are switched to eager first, so images below the fold or
    hidden for the other colour scheme are checked as well.
    """
    wait_for_images(page)
    broken = page.evaluate(
        """() => [...document.images]
            .filter(i => !i.complete || i.naturalWidth === 0)
            .map(i => i.getAttribute("src"))"""
    )
    return [f"image did not load: {src}" for src in broken]


def current_scheme(page):
    """Material's colour scheme on the body: 'default' or 'slate'."""
    return page.evaluate(
        "() => document.body.getAttribute('data-md-color-scheme')"
    )


def set_scheme(page, scheme):
    """Switch Material's palette with its own toggle until `scheme`.

    Raises AssertionError when the page has no toggle reaching it.
    """
    toggles = page.locator('form[data-md-component="palette"] label')
    for _ in range(toggles.count() + 1):
        now = current_scheme(page)
        if now == scheme:
            return
        visible = toggles.locator("visible=true")
        if visible.count() == 0:
            break
        visible.first.click()
        page.wait_for_function(
            "s => document.body.getAttribute('data-md-color-scheme') !== s",
            arg=now,
            timeout=WAIT_MS,
        )
    raise AssertionError(
        f"no palette toggle switches {page.url} to the {scheme!r} scheme"
    )


def scheme_problems(page, scheme):
    """Only the figure variant meant for `scheme` is displayed.

    Material hides img[src$="#only-dark"] on the light ('default') scheme
    and img[src$="#only-light"] on the dark ('slate') one; a reader sees
    an image when it has a box on the page and is not hidden.
    """
    if current_scheme(page) != scheme:
        return [f"page is in scheme {current_scheme(page)!r}, not {scheme!r}"]
    shown = "only-dark" if scheme == "slate" else "only-light"
    hidden = "only-light" if scheme == "slate" else "only-dark"
    found = page.evaluate(
        """() => [...document.querySelectorAll("img")]
          .filter(i => /#only-(light|dark)$/.test(i.getAttribute("src")))
          .map(i => {
            const r = i.getBoundingClientRect();
            const s = getComputedStyle(i);
            return {src: i.getAttribute("src"),
                    seen: r.width > 0 && r.height > 0 &&
                          s.visibility !== "hidden" && s.opacity !== "0"};
          })"""
    )
    problems = []
    for img in found:
        if img["src"].endswith(shown) and not img["seen"]:
            problems.append(f"{scheme}: {img['src']} is not displayed")
        if img["src"].endswith(hidden) and img["seen"]:
            problems.append(f"{scheme}: {img['src']} is displayed")
    return problems


def overflow_problems(page):
    """The page never scrolls sideways; wide blocks scroll in their box.

    Tables, code blocks and display formulas may be wider than the
    screen, but only inside a box that scrolls (overflow-x auto/scroll)
    and ends within the screen; a box that clips them hides content.
    """
    return page.evaluate(
        """() => {
        const doc = document.documentElement;
        const vw = doc.clientWidth;
        const found = [];
        if (doc.scrollWidth > vw + 1)
          found.push(`page scrolls sideways: ${doc.scrollWidth}px of ` +
                     `content in ${vw}px`);
        const out = e => {
          const r = e.getBoundingClientRect();
          return r.right > vw + 1 || r.left < -1;
        };
        const BLOCKS = "article pre, article table, article .katex-display";
        for (const el of document.querySelectorAll(BLOCKS)) {
          if (!el.getClientRects().length) continue;
          if (el.scrollWidth <= el.clientWidth + 1 && !out(el)) continue;
          // Wide: find the box that scrolls it. An element sticking out
          // of the screen needs an ancestor; one whose content is wider
          // than itself may scroll that content itself.
          let box = out(el) ? el.parentElement : el, clip = null;
          while (box && box !== document.body) {
            const o = getComputedStyle(box).overflowX;
            if (o === "auto" || o === "scroll") break;
            if ((o === "hidden" || o === "clip") && !clip) clip = box;
            box = box.parentElement;
          }
          const name = el.tagName.toLowerCase() + (el.classList.length ?
                       "." + el.classList[0] : "");
          const text = el.textContent.replace(/\\s+/g, " ").slice(0, 40);
          if (clip)
            found.push(`${name} wider than its box, cut off: ${text}`);
          else if (!box || box === document.body)
            found.push(`${name} wider than the screen, in no scrolling ` +
                       `box: ${text}`);
          else if (out(box))
            found.push(`${name}'s scrolling box ends past the screen: ` +
                       text);
        }
        return found;
        }"""
    )


def screenshot(page, path):
    """A full-page PNG at `path`, once fonts and images have settled."""
    page.evaluate("() => document.fonts.ready.then(() => true)")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(path), full_page=True, animations="disabled")
