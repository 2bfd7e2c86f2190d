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
also watch ``mha_ref/`` (an edit there reloads once, when its pages'
numbers are ready, not first with the old ones). On every command the
plugins' progress chatter is left out of the log.
"""

import logging
import os
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
_typesetter = None


def on_startup(command, dirty):
    global _command
    _command = command
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
