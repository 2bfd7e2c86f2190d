"""Every page of the built site, as a reader's browser shows it.

Pages come from site/ itself (each **/index.html but 404), so a page
added to the nav is checked without touching this file. For each page:
it loads offline with no error, every formula and figure renders, each
colour scheme shows its own figure variant, nothing scrolls sideways on
a phone, and four full-page screenshots land in build/screenshots/.
"""

import harness
import pagecheck
import pytest
from harness import DESKTOP, PHONE, SCREENSHOTS

pytestmark = pytest.mark.browser

SCHEMES = {"default": "light", "slate": "dark"}


def report(site_page, problems):
    """One assertion message listing every problem of the page."""
    lines = "\n  ".join(problems)
    return f"{site_page.name} ({site_page.path or '/'}):\n  {lines}"


def test_site_has_notebook_page(site_dir):
    assert harness.notebook_pages(site_dir), (
        "no page in site/ renders a notebook (jp-Notebook)"
    )


def test_page_loads_offline_with_math_and_figures(
    site_page, site_origin, open_page
):
    page, recorder = open_page(site_origin)
    response = page.goto(f"{site_origin}/{site_page.path}", wait_until="load")
    problems = []
    if response.status != 200:
        problems.append(f"HTTP {response.status}")
    html = response.text()
    problems += pagecheck.math_problems(page, html)
    problems += pagecheck.raw_tex_problems(page)
    problems += pagecheck.image_problems(page)
    problems += recorder.problems()
    assert not problems, report(site_page, problems)


def test_page_schemes_and_widths(site_page, site_origin, open_page):
    """Light and dark, desktop and phone: figures, overflow, screenshots."""
    page, recorder = open_page(site_origin, viewport=DESKTOP)
    response = page.goto(f"{site_origin}/{site_page.path}", wait_until="load")
    html = response.text()
    pagecheck.wait_for_math(page, pagecheck.source_math_count(page, html))
    pagecheck.wait_for_images(page)
    problems = []
    for viewport, order in [
        (DESKTOP, ["default", "slate"]),
        (PHONE, ["slate", "default"]),
    ]:
        page.set_viewport_size(viewport)
        for scheme in order:
            pagecheck.set_scheme(page, scheme)
            found = pagecheck.scheme_problems(page, scheme)
            if scheme == order[0]:  # the layout is the same in both
                found += pagecheck.overflow_problems(page)
            problems += [f"{viewport['width']}px: {p}" for p in found]
            name = f"{site_page.name}-{viewport['width']}-{SCHEMES[scheme]}"
            pagecheck.screenshot(page, SCREENSHOTS / f"{name}.png")
    problems += recorder.problems()
    assert not problems, report(site_page, problems)
