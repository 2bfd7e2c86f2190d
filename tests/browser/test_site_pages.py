"""Every page of the built site, as a reader's browser shows it.

Pages come from site/ itself (each **/index.html but 404), so a page
added to the nav is checked without touching this file. Each page is
loaded once, offline, and looked at in four states:

- light scheme, desktop: HTTP 200, every formula typeset once, no raw
  TeX, every figure loaded, the light figure variants shown, nothing cut
  off, and every rule axe-core runs by default;
- dark scheme, desktop: the dark variants shown; axe's colour contrast,
  which the scheme changes;
- dark, then light scheme, phone (390 px): the variants again, nothing
  scrolls sideways, and axe's scrollable-region-focusable (which boxes
  scroll depends on the width);
- throughout: no request to another host, no failed request, no
  console error.

Serious and critical axe findings fail; moderate and minor do not. Each
check is shown failing on a small broken page in test_pagecheck.py.
With MHA_REF_SCREENSHOTS=1 (`make screenshots`) each state is also saved
as a full-page PNG in build/screenshots/, for a person to look at.
"""

import os

import harness
import pagecheck
import pytest
from harness import DESKTOP, PHONE, SCREENSHOTS

pytestmark = pytest.mark.browser

SCHEMES = {"default": "light", "slate": "dark"}
# (viewport, schemes in the order they are shown, axe rules per scheme:
# None runs every default rule, () none). The layout is checked in the
# first scheme of each viewport; it is the same in both.
STATES = [
    (DESKTOP, {"default": None, "slate": ["color-contrast"]}),
    (PHONE, {"slate": (), "default": ["scrollable-region-focusable"]}),
]
SHOOT = os.environ.get("MHA_REF_SCREENSHOTS", "") not in ("", "0")


def report(site_page, problems):
    """One assertion message listing every problem of the page."""
    lines = "\n  ".join(problems)
    return f"{site_page.name} ({site_page.path or '/'}):\n  {lines}"


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
    problems += pagecheck.math_problems(page, html)
    problems += pagecheck.raw_tex_problems(page)
    problems += pagecheck.image_problems(page)
    for viewport, schemes in STATES:
        page.set_viewport_size(viewport)
        for n, (scheme, rules) in enumerate(schemes.items()):
            pagecheck.set_scheme(page, scheme)
            found = pagecheck.scheme_problems(page, scheme)
            if n == 0:
                found += pagecheck.overflow_problems(page)
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
