"""pipeline/page_cache_hook.py: a page's Markdown is converted again, and
its search entries made again, exactly when what they are made from
changed; a build from the cache is the build without it.

Each build is a real ``mkdocs build`` of a tiny site (Material, the
hook, pymdownx.snippets including a section of a Python file and a
glossary), in a process of its own: the hook patches MkDocs's classes.
"""

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

from pipeline import config

HOOK = config.ROOT / "pipeline" / "page_cache_hook.py"
CODE = """\
def shown():
    # --8<-- [start:shown]
    return 1
    # --8<-- [end:shown]


def elsewhere():
    return 2
"""


def make_site(root):
    (root / "docs").mkdir()
    (root / "code.py").write_text(CODE)
    (root / "glossary.md").write_text("*[head]: one attention of several\n")
    (root / "docs" / "index.md").write_text(
        "# Start\n\nA head reads [the code](code.md#the-section).\n"
    )
    (root / "docs" / "code.md").write_text(
        '# Code\n\n## The section\n\n```python\n--8<-- "code.py:shown"\n```\n'
    )
    (root / "mkdocs.yml").write_text(
        "site_name: tiny\n"
        "theme: {name: material}\n"
        f"hooks: [{HOOK}]\n"
        "plugins: [search]\n"
        "markdown_extensions:\n"
        "  - abbr\n"
        "  - pymdownx.superfences\n"
        "  - pymdownx.snippets:\n"
        "      base_path: ['.']\n"
        "      check_paths: true\n"
        "      dedent_subsections: true\n"
        "      auto_append: [glossary.md]\n"
    )


def mkdocs(root, *args):
    """``mkdocs build`` in ``root``, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", *args],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


def build(root, site="site"):
    """The site's pages' main text and its search entries."""
    done = mkdocs(root, "-q", "--strict", "-d", site)
    assert done.returncode == 0, done.stderr
    pages = {
        name: (root / site / path / "index.html").read_text("utf-8")
        for name, path in (("index", ""), ("code", "code"))
    }
    search = json.loads((root / site / "search/search_index.json").read_text())
    return pages, search["docs"]


def stored(root, kind):
    return sorted((root / config.CACHE / "pages").glob(f"*.{kind}"))


def without_cache(root):
    """The same build with no cache at all: what the cache must give."""
    shutil.rmtree(root / config.CACHE / "pages")
    try:
        return build(root, "site-fresh")
    finally:
        shutil.rmtree(root / "site-fresh")


def test_cached_pages_are_used_and_follow_their_snippets(tmp_path):
    make_site(tmp_path)
    first = build(tmp_path)
    assert len(stored(tmp_path, "render")) == 2
    assert len(stored(tmp_path, "search")) == 2
    assert build(tmp_path) == first  # from the cache: the same site

    # the cache is read while its key holds: a planted text shows ...
    for path in stored(tmp_path, "render"):
        entry = pickle.loads(path.read_bytes())
        entry["page"]["content"] += "<p>PLANTED</p>"
        path.write_bytes(pickle.dumps(entry))
    (tmp_path / "code.py").write_text(CODE.replace("return 2", "return 3"))
    pages, _ = build(tmp_path)  # code outside the section: still cached
    assert all("PLANTED" in html for html in pages.values())

    # ... and goes where what the page took from a file changed
    (tmp_path / "code.py").write_text(CODE.replace("return 1", "return 7"))
    pages, search = build(tmp_path)
    assert "PLANTED" not in pages["code"]
    assert "7" in pages["code"]
    assert "PLANTED" in pages["index"]  # it includes nothing that changed
    assert any("return 7" in entry["text"] for entry in search)

    (tmp_path / "glossary.md").write_text("*[head]: one of several\n")
    pages, _ = build(tmp_path)  # every page appends the glossary
    assert not any("PLANTED" in html for html in pages.values())
    assert "one of several" in pages["index"]
    assert build(tmp_path) == without_cache(tmp_path)


def test_the_text_and_the_other_files_are_in_the_key(tmp_path):
    make_site(tmp_path)
    build(tmp_path)
    index = tmp_path / "docs" / "index.md"
    index.write_text(index.read_text() + "\nA new sentence.\n")
    pages, search = build(tmp_path)
    assert "A new sentence." in pages["index"]
    assert any("A new sentence." in entry["text"] for entry in search)
    # the link target's page is renamed: the link must follow it
    (tmp_path / "docs" / "code.md").rename(tmp_path / "docs" / "source.md")
    index.write_text(index.read_text().replace("code.md", "source.md"))
    done = mkdocs(tmp_path, "-q", "--strict")
    assert done.returncode == 0, done.stderr
    html = (tmp_path / "site" / "index.html").read_text("utf-8")
    assert 'href="source/#the-section"' in html


def test_a_page_that_warns_is_not_stored(tmp_path):
    make_site(tmp_path)
    index = tmp_path / "docs" / "index.md"
    index.write_text("# Start\n\n[gone](nowhere.md)\n")
    done = mkdocs(tmp_path)  # not strict: it warns and builds
    assert done.returncode == 0, done.stderr
    assert "nowhere.md" in done.stderr
    assert len(stored(tmp_path, "render")) == 1  # code.md only
    again = mkdocs(tmp_path, "--strict")  # nothing hides the warning
    assert again.returncode != 0
    assert "nowhere.md" in again.stderr


def test_the_site_uses_the_hook():
    assert f"- {HOOK.relative_to(config.ROOT)}" in Path(
        config.ROOT / config.MKDOCS_YML
    ).read_text("utf-8")
