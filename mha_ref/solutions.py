"""Solutions to the page "Write the layer yourself".

Each function is what a reader writes in the page's notebook, in the
order the notebook asks for them; ``diagnose`` checks each one there,
and the tests check these. Plain NumPy, masks with True = blocked,
weights used as x @ w.
"""

import math

import numpy as np


# --8<-- [start:solution-softmax]
def softmax(x):
    """Softmax over the last axis, shifted by the row's max first."""
    e = np.exp(x - x.max(axis=-1, keepdims=True))  # largest term is 1
    return e / e.sum(axis=-1, keepdims=True)
    # --8<-- [end:solution-softmax]


# --8<-- [start:solution-attention]
def attention(q, k, v, mask=None):
    """q (B, H, Tq, d), k and v (B, H, Tk, d) -> (B, H, Tq, d)."""
    scores = q @ k.swapaxes(-2, -1) / math.sqrt(q.shape[-1])  # (.., Tq, Tk)
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)  # True = blocked
    return softmax(scores) @ v  # (B, H, Tq, d)
    # --8<-- [end:solution-attention]


# --8<-- [start:solution-split-heads]
def split_heads(x, n_head):
    """(B, T, d_model) -> (B, H, T, d_head)."""
    b, t, d_model = x.shape
    x = x.reshape(b, t, n_head, d_model // n_head)  # (B, T, H, dh)
    return x.transpose(0, 2, 1, 3)  # (B, H, T, dh)
    # --8<-- [end:solution-split-heads]


# --8<-- [start:solution-merge-heads]
def merge_heads(x):
    """(B, H, T, d_head) -> (B, T, d_model)."""
    b, h, t, d_head = x.shape
    x = x.transpose(0, 2, 1, 3)  # (B, T, H, dh)
    return x.reshape(b, t, h * d_head)  # (B, T, d_model)
    # --8<-- [end:solution-merge-heads]


# --8<-- [start:solution-layer]
def layer(x, w_q, w_k, w_v, w_o, n_head, causal):
    """x (B, T, d_model) -> y (B, T, d_model), weights as x @ w."""
    t = x.shape[1]
    q = split_heads(x @ w_q, n_head)  # (B, H, T, dh)
    k = split_heads(x @ w_k, n_head)
    v = split_heads(x @ w_v, n_head)
    mask = None
    if causal:  # key j after query i is blocked
        mask = np.triu(np.ones((t, t), dtype=bool), k=1)  # (T, T)
    out = attention(q, k, v, mask)  # (B, H, T, dh)
    return merge_heads(out) @ w_o  # (B, T, d_model)
    # --8<-- [end:solution-layer]
