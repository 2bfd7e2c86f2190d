"""The machinery that turns the page scripts into the site's numbers.

The flow, one stage a file (the repository's README and docs/about.md
describe it for a reader):

config.py          what the pipeline reads from outside: the folders,
                   what mkdocs.yml owns, the glue's MIME type
pages.py           which pages exist, what they show and what their
                   notebooks carry; mistakes found before any run
notebook.py        composing a page's notebook (notebook_setup.py is
                   its first cell, as a file)
kernel.py          executing it in a kernel that sees no repository
warm_kernels.py    those kernels, forked from one warm process
page_data.py       what the cells glued -> the page's data, tables,
                   figures and exports
cache.py           page keys and records: the only file that knows a
                   record's fields
files.py           writing generated files atomically, when they change
memo.py            what a file's text says (its imports, what it
                   glues, ...), read once and kept by its text
generation.py      generation: the pages that changed, side by side
                   (``python -m pipeline``)
page_linter.py     the pages agree with the code and the data
                   (``python -m pipeline.check``, check.py)
serve.py           ``make serve``: generation, the linter and the
                   engine's server while you edit
postbuild.py       after either engine: math typeset (typeset_math.py),
                   each page's notebook offered, notebook pages in the
                   site's look (notebook_html.py), plain math in the
                   search index (search_index.py)
serve_hook.py      the same post-build step under ``mkdocs serve``
jupyter_cache_hook.py  MkDocs renders a notebook page again only when
                   a cell it shows changed
zensical.py        the second engine: its config, its extension, the
                   notebook pages it reads
"""
