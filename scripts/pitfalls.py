# %% [markdown]
# ## The inputs, drawn once
#
# Each mistake in `mha_ref/pitfalls.py` runs beside the right code on
# the same input, and the difference is its symptom. The random inputs
# are drawn here, from one seed and in this order, so every cell below
# can be rerun on its own and gives the page's numbers. Only the split
# and merge of `small` are used, never its weights.

# %%
import numpy as np
import torch

import glue
from mha_ref import numpy_ref, pitfalls, tolerances, torch_ref

rng = np.random.default_rng(0)
axis_scores = rng.standard_normal((3, 3))  # mistake 4: (Tq, Tk)
heads_out = rng.standard_normal((1, 2, 4, 4))  # mistake 5: (B, H, T, dh)
x_split = rng.standard_normal((2, 4, 8))  # mistake 1: (B, T, d_model)
# mistake 2: one head of a layer with d_model = 512 and 8 heads
d_model, n_head, n_rows, n_keys = 512, 8, 500, 16
d_head = d_model // n_head
q = rng.standard_normal((n_rows, 1, d_head))  # one query per row
k = rng.standard_normal((n_rows, n_keys, d_head))  # its n_keys keys
small = numpy_ref.MultiHeadAttention(8, 2)  # d_model = 8, two heads

# %% [markdown]
# ## 1. Splitting heads
#
# Both versions turn $(B, T, d_\text{model})$ into a tensor of shape
# $(B, H, T, d_\text{head})$; only the right one keeps each position's
# features together.

# %%
right = small.split_heads(x_split)  # (B, H, T, dh)
wrong = pitfalls.wrong_split_heads(x_split, small.n_head)  # same shape
glue.value(
    "wrong_split",
    {
        "shape_right": list(right.shape),
        "shape_wrong": list(wrong.shape),
        "same_shape": right.shape == wrong.shape,
        "max_abs_diff": float(abs(right - wrong).max()),
        "largest_entry": float(abs(right).max()),
    },
)

# %% [markdown]
# Where does each entry of a head come from? Fill the input with its
# own addresses: entry $(t, c)$ holds $t \cdot d_\text{model} + c$, so
# after the split, `// d_model` recovers the position and `% d_model`
# the channel.

