"""Typeset the math of a built site with the vendored KaTeX.

Run by ``python -m pipeline.postbuild SITE`` after either engine.

pymdownx.arithmatex (generic mode) leaves one formula per element:
``<span class="arithmatex">\\(...\\)</span>`` inline and
``<div class="arithmatex">\\[...\\]</div>`` for display math. This step
replaces each by KaTeX's HTML and MathML (for screen readers), so the
first paint already shows the math and these pages load no KaTeX
JavaScript. It reads only the built HTML, so it runs after either
engine (MkDocs or Zensical). KaTeX runs in an embedded V8 (the PyPI
package mini-racer): no Node.js needed. Typesetting is deterministic,
and a page already typeset is left as it is.

A formula KaTeX cannot parse stops the step, naming page and formula.
"""

import hashlib
import html
import json
import re
from pathlib import Path

from pipeline import config

KATEX = config.ROOT / config.DOCS / "assets/katex/katex.min.js"
# Formulas typeset by earlier builds (keyed by KaTeX's own bytes): the
# post-build step, the server's and the page linter share it.
FORMULA_CACHE = config.ROOT / config.CACHE / "katex-formulas.json"
FORMULA = re.compile(
    r'<(?P<tag>span|div) class="arithmatex">'
    r"\s*\\(?P<open>[(\[])(?P<tex>.*?)\\[)\]]\s*</(?P=tag)>",
    re.S,
)
# A notebook page (mkdocs-jupyter) keeps Jupyter's delimiters in the text
# of its Markdown cells and LaTeX outputs (KaTeX auto-render's, in
# docs/assets/javascripts/katex.js); code, pre and script are skipped.
CELL = re.compile(
    r'<div class="[^"]*\bjp-Rendered(?:Markdown|Latex)\b[^"]*"[^>]*>'
)
TAG = re.compile(
    r"<!--.*?-->|<(?P<close>/?)(?P<name>[a-zA-Z][\w-]*)[^>]*>", re.S
)
SKIP = {"code", "pre", "script", "style", "svg", "math", "textarea"}
NOTEBOOK_TEX = re.compile(
    r"\$\$(?P<d1>.+?)\$\$|\\\[(?P<d2>.+?)\\\]"
    r"|\\\((?P<i1>.+?)\\\)|(?<![\\$])\$(?P<i2>[^$]+?)(?<!\\)\$",
    re.S,
)
# The options docs/assets/javascripts/katex.js uses in the browser, but
# a parse error raises here instead of painting red text.
OPTIONS = {"throwOnError": True, "output": "htmlAndMathml"}


# The KaTeX fonts nearly every formula uses, preloaded on the pages with
# math: they then arrive with the page, before its first paint, instead of
# when the CSS first asks for them, which reflows the lines around the
# math (katex.min.css uses font-display: block).
PRELOAD_FONTS = ["KaTeX_Main-Regular.woff2", "KaTeX_Math-Italic.woff2"]
PRELOAD = (
    '<link rel="preload" href="{root}assets/katex/fonts/{font}" as="font" '
    'type="font/woff2" crossorigin>'
)


class MathError(ValueError):
    """A formula KaTeX cannot parse; the message names page and formula."""


