"""pipeline/jupyter_cache_hook.py: a notebook page is rendered again
only when a cell it shows changed, never for a carried file alone."""

import json

import pytest

from pipeline import config, jupyter_cache_hook

nbconvert2 = pytest.importorskip("mkdocs_jupyter.nbconvert2")


def plugin_config():
    """mkdocs-jupyter's options as mkdocs.yml sets them, with the
    defaults of the options it leaves out (the plugin's key reads
    them)."""
    from mkdocs_jupyter.plugin import Plugin

    plugin = Plugin()
    errors, _ = plugin.load_config(
        config.plugin("mkdocs-jupyter", config.ROOT)
    )
    assert not errors
    return plugin.config


def notebook(path, carried, shown):
    cells = [
        {
            "cell_type": "code",
            "id": "carry",
            "metadata": {"tags": ["carry"]},
            "source": carried,
            "outputs": [],
            "execution_count": None,
        },
        {
            "cell_type": "code",
            "id": "shown",
            "metadata": {},
            "source": shown,
            "outputs": [],
            "execution_count": None,
        },
    ]
    nb = {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb), "utf-8")
    return str(path)


def test_the_key_ignores_carried_cells_and_follows_shown_ones(tmp_path):
    options = plugin_config()
    key = jupyter_cache_hook.shown_cache_key
    before = notebook(tmp_path / "a.ipynb", "x = 1  # numpy_ref", "y = 2")
    carried = notebook(tmp_path / "b.ipynb", "x = 1  # edited", "y = 2")
    shown = notebook(tmp_path / "c.ipynb", "x = 1  # numpy_ref", "y = 3")
    assert key(before, options, False) == key(carried, options, False)
    assert key(before, options, False) != key(shown, options, False)
    # the plugin's own key moves with either edit: what the hook fixes
    original = jupyter_cache_hook._original
    assert original(before, options, False) != original(
        carried, options, False
    )
    # and the options are in the key, as in the plugin's
    other = {**options, "no_prompt": not options["no_prompt"]}
    assert key(before, options, False) != key(before, other, False)


def test_notebooks_that_differ_in_carried_cells_render_the_same(tmp_path):
    """What the key assumes, shown with the plugin's own renderer."""
    options = plugin_config()

    def render(path):
        return nbconvert2.nb2html(
            path,
            execute=False,
            no_prompt=options["no_prompt"],
            remove_tag_config=options["remove_tag_config"],
        )

    a = render(notebook(tmp_path / "a.ipynb", "x = 1  # one", "y = 2"))
    b = render(notebook(tmp_path / "b.ipynb", "x = 1  # two", "y = 2"))
    c = render(notebook(tmp_path / "c.ipynb", "x = 1  # one", "y = 3"))
    assert a == b
    assert "x = 1" not in a  # the carried cell is not on the page
    assert a != c


def test_on_config_puts_the_key_in_the_plugin(monkeypatch):
    from mkdocs_jupyter import plugin

    monkeypatch.setattr(
        plugin, "_compute_cache_key", jupyter_cache_hook._original
    )
    jupyter_cache_hook.on_config({"plugins": {"mkdocs-jupyter": object()}})
    assert plugin._compute_cache_key is jupyter_cache_hook.shown_cache_key
