"""Compose a page's notebook from its recipe (pages.py): not yet run.

1. a title and a note linking back to the page (an absolute URL from the
   site URL, so the link works on Colab and in a download);
2. the setup cell (notebook_setup.py, copied as it is: it defines the
   ``%%section`` cell magic), then one ``%%writefile`` cell per file the
   notebook carries, copied verbatim. These are tagged with the tag
   mkdocs.yml hides (``carry``): the site hides them, the download keeps
   them, so the notebook runs without the repository;
3. the page's sections in page order, under the page's headings, each in
   a ``%%section mha_ref/file.py name`` cell whose body is exactly what
   the page shows (pymdownx.snippets extracts it, as MkDocs does). Run
   unchanged, the cell does nothing; edited, it writes the new section
   into its file and reloads the module, so later cells use the edit;
4. the cells of the page script (jupytext percent format): the run that
   computes every number, table and figure the page shows, each named
   with ``glue`` (scripts/glue.py).
"""

import functools
import re
from pathlib import Path

from pipeline import config
from pipeline.kernel import number_cells

SETUP = Path(__file__).with_name("notebook_setup.py")  # the first cell


def carry_tag():
    """The tag of the cells the site hides and the download keeps."""
    return config.hidden_cell_tags()[0]


@functools.cache
def _snippets(root):
    """pymdownx.snippets as the site runs it, from ``root`` (one per
    root: a Markdown instance is made to convert many texts)."""
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
    return md.preprocessors["snippet"]


def _snippet(root, block):
    """The section as the page shows it: pymdownx.snippets extracts it."""
    line = f'--8<-- "{block["file"]}:{block["section"]}"'
    return "\n".join(_snippets(root).run([line])).strip("\n")


def _cell(cell_type, source):
    """nbformat.v4's new cell, unchecked: compose() makes a few dozen
    per page, and nbformat checked each one against the schema (a tenth
    of a second a page); the whole notebook is checked once it has run
    (generation.run_page)."""
    from nbformat import NotebookNode

    cell = NotebookNode(cell_type=cell_type, metadata=NotebookNode())
    cell.source = source
    if cell_type == "code":
        cell.execution_count, cell.outputs = None, []
    return cell


def compose(root, name, recipe):
    """The notebook (nbformat v4, not executed) for one recipe."""
    import jupytext
    import nbformat.v4 as v4

    root = Path(root)
    cells = [_cell("markdown", _intro(recipe))]
    # the setup cell (mha_ref/, %%section) only where there is mha_ref
    setup = SETUP.read_text(encoding="utf-8").rstrip("\n")
    sources = [setup] if recipe["files"][:1] == [config.INIT] else []
    made = {".", config.MHA_REF}  # mha_ref/: the setup cell makes it
    for path in recipe["files"]:
        text = (root / path).read_text("utf-8").rstrip("\n")
        target = Path(path).name if path == config.GLUE else path
        folder = Path(target).parent.as_posix()
        if folder not in made:  # once per folder (mha_ref/guards/)
            made.add(folder)
            sources.append(
                f"Path({folder!r}).mkdir(parents=True, exist_ok=True)"
            )
        sources.append(f"%%writefile {target}\n{text}")
    for source in sources:  # hidden on the site, kept in the download
        cell = _cell("code", source)
        cell.metadata["tags"] = [carry_tag()]
        cell.metadata["jupyter"] = {"source_hidden": True}
        cells.append(cell)
    modules = [  # not glue.py, a named file (bench/report.json), guards/
        Path(f).stem
        for f in recipe["files"][1:]
        if Path(f).parent.as_posix() == config.MHA_REF
    ]
    if modules:
        cells.append(
            _cell(
                "code",
                f"from mha_ref import {', '.join(modules)}  # the files above",
            )
        )
    heading, shown = None, set()
    for block in recipe["blocks"]:
        key = (block["file"], block["section"])
        if block["heading"] and block["heading"] != heading:
            heading = block["heading"]
            cells.append(_cell("markdown", f"## {heading}"))
        if key in shown:
            cells.append(
                _cell(
                    "markdown",
                    f"`{block['file']}`, section `{block['section']}`: "
                    "the cell above.",
                )
            )
            continue
        shown.add(key)
        text = _snippet(root, block)
        cells.append(
            _cell(
                "code", f"%%section {block['file']} {block['section']}\n{text}"
            )
        )
    if recipe.get("script"):
        script = jupytext.read(root / recipe["script"], fmt="py:percent")
        for cell in script.cells:  # a page may show a section of its
            # script: the markers are the page's, not the reader's
            if cell.cell_type == "code":
                cell.source = _without_markers(cell.source)
        cells.extend(script.cells)
    nb = v4.new_notebook()  # then its cells: unchecked, as each one
    nb.cells = cells
    number_cells(nb)  # the ids nbformat's own cells would have had
    return nb


SECTION_MARKER = re.compile(r"^\s*# --8<-- \[(?:start|end):[-_0-9a-z]+\]\s*$")


def _without_markers(source):
    """A script cell's source without its section-marker lines."""
    lines = source.split("\n")
    kept = [line for line in lines if not SECTION_MARKER.match(line)]
    return "\n".join(kept)


def script_lines(root, recipe):
    """The line of the page script where each of its cells' source
    starts, in order: the script's cells are the notebook's last, so a
    failing one is named by the script's file:line."""
    import jupytext

    if not recipe.get("script"):
        return []
    text = (Path(root) / recipe["script"]).read_text(encoding="utf-8")
    lines = text.split("\n")
    markers = [i for i, line in enumerate(lines) if line.startswith("# %%")]
    cells = jupytext.reads(text, fmt="py:percent").cells
    if len(markers) < len(cells):  # text before the first marker: a cell
        markers.insert(0, -1)
    found = []
    for marker, cell in zip(markers[-len(cells) :], cells, strict=False):
        first = cell.source.split("\n")[0]
        starts = [
            i
            for i in range(marker + 1, len(lines))
            if lines[i] == first or (cell.cell_type != "code")
        ]
        found.append((starts[0] if starts else marker + 1) + 1)
    return found


def _intro(recipe):
    mha = [f for f in recipe["files"] if f.startswith(f"{config.MHA_REF}/")]
    other = [f for f in recipe["files"] if f not in mha]
    # mha_ref's files by their path inside it: guards/numpy_ref.py and
    # numpy_ref.py are two files, not one named twice
    inside = [Path(f).relative_to(config.MHA_REF).as_posix() for f in mha]
    carried = [f"`{f}`" for f in inside] + [f"`{f}`" for f in other]
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
