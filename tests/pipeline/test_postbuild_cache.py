"""pipeline/postbuild.py's ``as_before``: a built file the engine wrote
as at the last build gets the last build's result; a new one is treated;
a notebook page also follows the notebooks.

A small site is written into tmp_path; no engine runs. The results are
kept as the build keeps them (memo's long answers), in tmp_path too.
"""

import json

import pytest

from pipeline import memo, postbuild
from pipeline.typeset_math import FORMULA_CACHE, Typesetter

PAGE = (
    "<html><head></head><body><article><h1>Where {where}</h1>"
    '<p>A formula: <span class="arithmatex">\\({tex}\\)</span></p>'
    "</article></body></html>"
)


@pytest.fixture(autouse=True)
def kept_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setattr(memo, "_long_path", lambda: tmp_path / "facts")


def write_site(root, tex="q k^T"):
    site, notebooks = root / "site", root / "notebooks"
    for where in ("a", "generated/notebooks/demo"):
        page = site / where / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(PAGE.format(where=where, tex=tex))
    notebooks.mkdir(exist_ok=True)
    (notebooks / "demo.ipynb").write_text(json.dumps({"cells": []}))
    return site, notebooks


def treat(site, notebooks):
    """What main does, with this site's notebooks: the files treated."""
    typesetter = Typesetter(cache=FORMULA_CACHE)
    todo, total = postbuild.as_before(site, typesetter, None, notebooks)
    postbuild.typeset_site(site, typesetter, todo)
    for path, made in todo.items():
        memo.long_keep("postbuild", made, path.read_text("utf-8"))
    return {p.relative_to(site).as_posix() for p in todo}, total


def test_a_page_as_before_gets_its_result_and_a_new_one_is_treated(
    tmp_path,
):
    site, notebooks = write_site(tmp_path)
    treated, total = treat(site, notebooks)
    assert treated == {"a/index.html", "generated/notebooks/demo/index.html"}
    assert total == 2  # the two pages (no search index)
    first = (site / "a/index.html").read_text()
    assert 'class="katex"' in first

    write_site(tmp_path)  # the engine writes the same pages again
    assert treat(site, notebooks)[0] == set()
    assert (site / "a/index.html").read_text() == first  # as before

    write_site(tmp_path, tex="q k^T / 2")  # a page the edit changed
    assert treat(site, notebooks)[0] == {
        "a/index.html",
        "generated/notebooks/demo/index.html",
    }
    assert (site / "a/index.html").read_text() != first


def test_a_notebook_page_follows_the_notebooks(tmp_path):
    site, notebooks = write_site(tmp_path)
    treat(site, notebooks)
    write_site(tmp_path)
    (notebooks / "demo.ipynb").write_text(json.dumps({"cells": [1]}))
    # the notebook page may show any notebook's figure: treated again;
    # the other page only needs to know which pages have a notebook
    assert treat(site, notebooks)[0] == {"generated/notebooks/demo/index.html"}
    write_site(tmp_path)
    (notebooks / "other.ipynb").write_text("{}")
    assert treat(site, notebooks)[0] == {
        "a/index.html",
        "generated/notebooks/demo/index.html",
    }
