"""MkDocs hook: ``mkdocs serve`` shows what ``make site`` ships, and no
page mistake stops it.

``make site`` runs the post-build step (postbuild.py: math typeset by
KaTeX, the notebook line under each title) after ``mkdocs build``. The
server builds into a folder of its own, so this hook runs the same step
there after every rebuild; ``mkdocs build`` is left to Make, and
Zensical, which ignores hooks, too.

Under ``mkdocs serve`` only, a page mistake shows on the page instead
of stopping the server: a placeholder the data lacks renders as
mkdocs-macros' error page (not its exit), an include of a section that
does not exist becomes a line in the code block naming the nearest
sections (not snippets' exception, which would stop every rebuild).
Under ``make serve`` (pipeline/serve.py, which sets MHA_REF_WATCHER)
the loop prints each mistake once, with its file:line, and publishes
the generated files once a round is done: the server then does not
also watch ``mha_ref/``, and a page is not out of date because a
section it shows changed, only when its own outputs do (an edit there
reloads a page once, when its numbers are ready, never first with the
old ones). On every command the
plugins' progress chatter is left out of the log.

Under ``mkdocs serve --dirty`` (what ``make serve`` runs) a rebuild
renders only the pages that are out of date: a page whose source, or
anything it shows, is newer than its built HTML. What it shows is what
it includes (mha_ref sections, generated tables), the generated files
its own page script last wrote, and the data of every page its
placeholders name (the review page quotes others). Anything else that
every page depends on (mkdocs.yml, the site glue, the templates, the
list of pages or their titles) changed since the last build rebuilds
every page, as a plain ``mkdocs serve`` does. Material's search keeps
the entries of the pages not rebuilt.
"""

import hashlib
import logging
import os
import re
import time
from pathlib import Path

from pipeline.notebook_html import slim_notebook_pages
from pipeline.postbuild import NOTEBOOKS, offer_notebooks
from pipeline.search_index import plain_math_in_search_index
from pipeline.typeset_math import (
    FORMULA_CACHE,
    MathError,
    Typesetter,
    typeset_site,
)

log = logging.getLogger("mkdocs.hooks.serve")
# INFO lines per notebook and per macro module: nothing to act on
CHATTY = ("mkdocs.plugins.mkdocs_macros", "mkdocs.mkdocs-jupyter")
CHATTY_JUPYTER = "mkdocs.plugins.mkdocs_jupyter"
WATCHER = "MHA_REF_WATCHER"  # set by pipeline/serve.py for its server
_command = None
_dirty = False
_typesetter = None
_shared = None  # what every page depends on, at the last build
# When the build that wrote each page started ({built page: time}): a
# file a page shows that changed while that build ran (after the page
# read it, before the page was written) is newer than the build's start,
# though older than the page; so a page is out of date when what it
# shows is newer than the start of the build that wrote it.
_build_started = None
_built_from = {}
PLACEHOLDER = re.compile(r"<<-?\s*(\w+)\.")  # << page.name >>: its data


def on_startup(command, dirty):
    global _command, _dirty
    _command, _dirty = command, dirty
    for name in (*CHATTY, CHATTY_JUPYTER):
        logging.getLogger(name).setLevel(logging.WARNING)


def _serving():
    return _command == "serve"


def on_config(config):
    if not _serving():
        return config
    macros = config.plugins.get("macros")
    if macros is not None:  # a page mistake: an error page, no exit
        macros.config["on_error_fail"] = False
    if os.environ.get(WATCHER):
        root = Path(config.config_file_path).resolve().parent
        mha_ref = root / "mha_ref"
        config.watch[:] = [
            w for w in config.watch if Path(w).resolve() != mha_ref
        ]
        # the loop prints each mistake with its file:line
        logging.getLogger("mkdocs.plugins.mkdocs_macros").setLevel(
            logging.CRITICAL
        )
    return config


def on_pre_build(config):
    global _build_started
    _build_started = time.time()


def on_post_page(output, page, config):
    if _build_started is not None:
        _built_from[str(Path(page.file.abs_dest_path))] = _build_started
    return output


def on_files(files, config):
    """Under ``serve --dirty``: which pages are out of date (above)."""
    global _shared
    if not (_serving() and _dirty):
        return files
    root = Path(config.config_file_path).resolve().parent
    pages = [f for f in files if f.is_documentation_page()]
    texts = {  # each page's Markdown, read once a build
        f.src_uri: Path(f.abs_src_path).read_text(encoding="utf-8")
        for f in pages
        if f.src_uri.endswith(".md")
    }
    shared = _shared_state(root, pages, texts)
    everything, _shared = shared != _shared, shared
    for file in pages:
        if everything:
            file.is_modified = lambda: True
        elif file.src_uri in texts:
            file.is_modified = _out_of_date(
                root, file, texts[file.src_uri], file.is_modified
            )
        # a notebook's page: its .ipynb alone decides (MkDocs' own rule)
    return files


