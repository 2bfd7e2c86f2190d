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

from mha_ref import checks, numpy_ref, torch_ref

BLOCK = 64  # default block_q and block_k


def check_inputs(q_shape, k_shape, v_shape, block_q, block_k):
    """Check shapes and block sizes; return (lead, Tq, Tk, dv)."""
    lead = checks.qkv_shapes(q_shape, k_shape, v_shape)
    for name, value in (("block_q", block_q), ("block_k", block_k)):
        checks.integer(value, name)
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    tq, tk = q_shape[-2], k_shape[-2]
    if tq < 1 or tk < 1:
        raise ValueError(
            f"need at least one query and one key, got Tq={tq}, Tk={tk}"
        )
    return tuple(lead), tq, tk, v_shape[-1]


def check_positions(q_pos, k_pos, tq, tk):
    """One position per query and per key, as 1-D sequences."""
    for name, pos, t in (("query_positions", q_pos, tq),
                         ("key_positions", k_pos, tk)):
        if tuple(pos.shape) != (t,):
            raise ValueError(
                f"{name} must have shape ({t},), one per row, "
                f"got {tuple(pos.shape)}"
            )


def positions(causal, query_positions, key_positions, tq, tk, as_array):
    """Query and key positions for the causal mask, or (None, None).

    By default the Tq queries are the last of the Tk positions.
    """
    if not causal:
        if query_positions is not None or key_positions is not None:
            raise ValueError(
                "query_positions and key_positions need causal=True"
            )
        return None, None
    if query_positions is None:
        query_positions = range(tk - tq, tk)
    if key_positions is None:
        key_positions = range(tk)
    q_pos, k_pos = as_array(query_positions), as_array(key_positions)
    check_positions(q_pos, k_pos, tq, tk)
    return q_pos, k_pos


def check_row_max(row_max, lead, tq, start):
    """Raise if a query row of this block overflowed or saw no key.

    row_max: NumPy (..., bq, 1), the rows from ``start`` on. NaN or +inf
    means q @ k^T overflowed (as numpy_ref.softmax refuses); -inf means
    every key was blocked.
    """
    row_max = row_max[..., 0]  # (..., bq)
    overflow = np.isnan(row_max) | np.isposinf(row_max)
    if np.any(overflow):
        *batch, row = checks.first_index(overflow)
        raise ValueError(
            f"scores of query row at index {(*batch, start + row)} hold "
            f"{row_max[overflow][0]}: q @ k^T overflowed; use smaller "
            "inputs"
        )
    no_key = np.isneginf(row_max)
    if np.any(no_key):
        rows = np.zeros((*lead, tq), dtype=bool)
        rows[..., start:start + no_key.shape[-1]] = no_key
        checks.every_row_has_a_key(rows)


# --8<-- [start:online-softmax-update-numpy]
def online_softmax_update_numpy(state, s, v_block):
    """Fold scores s (..., bq, bk) and their values into the state.

    state = (row_max, row_sum, acc): (..., bq, 1), (..., bq, 1) and the
    unnormalised output (..., bq, dv) over the keys seen so far.
    """
    row_max, row_sum, acc = state
    # $m' = \max(m, \max_j s_j)$
    new_max = np.maximum(row_max, s.max(axis=-1, keepdims=True))
    # a row with no allowed key yet has max -inf: shift it by 0
    shift = np.where(np.isneginf(new_max), 0.0, new_max)  # (..., bq, 1)
    # $\alpha = e^{m - m'}$ rescales what was summed under the old max
    alpha = np.exp(row_max - shift)  # (..., bq, 1)
    p = np.exp(s - shift)  # (..., bq, bk); blocked keys give exactly 0
    # $\ell' = \alpha \ell + \sum_j e^{s_j - m'}$
    row_sum = alpha * row_sum + p.sum(axis=-1, keepdims=True)
    # $O' = \alpha O + P V$
    acc = alpha * acc + p @ v_block  # (..., bq, dv)
    return new_max, row_sum, acc
# --8<-- [end:online-softmax-update-numpy]


