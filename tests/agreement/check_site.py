"""The built site: fresh, no template leftovers, only included code."""

import re
from html.parser import HTMLParser
from pathlib import Path

from .pages import (
    DATA,
    DOCS,
    LITERAL_BLOCKS,
    Problem,
    blank,
    fences,
    included_text,
    includes,
    markdown_sources,
    page_paths,
    read_lines,
    rel,
)

# ---------------------------------------------------------- built HTML


def site_page(root, page):
    """site/ HTML of docs/<page>.md (directory URLs, MkDocs' default)."""
    stem = page[len(DOCS) + 1:].removesuffix(".md")
    site = Path(root) / "site"
    if stem == "index":
        return site / "index.html"
    if stem.endswith("/index"):
        return site / stem / "index.html"
    pretty, flat = site / stem / "index.html", site / f"{stem}.html"
    return flat if flat.is_file() and not pretty.is_file() else pretty


class _Text(HTMLParser):
    """Visible text of an HTML page, with line numbers, outside code.

    Text inside <pre>, <code>, <script> and <style> is skipped; text in
    arithmatex math (raw TeX until KaTeX runs in the browser) is kept and
    flagged, since TeX may use braces and backslashes freely."""

    SKIP = {"pre", "code", "script", "style", "textarea"}
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input",
            "link", "meta", "source", "track", "wbr"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack, self.chunks = [], []

    def handle_starttag(self, tag, attrs):
        if tag in self.VOID:
            return
        classes = (dict(attrs).get("class") or "").split()
        self.stack.append((tag, "arithmatex" in classes))

    def handle_startendtag(self, tag, attrs):
        pass

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i][0] == tag:
                del self.stack[i:]
                break

    def handle_data(self, data):
        if any(tag in self.SKIP for tag, _ in self.stack):
            return
        math_ = any(is_math for _, is_math in self.stack)
        self.chunks.append((self.getpos()[0], data, math_))


def html_text(path):
    parser = _Text()
    parser.feed(Path(path).read_text(encoding="utf-8"))
    parser.close()
    return parser.chunks


# Template syntax left by an unrendered placeholder or block, and snippet
# markers left by an include that did not run. In math only the ones TeX
# never needs are errors.
LEFTOVERS = ("<<", ">>", "<%", "%>", "<#", "#>", "{{", "}}", "{%", "%}",
             "--8<--")
MATH_LEFTOVERS = ("<<", ">>", "<%", "%>", "--8<--")
# TeX the notebook (and any text outside arithmatex) carries as typed.
RE_TEX = re.compile(r"(?s)\$\$.+?\$\$|\$[^$\n]+\$|\\\(.+?\\\)|\\\[.+?\\\]")


def check_site_fresh(root):
    """site/ was built after the pages, the data and the included files
    changed; otherwise the HTML checks would read an old site."""
    root = Path(root)
    problems = []
    for page in page_paths(root):
        built = site_page(root, page)
        if not built.is_file():
            problems.append(Problem(
                page, 0,
                f"{rel(root, built)} is missing: run `make site`, and "
                "list the page in mkdocs.yml's nav"))
            continue
        inputs = [root / page]
        inputs += [root / i.path for i in includes(
            read_lines(root, page), page) if (root / i.path).is_file()]
        inputs += sorted((root / DATA).glob("*.json"))
        newest = max(inputs, key=lambda p: p.stat().st_mtime)
        if newest.stat().st_mtime > built.stat().st_mtime:
            problems.append(Problem(
                page, 0,
                f"{rel(root, built)} is older than {rel(root, newest)}: "
                "run `make site` before the tests that read site/"))
    return problems


def check_site_html(root):
    """No template syntax or snippet marker survives into the HTML."""
    root = Path(root)
    site = root / "site"
    problems = []
    pages = {rel(root, site_page(root, p)): p for p in page_paths(root)}
    for path in sorted(site.rglob("*.html")):
        relative = rel(root, path)
        origin = pages.get(relative)
        for number, text, in_math in html_text(path):
            bad = MATH_LEFTOVERS if in_math else LEFTOVERS
            outside_tex = blank(text, RE_TEX)
            for token in bad:
                found = text if token in MATH_LEFTOVERS else outside_tex
                index = found.find(token)
                if index < 0:
                    continue
                around = " ".join(text[max(0, index - 30):index + 40]
                                  .split())
                fix = (f"check the placeholders and includes of {origin}"
                       if origin else "check the page it was built from")
                problems.append(Problem(
                    relative, number,
                    f"'{token}' left in the rendered text (\"{around}\"): "
                    f"a placeholder or include did not render; {fix}, or "
                    "put literal syntax in `code`"))
    return problems


class _Pre(HTMLParser):
    """The text of each <pre> block of an HTML page, with its line."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.blocks, self.depth = [], 0

    def handle_starttag(self, tag, attrs):
        if tag == "pre":
            if self.depth == 0:
                self.blocks.append((self.getpos()[0], []))
            self.depth += 1

    def handle_endtag(self, tag):
        if tag == "pre" and self.depth:
            self.depth -= 1

    def handle_data(self, data):
        if self.depth:
            self.blocks[-1][1].append(data)


def pre_blocks(path):
    parser = _Pre()
    parser.feed(Path(path).read_text(encoding="utf-8"))
    parser.close()
    return [(line, "".join(parts)) for line, parts in parser.blocks]


def _unescape_snippet(line):
    return re.sub(r"^(\s*(?:#\s*)?);(-+8<-+)", r"\1\2", line)


def shown_code_lines(root, page):
    """Stripped lines a page may show in a code block: those of the
    sections and files it includes, and of its allowed literal blocks
    (in the page and in the Markdown files it includes)."""
    root = Path(root)
    allowed = set()
    for source in markdown_sources(root, [page]):
        lines = read_lines(root, source)
        literal = LITERAL_BLOCKS.get(source, set())
        for fence in fences(lines, source):
            if fence.lang in literal:
                allowed.update(_unescape_snippet(t).strip()
                               for _, t in fence.body)
        for inc in includes(lines, source):
            if (inc.escaped or not (root / inc.path).is_file()
                    or (inc.path.endswith(".md") and inc.section is None)):
                continue  # a whole Markdown file: a source of its own
            allowed.update(t.strip() for t in included_text(root, inc))
    return allowed


def check_site_code(root):
    """Every line of every code block on a built page comes from an
    included section or an allowed literal block: catches code that
    reached the HTML another way (an indented block, raw <pre>)."""
    root = Path(root)
    problems = []
    for page in page_paths(root):
        built = site_page(root, page)
        if not built.is_file():
            continue  # check_site_fresh reports it
        allowed = shown_code_lines(root, page)
        source = (root / page).read_text(encoding="utf-8").splitlines()
        for html_line, text in pre_blocks(built):
            stray = [t.strip() for t in text.splitlines()
                     if t.strip() and t.strip() not in allowed]
            if not stray:
                continue
            line = next((n for n, t in enumerate(source, 1)
                         if stray[0] in t), 0)
            problems.append(Problem(
                page, line,
                f"the code block at {rel(root, built)}:{html_line} shows "
                f"'{stray[0][:60]}', which no included section holds; "
                "typed code (an indented block or raw <pre> too) goes "
                "stale: move it into a named section of a tested file "
                "and include it with --8<-- \"file.py:name\""))
    return problems
