# %% [markdown]
# ## The causal mask for three positions
#
# `causal_mask(T)` is a boolean matrix with True = blocked: the strict
# upper triangle, the future. The page prints it for $T = 3$.

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

import glue
from mha_ref import numpy_ref, torch_ref

np.set_printoptions(precision=3, suppress=True)
t = glue.value("t", 3)
causal_mask = glue.value("causal_mask", numpy_ref.causal_mask(t))


# The square case alone, as the page shows it; the library's causal_mask
# also takes a number of keys and a corner (the page's box).
# --8<-- [start:causal-mask-short-numpy]
def causal_mask_short(t):
    """(t, t) mask, True strictly above the diagonal: the future."""
    return np.triu(np.ones((t, t), dtype=bool), k=1)  # (t, t)
    # --8<-- [end:causal-mask-short-numpy]


# --8<-- [start:causal-mask-short-torch]
def torch_causal_mask_short(t):
    """(t, t) mask, True strictly above the diagonal: the future."""
    ones = torch.ones(t, t, dtype=torch.bool)  # (t, t)
    return torch.triu(ones, diagonal=1)  # (t, t)
    # --8<-- [end:causal-mask-short-torch]


for n in range(1, 9):  # the short versions agree with the library's
    same = np.array_equal(causal_mask_short(n), numpy_ref.causal_mask(n))
    same = same and torch.equal(
        torch_causal_mask_short(n), torch_ref.causal_mask(n)
    )
    if not same:
        raise RuntimeError(f"the short causal mask differs at t = {n}")

# %% [markdown]
# ## The four steps on four tokens
#
# Four positions, head size 2, small integers so the numbers can be
# redone by hand, run through `numpy_ref.dot_product_attention` with
# the causal mask. The cell names the scores before and after the mask,
# the weights $A$ and the output $O = AV$: the page shows them. Edit
# `q`, `k` or `v` and rerun: row 0 never changes its weights (one
# allowed key), and every row of $A$ still sums to 1.

# %%
q = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, -1.0]])  # (T, d)
k = np.array([[1.0, 1.0], [0.0, 2.0], [-1.0, 1.0], [1.0, 0.0]])  # (T, d)
v = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 2.0]])  # (T, dv)
T, d = q.shape
mask = numpy_ref.causal_mask(T)  # (T, T), True = blocked
out, weights = numpy_ref.dot_product_attention(q, k, v, mask)
scores = q @ k.T / np.sqrt(d)  # S = Q K^T / sqrt(d), before the mask
example = glue.value(
    "example",
    {
        "t": T,
        "d_k": d,
        "q": q,
        "k": k,
        "v": v,
        "mask": mask,
        "scores": scores,
        "masked_scores": np.where(mask, -np.inf, scores),
        "weights": weights,
        "row_sums": weights.sum(axis=-1),
        "output": out,
        "future_weight": weights[mask].max(),
    },
)
print("scores S = Q K^T / sqrt(d):\n", scores)
print("weights A:\n", weights)
print("output O = A V:\n", out)

# %% [markdown]
# ## Three checks on steps 2 and 3
#
# Equal scores: with $Q = 0$ every score is 0, so row $i$ shares its
# weight equally among its $i + 1$ allowed keys, and the output is the
# running mean of the value rows. Masking before the softmax equals a
# softmax over all keys, the blocked ones then zeroed and each row
# renormalised. And adding a constant to every score (here 1000, whose
# exp overflows) leaves the weights as they were: `softmax_rows`
# subtracts the row max first.

# %%
out_eq, weights_eq = numpy_ref.dot_product_attention(0 * q, k, v, mask)
running_mean = np.cumsum(v, axis=0) / np.arange(1, T + 1)[:, None]
after = np.where(mask, 0.0, numpy_ref.softmax_rows(scores))  # then zero
after = after / after.sum(axis=-1, keepdims=True)  # and renormalise
shifted = numpy_ref.softmax_rows(np.where(mask, -np.inf, scores + 1000))
checks_23 = glue.value(
    "checks",
    {
        "equal_diagonal": np.diagonal(weights_eq),  # 1 / (i + 1)
        "equal_last_row": weights_eq[-1],
        "running_mean_difference": np.abs(out_eq - running_mean).max(),
        "mask_after_difference": np.abs(after - weights).max(),
        "shift_difference": np.abs(shifted - weights).max(),
    },
)

# %% [markdown]
# ## The data flow, drawn
#
# The start page draws this example's path from $X$ to $O$: one grid
# per matrix, labelled with its shape and coloured on its own scale
# (the weights from 0 to 1; their values are printed on the page), the
# blocked cells hatched. The example starts
# at $Q$, $K$ and $V$, so $X$ is an empty grid of $T$ rows: its width
# $d_\text{model}$ is whatever the model's is.


