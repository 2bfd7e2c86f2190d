"""Multi-head attention in NumPy: the teaching reference.

Shapes are batch-first: x is (B, T, d_model), heads are (B, H, T, d_head).
Masks are boolean with True = blocked. The site includes the named
sections of this file; torch_ref.py mirrors its names and order.
"""

import math

import numpy as np

from mha_ref import checks


# --8<-- [start:softmax]
def softmax(logits, axis=-1, empty_rows="raise"):
    """Softmax along ``axis``, stable for large logits, -inf = masked.

    A row of only -inf (no allowed key) is refused, or gets weights 0
    with empty_rows="zero", as SDPA's boolean mask defines it.

    >>> softmax(np.array([1000.0, 1000.0]))
    array([0.5, 0.5])
    >>> softmax(np.array([0.0, -np.inf]))
    array([1., 0.])
    >>> softmax(np.array([-np.inf, -np.inf]), empty_rows="zero")
    array([0., 0.])
    """
    values = checks.real_logits(logits, axis)  # float; no NaN, no +inf
    empty = np.all(np.isneginf(values), axis=axis, keepdims=True)
    checks.rows_without_keys(np.squeeze(empty, axis), empty_rows, "logits row")
    # shift-invariant: subtracting the row max keeps exp() <= 1; a row
    # of only -inf shifts by 0 instead, and all its exp() are 0
    row_max = np.max(values, axis=axis, keepdims=True)
    weights = np.exp(values - np.where(empty, 0.0, row_max))
    total = np.sum(weights, axis=axis, keepdims=True)  # 0 for such a row
    return weights / np.where(empty, 1.0, total)
    # --8<-- [end:softmax]


# --8<-- [start:softmax-backward]
def softmax_backward(probabilities, upstream):
    """Gradient w.r.t. the logits, given p = softmax(s) and dL/dp.

    The Jacobian-vector product dL/ds_j = p_j (g_j - sum_k p_k g_k):
    raising one score takes weight from every other position.

    >>> softmax_backward(np.array([0.5, 0.5]), np.array([1.0, 0.0]))
    array([ 0.25, -0.25])
    """
    p, g = np.asarray(probabilities), np.asarray(upstream)
    if p.shape != g.shape:
        raise ValueError(
            f"probabilities {p.shape} and upstream {g.shape} must match"
        )
    # g_bar = sum_k p_k g_k, one number per row
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


# --8<-- [start:attention]
def attention(q, k, v, mask=None, empty_rows="raise"):
    """q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv); True = blocked.

    k and v may have fewer heads (axis -3) than q, H % H_kv == 0.
    mask broadcasts to (..., Tq, Tk): key padding is (B, 1, 1, Tk),
    see key_padding_mask. int and bool inputs compute in float.
    Returns the output (..., Tq, dv) and the weights (..., Tq, Tk).
    A query row with every key masked is refused, or with
    empty_rows="zero" gets weights and output 0 (SDPA, flash-attn).
    """
    q, k, v, mask = checks.attention_arrays(q, k, v, mask, empty_rows)
    group = checks.kv_heads(q.shape, k.shape, v.shape)  # G = H // H_kv
    if group > 1:  # grouped-query attention: H_kv < H heads in k and v
        k, v = repeat_kv_heads(k, group), repeat_kv_heads(v, group)
    d = q.shape[-1]  # the head size d_k, not d_model
    # S = Q K^T / sqrt(d_k)
    scores = q @ np.swapaxes(k, -2, -1) / math.sqrt(d)  # (..., Tq, Tk)
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)  # before the softmax
    checks.scores_finite(scores, mask)  # q @ k^T can overflow: name it
    # each row sums to 1 over keys (or is 0: no key, empty_rows="zero")
    weights = softmax(scores, axis=-1, empty_rows=empty_rows)
    return weights @ v, weights  # (..., Tq, dv), (..., Tq, Tk)
    # --8<-- [end:attention]


