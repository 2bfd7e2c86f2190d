"""The page checks fail on broken pages, and only on those.

Small pages written into tmp_path are served exactly as the site is
(same server, same browser, same recorder), with the repository's
vendored KaTeX copied next to them so formulas render for real.
"""

import shutil

import pagecheck
import pytest
from harness import PHONE, REPO, site_pages

pytestmark = pytest.mark.browser

KATEX = REPO / "docs" / "assets" / "katex"

# What Material does with the two figure variants (its palette CSS).
SCHEME_CSS = """
[data-md-color-scheme=default] img[src$="#only-dark"],
[data-md-color-scheme=slate] img[src$="#only-light"] { display: none }
"""
SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20">'
    '<rect width="40" height="20" fill="teal"/></svg>'
)
# auto-render with the delimiters arithmatex emits, plus $ for notebooks.
RENDER = """
<script>
renderMathInElement(document.body, {
  delimiters: [
    {left: "$$", right: "$$", display: true},
    {left: "$", right: "$", display: false},
    {left: "\\\\(", right: "\\\\)", display: false},
    {left: "\\\\[", right: "\\\\]", display: true}],
  throwOnError: THROW});
</script>
"""


def write_page(folder, body, *, katex=True, throw=False, css=""):
    """Write folder/index.html around `body`; return its file name."""
    head = f"<style>{SCHEME_CSS}{css}</style>"
    tail = ""
    if katex:
        head += (
            '<link rel="stylesheet" href="katex/katex.min.css">'
            '<script src="katex/katex.min.js"></script>'
            '<script src="katex/contrib/auto-render.min.js"></script>'
        )
        tail = RENDER.replace("THROW", "true" if throw else "false")
    html = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f'<title>test page</title><link rel="icon" href="data:,">{head}'
        "</head>"
        f'<body data-md-color-scheme="default"><article>{body}</article>'
        f"{tail}</body></html>"
    )
    (folder / "index.html").write_text(html, encoding="utf-8")
    return html


@pytest.fixture
def synthetic(tmp_path, serve_dir, open_page):
    """Factory: synthetic(body, **kw) -> (page, recorder, html), loaded."""
    if not (KATEX / "katex.min.js").is_file():
        pytest.fail(
            f"no KaTeX in {KATEX}: run ./vendor_katex.sh", pytrace=False
        )
    shutil.copytree(KATEX, tmp_path / "katex")
    (tmp_path / "fig-light.svg").write_text(SVG)
    (tmp_path / "fig-dark.svg").write_text(SVG)
    origin = serve_dir(tmp_path)

    def load(body, viewport=None, **kw):
        html = write_page(tmp_path, body, **kw)
        page, recorder = open_page(origin, viewport)
        response = page.goto(origin + "/", wait_until="load")
        assert response.status == 200
        return page, recorder, html

    return load


SHORT = 300  # ms: a broken page's math never renders, no need to wait long
GOOD_MATH = (
    r'<p>Inline <span class="arithmatex">\(QK^\top\)</span> and</p>'
    r'<div class="arithmatex">\[S=\frac{QK^\top}{\sqrt{d_k}}\]</div>'
)


def test_math_problems_none_when_every_formula_renders(synthetic):
    page, recorder, html = synthetic(GOOD_MATH)
    assert pagecheck.math_problems(page, html) == []
    assert pagecheck.raw_tex_problems(page) == []
    assert recorder.problems() == []
    assert page.locator(".katex").count() == 2


def test_math_problems_detects_katex_error(synthetic):
    bad = r'<span class="arithmatex">\(\frac{1}\)</span>'
    page, _, html = synthetic(GOOD_MATH + bad)
    problems = pagecheck.math_problems(page, html)
    assert any(p.startswith("KaTeX error:") for p in problems), problems
    assert any("formula not rendered once" in p for p in problems)


