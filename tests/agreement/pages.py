"""Where the agreement checks look: pages, includes, sections, fences.

The parsers here mirror what pymdownx.snippets and Markdown do, closely
enough to point at the line a contributor must change.
"""

import re
from dataclasses import dataclass
from pathlib import Path

# ------------------------------------------------------------------ report


@dataclass(frozen=True, order=True)
class Problem:
    path: str  # relative to the repository root, with "/"
    line: int  # 1-based; 0 when the problem concerns the whole file
    message: str

    def __str__(self):
        return f"{self.path}:{self.line}: {self.message}"


def report(problems):
    """The problems one per line, for an assertion message."""
    return "\n".join(str(p) for p in sorted(problems))


# ------------------------------------------------------------------ layout

DOCS = "docs"
GENERATED = "docs/generated/"
DATA = "docs/generated/data"
# Paths a page may never include code from: build outputs, not tracked
# files (they mirror .gitignore). docs/generated/ holds tables, which a
# page includes whole; their existence is checked by the strict build.
UNTRACKED = ("site/", ".venv/", "build/", ".cache/", "node_modules/")
# Files whose snippet sections must each be shown by some page.
SECTION_GLOBS = ("mha_ref/*.py", "scripts/**/*.py")

# Fenced blocks a page may type instead of include, because they are not
# package code: the shell commands a reader runs (checked against the
# Makefile's targets), and in the contributing guide the Markdown and
# marker syntax it teaches. Keep this list short; everything else on a
# page must be a --8<-- include of a named section of a tested file.
LITERAL_BLOCKS = {
    "docs/about.md": {"sh", "bash", "console"},
    "docs/contributing.md": {"sh", "bash", "console"},
    "CONTRIBUTING.md": {"sh", "bash", "console", "text", "markdown"},
}
SHELL = {"sh", "bash", "console", "shell"}


def rel(root, path):
    return Path(path).relative_to(root).as_posix()


def page_paths(root):
    """docs/**/*.md except docs/generated/, relative, sorted."""
    root = Path(root)
    pages = []
    for path in sorted((root / DOCS).rglob("*.md")):
        relative = rel(root, path)
        if not relative.startswith(GENERATED):
            pages.append(relative)
    return pages


def markdown_sources(root, pages=None):
    """The pages (all of them, or those given) plus the Markdown files
    they include whole, like CONTRIBUTING.md: everything whose text ends
    up on a page."""
    root = Path(root)
    sources = []
    queue = list(page_paths(root) if pages is None else pages)
    while queue:
        source = queue.pop(0)
        if source in sources:
            continue
        sources.append(source)
        for inc in includes(read_lines(root, source), source):
            path = inc.path
            if (path.endswith(".md") and not path.startswith(GENERATED)
                    and inc.section is None and not inc.escaped
                    and (root / path).is_file()):
                queue.append(path)
    return sources


def read_lines(root, relative):
    return (Path(root) / relative).read_text(encoding="utf-8").splitlines()


# ---------------------------------------------------------- snippet syntax

# These mirror pymdownx.snippets (13.x): an include is a line holding only
# the marker and a quoted path; a section marker anywhere on a line makes
# snippets drop that whole line. A leading ";" escapes either.
RE_INCLUDE = re.compile(
    r"^(?P<space>[ \t]*)(?P<escape>;*)-+8<-+[ \t]+"
    r"(?P<quote>[\"'])(?P<target>.+?)(?P=quote)$"
)
RE_BLOCK_MARKER = re.compile(r"^[ \t]*(?P<escape>;*)-+8<-+$")
RE_MARKER = re.compile(
    r"(?i)^(?P<pre>.*?)(?<!;)(?P<escape>;*)-+8<-+[ \t]+"
    r"\[[ \t]*(?P<kind>start|end)[ \t]*:[ \t]*"
    r"(?P<name>[a-z][-_0-9a-z]*)[ \t]*\]"
)
# Anything that looks like a marker, to catch names snippets would ignore.
RE_LOOSE_MARKER = re.compile(r"-+8<-+\s*\[\s*(start|end)\s*:\s*([^\]]*)\]")
RE_SECTION_SUFFIX = re.compile(r"(?i):(?P<name>[a-z][-_0-9a-z]*)$")
RE_LINES_SUFFIX = re.compile(r":-?[0-9]*(?::-?[0-9]*)?(?:,[-0-9:]*)*$")
RE_NAME = re.compile(r"(?i)[a-z][-_0-9a-z]*")


@dataclass(frozen=True)
class Include:
    source: str  # the Markdown file holding the include line
    line: int
    path: str  # the included file, relative to the repository root
    section: str | None
    line_range: str | None  # e.g. ":3:9"; named sections are the rule
    escaped: bool


def split_target(target):
    """'file.py:name' -> ('file.py', 'name', None); ':3:5' -> range."""
    target = target.strip()
    m = RE_SECTION_SUFFIX.search(target)
    if m and m.start() > 0:
        return target[: m.start()], m["name"], None
    m = RE_LINES_SUFFIX.search(target)
    if m and m.start() > 0 and any(c.isdigit() for c in m.group()):
        return target[: m.start()], None, m.group()
    return target, None, None


