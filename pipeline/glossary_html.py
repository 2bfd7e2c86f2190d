"""Headings carry no glossary tooltips (after the build).

    plain_headings(site)   # postbuild.py runs it

The glossary's abbreviations (mkdocs.yml: abbr, and snippets'
``auto_append``) mark a term wherever it stands in a page's text,
headings included, where a dotted underline and a tooltip on a title
read as noise: the term is defined where the text under the heading
uses it. This step takes the <abbr> out of every heading of the built
HTML, keeping its words, on either engine's site; on the glossary
page, it also unwraps each entry's own term, in bold and in its
definition, whose tooltip would repeat the text beside it.
"""

import re
from pathlib import Path

HEADING = re.compile(r"<(h[1-6])\b[^>]*>.*?</\1\s*>", re.S | re.I)
ABBR = re.compile(r"<abbr\b[^>]*>(.*?)</abbr\s*>", re.S | re.I)


# A glossary entry (macros.py, glossary_table): its anchor, its bold
# term, its definition, to the end of the list item.
ENTRY = re.compile(
    r'(<span id="term-[^"]*"></span>\s*<strong>)(.*?)(</strong>)(.*?)(</li>)',
    re.S,
)


def plain_entry_html(html):
    """``html`` with each glossary entry's own term unwrapped.

    >>> plain_entry_html('<li><span id="term-a"></span><strong><abbr '
    ...     'title="t">a</abbr></strong>: c <abbr title="t">a</abbr>'
    ...     ' <abbr title="u">d</abbr></li>')[29:]
    '<strong>a</strong>: c a <abbr title="u">d</abbr></li>'
    """

    def entry(match):
        term = ABBR.sub(r"\1", match[2])

        def own(abbr):
            return abbr[1] if abbr[1] == term else abbr[0]

        rest = ABBR.sub(own, match[4])
        return match[1] + term + match[3] + rest + match[5]

    return ENTRY.sub(entry, html)


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
        plain = plain_entry_html(plain_heading_html(html))
        if plain != html:
            page.write_text(plain, encoding="utf-8")
            changed += 1
    return changed