def test_math_problems_detects_formula_left_as_text(synthetic):
    # auto-render's throwOnError: it logs the ParseError, keeps the TeX.
    bad = r'<span class="arithmatex">\(\frac{1}\)</span>'
    page, recorder, html = synthetic(GOOD_MATH + bad, throw=True)
    problems = pagecheck.math_problems(page, html, wait_ms=SHORT)
    assert "2 formulas rendered by KaTeX, the page's source has 3" in (
        problems
    )
    assert any(r"raw TeX" in p for p in pagecheck.raw_tex_problems(page))
    assert any("console error" in p for p in recorder.problems())


def test_math_problems_detects_page_without_renderer(synthetic):
    page, _, html = synthetic(GOOD_MATH, katex=False)
    problems = pagecheck.math_problems(page, html, wait_ms=SHORT)
    assert problems[0] == (
        "0 formulas rendered by KaTeX, the page's source has 2"
    )
    assert len(pagecheck.raw_tex_problems(page)) >= 2


def test_math_problems_counts_notebook_markdown_math(synthetic):
    cell = (
        '<div class="jp-RenderedMarkdown"><p>Weights $a_i$ sum to one:'
        "</p><p>$$\\sum_j A_{ij}=1$$</p><pre><code>cost = $5 $6</code>"
        "</pre></div>"
    )
    page, _, html = synthetic(cell)
    assert pagecheck.source_math_count(page, html) == 2
    assert pagecheck.math_problems(page, html) == []
    page, _, html = synthetic(cell, katex=False)
    assert pagecheck.math_problems(page, html, wait_ms=SHORT) == [
        "0 formulas rendered by KaTeX, the page's source has 2"
    ]
    raw = pagecheck.raw_tex_problems(page)
    assert any('"$a_i$"' in p for p in raw), raw
    assert any('"$$"' in p for p in raw), raw


def test_raw_tex_problems_detects_double_dollars(synthetic):
    page, _, _ = synthetic(
        "<p>left over: $$x$$</p><pre><code>$$ in code is fine \\(</code>"
        "</pre><p hidden>$$hidden$$</p>",
        katex=False,
    )
    problems = pagecheck.raw_tex_problems(page)
    assert len(problems) == 1, problems
    assert "$$x$$" in problems[0]


def test_image_problems_detects_missing_file(synthetic):
    page, recorder, _ = synthetic(
        '<img src="fig-light.svg" alt="ok">'
        '<img src="generated/figures/gone.svg" alt="missing">'
        '<img src="fig-dark.svg" loading="lazy" style="margin-top:3000px">'
    )
    assert pagecheck.image_problems(page) == [
        "image did not load: generated/figures/gone.svg"
    ]
    assert any("gone.svg (HTTP 404)" in p for p in recorder.problems()), (
        recorder.problems()
    )


def test_recorder_detects_request_to_another_host(synthetic):
    _, recorder, _ = synthetic(
        '<link rel="stylesheet" href="https://fonts.googleapis.com/css">'
        '<script src="https://cdn.example.com/x.js"></script><p>hi</p>'
    )
    problems = recorder.problems()
    assert "request to another host: https://cdn.example.com/x.js" in (
        problems
    )
    assert "request to another host: https://fonts.googleapis.com/css" in (
        problems
    )
    # Aborted before leaving: no real traffic, and not a local failure.
    assert sorted(recorder.blocked) == [
        "https://cdn.example.com/x.js",
        "https://fonts.googleapis.com/css",
    ]
    assert not any(p.startswith("failed request") for p in problems)


def test_recorder_detects_console_error(synthetic):
    _, recorder, _ = synthetic(
        "<script>console.error('boom')</script>"
        "<script>undefinedFunction()</script>"
    )
    problems = recorder.problems()
    assert any(p.startswith("console error: boom") for p in problems)
    assert any("undefinedFunction" in p for p in problems), problems


def test_recorder_quiet_on_clean_page(synthetic):
    page, recorder, _ = synthetic(
        '<img src="fig-light.svg#only-light" alt="x">'
        '<img src="fig-dark.svg#only-dark" alt="x">' + GOOD_MATH
    )
    assert pagecheck.image_problems(page) == []
    assert recorder.problems() == []


