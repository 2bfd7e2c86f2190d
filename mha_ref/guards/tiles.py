"""Input checks of the tiled passes (tiled.py): block sizes, a mask rule
and what it returns for a tile.

Each raises ``ValueError`` or ``TypeError`` naming the argument and its
shape or value; the checks both frameworks share are in arrays.py.
"""

import numpy as np

from mha_ref.guards.arrays import positions, rule_int


def mask_rule(rule):
    """A tiled pass's mask_rule: None or a callable (q_pos, k_pos) -> mask."""
    if rule is not None and not callable(rule):
        raise TypeError(
            f"mask_rule must be a function (query_positions, "
            f"key_positions) -> blocked, e.g. functools.partial("
            f"sliding_window_mask, window=256); got {type(rule).__name__}"
        )


def rule_tile(blocked, tile_shape):
    """What a mask_rule returned for one tile: bool, broadcasting to it."""
    shape = tuple(getattr(blocked, "shape", ()))
    if str(getattr(blocked, "dtype", None)) not in ("bool", "torch.bool"):
        raise TypeError(
            f"mask_rule must return a boolean mask (True = blocked), got "
            f"{type(blocked).__name__} of dtype "
            f"{getattr(blocked, 'dtype', None)}"
        )
    try:
        full = np.broadcast_shapes(shape, tuple(tile_shape))
    except ValueError:
        full = None
    if full != tuple(tile_shape):
        raise ValueError(
            f"mask_rule returned shape {shape} for a tile of scores "
            f"{tuple(tile_shape)}: it must broadcast to the tile, as "
            f"(bq, bk) for 1-D positions"
        )


def tile_count(rule, query_shape, key_shape, block_q, block_k):
    """The guards of tiled.tiles_computed: a rule, 1-D positions, blocks."""
    if rule is None:
        raise TypeError(
            "mask_rule must be a function (query_positions, "
            "key_positions) -> blocked, got None"
        )
    mask_rule(rule)
    positions(query_shape, key_shape)
    block_sizes(block_q, block_k)


def block_sizes(block_q, block_k):
    """A tile's rows and columns: ints >= 1."""
    for name, value in (("block_q", block_q), ("block_k", block_k)):
        rule_int(value, name, 1)


def last_positions(k_pos, tq, tk):
    """The default query positions when key_positions are given: the
    last Tq of the (Tk,) key positions (Tq <= Tk)."""
    if tuple(k_pos.shape) != (tk,):
        raise ValueError(
            f"key_positions must have shape ({tk},), one per row, "
            f"got {tuple(k_pos.shape)}"
        )
    if tq > tk:
        raise ValueError(
            f"query_positions default to the last Tq = {tq} of the Tk = "
            f"{tk} key_positions, but Tq > Tk: pass query_positions"
        )
    return k_pos[tk - tq :]


def tile_positions(q_pos, k_pos, tq, tk):
    """One position per query and per key, as 1-D sequences."""
    for name, pos, t in (
        ("query_positions", q_pos, tq),
        ("key_positions", k_pos, tk),
    ):
        if tuple(pos.shape) != (t,):
            raise ValueError(
                f"{name} must have shape ({t},), one per row, "
                f"got {tuple(pos.shape)}"
            )
