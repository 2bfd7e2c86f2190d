"""Multi-head attention in NumPy: the teaching reference.

Shapes are batch-first: x is (B, T, d_model), heads are (B, H, T, d_head).
Masks are boolean with True = blocked. The site includes the named
sections of this file; torch_ref.py mirrors its names and order.
"""

import importlib
import math

import numpy as np

from mha_ref.guards import numpy_ref as check
from mha_ref.guards.arrays import scores_finite


# --8<-- [start:attention-scores]
def attention_scores(q, k):
    """Step 1, S = Q K^T / sqrt(d_k): how well each query fits each key.

    q (..., Tq, d), k (..., Tk, d) -> (..., Tq, Tk). No checks.
    """
    d = q.shape[-1]  # the head size d_k, not d_model
    return q @ np.swapaxes(k, -2, -1) / math.sqrt(d)  # (..., Tq, Tk)
    # --8<-- [end:attention-scores]


# --8<-- [start:apply-mask]
def apply_mask(scores, mask):
    """Step 2: a blocked score (mask True) becomes -inf; None blocks none.

    The softmax then gives it weight exactly 0. No checks.
    """
    if mask is None:
        return scores
    return np.where(mask, -np.inf, scores)  # before the softmax
    # --8<-- [end:apply-mask]


# --8<-- [start:softmax]
def softmax(logits, axis=-1, empty_rows="raise"):
    """Softmax along ``axis``, stable for large logits, -inf = masked.

    A row of only -inf (no allowed key) is refused, or gets weights 0
    with empty_rows="zero", as SDPA returns in practice (since PyTorch
    2.5; its documentation does not define it).

    >>> softmax(np.array([1000.0, 1000.0]))
    array([0.5, 0.5])
    >>> softmax(np.array([0.0, -np.inf]))
    array([1., 0.])
    >>> softmax(np.array([-np.inf, -np.inf]), empty_rows="zero")
    array([0., 0.])
    """
    values = check.softmax(logits, axis, empty_rows)  # no NaN, no +inf
    return softmax_rows(values, axis)
    # --8<-- [end:softmax]


# --8<-- [start:softmax-rows]
def softmax_rows(scores, axis=-1):
    """Step 3: each row of scores as weights >= 0 that sum to 1.

    -inf gets weight 0; a row of only -inf gets 0 everywhere. No checks
    (`softmax` is this function behind its input check).
    """
    # shift-invariant: subtracting the row max keeps exp() <= 1. The two
    # np.where only matter for a row with no allowed key (only -inf): it
    # shifts by 0 instead, and all its exp() are 0
    row_max = np.max(scores, axis=axis, keepdims=True)
    weights = np.exp(scores - np.where(np.isneginf(row_max), 0.0, row_max))
    total = np.sum(weights, axis=axis, keepdims=True)  # 0 for such a row
    return weights / np.where(total == 0, 1.0, total)
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
    q, k, v, mask = check.dot_product_attention(q, k, v, mask)
    scores = attention_scores(q, k)  # step 1: Q K^T / sqrt(d_k)
    scores = apply_mask(scores, mask)  # step 2: blocked keys get -inf
    weights = softmax_rows(scores)  # step 3: each row sums to 1
    return weighted_sum(weights, v), weights  # step 4: O = A V
    # --8<-- [end:dot-product-attention]


# --8<-- [start:softmax-with-sinks]
def softmax_with_sinks(scores, sinks, empty_rows="raise"):
    """Softmax over the keys and one extra logit per head: the sink.

    scores (..., H, Tq, Tk), sinks (H,). The sink takes weight and has
    no value (gpt-oss), so a row's weights sum to 1 minus the sink's
    share; a row with every key masked puts all of it on the sink.
    A sink of -inf is no sink.

    >>> softmax_with_sinks(np.zeros((1, 1, 2)), np.array([0.0]))
    array([[[0.33333333, 0.33333333]]])
    """
    scores, sinks = check.softmax_with_sinks(scores, sinks, empty_rows)
    # sinks (H,), scores (..., H, Tq, Tk): real, no NaN, no +inf
    return ScoreMod(sinks=sinks).softmax(scores)  # (..., H, Tq, Tk)
    # --8<-- [end:softmax-with-sinks]


# --8<-- [start:softmax-backward]
def softmax_backward(probabilities, upstream):
    """Gradient w.r.t. the scores s, given p = softmax(s) and dL/dp.

    The vector-Jacobian product J^T g, dL/ds_j = p_j (g_j - sum_k p_k g_k):
    raising one score takes weight from every other position.

    >>> softmax_backward(np.array([0.5, 0.5]), np.array([1.0, 0.0]))
    array([ 0.25, -0.25])
    """
    p, g = check.softmax_backward(probabilities, upstream)  # one shape
    # <p, g> = sum_k p_k g_k, one number per row
    weighted_mean = np.sum(p * g, axis=-1, keepdims=True)
    return p * (g - weighted_mean)
    # --8<-- [end:softmax-backward]


