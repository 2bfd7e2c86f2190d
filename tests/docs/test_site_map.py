"""The start page's map lists every page of the nav."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def nav_pages(nav):
    """Every docs page (.md) the nav lists, nested sections included."""
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(value, list):
            yield from nav_pages(value)
        elif value.endswith(".md"):
            yield value


def mapped_pages(index_text):
    """The .md pages linked from the table under "## Map of the site"."""
    section = index_text.split("## Map of the site", 1)[1]
    section = re.split(r"\n## ", section, maxsplit=1)[0]
    return set(re.findall(r"\]\(([\w-]+\.md)\)", section))


def load_nav():
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    text = re.sub(r"!ENV \[[^\]]*\]", "null", text)  # plain YAML
    return yaml.safe_load(text)["nav"]


def test_start_page_map_lists_every_page():
    pages = set(nav_pages(load_nav())) - {"index.md"}
    mapped = mapped_pages((ROOT / "docs/index.md").read_text("utf-8"))
    assert pages - mapped == set(), "pages missing from the map"
    assert mapped - pages == set(), "the map links pages not in the nav"


def test_site_map_check_catches_a_missing_page():
    text = "## Map of the site\n\n| [A](a.md) | x |\n\n## Next\n[B](b.md)\n"
    assert mapped_pages(text) == {"a.md"}
    nav = [{"A": "a.md"}, {"Part": [{"B": "b.md"}, {"N": "x.ipynb"}]}]
    assert set(nav_pages(nav)) - mapped_pages(text) == {"b.md"}