def _shared_state(root, pages, texts):
    """A digest of what every page depends on: the config, the site glue,
    the templates, and the pages with their titles."""
    from pipeline.pages import page_blocks

    digest = hashlib.sha256()
    overrides = root / "overrides"
    inputs = [root / "mkdocs.yml", root / "macros.py"]
    inputs += sorted(p for p in overrides.rglob("*") if p.is_file())
    for path in inputs:
        if path.is_file():
            digest.update(f"{path.relative_to(root)}\0".encode())
            digest.update(path.read_bytes())
    for file in sorted(pages, key=lambda f: f.src_uri):
        text = texts.get(file.src_uri)
        title = (page_blocks(text)[1] or "") if text is not None else ""
        digest.update(f"{file.src_uri}\0{title}\0".encode())
    return digest.hexdigest()


def _out_of_date(root, file, text, modified):
    """``file.is_modified``, true also when what the page shows is newer
    than its built page. MkDocs asks twice a build (to read the page, to
    write it), both before it writes: the first answer stands."""
    answer = []

    def is_modified():
        if not answer:
            answer.append(modified() or _shows_newer(root, file, text))
        return answer[0]

    return is_modified


def _shows_newer(root, file, text):
    """The page was never built, or a file it shows is newer than it."""
    built = Path(file.abs_dest_path)
    if not built.is_file():
        return True
    since = min(  # the build that wrote it began before it wrote it
        built.stat().st_mtime, _built_from.get(str(built), float("inf"))
    )
    return any(
        p.is_file() and p.stat().st_mtime > since
        for p in _page_inputs(root, file, text)
    )


def _page_inputs(root, file, text):
    """The files a page shows: its includes, its script's outputs, and
    the data of each page its placeholders name."""
    from pipeline import cache
    from pipeline.generation import Project
    from pipeline.pages import ANY_INCLUDE

    project = Project(root=root)
    found = [root / m["path"] for m in ANY_INCLUDE.finditer(text)]
    if os.environ.get(WATCHER):  # code is published with its numbers:
        # a page that shows a section of mha_ref carries its file, so
        # its notebook (below) is rewritten when the section changes:
        # by the run that computes the new numbers, or, when the page
        # never ran the edited code, at once with the numbers it has
        found = [p for p in found if root / "mha_ref" not in p.parents]
    name = Path(file.src_uri).with_suffix("").as_posix()
    found += [project.out / r for r in cache.outputs(project, name)]
    for ref in set(PLACEHOLDER.findall(text)):
        for stem in {ref, ref.replace("_", "-")}:
            found.append(project.out / "data" / f"{stem}.json")
    return found


def on_page_markdown(markdown, page, config, files):
    """Under serve: an include of a missing section, as a line that says
    so (in the code block it stood in) instead of an exception."""
    if not _serving():
        return markdown
    from pipeline.pages import ANY_INCLUDE, SECTION, near_names

    root = Path(config.config_file_path).parent  # snippets' base_path
    lines = markdown.split("\n")
    for number, line in enumerate(lines):
        match = ANY_INCLUDE.match(line)
        if not match or not match["name"]:
            continue
        path = root / match["path"]
        if not path.is_file():
            continue
        source = path.read_text(encoding="utf-8")
        if f"[start:{match['name']}]" in source:
            continue
        names = SECTION.findall(source)
        message = (
            f"{match['path']} has no section {match['name']!r}: "
            f"{near_names(match['name'], names)}"
        )
        indent = line[: len(line) - len(line.lstrip())]
        lines[number] = f"{indent}# {page.file.src_uri}: {message}"
        if not os.environ.get(WATCHER):
            log.warning(f"docs/{page.file.src_uri}: {message}")
    return "\n".join(lines)


def on_post_build(config):
    global _typesetter
    if not _serving():
        return
    if _typesetter is None:  # one V8 for the whole session
        _typesetter = Typesetter(cache=FORMULA_CACHE)
    try:
        typeset_site(config["site_dir"], _typesetter)
    except MathError as exc:  # the server goes on; the page shows raw TeX
        log.error(str(exc))
    offer_notebooks(config["site_dir"], os.environ.get("MHA_REF_REPO_URL"))
    slim_notebook_pages(config["site_dir"], NOTEBOOKS)
    plain_math_in_search_index(config["site_dir"])