class Typesetter:
    """KaTeX's renderToString in an embedded V8, started on first need.

    With ``cache`` (a JSON file), formulas typeset by an earlier run of
    the same KaTeX are reused, so a prose edit rebuilds without V8.
    """

    def __init__(self, katex=KATEX, cache=None):
        self.katex = Path(katex)
        self.js = None
        self.rendered = 0  # formulas typeset so far
        self.cache = Path(cache) if cache else None
        self.version = hashlib.sha256(self.katex.read_bytes()).hexdigest()
        self.known, self.new = {}, False
        if self.cache and self.cache.is_file():
            stored = json.loads(self.cache.read_text(encoding="utf-8"))
            if stored.get("katex") == self.version:
                self.known = stored["formulas"]

    def render(self, tex, display):
        """KaTeX's HTML for one formula; MathError if it cannot parse."""
        key = f"{'display' if display else 'inline'}:{tex}"
        self.rendered += 1
        if key in self.known:
            return self.known[key]
        if self.js is None:
            from py_mini_racer import MiniRacer

            self.js = MiniRacer()
            self.js.eval(self.katex.read_text(encoding="utf-8"))
        options = {**OPTIONS, "displayMode": display}
        try:
            out = self.js.call("katex.renderToString", tex, options)
        except Exception as exc:  # KaTeX's ParseError, through V8
            self.rendered -= 1
            message = str(exc).strip().splitlines()[0]
            message = re.sub(r"^<anonymous>:\d+:\s*", "", message)
            raise MathError(message) from exc
        self.known[key], self.new = out, True
        return out

    def save(self):
        """Write the formulas typeset so far to the cache, if any is new."""
        if self.cache and self.new:
            self.cache.parent.mkdir(parents=True, exist_ok=True)
            stored = {"katex": self.version, "formulas": self.known}
            self.cache.write_text(json.dumps(stored), encoding="utf-8")
            self.new = False

    def page(self, text, name="page"):
        """The page's HTML with every formula typeset (notebooks too)."""
        errors = []

        def typeset(match):
            tex = html.unescape(match["tex"]).strip()
            try:
                body = self.render(tex, display=match["open"] == "[")
            except MathError as exc:
                errors.append(f"{name}: KaTeX cannot parse {tex!r}: {exc}")
                return match[0]
            tag = match["tag"]
            return f'<{tag} class="arithmatex">{body}</{tag}>'

        def typeset_tex(match):
            display = match["d1"] or match["d2"]
            tex = html.unescape(display or match["i1"] or match["i2"])
            try:
                return self.render(tex.strip(), display=bool(display))
            except MathError as exc:
                errors.append(
                    f"{name}: KaTeX cannot parse {tex.strip()!r}: {exc}"
                )
                return match[0]

        out = FORMULA.sub(typeset, text)
        if CELL.search(out):
            out = notebook_math(
                out, lambda t: NOTEBOOK_TEX.sub(typeset_tex, t)
            )
        if errors:
            raise MathError("\n".join(errors))
        return out


def notebook_math(text, typeset):
    """``typeset(text)`` applied to the prose of every notebook cell.

    A cell runs from its opening div to the matching close; inside it,
    text in code, pre, script, style, svg or math is left alone.
    """
    out, done = [], 0
    for cell in CELL.finditer(text):
        if cell.start() < done:
            continue  # nested in a cell already handled
        out.append(text[done : cell.end()])
        depth, skip, at = 1, 0, cell.end()
        for tag in TAG.finditer(text, cell.end()):
            piece = text[at : tag.start()]
            out.append(piece if skip else typeset(piece))
            out.append(tag[0])
            at = tag.end()
            name = (tag["name"] or "").lower()
            step = -1 if tag["close"] else 1
            if name == "div":
                depth += step
            elif name in SKIP and not tag[0].endswith("/>"):
                skip = max(skip + step, 0)
            if depth == 0:
                break
        done = at
    out.append(text[done:])
    return "".join(out)


def typeset_site(site, typesetter=None, pages=None):
    """Typeset every HTML page under ``site`` (or those of ``pages``, a
    set of paths); return the formula count.

    Pages that parse are written even when another page fails; the
    MathError then lists every formula that failed, with its page.
    """
    typesetter = typesetter or Typesetter()
    errors, start = [], typesetter.rendered
    for path in _chosen(sorted(Path(site).rglob("*.html")), pages):
        text = path.read_text(encoding="utf-8")
        relative = path.relative_to(site)
        try:
            new = typesetter.page(text, relative.as_posix())
        except MathError as exc:
            errors.append(str(exc))
            continue
        new = preload_fonts(new, "../" * (len(relative.parts) - 1))
        if new != text:
            path.write_text(new, encoding="utf-8")
    typesetter.save()
    if errors:
        raise MathError("\n".join(errors))
    return typesetter.rendered - start


def _chosen(paths, pages):
    """``paths``, or those of them in ``pages`` (None: all)."""
    return paths if pages is None else [p for p in paths if p in pages]


def preload_fonts(text, root):
    """Preload links for the math fonts in a page that shows math.

    ``root`` is the way from the page to the site's root ("../../").
    """
    if 'class="katex"' not in text or "KaTeX_Main-Regular.woff2" in text:
        return text
    links = "".join(PRELOAD.format(root=root, font=f) for f in PRELOAD_FONTS)
    return text.replace("</head>", links + "</head>", 1)
