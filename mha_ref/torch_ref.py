"""Multi-head attention in PyTorch, mirroring numpy_ref.py.

Device- and dtype-agnostic: everything follows its inputs (CUDA when the
reader has it). Masks are boolean with True = blocked; SDPA's boolean
mask means the opposite and is converted in ``sdpa_forward`` only.
"""

import importlib
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mha_ref.guards import torch_ref as check
from mha_ref.guards.tensors import finite_tensor, scores_no_overflow


# --8<-- [start:attention-scores]
def attention_scores(q, k):
    """Step 1, S = Q K^T / sqrt(d_k): how well each query fits each key.

    q (..., Tq, d), k (..., Tk, d) -> (..., Tq, Tk). No checks.
    """
    d = q.shape[-1]  # the head size d_k, not d_model
    return q @ k.transpose(-2, -1) / math.sqrt(d)  # (..., Tq, Tk)
    # --8<-- [end:attention-scores]


# --8<-- [start:apply-mask]
def apply_mask(scores, mask):
    """Step 2: a blocked score (mask True) becomes -inf; None blocks none.

    The softmax then gives it weight exactly 0. No checks.
    """
    if mask is None:
        return scores
    return scores.masked_fill(mask, float("-inf"))  # before the softmax
    # --8<-- [end:apply-mask]


# --8<-- [start:softmax-rows]
def softmax_rows(scores, axis=-1):
    """Step 3: each row of scores as weights >= 0 that sum to 1.

    -inf gets weight 0; a row of only -inf gets 0 everywhere (torch's
    softmax alone gives NaN there). No checks.
    """
    weights = scores.softmax(dim=axis)  # NaN in a row of only -inf
    empty = scores.isneginf().all(dim=axis, keepdim=True)  # no key
    return weights.masked_fill(empty, 0.0) if empty.any() else weights
    # --8<-- [end:softmax-rows]


# --8<-- [start:weighted-sum]
def weighted_sum(weights, v):
    """Step 4, O = A V: each output row mixes the value rows by weight.

    weights (..., Tq, Tk), v (..., Tk, dv) -> (..., Tq, dv). No checks.
    """
    return weights @ v  # (..., Tq, dv)
    # --8<-- [end:weighted-sum]


# --8<-- [start:dot-product-attention]
def dot_product_attention(q, k, v, mask=None):
    """q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv); True = blocked.

    Returns the output (..., Tq, dv) and the weights (..., Tq, Tk).
    """
    mask = check.dot_product_attention(q, k, v, mask)
    # skip on a first read: float16 (16-bit) is computed in float32 (32-bit)
    dtype = q.dtype  # inputs' number format (dtype), given back
    wide = torch.promote_types(dtype, torch.float32)  # float64 stays
    q, k, v = q.to(wide), k.to(wide), v.to(wide)
    scores = attention_scores(q, k)  # step 1: Q K^T / sqrt(d_k)
    scores = apply_mask(scores, mask)  # step 2: blocked keys get -inf
    weights = softmax_rows(scores)  # step 3: each row sums to 1
    out = weighted_sum(weights, v)  # step 4: O = A V
    return out.to(dtype), weights.to(dtype)  # back to the inputs' dtype
    # --8<-- [end:dot-product-attention]


# --8<-- [start:softmax-with-sinks]
def softmax_with_sinks(scores, sinks, empty_rows="raise"):
    """Softmax over the keys and one extra logit per head: the sink.

    scores (..., H, Tq, Tk), sinks (H,). The sink takes weight and has
    no value (gpt-oss), so a row's weights sum to 1 minus the sink's
    share; a row with every key masked puts all of it on the sink.
    A sink of -inf is no sink.
    """
    check.softmax_with_sinks(scores, sinks, empty_rows)  # (H,), no NaN
    return ScoreMod(sinks=sinks).softmax(scores)  # (..., H, Tq, Tk)
    # --8<-- [end:softmax-with-sinks]


# --8<-- [start:softmax-backward]
def softmax_backward(probabilities, upstream):
    """Gradient w.r.t. the scores s, given p = softmax(s) and dL/dp.

    The vector-Jacobian product J^T g, dL/ds_j = p_j (g_j - sum_k p_k g_k).
    """
    check.softmax_backward(probabilities, upstream)  # one shape
    p, g = probabilities, upstream
    # <p, g> = sum_k p_k g_k, one number per row
    weighted_mean = (p * g).sum(dim=-1, keepdim=True)
    return p * (g - weighted_mean)
    # --8<-- [end:softmax-backward]


# --8<-- [start:repeat-kv-heads]
def repeat_kv_heads(x, group):
    """Each key/value head ``group`` times in a row, on axis -3.

    (..., H_kv, T, d) -> (..., H_kv * group, T, d): query head h reads
    key/value head h // group, as SDPA's enable_gqa=True.
    repeat_interleave gives the heads [a, a, b, b]; x.repeat would give
    [a, b, a, b] and pair query heads with the wrong keys.

    >>> heads = torch.tensor([10, 20]).view(2, 1, 1)  # (H_kv, T, d)
    >>> repeat_kv_heads(heads, 2).flatten()
    tensor([10, 10, 20, 20])
    """
    return x.repeat_interleave(group, dim=-3)  # (..., H_kv * G, T, d)
    # --8<-- [end:repeat-kv-heads]


