"""What a reader gets from a page, read from each engine's built HTML.

``make site`` builds site/ with MkDocs, ``make site-zensical`` builds
site-zensical/ with Zensical, from the same docs/ and generated data;
both typeset their math afterwards (pipeline/typeset_math.py). For each
page, ``content`` reads the article (not the theme around it) into the
parts a reader relies on: its text (whitespace normalised), the numbers
in that text, its code blocks, its figures (img srcs, as site paths) and
its math (the TeX that KaTeX annotates each formula with). ``differences``
lists what is not the same between two sites, page by page.

The notebook page is the one page the engines render differently:
mkdocs-jupyter draws the notebook (cells, prompts, a download button)
and leaves its math as $...$ for KaTeX in the browser; Zensical renders
the Markdown page the generation step writes from the same executed
notebook (pipeline/zensical.py, notebook_page), math typeset at build time. Its
parts are read so both give the same kind of thing: prompts and the
download button are left out, and the $...$ of mkdocs-jupyter's cells
become its math.
"""

import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path

import lxml.html
from lxml import etree

REPO = Path(__file__).resolve().parents[2]
SITES = {"mkdocs": REPO / "site", "zensical": REPO / "site-zensical"}

NUMBER = re.compile(r"(?<![\w.])[-−]?\d+(?:\.\d+)?(?:e[-+]?\d+)?")
# Jupyter's math delimiters in mkdocs-jupyter's rendered Markdown
DOLLARS = re.compile(r"\$\$(.+?)\$\$|\$(.+?)\$", re.S)
# Not content: permalinks, the skip anchor, the copy buttons, prompts,
# the notebook's download button, scripts and styles, and the front
# matter's search tags (Zensical shows them as chips). Matched by tag and
# class on lxml's own tree: CSS selectors took 25 s over the two sites,
# BeautifulSoup's tree (over lxml) 7 s, lxml's 0.8 s.
CHROME_TAGS = {"script", "style", "button"}
CHROME_CLASSES = {
    "headerlink",
    "anchor-link",
    "jp-InputPrompt",
    "jp-OutputPrompt",
    "md-content__button",
    "md-source-file",
    "zeroclipboard-container",
    "clipboard-copy-txt",
    "md-tags",
}


def _is_chrome(el):
    """True for an element that is the theme's, not the page's content."""
    if el.tag in CHROME_TAGS:
        return True
    if el.tag == "a" and (
        el.get("download") is not None or el.get("id") == "__skip"
    ):
        return True
    return not CHROME_CLASSES.isdisjoint(_classes(el))


def _classes(el):
    return (el.get("class") or "").split()


def _drop(el):
    """Remove `el` and what it holds; the text after it stays, a word
    apart from the text before it (as the text of two elements is)."""
    el.tail = " " + (el.tail or "")
    el.drop_tree()


@dataclass
class Content:
    """The parts of one page a reader relies on."""

    text: str = ""
    numbers: list = field(default_factory=list)
    code: list = field(default_factory=list)
    figures: list = field(default_factory=list)
    math: list = field(default_factory=list)
    downloads: list = field(default_factory=list)


def pages(site):
    """{page path: index.html} of a built site: "" is the start page."""
    found = {}
    for file in sorted(Path(site).rglob("index.html")):
        rel = file.parent.relative_to(site).as_posix()
        if rel == ".":
            found[""] = file
        elif not rel.startswith(("assets/", "404", "search")):
            found[rel + "/"] = file
    return found


def _squash(text):
    return " ".join(text.split())


