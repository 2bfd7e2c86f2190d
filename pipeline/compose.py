"""Compose each page's notebook: its code, then its page script.

Every page ``docs/<name>.md`` that includes an ``mha_ref`` section
(``--8<-- "mha_ref/file.py:section"``) or has a page script
``scripts/<name>.py`` gets ``notebooks/<name>.ipynb``:

1. a title and a note linking back to the page (an absolute URL from the
   site URL, so the link works on Colab and in a download);
2. one setup cell (the ``%%section`` cell magic, below), then one
   ``%%writefile`` cell per file the notebook carries: the ``mha_ref``
   files the sections come from, those the page script imports, every
   ``mha_ref`` module those import, and ``glue.py`` for a page script,
   copied verbatim. These are tagged ``carry``: the site hides them
   (mkdocs.yml), the download keeps them, so the notebook runs without
   the repository. The same list is the page's dependencies: nothing is
   declared by hand;
3. the page's sections in page order, under the page's headings, each in
   a ``%%section mha_ref/file.py name`` cell whose body is exactly what
   the page shows (pymdownx.snippets extracts it, as MkDocs does). Run
   unchanged, the cell does nothing; edited, it writes the new section
   into its file and reloads the module, so later cells use the edit;
4. the cells of the page script (jupytext percent format): the run that
   computes every number, table and figure the page shows, each named
   with ``glue`` (scripts/glue.py).

The recipe (page title, headings, sections, files) is plain data;
build.py hashes it into the page's key, so editing the prose of a page
does not rerun its notebook, but moving, adding or removing a section
does.
"""

import ast
import functools
import os
import re
from pathlib import Path

# --8<-- "mha_ref/numpy_ref.py:attention", at any indentation
INCLUDE = re.compile(
    r'^(?P<indent>\s*)--8<--\s+"(?P<file>mha_ref/[\w/]+\.py)'
    r':(?P<section>[a-z][-_0-9a-z]*)"\s*$'
)
HEADING = re.compile(r"^(#{1,3})\s+(.*?)\s*(\{[^}]*\})?\s*$")
TAB = re.compile(r'^===\+?\s+"(.+)"\s*$')
FENCE = re.compile(r"^\s*(```|~~~)")
CARRY_TAG = "carry"
SCRIPTS = "scripts"  # the page scripts, and glue.py beside them
GLUE = f"{SCRIPTS}/glue.py"
INIT = "mha_ref/__init__.py"
# The URL the site is built for (mkdocs.yml reads the same variable).
DEFAULT_SITE_URL = "http://127.0.0.1:8000/"


def site_url():
    url = os.environ.get("MHA_REF_SITE_URL") or DEFAULT_SITE_URL
    return url if url.endswith("/") else url + "/"


SETUP = '''\
# Run this cell first. It makes the folder mha_ref/ (the next cells write
# the files the page's code needs into it) and defines %%section: a cell
# that starts with "%%section FILE NAME" holds one section of FILE, as
# the page shows it. Run unchanged, it does nothing; edited, it writes
# the new section into FILE and reloads that module, so every cell after
# it uses your version.
import importlib
import sys
import textwrap
from pathlib import Path

from IPython.core.magic import register_cell_magic

Path("mha_ref").mkdir(exist_ok=True)
if "" not in sys.path and str(Path.cwd()) not in sys.path:
    sys.path.insert(0, str(Path.cwd()))


@register_cell_magic
def section(line, cell):
    """%%section FILE NAME: put this cell back into FILE, reload it."""
    path, name = line.split()
    lines = Path(path).read_text().splitlines(keepends=True)

    def where(kind):
        mark = f"# --8<-- [{kind}:{name}]"
        return [i for i, s in enumerate(lines) if s.strip() == mark]

    starts, ends = where("start"), where("end")
    if len(starts) != 1 or len(ends) != 1:
        raise ValueError(f"{path} has no single section named {name!r}")
    start, end = starts[0], ends[0]
    body = [s for s in lines[start + 1 : end] if "# --8<-- [" not in s]
    module = path[: -len(".py")].replace("/", ".")
    if textwrap.dedent("".join(body)).strip("\\n") == cell.strip("\\n"):
        importlib.import_module(module)  # as the page shows it: no change
        return
    indent = min(len(s) - len(s.lstrip()) for s in body if s.strip())
    new = textwrap.indent(cell.strip("\\n") + "\\n", " " * indent)
    lines[start + 1 : end] = [new]
    Path(path).write_text("".join(lines))
    importlib.invalidate_caches()
    module = importlib.reload(importlib.import_module(module))
    print(f"{path}: section {name!r} replaced, {module.__name__} reloaded")
'''