def kv_group(q_shape, k_shape):
    """G = H // H_kv: the query heads each key/value head serves.

    Heads are axis -3; 1 when there is nothing to group (the same
    heads, one head that broadcasts, no heads axis). Shapes as checked.
    """
    if min(len(q_shape), len(k_shape)) < 3:
        return 1  # no heads axis: plain broadcasting
    h, h_kv = q_shape[-3], k_shape[-3]
    return 1 if h_kv in (1, h) else h // h_kv


# --8<-- [start:score-mod]
class ScoreMod:
    """The score modifiers, written once for every pass that uses them.

    attention, attention_backward and the tiled passes (tiled.py) build
    one and call it: scale (None: 1 / sqrt(d_k)), softcap, then bias,
    in Gemma 2's order, before the mask; sinks (H,) in the softmax.
    The values come checked by the caller's guard; None changes nothing.
    As FlexAttention's score_mod, with its derivative beside it.
    """

    def __init__(self, scale=None, softcap=None, bias=None, sinks=None):
        self.scale, self.softcap = scale, softcap
        self.bias, self.sinks = bias, sinks

    def scaled(self, raw, d):
        # S = Q K^T / sqrt(d_k), or Q K^T * scale; dS alike, backward
        return raw / math.sqrt(d) if self.scale is None else raw * self.scale

    def scores(self, q, k, rows=slice(None), cols=slice(None)):
        """The scores of q (..., bq, d) and k (..., bk, d), before the
        mask; the bias of the tile (rows, cols) is added."""
        s = self.scaled(q @ k.transpose(-2, -1), q.shape[-1])
        if self.softcap is not None:  # Gemma 2: cap tanh(S / cap)
            s = self.softcap * torch.tanh(s / self.softcap)  # (.., bq, bk)
        if self.bias is not None:  # ALiBi, relative positions: added
            s = s + self.bias[..., rows, cols].to(s.dtype)  # (..., bq, bk)
        return s

    def scores_backward(self, d_scores, q, k):
        """dl/d(Q K^T) from dl/dS, l the loss: back through cap and scale."""
        if self.softcap is not None:  # d(c tanh(x / c)) / dx = 1 - tanh^2
            x = self.scaled(q @ k.transpose(-2, -1), q.shape[-1])
            d_scores = d_scores * (1 - torch.tanh(x / self.softcap) ** 2)
        return self.scaled(d_scores, q.shape[-1])  # (..., bq, bk)

    def sink_logits(self, shape):
        """The sinks (H,) as one more score per row: (*shape[:-1], 1)."""
        return self.sinks.view(-1, 1, 1).expand(*shape[:-1], 1)

    def softmax(self, scores):
        """The weights (..., Tq, Tk): over the keys and the sink, if any."""
        if self.sinks is None:
            return softmax_rows(scores)
        sink = self.sink_logits(scores.shape).to(scores.dtype)  # no value
        both = torch.cat([scores, sink], dim=-1)  # (..., H, Tq, Tk + 1)
        return softmax_rows(both)[..., :-1]  # the sink's column dropped

    def sinks_backward(self, p_sink, delta):
        """dL/dsinks (H,): -p_sink D summed over the rows of each head.

        p_sink (..., H, Tq, 1): the sink's weight; D = rowsum(dA * A).
        """
        d_sink = (-p_sink * delta).sum(dim=(-2, -1))  # (..., H)
        return d_sink.reshape(-1, d_sink.shape[-1]).sum(dim=0)  # (H,)
        # --8<-- [end:score-mod]


# --8<-- [start:attention]
def attention(
    q,
    k,
    v,
    mask=None,
    empty_rows="raise",
    *,
    scale=None,
    softcap=None,
    bias=None,
    sinks=None,
):
    """dot_product_attention with grouped heads and score modifiers.

    q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv); True = blocked.
    k and v may have fewer heads (axis -3) than q, H % H_kv == 0.
    mask broadcasts to (..., Tq, Tk): key padding is (B, 1, 1, Tk),
    see key_padding_mask. float16 and bfloat16 compute in float32.
    Returns the output (..., Tq, dv) and the weights (..., Tq, Tk).
    A query row with every key masked is refused, or with
    empty_rows="zero" gets weights and output 0 (SDPA, flash-attn).
    Score modifiers, in Gemma 2's order (see the scores page): scale
    (default 1 / sqrt(d)), softcap, bias (broadcasts to the scores;
    -inf blocks), then the mask, then sinks (H,): one logit per query
    head in the softmax, with no value (gpt-oss; -inf: none).
    """
    mask = check.attention(
        q, k, v, mask, empty_rows, scale, softcap, bias, sinks
    )  # mask expanded; k, v may hold H_kv heads; bias -inf blocks a key
    group = kv_group(q.shape, k.shape)  # G = H // H_kv
    if group > 1:  # grouped-query attention: H_kv < H heads in k and v
        k, v = repeat_kv_heads(k, group), repeat_kv_heads(v, group)
    # fp16 and bf16 compute in float32, as SDPA does; float64 stays
    dtype, wide = q.dtype, torch.promote_types(q.dtype, torch.float32)
    q, k, v = q.to(wide), k.to(wide), v.to(wide)
    sinks = None if sinks is None else sinks.to(wide)
    # --8<-- [start:attention-modifiers]
    mod = ScoreMod(scale, softcap, bias, sinks)  # None: left out
    scores = apply_mask(mod.scores(q, k), mask)  # (..., Tq, Tk)
    scores_no_overflow(scores, mask, bias)  # q @ k^T can overflow
    # each row sums to 1 over the keys (and the sink); an empty row is 0
    weights = mod.softmax(scores)  # (..., Tq, Tk)
    # --8<-- [end:attention-modifiers]
    out = weighted_sum(weights, v)  # (..., Tq, dv)
    return out.to(dtype), weights.to(dtype)  # cast back once, at the end
    # --8<-- [end:attention]


