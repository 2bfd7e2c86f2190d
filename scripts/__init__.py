"""Build-time generation of every number, table and figure on the site.

``python -m scripts.build`` runs each topic module (``scripts/<topic>.py``)
through a content-hash cache and writes ``docs/generated/``; see build.py
(running), tasks.py (discovery), cache.py (keys) and notebook_runner.py.
"""
