"""The generation step: every number, table and figure of the site.

``python -m pipeline [--force] [--only PAGE] [--out DIR] [--watch]``
runs each page's script (``scripts/<page>.py``) as the page's
notebook, in parallel, skipping pages whose inputs did not change, and
writes ``docs/generated/``: data, tables, figures, exports (collect.py)
and the executed notebooks. Make runs it before ``mkdocs build`` and
``mkdocs serve``; ``make serve`` runs it with ``--watch`` beside the
server. ``python -m pipeline.check`` then checks that the pages agree
with the code and the data, and ``python -m pipeline.postbuild SITE``
typesets the math of a built site.

build.py     which pages run (found, not declared), in parallel
cache.py     a page's key: its script, what its notebook carries, runner,
             package versions
compose.py   a page's notebook: its sections, carried files, script cells
notebooks.py executing it in a standalone kernel (zygote.py forks them)
collect.py   what the cells glued -> the page's files
check.py     pages against code and data, one line per problem
"""
