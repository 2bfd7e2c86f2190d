"""Tiled attention: the online-softmax forward pass, NumPy and PyTorch.

Keys and values are read in blocks of ``block_k`` rows. Each block of
``block_q`` queries keeps a running row max, a running sum and an
unnormalised output, so at most a (block_q, block_k) tile of scores
exists at a time instead of all (Tq, Tk). The output equals
numpy_ref.attention / torch_ref.attention; FlashAttention (Dao et al.
2022) runs the same loop inside one GPU kernel. The two versions
mirror each other name for name. Masks are boolean, True = blocked.
"""

import math

import numpy as np
import torch

from mha_ref import numpy_ref, torch_ref
from mha_ref.guards import tiled as check
from mha_ref.guards.arrays import first_index
from mha_ref.guards.tiles import rule_tile

BLOCK = 64  # default block_q and block_k


def positions(
    causal, query_positions, key_positions, tq, tk, as_array, rule=None
):
    """Query and key positions for the causal mask or a mask_rule.

    (None, None) when neither needs them.

    By default the Tq queries are the last Tq of the Tk key positions
    (0 .. Tk - 1 by default). Positions are any iterable of finite
    reals (see guards/arrays.position_array). A mask ``rule`` takes
    positions >= 0, so Tq > Tk with no query_positions is refused by
    name. The positions are the door's work: checked and converted.
    """
    return check.positions(
        causal, query_positions, key_positions, tq, tk, as_array, rule
    )  # (Tq,) and (Tk,) through as_array, or (None, None)


def position_rule(mask_rule, causal, lead, ref):
    """mask_rule as the tiled loop applies it, or None without one.

    Each tile's answer is checked (bool, broadcasting to the tile of
    scores (*lead, bq, bk)) and made an array of the pass (a NumPy rule
    serves the torch pass too); with causal=True too, a pair is blocked
    when either blocks it. ``ref``: numpy_ref or torch_ref.
    """
    check.position_rule(mask_rule)  # None, or a callable
    return _position_rule(mask_rule, causal, lead, ref)


def _position_rule(mask_rule, causal, lead, ref):
    # position_rule behind its guard: the tiled passes checked the rule
    if mask_rule is None:
        return None

    def rule(q_pos, k_pos):
        blocked = mask_rule(q_pos, k_pos)  # (bq, bk) or (B, 1, bq, bk)
        rule_tile(blocked, (*lead, len(q_pos), len(k_pos)))
        if ref is torch_ref:
            device = getattr(q_pos, "device", None)
            blocked = torch.as_tensor(blocked, device=device)
        else:
            blocked = _as_numpy(blocked)
        if causal:
            blocked = blocked | ref.causal_mask_for_positions(q_pos, k_pos)
        return blocked

    return rule


def check_row_max(
    row_max, rows, mask, q_pos, k_pos, empty_rows="raise", mask_rule=None
):
    """Raise if a query row of this block overflowed or saw no key.

    row_max (..., bq, 1) holds the rows ``rows`` (a slice), NumPy or
    torch. NaN or +inf means q @ k^T overflowed (as numpy_ref.softmax
    refuses). -inf means no key was allowed (mask and causal positions
    together; refused unless empty_rows="zero"), or, in a row that has
    allowed keys, that every allowed score overflowed to -inf; the mask
    tells the two apart.
    """
    row_max = _as_numpy(row_max)[..., 0]  # (..., bq)
    overflow = np.isnan(row_max) | np.isposinf(row_max)
    if np.any(overflow):
        *batch, row = first_index(overflow)
        raise ValueError(
            f"scores of query row at index {(*batch, rows.start + row)} "
            f"hold {row_max[overflow][0]}: q @ k^T overflowed; use "
            "smaller inputs"
        )
    empty = np.isneginf(row_max)
    if not np.any(empty):
        return
    # the whole rows of the mask, built only now that one is needed
    mask, q_pos, k_pos = (_as_numpy(a) for a in (mask, q_pos, k_pos))
    rule = None if mask_rule is None else _numpy_rule(mask_rule)
    tile = tile_mask_numpy(mask, q_pos, k_pos, rows, slice(None), rule)
    blocked = np.False_ if tile is None else tile.all(axis=-1)  # (.., bq)
    if empty_rows == "zero":  # rows with no allowed key are welcome
        empty = empty & ~blocked
    for flags, why in (
        (
            empty & blocked,
            "has every key masked (by the mask or the "
            "causal positions); each query needs at least one allowed key",
        ),
        (
            empty & ~blocked,
            "has allowed keys, but every score "
            "overflowed to -inf; use smaller inputs",
        ),
    ):
        if np.any(flags):
            *batch, row = first_index(flags)
            raise ValueError(
                f"query row at index {(*batch, rows.start + row)} {why}"
            )


def _as_numpy(value):
    """A torch tensor as NumPy (float64 for floats: no bfloat16 there)."""
    if not isinstance(value, torch.Tensor):
        return value
    value = value.detach().cpu()
    return (value.double() if value.is_floating_point() else value).numpy()