FIGURES = (
    '<img src="fig-light.svg#only-light" alt="light">'
    '<img src="fig-dark.svg#only-dark" alt="dark">'
)


def set_body_scheme(page, scheme):
    page.evaluate(
        "s => document.body.setAttribute('data-md-color-scheme', s)", scheme
    )


@pytest.mark.parametrize("scheme", ["default", "slate"])
def test_scheme_problems_none_when_variant_matches(synthetic, scheme):
    page, _, _ = synthetic(FIGURES, katex=False)
    set_body_scheme(page, scheme)
    assert pagecheck.scheme_problems(page, scheme) == []


@pytest.mark.parametrize("scheme", ["default", "slate"])
def test_scheme_problems_detects_wrong_variant(synthetic, scheme):
    # Without Material's rule both variants show in both schemes.
    page, _, _ = synthetic(
        FIGURES, katex=False, css="img { display: inline !important }"
    )
    set_body_scheme(page, scheme)
    wrong = "dark" if scheme == "default" else "light"
    assert pagecheck.scheme_problems(page, scheme) == [
        f"{scheme}: fig-{wrong}.svg#only-{wrong} is displayed"
    ]


def test_scheme_problems_detects_hidden_variant(synthetic):
    page, _, _ = synthetic(
        FIGURES, katex=False, css="img { visibility: hidden }"
    )
    assert pagecheck.scheme_problems(page, "default") == [
        "default: fig-light.svg#only-light is not displayed"
    ]


def test_set_scheme_fails_without_palette_toggle(synthetic):
    page, _, _ = synthetic("<p>no toggle</p>", katex=False)
    with pytest.raises(AssertionError, match="no palette toggle"):
        pagecheck.set_scheme(page, "slate")


WIDE = "x" * 300


def test_overflow_problems_none_when_wide_blocks_scroll(synthetic):
    page, _, _ = synthetic(
        f'<pre style="overflow-x:auto">{WIDE}</pre>'
        f'<div style="overflow-x:auto"><table><tr><td>{WIDE}</td></tr>'
        "</table></div>"
        # KaTeX's way: a scrolling block, as wide as its content, inside
        # a scrolling box the width of the screen.
        '<div style="overflow-x:auto"><pre style="overflow-x:auto;'
        f'width:max-content">{WIDE}</pre></div>',
        viewport=PHONE,
        katex=False,
    )
    assert pagecheck.overflow_problems(page) == []


def test_overflow_problems_detects_page_scrolling_sideways(synthetic):
    page, _, _ = synthetic(f"<pre>{WIDE}</pre>", viewport=PHONE, katex=False)
    problems = pagecheck.overflow_problems(page)
    assert problems[0].startswith("page scrolls sideways")
    assert any("pre wider than the screen" in p for p in problems)


def test_overflow_problems_detects_cut_off_table(synthetic):
    page, _, _ = synthetic(
        f'<div style="overflow:hidden"><table><tr><td>{WIDE}</td></tr>'
        "</table></div>",
        viewport=PHONE,
        katex=False,
    )
    assert pagecheck.overflow_problems(page) == [
        f"table wider than its box, cut off: {WIDE[:40]}"
    ]


def test_overflow_problems_detects_wide_element_in_no_scrolling_box(
    synthetic,
):
    page, _, _ = synthetic(
        '<div style="overflow-x:auto"><p style="width:700px">fine</p></div>'
        '<div class="figure" style="width:700px"><p>cut off</p></div>',
        viewport=PHONE,
        katex=False,
    )
    problems = pagecheck.overflow_problems(page)
    assert problems[0].startswith("page scrolls sideways")
    assert problems[1:] == [
        "div.figure ends at 708px, past the content column (382px), in no "
        "scrolling box: cut off"
    ]


def test_site_pages_lists_each_page_but_404_and_assets(tmp_path):
    for rel in [
        "",
        "scaling",
        "generated/notebooks/experiment",
        "404",
        "assets/javascripts",
    ]:
        (tmp_path / rel).mkdir(parents=True, exist_ok=True)
        (tmp_path / rel / "index.html").write_text("<p>x</p>")
    (tmp_path / "404.html").write_text("<p>not found</p>")
    pages = site_pages(tmp_path)
    assert [(p.path, p.name) for p in pages] == [
        ("", "index"),
        ("generated/notebooks/experiment/", "generated-notebooks-experiment"),
        ("scaling/", "scaling"),
    ]


