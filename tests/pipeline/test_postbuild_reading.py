"""The post-build steps a reader sees: slim notebook pages, a search
index whose formulas read as text, and the formatting filters' words.

Small built pages and indexes are written into tmp_path; no engine runs.
"""

import base64
import importlib.util
import json
from pathlib import Path

import pytest

import macros
from pipeline.notebook_html import slim_notebook_pages
from pipeline.search_index import plain_math_in_search_index, tex_to_text

LIGHT = '<svg xmlns="http://www.w3.org/2000/svg"><text>x</text></svg>'
ALT = "Two bars: the float32 and the float64 error"
CELL = (
    "<style>{index_css}</style>"
    "<script>customElements.define('clipboard-copy', ClipboardCopyElement)"
    "</script>"
    '<div class="zeroclipboard-container"><clipboard-copy for="cell-1">'
    "<div><svg></svg></div></clipboard-copy></div>"
    '<div class="highlight-ipynb hl-python"><pre><span></span>'
    'x <span class="o">=</span> 1\n</pre></div>'
    '<div class="clipboard-copy-txt" id="cell-1">x = 1</div>'
    '<div class="jp-RenderedSVG"><img alt="No description has been '
    'provided for this image" src="data:image/svg+xml;base64,{svg}"/></div>'
)


def built_notebook(tmp_path):
    """A site with one mkdocs-jupyter page, its notebook and figures."""
    site, notebooks = tmp_path / "site", tmp_path / "notebooks"
    page = site / "generated/notebooks/demo/index.html"
    page.parent.mkdir(parents=True)
    svg = base64.b64encode(LIGHT.encode()).decode()
    body = CELL.format(index_css=".jp-Cell{}" * 1000, svg=svg)
    page.write_text(f"<html><head></head><body><article>{body}</article>")
    figures = site / "generated/figures"
    figures.mkdir(parents=True)
    for scheme in ("light", "dark"):
        (figures / f"bars-{scheme}.svg").write_text(LIGHT)
    notebooks.mkdir()
    output = {
        "output_type": "display_data",
        "data": {
            "application/vnd.mha-ref.glue+json": {
                "kind": "figure",
                "name": "bars",
            },
            "image/svg+xml": LIGHT,
            "text/plain": f"glue: figure bars: {ALT}",
        },
    }
    nb = {"cells": [{"cell_type": "code", "outputs": [output]}]}
    (notebooks / "demo.ipynb").write_text(json.dumps(nb))
    return site, notebooks, page


def test_slim_notebook_pages_keeps_the_cells_in_the_sites_look(tmp_path):
    site, notebooks, page = built_notebook(tmp_path)
    assert slim_notebook_pages(site, notebooks) == 1
    html = page.read_text()
    assert "<style" not in html
    assert "ClipboardCopyElement" not in html
    assert "clipboard-copy" not in html  # Material's copy button instead
    assert (
        '<div class="highlight-ipynb hl-python highlight"><pre><code>'
        '<span></span>x <span class="o">=</span> 1\n</code></pre></div>'
    ) in html
    for scheme in ("light", "dark"):
        assert (
            f'<img alt="{ALT}" src="../../figures/bars-{scheme}.svg'
            f'#only-{scheme}" loading="lazy">'
        ) in html
    assert "base64" not in html
    assert slim_notebook_pages(site, notebooks) == 0  # once is enough


def test_slim_notebook_pages_leaves_an_unknown_figure_inline(tmp_path):
    """A figure no glue record names (a plain plot) stays as it is."""
    site, notebooks, page = built_notebook(tmp_path)
    (notebooks / "demo.ipynb").write_text(json.dumps({"cells": []}))
    slim_notebook_pages(site, notebooks)
    assert "data:image/svg+xml;base64," in page.read_text()


@pytest.mark.parametrize(
    ("tex", "text"),
    [
        (r"m\theta_i", "mθᵢ"),
        (r"\frac{QK^\top}{\sqrt{d_k}}", "QKᵀ/√dₖ"),
        (r"\mathbf q_i \cdot \mathbf k_j", "qᵢ · kⱼ"),
        (r"d_\text{model} = 32", "d_model = 32"),
        (r"\operatorname{softmax}(S + M)", "softmax(S + M)"),
        (r"A_{ij} = e^{S_{ij} - L_i}", "Aᵢⱼ = e^(Sᵢⱼ - Lᵢ)"),
    ],
)
def test_tex_to_text_reads_a_formula_as_text(tex, text):
    assert tex_to_text(tex) == text


def test_plain_math_in_search_index_rewrites_both_engines(tmp_path):
    raw = r"<p>Rotate by \(m\theta_i\); \[a &amp; b\]</p>"
    (tmp_path / "search").mkdir()
    (tmp_path / "search/search_index.json").write_text(
        json.dumps({"docs": [{"location": "x/", "title": "T", "text": raw}]})
    )
    (tmp_path / "search.json").write_text(
        json.dumps({"items": [{"location": "x/", "title": raw, "text": ""}]})
    )
    assert plain_math_in_search_index(tmp_path) == 2
    mkdocs = json.loads((tmp_path / "search/search_index.json").read_text())
    zensical = json.loads((tmp_path / "search.json").read_text())
    assert mkdocs["docs"][0]["text"] == "<p>Rotate by mθᵢ; a b</p>"
    assert zensical["items"][0]["title"] == "<p>Rotate by mθᵢ; a b</p>"
    assert plain_math_in_search_index(tmp_path) == 0


def test_filters_read_results_as_words():
    assert macros.yesno(True) == "yes"
    assert macros.yesno(False) == "no"
    assert macros.sci(0.0) == "0"  # never 0.00e+00
    assert macros.sci(-0.0) == "0"
    assert macros.num(-0.04, 1) == "0"  # never -0.0
    with pytest.raises(TypeError, match="True or False"):
        macros.yesno(1)


def load_glue():
    """scripts/glue.py, which travels with every notebook."""
    path = Path(__file__).parents[2] / "scripts" / "glue.py"
    spec = importlib.util.spec_from_file_location("glue_for_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_glue_tables_write_a_zero_without_its_sign():
    """A value that rounded to zero reads 0.0 points, not -0.0 points;
    a number that only contains -0 (x-0.0, 1-0) is left alone."""
    glue = load_glue()
    table = glue.markdown_table(
        ["head", "cost", "note"], [["L0H3", "-0.0 points", "x-0.0"]]
    )
    assert table.splitlines()[-1] == "| L0H3 | 0.0 points | x-0.0 |"
    assert glue.fmt(-0.0) == "0"
    assert glue.fmt(-1e-9) == "-1e-09"