# --8<-- [start:attention-backward]
def attention_backward(q, k, v, dout, mask=None, empty_rows="raise"):
    """Gradients of attention(q, k, v, mask)'s output, given dout = dL/dO.

    dout is (..., Tq, dv). Returns dq, dk, dv shaped as q, k and v, in
    the forward's dtype. The weights A are recomputed from q and k, as
    the forward made them; a row with no key (empty_rows="zero") has
    A = 0 and passes no gradient on.
    """
    q, k, v, dout = checks.backward_arrays(q, k, v, dout)  # one float type
    group = checks.kv_heads(q.shape, k.shape, v.shape)  # G = H // H_kv
    if group > 1:  # grouped-query attention: H_kv < H heads in k and v
        k, v = repeat_kv_heads(k, group), repeat_kv_heads(v, group)
    _, weights = attention(q, k, v, mask, empty_rows)  # A: (..., Tq, Tk)
    d = q.shape[-1]  # the head size d_k
    # --8<-- [start:attention-backward-dv]
    # dV = A^T dO: each value collects the rows that read it
    dv = np.swapaxes(weights, -2, -1) @ dout  # (..., Tk, dv)
    # --8<-- [end:attention-backward-dv]
    # --8<-- [start:attention-backward-da]
    # dA = dO V^T
    d_weights = dout @ np.swapaxes(v, -2, -1)  # (..., Tq, Tk)
    # --8<-- [end:attention-backward-da]
    # --8<-- [start:attention-backward-ds]
    # dS = A * (dA - rowsum(dA * A)); a blocked key has A = 0, so dS = 0
    d_scores = softmax_backward(weights, d_weights)  # (..., Tq, Tk)
    # --8<-- [end:attention-backward-ds]
    # --8<-- [start:attention-backward-dq-dk]
    # dQ = dS K / sqrt(d_k)
    dq = d_scores @ k / math.sqrt(d)  # (..., Tq, d)
    # dK = dS^T Q / sqrt(d_k)
    dk = np.swapaxes(d_scores, -2, -1) @ q / math.sqrt(d)  # (..., Tk, d)
    # --8<-- [end:attention-backward-dq-dk]
    # a batch dim that q, k or v shared (broadcast) sums its gradients
    dq, dk, dv = (
        sum_to_shape(dq, q.shape),
        sum_to_shape(dk, k.shape),
        sum_to_shape(dv, v.shape),
    )
    if group > 1:  # a key/value head served G query heads: add them up
        dk, dv = sum_kv_heads(dk, group), sum_kv_heads(dv, group)
    return dq, dk, dv
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
def causal_mask(t, tk=None, align=None):
    """(t, t) mask, True strictly above the diagonal: the future.

    >>> causal_mask(3).astype(int)
    array([[0, 1, 1],
           [0, 0, 1],
           [0, 0, 0]])

    (t, tk) with tk != t needs ``align``: "top_left" starts the diagonal
    at the first key (SDPA's is_causal), "bottom_right" ends it at the
    last key (flash-attn, a KV cache); a query before every key is a
    row with no allowed key.

    >>> causal_mask(2, 3, align="bottom_right").astype(int)
    array([[0, 0, 1],
           [0, 0, 0]])
    """
    tk, offset = checks.causal_shape(t, tk, align)  # offset 0 or tk - t
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
    q_pos, k_pos = np.asarray(query_positions), np.asarray(key_positions)
    checks.positions(q_pos.shape, k_pos.shape)  # one per row: 1-D each
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
    lengths = np.asarray(lengths)
    checks.key_padding(lengths, tk)  # ints in 1..tk, or (B, Tk) bools
    if lengths.dtype == bool:
        padded = lengths  # (B, Tk), True = padding
    else:
        tk = int(lengths.max()) if tk is None else tk
        padded = np.arange(tk)[None, :] >= lengths[:, None]  # (B, Tk)
    return padded[:, None, None, :]  # (B, 1, 1, Tk): heads, query rows
    # --8<-- [end:key-padding-mask]