def _numpy_rule(mask_rule):
    """mask_rule with its answer as NumPy (a torch rule gives tensors)."""

    def rule(q_pos, k_pos):
        return _as_numpy(mask_rule(q_pos, k_pos))

    return rule


# --8<-- [start:online-softmax-update-numpy]
def online_softmax_update_numpy(state, s, v_block):
    """Fold scores s (..., bq, bk) and their values into the state.

    state = (row_max, row_sum, acc): (..., bq, 1), (..., bq, 1) and the
    unnormalised output (..., bq, dv) over the keys seen so far.
    """
    row_max, row_sum, acc = state
    # m' = max(m, max_j s_j)
    new_max = np.maximum(row_max, s.max(axis=-1, keepdims=True))
    # a row with no allowed key yet has max -inf: shift it by 0
    shift = np.where(np.isneginf(new_max), 0.0, new_max)  # (..., bq, 1)
    # alpha = exp(m - m') rescales what was summed under the old max
    alpha = np.exp(row_max - shift)  # (..., bq, 1)
    p = np.exp(s - shift)  # (..., bq, bk); blocked keys give exactly 0
    # l' = alpha l + sum_j exp(s_j - m')
    row_sum = alpha * row_sum + p.sum(axis=-1, keepdims=True)
    # O' = alpha O + P V
    acc = alpha * acc + p @ v_block  # (..., bq, dv)
    return new_max, row_sum, acc
    # --8<-- [end:online-softmax-update-numpy]


# --8<-- [start:tile-mask-numpy]
def tile_mask_numpy(mask, q_pos, k_pos, rows, cols, mask_rule=None):
    """The blocked (True) entries of one tile, or None if none can be.

    mask is broadcast to (..., Tq, Tk) or None; q_pos and k_pos are
    the positions (None unless causal or a mask_rule); rows, cols slice
    the tile. mask_rule(query_positions, key_positions) -> blocked sees
    the tile's positions only; without one, causal blocks later keys.
    """
    tile = None if mask is None else mask[..., rows, cols]  # (..., bq, bk)
    if q_pos is not None:  # a rule of positions: mask_rule, or causal
        rule = mask_rule or numpy_ref.causal_mask_for_positions
        blocked = rule(q_pos[rows], k_pos[cols])  # (bq, bk)
        tile = blocked if tile is None else tile | blocked
    return tile
    # --8<-- [end:tile-mask-numpy]


# --8<-- [start:tiled-attention-numpy]
def tiled_attention_numpy(
    q,
    k,
    v,
    mask=None,
    causal=False,
    query_positions=None,
    key_positions=None,
    block_q=BLOCK,
    block_k=BLOCK,
    return_lse=False,
    empty_rows="raise",
    mask_rule=None,
    *,
    scale=None,
    softcap=None,
    bias=None,
    sinks=None,
):
    """numpy_ref.attention's output, one (block_q, block_k) tile at a time.

    q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv); mask True = blocked.
    causal blocks later key positions; by default the queries are the
    last Tq of the Tk positions, as with a KV cache. Returns (..., Tq, dv),
    and with return_lse the log-sum-exp of each score row, (..., Tq).
    k and v may have fewer heads than q, as in numpy_ref.attention. A
    row with no allowed key is refused, or with empty_rows="zero" gets
    output 0 and L = +inf (flash-attn's convention).
    mask_rule(query_positions, key_positions) -> blocked, e.g.
    functools.partial(sliding_window_mask, window=256), is evaluated
    per tile at those positions; a tile it blocks whole is skipped.
    scale, softcap, bias and sinks as in numpy_ref.attention; the sink
    enters each row's running max and sum once, before the first tile.
    """
    q, k, v, mask, bias, sinks = check.tiled_attention_numpy(
        q,
        k,
        v,
        mask,
        empty_rows,
        block_q,
        block_k,
        mask_rule,
        scale,
        softcap,
        bias,
        sinks,
    )  # as numpy_ref.attention checks them; blocks >= 1, a callable rule
    k, v, mask, q_pos, k_pos, rule, mod = _prepare_numpy(
        q,
        k,
        v,
        mask,
        causal,
        query_positions,
        key_positions,
        mask_rule,
        (scale, softcap, bias, sinks),
    )  # k, v with H heads; positions; mask also where bias is -inf
    return _tiled_numpy(
        q,
        k,
        v,
        mask,
        causal,
        q_pos,
        k_pos,
        rule,
        mod,
        block_q,
        block_k,
        return_lse,
        empty_rows,
    )


