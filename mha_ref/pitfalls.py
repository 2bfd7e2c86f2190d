"""The six mistakes of a from-scratch implementation, as runnable code.

Each ``wrong_*`` function is the mistake; the page shows it beside the
correct section of numpy_ref.py / torch_ref.py, and the page scripts
measure the symptom. Nothing here is used by the references themselves.
A seventh, low-precision mistake (a tiled pass kept in fp16 or bf16,
running statistics included) is at the end, for the page on masks and
precision; after it, two mistakes of decoding with a KV cache and
grouped key/value heads.
"""

import math

import numpy as np
import torch

from mha_ref import numpy_ref, tiled, torch_ref


# --8<-- [start:wrong-split]
def wrong_split_heads(x, n_head):
    """Reshapes (B, T, d_model) straight to (B, H, T, dh): no error,
    right shape, but each "head" mixes rows of unrelated positions."""
    b, t, d_model = x.shape
    return x.reshape(b, n_head, t, d_model // n_head)  # (B, H, T, dh)?
    # --8<-- [end:wrong-split]


# --8<-- [start:wrong-scale]
def wrong_scale_scores(q, k, d_model):
    """Divides by sqrt(d_model) instead of sqrt(d_head): too flat."""
    return q @ np.swapaxes(k, -2, -1) / np.sqrt(d_model)
    # --8<-- [end:wrong-scale]


# --8<-- [start:wrong-mask-after]
def wrong_mask_after_softmax(scores, mask, renormalise=False):
    """Softmax over every key, then zero the blocked weights."""
    weights = numpy_ref.softmax(scores)  # blocked keys took their share
    weights = np.where(mask, 0.0, weights)  # rows now sum to < 1
    if renormalise:  # right in exact maths; the sum can round to 0 (underflow)
        weights = weights / weights.sum(axis=-1, keepdims=True)
    return weights
    # --8<-- [end:wrong-mask-after]


# --8<-- [start:wrong-axis]
def wrong_softmax_axis(scores):
    """Normalises over queries (axis -2): columns sum to 1, rows don't."""
    return numpy_ref.softmax(scores, axis=-2)
    # --8<-- [end:wrong-axis]


# --8<-- [start:wrong-merge]
def wrong_merge_heads(out):
    """Reshapes (B, H, T, dh) to (B, T, d_model) without the transpose."""
    b, h, t, dh = out.shape
    return out.reshape(b, t, h * dh)  # interleaves positions and heads
    # --8<-- [end:wrong-merge]


# --8<-- [start:wrong-layout]
def wrong_copy_from_linear(linear_weight):
    """Copies nn.Linear's (out, in) weight as if it were x @ W's (in, out)."""
    return np.array(linear_weight)  # missing .T
    # --8<-- [end:wrong-layout]


# --8<-- [start:wrong-statistics-dtype]
def wrong_tiled_statistics_dtype(q, k, v, block_k=64):
    """The tiled pass with its running max, sum and output kept in the
    input dtype (fp16, bf16) instead of float32: the sum overflows or
    stops growing. Its scores, P and P V are in the input dtype too.
    q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv)."""
    *lead, tq, d = q.shape
    low = {"dtype": q.dtype, "device": q.device}  # the mistake
    state = (
        torch.full((*lead, tq, 1), -math.inf, **low),  # running max
        torch.zeros((*lead, tq, 1), **low),  # running sum
        torch.zeros((*lead, tq, v.shape[-1]), **low),  # output
    )
    for j in range(0, k.shape[-2], block_k):
        k_j, v_j = k[..., j : j + block_k, :], v[..., j : j + block_k, :]
        s = q @ k_j.transpose(-2, -1) / math.sqrt(d)  # (..., Tq, bk)
        state = tiled.online_softmax_update_torch(state, s, v_j)
    _, row_sum, acc = state
    return acc / row_sum  # (..., Tq, dv)
    # --8<-- [end:wrong-statistics-dtype]


# --8<-- [start:wrong-rope-positions]
def wrong_cached_step(module, cache, x):
    """kv_cache.cached_step with RoPE positions counted from the chunk.

    Each chunk is rotated as if it began at position 0, so the keys it
    caches carry the wrong angles. The mask still uses true positions.
    """
    start = cache.length  # absolute position of the chunk's first row
    positions = torch.arange(start, start + x.shape[1], device=x.device)
    restart = torch.arange(x.shape[1], device=x.device)  # 0 .. Tc - 1
    q, k, v = module.project(x, positions=restart)  # the mistake
    keys, values = cache.extended(k, v)  # keys rotated at wrong angles
    key_positions = torch.arange(keys.shape[-2], device=x.device)
    blocked = torch_ref.causal_mask_for_positions(
        positions, key_positions
    )  # (Tc, T): True where a key comes after the query
    out, _ = torch_ref.attention(q, keys, values, blocked)
    y = module.wo(module.merge_heads(out))  # (B, Tc, d_model)
    cache.keys, cache.values = keys, values  # kept, for good
    return y
    # --8<-- [end:wrong-rope-positions]


# --8<-- [start:wrong-tile-kv-heads]
def wrong_tile_kv_heads(x, group):
    """Tiles the key/value heads [a, b, a, b] instead of [a, a, b, b].

    x (B, H_kv, T, d): query head h then reads head h % H_kv, not
    h // group as SDPA's enable_gqa=True. No error, a wrong answer.
    """
    return x.repeat(1, group, 1, 1)  # (B, H_kv * G, T, d)
    # --8<-- [end:wrong-tile-kv-heads]