AXE_BROKEN = """
<style>.faint { color: #aaa; background: #fff }</style>
<div role="dialog"><p>unnamed dialog</p></div>
<p class="faint">grey on white, 2.3:1</p>
<div style="overflow-x: auto; width: 100px">
  <p style="width: 400px">a box that scrolls, which no key reaches</p>
</div>
"""


def test_axe_problems_detects_serious_violations(synthetic, monkeypatch):
    """An unnamed dialog, faint text and a scroll box no key reaches are
    each reported as serious; a run limited to one rule sees only it."""
    monkeypatch.setattr(pagecheck, "_LOOKS_SEEN", set())
    page, _, _ = synthetic(AXE_BROKEN, katex=False)
    lines = pagecheck.axe_problems(page)
    for rule in (
        "aria-dialog-name",
        "color-contrast",
        "scrollable-region-focusable",
    ):
        assert any(line.startswith(f"axe {rule} ") for line in lines), lines
    only = pagecheck.axe_problems(page, ["color-contrast"], by_look=False)
    assert [line.split()[1] for line in only] == ["color-contrast"]


# Boxes a reader can scroll, none reachable by keyboard: one sideways,
# one down (a fixed height), one that holds all it shows (no scroll).
SCROLL_BOXES = """<main><h1>Boxes</h1>
<div style="overflow-x: auto; width: 200px"><p style="white-space: nowrap">
  a line of text that runs on sideways past the edge of its box</p></div>
<div style="overflow-y: auto; height: 40px; width: 200px"><p>
  lines of text, and more lines, that run on down past the bottom edge
  of the box that holds them</p></div>
<div style="overflow: auto"><p>fits</p></div></main>"""


def test_axe_scroll_rule_runs_on_every_box_that_scrolls(synthetic):
    """Alone, scrollable-region-focusable looks at the boxes that scroll,
    both ways, and finds both; a page where none scrolls needs no run."""
    page, _, _ = synthetic(SCROLL_BOXES, viewport=PHONE, katex=False)
    (line,) = pagecheck.axe_problems(page, ["scrollable-region-focusable"])
    assert line.startswith("axe scrollable-region-focusable "), line
    assert "2 elements" in line, line
    assert pagecheck.scrolling_boxes(page) == 2
    page, _, _ = synthetic("<main><h1>Fine</h1><p>Text.</p></main>")
    assert pagecheck.scrolling_boxes(page) == 0
    assert pagecheck.axe_problems(page, ["scrollable-region-focusable"]) == []


# Faint text among many paragraphs of one look, then the same on a second
# page: the faint look is new on the first page and checked; on the
# second, both looks were checked, so axe's look rules do not run again.
FAINT_AMONG = (
    "<main><h1>Looks</h1>"
    + "<p>Plain text.</p>" * 50
    + ('<p style="color: #c8c8c8">faint words</p></main>')
)


def test_axe_checks_each_look_once(synthetic, monkeypatch):
    monkeypatch.setattr(pagecheck, "_LOOKS_SEEN", set())
    page, _, _ = synthetic(FAINT_AMONG, katex=False)
    first = pagecheck.axe_problems(page, ["color-contrast"])
    assert [line.split()[1] for line in first] == ["color-contrast"], first
    marked = page.evaluate(
        "m => document.querySelectorAll(`[${m}]`).length", pagecheck._LOOK
    )
    assert 0 < marked < 10, marked  # one per look, not one per paragraph
    assert pagecheck.new_looks(page) == []  # every look now checked
    page, _, _ = synthetic(FAINT_AMONG, katex=False)
    assert pagecheck.axe_problems(page, ["color-contrast"]) == []
    whole = pagecheck.axe_problems(page, ["color-contrast"], by_look=False)
    assert [line.split()[1] for line in whole] == ["color-contrast"]


