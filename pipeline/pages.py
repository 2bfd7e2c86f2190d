"""Which pages exist, what they show and what their notebooks carry.

Every page ``docs/<name>.md`` that includes an ``mha_ref`` section
(``--8<-- "mha_ref/file.py:section"``) or has a page script
``scripts/<name>.py`` gets a notebook. Its recipe is plain data: the
page's title and URL, its sections in page order under their headings,
its script, and the files the notebook carries: ``mha_ref/__init__.py``,
the files the sections come from, every ``mha_ref`` module the script
or those files import (followed import by import), ``glue.py`` and any
repository file the script names by path. That list is also the page's
dependencies: nothing is declared by hand. Generation hashes the recipe
into the page's key, so editing the prose of a page does not rerun its
notebook, but moving, adding or removing a section does.

Two mistakes are found here, before anything runs, each as one
``Problem`` (file, line, what to do): an include of a section its file
lacks (with the nearest names that exist) and a file that does not
parse.
"""

import ast
import difflib
import functools
import re
from dataclasses import dataclass
from pathlib import Path

from pipeline import config, memo

# --8<-- "mha_ref/numpy_ref.py:attention", at any indentation
INCLUDE = re.compile(
    r'^(?P<indent>\s*)--8<--\s+"(?P<file>mha_ref/[\w/]+\.py)'
    r':(?P<section>[a-z][-_0-9a-z]*)"\s*$'
)
# any include, of any file, with or without a section (the page linter)
ANY_INCLUDE = re.compile(
    r'^[ \t]*-{1,}8<-{1,}[ \t]+"(?P<path>[^":]+)(?::(?P<name>[^"]+))?"',
    re.M,
)
SECTION = re.compile(r"# --8<-- \[start:([a-z][-_0-9a-z]*)\]")
HEADING = re.compile(r"^(#{1,3})\s+(.*?)\s*(\{[^}]*\})?\s*$")
TAB = re.compile(r'^===\+?\s+"(.+)"\s*$')
FENCE = re.compile(r"^\s*(```|~~~)")
ANSWER = re.compile(r"^\s*\?\?\?\+?\s+success\b")  # an answer's box


@dataclass(frozen=True, order=True)
class Problem:
    """A contributor's mistake, where it is: one line, no traceback."""

    path: str
    line: int
    message: str

    def __str__(self):
        return f"{self.path}:{self.line}: {self.message}"


def pages(root):
    """docs/**/*.md but the generated ones: (relative path, text)."""
    docs = Path(root) / config.DOCS
    for path in sorted(docs.rglob("*.md")):
        relative = path.relative_to(root).as_posix()
        if not relative.startswith(f"{config.GENERATED}/"):
            yield relative, path.read_text(encoding="utf-8")


def line_of(text, index):
    return text.count("\n", 0, index) + 1


# ----------------------------------------------------------- the pages


def page_scripts(root):
    """{page name: script path} for every ``scripts/<page>.py``."""
    root = Path(root)
    scripts = sorted((root / config.SCRIPTS).glob("*.py"))
    return {p.stem: p for p in scripts if p.name != Path(config.GLUE).name}


def orphan_scripts(root):
    """Page scripts without a page of their name: their numbers would
    have nowhere to go (generation refuses them, and runs the rest)."""
    root = Path(root)
    names = {p.stem for p in (root / config.DOCS).glob("*.md")}
    return sorted(n for n in page_scripts(root) if n not in names)


def page_notebooks(root):
    """{name: recipe} for each page with code or a page script."""
    root = Path(root)
    scripts = page_scripts(root)
    recipes = {}
    for page in sorted((root / config.DOCS).glob("*.md")):
        blocks, title = page_blocks(page.read_text(encoding="utf-8"))
        script = scripts.get(page.stem)
        if blocks or script:
            url = "" if page.stem == "index" else f"{page.stem}/"
            recipes[page.stem] = {
                "page": f"{config.DOCS}/{page.name}",
                "url": config.site_url() + url,
                "title": title or page.stem,
                "blocks": blocks,
                "script": script and script.relative_to(root).as_posix(),
            }
    for recipe in recipes.values():
        recipe["files"] = carried_files(root, recipe)
    return recipes


