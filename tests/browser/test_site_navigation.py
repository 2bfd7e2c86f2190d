"""Moving around the site as a reader does: instant navigation, search.

Material's navigation.instant swaps the page content without a full
reload, so math must be rendered again on every swap (KaTeX re-run on
Material's document$). A marker set on `window` before a click survives
only when no reload happened.
"""

import html as html_lib
import re

import harness
import pagecheck
import pytest

pytestmark = pytest.mark.browser

MARKER = "__mhaRefNoReload"


def page_named(site_dir, name):
    """The SitePage called `name`; fails when the site has none."""
    pages = {p.name: p for p in harness.site_pages(site_dir)}
    assert name in pages, f"no page {name!r} in site/: {sorted(pages)}"
    return pages[name]


def notebook_page(site_dir):
    """A page that renders a notebook (jp-Notebook) and is in the nav:
    the experiment's (the other notebooks are linked from their pages)."""
    pages = harness.notebook_pages(site_dir)
    pages = [p for p in pages if p.name.endswith("-experiment")] or pages
    if not pages:
        pytest.fail("no page in site/ renders a notebook (jp-Notebook)")
    return pages[0]


def title_of(html):
    """The <title> of a served page, as document.title reads it."""
    match = re.search(r"<title>(.*?)</title>", html, re.S)
    return html_lib.unescape(match.group(1)).strip() if match else ""


def click_nav_link(page, origin, target):
    """Click the primary-nav link to `target`; wait for its content.

    Returns the problems: math not rendered on the new content, or a
    full reload where instant navigation should have swapped content.
    """
    url = f"{origin}/{target.path}"
    page.evaluate(f"() => {{ window.{MARKER} = true }}")
    found = page.evaluate(
        """url => {
        const link = [...document.querySelectorAll(
            ".md-nav--primary a.md-nav__link")]
          .find(a => a.href === url && a.getClientRects().length);
        if (link) link.setAttribute("data-test-target", "");
        return Boolean(link);
        }""",
        url,
    )
    assert found, f"no visible nav link to {url} on {page.url}"
    html = target.file.read_text("utf-8")
    page.click("[data-test-target]")
    page.wait_for_url(url)
    page.wait_for_function(
        "t => document.title === t",
        arg=title_of(html),
        timeout=pagecheck.WAIT_MS,
    )
    problems = pagecheck.math_problems(page, html)
    problems += pagecheck.raw_tex_problems(page)
    if not page.evaluate(f"() => window.{MARKER} === true"):
        problems.append(
            f"full reload instead of instant navigation to {target.path}"
        )
    if pagecheck.source_math_count(page, html) == 0:
        problems.append(f"{target.path} has no math to check")
    return [f"-> {target.name}: {p}" for p in problems]


def test_instant_navigation_renders_math(site_dir, site_origin, open_page):
    page, recorder = open_page(site_origin)
    sitemap = harness.localize_sitemap(page.context, site_origin)
    page.goto(f"{site_origin}/", wait_until="load")
    sitemap(page)
    problems = click_nav_link(
        page, site_origin, page_named(site_dir, "scaling")
    )
    assert page.locator(".arithmatex .katex").count() > 0
    problems += recorder.problems()
    assert not problems, "\n".join(problems)


def test_instant_navigation_to_and_from_notebook(
    site_dir, site_origin, open_page
):
    page, recorder = open_page(site_origin)
    sitemap = harness.localize_sitemap(page.context, site_origin)
    scaling = page_named(site_dir, "scaling")
    page.goto(f"{site_origin}/{scaling.path}", wait_until="load")
    sitemap(page)
    problems = click_nav_link(page, site_origin, notebook_page(site_dir))
    problems += click_nav_link(page, site_origin, scaling)
    problems += recorder.problems()
    assert not problems, "\n".join(problems)


def test_search_finds_scaling_page(site_dir, site_origin, open_page):
    if (site_dir / "search.json").is_file():  # the Zensical build
        index = (site_dir / "search.json").read_text(encoding="utf-8")
        assert '"scaling/"' in index, "scaling/ is not in search.json"
        pytest.skip(
            "Zensical 0.0.73 has its own search box, not Material's "
            ".md-search__input: only its index (search.json) is checked"
        )
    page, recorder = open_page(site_origin)
    page.goto(f"{site_origin}/", wait_until="load")
    page.locator("label.md-header__button[for=__search]").or_(
        page.locator(".md-search__input")
    ).locator("visible=true").first.click()
    page.locator(".md-search__input").press_sequentially("sqrt")
    links = page.locator("a.md-search-result__link")
    links.first.wait_for(timeout=pagecheck.WAIT_MS)
    hrefs = links.evaluate_all("as => as.map(a => a.href)")
    assert any("scaling" in href for href in hrefs), hrefs
    assert not recorder.problems(), "\n".join(recorder.problems())