# --8<-- [start:attention-backward]
def attention_backward(
    q,
    k,
    v,
    dout,
    mask=None,
    empty_rows="raise",
    *,
    scale=None,
    softcap=None,
    bias=None,
    sinks=None,
):
    """Gradients of attention(q, k, v, mask)'s output, given dout = dL/dO.

    dout is (..., Tq, d_v). Returns dq, dk, dv shaped as q, k and v, in
    the forward's dtype, and dsinks (H,) in sinks' dtype as a fourth
    value when sinks is given. The weights A are recomputed from q and
    k, as the forward made them (with the same score modifiers); a row
    with no key (empty_rows="zero") has A = 0 and passes no gradient on.
    """
    mask = check.attention_backward(
        q, k, v, dout, mask, empty_rows, scale, softcap, bias, sinks
    )  # as attention checks them; dout (..., Tq, d_v) on q's device
    group = kv_group(q.shape, k.shape)  # G = H // H_kv
    # fp16 and bf16 compute in float32, as the forward; float64 stays
    dtype, wide = q.dtype, torch.promote_types(q.dtype, torch.float32)
    q, k, v, dout = q.to(wide), k.to(wide), v.to(wide), dout.to(wide)
    if group > 1:  # grouped-query attention: H_kv < H heads in k and v
        k, v = repeat_kv_heads(k, group), repeat_kv_heads(v, group)
    wide_sinks = None if sinks is None else sinks.to(wide)
    mod = ScoreMod(scale, softcap, bias, wide_sinks)  # the forward's
    # the weights A again, as the forward made them
    scores = apply_mask(mod.scores(q, k), mask)  # (..., Tq, Tk)
    scores_no_overflow(scores, mask, bias)  # q @ k^T can overflow
    weights = mod.softmax(scores)  # (..., Tq, Tk)
    # --8<-- [start:attention-backward-dv]
    # dV = A^T dO (dout is dO): each value collects the rows that read it
    dv = weights.transpose(-2, -1) @ dout  # (..., Tk, d_v)
    # --8<-- [end:attention-backward-dv]
    # --8<-- [start:attention-backward-da]
    # dA = dO V^T
    d_weights = dout @ v.transpose(-2, -1)  # (..., Tq, Tk)
    # --8<-- [end:attention-backward-da]
    # --8<-- [start:attention-backward-ds]
    # dS = A * (dA - rowsum(dA * A)); a blocked key has A = 0, so dS = 0
    d_scores = softmax_backward(weights, d_weights)  # (..., Tq, Tk)
    # --8<-- [end:attention-backward-ds]
    # --8<-- [start:attention-backward-sinks]
    if sinks is not None:  # the sink's weight p = 1 - rowsum(A), its dA 0
        no_sink = sinks.isneginf().view(-1, 1, 1)  # (H, 1, 1)
        p_sink = (1 - weights.sum(-1, keepdim=True)).masked_fill(no_sink, 0)
        # ds_h = sum over the rows of head h of -p_sink rowsum(dA * A)
        delta = (d_weights * weights).sum(-1, keepdim=True)  # (..., Tq, 1)
        dsinks = mod.sinks_backward(p_sink, delta)  # (H,)
    # --8<-- [end:attention-backward-sinks]
    # --8<-- [start:attention-backward-dq-dk]
    # the forward's scale, backwards: d_scores becomes dS / sqrt(d_k)
    d_scores = mod.scores_backward(d_scores, q, k)  # (..., Tq, Tk)
    # --8<-- [start:attention-backward-dq-dk-products]
    # d_scores is now the gradient of q @ k^T (dS / sqrt(d_k) for
    # plain scaled scores): dQ = dS K / sqrt(d_k), dK = dS^T Q / sqrt(d_k)
    dq = d_scores @ k  # (..., Tq, d)
    dk = d_scores.transpose(-2, -1) @ q  # (..., Tk, d)
    # --8<-- [end:attention-backward-dq-dk-products]
    # --8<-- [end:attention-backward-dq-dk]
    # a batch dim that q, k or v shared (broadcast) sums its gradients
    dq, dk, dv = (
        dq.sum_to_size(q.shape),
        dk.sum_to_size(k.shape),
        dv.sum_to_size(v.shape),
    )
    if group > 1:  # a key/value head served G query heads: add them up
        dk, dv = sum_kv_heads(dk, group), sum_kv_heads(dv, group)
    grads = dq.to(dtype), dk.to(dtype), dv.to(dtype)  # cast once, at the end
    return grads if sinks is None else (*grads, dsinks.to(sinks.dtype))
    # --8<-- [end:attention-backward]