def without_front_matter(markdown):
    """The page after its YAML front matter, whose comments (``# ...``)
    would read as headings: the title is the page's first ``# `` line."""
    if not markdown.startswith("---\n"):
        return markdown
    end = markdown.find("\n---\n", 3)
    return markdown if end < 0 else markdown[end + len("\n---\n") :]


def page_blocks(markdown):
    """The page's title and its mha_ref includes, in page order.

    Each include is {"heading", "tab", "file", "section"}: the heading
    above it, and the tab label it sits in ("NumPy"), if any. A section
    shown as an answer (inside a ``??? success`` box: an exercise's
    answer, a solution) is left out: the notebook is where the reader
    works it out.
    """
    title, heading, tab, fenced = None, None, None, False
    blocks, answer = [], None  # answer: the indent of an open answer box
    for line in without_front_matter(markdown).splitlines():
        indent = len(line) - len(line.lstrip())
        if answer is not None and line.strip() and indent <= answer:
            answer = None  # the box ended
        match = INCLUDE.match(line)
        if match:
            indented = len(match["indent"]) > 0
            if answer is None:
                blocks.append(
                    {
                        "heading": heading,
                        "tab": tab if indented else None,
                        "file": match["file"],
                        "section": match["section"],
                    }
                )
            continue
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            continue
        if ANSWER.match(line):
            answer = indent
            continue
        match = HEADING.match(line)
        if match:
            if len(match[1]) == 1:
                title = title or match[2]
            else:
                heading, tab = match[2], None
            continue
        match = TAB.match(line)
        if match:
            tab = match[1]
    return blocks, title


def sections(source):
    """{name: text} of the named sections of an mha_ref file (a section
    inside another too)."""
    found = {}
    for start in SECTION.finditer(source):
        end = source.find(f"# --8<-- [end:{start[1]}]", start.end())
        found[start[1]] = source[start.end() : end if end >= 0 else None]
    return found


def edited_sections(before, after):
    """The names of the sections whose text an edit changed (added and
    removed ones too): what the pages that show them now show."""
    old, new = sections(before), sections(after)
    return {n for n in old.keys() | new.keys() if old.get(n) != new.get(n)}


def pages_showing(recipes, file, names):
    """The pages whose recipe includes one of the sections ``names`` of
    ``file`` (a path such as mha_ref/numpy_ref.py)."""
    return {
        page
        for page, recipe in recipes.items()
        if any(
            b["file"] == file and b["section"] in names
            for b in recipe["blocks"]
        )
    }


# ------------------------------------------------- what a notebook carries


@functools.cache  # each page re-reads the same files: parse each once
def _nodes(source):
    """Every node of a Python source (the imports and the named files
    both read a page's script)."""
    return tuple(ast.walk(config.parse_python(source)))


GUARDS = "guards"  # mha_ref/guards/: one door per public function


@functools.cache
def _mha_imports(source, package=config.MHA_REF):
    """The mha_ref modules a Python source (or a notebook) imports."""
    kind = f"imports of {package}"
    return frozenset(
        memo.fact(kind, source, lambda s: sorted(_find_imports(s, package)))
    )


def top_level_imports(source):
    """The top-level packages a Python source imports, anywhere in it
    (``torch`` for ``from torch.nn import functional``); none if it does
    not parse (its page fails on it, and says where)."""

    def find(text):
        try:
            nodes = _nodes(text)
        except SyntaxError:
            return []
        found = set()
        for node in nodes:
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                found.add(node.module.split(".")[0])
        return sorted(found)

    return memo.fact("top-level imports", source, find)


