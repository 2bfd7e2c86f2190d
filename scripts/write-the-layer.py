# %% [markdown]
# ## Write the layer yourself
#
# Five functions, in order: `softmax`, `attention`, `split_heads`,
# `merge_heads` and `layer`. Each one is a stub that raises
# `NotImplementedError`: replace its body with yours, run the cell, then
# run the check cell after it. A check prints `ok` when your function
# agrees with the reference on every case, and otherwise names the
# mistake (`mha_ref.diagnose`); a stub not written yet prints "not
# written yet". Use NumPy; masks are boolean with True = blocked, and
# the weights are used as `x @ w`.

# %%
import html
import math

import numpy as np

import glue
from mha_ref import diagnose, diagnose_examples, numpy_ref, pitfalls


def check(name, report):
    """Print the checker's report and name it for the page."""
    print(report)
    glue.value(f"check_{name}", str(report))


# %% [markdown]
# ## One tiny case per function, to check by hand
#
# Each function on a case small enough to work out on paper, with what
# the reference returns: compare yours with these before you run its
# check.

# %%
tiny_x = np.array([1.0, 2.0, 3.0])  # softmax
tiny_q = np.eye(2)[None, None]  # (1, 1, 2, 2): q = k = the identity
tiny_v = np.array([[1.0, 2.0], [3.0, 4.0]])[None, None]  # (1, 1, 2, 2)
tiny_mask = numpy_ref.causal_mask(2)  # (2, 2), True = blocked
tiny_out, tiny_weights = numpy_ref.attention(tiny_q, tiny_q, tiny_v, tiny_mask)
tiny_seq = np.array([[[0.0, 1, 2, 3], [10, 11, 12, 13]]])  # (1, 2, 4)
tiny_layer = numpy_ref.MultiHeadAttention(4, 2)
tiny_split = tiny_layer.split_heads(tiny_seq)  # (1, 2, 2, 2)
# one head, every weight the identity: the layer is then attention
one_head = numpy_ref.MultiHeadAttention(2, 1)
one_head.Wq = one_head.Wk = one_head.Wv = one_head.Wo = np.eye(2)
tiny_y, _ = one_head(np.eye(2)[None], tiny_mask)  # (1, 2, 2): x = I
glue.value(
    "tiny",
    {
        "softmax_x": tiny_x,
        "softmax": numpy_ref.softmax(tiny_x),
        "q": tiny_q[0, 0],
        "v": tiny_v[0, 0],
        "weights": tiny_weights[0, 0],
        "attention": tiny_out[0, 0],
        "sequence": tiny_seq[0],
        "n_head": tiny_layer.n_head,
        "split_shape": str(tiny_split.shape),
        "split": tiny_split[0],
        "layer": tiny_y[0],
    },
)

# %% [markdown]
# ## 1. Softmax over the last axis
#
# $\mathrm{softmax}(x)_j = e^{x_j} / \sum_i e^{x_i}$. Subtract each
# row's largest value before `np.exp`: the result is the same, and no
# `exp` overflows.
#
# Hint: `x.max(axis=-1, keepdims=True)` keeps the axis, so the
# subtraction broadcasts row by row.


# %%
def softmax(x):
    """Softmax over the last axis of x."""
    raise NotImplementedError  # your code here


# %%
def attention_with_your_softmax(q, k, v, mask):
    scores = q @ k.swapaxes(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)
    return softmax(scores) @ v


check("softmax", diagnose.attention(attention_with_your_softmax))


# %% [markdown]
# ## 2. Attention for every head at once
#
# q of shape (B, H, Tq, d), k and v of shape (B, H, Tk, d), mask `None`
# or boolean, broadcastable to (B, H, Tq, Tk). Return the output
# (B, H, Tq, d): the five steps, with your `softmax`.
#
# Hint: `np.where(mask, -np.inf, scores)` puts $-\infty$ on every
# blocked key; `k.swapaxes(-2, -1)` is $K^\top$ for every head at once.