# The same text nested in more wrappers that paint nothing is one look;
# a wrapper that tints what shows behind makes another.
NESTED_LOOKS = (
    "<main><h1>Looks</h1><p>Plain text.</p>"
    "<div><div><section><p>Plain text, deeper.</p></section></div></div>"
    '<div style="background: rgba(255, 0, 0, 0.2)"><p>Tinted.</p></div>'
    '<div style="opacity: 0.5"><p>Faded.</p></div></main>'
)


def test_axe_look_ignores_wrappers_that_paint_nothing(synthetic, monkeypatch):
    monkeypatch.setattr(pagecheck, "_LOOKS_SEEN", set())
    page, _, _ = synthetic(NESTED_LOOKS, katex=False)
    looks = pagecheck.new_looks(page)
    marked = page.evaluate(
        "m => [...document.querySelectorAll(`[${m}]`)]"
        ".map(e => e.textContent)",
        pagecheck._LOOK,
    )
    assert "Plain text, deeper." not in marked, marked  # same look as above
    assert {"Plain text.", "Tinted.", "Faded."} <= set(marked), marked
    assert len(looks) == len(marked)


# Content outside every landmark: axe's region rule, whose one check is
# moderate; and an image with no text, image-alt, which is critical.
NO_LANDMARK = '<p>outside every landmark</p><img src="data:,">'


def test_axe_leaves_out_only_the_rules_that_cannot_fail(
    synthetic, monkeypatch
):
    """The default run skips the rules whose checks are all below
    AXE_FAILS, read from axe's metadata: region (moderate) is skipped and
    image-alt (critical) is not; with moderate counted as a failure,
    region runs again and is reported."""
    monkeypatch.setattr(pagecheck, "_LOOKS_SEEN", set())
    page, _, _ = synthetic(NO_LANDMARK, katex=False)
    page.add_script_tag(path=str(pagecheck.AXE))
    skipped = pagecheck.never_fails(page)
    assert "region" in skipped, skipped
    assert "image-alt" not in skipped, skipped
    rules = [line.split()[1] for line in pagecheck.axe_problems(page)]
    assert "image-alt" in rules, rules
    assert "region" not in rules, rules
    monkeypatch.setattr(
        pagecheck, "AXE_FAILS", ("moderate", "serious", "critical")
    )
    assert "region" not in pagecheck.never_fails(page)
    rules = [line.split()[1] for line in pagecheck.axe_problems(page)]
    assert "region" in rules, rules


def test_axe_problems_none_on_a_clean_page(synthetic):
    page, _, _ = synthetic("<main><h1>Fine</h1><p>Plain text.</p></main>")
    assert pagecheck.axe_problems(page) == []


# -- issue 29: what a reader could not read --------------------------------

# scroll-regions.js's cue, as extra.css draws it: a shadow under an edge.
CUE_CSS = """
[data-mha-more] { box-shadow: inset -1.6em 0 1.2em -1.2em #0005 }
.box { overflow-x: auto; width: 300px }
"""
WIDE_TABLE = (
    '<div class="box"><table><tr>'
    + "".join(f"<td>column {i} 5.96e-08</td>" for i in range(12))
    + "</tr></table></div>"
)


def mark_cues(page):
    """What scroll-regions.js does: mark each box hiding content."""
    page.evaluate(
        """() => document.querySelectorAll(".box").forEach(b => {
          if (b.scrollWidth > b.clientWidth + 1)
            b.setAttribute("data-mha-more", "right"); })"""
    )


def test_scroll_cue_problems_none_when_the_box_shows_its_cue(synthetic):
    page, _, _ = synthetic(
        f'<div class="md-content"><article>{WIDE_TABLE}</article></div>',
        katex=False,
        css=CUE_CSS,
    )
    mark_cues(page)
    assert pagecheck.scroll_cue_problems(page, wait_ms=SHORT) == []