def _prepare_numpy(
    q, k, v, mask, causal, query_positions, key_positions, mask_rule, mods
):
    # the checked inputs made ready for the tile loop: grouped heads
    # repeated, positions and rule, the bias's -inf as blocked entries
    scale, softcap, bias, sinks = mods
    group = numpy_ref.kv_group(q.shape, k.shape)  # G = H // H_kv
    if group > 1:  # query head h reads key/value head h // G
        k = numpy_ref.repeat_kv_heads(k, group)  # (..., H, Tk, d)
        v = numpy_ref.repeat_kv_heads(v, group)  # (..., H, Tk, dv)
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    tq, tk = q.shape[-2], k.shape[-2]
    rule = _position_rule(mask_rule, causal, lead, numpy_ref)  # or None
    ruled = causal or rule is not None  # blocked by positions
    q_pos, k_pos = positions(
        ruled, query_positions, key_positions, tq, tk, np.asarray, rule
    )
    if bias is not None:
        bias = np.broadcast_to(bias, (*lead, tq, tk))  # checked, a view
        if np.isneginf(bias).any():  # a bias of -inf blocks its key
            by_bias = np.isneginf(bias)  # (..., Tq, Tk)
            mask = by_bias if mask is None else mask | by_bias
    mod = numpy_ref.ScoreMod(scale, softcap, bias, sinks)  # attention's
    return k, v, mask, q_pos, k_pos, rule, mod


def _tiled_numpy(
    q,
    k,
    v,
    mask,
    causal,
    q_pos,
    k_pos,
    rule,
    mod,
    block_q,
    block_k,
    return_lse,
    empty_rows,
):
    # tiled_attention_numpy behind its guard, on the prepared inputs
    lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    tq, tk, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    dtype = np.result_type(q.dtype, k.dtype, v.dtype, np.float32)
    sinks = mod.sinks
    out_blocks, lse_blocks = [], []
    for i in range(0, tq, block_q):
        rows = slice(i, i + block_q)
        bq = min(block_q, tq - i)  # the last block may be shorter
        state = (
            np.full((*lead, bq, 1), -np.inf, dtype),  # running max
            np.zeros((*lead, bq, 1), dtype),  # running sum
            np.zeros((*lead, bq, dv), dtype),
        )  # unnormalised output
        if sinks is not None:  # the sink: one more score per row, no value
            sink = mod.sink_logits((*lead, bq, 1))  # (..., bq, 1)
            no_value = np.zeros((*lead, 1, dv), dtype)
            state = online_softmax_update_numpy(state, sink, no_value)
        # --8<-- [start:tiled-key-loop-numpy]
        for j in range(0, tk, block_k):
            cols = slice(j, j + block_k)
            if causal and k_pos[cols].min() > q_pos[rows].max():
                continue  # the whole tile lies in the future
            tile = tile_mask_numpy(mask, q_pos, k_pos, rows, cols, rule)
            if rule is not None and tile.all():
                continue  # the rule blocks every pair: skip the tile
            # S_ij = Q_i K_j^T / sqrt(d_k), modified, then masked
            s = mod.scores(q[..., rows, :], k[..., cols, :], rows, cols)
            s = numpy_ref.apply_mask(s, tile)  # (..., bq, bk)
            state = online_softmax_update_numpy(state, s, v[..., cols, :])
        # --8<-- [end:tiled-key-loop-numpy]
        row_max, row_sum, acc = state
        # NaN or +inf: q @ k^T overflowed; -inf: no key allowed (or lost)
        check_row_max(row_max, rows, mask, q_pos, k_pos, empty_rows, rule)
        # a row with no key (empty_rows="zero") has m = -inf and l = 0:
        # o = 0, and L = +inf makes the backward's exp(S - L) 0 as well
        empty = np.isneginf(row_max)  # (..., bq, 1)
        row_sum = np.where(empty, 1.0, row_sum)
        # o = O / l
        out_blocks.append(acc / row_sum)  # (..., bq, dv)
        # L = m + log(l), all the backward needs of this row's softmax
        lse = np.where(empty, np.inf, row_max + np.log(row_sum))
        lse_blocks.append(lse[..., 0])  # (..., bq)
    out = np.concatenate(out_blocks, axis=-2)  # (..., Tq, dv)
    if return_lse:
        return out, np.concatenate(lse_blocks, axis=-1)  # (..., Tq)
    return out
    # --8<-- [end:tiled-attention-numpy]


# --8<-- [start:online-softmax-update-torch]
def online_softmax_update_torch(state, s, v_block):
    """Fold scores s (..., bq, bk) and their values into the state.

    state = (row_max, row_sum, acc): (..., bq, 1), (..., bq, 1) and the
    unnormalised output (..., bq, dv) over the keys seen so far.
    """
    row_max, row_sum, acc = state
    # m' = max(m, max_j s_j)
    new_max = torch.maximum(row_max, s.amax(dim=-1, keepdim=True))
    # a row with no allowed key yet has max -inf: shift it by 0
    shift = torch.where(new_max.isneginf(), 0.0, new_max)  # (..., bq, 1)
    # alpha = exp(m - m') rescales what was summed under the old max
    alpha = torch.exp(row_max - shift)  # (..., bq, 1)
    p = torch.exp(s - shift)  # (..., bq, bk); blocked keys give exactly 0
    # l' = alpha l + sum_j exp(s_j - m')
    row_sum = alpha * row_sum + p.sum(dim=-1, keepdim=True)
    # O' = alpha O + P V
    acc = alpha * acc + p @ v_block  # (..., bq, dv)
    return new_max, row_sum, acc
    # --8<-- [end:online-softmax-update-torch]


