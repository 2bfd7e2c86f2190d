"""What a page downloads: the figures of the scheme it shows, no more.

Each figure comes in two variants, `-light.svg#only-light` and
`-dark.svg#only-dark`; Material hides the one the scheme does not use
(display: none), and the figure macro (macros.py) makes both lazy, so
Chromium never fetches a hidden one. Every figure of every page with
figures is scrolled into view, in both schemes, and the requests are
counted.
"""

import re

import pagecheck
import pytest

pytestmark = pytest.mark.browser

FIGURES = re.compile(r"/generated/figures/[^/?#]+-(light|dark)\.svg")
VARIANT = {"default": "light", "slate": "dark"}


def figure_pages(site_dir):
    from harness import site_pages

    return [
        p
        for p in site_pages(site_dir)
        if "#only-light" in p.file.read_text(encoding="utf-8")
    ]


@pytest.mark.parametrize("scheme", sorted(VARIANT))
def test_pages_fetch_only_the_figures_of_their_scheme(
    scheme, site_dir, site_origin, open_page
):
    pages = figure_pages(site_dir)
    assert pages, "no page of the site shows a figure"
    problems = []
    variant = VARIANT[scheme]
    page, recorder = open_page(site_origin)
    page.goto(f"{site_origin}/", wait_until="load")  # no figures
    pagecheck.set_scheme(page, scheme)  # kept for the next pages
    for site_page in pages:
        start = len(recorder.requests)
        page.goto(f"{site_origin}/{site_page.path}", wait_until="load")
        # bring each figure the reader could see into view, in turn,
        # until it has loaded (one in a closed tab has no box: unseen)
        shown = page.evaluate(
            """variant => [...document.images]
              .filter(i => i.getAttribute("src")
                            .endsWith("#only-" + variant) &&
                           i.getClientRects().length > 0)
              .map((i, n) => {
                i.setAttribute("data-test-figure", n);
                return i.src;
              })""",
            variant,
        )
        figure = "n => document.querySelector(`[data-test-figure='${n}']`)"
        for n in range(len(shown)):
            page.evaluate(f"{figure}.scrollIntoView()", n)
            pagecheck.settle(page, f"{figure}.complete", n)
        fetched = [
            FIGURES.search(url)
            for url in recorder.requests[start:]
            if FIGURES.search(url)
        ]
        where = f"{scheme} {site_page.name}"
        other = sorted({m[0] for m in fetched if m[1] != variant})
        problems += [f"{where}: fetched {url}" for url in other]
        # each shown figure loaded (the browser may serve one from
        # its memory cache without a request the recorder sees)
        broken = page.evaluate(
            """() => [...document.querySelectorAll("[data-test-figure]")]
              .filter(i => !(i.complete && i.naturalWidth > 0))
              .map(i => i.src)"""
        )
        problems += [f"{where}: never loaded {url}" for url in broken]
    problems += recorder.problems()
    assert not problems, "\n".join(problems)
