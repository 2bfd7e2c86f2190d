"""MkDocs hook: ``mkdocs serve`` shows what ``make site`` ships.

``make site`` runs the post-build step (postbuild.py: math typeset by
KaTeX, the notebook line under each title) after ``mkdocs build``. The
server builds into a folder of its own, so this hook runs the same step
there after every rebuild; ``mkdocs build`` is left to Make, and
Zensical, which ignores hooks, too. Without generated data the server
still starts (macros.py says what to run).
"""

import logging
import os

from pipeline.notebook_html import slim_notebook_pages
from pipeline.postbuild import FORMULA_CACHE, NOTEBOOKS, offer_notebooks
from pipeline.search_index import plain_math_in_search_index
from pipeline.typeset_math import MathError, Typesetter, typeset_site

log = logging.getLogger("mkdocs.hooks.serve")
_command = None
_typesetter = None


def on_startup(command, dirty):
    global _command
    _command = command


def on_post_build(config):
    global _typesetter
    if _command != "serve":
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