# --8<-- [start:tile-mask-numpy]
def tile_mask_numpy(mask, q_pos, k_pos, rows, cols):
    """The blocked (True) entries of one tile, or None if none can be.

    mask is broadcast to (..., Tq, Tk) or None; q_pos and k_pos are
    the positions (None unless causal); rows, cols slice the tile.
    """
    tile = None if mask is None else mask[..., rows, cols]  # (..., bq, bk)
    if q_pos is not None:  # causal: keys after the query are blocked
        future = numpy_ref.causal_mask_for_positions(
            q_pos[rows], k_pos[cols]
        )  # (bq, bk)
        tile = future if tile is None else tile | future
    return tile
# --8<-- [end:tile-mask-numpy]


# --8<-- [start:tiled-attention-numpy]
def tiled_attention_numpy(q, k, v, mask=None, causal=False,
                          query_positions=None, key_positions=None,
                          block_q=BLOCK, block_k=BLOCK):
    """numpy_ref.attention's output, one (block_q, block_k) tile at a time.

    q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv); mask True = blocked.
    causal blocks later key positions; by default the queries are the
    last Tq of the Tk positions, as with a KV cache. Returns (..., Tq, dv).
    """
    lead, tq, tk, dv = check_inputs(q.shape, k.shape, v.shape,
                                    block_q, block_k)
    for name, array in (("q", q), ("k", k), ("v", v)):
        checks.finite(array, name)
    if mask is not None:
        mask = np.asarray(mask)
        checks.mask_dtype(mask.dtype.kind)
        checks.mask_shape(mask.shape, (*lead, tq, tk))
        mask = np.broadcast_to(mask, (*lead, tq, tk))  # a view, no copy
    q_pos, k_pos = positions(causal, query_positions, key_positions,
                             tq, tk, np.asarray)
    dtype = np.result_type(q.dtype, k.dtype, v.dtype, np.float32)
    d = q.shape[-1]  # the head size d_k
    out_blocks = []
    for i in range(0, tq, block_q):
        rows = slice(i, i + block_q)
        bq = min(block_q, tq - i)  # the last block may be shorter
        state = (np.full((*lead, bq, 1), -np.inf, dtype),  # running max
                 np.zeros((*lead, bq, 1), dtype),  # running sum
                 np.zeros((*lead, bq, dv), dtype))  # unnormalised output
        for j in range(0, tk, block_k):
            cols = slice(j, j + block_k)
            if causal and k_pos[cols].min() > q_pos[rows].max():
                continue  # the whole tile lies in the future
            # $S_{ij} = Q_i K_j^\top / \sqrt{d_k}$
            s = q[..., rows, :] @ np.swapaxes(k[..., cols, :], -2, -1)
            s = s / math.sqrt(d)  # (..., bq, bk)
            tile = tile_mask_numpy(mask, q_pos, k_pos, rows, cols)
            if tile is not None:
                s = np.where(tile, -np.inf, s)  # before the softmax
            state = online_softmax_update_numpy(state, s, v[..., cols, :])
        row_max, row_sum, acc = state
        # NaN or +inf: q @ k^T overflowed; -inf: every key was blocked
        check_row_max(row_max, lead, tq, i)
        # $o = O / \ell$
        out_blocks.append(acc / row_sum)  # (..., bq, dv)
    return np.concatenate(out_blocks, axis=-2)  # (..., Tq, dv)
# --8<-- [end:tiled-attention-numpy]


# --8<-- [start:online-softmax-update-torch]
def online_softmax_update_torch(state, s, v_block):
    """Fold scores s (..., bq, bk) and their values into the state.

    state = (row_max, row_sum, acc): (..., bq, 1), (..., bq, 1) and the
    unnormalised output (..., bq, dv) over the keys seen so far.
    """
    row_max, row_sum, acc = state
    # $m' = \max(m, \max_j s_j)$
    new_max = torch.maximum(row_max, s.amax(dim=-1, keepdim=True))
    # a row with no allowed key yet has max -inf: shift it by 0
    shift = torch.where(new_max.isneginf(), 0.0, new_max)  # (..., bq, 1)
    # $\alpha = e^{m - m'}$ rescales what was summed under the old max
    alpha = torch.exp(row_max - shift)  # (..., bq, 1)
    p = torch.exp(s - shift)  # (..., bq, bk); blocked keys give exactly 0
    # $\ell' = \alpha \ell + \sum_j e^{s_j - m'}$
    row_sum = alpha * row_sum + p.sum(dim=-1, keepdim=True)
    # $O' = \alpha O + P V$
    acc = alpha * acc + p @ v_block  # (..., bq, dv)
    return new_max, row_sum, acc
