"""The glossary holds to the pages, and the pages show it.

One file of Markdown abbreviations (``*[term]: definition``), appended
to every page by pymdownx.snippets (mkdocs.yml, ``auto_append``), is the
only place a term is defined: abbr marks each use of the term in a
page's text with its definition, Material shows it as a tooltip, and
the glossary page lists the same file (macros.py, ``glossary()``).

- no term is defined twice;
- every term is used on some page (its text, not code or math), so no
  entry outlives the pages;
- on the built site, the first use of every term in the text (not code,
  quoted program output, math or headings, nor inside a longer term:
  "mask" in "causal mask") of each page of the path (Start here to the
  backward pages: the nav before Going further) sits inside an <abbr>
  carrying the definition; later uses need none (the post-build step
  keeps a term's tooltip at its first use only).
"""

import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from macros import glossary_entries
from pipeline import config
from pipeline.glossary_html import (
    OUTPUT_CLASS,
    plain_heading_html,
    plain_page_html,
)
from tests.docs.test_site_map import load_nav, nav_items

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "site"
GLOSSARY_PAGE = "glossary.md"
# The first section of the nav that is not on the path.
AFTER_THE_PATH = "Going further"


def entries(root=ROOT):
    return glossary_entries(config.glossary_file(root))


def term_pattern(term):
    """Where abbr marks a term: the exact text, whole words (its \\b)."""
    return re.compile(rf"\b{re.escape(term)}\b")


# What abbr never marks on a page: front matter, fenced and inline code,
# math, the template's << >>, <% %> and <# #>, snippet lines, link and
# image targets, HTML tags and comments.
NOT_TEXT = [
    re.compile(r"\A---\n.*?\n---\n", re.S),
    re.compile(r"^([ \t]*)(`{3,}|~{3,}).*?^\1\2", re.S | re.M),
    re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$|\\\(.*?\\\)|\\\[.*?\\\]", re.S),
    re.compile(r"`[^`\n]+`"),
    re.compile(r"<<.*?>>|<%.*?%>|<#.*?#>", re.S),
    re.compile(r"^.*--8<--.*$", re.M),
    re.compile(r"\]\([^)]*\)"),
    re.compile(r"<!--.*?-->|<[^>\n]+>", re.S),
]


def page_text(markdown):
    for pattern in NOT_TEXT:
        markdown = pattern.sub(" ", markdown)
    return markdown


def duplicate_problems(terms):
    seen, problems = set(), []
    for term, _ in terms:
        if term in seen:
            problems.append(f"{term!r} is defined twice: keep one line")
        seen.add(term)
    return problems


def unused_problems(terms, pages):
    """``pages``: {name: Markdown}; a term no page's text uses."""
    texts = [page_text(markdown) for markdown in pages.values()]
    return [
        f"{term!r} is used on no page (outside code and math): remove "
        "its line from the glossary, or use the term"
        for term, _ in terms
        if not any(term_pattern(term).search(text) for text in texts)
    ]