def sum_kv_heads(grad, group):
    """The gradient of repeat_kv_heads: add the G copies of each head.

    (..., H_kv * G, T, d) -> (..., H_kv, T, d), axis -3.
    """
    *lead, h, t, d = grad.shape  # (..., H_kv * G, T, d)
    grad = grad.reshape(*lead, h // group, group, t, d)  # (.., H_kv, G, ..)
    return grad.sum(dim=-3)  # (..., H_kv, T, d)


# --8<-- [start:causal-mask]
# (t, tk) with tk != t needs ``align``: "top_left" starts the diagonal at
# the first key (SDPA's is_causal=True, its flag to apply the causal
# mask itself, with no mask passed), "bottom_right" ends it at the last
# key (the flash-attn package, a KV cache); a query before every key is
# a row with no allowed key.
def causal_mask(t, tk=None, align=None, device=None):
    """(t, t) mask, True strictly above the diagonal: the future."""
    tk = check.causal_mask(t, tk, align, device)  # tk: t unless given
    # --8<-- [start:causal-mask-square]
    if tk == t:  # t queries, t keys: True strictly above the diagonal
        ones = torch.ones(t, t, dtype=torch.bool, device=device)
        return torch.triu(ones, diagonal=1)  # (t, t)
    # --8<-- [end:causal-mask-square]
    offset = tk - t if align == "bottom_right" else 0  # diagonal's start
    ones = torch.ones(t, tk, dtype=torch.bool, device=device)
    return torch.triu(ones, diagonal=1 + offset)
    # --8<-- [end:causal-mask]


# --8<-- [start:causal-mask-for-positions]
def causal_mask_for_positions(query_positions, key_positions):
    """True where a key's position is later than the query's."""
    q_pos, k_pos = check.causal_mask_for_positions(
        query_positions, key_positions
    )  # 1-D each, real and finite, compared as they are
    return k_pos[None, :] > q_pos[:, None]  # (1, Tk) vs (Tq, 1): (Tq, Tk)
    # --8<-- [end:causal-mask-for-positions]


# --8<-- [start:key-padding-mask]
def key_padding_mask(lengths, tk=None):
    """(B, 1, 1, Tk) mask, True on the padding keys of each sequence.

    ``lengths`` (B,): sequence b holds its first lengths[b] keys, the
    rest is padding (tk defaults to the longest). Or a (B, Tk) bool
    tensor, True = padding. A mask broadcasts from the right, so a bare
    (B, Tk) mask would be read as (Tq, Tk) and, when B == Tq, mask the
    wrong keys without a word; the two 1s put B on the batch axis.

    >>> key_padding_mask([3, 1]).long()[:, 0, 0]  # (B, Tk)
    tensor([[0, 0, 0],
            [0, 1, 1]])
    """
    # lengths: ints in 1..tk, or a (B, Tk) bool mask
    lengths = check.key_padding_mask(lengths, tk)
    # --8<-- [start:key-padding-mask-core]
    if lengths.dtype == torch.bool:
        padded = lengths  # (B, Tk), True = padding
    else:
        tk = int(lengths.max()) if tk is None else tk
        keys = torch.arange(tk, device=lengths.device)  # (Tk,)
        padded = keys[None, :] >= lengths[:, None]  # (B, Tk)
    return padded[:, None, None, :]  # (B, 1, 1, Tk): heads, query rows
    # --8<-- [end:key-padding-mask-core]
    # --8<-- [end:key-padding-mask]


# --8<-- [start:position-pairs]
def position_pairs(query_positions, key_positions):
    """Query and key positions set against each other, as int64.

    1-D (Tq,) and (Tk,) give (Tq, 1) and (1, Tk): they broadcast to a
    (Tq, Tk) mask. (B, T) positions give (B, 1, Tq, 1) and (B, 1, 1, Tk):
    a (B, 1, Tq, Tk) mask that broadcasts over the heads, as
    key_padding_mask does (a 1-D side is shared by the batch).
    """
    device = getattr(query_positions, "device", None)  # a tensor's
    q, k = check.position_pairs(
        query_positions, key_positions
    )  # whole numbers, as int64 arrays: no uint wrap-around
    return _pairs(q, k, device)  # (Tq, 1), (1, Tk)
    # --8<-- [end:position-pairs]


# --8<-- [start:pairs]
def _pairs(q, k, device):
    # int64 positions, checked, set against each other on ``device``
    q, k = torch.as_tensor(q, device=device), torch.as_tensor(k, device=device)
    if q.dim() == k.dim() == 1:
        return q[:, None], k[None, :]  # (Tq, 1), (1, Tk)
    b_q, b_k = (len(a) if a.ndim == 2 else 1 for a in (q, k))  # B or 1
    q = q.reshape(b_q, 1, q.shape[-1], 1)  # (B, 1, Tq, 1)
    k = k.reshape(b_k, 1, 1, k.shape[-1])  # (B, 1, 1, Tk)
    return q, k
    # --8<-- [end:pairs]


# --8<-- [start:sliding-window-mask]
def sliding_window_mask(query_positions, key_positions, window, sink_tokens=0):
    """Blocked unless 0 <= q - k < window: the query and window - 1 keys.

    Hugging Face's sliding_window (kv > q - window). The first
    sink_tokens positions stay visible to every later query
    (StreamingLLM's attention sinks).
    """
    device = getattr(query_positions, "device", None)  # a tensor's
    q, k = check.sliding_window_mask(
        query_positions, key_positions, window, sink_tokens
    )  # whole positions >= 0 (read once), window >= 1, sink_tokens >= 0
    q, k = _pairs(q, k, device)  # as position_pairs: (Tq, 1), (1, Tk)
    distance = q - k  # (Tq, Tk): how far back the key lies
    allowed = (distance >= 0) & (distance < window)
    allowed |= (k < sink_tokens) & (k <= q)  # the sinks, never the future
    return ~allowed  # True = blocked
    # --8<-- [end:sliding-window-mask]


# --8<-- [start:chunked-mask]
def chunked_mask(query_positions, key_positions, chunk):
    """Blocked unless q // chunk == k // chunk and k <= q (Llama 4)."""
    device = getattr(query_positions, "device", None)  # a tensor's
    q, k = check.chunked_mask(
        query_positions, key_positions, chunk
    )  # whole positions >= 0 (an iterator read once), chunk >= 1
    q, k = _pairs(q, k, device)  # as position_pairs: (Tq, 1), (1, Tk)
    same_chunk = q // chunk == k // chunk  # (Tq, Tk)
    return ~(same_chunk & (k <= q))  # True = blocked
    # --8<-- [end:chunked-mask]


# --8<-- [start:document-ids]
def document_ids(lengths):
    """The document of every token of a packed sequence (cu_seqlens)."""
    check.document_ids(lengths)  # (n,) ints >= 1
    lengths = torch.as_tensor(lengths).long()  # uint16/32: no kernel
    ids = torch.arange(len(lengths), device=lengths.device)  # (n,)
    return ids.repeat_interleave(lengths)  # (sum(lengths),)
    # --8<-- [end:document-ids]


# --8<-- [start:document-mask]
def document_mask(query_documents, key_documents):
    """Blocked where the query's document is not the key's."""
    device = getattr(query_documents, "device", None)  # a tensor's
    q, k = check.document_mask(
        query_documents, key_documents
    )  # integer ids, an iterator read once
    q, k = _pairs(q, k, device)  # as position_pairs: (Tq, 1), (1, Tk)
    return q != k  # (Tq, Tk), True = another document
    # --8<-- [end:document-mask]


# --8<-- [start:packed-causal-mask]
def packed_causal_mask(lengths):
    """Causal attention within each document of a packed sequence.

    Two rules combined with |: a pair is blocked when either blocks it.
    This is what varlen attention (flash-attn's cu_seqlens) computes.
    """
    ids = document_ids(lengths)  # (T,)
    positions = torch.arange(len(ids), device=ids.device)  # (T,)
    future = causal_mask_for_positions(positions, positions)  # (T, T)
    return document_mask(ids, ids) | future  # (T, T)
    # --8<-- [end:packed-causal-mask]


# --8<-- [start:prefix-lm-mask]
def prefix_lm_mask(query_positions, key_positions, prefix):
    """Blocked unless k < prefix or k <= q: a bidirectional prefix."""
    device = getattr(query_positions, "device", None)  # a tensor's
    q, k = check.prefix_lm_mask(
        query_positions, key_positions, prefix
    )  # whole positions >= 0 (an iterator read once), prefix >= 0
    q, k = _pairs(q, k, device)  # as position_pairs: (Tq, 1), (1, Tk)
    return ~((k < prefix) | (k <= q))  # True = blocked
    # --8<-- [end:prefix-lm-mask]


# --8<-- [start:apply-rope]
def apply_rope(x, positions, base=10000.0, inv_freq=None, rotary_dim=None):
    """Rotary position embedding of x (..., T, d_head) at ``positions``.

    The rotate-half convention (GPT-NeoX, Hugging Face): feature i pairs
    with feature i + d_head / 2, and the pair turns by the angle
    position * base ** (-2 i / d_head). Meta's Llama code and RoFormer
    turn adjacent pairs (2i, 2i + 1) instead, the same after permuting
    the rows of W_Q and W_K (nn.Linear's (out, in) weights). Rotations
    keep lengths, and q . k after rotation depends on the positions
    only through m - n. Positions of any int or float dtype; angles in
    float64, cast once to x's dtype (float32 for int or bool x).

    rotary_dim r (GPT-NeoX's partial rotary): only the first r features
    turn, pairs (i, i + r / 2) at base ** (-2 i / r); the rest pass
    through. inv_freq (r / 2,): the frequencies instead, e.g. from
    positions.rope_frequencies; r = 2 * len(inv_freq) by default.

    >>> x = torch.tensor([[1.0, 0.0]])  # one row, d_head = 2
    >>> apply_rope(x, [1]).round(decimals=4)  # turned by 1 radian
    tensor([[0.5403, 0.8415]])
    """
    x, positions, freq, r = check.apply_rope(
        x, positions, base, inv_freq, rotary_dim
    )
    if not x.is_floating_point():  # int or bool x: rotate in float32
        x = x.to(torch.promote_types(x.dtype, torch.float32))
    dtype, half = x.dtype, r // 2
    # --8<-- [start:apply-rope-rotary-dim]
    if freq is None:  # theta_i = base^(-2i / r): one per pair of features
        i = torch.arange(half, device=x.device, dtype=torch.float64)
        freq = float(base) ** (-2.0 * i / r)  # (r / 2,), float64
    angle = positions.double()[:, None] * freq  # (T, r / 2)
    angle = torch.cat([angle, angle], dim=-1)  # (T, r)
    cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)
    x, passed = x[..., :r], x[..., r:]  # (..., T, r), (..., T, d_head - r)
    # rotate_half(x) = (-x2, x1): each pair (x1, x2) turned by 90 degrees
    x1, x2 = x[..., :half], x[..., half:]  # (..., T, r / 2) each
    rotated = torch.cat([-x2, x1], dim=-1)  # (..., T, r)
    return torch.cat([x * cos + rotated * sin, passed], -1)  # (..., d)
    # --8<-- [end:apply-rope-rotary-dim]
    # --8<-- [end:apply-rope]


