"""The repository setting: no broken links without it, links with it.

Reads the site that `make site` built (site/, without MHA_REF_REPO_URL,
as `make test` builds it; no build of its own): each page with a
notebook offers it (open, download, no Colab), every relative link of
that offer and of the notebook pages' buttons reaches a built file, and
no repository, edit or Colab link appears. What the setting adds (the
Colab prefix, the notebook line's Colab link, the edit links on main)
is checked on the functions that make it, without a second build.
"""

import os
import re
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urljoin, urlsplit

import pytest

from pipeline.postbuild import notebook_line

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "docs" / "generated" / "notebooks"
REPO_URL = "https://github.com/example/mha-ref"
COLAB = "https://colab.research.google.com/github/example/mha-ref/blob/"


@pytest.fixture(scope="module")
def names():
    found = sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))
    if not found:
        pytest.fail("no notebooks in docs/generated: run `make generate`")
    return found


@pytest.fixture(scope="module")
def plain():
    site = REPO / "site"
    if not (site / "index.html").is_file():
        pytest.fail("no site/: run `make site` first")
    if "MHA_REF_REPO_URL" in os.environ:
        pytest.skip("site/ was built with MHA_REF_REPO_URL set")
    return site


def _hrefs(html):
    return re.findall(r'href="([^"]*)"', html)


def _reaches(site, page_dir, href):
    """True when a relative href from page_dir names a built file."""
    path = urlsplit(urljoin(f"/{page_dir}", href)).path.lstrip("/")
    target = site / path
    return (
        target / "index.html" if path.endswith("/") or not path else target
    ).is_file()


def _offer(site, name):
    html = (site / name / "index.html").read_text("utf-8")
    match = re.search(r'<p class="mha-notebook-line">(.*?)</p>', html, re.S)
    assert match, f"{name}/ does not offer its notebook"
    return html, match[1]


def test_notebook_line_links_resolve_without_repository(plain, names):
    for name in names:
        if not (REPO / "docs" / f"{name}.md").is_file():
            continue  # a script without a page
        _, line = _offer(plain, name)
        hrefs = _hrefs(line)
        assert len(hrefs) == 2, line  # open, download; no Colab
        for href in hrefs:
            assert _reaches(plain, f"{name}/", href), (name, href)
        assert hrefs[1].endswith(f"{name}/{name}.ipynb"), hrefs


def test_site_has_no_repository_links_without_setting(plain):
    for page in plain.rglob("*.html"):
        html = page.read_text("utf-8")
        for bad in (
            'href="https://colab.research.google.com',
            'rel="edit"',
            "md-source",
            'href="https://github.com',
        ):
            assert bad not in html, f"{page.relative_to(plain)}: {bad}"


def test_notebook_pages_buttons_resolve(plain, names):
    for name in names:
        page = f"generated/notebooks/{name}/"
        html = (plain / page / "index.html").read_text("utf-8")
        assert f'href="{name}.ipynb" download' in html, name
        assert _reaches(plain, page, f"{name}.ipynb")
        assert "colab.research.google.com" not in html, name


def test_repository_setting_gives_edit_and_colab_links():
    import macros

    line = notebook_line("scaling", REPO_URL)
    assert f'href="{COLAB}notebooks/scaling.ipynb"' in line
    assert "colab" not in notebook_line("scaling", None)
    env = SimpleNamespace(
        conf={"repo_url": REPO_URL, "extra": {}, "docs_dir": "docs"},
        variables={},
        filter=lambda f: None,
        macro=lambda f, name=None: None,
    )
    macros.define_env(env)
    assert env.conf["edit_uri"] == "edit/main/docs/"  # branch main
    assert env.conf["extra"]["colab_base"] == f"{COLAB}notebooks/"
    env.conf.update(repo_url=None, extra={})
    macros.define_env(env)
    assert env.conf["edit_uri"] is None  # no relative edit links
    assert env.conf["extra"]["colab_base"] is None