# --8<-- [start:tile-mask-torch]
def tile_mask_torch(mask, q_pos, k_pos, rows, cols, mask_rule=None):
    """The blocked (True) entries of one tile, or None if none can be.

    mask is broadcast to (..., Tq, Tk) or None; q_pos and k_pos are
    the positions (None unless causal or a mask_rule); rows, cols slice
    the tile. mask_rule(query_positions, key_positions) -> blocked sees
    the tile's positions only; without one, causal blocks later keys.
    """
    tile = None if mask is None else mask[..., rows, cols]  # (..., bq, bk)
    if q_pos is not None:  # a rule of positions: mask_rule, or causal
        rule = mask_rule or torch_ref.causal_mask_for_positions
        blocked = rule(q_pos[rows], k_pos[cols])  # (bq, bk)
        tile = blocked if tile is None else tile | blocked
    return tile
    # --8<-- [end:tile-mask-torch]


# --8<-- [start:tiled-attention-torch]
def tiled_attention_torch(
    q,
    k,
    v,
    mask=None,
    causal=False,
    query_positions=None,
    key_positions=None,
    block_q=BLOCK,
    block_k=BLOCK,
    return_lse=False,
    empty_rows="raise",
    mask_rule=None,
    *,
    scale=None,
    softcap=None,
    bias=None,
    sinks=None,
):
    """torch_ref.attention's output, one (block_q, block_k) tile at a time.

    q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv); mask True = blocked.
    causal blocks later key positions; by default the queries are the
    last Tq of the Tk positions, as with a KV cache. Returns (..., Tq, dv),
    and with return_lse the log-sum-exp of each score row, (..., Tq).
    k and v may have fewer heads than q, as in torch_ref.attention. A
    row with no allowed key is refused, or with empty_rows="zero" gets
    output 0 and L = +inf (flash-attn's convention).
    mask_rule(query_positions, key_positions) -> blocked, e.g.
    functools.partial(sliding_window_mask, window=256), is evaluated
    per tile at those positions; a tile it blocks whole is skipped.
    scale, softcap, bias and sinks as in torch_ref.attention; the sink
    enters each row's running max and sum once, before the first tile.
    """
    mask = check.tiled_attention_torch(
        q,
        k,
        v,
        mask,
        empty_rows,
        block_q,
        block_k,
        mask_rule,
        scale,
        softcap,
        bias,
        sinks,
    )  # as torch_ref.attention checks them; blocks >= 1, a callable rule
    k, v, mask, q_pos, k_pos, rule, mod = _prepare_torch(
        q,
        k,
        v,
        mask,
        causal,
        query_positions,
        key_positions,
        mask_rule,
        (scale, softcap, bias, sinks),
    )  # k, v with H heads; positions; mask also where bias is -inf
    return _tiled_torch(
        q,
        k,
        v,
        mask,
        causal,
        q_pos,
        k_pos,
        rule,
        mod,
        block_q,
        block_k,
        return_lse,
        empty_rows,
    )


def _prepare_torch(
    q, k, v, mask, causal, query_positions, key_positions, mask_rule, mods
):
    # as _prepare_numpy; the sinks in the compute dtype (float32 at least)
    scale, softcap, bias, sinks = mods
    group = torch_ref.kv_group(q.shape, k.shape)  # G = H // H_kv
    if group > 1:  # query head h reads key/value head h // G
        k = torch_ref.repeat_kv_heads(k, group)  # (..., H, Tk, d)
        v = torch_ref.repeat_kv_heads(v, group)  # (..., H, Tk, dv)
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    lead, tq, tk = tuple(lead), q.shape[-2], k.shape[-2]
    rule = _position_rule(mask_rule, causal, lead, torch_ref)  # or None
    ruled = causal or rule is not None  # blocked by positions
    as_tensor = _as_tensor_on(q.device)
    q_pos, k_pos = positions(
        ruled, query_positions, key_positions, tq, tk, as_tensor, rule
    )
    wide = torch.promote_types(q.dtype, torch.float32)
    if bias is not None:
        bias = bias.expand(*lead, tq, tk)  # checked, a view
        if bool(bias.isneginf().any()):  # a bias of -inf blocks its key
            by_bias = bias.isneginf()  # (..., Tq, Tk)
            mask = by_bias if mask is None else mask | by_bias
    sinks = None if sinks is None else sinks.to(wide)
    mod = torch_ref.ScoreMod(scale, softcap, bias, sinks)  # attention's
    return k, v, mask, q_pos, k_pos, rule, mod