# --8<-- [start:alibi-slopes]
def alibi_slopes(n_head):
    """ALiBi's slope m_h for each of H = n_head heads, h = 0 .. H - 1.

    For H a power of two, the geometric m_h = 2^(-8 (h + 1) / H) of
    Press et al. (2022). Otherwise the paper's code, BLOOM and MPT take
    the H' slopes of the largest power of two H' < H, then every other
    slope of the rule for 2 H' (those between them) until H are filled.

    >>> alibi_slopes(4).tolist()
    [0.25, 0.0625, 0.015625, 0.00390625]
    """
    check.alibi_slopes(n_head)  # an int >= 1
    n = 1 << (int(n_head).bit_length() - 1)  # largest power of 2 <= n_head
    # m_h = 2^(-8 (h + 1) / n), h = 0 .. n - 1
    h = torch.arange(1, n + 1, dtype=torch.float64)
    slopes = 2.0 ** (-8.0 * h / n)  # (n,)
    if n < n_head:  # every other slope of the rule for 2n: between
        odd = torch.arange(1, 2 * n, 2, dtype=torch.float64)
        odd = 2.0 ** (-8.0 * odd / (2 * n))  # (n,)
        slopes = torch.cat([slopes, odd[: n_head - n]])
    return slopes  # (n_head,), float64
    # --8<-- [end:alibi-slopes]


