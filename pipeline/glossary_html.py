"""Glossary tooltips where they help, and nowhere else (after the build).

    plain_headings(site)   # postbuild.py runs it

The glossary's abbreviations (mkdocs.yml: abbr, and snippets'
``auto_append``) mark a term wherever it stands in a page's text:
headings, program output quoted in the text, and every repetition of a
term included, where a dotted underline reads as noise. This step
unwraps the <abbr> (keeping its words), on either engine's site:

- in every heading: the term is defined where the text under it uses
  it;
- inside code and program output: <pre>, <code>, <samp>, <kbd>, and
  any element of class ``mha-output`` (a page marks quoted output so:
  ``> << page.report >>`` then ``{: .mha-output }`` on the next line);
- after a term's first tooltip on a page: each term keeps its tooltip
  at its first use in the text, and at its first use inside a
  collapsed box (<details>) that the text before the box has not
  marked, since a box may be read on its own; a use in a box does not
  count for the text after it, which a reader may reach with the box
  closed;
- on the glossary page, each entry's own term, in bold and in its
  definition, whose tooltip would repeat the text beside it.
"""

import re
from pathlib import Path

from pipeline import memo

HEADING = re.compile(r"<(h[1-6])\b[^>]*>.*?</\1\s*>", re.S | re.I)
ABBR = re.compile(r"<abbr\b[^>]*>(.*?)</abbr\s*>", re.S | re.I)
# The class a page gives quoted program output (attr_list).
OUTPUT_CLASS = "mha-output"
# Code and output: an element that holds no tooltip.
NO_TOOLTIP = re.compile(
    r"<(pre|code|samp|kbd)\b[^>]*>.*?</\1\s*>"
    rf'|<(\w+)\b[^>]*\bclass="[^"]*\b{OUTPUT_CLASS}\b[^"]*"[^>]*>.*?</\2\s*>',
    re.S | re.I,
)
# What the first-use pass walks: boxes opening and closing, and marks.
BOX_OR_ABBR = re.compile(
    r"<details\b[^>]*>|</details\s*>"
    r"|<abbr\b[^>]*?\btitle=\"([^\"]*)\"[^>]*>(.*?)</abbr\s*>",
    re.S | re.I,
)
ARTICLE = re.compile(r"(<article\b[^>]*>)(.*)(</article\s*>)", re.S | re.I)


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


def plain_code_html(html):
    """``html`` with no <abbr> inside code or program output.

    >>> print(plain_code_html('<p class="mha-output">a <abbr title="t">'
    ...     'mask</abbr></p>\\n<pre><code><abbr title="t">mask</abbr></code>'
    ...     '</pre>\\n<p><abbr title="t">mask</abbr></p>'))
    <p class="mha-output">a mask</p>
    <pre><code>mask</code></pre>
    <p><abbr title="t">mask</abbr></p>
    """
    return NO_TOOLTIP.sub(lambda m: ABBR.sub(r"\1", m[0]), html)


def first_use_html(html):
    """``html`` with each term's tooltip at its first use only: in the
    text, and in each collapsed box, unless the text before it (or an
    enclosing box) marked it already. Only the page's <article> when
    it has one.

    >>> print(first_use_html('<article><abbr title="t">a</abbr> <abbr '
    ...     'title="t">a</abbr>\\n<details><abbr title="u">b</abbr> <abbr '
    ...     'title="t">a</abbr></details>\\n<abbr title="u">b</abbr>'
    ...     '</article>'))
    <article><abbr title="t">a</abbr> a
    <details><abbr title="u">b</abbr> a</details>
    <abbr title="u">b</abbr></article>
    """
    article = ARTICLE.search(html)
    if not article:
        return _first_use(html)
    body = _first_use(article[2])
    return html[: article.start(2)] + body + html[article.end(2) :]


def _first_use(html):
    scopes = [set()]  # the titles marked, per open box; the text first

    def mark(match):
        text = match[0]
        if text.lower().startswith("<details"):
            scopes.append(set())
            return text
        if text.lower().startswith("</details"):
            if len(scopes) > 1:
                scopes.pop()
            return text
        title = match[1]
        if any(title in seen for seen in scopes):
            return match[2]  # marked already: its words alone
        scopes[-1].add(title)
        return text

    return BOX_OR_ABBR.sub(mark, html)


def plain_page_html(html):
    """Every step above, on one page's HTML."""
    html = plain_code_html(plain_heading_html(html))
    return plain_entry_html(first_use_html(html))


def plain_headings(site, pages=None):
    """Take the <abbr> out where it is noise (this module's docstring)
    in every page of ``site`` (or those of ``pages``, a set of paths);
    the number of pages changed."""
    changed = 0
    for page in sorted(Path(site).rglob("*.html")):
        if pages is not None and page not in pages:
            continue
        html = page.read_text(encoding="utf-8")
        plain = memo.long_fact("glossary plain html", html, plain_page_html)
        if plain != html:
            page.write_text(plain, encoding="utf-8")
            changed += 1
    return changed