def includes(lines, source, first_line=1):
    """Every include in ``lines`` (inline and block form)."""
    found, block = [], False
    for number, line in enumerate(lines, first_line):
        m = RE_BLOCK_MARKER.match(line)
        if m:
            if not m["escape"]:
                block = not block
            continue
        if block:
            target = line.strip()
            if target and not target.startswith(";"):
                path, section, span = split_target(target)
                found.append(Include(source, number, path, section, span,
                                     False))
            continue
        m = RE_INCLUDE.match(line)
        if m:
            path, section, span = split_target(m["target"])
            found.append(Include(source, number, path, section, span,
                                 bool(m["escape"])))
    return found


@dataclass
class Section:
    name: str
    start: int  # line of the start marker
    end: int  # line of the end marker
    body: list  # the lines between, markers of other sections removed


def parse_sections(lines, path):
    """{name: Section} of a code file, and the pairing problems."""
    sections, problems, open_ = {}, [], {}
    for number, line in enumerate(lines, 1):
        loose = RE_LOOSE_MARKER.search(line)
        m = RE_MARKER.match(line)
        if loose and not m:
            problems.append(Problem(
                path, number,
                f"section marker with an invalid name {loose[2]!r}: "
                "names match [a-z][-_0-9a-z]*, and pymdownx.snippets "
                "ignores this line; rename it"))
            continue
        if not m or m["escape"]:
            for section in open_.values():
                section.body.append(line)
            continue
        name = m["name"]
        if m["kind"].lower() == "start":
            if name in open_:
                problems.append(Problem(
                    path, number,
                    f"second start of section '{name}' (first at line "
                    f"{open_[name].start}) before its end; add "
                    f"'# --8<-- [end:{name}]' or remove one start"))
                continue
            if name in sections:
                problems.append(Problem(
                    path, number,
                    f"section '{name}' is defined twice (also at line "
                    f"{sections[name].start}); snippets shows only the "
                    "first: rename one"))
                continue
            open_[name] = Section(name, number, 0, [])
        else:
            section = open_.pop(name, None)
            if section is None:
                problems.append(Problem(
                    path, number,
                    f"end of section '{name}' without a start above it; "
                    f"add '# --8<-- [start:{name}]' or remove this line"))
                continue
            section.end = number
            sections[name] = section
    for section in open_.values():
        problems.append(Problem(
            path, section.start,
            f"section '{section.name}' is never closed; add "
            f"'# --8<-- [end:{section.name}]' after its last line"))
    return sections, problems


# ------------------------------------------------------------ fenced code

RE_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})"
                      r"[ \t]*(?P<info>[^`]*?)[ \t]*$")


@dataclass
class Fence:
    source: str
    line: int  # the opening fence
    indent: str
    info: str
    body: list  # (line number, text)

    @property
    def lang(self):
        """'python' from 'python', '{.python .x}' or 'py title="a"'."""
        word = self.info.split()[0] if self.info.split() else ""
        return word.strip("{}").lstrip(".").lower()


def fences(lines, source):
    """The fenced code blocks of a Markdown file, at any indentation
    (content tabs and admonitions indent theirs by four spaces)."""
    found, current, closing = [], None, None
    for number, line in enumerate(lines, 1):
        if current is None:
            m = RE_FENCE.match(line)
            if m:
                current = Fence(source, number, m["indent"], m["info"], [])
                closing = m["fence"]
            continue
        stripped = line.strip()
        if (stripped and set(stripped) == {closing[0]}
                and len(stripped) >= len(closing)):
            found.append(current)
            current = None
            continue
        current.body.append((number, line))
    if current is not None:
        found.append(current)  # unclosed: runs to the end, as in Markdown
    return found


def blank(text, *patterns):
    """``text`` with every match of each pattern, in turn, replaced by
    spaces (line breaks kept, so offsets and line numbers stay put)."""
    for pattern in patterns:
        text = pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group()),
                           text)
    return text


def line_of(text, offset):
    return text.count("\n", 0, offset) + 1


# ------------------------------------------------------------- doctests

RE_PROMPT = re.compile(r"^\s*>>> ", re.M)
RE_TRIPLE = re.compile(r"(?s)(\"\"\"|\'\'\')(.*?)\1")


def included_text(root, inc):
    """The lines an include puts on the page (a section or whole file)."""
    lines = read_lines(root, inc.path)
    if inc.section is None:
        return lines
    sections, _ = parse_sections(lines, inc.path)
    section = sections.get(inc.section)
    return [] if section is None else section.body


def page_examples(root):
    """(include, module name, text) for every included section that
    shows a >>> example on a page."""
    root = Path(root)
    found = []
    for source in markdown_sources(root):
        lines = read_lines(root, source)
        for fence in fences(lines, source):
            for inc in includes([t for _, t in fence.body], source,
                                fence.line + 1):
                if inc.escaped or not inc.path.endswith(".py"):
                    continue
                if not (root / inc.path).is_file():
                    continue
                text = "\n".join(included_text(root, inc))
                if RE_PROMPT.search(text):
                    module = inc.path.removesuffix(".py").replace("/", ".")
                    found.append((inc, module, text))
    return found
