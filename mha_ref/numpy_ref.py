"""Multi-head attention in NumPy: the teaching reference.

Shapes are batch-first: x is (B, T, d_model), heads are (B, H, T, d_head).
Masks are boolean with True = blocked. The site includes the named
sections of this file; torch_ref.py mirrors its names and order.
"""

import math

import numpy as np

from mha_ref import checks


# --8<-- [start:softmax]
def softmax(logits, axis=-1):
    """Softmax along ``axis``, stable for large logits, -inf = masked.

    >>> softmax(np.array([1000.0, 1000.0]))
    array([0.5, 0.5])
    >>> softmax(np.array([0.0, -np.inf]))
    array([1., 0.])
    """
    values = checks.real_logits(logits)  # float; no NaN, no +inf
    checks.every_row_has_a_key(
        np.all(np.isneginf(values), axis=axis), what="logits row"
    )
    # shift-invariant: subtracting the row max keeps exp() <= 1
    shifted = values - np.max(values, axis=axis, keepdims=True)
    weights = np.exp(shifted)
    return weights / np.sum(weights, axis=axis, keepdims=True)
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
    # $\bar g = \sum_k p_k g_k$, one number per row
    weighted_mean = np.sum(p * g, axis=-1, keepdims=True)
    return p * (g - weighted_mean)
# --8<-- [end:softmax-backward]


# --8<-- [start:attention]
def attention(q, k, v, mask=None):
    """q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv); True = blocked.

    Returns the output (..., Tq, dv) and the weights (..., Tq, Tk).
    """
    checks.qkv_shapes(q.shape, k.shape, v.shape)
    for name, array in (("q", q), ("k", k), ("v", v)):
        checks.finite(array, name)
    d = q.shape[-1]  # the head size d_k, not d_model
    # $S = QK^\top / \sqrt{d_k}$
    scores = q @ np.swapaxes(k, -2, -1) / math.sqrt(d)  # (..., Tq, Tk)
    if mask is not None:
        mask = np.asarray(mask)
        checks.mask_dtype(mask.dtype.kind)
        checks.mask_shape(mask.shape, scores.shape)
        blocked = np.broadcast_to(mask, scores.shape)
        checks.every_row_has_a_key(np.all(blocked, axis=-1))
        scores = np.where(blocked, -np.inf, scores)  # before the softmax
    weights = softmax(scores, axis=-1)  # each row sums to 1 over keys
    return weights @ v, weights  # (..., Tq, dv), (..., Tq, Tk)
# --8<-- [end:attention]


# --8<-- [start:causal-mask]
def causal_mask(t):
    """(t, t) mask, True strictly above the diagonal: the future.

    >>> causal_mask(3).astype(int)
    array([[0, 1, 1],
           [0, 0, 1],
           [0, 0, 0]])
    """
    return np.triu(np.ones((t, t), dtype=bool), k=1)
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


class MultiHeadAttention:
    """Self- or cross-attention with ``n_head`` heads, weights as x @ W."""

    # --8<-- [start:mha-init]
    def __init__(self, d_model, n_head, bias=False, seed=0):
        checks.head_split(d_model, n_head)
        self.d_model, self.n_head = d_model, n_head
        self.d_head = d_model // n_head
        rng = np.random.default_rng(seed)
        bound = 1 / np.sqrt(d_model)  # nn.Linear's default init range

        def draw(*shape):
            return rng.uniform(-bound, bound, shape)

        # one (d_model, d_model) matrix holds all heads side by side
        self.Wq, self.Wk, self.Wv, self.Wo = (
            draw(d_model, d_model) for _ in range(4)
        )
        self.bq = self.bk = self.bv = self.bo = None
        if bias:
            self.bq, self.bk, self.bv, self.bo = (
                draw(d_model) for _ in range(4)
            )
    # --8<-- [end:mha-init]

    # --8<-- [start:split-heads]
    def split_heads(self, x):
        b, t, _ = x.shape  # (B, T, d_model)
        x = x.reshape(b, t, self.n_head, self.d_head)  # (B, T, H, dh)
        return x.transpose(0, 2, 1, 3)  # (B, H, T, dh)
    # --8<-- [end:split-heads]

    # --8<-- [start:merge-heads]
    def merge_heads(self, x):
        b, h, t, dh = x.shape  # (B, H, T, dh)
        x = x.transpose(0, 2, 1, 3)  # (B, T, H, dh)
        return x.reshape(b, t, h * dh)  # (B, T, d_model)
    # --8<-- [end:merge-heads]

    # --8<-- [start:mha-forward]
    def __call__(self, x, mask=None, context=None):
        """x (B, Tq, d_model); context (B, Tk, d_model) gives K and V."""
        checks.model_input(x.shape, self.d_model)
        if context is None:
            context = x  # self-attention
        else:
            checks.context_input(x.shape, context.shape, self.d_model)
        # $Q = XW_Q$, $K = XW_K$, $V = XW_V$: one GEMM for all heads
        q = self.split_heads(_linear(x, self.Wq, self.bq))
        k = self.split_heads(_linear(context, self.Wk, self.bk))
        v = self.split_heads(_linear(context, self.Wv, self.bv))
        out, weights = attention(q, k, v, mask)  # (B, H, Tq, dh)
        # $\mathrm{Concat}(\mathrm{head}_1, \ldots, \mathrm{head}_h) W_O$
        y = _linear(self.merge_heads(out), self.Wo, self.bo)
        return y, weights  # (B, Tq, d_model), (B, H, Tq, Tk)
    # --8<-- [end:mha-forward]


def _linear(x, weight, bias):
    y = x @ weight
    return y if bias is None else y + bias
