"""An executed notebook as a Markdown page, for engines without a plugin.

MkDocs renders ``notebooks/<name>.ipynb`` with mkdocs-jupyter. Zensical
has no notebook plugin, so the generation step also writes
``notebooks/<name>.md`` from the same executed notebook: Markdown cells
as they are, code cells as fenced ``python`` blocks, text outputs as
fenced ``text`` blocks, images inline, and a download link to the
``.ipynb``. MkDocs never reads this page (mkdocs.yml excludes
``generated/**/*.md``); the Zensical config points its nav at it
(pipeline/zensical.py). It is written with the notebook and cached with
it (pipeline/notebooks.py).
"""

import base64
import html
import posixpath
import re

# Zensical would otherwise render the page as a macros template: a
# notebook's Python (``x << 2``) is not one.
# A notebook repeats the page that links it: keep it out of search
# (MkDocs: macros.py leaves notebook pages out of its index).
FRONT_MATTER = "---\nrender_macros: false\nsearch:\n  exclude: true\n---\n"
# Cells with these tags are in the download, not on the page: the same
# list as mkdocs.yml's mkdocs-jupyter remove_tag_config.remove_cell_tags
# (tests/engines compares the two pages, so a mismatch fails there).
REMOVE_CELL_TAGS = frozenset({"carry"})


# [text](target) in a Markdown cell; images too (the ! is outside)
LINK = re.compile(r"(\]\()([^)\s]+)(\))")


def _source_links(markdown, page_url):
    """Rewrite a cell's page-URL links as links to the .md sources.

    A notebook's links are relative to its rendered page
    (``../../../pitfalls/#scaling`` from ``generated/notebooks/x/``),
    since mkdocs-jupyter leaves them alone; an engine reading Markdown
    resolves links from the source file instead, and checks them.
    """

    def source(match):
        target = match[2]
        path, hash_, fragment = target.partition("#")
        if not path or re.match(r"^[a-z][a-z0-9+.-]*:|^/", path):
            return match[0]  # a fragment, a URL or an absolute path
        if not path.endswith("/"):
            return match[0]  # a file (image, download), not a page
        url = posixpath.normpath(posixpath.join(page_url, path))
        doc = "index.md" if url == "." else url + ".md"
        page_dir = posixpath.dirname(page_url.rstrip("/"))
        relative = posixpath.relpath(doc, page_dir)
        return f"{match[1]}{relative}{hash_}{fragment}{match[3]}"

    return LINK.sub(source, markdown)


def _fence(text, lang):
    """``text`` in a fenced block whose fence it cannot close."""
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}"


def _source(cell):
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _output(output):
    """Markdown for one output of a code cell ('' if nothing shows)."""
    kind = output.get("output_type")
    if kind == "stream":
        return _fence(_source({"source": output.get("text", "")}), "text")
    if kind == "error":
        return _fence("\n".join(output.get("traceback", [])), "text")
    data = output.get("data", {})
    text = {k: _source({"source": v}) for k, v in data.items()}
    if "image/svg+xml" in text:  # an <img>, as nbconvert shows it: the
        # SVG's own text ($10^{-2}$ tick labels, ids) stays out of the page
        svg = base64.b64encode(text["image/svg+xml"].encode()).decode()
        alt = html.escape(text.get("text/plain", "figure"), quote=True)
        return f'<img alt="{alt}" src="data:image/svg+xml;base64,{svg}">'
    if "image/png" in text:
        png = text["image/png"].replace("\n", "")
        base64.b64decode(png, validate=True)  # a broken image fails here
        return f"![output](data:image/png;base64,{png})"
    if "text/html" in text:
        return f'<div class="notebook-output">\n{text["text/html"]}\n</div>'
    if "text/markdown" in text:
        return text["text/markdown"]
    if "text/latex" in text:
        return text["text/latex"]
    if "text/plain" in text:
        return _fence(text["text/plain"], "text")
    return ""


def notebook_markdown(nb, download, page_url):
    """The Markdown page of notebook ``nb``.

    ``download``: the notebook's file name, next to the page's source;
    ``page_url``: the URL of its page from the site root, as
    ``generated/notebooks/<name>/``, which the cells' links are relative
    to.
    """
    blocks = []
    for cell in nb["cells"]:
        if REMOVE_CELL_TAGS & set(cell.get("metadata", {}).get("tags", [])):
            continue
        source = _source(cell).strip("\n")
        if cell["cell_type"] == "markdown":
            blocks.append(_source_links(source, page_url))
        elif cell["cell_type"] == "code":
            if source:
                blocks.append(_fence(source, "python"))
            blocks.extend(
                shown
                for shown in map(_output, cell.get("outputs", []))
                if shown
            )
        # raw cells are not shown (nbconvert's HTML skips them too)
    # under the title, where mkdocs-jupyter puts its download button
    if blocks and blocks[0].startswith("# "):
        title, _, rest = blocks[0].partition("\n")
        blocks[:1] = [title, rest.strip("\n")] if rest.strip() else [title]
        at = 1
    else:
        at = 0
    blocks.insert(at, f"[Download the notebook]({download}){{ download }}")
    return FRONT_MATTER + "\n" + "\n\n".join(blocks) + "\n"