# --8<-- [start:repeat-kv-heads]
def repeat_kv_heads(x, group):
    """Each key/value head ``group`` times in a row, on axis -3.

    (..., H_kv, T, d) -> (..., H_kv * group, T, d): query head h reads
    key/value head h // group, as SDPA's enable_gqa=True. np.repeat
    gives the heads [a, a, b, b]; np.tile would give [a, b, a, b] and
    pair query heads with the wrong keys.

    >>> heads = np.array([10, 20]).reshape(2, 1, 1)  # (H_kv, T, d)
    >>> repeat_kv_heads(heads, 2).ravel()
    array([10, 10, 20, 20])
    """
    return np.repeat(x, group, axis=-3)  # (..., H_kv * G, T, d)
    # --8<-- [end:repeat-kv-heads]


def kv_group(q_shape, k_shape):
    """G = H // H_kv: the query heads each key/value head serves.

    Heads are axis -3; 1 when there is nothing to group (the same
    heads, one head that broadcasts, no heads axis). Shapes as checked.

    >>> kv_group((1, 4, 8, 16), (1, 2, 8, 16))
    2
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

    >>> ScoreMod(softcap=1.0).scores(np.ones((1, 4)), np.ones((1, 4)))  # 4 / 2
    array([[0.96402758]])
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
        s = self.scaled(q @ np.swapaxes(k, -2, -1), q.shape[-1])
        if self.softcap is not None:  # Gemma 2: cap tanh(S / cap)
            s = self.softcap * np.tanh(s / self.softcap)  # (..., bq, bk)
        if self.bias is not None:  # ALiBi, relative positions: added
            s = s + self.bias[..., rows, cols]  # (..., bq, bk)
        return s

    def scores_backward(self, d_scores, q, k):
        """dl/d(Q K^T) from dl/dS, l the loss: back through cap and scale."""
        if self.softcap is not None:  # d(c tanh(x / c)) / dx = 1 - tanh^2
            x = self.scaled(q @ np.swapaxes(k, -2, -1), q.shape[-1])
            d_scores = d_scores * (1 - np.tanh(x / self.softcap) ** 2)
        return self.scaled(d_scores, q.shape[-1])  # (..., bq, bk)

    def sink_logits(self, shape):
        """The sinks (H,) as one more score per row: (*shape[:-1], 1)."""
        return np.broadcast_to(self.sinks[:, None, None], (*shape[:-1], 1))

    def softmax(self, scores):
        """The weights (..., Tq, Tk): over the keys and the sink, if any."""
        if self.sinks is None:
            return softmax_rows(scores)
        sink = self.sink_logits(scores.shape)  # a key with no value
        both = np.concatenate([scores, sink], -1)  # (..., H, Tq, Tk + 1)
        return softmax_rows(both)[..., :-1]  # the sink's column dropped

    def sinks_backward(self, p_sink, delta):
        """dL/dsinks (H,): -p_sink D summed over the rows of each head.

        p_sink (..., H, Tq, 1): the sink's weight; D = rowsum(dA * A).
        """
        d_sink = np.sum(-p_sink * delta, axis=(-2, -1))  # (..., H)
        return d_sink.reshape(-1, d_sink.shape[-1]).sum(axis=0)  # (H,)
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
    see key_padding_mask. int and bool inputs compute in float.
    Returns the output (..., Tq, dv) and the weights (..., Tq, Tk).
    A query row with every key masked is refused, or with
    empty_rows="zero" gets weights and output 0 (SDPA, flash-attn).
    Score modifiers, in Gemma 2's order (see the scores page): scale
    (default 1 / sqrt(d)), softcap, bias (broadcasts to the scores;
    -inf blocks), then the mask, then sinks (H,): one logit per query
    head in the softmax, with no value (gpt-oss; -inf: none).
    """
    q, k, v, mask, bias, sinks = check.attention(
        q, k, v, mask, empty_rows, scale, softcap, bias, sinks
    )  # float arrays; k, v may hold H_kv heads; bias -inf blocks a key
    group = kv_group(q.shape, k.shape)  # G = H // H_kv
    if group > 1:  # grouped-query attention: H_kv < H heads in k and v
        k, v = repeat_kv_heads(k, group), repeat_kv_heads(v, group)
    # --8<-- [start:attention-modifiers]
    mod = ScoreMod(scale, softcap, bias, sinks)  # None: left out
    scores = apply_mask(mod.scores(q, k), mask)  # (..., Tq, Tk)
    scores_finite(scores, mask, bias)  # q @ k^T can overflow: name it
    # each row sums to 1 over the keys (and the sink); an empty row is 0
    weights = mod.softmax(scores)  # (..., Tq, Tk)
    # --8<-- [end:attention-modifiers]
    return weighted_sum(weights, v), weights  # (..., Tq, dv), (.., Tq, Tk)
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
    the forward's dtype, and dsinks (H,) as a fourth value when sinks
    is given. The weights A are recomputed from q and k, as the
    forward made them (with the same score modifiers); a row with no
    key (empty_rows="zero") has A = 0 and passes no gradient on.
    """
    q, k, v, dout, mask, bias, sinks = check.attention_backward(
        q, k, v, dout, mask, empty_rows, scale, softcap, bias, sinks
    )  # as attention checks them; dout (..., Tq, d_v) in q's dtype
    group = kv_group(q.shape, k.shape)  # G = H // H_kv
    if group > 1:  # grouped-query attention: H_kv < H heads in k and v
        k, v = repeat_kv_heads(k, group), repeat_kv_heads(v, group)
    mod = ScoreMod(scale, softcap, bias, sinks)  # the forward's modifiers
    # the weights A again, as the forward made them
    scores = apply_mask(mod.scores(q, k), mask)  # (..., Tq, Tk)
    scores_finite(scores, mask, bias)  # q @ k^T can overflow: name it
    weights = mod.softmax(scores)  # (..., Tq, Tk)
    # --8<-- [start:attention-backward-dv]
    # dV = A^T dO (dout is dO): each value collects the rows that read it
    dv = np.swapaxes(weights, -2, -1) @ dout  # (..., Tk, d_v)
    # --8<-- [end:attention-backward-dv]
    # --8<-- [start:attention-backward-da]
    # dA = dO V^T
    d_weights = dout @ np.swapaxes(v, -2, -1)  # (..., Tq, Tk)
    # --8<-- [end:attention-backward-da]
    # --8<-- [start:attention-backward-ds]
    # dS = A * (dA - rowsum(dA * A)); a blocked key has A = 0, so dS = 0
    d_scores = softmax_backward(weights, d_weights)  # (..., Tq, Tk)
    # --8<-- [end:attention-backward-ds]
    # --8<-- [start:attention-backward-sinks]
    if sinks is not None:  # the sink's weight p = 1 - rowsum(A), its dA 0
        no_sink = np.isneginf(np.asarray(sinks))[:, None, None]  # (H, 1, 1)
        p_sink = np.where(no_sink, 0.0, 1 - weights.sum(-1, keepdims=True))
        # ds_h = sum over the rows of head h of -p_sink rowsum(dA * A)
        delta = np.sum(d_weights * weights, -1, keepdims=True)  # (.., 1)
        dsinks = mod.sinks_backward(p_sink, delta)  # (H,)
    # --8<-- [end:attention-backward-sinks]
    # --8<-- [start:attention-backward-dq-dk]
    # the forward's scale, backwards: d_scores becomes dS / sqrt(d_k)
    d_scores = mod.scores_backward(d_scores, q, k)  # (..., Tq, Tk)
    # --8<-- [start:attention-backward-dq-dk-products]
    # d_scores is now the gradient of q @ k^T (dS / sqrt(d_k) for
    # plain scaled scores): dQ = dS K / sqrt(d_k), dK = dS^T Q / sqrt(d_k)
    dq = d_scores @ k  # (..., Tq, d)
    dk = np.swapaxes(d_scores, -2, -1) @ q  # (..., Tk, d)
    # --8<-- [end:attention-backward-dq-dk-products]
    # --8<-- [end:attention-backward-dq-dk]
    # a batch dim that q, k or v shared (broadcast) sums its gradients
    dq, dk, dv = (
        sum_to_shape(dq, q.shape),
        sum_to_shape(dk, k.shape),
        sum_to_shape(dv, v.shape),
    )
    if group > 1:  # a key/value head served G query heads: add them up
        dk, dv = sum_kv_heads(dk, group), sum_kv_heads(dv, group)
    grads = dq, dk, dv
    return grads if sinks is None else (*grads, dsinks)
    # --8<-- [end:attention-backward]


def sum_kv_heads(grad, group):
    """The gradient of repeat_kv_heads: add the G copies of each head.

    (..., H_kv * G, T, d) -> (..., H_kv, T, d), axis -3.

    >>> sum_kv_heads(np.arange(4.0).reshape(4, 1, 1), 2).ravel()
    array([1., 5.])
    """
    *lead, h, t, d = grad.shape  # (..., H_kv * G, T, d)
    grad = grad.reshape(*lead, h // group, group, t, d)  # (.., H_kv, G, ..)
    return grad.sum(axis=-3)  # (..., H_kv, T, d)


def sum_to_shape(grad, shape):
    """Sum grad over the leading dims that broadcasting added or stretched.

    >>> sum_to_shape(np.ones((2, 3, 4)), (1, 4)).tolist()
    [[6.0, 6.0, 6.0, 6.0]]
    """
    extra = grad.ndim - len(shape)
    grad = grad.sum(axis=tuple(range(extra)))  # dims shape lacks
    stretched = tuple(
        axis
        for axis, n in enumerate(shape)
        if n == 1 and grad.shape[axis] != 1
    )
    return grad.sum(axis=stretched, keepdims=True)  # dims of size 1


# --8<-- [start:causal-mask]
# (t, tk) with tk != t needs ``align``: "top_left" starts the diagonal at
# the first key (SDPA's is_causal=True, its flag to apply the causal
# mask itself, with no mask passed), "bottom_right" ends it at the last
# key (the flash-attn package, a KV cache); a query before every key is
# a row with no allowed key. causal_mask(2, 3, align="bottom_right")
# blocks only the last key of the first query: [[0, 0, 1], [0, 0, 0]].
def causal_mask(t, tk=None, align=None):
    """(t, t) mask, True strictly above the diagonal: the future.

    >>> causal_mask(3).astype(int)
    array([[0, 1, 1],
           [0, 0, 1],
           [0, 0, 0]])
    """
    tk = check.causal_mask(t, tk, align)  # tk: t unless given
    # --8<-- [start:causal-mask-square]
    if tk == t:  # t queries, t keys: True strictly above the diagonal
        return np.triu(np.ones((t, t), dtype=bool), k=1)  # (t, t)
    # --8<-- [end:causal-mask-square]
    offset = tk - t if align == "bottom_right" else 0  # diagonal's start
    return np.triu(np.ones((t, tk), dtype=bool), k=1 + offset)
    # --8<-- [end:causal-mask]


# --8<-- [start:causal-mask-for-positions]
def causal_mask_for_positions(query_positions, key_positions):
    """True where a key's position is later than the query's.

    With a KV cache the new queries sit at the end of the keys:

    >>> causal_mask_for_positions([3, 4], range(5)).astype(int)
    array([[0, 0, 0, 0, 1],
           [0, 0, 0, 0, 0]])
    """
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
    array, True = padding. A mask broadcasts from the right, so a bare
    (B, Tk) mask would be read as (Tq, Tk) and, when B == Tq, mask the
    wrong keys without a word; the two 1s put B on the batch axis.

    >>> key_padding_mask([3, 1]).astype(int)[:, 0, 0]  # (B, Tk)
    array([[0, 0, 0],
           [0, 1, 1]])
    """
    # lengths: ints in 1..tk, or a (B, Tk) bool mask
    lengths = check.key_padding_mask(lengths, tk)
    # --8<-- [start:key-padding-mask-core]
    if lengths.dtype == bool:
        padded = lengths  # (B, Tk), True = padding
    else:
        tk = int(lengths.max()) if tk is None else tk
        padded = np.arange(tk)[None, :] >= lengths[:, None]  # (B, Tk)
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
    q, k = check.position_pairs(
        query_positions, key_positions
    )  # whole numbers, as int64 arrays: no uint wrap-around
    return _pairs(q, k)  # (Tq, 1), (1, Tk)
    # --8<-- [end:position-pairs]