# --8<-- [start:apply-rope]
def apply_rope(x, positions, base=10000.0):
    """Rotary position embedding of x (..., T, d_head) at ``positions``.

    The rotate-half convention (GPT-NeoX, Hugging Face): feature i pairs
    with feature i + d_head / 2, and the pair turns by the angle
    position * base ** (-2 i / d_head). Meta's Llama code and RoFormer
    turn adjacent pairs (2i, 2i + 1) instead, the same after permuting
    the output features of Wq and Wk (columns here, as x @ W; rows of
    nn.Linear's weight). Rotations keep lengths, and q . k after
    rotation depends on the positions only through m - n. Positions of
    any int or float dtype; angles in float64, cast once.

    >>> x = np.array([[1.0, 0.0]])  # one row, d_head = 2
    >>> apply_rope(x, [1]).round(4)  # turned by 1 radian
    array([[0.5403, 0.8415]])
    """
    x, positions = np.asarray(x), np.asarray(positions)
    checks.rope_inputs(x.shape, positions, base)  # even d, T positions
    d_head, dtype = x.shape[-1], np.result_type(x.dtype, np.float32)
    half = d_head // 2
    # theta_i = base^(-2i / d_head): one frequency per pair of features
    freq = float(base) ** (-2.0 * np.arange(half) / d_head)  # float64
    angle = positions.astype(np.float64)[:, None] * freq  # (T, d_head / 2)
    angle = np.concatenate([angle, angle], axis=-1)  # (T, d_head)
    cos, sin = np.cos(angle).astype(dtype), np.sin(angle).astype(dtype)
    # rotate_half(x) = (-x2, x1): each pair (x1, x2) turned by 90 degrees
    x1, x2 = x[..., :half], x[..., half:]  # (..., T, d_head / 2) each
    rotated = np.concatenate([-x2, x1], axis=-1)  # (..., T, d_head)
    return x * cos + rotated * sin  # (..., T, d_head)
    # --8<-- [end:apply-rope]


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
        checks.head_split(d_model, n_head)
        self.n_kv_head = n_head if n_kv_head is None else n_kv_head
        checks.kv_head_split(n_head, self.n_kv_head)
        self.d_model, self.n_head = d_model, n_head
        self.d_head = d_model // n_head
        self.rope, self.rope_base = rope, rope_base
        checks.rope_base(rope_base)  # > 0: base ** (-2i / d) is finite
        if rope:
            checks.rope_head_size(self.d_head)
        rng = np.random.default_rng(seed)
        bound = 1 / np.sqrt(d_model)  # nn.Linear's default init range

        def draw(*shape):
            return rng.uniform(-bound, bound, shape)

        # one matrix holds all heads side by side; K and V have n_kv_head
        d_kv = self.n_kv_head * self.d_head  # d_model when n_kv_head = H
        self.Wq = draw(d_model, d_model)
        self.Wk, self.Wv = draw(d_model, d_kv), draw(d_model, d_kv)
        self.Wo = draw(d_model, d_model)
        self.bq = self.bk = self.bv = self.bo = None
        if bias:
            self.bq = draw(d_model)
            self.bk, self.bv = draw(d_kv), draw(d_kv)
            self.bo = draw(d_model)
        # --8<-- [end:mha-init]

    # --8<-- [start:split-heads]
    def split_heads(self, x):
        b, t, _ = x.shape  # (B, T, H * dh); H_kv * dh for K and V
        x = x.reshape(b, t, -1, self.d_head)  # (B, T, H, dh)
        return x.transpose(0, 2, 1, 3)  # (B, H, T, dh)
        # --8<-- [end:split-heads]

    # --8<-- [start:merge-heads]
    def merge_heads(self, x):
        b, h, t, dh = x.shape  # (B, H, T, dh)
        x = x.transpose(0, 2, 1, 3)  # (B, T, H, dh)
        return x.reshape(b, t, h * dh)  # (B, T, d_model)
        # --8<-- [end:merge-heads]

    # --8<-- [start:mha-forward]
    def __call__(self, x, mask=None, context=None, positions=None):
        """x (B, Tq, d_model); context (B, Tk, d_model) gives K and V.

        ``positions`` (Tq,): where the rows of x sit, for RoPE only
        (default 0 .. Tq - 1).
        """
        x, context = checks.model_arrays(x, context, self.d_model)
        if context is None:
            context = x  # self-attention
        else:
            checks.rope_self_attention(self.rope, has_context=True)
        # Q = X Wq, K = X Wk, V = X Wv: one GEMM for all heads
        q = self.split_heads(_linear(x, self.Wq, self.bq))  # (B, H, T, dh)
        k = self.split_heads(_linear(context, self.Wk, self.bk))  # H_kv
        v = self.split_heads(_linear(context, self.Wv, self.bv))  # H_kv
        # --8<-- [start:mha-rope]
        if self.rope:  # after the head split, at absolute positions
            if positions is None:
                positions = np.arange(x.shape[1])  # (T,): 0 .. T - 1
            q = apply_rope(q, positions, self.rope_base)  # (B, H, T, dh)
            k = apply_rope(k, positions, self.rope_base)  # (B, H_kv, ..)
        # --8<-- [end:mha-rope]
        out, weights = attention(q, k, v, mask)  # (B, H, Tq, dh)
        # Concat(head_1, ..., head_h) Wo
        y = _linear(self.merge_heads(out), self.Wo, self.bo)
        return y, weights  # (B, Tq, d_model), (B, H, Tq, Tk)
        # --8<-- [end:mha-forward]

    # --8<-- [start:mha-backward]
    def backward(self, x, dy, mask=None, context=None, positions=None):
        """Gradients of sum(y * dy) for y = self(x, mask, context)[0].

        Returns a dict keyed "x", "Wq", "Wk", "Wv", "Wo" (and "bq" to
        "bo" with biases). With a context, "x" covers the queries only
        and "context" the keys and values.
        """
        x, context, dy = checks.model_backward_arrays(
            x, context, dy, self.d_model
        )  # float arrays; dy (B, Tq, d_model) as y
        cross = context is not None
        if not cross:
            context = x  # x feeds all three projections
        else:
            checks.rope_self_attention(self.rope, has_context=True)
        grads = {}
        # the forward again: backward needs its intermediate values
        q = self.split_heads(_linear(x, self.Wq, self.bq))  # (B, H, T, dh)
        k = self.split_heads(_linear(context, self.Wk, self.bk))  # H_kv
        v = self.split_heads(_linear(context, self.Wv, self.bv))  # H_kv
        if self.rope:
            if positions is None:
                positions = np.arange(x.shape[1])  # (T,): 0 .. T - 1
            q = apply_rope(q, positions, self.rope_base)  # (B, H, T, dh)
            k = apply_rope(k, positions, self.rope_base)  # (B, H_kv, ..)
        out, _ = attention(q, k, v, mask)  # (B, H, Tq, dh)
        # --8<-- [start:mha-backward-output]
        # y = M Wo + bo, M = merge_heads(out): dWo = M^T dy, dM = dy Wo^T
        grads["Wo"], grads["bo"], d_merged = linear_backward(
            self.merge_heads(out), self.Wo, dy
        )  # (d_model, d_model), (d_model,), (B, Tq, d_model)
        # --8<-- [end:mha-backward-output]
        # --8<-- [start:mha-backward-heads]
        # merge_heads is a transpose then a reshape; split_heads undoes
        # both, so it carries the gradient back: (B, Tq, d_model) to heads
        d_out = self.split_heads(d_merged)  # (B, H, Tq, dh)
        # dk and dv add the G query heads of each group (H_kv heads)
        dq, dk, dv = attention_backward(q, k, v, d_out, mask)
        # --8<-- [start:mha-backward-rope]
        if self.rope:  # R(angle)^T = R(-angle): turn the gradients back
            back = -np.asarray(positions, np.float64)  # (T,): any int type
            dq = apply_rope(dq, back, self.rope_base)  # (B, H, T, dh)
            dk = apply_rope(dk, back, self.rope_base)  # (B, H_kv, T, dh)
        # --8<-- [end:mha-backward-rope]
        # and merge_heads carries split_heads' gradient back
        dq = self.merge_heads(dq)  # (B, Tq, d_model)
        dk = self.merge_heads(dk)  # (B, Tk, H_kv * dh)
        dv = self.merge_heads(dv)  # (B, Tk, H_kv * dh)
        # --8<-- [end:mha-backward-heads]
        # --8<-- [start:mha-backward-projections]
        # Q = X Wq + bq: dWq = X^T dQ, dX = dQ Wq^T; K and V alike
        grads["Wq"], grads["bq"], dx = linear_backward(x, self.Wq, dq)
        grads["Wk"], grads["bk"], dc_k = linear_backward(context, self.Wk, dk)
        grads["Wv"], grads["bv"], dc_v = linear_backward(context, self.Wv, dv)
        if cross:
            grads["x"], grads["context"] = dx, dc_k + dc_v
        else:  # one input used three times: its gradients add up
            grads["x"] = dx + dc_k + dc_v
        # --8<-- [end:mha-backward-projections]
        if self.bq is None:  # no biases, no bias gradients
            for name in ("bq", "bk", "bv", "bo"):
                del grads[name]
        return grads
        # --8<-- [end:mha-backward]


def _linear(x, weight, bias):
    y = x @ weight
    return y if bias is None else y + bias


# --8<-- [start:linear-backward]
def linear_backward(x, weight, dy):
    """y = x W + b: the gradients of W, b and x, given dy = dL/dy.

    >>> dw, db, dx = linear_backward(np.ones((1, 2, 3)), np.ones((3, 4)),
    ...                              np.ones((1, 2, 4)))
    >>> dw.shape, db.tolist(), dx.tolist()
    ((3, 4), [2.0, 2.0, 2.0, 2.0], [[[4.0, 4.0, 4.0], [4.0, 4.0, 4.0]]])
    """
    rows_x = x.reshape(-1, x.shape[-1])  # (B * T, d_in)
    rows_dy = dy.reshape(-1, dy.shape[-1])  # (B * T, d_out)
    # dW = X^T dY: a sum over every (batch, position) row
    dw = rows_x.T @ rows_dy  # (d_in, d_out)
    db = rows_dy.sum(axis=0)  # (d_out,): b was added to every row
    return dw, db, dy @ weight.T  # dX = dY W^T: (B, T, d_in)
    # --8<-- [end:linear-backward]