class _Text(HTMLParser):
    """The text nodes of a page's article, in order, each with whether an
    <abbr> holds it and that abbr's title; code, math, scripts skipped."""

    # headings: the post-build step takes their tooltips out
    # (pipeline/glossary_html.py), the text under them keeps them
    SKIP = {"code", "pre", "script", "style", "svg", "math", "kbd"}
    SKIP |= {f"h{level}" for level in range(1, 7)}
    # program output quoted on a page holds no tooltip either
    SKIP_CLASSES = {"arithmatex", "katex", "headerlink", OUTPUT_CLASS}
    VOID = {"br", "img", "hr", "input", "meta", "link", "wbr", "source"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack = []  # (tag, skip, abbr title or None)
        self.inside = 0  # depth inside <article>
        self.nodes = []

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            return
        attrs = dict(attrs)
        classes = set((attrs.get("class") or "").split())
        skip = tag in self.SKIP or bool(classes & self.SKIP_CLASSES)
        title = attrs.get("title") if tag == "abbr" else None
        self.stack.append((tag, skip, title))
        if tag == "article":
            self.inside += 1

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        while self.stack:
            top = self.stack.pop()[0]
            if top == "article":
                self.inside -= 1
            if top == tag:
                break

    def handle_data(self, data):
        if not self.inside or any(skip for _, skip, _ in self.stack):
            return
        titles = [t for tag, _, t in self.stack if tag == "abbr"]
        self.nodes.append((data, titles[-1] if titles else None))


def first_use_problems(terms, pages):
    """``pages``: {name: built HTML}; a term whose first use in a page's
    text carries no tooltip with its definition."""
    problems = []
    term_of = {definition: term for term, definition in terms}
    for name, html in pages.items():
        parser = _Text()
        parser.feed(html)
        for term, definition in terms:
            pattern = term_pattern(term)
            # a longer term holding this one ("causal mask" for "mask")
            # is marked as itself, or, repeated, not at all
            longer = [
                term_pattern(other)
                for other, _ in terms
                if other != term and pattern.search(other)
            ]
            first = next(
                (
                    t
                    for data, t in parser.nodes
                    if pattern.search(_without(longer, data))
                    # inside a longer term's abbr ("causal mask"), abbr
                    # rightly marks the longer term, not "mask"
                    and not _longer(term_of.get(t), term)
                ),
                False,
            )
            if first is False:
                continue  # the page does not use the term
            if first != definition:
                problems.append(
                    f"{name}: the first {term!r} carries "
                    + ("no tooltip" if first is None else f"{first!r}")
                    + ": is the glossary appended (mkdocs.yml, "
                    "auto_append) and abbr on?"
                )
    return problems


def _without(patterns, text):
    """``text`` with every match of ``patterns`` blanked out."""
    for pattern in patterns:
        text = pattern.sub(" ", text)
    return text


def _longer(other, term):
    """Whether ``other`` is a longer glossary term holding ``term``."""
    return bool(other) and other != term and term_pattern(term).search(other)


def path_pages(nav):
    """The nav's pages before Going further: the path."""
    pages = []
    for item in nav:
        title = next(iter(item)) if isinstance(item, dict) else ""
        if title == AFTER_THE_PATH:
            break
        pages += [page for _, page in nav_items([item])]
    return pages


def built(page, site=SITE):
    stem = page.removesuffix(".md")
    return site / ("index.html" if stem == "index" else f"{stem}/index.html")


def markdown_pages(root=ROOT):
    docs = Path(root) / "docs"
    return {
        str(path.relative_to(docs)): path.read_text(encoding="utf-8")
        for path in sorted(docs.rglob("*.md"))
        if path.relative_to(docs).parts[0] not in {"generated", "includes"}
        and path.name != GLOSSARY_PAGE
    }


def test_glossary_defines_each_term_once():
    terms = entries()
    assert terms, "the glossary file is empty"
    assert duplicate_problems(terms) == []


def test_every_glossary_term_is_used_on_a_page():
    assert unused_problems(entries(), markdown_pages()) == []


def test_glossary_page_is_in_the_nav():
    assert GLOSSARY_PAGE in [page for _, page in nav_items(load_nav())]


def test_path_pages_show_each_term_with_its_tooltip():
    """On the built site (make site; skipped without one, or when the
    site is older than the glossary or a path page)."""
    pages = path_pages(load_nav())
    assert "layer-backward.md" in pages
    assert "kv-cache.md" not in pages
    files = {page: built(page) for page in pages}
    if not all(f.is_file() for f in files.values()):
        if os.environ.get("CI"):
            pytest.fail("site/ lacks a path page: run make site first")
        pytest.skip("site/ is not built: run make site first")
    sources = [config.glossary_file()]
    sources += [ROOT / "docs" / page for page in pages]
    built_at = min(f.stat().st_mtime for f in files.values())
    if max(s.stat().st_mtime for s in sources) > built_at:
        pytest.skip("site/ is older than the pages: run make site first")
    html = {page: f.read_text(encoding="utf-8") for page, f in files.items()}
    assert first_use_problems(entries(), html) == []


# The checks catch drift: each fails on a made-up case.

TERMS = [("token", "A piece of text."), ("zebra", "A striped animal.")]


def test_unused_entry_is_reported():
    pages = {
        "a.md": "A token, then `zebra` in code and $zebra$ in math.\n",
        "b.md": "---\ntags: [zebra]\n---\n[a token](zebra.md)\n",
    }
    assert unused_problems(TERMS, pages) == [
        "'zebra' is used on no page (outside code and math): remove its "
        "line from the glossary, or use the term"
    ]


def test_term_defined_twice_is_reported():
    assert duplicate_problems([*TERMS, ("token", "Again.")]) == [
        "'token' is defined twice: keep one line"
    ]


def test_first_use_without_tooltip_is_reported():
    marked = '<abbr title="A piece of text.">token</abbr>'
    html = {
        "good.md": (
            "<article><h2>token</h2><code>token</code> a "
            f"{marked}, token</article>"
        ),
        "bad.md": f"<article>a token, then a {marked}</article>",
        "off.md": "<nav>token</nav><article>no term here</article>",
    }
    assert first_use_problems(TERMS, html) == [
        "bad.md: the first 'token' carries no tooltip: is the glossary "
        "appended (mkdocs.yml, auto_append) and abbr on?"
    ]


def test_a_longer_term_holding_a_term_is_not_its_first_use():
    terms = [("mask", "Blocks pairs."), ("causal mask", "Blocks the future.")]
    html = {
        "good.md": (
            '<article>a <abbr title="Blocks the future.">causal mask</abbr>'
            ', then a <abbr title="Blocks pairs.">mask</abbr></article>'
        ),
        "bad.md": (
            '<article>a <abbr title="Blocks the future.">causal mask</abbr>'
            ", then a mask</article>"
        ),
    }
    assert first_use_problems(terms, html) == [
        "bad.md: the first 'mask' carries no tooltip: is the glossary "
        "appended (mkdocs.yml, auto_append) and abbr on?"
    ]


def test_glossary_file_refuses_a_line_that_is_no_abbreviation(tmp_path):
    path = tmp_path / "glossary.md"
    path.write_text("*[token]: A piece.\n\nA stray sentence.\n")
    with pytest.raises(ValueError, match=r"glossary.md:3: not an abbr"):
        glossary_entries(path)


def test_headings_lose_their_tooltips_and_keep_their_words():
    html = (
        '<h1>Through <abbr title="d">softmax</abbr></h1>'
        '<p>A <abbr title="d">softmax</abbr>.</p>'
        '<h3 id="x">The <ABBR title="d">KV cache</ABBR> and '
        '<abbr title="e">RoPE</abbr></h3>'
    )
    assert plain_heading_html(html) == (
        "<h1>Through softmax</h1>"
        '<p>A <abbr title="d">softmax</abbr>.</p>'
        '<h3 id="x">The KV cache and RoPE</h3>'
    )


def test_code_output_and_repetitions_lose_their_tooltips():
    """A drifted page: tooltips in code, in quoted program output and on
    every repetition of a term; the post-build step leaves the first use
    in the text and in a box the text has not marked."""
    f32 = '<abbr title="Single precision.">float32</abbr>'
    mask = '<abbr title="Blocks pairs.">mask</abbr>'
    html = (
        f"<nav>{f32}</nav><article><p>In {f32}, then {f32} again.</p>"
        f'<blockquote><p class="{OUTPUT_CLASS}">a {mask} (3, 3)</p>'
        f"</blockquote><pre><code>{f32}</code></pre>"
        f"<details><summary>Box</summary><p>A {mask}, a {mask}, "
        f"{f32}.</p></details><p>The {mask}; {f32}.</p></article>"
    )
    assert plain_page_html(html) == (
        f"<nav>{f32}</nav><article><p>In {f32}, then float32 again.</p>"
        f'<blockquote><p class="{OUTPUT_CLASS}">a mask (3, 3)</p>'
        "</blockquote><pre><code>float32</code></pre>"
        f"<details><summary>Box</summary><p>A {mask}, a mask, "
        f"float32.</p></details><p>The {mask}; float32.</p></article>"
    )
    # the first use of each term in the text still carries its tooltip
    terms = [("float32", "Single precision."), ("mask", "Blocks pairs.")]
    assert first_use_problems(terms, {"a.md": plain_page_html(html)}) == []
    # output is not a use: the first use is the text's after it
    out = f'<p class="{OUTPUT_CLASS}">a mask</p>'
    pages = {
        "good.md": f"<article>{out}<p>the {mask}</p></article>",
        "bad.md": f"<article>{out}<p>the mask</p></article>",
    }
    assert first_use_problems(terms, pages) == [
        "bad.md: the first 'mask' carries no tooltip: is the glossary "
        "appended (mkdocs.yml, auto_append) and abbr on?"
    ]


def test_a_repeated_longer_term_is_no_use_of_the_shorter():
    terms = [("mask", "Blocks pairs."), ("causal mask", "Blocks the future.")]
    causal = '<abbr title="Blocks the future.">causal mask</abbr>'
    html = {
        "good.md": f"<article>a {causal}, a causal mask</article>",
        "bad.md": f"<article>a {causal}, a causal mask, a mask</article>",
    }
    assert first_use_problems(terms, html) == [
        "bad.md: the first 'mask' carries no tooltip: is the glossary "
        "appended (mkdocs.yml, auto_append) and abbr on?"
    ]