# %%
def draw_flow(fig, theme):
    ax = glue.diagram_axes(fig, 18.4, 22.0)
    m = glue.draw_matrix  # (ax, x, y, theme, values, ...): right edge
    arrow = glue.draw_arrow  # (ax, start, end, theme, text)
    line = {"color": theme.text, "lw": 1.0}
    x_below = rf"{T} × $d_\mathrm{{model}}$"  # mathtext, not d_model
    m(ax, 0, 1.4, theme, shape=(T, 4), label="X", below=x_below)
    arrow(ax, (4.2, 3.4), (9.4, 3.4), theme, r"$\times W_Q, W_K, W_V$")
    for x, name, rows in ((9.6, "Q", q), (12.6, "K", k), (15.6, "V", v)):
        m(ax, x, 1.4, theme, rows, label=name, below=f"{T} × {d}")
    # Q and K meet, then one arrow to S
    ax.plot([10.6, 12.1, 13.6], [6.4, 7.2, 6.4], **line)
    arrow(ax, (12.1, 7.2), (2.6, 8.4), theme)
    ax.text(3.6, 7.0, "QKᵀ / √dₖ", ha="left", va="center", fontsize=11.5)
    m(ax, 0, 9.2, theme, scores, label="S", below=f"{T} × {T}")
    arrow(ax, (4.2, 11.2), (6.2, 11.2), theme, r"$+\,M$")
    m(ax, 6.4, 9.2, theme, scores, blocked=mask, label="S + M")
    ax.text(8.4, 13.45, f"{T} × {T}", ha="center", va="top")
    arrow(ax, (10.6, 11.2), (13.6, 11.2), theme)
    ax.text(12.1, 11.45, "softmax", ha="center", va="top", fontsize=10)
    m(ax, 13.8, 9.2, theme, weights, blocked=mask, vmin=0, vmax=1)
    ax.text(15.8, 8.95, "A", ha="center", va="bottom")
    ax.text(15.8, 13.45, f"{T} × {T}", ha="center", va="top")
    arrow(ax, (15.8, 14.5), (15.8, 15.9), theme)
    ax.text(15.4, 15.2, r"$\times V$", ha="right", va="center", fontsize=11.5)
    # V joins the A x V step, round the right of S + M and A
    ax.plot([17.6, 18.2, 18.2, 15.8], [3.4, 3.4, 15.2, 15.2], **line)
    m(ax, 14.8, 17.0, theme, out, label="O", below=f"{T} × {d}")


glue.figure(
    "data-flow",
    draw_flow,
    figsize=(3.7, 4.45),  # fits a 390 px phone column (about 355 px)
    alt=(
        "The data flow of one attention head on the four-token example, "
        "one grid per matrix, labelled with its shape. Each grid is "
        "coloured on its own scale, dark for its smallest value and "
        "yellow for its largest; A's from 0 to 1. X, 4 rows by "
        "d_model columns, times W_Q, W_K and W_V gives Q, K and V, "
        f"each {T} by {d}. Q times K transposed over the square root of "
        f"d_k gives the scores S, {T} by {T}. Adding the mask M blocks "
        "(hatches) the upper triangle, the future. The row softmax gives "
        f"the weights A, {T} by {T}, zero on the blocked cells. A times V "
        f"gives the output O, {T} by {d}: one row per position, as wide "
        "as a value."
    ),
)

# %% [markdown]
# ## Three masks, side by side
#
# No mask lets every query read every key; the causal mask hides the
# future; a padding mask built by `key_padding_mask` hides the last key
# from every query (a sequence of length 3 padded to 4). It is made for
# batched scores $(B, H, T_q, T_k)$; with one sequence and one head we
# keep its last two axes, $(1, T_k)$, which broadcast over the rows. Try
# the length 2, or combine two masks with `|`.

# %%
masks = {
    "no mask": None,
    "causal": mask,
    # (B, 1, 1, Tk) -> (1, Tk): one sequence, shared by every query row
    "padding, length 3": numpy_ref.key_padding_mask([3], tk=4)[0, 0],
}
fig, axes = plt.subplots(1, 3, figsize=(9, 3), sharey=True)
for ax, (name, m) in zip(axes, masks.items(), strict=True):
    _, w = numpy_ref.attention(q, k, v, m)
    ax.imshow(w, vmin=0, vmax=1, cmap="viridis")
    for (i, j), x in np.ndenumerate(w):
        ax.text(
            j,
            i,
            f"{x:.2f}",
            ha="center",
            va="center",
            color="white" if x < 0.5 else "black",
            fontsize=8,
        )
    ax.set_title(name)
    ax.set_xticks(range(len(k)))
    ax.set_yticks(range(len(q)))
    ax.set_xlabel("key j")