# --8<-- [start:pairs]
def _pairs(q, k):
    # int64 positions, checked, set against each other
    if q.ndim == k.ndim == 1:
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

    >>> sliding_window_mask(range(4), range(4), window=2).astype(int)
    array([[0, 1, 1, 1],
           [0, 0, 1, 1],
           [1, 0, 0, 1],
           [1, 1, 0, 0]])
    """
    q, k = check.sliding_window_mask(
        query_positions, key_positions, window, sink_tokens
    )  # whole positions >= 0 (read once), window >= 1, sink_tokens >= 0
    q, k = _pairs(q, k)  # as position_pairs: (Tq, 1), (1, Tk)
    distance = q - k  # (Tq, Tk): how far back the key lies
    allowed = (distance >= 0) & (distance < window)
    allowed |= (k < sink_tokens) & (k <= q)  # the sinks, never the future
    return ~allowed  # True = blocked
    # --8<-- [end:sliding-window-mask]


# --8<-- [start:chunked-mask]
def chunked_mask(query_positions, key_positions, chunk):
    """Blocked unless q // chunk == k // chunk and k <= q (Llama 4).

    >>> chunked_mask(range(4), range(4), chunk=2).astype(int)
    array([[0, 1, 1, 1],
           [0, 0, 1, 1],
           [1, 1, 0, 1],
           [1, 1, 0, 0]])
    """
    q, k = check.chunked_mask(
        query_positions, key_positions, chunk
    )  # whole positions >= 0 (an iterator read once), chunk >= 1
    q, k = _pairs(q, k)  # as position_pairs: (Tq, 1), (1, Tk)
    same_chunk = q // chunk == k // chunk  # (Tq, Tk)
    return ~(same_chunk & (k <= q))  # True = blocked
    # --8<-- [end:chunked-mask]


# --8<-- [start:document-ids]
def document_ids(lengths):
    """The document of every token of a packed sequence (cu_seqlens).

    >>> document_ids([3, 1, 2])
    array([0, 0, 0, 1, 2, 2])
    """
    lengths = check.document_ids(lengths)  # (n,) ints >= 1, as int64
    return np.repeat(np.arange(len(lengths)), lengths)  # (sum(lengths),)
    # --8<-- [end:document-ids]


# --8<-- [start:document-mask]
def document_mask(query_documents, key_documents):
    """Blocked where the query's document is not the key's.

    >>> ids = document_ids([2, 1])
    >>> document_mask(ids, ids).astype(int)
    array([[0, 0, 1],
           [0, 0, 1],
           [1, 1, 0]])
    """
    q, k = check.document_mask(
        query_documents, key_documents
    )  # integer ids, an iterator read once
    q, k = _pairs(q, k)  # as position_pairs: (Tq, 1), (1, Tk)
    return q != k  # (Tq, Tk), True = another document
    # --8<-- [end:document-mask]


# --8<-- [start:packed-causal-mask]
def packed_causal_mask(lengths):
    """Causal attention within each document of a packed sequence.

    Two rules combined with |: a pair is blocked when either blocks it.
    This is what varlen attention (flash-attn's cu_seqlens) computes.

    >>> packed_causal_mask([2, 1]).astype(int)
    array([[0, 1, 1],
           [0, 0, 1],
           [1, 1, 0]])
    """
    ids = document_ids(lengths)  # (T,)
    positions = np.arange(len(ids))  # (T,): 0 .. T - 1
    future = causal_mask_for_positions(positions, positions)  # (T, T)
    return document_mask(ids, ids) | future  # (T, T)
    # --8<-- [end:packed-causal-mask]


# --8<-- [start:prefix-lm-mask]
def prefix_lm_mask(query_positions, key_positions, prefix):
    """Blocked unless k < prefix or k <= q: a bidirectional prefix.

    >>> prefix_lm_mask(range(4), range(4), prefix=2).astype(int)
    array([[0, 0, 1, 1],
           [0, 0, 1, 1],
           [0, 0, 0, 1],
           [0, 0, 0, 0]])
    """
    q, k = check.prefix_lm_mask(
        query_positions, key_positions, prefix
    )  # whole positions >= 0 (an iterator read once), prefix >= 0
    q, k = _pairs(q, k)  # as position_pairs: (Tq, 1), (1, Tk)
    return ~((k < prefix) | (k <= q))  # True = blocked
    # --8<-- [end:prefix-lm-mask]


# --8<-- [start:apply-rope]
def apply_rope(x, positions, base=10000.0, inv_freq=None, rotary_dim=None):
    """Rotary position embedding of x (..., T, d_head) at ``positions``.

    The rotate-half convention (GPT-NeoX, Hugging Face): feature i pairs
    with feature i + d_head / 2, and the pair turns by the angle
    position * base ** (-2 i / d_head). Meta's Llama code and RoFormer
    turn adjacent pairs (2i, 2i + 1) instead, the same after permuting
    the output features of Wq and Wk (columns here, as x @ W; rows of
    nn.Linear's weight). Rotations keep lengths, and q . k after
    rotation depends on the positions only through m - n. Positions of
    any int or float dtype; angles in float64, cast once.

    rotary_dim r (GPT-NeoX's partial rotary): only the first r features
    turn, pairs (i, i + r / 2) at base ** (-2 i / r); the rest pass
    through. inv_freq (r / 2,): the frequencies instead, e.g. from
    positions.rope_frequencies; r = 2 * len(inv_freq) by default.

    >>> x = np.array([[1.0, 0.0]])  # one row, d_head = 2
    >>> apply_rope(x, [1]).round(4)  # turned by 1 radian
    array([[0.5403, 0.8415]])
    """
    x, positions, freq, r = check.apply_rope(
        x, positions, base, inv_freq, rotary_dim
    )
    dtype = np.result_type(x.dtype, np.float32)
    x = x.astype(dtype, copy=False)  # int or bool x: rotate in float
    half = r // 2
    # --8<-- [start:apply-rope-rotary-dim]
    if freq is None:  # theta_i = base^(-2i / r): one per pair of features
        freq = float(base) ** (-2.0 * np.arange(half) / r)  # float64
    angle = positions.astype(np.float64)[:, None] * freq  # (T, r / 2)
    angle = np.concatenate([angle, angle], axis=-1)  # (T, r)
    cos, sin = np.cos(angle).astype(dtype), np.sin(angle).astype(dtype)
    x, passed = x[..., :r], x[..., r:]  # (..., T, r), (..., T, d_head - r)
    # rotate_half(x) = (-x2, x1): each pair (x1, x2) turned by 90 degrees
    x1, x2 = x[..., :half], x[..., half:]  # (..., T, r / 2) each
    rotated = np.concatenate([-x2, x1], axis=-1)  # (..., T, r)
    return np.concatenate([x * cos + rotated * sin, passed], -1)  # (.., d)
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
    slopes = 2.0 ** (-8.0 * np.arange(1, n + 1) / n)  # (n,)
    if n < n_head:  # every other slope of the rule for 2n: between
        odd = 2.0 ** (-8.0 * np.arange(1, 2 * n, 2) / (2 * n))  # (n,)
        slopes = np.concatenate([slopes, odd[: n_head - n]])
    return slopes  # (n_head,), float64
    # --8<-- [end:alibi-slopes]


# --8<-- [start:alibi-bias]
def alibi_bias(slopes, query_positions, key_positions):
    """The ALiBi bias -m_h (i - j) of query position i and key position j.

    slopes (H,), positions 1-D: returns (H, Tq, Tk), added to the
    scores (attention's bias). It grows more negative with distance,
    linearly, at each head's own slope; keys after the query get a
    positive bias and need the causal mask.

    Float slopes keep their dtype; integer slopes compute in float64.
    The bias is computed in float64 and cast once: positions cast to
    float16 first would give key 2048 and query 2049 the same value.

    >>> alibi_bias([0.5], [2], [0, 1, 2]).tolist()
    [[[-1.0, -0.5, 0.0]]]
    """
    slopes, q_pos, k_pos = check.alibi_bias(
        slopes, query_positions, key_positions
    )  # (H,) slopes, 1-D positions, finite
    dtype = slopes.dtype if slopes.dtype.kind == "f" else np.float64
    # -m (i - j) = m (j - i): 0 on the diagonal, negative before it
    q_pos, k_pos = q_pos.astype(np.float64), k_pos.astype(np.float64)
    ahead = k_pos[None, :] - q_pos[:, None]  # j - i: (Tq, Tk), float64
    bias = slopes.astype(np.float64)[:, None, None] * ahead  # (H, Tq, Tk)
    return bias.astype(dtype)  # rounded once, to the slopes' dtype
    # --8<-- [end:alibi-bias]


class MultiHeadAttention:
    """Self- or cross-attention with ``n_head`` heads, weights as x @ W.

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
        seed=0,
    ):
        self.n_kv_head, self.d_head = check.multi_head_attention(
            d_model, n_head, n_kv_head, rope, rope_base
        )  # H_kv (default H) divides H; d_head = d_model / H
        self.d_model, self.n_head = d_model, n_head
        self.rope, self.rope_base = rope, rope_base
        rng = np.random.default_rng(seed)
        bound = 1 / np.sqrt(d_model)  # nn.Linear's default init range

        def draw(*shape):
            return rng.uniform(-bound, bound, shape)

        d_kv = self.n_kv_head * self.d_head  # d_model when n_kv_head = H
        # --8<-- [start:mha-init-weights]
        # one matrix holds all heads side by side; draw: random weights
        self.Wq = draw(d_model, d_model)
        self.Wk = draw(d_model, d_kv)  # d_kv = d_model here
        self.Wv = draw(d_model, d_kv)
        self.Wo = draw(d_model, d_model)
        # --8<-- [end:mha-init-weights]
        self.bq = self.bk = self.bv = self.bo = None
        if bias:
            self.bq = draw(d_model)
            self.bk, self.bv = draw(d_kv), draw(d_kv)
            self.bo = draw(d_model)
        # --8<-- [end:mha-init]

    # --8<-- [start:from-torch]
    @classmethod
    def from_torch(cls, module):
        """This layer holding a torch_ref.MultiHeadAttention's weights.

        bfloat16 weights, which NumPy has no dtype for, come as float32
        (exactly: every bfloat16 is a float32); others keep their dtype.
        """
        check.from_torch(module)  # a torch_ref.MultiHeadAttention
        has_bias = module.wq.bias is not None
        twin = cls(
            module.d_model,
            module.n_head,
            n_kv_head=module.n_kv_head,
            bias=has_bias,
            rope=module.rope,
            rope_base=module.rope_base,
        )

        def as_array(p):
            p = p.detach().cpu()
            if str(p.dtype) == "torch.bfloat16":  # no bfloat16 in NumPy
                p = p.float()  # exact: a bfloat16 is a truncated float32
            return p.numpy().copy()

        # --8<-- [start:from-torch-transpose]
        layers = (module.wq, module.wk, module.wv, module.wo)
        # nn.Linear is (out, in) for x @ W.T; here x @ W: transpose
        twin.Wq, twin.Wk, twin.Wv, twin.Wo = (
            as_array(lin.weight).T for lin in layers
        )
        # --8<-- [end:from-torch-transpose]
        if has_bias:
            twin.bq, twin.bk, twin.bv, twin.bo = (
                as_array(lin.bias) for lin in layers
            )
        return twin
        # --8<-- [end:from-torch]

    # split_heads computes h, not -1: with B = 0, -1 is unknown
    # --8<-- [start:split-heads]
    def split_heads(self, x):
        # x: (B, T, H * dh)
        b, t, _ = x.shape
        # h = the number of heads in this tensor: H
        h = x.shape[-1] // self.d_head
        x = x.reshape(b, t, h, self.d_head)  # (B, T, H, dh)
        return x.transpose(0, 2, 1, 3)  # (B, H, T, dh)
        # --8<-- [end:split-heads]

    # --8<-- [start:merge-heads]
    def merge_heads(self, x):
        b, h, t, dh = x.shape  # (B, H, T, dh)
        # reshape copies the transposed array into plain row order
        # (last index fastest) where it needs to (pitfall 5)
        x = x.transpose(0, 2, 1, 3)  # (B, T, H, dh)
        return x.reshape(b, t, h * dh)  # (B, T, d_model)
        # --8<-- [end:merge-heads]

    # --8<-- [start:mha-forward]
    def __call__(self, x, mask=None, context=None, positions=None):
        """x (B, Tq, d_model); context (B, Tk, d_model) gives K and V.

        Returns y (B, Tq, d_model) and the weights (B, H, Tq, Tk).
        """
        x, context = check.forward(x, context, self.d_model, self.rope)
        context = x if context is None else context  # self-attention
        # project: Q = X Wq, K = C Wk, V = C Wv, all heads in one product
        q = linear(x, self.Wq, self.bq)  # (B, Tq, d_model)
        k = linear(context, self.Wk, self.bk)  # (B, Tk, H_kv * dh)
        v = linear(context, self.Wv, self.bv)  # (B, Tk, H_kv * dh)
        # split: one slice of the features per head
        q, k, v = self.split_heads(q), self.split_heads(k), self.split_heads(v)
        q, k = self.rotate(q, k, positions)  # RoPE only (kv-cache page)
        out, weights = self.attend_heads(q, k, v, mask)  # (B, H, Tq, dh)
        # merge: Concat(head_0, ..., head_{H-1}), then Wo
        y = linear(self.merge_heads(out), self.Wo, self.bo)
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
            positions = np.arange(q.shape[-2])  # (T,): 0 .. T - 1
        positions = check.rotate(positions)  # an iterator read once
        q = apply_rope(q, positions, self.rope_base)  # (B, H, T, dh)
        k = apply_rope(k, positions, self.rope_base)  # (B, H_kv, T, dh)
        return q, k
        # --8<-- [end:mha-rope]

    # --8<-- [start:mha-backward]
    def backward(self, x, dy, mask=None, context=None, positions=None):
        """Gradients of sum(y * dy) for y = self(x, mask, context)[0].

        Returns a dict keyed "x", "Wq", "Wk", "Wv", "Wo" (and "bq" to
        "bo" with biases). With a context, "x" covers the queries only
        and "context" the keys and values.
        """
        x, context, dy, positions = check.backward(
            x, context, dy, self.d_model, self.rope, positions
        )  # float arrays; dy (B, Tq, d_model) as y
        cross = context is not None
        if not cross:
            context = x  # x feeds all three projections
        grads = {}
        # the forward again: backward needs its intermediate values
        q = self.split_heads(linear(x, self.Wq, self.bq))  # (B, H, T, dh)
        k = self.split_heads(linear(context, self.Wk, self.bk))  # H_kv
        v = self.split_heads(linear(context, self.Wv, self.bv))  # H_kv
        if self.rope and positions is None:  # the gradients turn back
            positions = np.arange(x.shape[1])  # (T,): 0 .. T - 1
        q, k = self.rotate(q, k, positions)  # RoPE only
        out, _ = attention(q, k, v, mask)  # (B, H, Tq, dh)
        # the shapes shown below are for H_kv = H; with grouped heads
        # (a later page) dk and dv are (B, Tk, H_kv * dh), each summed
        # over its group of query heads inside attention_backward
        # --8<-- [start:mha-backward-output]
        # y = C Wo + bo, C = merge_heads(out): dWo = C^T dy, dC = dy Wo^T
        grads["Wo"], grads["bo"], d_merged = linear_backward(
            self.merge_heads(out), self.Wo, dy
        )  # (d_model, d_model), (d_model,), (B, Tq, d_model)
        # --8<-- [end:mha-backward-output]
        # --8<-- [start:mha-backward-split]
        # merge_heads is a transpose then a reshape; split_heads undoes
        # both, so it carries the gradient back: (B, Tq, d_model) to heads
        d_out = self.split_heads(d_merged)  # (B, H, Tq, dh)
        dq, dk, dv = attention_backward(q, k, v, d_out, mask)
        # --8<-- [end:mha-backward-split]
        # --8<-- [start:mha-backward-rope]
        if self.rope:  # R(angle)^T = R(-angle): turn the gradients back
            back = -np.asarray(positions, np.float64)  # (T,): any int type
            dq = apply_rope(dq, back, self.rope_base)  # (B, H, T, dh)
            dk = apply_rope(dk, back, self.rope_base)  # (B, H_kv, T, dh)
        # --8<-- [end:mha-backward-rope]
        # --8<-- [start:mha-backward-merge]
        # and merge_heads carries split_heads' gradient back
        dq = self.merge_heads(dq)  # (B, Tq, d_model)
        dk = self.merge_heads(dk)  # (B, Tk, d_model)
        dv = self.merge_heads(dv)  # (B, Tk, d_model)
        # --8<-- [end:mha-backward-merge]
        # --8<-- [start:mha-backward-projections]
        # Q = X Wq + bq: dWq = X^T dQ, dX = dQ Wq^T; K and V alike
        grads["Wq"], grads["bq"], dx = linear_backward(x, self.Wq, dq)
        grads["Wk"], grads["bk"], dc_k = linear_backward(context, self.Wk, dk)
        grads["Wv"], grads["bv"], dc_v = linear_backward(context, self.Wv, dv)
        if cross:  # a context was given (cross-attention)
            grads["x"], grads["context"] = dx, dc_k + dc_v
        else:  # one input used three times: its gradients add up
            grads["x"] = dx + dc_k + dc_v
        # --8<-- [end:mha-backward-projections]
        if self.bq is None:  # no biases, no bias gradients
            for name in ("bq", "bk", "bv", "bo"):
                del grads[name]
        return grads
        # --8<-- [end:mha-backward]


# --8<-- [start:linear]
def linear(x, weight, bias=None):
    """y = x W + b, the learned linear map: (..., d_in) -> (..., d_out).

    weight (d_in, d_out), bias (d_out,) or None. No checks.

    >>> linear(np.ones((1, 2)), np.ones((2, 3)), np.arange(3.0))
    array([[2., 3., 4.]])
    """
    y = x @ weight  # (..., d_out): each output a weighted sum of inputs
    return y if bias is None else y + bias
    # --8<-- [end:linear]


# --8<-- [start:linear-backward]
def linear_backward(x, weight, dy):
    """y = x W + b: the gradients of W, b and x, given dy = dL/dy.

    >>> dw, db, dx = linear_backward(np.ones((1, 2, 3)), np.ones((3, 4)),
    ...                              np.ones((1, 2, 4)))
    >>> dw.shape, db.tolist(), dx.tolist()
    ((3, 4), [2.0, 2.0, 2.0, 2.0], [[[4.0, 4.0, 4.0], [4.0, 4.0, 4.0]]])
    """
    x, weight, dy = check.linear_backward(x, weight, dy)  # dy (..., d_out)
    rows_x = x.reshape(-1, x.shape[-1])  # (B * T, d_in)
    rows_dy = dy.reshape(-1, dy.shape[-1])  # (B * T, d_out)
    # dW = X^T dY: a sum over every (batch, position) row
    dw = rows_x.T @ rows_dy  # (d_in, d_out)
    db = rows_dy.sum(axis=0)  # (d_out,): b was added to every row
    return dw, db, dy @ weight.T  # dX = dY W^T: (B, T, d_in)
    # --8<-- [end:linear-backward]


def __getattr__(name):
    """numpy_ref.MultiHeadLatentAttention, defined in latent_numpy.py.

    Loaded on first use, by name (PEP 562), so that latent_numpy may import
    this module without a circle, and a page that does not use latent
    attention neither loads nor carries it.
    """
    if name == "MultiHeadLatentAttention":
        latent = importlib.import_module("mha_ref.latent_numpy")
        return latent.MultiHeadLatentAttention
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
