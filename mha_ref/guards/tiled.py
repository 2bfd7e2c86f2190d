"""The doors of tiled.py: one guard per public function, same name.

The tiled passes take what numpy_ref.attention and torch_ref.attention
take (their doors check it), plus block sizes (ints >= 1) and a
mask_rule (None or a callable); the helpers are in tiles.py.
"""

import numpy as np

from mha_ref.guards import numpy_ref, torch_ref
from mha_ref.guards.arrays import array_of, position_array, rule_sizes
from mha_ref.guards.tiles import (
    last_positions,
    mask_rule,
    tile_count,
    tile_positions,
)


def positions(causal, query_positions, key_positions, tq, tk, as_array, rule):
    """Query and key positions for the causal mask or a rule, through
    ``as_array``, (Tq,) and (Tk,); (None, None) when neither needs them.
    Defaults: keys 0 .. Tk - 1, the queries the last Tq of them."""
    if not causal:
        if query_positions is not None or key_positions is not None:
            raise ValueError(
                "query_positions and key_positions need causal=True "
                "or a mask_rule"
            )
        return None, None
    if rule is not None and query_positions is None and tq > tk:
        raise ValueError(
            f"query_positions default to the last Tq = {tq} of the Tk = "
            f"{tk} key positions, and Tq > Tk would put the first at "
            f"{tk - tq}, but a mask_rule takes positions >= 0: pass "
            f"query_positions"
        )
    if key_positions is None and query_positions is None:
        # the default, bottom-right as a KV cache: nothing to check
        return as_array(range(tk - tq, tk)), as_array(range(tk))
    if key_positions is None:
        key_positions = range(tk)
        if query_positions is None:  # bottom-right, as a KV cache
            query_positions = range(tk - tq, tk)
    k_pos = position_array(key_positions, "key_positions", as_array)
    if query_positions is None:  # the last Tq of the given key positions
        query_positions = last_positions(k_pos, tq, tk)
    q_pos = position_array(query_positions, "query_positions", as_array)
    tile_positions(q_pos, k_pos, tq, tk)
    return q_pos, k_pos


def position_rule(rule):
    """None or a callable (q_pos, k_pos) -> blocked."""
    mask_rule(rule)


def _blocks_and_rule(block_q, block_k, rule):
    # block sizes ints >= 1, a rule None or callable: the helpers named
    # are called only to raise
    ints = int | np.integer
    if not all(
        isinstance(b, ints) and not isinstance(b, bool) and 1 <= b < 2**63
        for b in (block_q, block_k)
    ):
        rule_sizes(block_q=(block_q, 1), block_k=(block_k, 1))
    if rule is not None and not callable(rule):
        mask_rule(rule)


def tiled_attention_numpy(
    q, k, v, mask, empty_rows, block_q, block_k, rule, *modifiers
):
    """numpy_ref.attention's inputs (modifiers: scale, softcap, bias,
    sinks), block sizes >= 1 and a rule; returns what attention's door
    returns: q, k, v, mask, bias, sinks."""
    _blocks_and_rule(block_q, block_k, rule)
    return numpy_ref.attention(q, k, v, mask, empty_rows, *modifiers)


def tiled_attention_torch(
    q, k, v, mask, empty_rows, block_q, block_k, rule, *modifiers
):
    """torch_ref.attention's inputs, block sizes >= 1 and a rule;
    returns the mask as attention's door does."""
    _blocks_and_rule(block_q, block_k, rule)
    return torch_ref.attention(q, k, v, mask, empty_rows, *modifiers)


def tiled_attention_backward_numpy(
    q, k, v, dout, mask, empty_rows, block_q, block_k, rule, *modifiers
):
    """numpy_ref.attention_backward's inputs, blocks and a rule;
    returns q, k, v, dout, mask, bias, sinks."""
    _blocks_and_rule(block_q, block_k, rule)
    return numpy_ref.attention_backward(
        q, k, v, dout, mask, empty_rows, *modifiers
    )


def tiled_attention_backward_torch(
    q, k, v, dout, mask, empty_rows, block_q, block_k, rule, *modifiers
):
    """torch_ref.attention_backward's inputs, blocks and a rule;
    returns the mask."""
    _blocks_and_rule(block_q, block_k, rule)
    return torch_ref.attention_backward(
        q, k, v, dout, mask, empty_rows, *modifiers
    )


def tiles_computed(rule, query_positions, key_positions, block_q, block_k):
    """A callable rule, 1-D positions, blocks >= 1; returns the
    positions as NumPy arrays (an iterator read once)."""
    q_pos = array_of(query_positions, "query_positions", np.asarray)
    k_pos = array_of(key_positions, "key_positions", np.asarray)
    tile_count(rule, q_pos.shape, k_pos.shape, block_q, block_k)
    return q_pos, k_pos
