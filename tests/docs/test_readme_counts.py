"""The README's counts of pages and notebooks are the build's."""

import re
from pathlib import Path

from pipeline import compose
from tests.docs.test_site_map import load_nav, nav_pages

ROOT = Path(__file__).resolve().parents[2]


def readme_counts(text):
    """{"pages": n, "notebooks": m} from the README's bold counts."""
    return {
        word: int(n) for n, word in re.findall(r"\*\*(\d+) (\w+)\*\*", text)
    }


def test_readme_counts_match_the_build():
    pages = len(set(nav_pages(load_nav())))
    notebooks = len(compose.page_notebooks(ROOT))
    counts = readme_counts((ROOT / "README.md").read_text(encoding="utf-8"))
    assert counts == {"pages": pages, "notebooks": notebooks}, (
        f"README.md says {counts}; the build has {pages} pages in the "
        f"nav and {notebooks} notebooks: update the bold counts"
    )


def test_readme_counts_reads_the_bold_counts():
    text = "has **3 pages** and **2 notebooks**; 5 pages unbolded"
    assert readme_counts(text) == {"pages": 3, "notebooks": 2}