def _tiled_torch(
    q,
    k,
    v,
    mask,
    causal,
    q_pos,
    k_pos,
    rule,
    mod,
    block_q,
    block_k,
    return_lse,
    empty_rows,
):
    # tiled_attention_torch behind its guard, on the prepared inputs
    lead = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    lead, tq, tk, dv = tuple(lead), q.shape[-2], k.shape[-2], v.shape[-1]
    # max, sum and output in float32 whatever the input dtype (float64
    # stays), as FlashAttention keeps them; cast once, at the end
    wide = torch.promote_types(q.dtype, torch.float32)
    kw = {"dtype": wide, "device": q.device}
    sinks = mod.sinks
    out_blocks, lse_blocks = [], []
    for i in range(0, tq, block_q):
        rows = slice(i, i + block_q)
        bq = min(block_q, tq - i)  # the last block may be shorter
        state = (
            torch.full((*lead, bq, 1), -math.inf, **kw),  # running max
            torch.zeros((*lead, bq, 1), **kw),  # running sum
            torch.zeros((*lead, bq, dv), **kw),
        )  # unnormalised output
        if sinks is not None:  # the sink: one more score per row, no value
            sink = mod.sink_logits((*lead, bq, 1))  # (..., bq, 1)
            no_value = torch.zeros((*lead, 1, dv), **kw)
            state = online_softmax_update_torch(state, sink, no_value)
        # --8<-- [start:tiled-key-loop-torch]
        q_i = q[..., rows, :].to(wide)  # (..., bq, d)
        for j in range(0, tk, block_k):
            cols = slice(j, j + block_k)
            if causal and k_pos[cols].min() > q_pos[rows].max():
                continue  # the whole tile lies in the future
            tile = tile_mask_torch(mask, q_pos, k_pos, rows, cols, rule)
            if rule is not None and tile.all():
                continue  # the rule blocks every pair: skip the tile
            k_j, v_j = k[..., cols, :].to(wide), v[..., cols, :].to(wide)
            # S_ij = Q_i K_j^T / sqrt(d_k), modified, then masked; in
            # float32 for fp16 and bf16
            s = mod.scores(q_i, k_j, rows, cols)  # (..., bq, bk)
            s = torch_ref.apply_mask(s, tile)  # (..., bq, bk)
            state = online_softmax_update_torch(state, s, v_j)
        # --8<-- [end:tiled-key-loop-torch]
        row_max, row_sum, acc = state
        # NaN or +inf: q @ k^T overflowed; -inf: no key allowed (or lost)
        check_row_max(row_max, rows, mask, q_pos, k_pos, empty_rows, rule)
        # a row with no key (empty_rows="zero") has m = -inf and l = 0:
        # o = 0, and L = +inf makes the backward's exp(S - L) 0 as well
        empty = row_max.isneginf()  # (..., bq, 1)
        row_sum = torch.where(empty, 1.0, row_sum)
        # o = O / l
        out_blocks.append(acc / row_sum)  # (..., bq, dv)
        # L = m + log(l), all the backward needs of this row's softmax
        lse = torch.where(empty, math.inf, row_max + row_sum.log())
        lse_blocks.append(lse[..., 0])  # (..., bq)
    out = torch.cat(out_blocks, dim=-2).to(q.dtype)  # (..., Tq, dv)
    if return_lse:  # L stays in float32, as FlashAttention saves it
        return out, torch.cat(lse_blocks, dim=-1)  # (..., Tq)
    return out
    # --8<-- [end:tiled-attention-torch]


def _as_tensor_on(device):
    def as_tensor(positions):
        return torch.as_tensor(positions, device=device)

    return as_tensor


# --8<-- [start:backward-tile-numpy]
def backward_tile_numpy(
    q_i,
    k_j,
    v_j,
    dout_i,
    lse_i,
    delta_i,
    tile,
    scale=None,
    softcap=None,
    bias=None,
):
    """One tile's shares of dq_i, dk_j and dv_j, from the saved L and D.

    q_i (..., bq, d), k_j (..., bk, d), v_j (..., bk, d_v), dout_i
    (..., bq, d_v); lse_i and delta_i (..., bq, 1); tile: blocked or None.
    scale, softcap and the tile's bias (..., bq, bk) as the forward's.
    """
    mod = numpy_ref.ScoreMod(scale, softcap, bias)  # the forward's
    # S_ij = Q_i K_j^T / sqrt(d_k), modified and masked as the forward
    s = numpy_ref.apply_mask(mod.scores(q_i, k_j), tile)  # (..., bq, bk)
    # --8<-- [start:backward-tile-products-numpy]
    # P_ij = exp(S_ij - L_i): the forward's weights, without a softmax
    p = np.exp(s - lse_i)  # (..., bq, bk); blocked keys give exactly 0
    # dV_j += P_ij^T dO_i
    dv_j = np.swapaxes(p, -2, -1) @ dout_i  # (..., bk, d_v)
    # dP_ij = dO_i V_j^T
    dp = dout_i @ np.swapaxes(v_j, -2, -1)  # (..., bq, bk)
    # dS_ij = P_ij * (dP_ij - D_i): D_i stands in for rowsum(dP * P)
    ds = p * (dp - delta_i)  # (..., bq, bk)
    # back through the soft-cap and the scale, as attention_backward
    ds = mod.scores_backward(ds, q_i, k_j)  # (..., bq, bk)
    # dQ_i += dS_ij K_j / sqrt(d_k): ds holds the 1 / sqrt(d_k) now
    dq_i = ds @ k_j  # (..., bq, d)
    # dK_j += dS_ij^T Q_i / sqrt(d_k)
    dk_j = np.swapaxes(ds, -2, -1) @ q_i  # (..., bk, d)
    return dq_i, dk_j, dv_j
    # --8<-- [end:backward-tile-products-numpy]
    # --8<-- [end:backward-tile-numpy]


