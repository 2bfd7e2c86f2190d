"""The generation step: every number, table and figure of the site.

``python -m pipeline [--force] [--only TOPIC] [--out DIR]`` runs each
topic listed in ``topics/__init__.py`` and each notebook in
``topics/notebooks/``, skipping those whose inputs did not change, and
writes ``docs/generated/``. Make runs it before ``mkdocs build`` and
``mkdocs serve``; nothing else does.

A topic module (``topics/<name>.py``)
-------------------------------------
``compute() -> dict``
    Plain data only (numbers, strings, bools, lists, dicts; NumPy arrays
    and tensors are converted, NaN becomes "nan"); no prose. Written to
    ``data/<name>.json``; pages read it as the variable ``<name>``
    (``<< name.key | num >>``). Fix every seed.
``render(data, out)`` (optional)
    ``out.table(name, markdown)`` writes ``tables/<name>.md``;
    ``out.figure(name, draw, alt, figsize=(7, 3.2))`` calls
    ``draw(fig, theme)`` on a fresh matplotlib Figure once per colour
    scheme (``theme.name`` is "light" or "dark"; colours in
    pipeline/figures.py) and writes ``figures/<name>-<scheme>.svg``.
    ``pipeline.output`` has ``markdown_table``, ``fmt`` and ``fmt_list``.
``DEPENDS = ["mha_ref/numpy_ref.py", ...]`` (optional)
    The files the outputs depend on (paths or globs from the repository
    root); default every ``mha_ref/*.py``. With the topic's own file,
    pipeline/output.py, pipeline/figures.py and the numpy, torch and
    matplotlib versions, they make the cache key (pipeline/cache.py).
"""
