"""The topic modules, one per subject the pages compute numbers for.

Each is run by ``python -m pipeline`` (the interface is in
pipeline/__init__.py); its data becomes the page variable of its name.
Add a topic by adding its file and its name here. Notebooks are every
``notebooks/*.py`` (jupytext percent scripts), executed into .ipynb.
"""

TOPICS = []