axes[0].set_ylabel("query i")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## The PyTorch version gives the same numbers
#
# `torch_ref.attention` mirrors the NumPy function line for line. On the
# same float64 inputs the two agree to rounding error; if you edit one of
# the `attention` sections above and not the other, this is the number
# that moves.

# %%
out_t, weights_t = torch_ref.attention(
    torch.tensor(q),
    torch.tensor(k),
    torch.tensor(v),
    torch_ref.causal_mask(T),
)
diff_out = np.abs(out_t.numpy() - out).max()
diff_weights = np.abs(weights_t.numpy() - weights).max()
print(
    f"max |NumPy - PyTorch|: output {diff_out:.1e}, weights {diff_weights:.1e}"
)

# %% [markdown]
# ## One pattern per head
#
# A small causal layer with random, untrained projections, in float64:
# $d_\text{model} = 16$, 4 heads, $T = 8$. The random input is scaled by
# 3, which makes the scores larger and the weights sharper, so the heads'
# patterns are easier to tell apart. The layer returns the weights of
# every head, $(B, H, T, T)$; the heatmaps show them. Try another `seed`,
# or `scale = 1.0`.

# %%
d_model, n_head, t_heads, seed, scale = 16, 4, 8, 0, 3.0
torch.manual_seed(seed)
mha = torch_ref.MultiHeadAttention(d_model, n_head, dtype=torch.float64)
# inputs larger than unit scale give sharper, more distinct heads
x = scale * torch.randn(1, t_heads, d_model, dtype=torch.float64)
heads_mask = torch_ref.causal_mask(t_heads)  # (T, T), True = blocked
with torch.no_grad():
    _, head_weights = mha(x, mask=heads_mask)  # (1, H, T, T)
head_weights = head_weights[0]  # (H, T, T)
# row 0 has one allowed key (weight 1): average the other rows
mean_row_max = head_weights[:, 1:].amax(dim=-1).mean(dim=-1)  # (H,)
with torch.no_grad():  # the same input at unit scale, for comparison
    _, unit_weights = mha(x / scale, mask=heads_mask)
unit_row_max = unit_weights[0, :, 1:].amax(dim=-1).mean(dim=-1)  # (H,)
# equal weights on the i + 1 allowed keys of row i: 1 / (i + 1)
even_row_max = (1.0 / torch.arange(2, t_heads + 1)).mean()
glue.value(
    "heads_example",
    {
        "d_model": d_model,
        "n_head": n_head,
        "t": t_heads,
        "seed": seed,
        "input_scale": scale,
        "mask": heads_mask,
        "weights": head_weights,
        "row_sums_max_error": (head_weights.sum(-1) - 1).abs().max(),
        "future_weight": head_weights[:, heads_mask].max(),
        "mean_row_max_per_head": mean_row_max,
        "mean_row_max_unit_scale": unit_row_max,
        "mean_row_max_even": even_row_max,
    },
)