def test_scroll_cue_problems_detects_a_cut_table_without_cue(synthetic):
    """Drifted: a table wider than its column scrolls in its box, but
    nothing tells the reader (the parity table at 1280 px)."""
    page, _, _ = synthetic(
        f'<div class="md-content"><article>{WIDE_TABLE}</article></div>',
        katex=False,
        css=".box { overflow-x: auto; width: 300px }",
    )
    problems = pagecheck.scroll_cue_problems(page, wait_ms=SHORT)
    assert len(problems) == 1, problems
    assert problems[0].startswith("table shows 300 of "), problems
    assert "no cue that it scrolls: column 0 5.96e-08" in problems[0]


def test_scroll_cue_problems_detects_a_figure_wider_than_a_phone(synthetic):
    """Drifted: on a phone a 560 px figure scrolls in its paragraph and
    its second panel is off the screen, with no cue."""
    body = (
        '<div class="md-content"><article><p class="box" '
        'style="width:auto"><img src="fig-light.svg" alt="two panels" '
        'style="width:560px;max-width:none"></p></article></div>'
    )
    page, _, _ = synthetic(
        body, viewport=PHONE, katex=False, css=".box { overflow-x: auto }"
    )
    problems = pagecheck.scroll_cue_problems(page, wait_ms=SHORT)
    assert len(problems) == 1, problems
    assert problems[0].startswith("figure shows ")
    assert problems[0].endswith("no cue that it scrolls: two panels")
    # the cue on the box: fine
    page.add_style_tag(content=CUE_CSS.replace("width: 300px", ""))
    mark_cues(page)
    assert pagecheck.scroll_cue_problems(page, wait_ms=SHORT) == []


# matplotlib's way: a transparent figure patch, labels in one colour.
def figure_svg(ink):
    return (
        '<svg xmlns="http://www.w3.org/2000/svg" width="200" height="60">'
        '<g id="figure_1"><g id="patch_1"><path d="M0 0h200v60H0z" '
        'style="fill: none"/></g>'
        f'<text x="10" y="20" style="font-size: 10px; fill: {ink}">step</text>'
        f'<text x="10" y="40" style="font-size: 10px; fill: {ink}">loss</text>'
        "</g></svg>"
    )


def test_figure_text_problems_detects_light_variant_on_dark_page(
    synthetic, tmp_path
):
    """Drifted: a notebook page showed the light variant (black labels,
    transparent) on the dark scheme; the dark variant reads, and so does
    the light one on a white ground of its own (notebook.css)."""
    (tmp_path / "light.svg").write_text(figure_svg("#1f1f1f"))
    (tmp_path / "dark.svg").write_text(figure_svg("#e3e5ea"))
    page, _, _ = synthetic(
        '<img id="f" src="light.svg" alt="light">',
        katex=False,
        css="body { background: #1e2129 }",
    )
    pagecheck.wait_for_images(page)
    problems = pagecheck.figure_text_problems(page)
    assert len(problems) == 1, problems
    assert problems[0].startswith(
        "figure text unreadable: light.svg draws its labels in #1f1f1f"
    ), problems
    page.evaluate("() => { f.style.background = '#fff'; }")
    assert pagecheck.figure_text_problems(page) == []
    page.evaluate("() => { f.style.background = ''; f.src = 'dark.svg'; }")
    pagecheck.wait_for_images(page)
    assert pagecheck.figure_text_problems(page) == []


def test_code_width_problems_detects_a_cell_narrower_than_79_columns(
    synthetic,
):
    """Drifted: a notebook's code cell beside its prompt shows about 60
    of the package's 79 columns; the text column's full width shows
    them all."""
    page, _, _ = synthetic(
        '<div class="md-content"><article><pre><code id="c" '
        'style="display:block;font:13px monospace;width:420px;'
        f'overflow-x:auto">{"x" * 79}</code></pre></article></div>',
        katex=False,
    )
    problems = pagecheck.code_width_problems(page)
    assert len(problems) == 1, problems
    assert problems[0].startswith("code block shows ")
    assert problems[0].endswith(f"of 79 columns: {'x' * 50}")
    page.evaluate("() => { c.style.width = '700px'; }")
    assert pagecheck.code_width_problems(page) == []


