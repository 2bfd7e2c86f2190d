"""MkDocs hook: a notebook page is rendered again only when what it
shows changed.

mkdocs-jupyter 0.26 keeps each notebook's rendered HTML in a cache
(``.cache/mkdocs-jupyter``) keyed on the notebook file's bytes
(``mkdocs_jupyter/plugin.py``, ``_compute_cache_key``). A page's
notebook also carries the ``mha_ref`` files its reader's download needs,
in the cells tagged ``carry``, which the plugin removes before it
renders (``remove_tag_config``; nbconvert2.py passes only the first tag
of ``remove_cell_tags`` on). So an edit anywhere in ``numpy_ref.py``
changed the key of every notebook that carries it, and each was
rendered again (about half a second each, 22 of them) to the same HTML.

This hook keys the cache on the notebook as the plugin renders it: the
plugin's own key (its options included) of the notebook without the
removed cells.
The download is not concerned: the plugin copies the .ipynb itself
(``include_source``). Where the plugin no longer has that function, the
hook leaves it as it is (every notebook keyed on its bytes, as before).
"""

import json
import pathlib
import tempfile

try:
    from mkdocs_jupyter import plugin as _plugin
except ImportError:  # no mkdocs-jupyter: nothing to key
    _plugin = None

_original = getattr(_plugin, "_compute_cache_key", None)


def shown_cells(nb_path, removed_tag):
    """The notebook's JSON text without the cells tagged ``removed_tag``
    (sorted keys: the same notebook gives the same text)."""
    nb = json.loads(pathlib.Path(nb_path).read_text("utf-8"))
    nb["cells"] = [
        cell
        for cell in nb.get("cells", [])
        if removed_tag not in cell.get("metadata", {}).get("tags", [])
    ]
    return json.dumps(nb, sort_keys=True)


def shown_cache_key(nb_path, config, exec_nb):
    """The plugin's own key (its options included) of a notebook that
    holds only the cells it shows."""
    tags = config["remove_tag_config"].get("remove_cell_tags") or [None]
    with tempfile.TemporaryDirectory(prefix="mha-nbkey-") as folder:
        shown = pathlib.Path(folder, "shown.ipynb")
        shown.write_text(shown_cells(nb_path, next(iter(tags))), "utf-8")
        return _original(str(shown), config, exec_nb)


def on_config(config):
    if _original is not None and "mkdocs-jupyter" in config["plugins"]:
        _plugin._compute_cache_key = shown_cache_key
    return config