# --8<-- [end:online-softmax-update-torch]


# --8<-- [start:tile-mask-torch]
def tile_mask_torch(mask, q_pos, k_pos, rows, cols):
    """The blocked (True) entries of one tile, or None if none can be.

    mask is broadcast to (..., Tq, Tk) or None; q_pos and k_pos are
    the positions (None unless causal); rows, cols slice the tile.
    """
    tile = None if mask is None else mask[..., rows, cols]  # (..., bq, bk)
    if q_pos is not None:  # causal: keys after the query are blocked
        future = torch_ref.causal_mask_for_positions(
            q_pos[rows], k_pos[cols]
        )  # (bq, bk)
        tile = future if tile is None else tile | future
    return tile
# --8<-- [end:tile-mask-torch]


# --8<-- [start:tiled-attention-torch]
def tiled_attention_torch(q, k, v, mask=None, causal=False,
                          query_positions=None, key_positions=None,
                          block_q=BLOCK, block_k=BLOCK):
    """torch_ref.attention's output, one (block_q, block_k) tile at a time.

    q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv); mask True = blocked.
    causal blocks later key positions; by default the queries are the
    last Tq of the Tk positions, as with a KV cache. Returns (..., Tq, dv).
    """
    lead, tq, tk, dv = check_inputs(q.shape, k.shape, v.shape,
                                    block_q, block_k)
    for name, tensor in (("q", q), ("k", k), ("v", v)):
        torch_ref.check_finite(tensor, name)
    if mask is not None:
        checks.mask_dtype("b" if mask.dtype == torch.bool else "f")
        checks.mask_shape(mask.shape, (*lead, tq, tk))
        mask = mask.expand(*lead, tq, tk)  # a view, no copy
    q_pos, k_pos = positions(causal, query_positions, key_positions,
                             tq, tk, _as_tensor_on(q.device))
    kw = dict(dtype=q.dtype, device=q.device)
    d = q.shape[-1]  # the head size d_k
    out_blocks = []
    for i in range(0, tq, block_q):
        rows = slice(i, i + block_q)
        bq = min(block_q, tq - i)  # the last block may be shorter
        state = (torch.full((*lead, bq, 1), -math.inf, **kw),  # running max
                 torch.zeros((*lead, bq, 1), **kw),  # running sum
                 torch.zeros((*lead, bq, dv), **kw))  # unnormalised output
        for j in range(0, tk, block_k):
            cols = slice(j, j + block_k)
            if causal and k_pos[cols].min() > q_pos[rows].max():
                continue  # the whole tile lies in the future
            # $S_{ij} = Q_i K_j^\top / \sqrt{d_k}$
            s = q[..., rows, :] @ k[..., cols, :].transpose(-2, -1)
            s = s / math.sqrt(d)  # (..., bq, bk)
            tile = tile_mask_torch(mask, q_pos, k_pos, rows, cols)
            if tile is not None:
                s = s.masked_fill(tile, -math.inf)  # before the softmax
            state = online_softmax_update_torch(state, s, v[..., cols, :])
        row_max, row_sum, acc = state
        # NaN or +inf: q @ k^T overflowed; -inf: every key was blocked
        check_row_max(row_max.detach().cpu().double().numpy(), lead, tq, i)
        # $o = O / \ell$
        out_blocks.append(acc / row_sum)  # (..., bq, dv)
    return torch.cat(out_blocks, dim=-2)  # (..., Tq, dv)
# --8<-- [end:tiled-attention-torch]


def _as_tensor_on(device):
    def as_tensor(positions):
        return torch.as_tensor(positions, device=device)
    return as_tensor