# --8<-- [start:alibi-bias]
def alibi_bias(slopes, query_positions, key_positions):
    """The ALiBi bias -m_h (i - j) of query position i and key position j.

    slopes (H,), positions 1-D: returns (H, Tq, Tk), added to the
    scores (attention's bias). It grows more negative with distance,
    linearly, at each head's own slope; keys after the query get a
    positive bias and need the causal mask. Float slopes keep their
    dtype (a list: float64, as NumPy reads it); integer slopes compute
    in float64. The bias is computed in float64 and cast once.
    """
    slopes, q_pos, k_pos = check.alibi_bias(
        slopes, query_positions, key_positions, _as_tensor_like_numpy
    )  # (H,) slopes, 1-D positions, finite
    q_pos, k_pos = q_pos.to(slopes.device), k_pos.to(slopes.device)
    dtype = slopes.dtype if slopes.is_floating_point() else torch.float64
    q_pos, k_pos = q_pos.double(), k_pos.double()  # no uint wrap
    # -m (i - j) = m (j - i): 0 on the diagonal, negative before it
    ahead = k_pos[None, :] - q_pos[:, None]  # j - i: (Tq, Tk), float64
    bias = slopes.double()[:, None, None] * ahead  # (H, Tq, Tk)
    return bias.to(dtype)  # rounded once, to the slopes' dtype
    # --8<-- [end:alibi-bias]


def _as_tensor_like_numpy(values):
    # a tensor as it is; a list or an array with NumPy's dtype (a list
    # of floats is float64 there, float32 under torch.as_tensor)
    if torch.is_tensor(values):
        return values
    return torch.as_tensor(np.asarray(values))


# --8<-- [start:linear]
def linear(x, weight, bias=None):
    """y = x W^T + b, the learned linear map: (..., d_in) -> (..., d_out).

    weight (d_out, d_in), as nn.Linear stores it; bias (d_out,) or None.
    nn.Linear's forward calls F.linear, as linear does: the layer's
    self.wq(x) computes it with self.wq.weight and self.wq.bias. No
    checks.

    >>> linear(torch.ones(1, 2), torch.ones(3, 2), torch.arange(3.0))
    tensor([[2., 3., 4.]])
    """
    # F is torch.nn.functional, PyTorch's module of plain functions
    return F.linear(x, weight, bias)  # (..., d_out)
    # --8<-- [end:linear]