def orphan_scripts(root):
    """Page scripts without a page of their name: their numbers would
    have nowhere to go (the build refuses them, and runs the rest)."""
    root = Path(root)
    pages = {p.stem for p in (root / "docs").glob("*.md")}
    return sorted(n for n in page_scripts(root) if n not in pages)


def page_scripts(root):
    """{page name: script path} for every ``scripts/<page>.py``."""
    root = Path(root)
    scripts = sorted((root / SCRIPTS).glob("*.py"))
    return {p.stem: p for p in scripts if p.name != Path(GLUE).name}


def page_notebooks(root):
    """{name: recipe} for each page with code or a page script."""
    root = Path(root)
    scripts = page_scripts(root)
    recipes = {}
    for page in sorted((root / "docs").glob("*.md")):
        blocks, title = page_blocks(page.read_text(encoding="utf-8"))
        script = scripts.get(page.stem)
        if blocks or script:
            url = "" if page.stem == "index" else f"{page.stem}/"
            recipes[page.stem] = {
                "page": f"docs/{page.name}",
                "url": site_url() + url,
                "title": title or page.stem,
                "blocks": blocks,
                "script": script and script.relative_to(root).as_posix(),
            }
    for recipe in recipes.values():
        recipe["files"] = carried_files(root, recipe)
    return recipes


def page_blocks(markdown):
    """The page's title and its mha_ref includes, in page order.

    Each include is {"heading", "tab", "file", "section"}: the heading
    above it, and the tab label it sits in ("NumPy"), if any.
    """
    title, heading, tab, fenced = None, None, None, False
    blocks = []
    for line in markdown.splitlines():
        match = INCLUDE.match(line)
        if match:
            indented = len(match["indent"]) > 0
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


@functools.cache  # each page re-reads the same files: parse each once
def _nodes(source):
    """Every node of a Python source (the imports and the named files
    both read a page's script)."""
    return tuple(ast.walk(ast.parse(source)))


@functools.cache
def _mha_imports(source, package="mha_ref"):
    """The mha_ref modules a Python source (or a notebook) imports."""
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
        path = root / "mha_ref" / f"{name}.py"
        if name in seen or not path.is_file():
            continue  # a name imported from a module, not a module
        seen.add(name)
        todo |= _mha_imports(path.read_text("utf-8")) - seen
    modules = [f"mha_ref/{n}.py" for n in sorted(seen)]
    files = [INIT, *modules] if modules else []
    if recipe.get("script"):
        script = (root / recipe["script"]).read_text("utf-8")
        files += [GLUE, *_named_files(root, script)]
    return files


def _named_files(root, source):
    """Repository files a script names by a string literal of their path
    (the committed benchmark report, say): carried with the notebook."""
    found = set()
    for node in _nodes(source):
        value = getattr(node, "value", None)
        literal = isinstance(node, ast.Constant) and isinstance(value, str)
        if literal and "/" in value and len(value) < 200:
            path = Path(root, value)
            if path.is_file() and not value.startswith("mha_ref/"):
                found.add(value)
    return sorted(found)