NAV = (
    '<nav class="md-nav md-nav--primary"><a class="md-nav__link '
    'md-nav__link--active" href="."><span>{nav}</span></a></nav>'
    '<div class="md-content"><article><h1>{h1}<a class="headerlink">¶</a>'
    "</h1></article></div>"
)


def test_title_problems_detects_a_title_unlike_its_nav_entry(synthetic):
    page, _, _ = synthetic(
        NAV.format(nav="Tiled attention", h1="Going further: tiled attention"),
        katex=False,
    )
    assert pagecheck.title_problems(page) == [
        "title 'Going further: tiled attention' differs from its nav "
        "entry 'Tiled attention'"
    ]
    page.evaluate(
        "() => { document.querySelector('h1').firstChild.textContent ="
        " 'Tiled attention'; }"
    )
    assert pagecheck.title_problems(page) == []


def test_raw_python_problems_detects_python_formatting_in_prose(synthetic):
    page, _, _ = synthetic(
        '<div class="md-content"><article>'
        "<p>All comparisons passed: True. They differ by at most "
        "0.00e+00.</p><p>Removing it costs -0.0 points.</p>"
        "<p>A mask holds True = blocked, like <code>x is None</code>; "
        "the step is -0.5 and 1e-07.</p></article></div>",
        katex=False,
    )
    problems = pagecheck.raw_python_problems(page)
    assert [p.split(" in the text")[0] for p in problems] == [
        'Python\'s ": True"',
        'a formatted zero "0.00e+00"',
        'a signed zero "-0.0"',
    ], problems


def test_notebook_problems_detects_prompt_ten_and_a_value_twice(synthetic):
    cell = (
        '<div class="md-content"><article>'
        '<div class="jp-InputPrompt">In [10]:</div><pre>x = 1</pre>'
        '<pre>glue: eps = {"float16": true, "n": null}</pre>'
        "<pre>{'float16': True, 'n': None}</pre>"
        "<pre>glue: rows = 3</pre><pre>print(rows)</pre>"
        "</article></div>"
    )
    page, _, _ = synthetic(cell, katex=False)
    assert pagecheck.notebook_problems(page) == [
        "the first cell shows In [10]",
        'glued value eps printed twice: {"float16": true, "n": null}',
    ]


def test_search_snippet_problems_detects_raw_tex(synthetic):
    """Drifted: a search result's snippet shows the index's raw TeX."""
    results = (
        '<ol><li class="md-search-result__item">Rotation by '
        "\\(m\\theta_i\\) keeps the norm</li>"
        '<li class="md-search-result__item">Rotation by mθᵢ keeps the '
        "norm</li></ol>"
    )
    page, _, _ = synthetic(results, katex=False)
    assert pagecheck.search_snippet_problems(page) == [
        'raw TeX "\\(" in a search result: Rotation by \\(m\\theta_i\\) '
        "keeps the norm"
    ]


# The faint look first on elements axe does not check (hidden, and a
# screen-reader-only clip of 1 px), then shown: the shown one stands for
# the look, so it is still caught.
SR_ONLY = (
    "position: absolute; width: 1px; height: 1px; overflow: hidden; "
    "clip: rect(0 0 0 0)"
)
FAINT_FIRST_HIDDEN = (
    "<main><h1>Looks</h1>"
    '<p style="color: #c8c8c8; display: none">hidden words</p>'
    f'<p style="color: #c8c8c8; {SR_ONLY}">clipped words</p>'
    '<p style="color: #c8c8c8">faint words</p></main>'
)


def test_axe_look_stands_for_a_shown_element(synthetic, monkeypatch):
    monkeypatch.setattr(pagecheck, "_LOOKS_SEEN", set())
    page, _, _ = synthetic(FAINT_FIRST_HIDDEN, katex=False)
    lines = pagecheck.axe_problems(page, ["color-contrast"])
    assert [line.split()[1] for line in lines] == ["color-contrast"], lines
    assert "faint words" in lines[0], lines
