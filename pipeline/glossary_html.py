"""Headings carry no glossary tooltips (after the build).

    plain_headings(site)   # postbuild.py runs it

The glossary's abbreviations (mkdocs.yml: abbr, and snippets'
``auto_append``) mark a term wherever it stands in a page's text,
headings included, where a dotted underline and a tooltip on a title
read as noise: the term is defined where the text under the heading
uses it. This step takes the <abbr> out of every heading of the built
HTML, keeping its words, on either engine's site.
"""

import re
from pathlib import Path

HEADING = re.compile(r"<(h[1-6])\b[^>]*>.*?</\1\s*>", re.S | re.I)
ABBR = re.compile(r"<abbr\b[^>]*>(.*?)</abbr\s*>", re.S | re.I)


def plain_heading_html(html):
    """``html`` with the <abbr> of each heading unwrapped.

    >>> plain_heading_html('<h2 id="a">The <abbr title="t">KV cache</abbr>'
    ...                    '</h2><p><abbr title="t">KV cache</abbr></p>')
    '<h2 id="a">The KV cache</h2><p><abbr title="t">KV cache</abbr></p>'
    """
    return HEADING.sub(lambda m: ABBR.sub(r"\1", m[0]), html)


def plain_headings(site):
    """Unwrap the headings' <abbr> in every page of ``site``; the
    number of pages changed."""
    changed = 0
    for page in sorted(Path(site).rglob("*.html")):
        html = page.read_text(encoding="utf-8")
        plain = plain_heading_html(html)
        if plain != html:
            page.write_text(plain, encoding="utf-8")
            changed += 1
    return changed
