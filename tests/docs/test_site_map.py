"""The start page's map lists every page of the nav."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
MAP = "## Map of the site"


def nav_items(nav):
    """(title, page) of every docs page (.md) the nav lists, nested
    sections included."""
    for item in nav:
        title, value = (
            next(iter(item.items())) if isinstance(item, dict) else ("", item)
        )
        if isinstance(value, list):
            yield from nav_items(value)
        elif value.endswith(".md"):
            yield title, value


def nav_pages(nav):
    """Every docs page (.md) the nav lists, nested sections included."""
    return [page for _, page in nav_items(nav)]


def mapped_pages(index_text):
    """The .md pages linked from the table under "## Map of the site"."""
    section = index_text.split(MAP, 1)[1]
    section = re.split(r"\n## ", section, maxsplit=1)[0]
    return set(re.findall(r"\]\(([\w-]+\.md)\)", section))


def load_nav(root=ROOT):
    text = (Path(root) / "mkdocs.yml").read_text(encoding="utf-8")
    text = re.sub(r"!ENV \[[^\]]*\]", "null", text)  # plain YAML
    return yaml.safe_load(text)["nav"]


def map_problems(root=ROOT):
    """What the map lacks or has too many, each as what to do."""
    nav = {page: title for title, page in nav_items(load_nav(root))}
    nav.pop("index.md", None)
    text = (Path(root) / "docs/index.md").read_text("utf-8")
    mapped = mapped_pages(text)
    problems = [
        f"docs/index.md: the map of the site lacks {page}: add the row "
        f'| [{nav[page]}]({page}) | ... | to the table under "{MAP}"'
        for page in sorted(set(nav) - mapped)
    ]
    problems += [
        f"docs/index.md: the map of the site links {page}, which the nav "
        f"of mkdocs.yml lacks: remove its row, or add it to the nav"
        for page in sorted(mapped - set(nav))
    ]
    return problems


def test_start_page_map_lists_every_page():
    assert map_problems() == []


def test_site_map_check_catches_a_missing_page():
    text = "## Map of the site\n\n| [A](a.md) | x |\n\n## Next\n[B](b.md)\n"
    assert mapped_pages(text) == {"a.md"}
    nav = [{"A": "a.md"}, {"Part": [{"B": "b.md"}, {"N": "x.ipynb"}]}]
    assert set(nav_pages(nav)) - mapped_pages(text) == {"b.md"}


def test_map_problems_say_which_row_to_add(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "mkdocs.yml").write_text(
        "site_url: !ENV [X, 'http://h/']\nnav:\n  - Start: index.md\n"
        "  - Part:\n      - RMS normalisation: rms.md\n"
    )
    (tmp_path / "docs/index.md").write_text(f"{MAP}\n\n| [Old](old.md) |\n")
    assert map_problems(tmp_path) == [
        "docs/index.md: the map of the site lacks rms.md: add the row "
        "| [RMS normalisation](rms.md) | ... | to the table under "
        '"## Map of the site"',
        "docs/index.md: the map of the site links old.md, which the nav of "
        "mkdocs.yml lacks: remove its row, or add it to the nav",
    ]
