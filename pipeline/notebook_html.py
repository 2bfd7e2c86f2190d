"""A notebook's page in the site's own look, and light (after the build).

    slim_notebook_pages(site)   # postbuild.py runs it on either engine

mkdocs-jupyter renders each notebook with JupyterLab's whole stylesheet
inlined (595 KB on every notebook page), a second copy of every cell's
source for its copy button, and each figure as an inline image of its
light variant: black labels on a transparent background, which vanish
on the dark scheme. On the built HTML of either engine this step

- removes the inlined Jupyter CSS and the scripts no cell uses (the copy
  button's element, Mermaid, MathJax's configuration); the few rules a
  notebook page needs are docs/assets/stylesheets/notebook.css;
- makes each code cell a Material code block (``.highlight``,
  ``pre > code``): the site's code colours, its copy button, and no
  second copy of the source;
- shows a figure the page script drew with ``glue.figure`` as the page
  does: its light and dark variants from generated/figures/, lazy (a
  reader fetches the one the scheme shows), with its alt text.

The figures are recognised by their bytes: in the executed notebooks
(``docs/generated/notebooks/<name>.ipynb``) each glued figure's output
holds its light SVG, its glue record its name, and its text its alt
text (``glue: figure NAME: ALT``, scripts/glue.py). A page that was
slimmed already is left as it is, so running the step twice changes
nothing.
"""

import base64
import hashlib
import html
import json
import posixpath
import re
from pathlib import Path

from pipeline import config, memo

DONE = '<meta name="mha-notebook" content="slim">'
ARTICLE_START = re.compile(r"<article\b")
STYLE = re.compile(r"\s*<style\b[^>]*>.*?</style>", re.S)
SCRIPT = re.compile(r"\s*<script\b([^>]*)>(.*?)</script>", re.S)
# the scripts of mkdocs-jupyter's template that no cell needs
UNUSED = ("clipboard-copy", "ClipboardCopyElement", "jp-Mermaid")
COPY_BUTTON = re.compile(
    r'\s*<div class="zeroclipboard-container">.*?</clipboard-copy>\s*</div>',
    re.S,
)
# the copy button's hidden copy of the source (escaped: no "<" inside)
COPY_TEXT = re.compile(r'\s*<div class="clipboard-copy-txt"[^>]*>[^<]*</div>')
CODE_CELL = re.compile(
    r'(<div class="highlight-ipynb[^"]*)("><pre>)(.*?)(</pre>)', re.S
)
# nbconvert writes <img ... src="data:..."/>, zensical.py "...">
SVG_IMG = re.compile(
    r'<img alt="[^"]*" src="data:image/svg\+xml;base64,([A-Za-z0-9+/=]+)"'
    r"\s*/?>"
)


def _key(svg_text):
    return hashlib.sha256(svg_text.strip().encode("utf-8")).hexdigest()


def glued_figures(notebooks):
    """{hash of a light SVG: (figure name, alt)} over every notebook."""
    found, glue_mime = {}, config.glue_mime()
    for path in sorted(Path(notebooks).glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        for cell in nb.get("cells", []):
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                record = data.get(glue_mime)
                if not isinstance(record, dict) or "image/svg+xml" not in data:
                    continue
                if record.get("kind") != "figure":
                    continue
                name = record["name"]
                text = "".join(data.get("text/plain", ""))
                alt = text.removeprefix(f"glue: figure {name}: ")
                found[_key("".join(data["image/svg+xml"]))] = (name, alt)
    return found


def _script(match):
    attrs, body = match[1], match[2]
    if "text/x-mathjax-config" in attrs or any(u in body for u in UNUSED):
        return ""
    return match[0]


def _code_block(match):
    return f"{match[1]} highlight{match[2]}<code>{match[3]}</code>{match[4]}"


def slim_article(article, figures, figure_dir):
    """The article of a notebook page, slimmed (see the module's doc).

    ``figures``: glued_figures(); ``figure_dir``: the URL of
    generated/figures/ relative to the page, ending in "/".
    """
    article = STYLE.sub("", article)
    article = SCRIPT.sub(_script, article)
    article = COPY_BUTTON.sub("", article)
    article = COPY_TEXT.sub("", article)
    article = CODE_CELL.sub(_code_block, article)

    def variants(match):
        svg = base64.b64decode(match[1]).decode("utf-8", "replace")
        found = figures.get(_key(svg))
        if found is None:
            return match[0]  # not a glued figure: notebook.css backs it
        name, alt = found
        alt = html.escape(alt, quote=True)
        return "".join(
            f'<img alt="{alt}" src="{figure_dir}{name}-{scheme}.svg'
            f'#only-{scheme}" loading="lazy">'
            for scheme in ("light", "dark")
        )

    return SVG_IMG.sub(variants, article)


def _article(html):
    """(start, end) of the page's first <article> element, or (None,
    None); its end by str.find, not a lazy regular expression over a
    notebook page, which is most of a megabyte."""
    found = ARTICLE_START.search(html)
    if found is None:
        return None, None
    start = found.start()
    end = html.find("</article>", start)
    if end == -1:
        return None, None
    return start, end + len("</article>")


def notebook_pages(site):
    """The built pages of the generated notebooks, either engine."""
    return sorted(Path(site).glob("generated/notebooks/*/index.html"))


def slim_notebook_pages(site, notebooks, pages=None):
    """Slim every notebook page of the built ``site`` (or those of
    ``pages``, a set of paths), whose executed notebooks are in the
    folder ``notebooks``; returns how many changed."""
    chosen = [p for p in notebook_pages(site) if pages is None or p in pages]
    if not chosen:
        return 0
    site, figures, changed = Path(site), glued_figures(notebooks), 0
    figures = {  # only the figures the site holds, both variants
        key: found
        for key, found in figures.items()
        if all(
            (site / f"generated/figures/{found[0]}-{s}.svg").is_file()
            for s in ("light", "dark")
        )
    }
    shown = json.dumps(sorted(figures.items()))  # what slimming reads
    for page in chosen:
        text = page.read_text(encoding="utf-8")
        if DONE in text:
            continue
        rel = page.parent.relative_to(site).as_posix()
        figure_dir = posixpath.relpath("generated/figures", rel) + "/"
        start, end = _article(text)
        if start is None:
            raise ValueError(f"{page}: no <article> to slim")
        article = text[start:end]
        slim = (
            text[:start]
            + memo.long_fact(  # the same article slims the same way
                "slim notebook article",
                f"{figure_dir}\n{shown}\n{article}",
                lambda _, a=article, d=figure_dir: slim_article(a, figures, d),
            )
            + text[end:]
        )
        slim = slim.replace("</head>", f"{DONE}</head>", 1)
        page.write_text(slim, encoding="utf-8")
        changed += 1
    return changed