# %%
def attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(d), blocked keys at -inf) v."""
    raise NotImplementedError  # your code here


# %%
check("attention", diagnose.attention(attention))


# %% [markdown]
# ## 3. Split the heads, merge them back
#
# `split_heads` turns (B, T, d_model) into (B, H, T, d_head): each
# position's d_model features cut into H pieces of d_head, one per
# head. `merge_heads` undoes it. The check runs a layer built from
# yours and the reference attention.
#
# Hint: reshape to (B, T, H, d_head) first, then swap axes 1 and 2
# (`x.transpose(0, 2, 1, 3)`); merge does the same in reverse.


# %%
def split_heads(x, n_head):
    """(B, T, d_model) -> (B, n_head, T, d_model // n_head)."""
    raise NotImplementedError  # your code here


def merge_heads(x):
    """(B, H, T, d_head) -> (B, T, H * d_head)."""
    raise NotImplementedError  # your code here


# %%
def layer_with_your_heads(x, w_q, w_k, w_v, w_o, n_head, causal):
    q, k, v = (split_heads(x @ w, n_head) for w in (w_q, w_k, w_v))
    mask = numpy_ref.causal_mask(x.shape[1]) if causal else None
    out, _ = numpy_ref.attention(q, k, v, mask)
    return merge_heads(out) @ w_o


check("heads", diagnose.layer(layer_with_your_heads))


# %% [markdown]
# ## 4. The layer
#
# x (B, T, d_model) and four (d_model, d_model) weights: project to
# Q, K and V, split the heads, attend (causal: query i sees keys 0 to
# i), merge, project with W_O. Use your functions from above.
#
# Hint: the causal mask is `np.triu(np.ones((T, T), dtype=bool), k=1)`:
# True above the diagonal, where the key comes after the query.


# %%
def layer(x, w_q, w_k, w_v, w_o, n_head, causal):
    """x (B, T, d_model) -> y (B, T, d_model)."""
    raise NotImplementedError  # your code here


# %%
check("layer", diagnose.layer(layer))


# %% [markdown]
# ## What a check prints for a wrong attempt
#
# Four planted attempts, each with one mistake of the pitfalls page,
# and what the check cell prints for each.


# %%
def softmax_over_queries(q, k, v, mask):
    scores = q @ k.swapaxes(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)
    return pitfalls.wrong_softmax_axis(scores) @ v


def mask_after_softmax(q, k, v, mask):
    scores = q @ k.swapaxes(-2, -1) / math.sqrt(q.shape[-1])
    if mask is None:
        return numpy_ref.softmax(scores) @ v
    return pitfalls.wrong_mask_after_softmax(scores, mask) @ v


def split_without_transpose(x, w_q, w_k, w_v, w_o, n_head, causal):
    q, k, v = (
        pitfalls.wrong_split_heads(x @ w, n_head) for w in (w_q, w_k, w_v)
    )
    mask = numpy_ref.causal_mask(x.shape[1]) if causal else None
    out, _ = numpy_ref.attention(q, k, v, mask)
    b, h, t, d_head = out.shape
    return out.transpose(0, 2, 1, 3).reshape(b, t, h * d_head) @ w_o


attempts = [
    ("1. softmax", "over the queries", softmax_over_queries, "attention"),
    (
        "2. attention",
        "mask after the softmax",
        mask_after_softmax,
        "attention",
    ),
    (
        "3. heads",
        "split without the transpose",
        split_without_transpose,
        "layer",
    ),
    (
        "4. layer",
        "scores divided by sqrt(d_model)",
        diagnose_examples.pitfall_layer("scale"),
        "layer",
    ),
]
rows = []
for step, planted, fn, kind in attempts:
    report = getattr(diagnose, kind)(fn)
    print(f"{step} ({planted}):\n{report}")
    # program output: marked, so no glossary tooltip lands in it
    # (pipeline/glossary_html.py)
    printed = html.escape(str(report), quote=False)
    rows.append([step, planted, f'<span class="mha-output">{printed}</span>'])
glue.table("wrong-attempts", ["check", "planted mistake", "it prints"], rows)
