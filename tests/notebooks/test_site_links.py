"""The repository setting: links with it, no broken links without it.

Builds the site twice into temporary folders (strict, then the
post-build step), without and with
MHA_REF_REPO_URL, and reads the HTML: each page with a notebook offers
it (open, download, Colab only with the setting), every relative link
of that offer and of the notebook pages' buttons reaches a built file,
the edit links point at main's docs/ sources (none on generated pages),
and without the setting no repository, edit or Colab link appears.
Needs `make generate` first; slow (two builds).

    .venv/bin/python -m pytest tests/notebooks/test_site_links.py
"""

import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import pytest

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = REPO / "docs" / "generated" / "notebooks"
REPO_URL = "https://github.com/example/mha-ref"
COLAB = "https://colab.research.google.com/github/example/mha-ref/blob/"


def _build(out, repo_url):
    env = {k: v for k, v in os.environ.items() if k != "MHA_REF_REPO_URL"}
    env["NO_MKDOCS_2_WARNING"] = "1"
    if repo_url:
        env["MHA_REF_REPO_URL"] = repo_url
    run = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", out],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    # the notebook line is added after the engine, as make site does
    run = subprocess.run(
        [sys.executable, "-m", "pipeline.postbuild", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return Path(out)


@pytest.fixture(scope="module")
def names():
    found = sorted(p.stem for p in NOTEBOOKS.glob("*.ipynb"))
    if not found:
        pytest.fail("no notebooks in docs/generated: run `make generate`")
    return found


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("plain"), None)


@pytest.fixture(scope="module")
def with_repo(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("repo"), REPO_URL)


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


def test_notebook_pages_buttons_resolve(plain, with_repo, names):
    for site in (plain, with_repo):
        for name in names:
            page = f"generated/notebooks/{name}/"
            html = (site / page / "index.html").read_text("utf-8")
            assert f'href="{name}.ipynb" download' in html, name
            assert _reaches(site, page, f"{name}.ipynb")
            colab = f"{COLAB}notebooks/{name}.ipynb"
            assert (colab in html) == (site == with_repo), (name, site)


def test_repository_setting_gives_repo_edit_and_colab_links(with_repo, names):
    for name in names:
        if not (REPO / "docs" / f"{name}.md").is_file():
            continue
        html, line = _offer(with_repo, name)
        assert f"{COLAB}notebooks/{name}.ipynb" in _hrefs(line), line
        edit = f"{REPO_URL}/edit/main/docs/{name}.md"
        assert f'href="{edit}"' in html, name
        assert f'href="{REPO_URL}"' in html  # the header's repo link
        notebook = (
            with_repo / "generated/notebooks" / name / "index.html"
        ).read_text("utf-8")
        assert 'rel="edit"' not in notebook, name  # not a file on main
