"""The README's counts of pages and notebooks are the build's."""

import re
from pathlib import Path

from pipeline import pages as site_pages
from tests.docs.test_site_map import load_nav, nav_pages

ROOT = Path(__file__).resolve().parents[2]


def readme_counts(text):
    """{"pages": n, "notebooks": m} from the README's bold counts."""
    return {
        word: int(n) for n, word in re.findall(r"\*\*(\d+) (\w+)\*\*", text)
    }


def count_problems(root=ROOT):
    """Each bold count of the README that is not the build's, as what to
    write instead."""
    built = {
        "pages": len(set(nav_pages(load_nav(root)))),
        "notebooks": len(site_pages.page_notebooks(root)),
    }
    said = readme_counts((Path(root) / "README.md").read_text("utf-8"))
    return [
        f"README.md: the counts are the build's: write **{n} {word}** "
        f"(not **{said.get(word)} {word}**)"
        for word, n in built.items()
        if said.get(word) != n
    ]


def test_readme_counts_match_the_build():
    assert count_problems() == []


def test_readme_counts_reads_the_bold_counts():
    text = "has **3 pages** and **2 notebooks**; 5 pages unbolded"
    assert readme_counts(text) == {"pages": 3, "notebooks": 2}


def test_count_problems_say_what_to_write(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "mkdocs.yml").write_text("nav:\n  - A: a.md\n  - B: b.md\n")
    (tmp_path / "README.md").write_text("**1 pages**, **0 notebooks**\n")
    assert count_problems(tmp_path) == [
        "README.md: the counts are the build's: write **2 pages** "
        "(not **1 pages**)"
    ]