# --8<-- [start:tiled-attention-backward-numpy]
def tiled_attention_backward_numpy(
    q,
    k,
    v,
    dout,
    mask=None,
    causal=False,
    query_positions=None,
    key_positions=None,
    block_q=BLOCK,
    block_k=BLOCK,
    empty_rows="raise",
    mask_rule=None,
    *,
    scale=None,
    softcap=None,
    bias=None,
    sinks=None,
):
    """dq, dk, dv of tiled_attention_numpy, one tile at a time.

    Arguments as tiled_attention_numpy's, plus dout = dL/dO (..., Tq, d_v).
    The forward keeps only O and one log-sum-exp L per query row; every
    tile's weights are recomputed from L, so no (Tq, Tk) array exists.
    The gradients come back in the forward's dtype (at least float32),
    and dsinks (H,) as a fourth value when sinks is given.
    """
    q, k, v, dout, mask, bias, sinks = check.tiled_attention_backward_numpy(
        q,
        k,
        v,
        dout,
        mask,
        empty_rows,
        block_q,
        block_k,
        mask_rule,
        scale,
        softcap,
        bias,
        sinks,
    )  # as the forward's door, and dout (..., Tq, d_v) in q's dtype
    group = numpy_ref.kv_group(q.shape, k.shape)  # G = H // H_kv
    k, v, mask, q_pos, k_pos, rule, mod = _prepare_numpy(
        q,
        k,
        v,
        mask,
        causal,
        query_positions,
        key_positions,
        mask_rule,
        (scale, softcap, bias, sinks),
    )  # k, v with H heads; positions read once; bias -inf blocks
    # --8<-- [start:tiled-backward-saved-numpy]
    # the forward saves O (..., Tq, d_v) and L (..., Tq), nothing more
    out, lse = _tiled_numpy(
        q,
        k,
        v,
        mask,
        causal,
        q_pos,
        k_pos,
        rule,
        mod,
        block_q,
        block_k,
        True,  # return_lse: L as well as O
        empty_rows,
    )  # the forward behind its guard
    # D = rowsum(dO * O), equal to rowsum(dP * P) and found in O(T d)
    delta = np.sum(dout * out, axis=-1, keepdims=True)  # (..., Tq, 1)
    lse = lse[..., None]  # (..., Tq, 1)
    # --8<-- [end:tiled-backward-saved-numpy]
    *lead, tq, _ = out.shape
    tk, bias = k.shape[-2], mod.bias  # bias: (..., Tq, Tk), a view
    # --8<-- [start:tiled-backward-loop-numpy]
    dq = np.zeros((*lead, tq, q.shape[-1]), out.dtype)  # (..., Tq, d)
    dk = np.zeros((*lead, tk, k.shape[-1]), out.dtype)  # (..., Tk, d)
    dv = np.zeros((*lead, tk, v.shape[-1]), out.dtype)  # (..., Tk, d_v)
    for j in range(0, tk, block_k):  # each key block owns its dK_j, dV_j
        cols = slice(j, j + block_k)
        for i in range(0, tq, block_q):
            rows = slice(i, i + block_q)
            if causal and k_pos[cols].min() > q_pos[rows].max():
                continue  # the whole tile lies in the future: P = 0
            tile = tile_mask_numpy(mask, q_pos, k_pos, rows, cols, rule)
            if rule is not None and tile.all():
                continue  # the rule blocks every pair: P = 0
            dq_i, dk_j, dv_j = backward_tile_numpy(
                q[..., rows, :],
                k[..., cols, :],
                v[..., cols, :],
                dout[..., rows, :],
                lse[..., rows, :],
                delta[..., rows, :],
                tile,
                scale,
                softcap,
                None if bias is None else bias[..., rows, cols],
            )
            dq[..., rows, :] += dq_i  # (..., bq, d)
            dk[..., cols, :] += dk_j  # (..., bk, d)
            dv[..., cols, :] += dv_j  # (..., bk, d_v)
    # --8<-- [end:tiled-backward-loop-numpy]
    # a batch dim that q, k or v shared (broadcast) sums its gradients
    dq, dk, dv = (
        numpy_ref.sum_to_shape(g, x.shape)
        for g, x in ((dq, q), (dk, k), (dv, v))
    )
    if group > 1:  # a key/value head served G query heads: add them up
        dk = numpy_ref.sum_kv_heads(dk, group)  # (..., H_kv, Tk, d)
        dv = numpy_ref.sum_kv_heads(dv, group)  # (..., H_kv, Tk, d_v)
    if sinks is None:
        return dq, dk, dv
    # the sink's weight exp(s_h - L) per row; its dP is 0 (no value)
    sink = np.asarray(sinks, out.dtype)[:, None, None]  # (H, 1, 1)
    mod = numpy_ref.ScoreMod(sinks=sinks)
    return dq, dk, dv, mod.sinks_backward(np.exp(sink - lse), delta)  # (H,)
    # --8<-- [end:tiled-attention-backward-numpy]


