"""What a page downloads: the figures of the scheme it shows, no more.

Each figure comes in two variants, `-light.svg#only-light` and
`-dark.svg#only-dark`; Material hides the one the scheme does not use
(display: none), and the figure macro (macros.py) makes both lazy, so
Chromium never fetches a hidden one. Two checks prove it:

- on every page, read from its HTML: each figure is one of the two
  variants, marked for its scheme and lazy (the mechanism is in place);
- in Chromium, on the pages with the most figures: every figure is
  scrolled into view, in both schemes, and the requests are counted (the
  mechanism works: what is hidden is never fetched, what is shown loads).
"""

import re

import pagecheck
import pytest

pytestmark = pytest.mark.browser

FIGURES = re.compile(r"/generated/figures/[^/?#]+-(light|dark)\.svg")
VARIANT = {"default": "light", "slate": "dark"}
IMG = re.compile(r"<img\b[^>]*>")
SRC = re.compile(r'\ssrc="([^"]*)"')
BROWSED = 2  # pages whose requests Chromium counts: the most figures


def figure_problems(html):
    """Each generated figure of a page's HTML: a -light or -dark variant,
    marked #only-light or #only-dark to match, loading="lazy"."""
    problems = []
    for img in IMG.findall(html):
        src = SRC.search(img)
        if not src or "/generated/figures/" not in src[1]:
            continue
        variant = FIGURES.search(src[1])
        if not variant or not src[1].endswith(f"#only-{variant[1]}"):
            problems.append(f"{src[1]}: not one scheme's variant")
        if 'loading="lazy"' not in img:
            problems.append(f"{src[1]}: not lazy, so fetched while hidden")
    return problems


def figure_pages(site_dir):
    """(page, number of figures) of each page with figures, most first."""
    from harness import site_pages

    counted = [
        (p, p.file.read_text(encoding="utf-8").count("#only-light"))
        for p in site_pages(site_dir)
    ]
    return sorted(
        [(p, n) for p, n in counted if n], key=lambda pn: (-pn[1], pn[0].name)
    )


def test_every_figure_is_one_lazy_variant(site_dir):
    pages = figure_pages(site_dir)
    assert pages, "no page of the site shows a figure"
    problems = [
        f"{page.name}: {problem}"
        for page, _ in pages
        for problem in figure_problems(page.file.read_text(encoding="utf-8"))
    ]
    assert not problems, "\n".join(problems)


def test_figure_problems_catches_an_eager_or_unmarked_figure():
    """Drifted: a figure drawn without lazy=True, one with no #only-."""
    fig = "../generated/figures/f"
    good = f'<img alt="a" loading="lazy" src="{fig}-dark.svg#only-dark" />'
    eager = f'<img alt="a" src="{fig}-light.svg#only-light" />'
    unmarked = f'<img alt="a" loading="lazy" src="{fig}-light.svg" />'
    assert figure_problems(good) == []
    assert [p.split(": ")[1] for p in figure_problems(eager + unmarked)] == [
        "not lazy, so fetched while hidden",
        "not one scheme's variant",
    ]


@pytest.mark.parametrize("scheme", sorted(VARIANT))
def test_pages_fetch_only_the_figures_of_their_scheme(
    scheme, site_dir, site_origin, open_page
):
    pages = [page for page, _ in figure_pages(site_dir)[:BROWSED]]
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
