"""The old name of mha_ref/guards/tiles.py (the tiled passes' checks),
kept so that ``from mha_ref import checks_tiles`` still works."""

from mha_ref.guards.tiles import *  # noqa: F403