def draw(fig, theme):
    import matplotlib

    cells_mask = heads_mask.numpy()
    edges = np.arange(t_heads + 1) - 0.5  # cell (i, j) centred on (j, i)
    # the masked future as one staircase polygon, grey and hatched
    stairs = []  # (x = key j, y = query i) corners, down the steps
    for i in range(t_heads - 1):
        stairs += [(i + 0.5, i - 0.5), (i + 0.5, i + 0.5)]
    stairs += [(t_heads - 0.5, t_heads - 1.5), (t_heads - 0.5, -0.5)]
    axes = fig.subplots(2, n_head // 2, sharex=True, sharey=True).ravel()
    rows, cols = np.nonzero(~cells_mask)  # only the allowed cells
    cells = [
        [
            (j - 0.5, i - 0.5),
            (j + 0.5, i - 0.5),
            (j + 0.5, i + 0.5),
            (j - 0.5, i + 0.5),
        ]
        for i, j in zip(rows, cols, strict=True)
    ]
    for head, ax in enumerate(axes):
        # vector cells (not imshow): a small, sharp SVG
        mesh = matplotlib.collections.PolyCollection(
            cells,
            array=head_weights[head].numpy()[rows, cols],
            cmap=theme.cmap,
            clim=(0, 1),
            linewidth=0,
        )
        ax.add_collection(mesh)
        ax.add_patch(
            matplotlib.patches.Polygon(
                stairs,
                closed=True,
                facecolor=theme.masked,
                hatch="///",
                edgecolor=theme.muted,
                linewidth=0,
            )
        )
        ax.set_aspect("equal")
        ax.set_xlim(edges[0], edges[-1])
        ax.set_ylim(edges[-1], edges[0])  # row 0 at the top
        ax.set_title(f"head {head}", fontsize=9)  # from 0, as in the code
        ax.set_xticks(range(0, t_heads, 2))
        ax.set_yticks(range(0, t_heads, 2))
        ax.tick_params(labelsize=8.5, length=2)
    fig.supxlabel("key position j", fontsize=9)
    fig.supylabel("query position i", fontsize=9)
    bar = fig.colorbar(mesh, ax=axes, shrink=0.9, aspect=25)
    bar.set_label("weight (rows sum to 1)", fontsize=9)
    bar.ax.tick_params(labelsize=8.5)
    fig.suptitle(
        f"Causal weights, {n_head} untrained heads, T = {t_heads},\n"
        f"input × {scale:g} (hatched grey = masked future)",
        fontsize=9,
    )


means = ", ".join(glue.fmt(w, 2) for w in mean_row_max.tolist())
glue.figure(
    "heads-heatmap",
    draw,
    figsize=(3.7, 3.6),
    alt=(
        f"{n_head} heatmaps, two by two, of {t_heads} by {t_heads} attention "
        "weights, one per head, of a causal self-attention on random "
        "inputs. Cells above the diagonal are masked (grey, hatched) and "
        "hold zero weight. Each head spreads its weight differently over "
        "the earlier positions: the largest weight in a row, averaged "
        f"over rows 1 to {t_heads - 1} (rows and heads counted from 0, "
        f"as on the axes; row 0 has one key), is {means} for heads 0 to "
        f"{n_head - 1}."
    ),
)

# %% [markdown]
# ## One weighted sum, a convex combination
#
# The opening example of the site: two value vectors, one per position,
# weighted $0.75$ and $0.25$. The output lies on the segment between
# them. The scores whose softmax gives those weights differ by $\ln 3$.

# %%
values = np.array([[2.0, 0.0], [0.0, 4.0]])  # one row per position
mix = np.array([0.75, 0.25])
mix_scores = np.array([np.log(3.0), 0.0])  # a gap of ln 3
weighted_sum = glue.value(
    "weighted_sum",
    {
        "values": values,
        "weights": mix,
        "output": mix @ values,  # sum_j w_j v_j
        "scores": mix_scores,
        "softmax_of_scores": numpy_ref.softmax(mix_scores),
        "weights_sum": mix.sum(),
    },
)

# %% [markdown]
# ## Exercises
#
# The page's exercises, computed. 1: the shapes of a batched
# cross-attention with a padding mask. 2: one query against three keys,
# the third blocked, by hand. 3: the page's four tokens with the mask
# transposed, which blocks the past instead of the future. Change the
# inputs and rerun.
#
# The cell below prints every answer, one `glue:` line each: work
# them out first, then run it.

# %%
rng = np.random.default_rng(0)
b, h, tq, tk, dk = 2, 3, 4, 6, 8  # exercise 1
q1 = rng.standard_normal((b, h, tq, dk))  # (B, H, Tq, dk)
k1 = rng.standard_normal((b, h, tk, dk))  # (B, H, Tk, dk)
v1 = rng.standard_normal((b, h, tk, dk))  # (B, H, Tk, dk)
pad = numpy_ref.key_padding_mask([tk, tk - 2], tk)  # (B, 1, 1, Tk)
out1, weights1 = numpy_ref.attention(q1, k1, v1, pad)
glue.value(
    "ex_shapes",
    {
        "b": b,
        "h": h,
        "tq": tq,
        "tk": tk,
        "d_k": dk,
        "mask": str(pad.shape),
        "weights": str(weights1.shape),
        "output": str(out1.shape),
    },
)

# exercise 2: scores [0, ln 3, 0], the third key blocked
ex_scores = np.array([0.0, np.log(3.0), 0.0])
ex_values = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]])  # (Tk, dv)
ex_blocked = np.array([False, False, True])
ex_exps = np.exp(np.where(ex_blocked, -np.inf, ex_scores))  # e^-inf = 0
ex_weights = numpy_ref.softmax(np.where(ex_blocked, -np.inf, ex_scores))
glue.value(
    "ex_by_hand",
    {
        "values": ex_values,
        "exps": ex_exps,
        "exp_sum": ex_exps.sum(),
        "weights": ex_weights,
        "output": ex_weights @ ex_values,  # sum_j a_j v_j
    },
)

# exercise 3: mask.T blocks the past; which row keeps one key?
out_past, weights_past = numpy_ref.attention(q, k, v, mask.T)
lone_row = int(np.flatnonzero((~mask.T).sum(axis=-1) == 1)[0])
glue.value(
    "ex_transposed",
    {
        "lone_row": lone_row,
        "lone_output": out_past[lone_row],
        "first_weights": weights_past[0],
    },
)
print("weights with mask.T:\n", weights_past)
print("output with mask.T:\n", out_past)
