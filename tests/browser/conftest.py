"""Fixtures for the browser tests: the built site, a server, Chromium.

The site is served from site/ (build it with `make site`) by a threaded
http.server on 127.0.0.1 at a free port; one headless Chromium, driven
by Playwright's sync API, serves the whole session, and each test gets
a fresh context (its own storage, so a colour scheme never leaks).

Without a browser the tests skip and say how to get one, except in CI
(CI=true), where a missing browser fails: a suite that skips there
proves nothing.
"""

import contextlib

import harness
import pytest
from harness import DESKTOP, SITE, site_pages


def pytest_generate_tests(metafunc):
    """Parametrize `site_page` over the pages found in site/.

    With no site/ the one parameter is None, and the fixture fails with
    the fix ("run make site first") instead of collecting nothing.
    """
    if "site_page" in metafunc.fixturenames:
        pages = site_pages() if SITE.is_dir() else []
        metafunc.parametrize(
            "site_page",
            pages or [None],
            ids=[p.name for p in pages] or ["no-site"],
            indirect=True,
        )


def skip_or_fail(reason):
    """Skip with `reason`, or fail with it in CI."""
    if harness.in_ci():
        pytest.fail(
            f"{reason} (CI is set, so this fails instead of skipping)",
            pytrace=False,
        )
    pytest.skip(reason)


@pytest.fixture(scope="session")
def site_dir():
    """The built site; fails when it is missing or empty."""
    if not (SITE / "index.html").is_file():
        pytest.fail(
            f"{SITE} has no index.html: run make site first", pytrace=False
        )
    return SITE


@pytest.fixture
def site_page(request, site_dir):
    """One SitePage of the built site (parametrized from site/)."""
    if request.param is None:
        pytest.fail("no pages in site/: run make site first", pytrace=False)
    return request.param


@pytest.fixture(scope="session")
def site_origin(site_dir):
    """http://127.0.0.1:PORT serving site/ for the whole session."""
    with harness.serve(site_dir) as origin:
        yield origin


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the session; skips (or fails in CI)."""
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        skip_or_fail("Playwright is not installed: pip install -e '.[dev]'")
    executable = harness.find_chromium()
    if executable is None:
        skip_or_fail(f"no Chromium found: {harness.INSTALL_HINT}")
    playwright = sync_playwright().start()
    try:
        browser = playwright.chromium.launch(
            executable_path=executable,
            args=harness.CHROMIUM_ARGS,
            headless=True,
        )
    except Error as error:
        playwright.stop()
        first = str(error).strip().splitlines()[0]
        skip_or_fail(
            f"Chromium at {executable} did not start ({first}): "
            f"{harness.INSTALL_HINT}"
        )
    yield browser
    browser.close()
    playwright.stop()


@pytest.fixture(scope="session")
def tab(browser):
    """The one tab each test process reuses: a fresh tab costs its
    renderer about 2 CPU-seconds before the page's own work, as much as
    loading a long page. Its cache is off, so every load is a first view
    (bench.site_perf.weight counts the same bytes as in a new context)."""
    context = browser.new_context(viewport=DESKTOP)
    yield harness.Tab(context)
    context.close()


@pytest.fixture
def open_page(browser, tab):
    """Factory: open_page(origin, viewport=DESKTOP) -> (page, recorder).

    The first call of a test gets the process's tab (see `tab`), emptied:
    a blank page, no storage of any origin it has shown (so a colour
    scheme never leaks), the viewport asked for, and only this test's
    listeners and routes, removed when the test ends. Later calls make a
    fresh context each, closed at the end of the test. Requests to other
    hosts are recorded and aborted.
    """
    contexts, scopes = [], []

    def open_(origin, viewport=None):
        if not scopes:
            page = tab.fresh(origin, viewport or DESKTOP)
            scopes.append(harness.ScopedContext(tab.context))
            return page, harness.Recorder(scopes[0], origin)
        context = browser.new_context(viewport=viewport or DESKTOP)
        contexts.append(context)
        recorder = harness.Recorder(context, origin)
        return context.new_page(), recorder

    yield open_
    for scope in scopes:
        scope.close()
        tab.blank()
    for context in contexts:
        context.close()


@pytest.fixture
def serve_dir():
    """Factory: serve_dir(folder) -> origin, stopped after the test."""
    with contextlib.ExitStack() as stack:
        yield lambda folder: stack.enter_context(harness.serve(folder))
