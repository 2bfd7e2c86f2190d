"""The build's post-step: math typeset into the built HTML by KaTeX."""

import pytest

from pipeline.typeset_math import MathError, Typesetter, typeset_site

PAGE = (
    '<p>Scale by <span class="arithmatex">\\(1/\\sqrt{d_k}\\)</span>:</p>\n'
    '<div class="arithmatex">\\[a &lt; b\\]</div>\n'
)


@pytest.fixture(scope="module")
def typesetter():
    return Typesetter()


def test_typeset_site_replaces_tex_with_html_and_mathml(tmp_path, typesetter):
    (tmp_path / "page").mkdir()
    (tmp_path / "page/index.html").write_text(PAGE)
    assert typeset_site(tmp_path, typesetter) == 2
    out = (tmp_path / "page/index.html").read_text()
    assert "\\(" not in out
    assert "\\[" not in out
    assert out.count('class="katex-mathml"') == 2  # screen readers
    assert '<span class="katex-display">' in out  # the display formula
    assert "<mo>&lt;</mo>" in out  # the escaped < reached KaTeX as <


def test_typeset_site_leaves_typeset_pages_unchanged(tmp_path, typesetter):
    (tmp_path / "index.html").write_text(PAGE)
    typeset_site(tmp_path, typesetter)
    once = (tmp_path / "index.html").read_text()
    assert typeset_site(tmp_path, typesetter) == 0
    assert (tmp_path / "index.html").read_text() == once


def test_typeset_site_names_page_and_formula_that_fail(tmp_path, typesetter):
    (tmp_path / "ok.html").write_text(PAGE)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad/index.html").write_text(
        '<span class="arithmatex">\\(\\frac{1}{\\sqrt{d_k}\\)</span>'
    )
    with pytest.raises(MathError) as caught:
        typeset_site(tmp_path, typesetter)
    message = str(caught.value)
    assert message.startswith(
        "bad/index.html: KaTeX cannot parse '\\\\frac{1}{\\\\sqrt{d_k}': "
        "ParseError: KaTeX parse error"
    )
    assert "katex" in (tmp_path / "ok.html").read_text()  # others written


def test_typeset_site_typesets_notebook_cells_but_not_code(
    tmp_path, typesetter
):
    cell = (
        '<div class="jp-RenderedHTMLCommon jp-RenderedMarkdown">'
        "<p>Weights $A_{ij}$ with $j &gt; i$, and</p><div>$$x W^\\top$$</div>"
        "<p><code>cost = $5 and $6</code></p></div><p>after: $y$</p>"
    )
    (tmp_path / "index.html").write_text(cell)
    assert typeset_site(tmp_path, typesetter) == 3
    out = (tmp_path / "index.html").read_text()
    assert out.count('class="katex"') == 3
    assert "<mo>&gt;</mo>" in out  # the escaped > reached KaTeX as >
    assert "<code>cost = $5 and $6</code>" in out  # code left alone
    assert out.endswith("<p>after: $y$</p>")  # outside the cell


def test_typesetter_reuses_cached_formulas_without_katex(tmp_path):
    cache = tmp_path / "formulas.json"
    first = Typesetter(cache=cache)
    (tmp_path / "a").mkdir()
    (tmp_path / "a/index.html").write_text(PAGE)
    typeset_site(tmp_path / "a", first)
    assert cache.is_file()
    second = Typesetter(cache=cache)
    (tmp_path / "b").mkdir()
    (tmp_path / "b/index.html").write_text(PAGE)
    assert typeset_site(tmp_path / "b", second) == 2
    assert second.js is None  # every formula came from the cache
    a, b = (tmp_path / f"{x}/index.html" for x in "ab")
    assert a.read_text() == b.read_text()


def test_typesetter_cache_of_another_katex_is_ignored(tmp_path):
    cache = tmp_path / "formulas.json"
    cache.write_text('{"katex": "other", "formulas": {"inline:x": "old"}}')
    assert Typesetter(cache=cache).render("x", display=False) != "old"