def _find_imports(source, package):
    found = set()
    try:
        nodes = _nodes(source)
    except SyntaxError:  # a notebook script with magics: read it by lines
        pattern = re.compile(
            r"^\s*(?:from\s+mha_ref(?:\.(\w+))?\s+import\s+\(?([\w,\s]+)"
            r"|import\s+mha_ref\.(\w+))",
            re.M,
        )
        for m in pattern.finditer(source):
            if m[1] or m[3]:
                found.add(m[1] or m[3])
            else:
                found.update(n.strip() for n in m[2].split(",") if n.strip())
        return frozenset(found)
    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 1 or module == package:  # from . / mha_ref
                if module and node.level == 1:
                    found.add(module.split(".")[0])
                else:
                    found.update(a.name for a in node.names)
            elif module == f"{package}.{GUARDS}":  # guards/<module>.py
                found.update(f"{GUARDS}/{a.name}" for a in node.names)
                found.add(f"{GUARDS}/__init__")
            elif module.startswith(f"{package}.{GUARDS}."):
                found.add(f"{GUARDS}/{module.split('.')[2]}")
                found.add(f"{GUARDS}/__init__")
            elif module.startswith(package + "."):
                found.add(module.split(".")[1])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(package + "."):
                    found.add(alias.name.split(".")[1])
    return frozenset(found)


def carried_files(root, recipe):
    """mha_ref/__init__.py, the sections' files, and what they import."""
    root = Path(root)
    todo = {Path(b["file"]).stem for b in recipe["blocks"]}
    if recipe.get("script"):
        todo |= _mha_imports((root / recipe["script"]).read_text("utf-8"))
    seen = set()
    while todo:
        name = todo.pop()
        path = root / config.MHA_REF / f"{name}.py"
        if name in seen or not path.is_file():
            continue  # a name imported from a module, not a module
        seen.add(name)
        todo |= _mha_imports(path.read_text("utf-8")) - seen
    modules = [f"{config.MHA_REF}/{n}.py" for n in sorted(seen)]
    files = [config.INIT, *modules] if modules else []
    if recipe.get("script"):
        script = (root / recipe["script"]).read_text("utf-8")
        files += [config.GLUE, *_named_files(root, script)]
    return files


def _named_files(root, source):
    """Repository files a script names by a string literal of their path
    (the committed benchmark report, say): carried with the notebook."""
    found = set()
    for value in memo.fact("path-like strings", source, _path_like):
        path = Path(root, value)
        if path.is_file() and not value.startswith("mha_ref/"):
            found.add(value)
    return sorted(found)


def _path_like(source):
    """The string literals of a source that could be a file's path."""
    try:
        nodes = _nodes(source)
    except SyntaxError:  # syntax_problems names it
        return []
    return sorted(
        {
            node.value
            for node in nodes
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and "/" in node.value
            and len(node.value) < 200
        }
    )


# ---------------------------------------------- mistakes found beforehand


def include_problems(root):
    """Each include whose file or section does not exist, with the
    nearest section names that do."""
    problems = []
    for page, text in pages(root):
        for match in ANY_INCLUDE.finditer(text):
            path, name = match["path"], match["name"]
            where = Path(root) / path
            line = line_of(text, match.start())
            if not where.is_file():
                if not path.startswith(f"{config.GENERATED}/"):  # later
                    problems.append(Problem(page, line, f"{path}: no file"))
                continue
            source = where.read_text(encoding="utf-8")
            if name and f"[start:{name}]" not in source:
                names = SECTION.findall(source)
                message = f"{path} has no section {name!r}: "
                message += near_names(name, names)
                problems.append(Problem(page, line, message))
    return problems


def near_names(name, names):
    """'did you mean a? (its sections: a, b)': the nearest names first."""
    near = difflib.get_close_matches(name, names, n=3)
    hint = f"did you mean {', '.join(near)}? " if near else ""
    return f"{hint}(its sections: {', '.join(names) or 'none'})"


def syntax_problems(root, files):
    """Each of ``files`` (relative .py paths) that Python cannot parse."""
    problems = []
    for relative in sorted(set(files)):
        path = Path(root) / relative
        if path.suffix != ".py" or not path.is_file():
            continue
        found = _syntax_error(path.read_bytes(), relative)
        if found:
            problems.append(Problem(relative, *found))
    return problems


@functools.cache  # every page carries numpy_ref: compile each text once
def _syntax_error(source, relative):
    """(line, message) of the first syntax error of ``source``, or None
    (a text that compiled in an earlier run is not compiled again)."""

    def first_error(text):
        try:
            compile(text, relative, "exec", dont_inherit=True)
        except SyntaxError as exc:
            return [exc.lineno or 0, f"{type(exc).__name__}: {exc.msg}"]
        return None

    found = memo.fact("syntax error", source, first_error)
    return tuple(found) if found else None
