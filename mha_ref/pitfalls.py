"""The six mistakes of a from-scratch implementation, as runnable code.

Each ``wrong_*`` function is the mistake; the page shows it beside the
correct section of numpy_ref.py / torch_ref.py, and scripts/ measure the
symptom. Nothing here is used by the references themselves.
"""

import numpy as np

from mha_ref import numpy_ref


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
    if renormalise:  # right in exact maths; the sum can underflow to 0
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
