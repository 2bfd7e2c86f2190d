"""The browser tests' harness: the built site, its server, Chromium, and
a recorder of what the browser asks for.

conftest.py makes the fixtures from these; pagecheck.py holds the checks
of what a reader sees on a loaded page. The Recorder's problems (requests
to other hosts, failed requests, console errors) are checked on every
page the tests open.
"""

import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

# the server and Chromium's flags, shared with the benchmarks
from bench.site_perf.server import CHROMIUM_ARGS, serve  # noqa: F401

# what a first view transfers, and which pages are a notebook's
from bench.site_perf.weight import Transfers, page_kind

INSTALL_HINT = (
    "install Chromium: `apt-get install chromium` (or `make browser`)"
)
REPO = Path(__file__).resolve().parents[2]
# the built site: site/ (make site), or MHA_REF_SITE=site-zensical (make
# test runs these tests on both); screenshots go to a folder per site
SITE = REPO / os.environ.get("MHA_REF_SITE", "site")
SCREENSHOTS = REPO / "build" / SITE.name.replace("site", "screenshots")
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


def notebook_pages(site=SITE):
    """The pages that render a notebook: mkdocs-jupyter's jp-Notebook,
    or (Zensical) the Markdown page with the notebook's download link
    (bench.site_perf.weight.page_kind)."""
    return [
        p
        for p in site_pages(site)
        if page_kind(p.file.read_text("utf-8")) == "notebook"
    ]


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


def is_local(url, origin):
    """True for the local server's own URLs and for data:/blob: URLs."""
    if url.startswith(LOCAL_SCHEMES):
        return True
    return urlsplit(url)[:2] == urlsplit(origin)[:2]


class Tab:
    """One tab kept for a whole test process (conftest.py's `tab`), its
    cache off: every load is a first view."""

    def __init__(self, context):
        self.context = context
        self.origins = set()  # every origin it has shown
        self._open()

    def _open(self):
        self.page = self.context.new_page()
        self.cdp = self.context.new_cdp_session(self.page)
        self.cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})
        # a tab keeps its sessionStorage across loads; a new one has none
        self.page.add_init_script("sessionStorage.clear()")

    def blank(self):
        """Leave the page: its scripts and requests stop."""
        if not self.page.is_closed():
            self.page.goto("about:blank")

    def fresh(self, origin, viewport):
        """The tab as a new one would be: blank, no storage of any origin
        it has shown (sessionStorage: cleared as each document starts),
        the viewport asked for."""
        if self.page.is_closed():  # a test closed it: a new one
            self._open()
        self.blank()
        self.origins.add(origin)
        for seen in self.origins:
            self.cdp.send(
                "Storage.clearDataForOrigin",
                {"origin": seen, "storageTypes": "all"},
            )
        self.page.set_viewport_size(viewport)
        return self.page


class ScopedContext:
    """A browser context as one test sees it: the listeners it adds (a
    Recorder's, Transfers') and every route are removed when the test
    ends, so the next test starts in the same tab, unchanged. Pass it
    where a context is expected."""

    def __init__(self, context):
        self.context = context
        self._listeners = []

    def on(self, event, handler):
        self.context.on(event, handler)
        self._listeners.append((event, handler))

    def route(self, url, handler):
        self.context.route(url, handler)

    def close(self):
        for event, handler in self._listeners:
            self.context.remove_listener(event, handler)
        self._listeners.clear()
        self.context.unroute_all(behavior="ignoreErrors")


class Recorder:
    """Records what a browser context asks for and complains about.

    Every request URL (pages, workers, fonts...) is kept, and requests to
    any other host are aborted before they leave: the attempt is what
    counts, and no test sends real traffic. ``transfers`` counts the
    bytes of every response (bench.site_perf.weight.Transfers).
    """

    def __init__(self, context, origin):
        self.origin = origin
        self.transfers = Transfers(context)
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
        # net::ERR_ABORTED: the page navigated (a reload, a click) while
        # the request was in flight; a missing file shows up as an HTTP
        # status in _on_response instead. Other hosts: see `blocked`.
        if request.failure == "net::ERR_ABORTED":
            return
        if is_local(request.url, self.origin):
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
    Returns wait_until_served(page), to call after a page loads.
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
        served.append(route.request.url)

    served = []

    def wait_until_served(page, wait_ms=5000):
        """Wait until `page` has the sitemap: Material fetches it when a
        page loads, and a click before it arrives is a full reload."""
        end = time.monotonic() + wait_ms / 1000
        while not served and time.monotonic() < end:
            page.wait_for_timeout(50)  # Playwright runs `handle` meanwhile
        page.evaluate(  # two frames: Material has read it
            "() => new Promise(done => requestAnimationFrame(() => "
            "requestAnimationFrame(done)))"
        )

    context.route(f"{origin}/sitemap.xml", handle)
    return wait_until_served