# --8<-- [start:backward-tile-torch]
def backward_tile_torch(
    q_i,
    k_j,
    v_j,
    dout_i,
    lse_i,
    delta_i,
    tile,
    scale=None,
    softcap=None,
    bias=None,
):
    """One tile's shares of dq_i, dk_j and dv_j, from the saved L and D.

    q_i (..., bq, d), k_j (..., bk, d), v_j (..., bk, d_v), dout_i
    (..., bq, d_v); lse_i and delta_i (..., bq, 1); tile: blocked or None.
    scale, softcap and the tile's bias (..., bq, bk) as the forward's.
    """
    mod = torch_ref.ScoreMod(scale, softcap, bias)  # the forward's
    # S_ij = Q_i K_j^T / sqrt(d_k), modified and masked as the forward
    s = torch_ref.apply_mask(mod.scores(q_i, k_j), tile)  # (..., bq, bk)
    # --8<-- [start:backward-tile-products-torch]
    # P_ij = exp(S_ij - L_i): the forward's weights, without a softmax
    p = torch.exp(s - lse_i)  # (..., bq, bk); blocked keys give exactly 0
    # dV_j += P_ij^T dO_i
    dv_j = p.transpose(-2, -1) @ dout_i  # (..., bk, d_v)
    # dP_ij = dO_i V_j^T
    dp = dout_i @ v_j.transpose(-2, -1)  # (..., bq, bk)
    # dS_ij = P_ij * (dP_ij - D_i): D_i stands in for rowsum(dP * P)
    ds = p * (dp - delta_i)  # (..., bq, bk)
    # back through the soft-cap and the scale, as attention_backward
    ds = mod.scores_backward(ds, q_i, k_j)  # (..., bq, bk)
    # dQ_i += dS_ij K_j / sqrt(d_k): ds holds the 1 / sqrt(d_k) now
    dq_i = ds @ k_j  # (..., bq, d)
    # dK_j += dS_ij^T Q_i / sqrt(d_k)
    dk_j = ds.transpose(-2, -1) @ q_i  # (..., bk, d)
    return dq_i, dk_j, dv_j
    # --8<-- [end:backward-tile-products-torch]
    # --8<-- [end:backward-tile-torch]