class MultiHeadAttention(nn.Module):
    """Self- or cross-attention with ``n_head`` heads, from scratch.

    ``n_kv_head`` key/value heads (None: n_head; 1: multi-query) are
    shared by groups of query heads; ``rope=True`` rotates q and k at
    their absolute positions (self-attention only).
    """

    # --8<-- [start:mha-init]
    def __init__(
        self,
        d_model,
        n_head,
        n_kv_head=None,
        bias=False,
        rope=False,
        rope_base=10000.0,
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.n_kv_head, self.d_head = check.multi_head_attention(
            d_model, n_head, n_kv_head, rope, rope_base, device
        )  # H_kv (default H) divides H; d_head = d_model / H
        self.d_model, self.n_head = d_model, n_head
        self.rope, self.rope_base = rope, rope_base
        kw = {"bias": bias, "device": device, "dtype": dtype}
        d_kv = self.n_kv_head * self.d_head  # d_model when n_kv_head = H
        # --8<-- [start:mha-init-weights]
        # nn.Linear stores its weight as (out, in) and computes x @ W.T
        # kw: bias, device (CPU or GPU), dtype (number format)
        self.wq = nn.Linear(d_model, d_model, **kw)
        self.wk = nn.Linear(d_model, d_kv, **kw)  # d_kv = d_model here
        self.wv = nn.Linear(d_model, d_kv, **kw)
        self.wo = nn.Linear(d_model, d_model, **kw)
        # --8<-- [end:mha-init-weights]
        # --8<-- [end:mha-init]

    # split_heads computes h, not -1: with B = 0, -1 is unknown
    # --8<-- [start:split-heads]
    def split_heads(self, x):
        # x: (B, T, H * dh)
        b, t, _ = x.shape
        # h = the number of heads in this tensor: H
        h = x.shape[-1] // self.d_head
        x = x.view(b, t, h, self.d_head)  # (B, T, H, dh)
        return x.transpose(1, 2)  # (B, H, T, dh)
        # --8<-- [end:split-heads]

    # --8<-- [start:merge-heads]
    def merge_heads(self, x):
        b, h, t, dh = x.shape  # (B, H, T, dh)
        # .contiguous() copies the transposed tensor into plain row order
        # (last index fastest), which .view needs (pitfall 5): .view only
        # relabels memory, so the entries must already be in row order
        x = x.transpose(1, 2).contiguous()  # (B, T, H, dh)
        return x.view(b, t, h * dh)  # (B, T, d_model)
        # --8<-- [end:merge-heads]

    # --8<-- [start:mha-forward]
    def forward(self, x, mask=None, context=None, positions=None):
        """x (B, Tq, d_model); context (B, Tk, d_model) gives K and V.

        Returns y (B, Tq, d_model) and the weights (B, H, Tq, Tk).
        """
        weight = self.wq.weight  # the module's dtype and device
        check.forward(x, context, self.d_model, weight, self.rope)
        context = x if context is None else context  # self-attention
        # project: Q = X Wq, K = C Wk, V = C Wv (nn.Linear calls F.linear)
        q = self.wq(x)  # (B, Tq, d_model): all heads in one product
        k = self.wk(context)  # (B, Tk, H_kv * dh)
        v = self.wv(context)  # (B, Tk, H_kv * dh)
        # split: one slice of the features per head
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        q, k = self.rotate(q, k, positions)  # RoPE only (kv-cache page)
        out, weights = self.attend_heads(q, k, v, mask)  # (B, H, Tq, dh)
        # merge: Concat(head_0, ..., head_{H-1}), then Wo
        y = self.wo(self.merge_heads(out))  # (B, Tq, d_model)
        return y, weights  # (B, Tq, d_model), (B, H, Tq, Tk)
        # --8<-- [end:mha-forward]

    # --8<-- [start:mha-attend]
    def attend_heads(self, q, k, v, mask=None):
        """Steps 1 to 4 in every head; a key/value head serves G query
        heads when the layer groups them (n_kv_head < n_head)."""
        group = self.n_head // self.n_kv_head  # G = H // H_kv
        if group > 1:  # grouped-query attention: repeat each K, V head
            k, v = repeat_kv_heads(k, group), repeat_kv_heads(v, group)
        return dot_product_attention(q, k, v, mask)  # (B, H, Tq, dh)
        # --8<-- [end:mha-attend]

    # --8<-- [start:mha-rope]
    def rotate(self, q, k, positions=None):
        """q and k as they are, or turned by RoPE when the layer has it.

        ``positions`` (Tq,): where the rows of x sit (default 0 .. Tq - 1).
        """
        if not self.rope:
            return q, k
        if positions is None:  # after the head split, absolute positions
            positions = torch.arange(q.shape[-2], device=q.device)  # (T,)
        positions = check.rotate(positions)  # an iterator read once
        q = apply_rope(q, positions, self.rope_base)  # (B, H, T, dh)
        k = apply_rope(k, positions, self.rope_base)  # (B, H_kv, T, dh)
        return q, k
        # --8<-- [end:mha-rope]

    def project(self, x, context=None, positions=None):
        """Checked inputs -> q (B, H, Tq, dh), k and v (B, H_kv, Tk, dh).

        The forward's first steps (project, split, RoPE), for the
        functions that attend in their own way (SDPA, a KV cache).
        """
        weight = self.wq.weight  # the module's dtype and device
        check.project(x, context, self.d_model, weight, self.rope)
        context = x if context is None else context  # self-attention
        q = self.split_heads(self.wq(x))  # (B, H, Tq, dh)
        k = self.split_heads(self.wk(context))  # (B, H_kv, Tk, dh)
        v = self.split_heads(self.wv(context))  # (B, H_kv, Tk, dh)
        return (*self.rotate(q, k, positions), v)


# --8<-- [start:sdpa-forward]
def sdpa_forward(module, x, mask=None, context=None, positions=None):
    """The module's weights through F.scaled_dot_product_attention."""
    q, k, v = module.project(x, context, positions)  # k, v: H_kv heads
    mask = check.sdpa_forward(q, k, v, mask)  # as attention() does
    # enable_gqa: query head h reads key/value head h // (H // H_kv)
    grouped = k.shape[-3] != q.shape[-3]
    # --8<-- [start:sdpa-call]
    # SDPA's boolean mask means True = allowed: the one place we flip it
    allowed = None if mask is None else ~mask  # (B, H, Tq, Tk)
    # 0.0, the default, written out: dropout_p does not follow .eval()
    # grouped: False on the path (fewer key/value heads: a later page)
    out = F.scaled_dot_product_attention(
        q, k, v, attn_mask=allowed, dropout_p=0.0, enable_gqa=grouped
    )  # (B, H, Tq, dh)
    # --8<-- [end:sdpa-call]
    # finite q and k can still overflow q @ k^T: no silent NaN rows
    finite_tensor(out, "SDPA output")
    return module.wo(module.merge_heads(out))  # (B, Tq, d_model)
    # --8<-- [end:sdpa-forward]


# --8<-- [start:library-version]
def library_version(module):
    """An nn.MultiheadAttention (batch_first) with the same weights."""
    check.library_version(module)  # refuses grouped heads and RoPE
    has_bias = module.wq.bias is not None
    weight = module.wq.weight
    library = nn.MultiheadAttention(
        module.d_model,
        module.n_head,
        bias=has_bias,
        batch_first=True,  # x (B, T, d_model); the default is (T, B, ...)
        device=weight.device,
        dtype=weight.dtype,
    )
    with torch.no_grad():  # these copies are not part of training
        # --8<-- [start:library-copy]
        # copy_ writes into the existing tensor in place
        # Q, K, V stacked row-wise into one (3 d_model, d_model) matrix
        library.in_proj_weight.copy_(
            torch.cat([module.wq.weight, module.wk.weight, module.wv.weight])
        )
        library.out_proj.weight.copy_(module.wo.weight)
        # --8<-- [end:library-copy]
        if has_bias:
            library.in_proj_bias.copy_(
                torch.cat([module.wq.bias, module.wk.bias, module.wv.bias])
            )
            library.out_proj.bias.copy_(module.wo.bias)
    return library
    # --8<-- [end:library-version]


# --8<-- [start:library-forward]
def library_forward(library, x, mask=None, context=None):
    """Call nn.MultiheadAttention with our mask convention (True = blocked).

    A per-head or per-batch mask becomes the (B * H, Tq, Tk) it expects.
    """
    check.library_forward(library, x, mask, context)  # mask (B, H, ..)
    context = x if context is None else context
    b, tq, tk = x.shape[0], x.shape[1], context.shape[1]
    h = library.num_heads
    if mask is not None:
        mask = mask.expand(b, h, tq, tk).reshape(b * h, tq, tk)
        if b == 0:  # torch cannot split a (0, Tq, Tk) mask into heads
            mask = mask.new_zeros(tq, tk)  # no sequence: nothing to block
    y, _ = library(x, context, context, attn_mask=mask, need_weights=False)
    return y  # (B, Tq, d_model)
    # --8<-- [end:library-forward]


def to_numpy(module):
    """The module's numpy_ref twin: numpy_ref.MultiHeadAttention.from_torch
    under its first name.

    numpy_ref is imported at the call, by name, so that torch_ref alone
    neither loads the NumPy reference nor carries it into a page's
    notebook; a page script that calls this imports numpy_ref itself.
    """
    numpy_ref = importlib.import_module("mha_ref.numpy_ref")
    return numpy_ref.MultiHeadAttention.from_torch(module)


def __getattr__(name):
    """torch_ref.MultiHeadLatentAttention, defined in latent_torch.py.

    Loaded on first use, by name (PEP 562), so that latent_torch may import
    this module without a circle, and a page that does not use latent
    attention neither loads nor carries it.
    """
    if name == "MultiHeadLatentAttention":
        latent = importlib.import_module("mha_ref.latent_torch")
        return latent.MultiHeadLatentAttention
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