def _snippet(root, block):
    """The section as the page shows it: pymdownx.snippets extracts it."""
    import markdown

    md = markdown.Markdown(
        extensions=["pymdownx.snippets"],
        extension_configs={
            "pymdownx.snippets": {
                "base_path": [str(root)],
                "check_paths": True,
                "dedent_subsections": True,
            }
        },
    )
    line = f'--8<-- "{block["file"]}:{block["section"]}"'
    return "\n".join(md.preprocessors["snippet"].run([line])).strip("\n")


def compose(root, name, recipe):
    """The notebook (nbformat v4, not executed) for one recipe."""
    import jupytext
    import nbformat.v4 as v4

    root = Path(root)
    cells = [v4.new_markdown_cell(_intro(recipe))]
    # the setup cell (mha_ref/, %%section) only where there is mha_ref
    sources = [SETUP.rstrip("\n")] if recipe["files"][:1] == [INIT] else []
    for path in recipe["files"]:
        text = (root / path).read_text("utf-8").rstrip("\n")
        target = Path(path).name if path == GLUE else path  # glue.py
        folder = Path(target).parent.as_posix()
        if folder not in (".", "mha_ref"):  # mha_ref/: the setup cell
            sources.append(
                f"Path({folder!r}).mkdir(parents=True, exist_ok=True)"
            )
        sources.append(f"%%writefile {target}\n{text}")
    for source in sources:  # hidden on the site, kept in the download
        cell = v4.new_code_cell(source)
        cell.metadata["tags"] = [CARRY_TAG]
        cell.metadata["jupyter"] = {"source_hidden": True}
        cells.append(cell)
    modules = [  # not glue.py, nor a named file (bench/report.json)
        Path(f).stem for f in recipe["files"][1:] if f.startswith("mha_ref/")
    ]
    if modules:
        cells.append(
            v4.new_code_cell(
                f"from mha_ref import {', '.join(modules)}  # the files above"
            )
        )
    heading, shown = None, set()
    for block in recipe["blocks"]:
        key = (block["file"], block["section"])
        if block["heading"] and block["heading"] != heading:
            heading = block["heading"]
            cells.append(v4.new_markdown_cell(f"## {heading}"))
        if key in shown:
            cells.append(
                v4.new_markdown_cell(
                    f"`{block['file']}`, section `{block['section']}`: "
                    "the cell above."
                )
            )
            continue
        shown.add(key)
        text = _snippet(root, block)
        cells.append(
            v4.new_code_cell(
                f"%%section {block['file']} {block['section']}\n{text}"
            )
        )
    if recipe.get("script"):
        script = jupytext.read(root / recipe["script"], fmt="py:percent")
        cells.extend(script.cells)
    return v4.new_notebook(cells=cells)


def _intro(recipe):
    mha = [f for f in recipe["files"] if f.startswith("mha_ref/")]
    other = [f for f in recipe["files"] if f not in mha]
    carried = [f"`{Path(f).name}`" for f in mha] + [f"`{f}`" for f in other]
    lines = [f"# Notebook: {recipe['title']}", ""]
    if recipe.get("script"):
        lines += [
            f"The code of [the page]({recipe['url']}), to run and change, "
            "and the run that computed every number, table and figure the "
            "page shows: a cell whose output starts with `glue: NAME` "
            "produced what the page shows under that name.",
            "",
        ]
    else:
        lines += [f"The code of [the page]({recipe['url']}).", ""]
    lines += [
        "It needs numpy, torch and matplotlib, nothing else: its first "
        f"cells write the files it uses ({', '.join(carried)}) next to "
        "the notebook (`mha_ref/` for the reference code; `glue.py` names "
        "what the page shows), copied from the repository when this "
        "notebook was built. The site hides those cells; the download has "
        "them. Run them first.",
    ]
    if recipe["blocks"]:
        lines += [
            "",
            "Each `%%section` cell holds one section of that code, exactly "
            "as the page shows it. Change one and run it: the change goes "
            "into its file and module, and every cell after it uses your "
            "version. Break it on purpose and rerun the rest to watch what "
            "moves.",
        ]
    return "\n".join(lines)