# --8<-- [start:tiled-attention-backward-torch]
def tiled_attention_backward_torch(
    q,
    k,
    v,
    dout,
    mask=None,
    causal=False,
    query_positions=None,
    key_positions=None,
    block_q=BLOCK,
    block_k=BLOCK,
    empty_rows="raise",
    mask_rule=None,
    *,
    scale=None,
    softcap=None,
    bias=None,
    sinks=None,
):
    """dq, dk, dv of tiled_attention_torch, one tile at a time.

    Arguments as tiled_attention_torch's, plus dout = dL/dO (..., Tq, d_v).
    The forward keeps only O and one log-sum-exp L per query row; every
    tile's weights are recomputed from L, so no (Tq, Tk) tensor exists.
    Low-precision inputs compute in float32, cast once at the end; with
    sinks, dsinks (H,) comes as a fourth value, in sinks' dtype.
    """
    mask = check.tiled_attention_backward_torch(
        q,
        k,
        v,
        dout,
        mask,
        empty_rows,
        block_q,
        block_k,
        mask_rule,
        scale,
        softcap,
        bias,
        sinks,
    )  # as the forward's door, and dout (..., Tq, d_v) on q's device
    group = torch_ref.kv_group(q.shape, k.shape)  # G = H // H_kv
    # fp16 and bf16 compute in float32, as the forward; float64 stays
    dtype, acc = q.dtype, torch.promote_types(q.dtype, torch.float32)
    q, k, v, dout = q.to(acc), k.to(acc), v.to(acc), dout.to(acc)
    k, v, mask, q_pos, k_pos, rule, mod = _prepare_torch(
        q,
        k,
        v,
        mask,
        causal,
        query_positions,
        key_positions,
        mask_rule,
        (scale, softcap, bias, sinks),
    )  # k, v with H heads; positions read once; bias -inf blocks
    # --8<-- [start:tiled-backward-saved-torch]
    # the forward saves O (..., Tq, d_v) and L (..., Tq), nothing more
    out, lse = _tiled_torch(
        q,
        k,
        v,
        mask,
        causal,
        q_pos,
        k_pos,
        rule,
        mod,
        block_q,
        block_k,
        True,  # return_lse: L as well as O
        empty_rows,
    )  # the forward behind its guard
    # D = rowsum(dO * O), equal to rowsum(dP * P) and found in O(T d)
    delta = (dout * out).sum(dim=-1, keepdim=True)  # (..., Tq, 1)
    lse = lse[..., None]  # (..., Tq, 1)
    # --8<-- [end:tiled-backward-saved-torch]
    *lead, tq, _ = out.shape
    tk, bias = k.shape[-2], mod.bias  # bias: (..., Tq, Tk), a view
    if bias is not None:
        bias = bias.to(acc)  # the tiles compute in acc
    # --8<-- [start:tiled-backward-loop-torch]
    kw = {"dtype": acc, "device": q.device}
    dq = torch.zeros((*lead, tq, q.shape[-1]), **kw)  # (..., Tq, d)
    dk = torch.zeros((*lead, tk, k.shape[-1]), **kw)  # (..., Tk, d)
    dv = torch.zeros((*lead, tk, v.shape[-1]), **kw)  # (..., Tk, d_v)
    for j in range(0, tk, block_k):  # each key block owns its dK_j, dV_j
        cols = slice(j, j + block_k)
        for i in range(0, tq, block_q):
            rows = slice(i, i + block_q)
            if causal and k_pos[cols].min() > q_pos[rows].max():
                continue  # the whole tile lies in the future: P = 0
            tile = tile_mask_torch(mask, q_pos, k_pos, rows, cols, rule)
            if rule is not None and tile.all():
                continue  # the rule blocks every pair: P = 0
            dq_i, dk_j, dv_j = backward_tile_torch(
                q[..., rows, :],
                k[..., cols, :],
                v[..., cols, :],
                dout[..., rows, :],
                lse[..., rows, :],
                delta[..., rows, :],
                tile,
                scale,
                softcap,
                None if bias is None else bias[..., rows, cols],
            )
            dq[..., rows, :] += dq_i  # (..., bq, d)
            dk[..., cols, :] += dk_j  # (..., bk, d)
            dv[..., cols, :] += dv_j  # (..., bk, d_v)
    # --8<-- [end:tiled-backward-loop-torch]
    # a batch dim that q, k or v shared (broadcast) sums its gradients
    dq, dk, dv = (
        g.sum_to_size(x.shape) for g, x in ((dq, q), (dk, k), (dv, v))
    )
    if group > 1:  # a key/value head served G query heads: add them up
        dk = torch_ref.sum_kv_heads(dk, group)  # (..., H_kv, Tk, d)
        dv = torch_ref.sum_kv_heads(dv, group)  # (..., H_kv, Tk, d_v)
    grads = dq.to(dtype), dk.to(dtype), dv.to(dtype)  # cast once, at the end
    if sinks is None:
        return grads
    # the sink's weight exp(s_h - L) per row; its dP is 0 (no value)
    sink = sinks.to(acc).view(-1, 1, 1)  # (H, 1, 1)
    mod = torch_ref.ScoreMod(sinks=sinks)
    dsinks = mod.sinks_backward(torch.exp(sink - lse), delta)  # (H,)
    return (*grads, dsinks.to(sinks.dtype))
    # --8<-- [end:tiled-attention-backward-torch]


# --8<-- [start:tiles-computed]
def tiles_computed(
    mask_rule, query_positions, key_positions, block_q=BLOCK, block_k=BLOCK
):
    """(computed, total): the tiles a tiled pass under mask_rule computes.

    The loop skips a tile when the rule blocks every pair in it, as
    FlexAttention's BlockMask skips an empty block; computed / total
    is the share of the score matrix's arithmetic that is done.
    """
    q_pos, k_pos = check.tiles_computed(
        mask_rule, query_positions, key_positions, block_q, block_k
    )  # 1-D arrays, a callable rule, blocks >= 1
    computed = total = 0
    for i in range(0, len(q_pos), block_q):
        for j in range(0, len(k_pos), block_k):
            q_tile, k_tile = q_pos[i : i + block_q], k_pos[j : j + block_k]
            blocked = mask_rule(q_tile, k_tile)  # (bq, bk), True = blocked
            rule_tile(blocked, (len(q_tile), len(k_tile)))
            computed += not bool(blocked.all())
            total += 1
    return computed, total
    # --8<-- [end:tiles-computed]