def _site_path(page, src):
    """An img/href relative to page ``page`` as a path from the root."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", src):
        return src  # data: or http(s): as written
    path, _, fragment = src.partition("#")
    joined = posixpath.normpath(posixpath.join(page or ".", path))
    return joined + (f"#{fragment}" if fragment else "")


def content(html, page=""):
    """Content of one page's HTML; ``page`` its path ("scaling/")."""
    start, end = html.find("<article"), html.rfind("</article>")
    if 0 <= start < end:  # parse the article alone: pages are large
        html = html[start : end + len("</article>")]
    article = lxml.html.fromstring(html)
    found = Content()
    found.downloads = sorted(  # site paths: each engine has its own
        _site_path(page, a.get("href"))
        for a in article.iter("a")
        if a.get("download") is not None
    )
    for node in article.xpath("//comment()"):
        _drop(node)
    for node in [e for e in article.iter(etree.Element) if _is_chrome(e)]:
        if node.getparent() is not None or node is article:
            _drop(node)
    for annotation in article.iter("annotation"):
        if annotation.get("encoding") == "application/x-tex":
            found.math.append(_squash(annotation.text_content()))
    typeset = {"katex", "katex-display"}
    for node in [
        e
        for e in article.iter(etree.Element)
        if not typeset.isdisjoint(_classes(e))
    ]:
        _drop(node)  # typeset math: its TeX is in found.math
    for img in article.iter("img"):
        found.figures.append(_site_path(page, img.get("src", "")))
    for pre in list(article.iter("pre")):
        code = pre.text_content().rstrip()
        if code:
            found.code.append(code)
        _drop(pre)
    # mkdocs-jupyter's cells keep $...$ for the browser: read it as math
    for cell in article.iter(etree.Element):
        if "jp-RenderedMarkdown" in _classes(cell):
            for el in cell.iter(etree.Element):
                el.text = _dollars_out(el.text, found.math)
                if el is not cell:
                    el.tail = _dollars_out(el.tail, found.math)
    # a glossary tooltip (<abbr>) marks a word, it is not one of its
    # own: Zensical's notebook pages (Markdown) carry them, mkdocs-
    # jupyter's do not
    for abbr in list(article.iter("abbr")):
        abbr.drop_tag()
    found.text = _squash(" ".join(article.itertext()))
    # a number inside a word (d_k, h2) is not a result
    found.numbers = [n.replace("−", "-") for n in NUMBER.findall(found.text)]
    return found


def _dollars_out(text, math):
    """`text` with its $...$ taken out into `math`."""
    if not text:
        return text
    for match in DOLLARS.finditer(text):
        math.append(_squash(match[1] or match[2]))
    return DOLLARS.sub(" ", text)


def site_content(site):
    """{page path: Content} of every page of a built site."""
    return {
        page: content(file.read_text(encoding="utf-8"), page)
        for page, file in pages(site).items()
    }


def _first_difference(a, b):
    """A short description of where two strings first differ."""
    at = next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y),
        min(len(a), len(b)),
    )
    return f"at {at}: {a[max(0, at - 40) : at + 40]!r} != " + repr(
        b[max(0, at - 40) : at + 40]
    )


def differences(left, right, names=("mkdocs", "zensical")):
    """Every difference between two {page: Content}, as readable lines."""
    found = []
    for page in sorted(set(left) ^ set(right)):
        where = names[0] if page in left else names[1]
        found.append(f"{page or '/'}: only in the {where} build")
    for page in sorted(set(left) & set(right)):
        a, b = left[page], right[page]
        for part in ("numbers", "code", "figures", "math", "downloads"):
            x, y = getattr(a, part), getattr(b, part)
            if part == "downloads":  # the same file name, anywhere
                x, y = ([p.rsplit("/", 1)[-1] for p in v] for v in (x, y))
            if x != y:
                extra = [v for v in x if v not in y][:3]
                missing = [v for v in y if v not in x][:3]
                found.append(
                    f"{page or '/'}: {part} differ ({len(x)} vs {len(y)}; "
                    f"only {names[0]}: {extra}; only {names[1]}: {missing})"
                )
        if a.text != b.text:
            found.append(
                f"{page or '/'}: text differs "
                + _first_difference(a.text, b.text)
            )
    return found
