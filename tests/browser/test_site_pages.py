"""Every page of the built site, as a reader's browser shows it.

Pages come from site/ itself (each **/index.html but 404), so a page
added to the nav is checked without touching this file. Each page is
loaded once, offline, and looked at in four states:

- first view (the cold load itself): its bytes within the budget of a
  text or a notebook page (bench/site_perf/weight.py), a title that is its nav
  entry, no Python formatting in the prose (True, 0.00e+00, -0.0), and
  on a notebook page no In [10] first nor a glued value printed twice;
- light scheme, desktop: HTTP 200, every formula typeset once, no raw
  TeX, every figure loaded, the light figure variants shown, their text
  legible on the page, nothing cut off, every box that hides content
  showing that it scrolls, 79 columns in every code block, and every
  rule axe-core runs by default;
- dark scheme, desktop: the dark variants shown, their text legible
  (a light variant's black labels vanish there); axe's colour contrast,
  which the scheme changes;
- dark scheme, phone (390 px): the variants again, nothing scrolls
  sideways, a figure wider than the screen shows that it scrolls, and
  axe's scrollable-region-focusable (which boxes scroll depends on the
  width, not on the scheme: the light scheme is not shown again here;
  on a notebook's page, whose boxes that scroll are its code cells,
  drawn alike on every notebook's page, once per test process);
- a notebook's page is one template around its cells: the first of a
  test process is looked at in all three states, the others in the
  first only, where their own math, images and code are;
- throughout: no request to another host, no failed request, no
  console error.

Serious and critical axe findings fail; moderate and minor do not. axe's
colour rules (contrast, links told apart from text) depend only on how
an element looks, so each look is checked once per test process, on the
first page that shows it (pagecheck.BY_LOOK). Each check is shown
failing on a small broken page in test_pagecheck.py.
With MHA_REF_SCREENSHOTS=1 (`make screenshots`) each state is also saved
as a full-page PNG in build/screenshots/, for a person to look at.
"""

import os

import harness
import pagecheck
import pytest
from harness import DESKTOP, PHONE, SCREENSHOTS

from bench.site_perf.weight import budget_problems, page_kind

pytestmark = pytest.mark.browser

SCHEMES = {"default": "light", "slate": "dark"}
# (viewport, schemes in the order they are shown, axe rules per scheme:
# None runs every default rule, () none). The layout is checked in the
# first scheme of each viewport; it is the same in both.
SHOOT = os.environ.get("MHA_REF_SCREENSHOTS", "") not in ("", "0")
STATES = [
    (DESKTOP, {"default": None, "slate": ["color-contrast"]}),
    (PHONE, {"slate": ["scrollable-region-focusable"]}),
]
if SHOOT:  # the light phone too, when a person looks (make screenshots)
    STATES[1][1]["default"] = ()


# The phone's axe rule (scrollable-region-focusable) on a notebook's page
# reads its code cells, which every notebook's page draws alike (one
# template): it runs on the first notebook's page of each test process.
NOTEBOOK_PHONE_AXE_DONE = []
NOTEBOOK_STATES_DONE = []  # notebook pages seen by this test process


def report(site_page, problems):
    """One assertion message listing every problem of the page."""
    lines = "\n  ".join(problems)
    return f"{site_page.name} ({site_page.path or '/'}):\n  {lines}"


def test_site_follows_the_systems_dark_preference(
    site_dir, site_origin, browser
):
    """A first visit from a system set to dark mode gets the dark scheme
    (Material's palette media queries), and one set to light the light
    one; the toggle then keeps the reader's choice."""
    problems = []
    for preference, scheme in (("dark", "slate"), ("light", "default")):
        context = browser.new_context(color_scheme=preference)
        try:
            page = context.new_page()
            page.goto(f"{site_origin}/", wait_until="load")
            now = pagecheck.current_scheme(page)
            if now != scheme:
                problems.append(
                    f"a system preferring {preference} gets {now!r}, not "
                    f"{scheme!r}"
                )
        finally:
            context.close()
    assert not problems, "\n".join(problems)


def test_reused_tab_forgets_the_scheme_a_test_chose(site_origin, tab):
    """The tab the tests share (conftest.py) starts each test as a new
    one would: a scheme chosen in one test (Material keeps it in
    localStorage) is gone in the next."""
    page = tab.fresh(site_origin, DESKTOP)
    page.goto(f"{site_origin}/", wait_until="load")
    pagecheck.set_scheme(page, "slate")
    page.goto(f"{site_origin}/", wait_until="load")
    assert pagecheck.current_scheme(page) == "slate"  # kept in one test
    page = tab.fresh(site_origin, DESKTOP)
    page.goto(f"{site_origin}/", wait_until="load")
    assert pagecheck.current_scheme(page) == "default"
    tab.blank()


def test_site_has_notebook_page(site_dir):
    assert harness.notebook_pages(site_dir), (
        "no page in site/ renders a notebook (jp-Notebook)"
    )


def test_page(site_page, site_origin, open_page):
    """Offline, math, figures, schemes, widths and axe-core: see above."""
    page, recorder = open_page(site_origin, viewport=DESKTOP)
    response = page.goto(f"{site_origin}/{site_page.path}", wait_until="load")
    problems = []
    if response.status != 200:
        problems.append(f"HTTP {response.status}")
    html = response.text()
    recorder.transfers.settle(page)  # the first view: what loaded by now
    weight = recorder.transfers.total()
    problems += budget_problems(page_kind(html), weight)
    problems += pagecheck.title_problems(page)
    problems += pagecheck.raw_python_problems(page)
    problems += pagecheck.notebook_problems(page)
    problems += pagecheck.math_problems(page, html)
    problems += pagecheck.raw_tex_problems(page)
    problems += pagecheck.image_problems(page)
    notebook = page_kind(html) == "notebook"
    # every notebook's page is one template around its cells: the first
    # of a test process is looked at in every state, the others in the
    # first (light, desktop), where their own math, images and code are
    states = STATES
    if notebook:
        if NOTEBOOK_STATES_DONE and not SHOOT:
            states = [(DESKTOP, dict(list(STATES[0][1].items())[:1]))]
        NOTEBOOK_STATES_DONE.append(site_page.name)
    for viewport, schemes in states:
        page.set_viewport_size(viewport)
        for n, (scheme, rules) in enumerate(schemes.items()):
            pagecheck.set_scheme(page, scheme)
            found = pagecheck.scheme_problems(page, scheme)
            if viewport is DESKTOP:  # the same figures at every width
                found += pagecheck.figure_text_problems(page)
            if n == 0:
                found += pagecheck.overflow_problems(page)
                found += pagecheck.scroll_cue_problems(page)
            if n == 0 and viewport is DESKTOP:
                found += pagecheck.code_width_problems(page)
            if notebook and viewport is not DESKTOP:
                if NOTEBOOK_PHONE_AXE_DONE:
                    rules = ()  # the same template: checked once a process
                NOTEBOOK_PHONE_AXE_DONE.append(site_page.name)
            if rules != ():
                found += pagecheck.axe_problems(page, rules)
            where = f"{viewport['width']}px {SCHEMES[scheme]}"
            problems += [f"{where}: {p}" for p in found]
            if SHOOT:
                name = f"{site_page.name}-{viewport['width']}-"
                name += SCHEMES[scheme]
                pagecheck.screenshot(page, SCREENSHOTS / f"{name}.png")
    problems += recorder.problems()
    assert not problems, report(site_page, problems)