# %%
t = 4
address = np.arange(t * small.d_model).reshape(1, t, small.d_model)
right = small.split_heads(address)[0]  # (H, T, dh)
wrong = pitfalls.wrong_split_heads(address, small.n_head)[0]
own = np.arange(t)[None, :, None]  # the position each row should hold
split = glue.value(
    "head_split",
    {
        "t": t,
        "d_model": small.d_model,
        "n_head": small.n_head,
        "d_head": small.d_head,
        "right_positions": right // small.d_model,
        "right_channels": right % small.d_model,
        "wrong_positions": wrong // small.d_model,
        "wrong_channels": wrong % small.d_model,
        "wrong_rows_at_own_position": int(
            np.all(wrong // small.d_model == own, axis=-1).sum()
        ),
        "rows": small.n_head * t,
    },
)


def draw(fig, theme):
    panels = [
        ("wrong", "wrong: reshape to (B, H, T, dh)"),
        ("right", "right: (B, T, H, dh), transpose"),
    ]
    axes = fig.subplots(2, 1)  # stacked: fits a phone's column
    for ax, (which, title) in zip(axes, panels, strict=True):
        glue.draw_head_split(
            ax,
            theme,
            split[f"{which}_positions"],  # (H, T, dh)
            split[f"{which}_channels"],
            fontsize=10,
            short=True,
        )
        ax.set_title(title, fontsize=9)
    fig.suptitle(
        f"Where each head's entries come from\n"
        f"(T = {t}, d_model = {small.d_model});\n"
        "a cell t,c: position t, channel c",
        fontsize=10,
    )


glue.figure(
    "head-split",
    draw,
    figsize=(3.7, 7.0),
    alt=(
        f"Two grids, one above the other, of {split['rows']} rows "
        f"(head, row) by "
        f"{small.d_head} columns, each cell coloured by the token "
        "position it came from and labelled t,c, that position and input "
        "channel. Below, with reshape then transpose, row r of every head "
        "holds position r and each head its own block of channels. Above, "
        "with a direct reshape, only "
        f"{split['wrong_rows_at_own_position']} of {split['rows']} rows "
        "hold their own position: each head is a "
        "pile of slices from other positions and other heads' channels."
    ),
)

# %% [markdown]
# ## 2. Scaling by the head size
#
# Dividing by $\sqrt{d_\text{model}}$ instead of $\sqrt{d_\text{head}}$
# flattens the weights. For `n_rows` random unit-variance queries, each
# against `n_keys` keys, the cell takes the median of the largest
# softmax weight with each scale.

# %%
right = numpy_ref.softmax(q @ k.swapaxes(-2, -1) / np.sqrt(d_head))
wrong = numpy_ref.softmax(pitfalls.wrong_scale_scores(q, k, d_model))
glue.value(
    "wrong_scale",
    {
        "d_model": d_model,
        "d_head": d_head,
        "n_keys": n_keys,
        "uniform_weight": 1 / n_keys,
        "max_weight_right": float(np.median(right.max(axis=-1))),
        "max_weight_wrong": float(np.median(wrong.max(axis=-1))),
    },
)

# %% [markdown]
# ## 3. Masking before the softmax
#
# Two scores, the second key blocked. Masking before the softmax gives
# all the weight to the first key; zeroing after it leaves half of the
# weight missing. Dividing by the remaining sum repairs that in exact
# arithmetic, but with scores $[-1000, 0]$ the allowed key's weight
# underflows to zero and the renormalised row is $0 / 0$.

# %%
blocked = np.array([False, True])
scores = np.array([0.0, 0.0])
underflow = np.array([-1000.0, 0.0])  # the allowed key scores far lower


def masked_before(s):
    return numpy_ref.softmax(np.where(blocked, -np.inf, s))


with np.errstate(invalid="ignore"):  # 0 / 0 is the point here
    underflow_renormalised = pitfalls.wrong_mask_after_softmax(
        underflow, blocked, renormalise=True
    )
glue.value(
    "mask_demo",
    {
        "scores": scores,
        "blocked": blocked,
        "softmax": numpy_ref.softmax(scores),
        "masked_before": masked_before(scores),
        "zeroed_after": pitfalls.wrong_mask_after_softmax(scores, blocked),
        "renormalised": pitfalls.wrong_mask_after_softmax(
            scores, blocked, renormalise=True
        ),
        "underflow_scores": underflow,
        "underflow_softmax": numpy_ref.softmax(underflow),
        "underflow_zeroed_after": pitfalls.wrong_mask_after_softmax(
            underflow, blocked
        ),
        "underflow_renormalised": underflow_renormalised,
        "underflow_masked_before": masked_before(underflow),
    },
)

# %% [markdown]
# ## 4. Softmax over the key axis
#
# Normalising a $3 \times 3$ score matrix over the queries (axis $-2$)
# instead of the keys makes the columns sum to one, and the rows not.

# %%
by_column = pitfalls.wrong_softmax_axis(axis_scores)
glue.value(
    "wrong_axis",
    {
        "scores": axis_scores,
        "row_sums": by_column.sum(axis=-1),
        "col_sums": by_column.sum(axis=-2),
        "right_row_sums": numpy_ref.softmax(axis_scores).sum(axis=-1),
    },
)

# %% [markdown]
# ## 5. Merging heads back
#
# Reshaping $(B, H, T, d_\text{head})$ to $(B, T, d_\text{model})$
# without the transpose raises nothing. In PyTorch, `.view` after the
# transpose but without `.contiguous()` does raise: the cell keeps its
# message.

# %%
merged = small.merge_heads(heads_out)  # (B, T, d_model)
wrong = pitfalls.wrong_merge_heads(heads_out)  # same shape
glue.value(
    "wrong_merge",
    {
        "max_abs_diff": float(np.abs(wrong - merged).max()),
        "largest_entry": float(np.abs(merged).max()),
    },
)
out = torch.zeros(2, 4, 6, 8)  # (B, H, T, dh)
try:
    out.transpose(1, 2).view(2, 6, 32)  # no .contiguous()
except RuntimeError as error:
    glue.value("wrong_view_error", str(error))
else:
    raise ValueError("transpose(1, 2).view(...) did not raise")

# %% [markdown]
# ## 6. Weight layouts
#
# `nn.Linear` stores $(\text{out}, \text{in})$; the NumPy layer computes
# $x W$ with $(\text{in}, \text{out})$. Copied without the transpose, a
# correct layer disagrees with a correct layer.

# %%
torch.manual_seed(0)
module = torch_ref.MultiHeadAttention(8, 2, dtype=torch.float64)
x = torch.randn(2, 4, 8, dtype=torch.float64)  # (B, T, d_model)
with torch.no_grad():
    expected = module(x)[0].numpy()  # (B, T, d_model)


def copy_without_transpose(module):
    """from_torch's copy, with each nn.Linear weight copied as stored."""
    twin = numpy_ref.MultiHeadAttention.from_torch(module)
    twin.Wq, twin.Wk, twin.Wv, twin.Wo = (
        pitfalls.wrong_copy_from_linear(lin.weight.detach().numpy())
        for lin in (module.wq, module.wk, module.wv, module.wo)
    )
    return twin


right = numpy_ref.MultiHeadAttention.from_torch(module)(x.numpy())[0]
wrong = copy_without_transpose(module)(x.numpy())[0]
glue.value(
    "wrong_layout",
    {
        "max_abs_diff": float(np.abs(wrong - expected).max()),
        "right_max_abs_diff": float(np.abs(right - expected).max()),
    },
)

# %% [markdown]
# ## Your turn: break the layer, watch the parity number
#
# A PyTorch layer gives the reference output; its NumPy twin
# (`numpy_ref.MultiHeadAttention.from_torch`) is then run step by step
# by `forward` below, which can swap one step for one of the mistakes.
# With no mistake the two agree to rounding error (float64); each
# mistake runs without an error and gives the right shape, and only the
# difference shows it.
# You can also break one of the right sections above (the PyTorch
# `split-heads`, say), run it, and rerun this cell: the reference itself
# moves, and the first row stops being "ok".

# %%
torch.manual_seed(0)
B, T, D_MODEL, N_HEAD = 2, 6, 16, 4
module = torch_ref.MultiHeadAttention(D_MODEL, N_HEAD, dtype=torch.float64)
x_t = torch.randn(B, T, D_MODEL, dtype=torch.float64)  # (B, T, d_model)
mask_t = torch_ref.causal_mask(T)  # (T, T), True = blocked
with torch.no_grad():
    y_ref = module(x_t, mask=mask_t)[0].numpy()  # (B, T, d_model)
x, mask = x_t.numpy(), mask_t.numpy()
twin = numpy_ref.MultiHeadAttention.from_torch(
    module
)  # numpy_ref.MultiHeadAttention


def forward(layer, x, mask, mistake=None):
    """The layer's forward, one step at a time, with at most one mistake."""

    def split(a):
        if mistake == "1 split":
            return pitfalls.wrong_split_heads(a, layer.n_head)
        return layer.split_heads(a)  # (B, H, T, dh)

    q, k, v = (split(x @ w) for w in (layer.Wq, layer.Wk, layer.Wv))
    if mistake == "2 scale":
        scores = pitfalls.wrong_scale_scores(q, k, layer.d_model)
    else:  # S = Q K^T / sqrt(d_head)
        scores = q @ k.swapaxes(-2, -1) / np.sqrt(layer.d_head)
    masked = np.where(mask, -np.inf, scores)  # (B, H, T, T)
    if mistake == "3 mask after":
        weights = pitfalls.wrong_mask_after_softmax(scores, mask)
    elif mistake == "4 axis":
        weights = pitfalls.wrong_softmax_axis(masked)
    else:
        weights = numpy_ref.softmax(masked)
    out = weights @ v  # (B, H, T, dh)
    if mistake == "5 merge":
        merged = pitfalls.wrong_merge_heads(out)
    else:
        merged = layer.merge_heads(out)  # (B, T, d_model)
    return merged @ layer.Wo  # (B, T, d_model)


tolerance = tolerances.atol(np.float64)
mistakes = ["1 split", "2 scale", "3 mask after", "4 axis", "5 merge"]
wrong_twin = copy_without_transpose(module)  # mistake 6: right code
for mistake in [None, *mistakes, "6 layout"]:
    layer = wrong_twin if mistake == "6 layout" else twin
    diff = np.abs(forward(layer, x, mask, mistake) - y_ref).max()
    verdict = "ok" if diff <= tolerance else "TOO LARGE"
    print(f"{mistake or 'none':<13}: max difference {diff:.1e}  {verdict}")

# %% [markdown]
# ## Exercises
#
# The page's exercise, computed: the softmax of a 2 x 2 score matrix
# over the wrong axis (the queries), and its row sums. Change the
# scores and rerun.

# %%
ex_scores = np.array([[0.0, 0.0], [2.0, 0.0]])  # (Tq, Tk)
ex_wrong = pitfalls.wrong_softmax_axis(ex_scores)  # columns sum to 1
glue.value(
    "ex_axis",
    {
        "scores": ex_scores,
        "wrong_weights": ex_wrong,
        "row_sums": ex_wrong.sum(axis=-1),
        "col_sums": ex_wrong.sum(axis=-2),
    },
)
