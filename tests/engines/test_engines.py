"""MkDocs and Zensical build the same pages from the same sources.

Needs both built sites: `make site` (site/) and `make site-zensical`
(site-zensical/); `make test` builds both first. What is compared, and
how the notebook page is read on each engine: tests/engines/compare.py.
"""

import pytest

from tests.engines import compare
from tests.engines.compare import SITES


@pytest.fixture(scope="module")
def built():
    """{engine: {page: Content}} of both built sites (seconds to read:
    one test uses it, so one xdist worker reads them)."""
    for engine, site in SITES.items():
        if not (site / "index.html").is_file():
            target = "site" if engine == "mkdocs" else "site-zensical"
            pytest.fail(f"no {site}: run `make {target}` first")
    return {engine: compare.site_content(s) for engine, s in SITES.items()}


def test_engines_build_the_same_site(built):
    """Same pages, same content, both typeset, same notebook files."""
    problems = compare.differences(built["mkdocs"], built["zensical"])
    problems += math_problems(built)
    problems += download_problems(built)
    assert not problems, "\n".join(problems)


def math_problems(built):
    """Both ran the math step: else two empty lists would agree."""
    problems = []
    for engine, site in SITES.items():
        formulas = sum(len(c.math) for c in built[engine].values())
        if formulas <= 100:
            problems.append(f"{engine}: only {formulas} formulas")
        for page, file in compare.pages(site).items():
            html = file.read_text(encoding="utf-8")
            if '<span class="arithmatex">\\(' in html:
                problems.append(
                    f"{engine} {page}: math left as TeX (typeset_math not run)"
                )
    return problems


def download_problems(built):
    """Each notebook download is the same file on both engines."""
    notebooks = [page for page, c in built["mkdocs"].items() if c.downloads]
    if not notebooks:
        return ["no page offers a notebook download"]
    problems = []
    for page in notebooks:
        downloads = {e: built[e][page].downloads for e in SITES}
        odd = [
            f"{e} {page}: downloads {d}"
            for e, d in downloads.items()
            if len(d) != 1
        ]
        if odd:
            problems += odd
            continue
        files = {(SITES[e] / d[0]).read_bytes() for e, d in downloads.items()}
        if len(files) > 1:
            problems.append(f"{page}: the .ipynb files differ")
    return problems


PAGE = """<html><body><article class="md-content__inner md-typeset">
<h1 id="t">Scaling<a class="headerlink" href="#t">¶</a></h1>
<p>The  variance is 64
and the scale is 0.125.</p>
<div class="highlight"><pre><code>s = q @ k.T / 8</code></pre></div>
<p><img alt="a" src="../generated/figures/f-light.svg#only-light"></p>
<p><span class="arithmatex"><span class="katex"><math><semantics>
<annotation encoding="application/x-tex">\\sqrt{d_k}</annotation>
</semantics></math></span></span></p>
</article></body></html>"""


def test_content_normalises_whitespace_and_reads_each_part():
    found = compare.content(PAGE, "scaling/")
    assert found.text == "Scaling The variance is 64 and the scale is 0.125."
    assert found.numbers == ["64", "0.125"]
    assert found.code == ["s = q @ k.T / 8"]
    assert found.figures == ["generated/figures/f-light.svg#only-light"]
    assert found.math == ["\\sqrt{d_k}"]


@pytest.mark.parametrize(
    ("drift", "part"),
    [
        (("0.125", "0.12"), "numbers"),
        (("/ 8", "/ 4"), "code"),
        (("f-light.svg", "g-light.svg"), "figures"),
        (("\\sqrt{d_k}", "d_k"), "math"),
        (("variance", "varience"), "text"),
    ],
)
def test_differences_reports_a_drifted_page(drift, part):
    same = {"scaling/": compare.content(PAGE, "scaling/")}
    page = PAGE.replace(*drift)
    drifted = {"scaling/": compare.content(page, "scaling/")}
    assert compare.differences(same, same) == []
    found = compare.differences(same, drifted)
    # a drifted number is also drifted text: the part must be among them
    assert any(f.startswith(f"scaling/: {part} diff") for f in found), found


def test_differences_reports_a_missing_page():
    page = compare.content(PAGE, "scaling/")
    found = compare.differences({"scaling/": page, "x/": page}, {"x/": page})
    assert found == ["scaling/: only in the mkdocs build"]
