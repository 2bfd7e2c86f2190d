# %% [markdown]
# ## More heads, same parameters
#
# The PyTorch module counts its parameters (no biases) for several head
# counts at $d_\text{model} = 512$: always $4 \times 512^2$, three input
# projections and the output projection. `device="meta"` gives shapes
# and counts without allocating the weights. Try a head count that does
# not divide 512 to see the error the constructor raises.

# %%
import matplotlib
import numpy as np
import torch

import glue
from mha_ref import numpy_ref, torch_ref

d_model = glue.value("d_model", 512)
rows = []
for n_head in [1, 2, 4, 8, 16]:
    mha = torch_ref.MultiHeadAttention(d_model, n_head, device="meta")
    qkv = sum(lin.weight.numel() for lin in (mha.wq, mha.wk, mha.wv))
    total = sum(p.numel() for p in mha.parameters())
    rows.append(
        {
            "n_head": n_head,
            "d_head": mha.d_head,
            "per_head_shape": f"{d_model} x {mha.d_head}",
            "per_head_params": 4 * d_model * mha.d_head,
            "qkv_params": qkv,
            "total_params": total,
            "total_over_d_model_sq": total / d_model**2,
        }
    )
glue.value("rows", rows)
glue.table(
    "multiple_heads",
    [
        "n_head",
        "d_head",
        "parameters",
        "÷ d_model²",
    ],
    [
        [
            r["n_head"],
            r["d_head"],
            f"{r['total_params']:,}",
            glue.fmt(r["total_over_d_model_sq"]),
        ]
        for r in rows
    ],
    "rrrr",
)
totals = {row["total_params"] for row in rows}
if len(totals) != 1:
    raise ValueError(f"total parameters depend on n_head: {totals}")
total_params = glue.value("total_params", totals.pop())

# %% [markdown]
# ## Your turn: split, then merge back
#
# Fill $x$ with numbers that say where they sit: entry $(t, c)$ holds
# $100\,t + c$. After `split_heads`, head $i$ should hold columns
# $i\,d_\text{head}$ to $(i+1)\,d_\text{head} - 1$ of every position,
# and `merge_heads` should give back exactly $x$. Edit the
# `split-heads` or `merge-heads` section above (swap the reshape and the
# transpose, say), rerun it, then rerun this cell.

# %%
B, T, d_model, n_head = 1, 3, 8, 2
t = np.arange(T)[:, None]  # (T, 1)
c = np.arange(d_model)[None, :]  # (1, d_model)
x = (100 * t + c)[None].astype(float)  # (B, T, d_model)
layer = numpy_ref.MultiHeadAttention(d_model, n_head)
heads = layer.split_heads(x)  # (B, H, T, dh)
for i in range(n_head):
    print(f"head {i}:\n{heads[0, i].astype(int)}")
back = layer.merge_heads(heads)  # (B, T, d_model)
print("merge(split(x)) == x:", np.array_equal(back, x))

# %% [markdown]
# ## One GEMM equals $h$ small heads
#
# The layer projects all heads with one $d_\text{model} \times
# d_\text{model}$ matrix. Cut that matrix into column blocks, run each
# head as its own small attention, concatenate, and apply $W_O$: the
# result is the same, to rounding error.

# %%
rng = np.random.default_rng(0)
B, T = 2, 5
x = rng.standard_normal((B, T, d_model))  # (B, T, d_model)
mask = numpy_ref.causal_mask(T)  # (T, T)
y, _ = layer(x, mask)  # (B, T, d_model): one GEMM per projection
dh = layer.d_head
# --8<-- [start:heads-loop]
outs = []
# head i alone, with its own columns of Wq, Wk and Wv
for i in range(n_head):
    cols = slice(i * dh, (i + 1) * dh)
    q = x @ layer.Wq[:, cols]  # (B, T, dh)
    k = x @ layer.Wk[:, cols]
    v = x @ layer.Wv[:, cols]
    # steps 1 to 4; it returns the output and the weights
    out, _ = numpy_ref.dot_product_attention(q, k, v, mask)  # (B, T, dh)
    outs.append(out)
y_loop = np.concatenate(outs, axis=-1) @ layer.Wo  # (B, T, d_model)
# --8<-- [end:heads-loop]
# --8<-- [start:heads-sum]
# head i times its own rows of Wo, added up: no concatenation
y_sum = 0
for i in range(n_head):
    y_sum = y_sum + outs[i] @ layer.Wo[i * dh : (i + 1) * dh]
# --8<-- [end:heads-sum]
glue.value(
    "loop",
    {
        "b": B,
        "t": T,
        "d_model": d_model,
        "n_head": n_head,
        "loop_diff": glue.fmt(np.abs(y - y_loop).max(), 2),
        # bit for bit when the BLAS adds both in the same order
        "loop_exact": bool(np.array_equal(y, y_loop)),
        "sum_exact": bool(np.array_equal(y, y_sum)),
        "sum_diff": glue.fmt(np.abs(y - y_sum).max(), 2),
    },
)


# %% [markdown]
# ## The forward, its five stages alone
#
# The module's forward also handles cross-attention, rotary positions,
# grouped heads and its input checks. Without them it is project,
# split, attend, merge, project; both versions must give the module's
# output exactly.
# %%
# --8<-- [start:layer-steps-numpy]
def layer_forward(layer, x, mask=None):
    """numpy_ref.MultiHeadAttention's forward, self-attention only."""
    q = numpy_ref.linear(x, layer.Wq, layer.bq)  # (B, T, d_model)
    k = numpy_ref.linear(x, layer.Wk, layer.bk)  # (B, T, d_model)
    v = numpy_ref.linear(x, layer.Wv, layer.bv)  # (B, T, d_model)
    q = layer.split_heads(q)  # (B, H, T, dh)
    k, v = layer.split_heads(k), layer.split_heads(v)  # (B, H, T, dh)
    out, weights = numpy_ref.dot_product_attention(q, k, v, mask)
    merged = layer.merge_heads(out)  # (B, H, T, dh) -> (B, T, d_model)
    return numpy_ref.linear(merged, layer.Wo, layer.bo), weights
    # --8<-- [end:layer-steps-numpy]


# --8<-- [start:layer-steps-torch]
def torch_layer_forward(layer, x, mask=None):
    """torch_ref.MultiHeadAttention's forward, self-attention only."""
    q = layer.wq(x)  # (B, T, d_model): nn.Linear calls F.linear
    k, v = layer.wk(x), layer.wv(x)  # (B, T, d_model)
    q = layer.split_heads(q)  # (B, H, T, dh)
    k, v = layer.split_heads(k), layer.split_heads(v)  # (B, H, T, dh)
    out, weights = torch_ref.dot_product_attention(q, k, v, mask)
    merged = layer.merge_heads(out)  # (B, H, T, dh) -> (B, T, d_model)
    return layer.wo(merged), weights  # (B, T, d_model)
    # --8<-- [end:layer-steps-torch]


steps_y, _ = layer_forward(layer, x, mask)  # (B, T, d_model)
if not np.array_equal(steps_y, y):
    raise ValueError("the five stages alone are not the layer's forward")
torch_layer = torch_ref.MultiHeadAttention(
    d_model, n_head, bias=True, dtype=torch.float64
)
with torch.no_grad():
    tx = torch.from_numpy(x)  # (B, T, d_model)
    tmask = torch.from_numpy(mask)  # (T, T)
    if not torch.equal(
        torch_layer_forward(torch_layer, tx, tmask)[0],
        torch_layer(tx, tmask)[0],
    ):
        raise ValueError("the five stages alone are not the module's forward")
glue.value("steps_match", True)

# %% [markdown]
# ## The pictures: the head split and the whole layer
#
# Two figures of a layer with $d_\text{model} = 8$ and two heads, on
# $T = 4$ positions. The first fills the input with its addresses
# ($t \cdot d_\text{model} + c$ at position $t$, channel $c$) and shows
# where each entry of each head comes from after `split_heads`. The
# second runs the layer on a random input with the causal mask, one
# step at a time: project, split, each head's attention, merge, $W_O$.
# Each grid is coloured by its own values (the weights from 0 to 1);
# the heads' outputs and the merged grid share one scale.

# %%
fig_t, fig_d_model, fig_n_head = 4, 8, 2
fig_layer = numpy_ref.MultiHeadAttention(fig_d_model, fig_n_head)
dh = fig_layer.d_head
address = np.arange(fig_t * fig_d_model).reshape(1, fig_t, fig_d_model)
split = fig_layer.split_heads(address)[0]  # (H, T, dh)
split_positions = split // fig_d_model
split_channels = split % fig_d_model
glue.value(
    "figure_layer",
    {"t": fig_t, "d_model": fig_d_model, "n_head": fig_n_head, "d_head": dh},
)


def draw_split(fig, theme):
    top, bottom = fig.subplots(2, 1, height_ratios=[1, 2])
    row = np.arange(fig_t)[None, :, None]  # (1, T, 1)
    channel = np.arange(fig_d_model)[None, None, :]  # (1, 1, d_model)
    glue.draw_head_split(
        top,
        theme,
        np.broadcast_to(row, (1, fig_t, fig_d_model)),
        np.broadcast_to(channel, (1, fig_t, fig_d_model)),
        row_labels=False,
        fontsize=10,
        short=True,
    )
    top.set_yticks(range(fig_t), [f"position {t}" for t in range(fig_t)])
    top.set_xlabel("channel")
    top.axvline(dh - 0.5, color=theme.text, lw=2)  # head 0 | head 1
    top.set_title(
        f"X, {fig_t} × {fig_d_model}\na cell t,c: position t, channel c",
        fontsize=10,
    )
    glue.draw_head_split(
        bottom, theme, split_positions, split_channels, fontsize=10, short=True
    )
    bottom.set_title("after split_heads", fontsize=10)


glue.figure(
    "heads-split",
    draw_split,
    figsize=(3.7, 5.0),
    alt=(
        f"Above, the input of a layer with d_model = {fig_d_model} and "
        f"{fig_n_head} heads on {fig_t} positions: {fig_t} rows by "
        f"{fig_d_model} channels, a line between channel {dh - 1} and "
        f"{dh}. Below, the same entries after split_heads: "
        f"{fig_n_head * fig_t} rows (head, row) by {dh} columns. Each "
        "cell is coloured by the position t it came from and labelled "
        "t,c: that position and its input channel c. Row r of every "
        "head holds position r; head 0 holds "
        f"channels 0 to {dh - 1} of every position, head 1 channels "
        f"{dh} to {2 * dh - 1}."
    ),
)

rng = np.random.default_rng(0)
fig_x = rng.standard_normal((1, fig_t, fig_d_model))  # (B, T, d_model)
fig_mask = numpy_ref.causal_mask(fig_t)  # (T, T), True = blocked
fig_q = fig_layer.split_heads(fig_x @ fig_layer.Wq)  # (B, H, T, dh)
fig_k = fig_layer.split_heads(fig_x @ fig_layer.Wk)
fig_v = fig_layer.split_heads(fig_x @ fig_layer.Wv)
fig_heads, fig_weights = numpy_ref.attention(fig_q, fig_k, fig_v, fig_mask)
fig_concat = fig_layer.merge_heads(fig_heads)  # (B, T, d_model)
fig_y = fig_concat @ fig_layer.Wo  # (B, T, d_model)
if not np.allclose(fig_y, fig_layer(fig_x, fig_mask)[0]):
    raise ValueError("the steps drawn are not the layer's forward")


def draw_layer(fig, theme):
    # text a little larger than the site's 10 pt; the figure is as wide
    # as a phone's column (figures are shown at their own size)
    with matplotlib.rc_context({"font.size": 11}):
        draw_layer_steps(fig, theme)


def draw_layer_steps(fig, theme):
    ax = glue.diagram_axes(fig, 20.4, 29.2)
    m = glue.draw_matrix  # (ax, x, y, theme, values, ...): right edge
    arrow = glue.draw_arrow  # (ax, start, end, theme, text)
    colours = theme.series  # head i: colours[i]
    shape = f"{fig_t} × {fig_d_model}"
    m(ax, 0, 1.4, theme, fig_x[0], label="X", below=shape)
    arrow(ax, (8.3, 3.4), (11.7, 3.4), theme)
    ax.text(10, 3.1, "$\\times W_Q$,\n$W_K$, $W_V$", ha="center", va="bottom")
    q_heads = fig_q[0].transpose(1, 0, 2).reshape(fig_t, -1)  # (T, d)
    m(ax, 12, 1.4, theme, q_heads, label=f"Q (K, V alike) {shape}")
    out_scale = np.abs(fig_heads).max()  # O0, O1, merged: one scale
    shared = {"vmin": -out_scale, "vmax": out_scale}
    small = {"fontsize": 10}
    for i in range(fig_n_head):
        top = 9.2 + 7.6 * i
        block = (fig_t, dh)  # head i's columns of Q, then its steps
        m(ax, 12 + i * dh, 1.4, theme, shape=block, outline=colours[i])
        if i == 0:  # straight down into A0
            arrow(ax, (14, 5.6), (14, top - 1.3), theme)
            ax.text(13.7, 6.7, "split", ha="right", va="center", **small)
        else:  # down the right side, then left into A1
            ax.annotate(
                "",
                xy=(16.2, top + 2),
                xytext=(19.8, 5.6),
                arrowprops={
                    "arrowstyle": "-|>",
                    "color": theme.text,
                    "lw": 1.0,
                    "connectionstyle": "angle,angleA=90,angleB=0,rad=0",
                },
            )
        # each head's formula right above its own grid of weights
        formula = f"$A_{i}$ = softmax($Q_{i}K_{i}^T$/√$d_k$)"
        ax.text(14, top - 0.6, formula, ha="center", va="center", **small)
        m(
            ax,
            12,
            top,
            theme,
            fig_weights[0, i],
            blocked=fig_mask,
            vmin=0,
            vmax=1,
            outline=colours[i],
            below=f"head {i}: $A_{i}$ {fig_t} × {fig_t}",
        )
        arrow(ax, (11.8, top + 2), (8.2, top + 2), theme, f"× $V_{i}$")
        m(
            ax,
            4,
            top,
            theme,
            fig_heads[0, i],
            outline=colours[i],
            below=f"$O_{i}$ {fig_t} × {dh}",
            **shared,
        )
    arrow(ax, (3.8, 11.2), (2, 23.4), theme)
    arrow(ax, (8.5, 21.0), (7.4, 23.7), theme)
    ax.text(0.2, 17.7, "concatenate", ha="left", va="center", rotation=90)
    m(ax, 0, 24.0, theme, fig_concat[0], **shared)
    for i in range(fig_n_head):  # each head's block, side by side
        m(ax, i * dh, 24.0, theme, shape=(fig_t, dh), outline=colours[i])
    ax.text(4, 28.25, f"merged {shape}", ha="center", va="top")
    arrow(ax, (8.3, 26.0), (11.7, 26.0), theme, r"$\times W_O$")
    m(ax, 12, 24.0, theme, fig_y[0], below=f"output {shape}")


glue.figure(
    "heads-layer",
    draw_layer,
    figsize=(3.7, 5.33),
    alt=(
        f"The whole layer on {fig_t} positions, d_model = {fig_d_model}, "
        f"{fig_n_head} heads, one grid per matrix coloured by its entries; "
        "head 0's blocks are outlined in blue, head 1's in orange. "
        f"X ({fig_t} by {fig_d_model}) times W_Q, W_K and W_V gives Q, K "
        f"and V, each {fig_t} by {fig_d_model}, whose columns are cut "
        f"into {fig_n_head} blocks of {dh}, one per head. Each head "
        f"computes its own causal weights A ({fig_t} by {fig_t}, the "
        f"future hatched) from its own block of Q and K, softmax(Q_i K_i^T "
        f"/ sqrt(d_k)), and its output O = A V ({fig_t} by {dh}). The "
        "heads' outputs are concatenated side by side back to "
        f"{fig_t} by {fig_d_model}, and W_O maps that to the output, "
        f"{fig_t} by {fig_d_model}. The two outputs and the merged grid "
        "share one colour scale, so each block of the merged grid has the "
        "colours of its head's output."
    ),
)

# %% [markdown]
# ## Exercises
#
# The page's exercises, computed. 1: every shape in a layer of GPT-2
# small's width. 2: its parameters, biases included. 3: the head split
# done with a plain reshape, no transpose, on the position-coded $x$.
# Change the sizes and rerun.
#
# The cell below prints every answer, one `glue:` line each: work
# them out first, then run it.

# %%
ex_b, ex_t, ex_d_model, ex_n_head = 2, 10, 768, 12  # exercise 1
ex_layer = numpy_ref.MultiHeadAttention(ex_d_model, ex_n_head)
ex_x = np.zeros((ex_b, ex_t, ex_d_model))  # (B, T, d_model)
ex_q = ex_x @ ex_layer.Wq  # (B, T, d_model)
ex_heads = ex_layer.split_heads(ex_q)  # (B, H, T, dh)
ex_y, ex_weights = ex_layer(ex_x, numpy_ref.causal_mask(ex_t))
glue.value(
    "ex_shapes",
    {
        "b": ex_b,
        "t": ex_t,
        "d_model": ex_d_model,
        "n_head": ex_n_head,
        "projected": str(ex_q.shape),
        "split": str(ex_heads.shape),
        "weights": str(ex_weights.shape),
        "merged": str(ex_layer.merge_heads(ex_heads).shape),
        "output": str(ex_y.shape),
    },
)

# exercise 2: the same layer with biases, counted on the meta device
with_bias = torch_ref.MultiHeadAttention(
    ex_d_model, ex_n_head, bias=True, device="meta"
)
glue.value(
    "ex_bias_params",
    {
        "total": sum(p.numel() for p in with_bias.parameters()),
        "biases": sum(
            lin.bias.numel()
            for lin in (with_bias.wq, with_bias.wk, with_bias.wv, with_bias.wo)
        ),
    },
)

# exercise 3: x.reshape(B, H, T, dh), without the transpose
B, T, d_model, n_head = 1, 3, 8, 2
t = np.arange(T)[:, None]  # (T, 1)
c = np.arange(d_model)[None, :]  # (1, d_model)
x = (100 * t + c)[None].astype(float)  # (B, T, d_model): 100 t + c
wrong = x.reshape(B, n_head, T, d_model // n_head)  # (B, H, T, dh)
right = numpy_ref.MultiHeadAttention(d_model, n_head).split_heads(x)
glue.value(
    "ex_wrong_split",
    {
        "wrong": wrong[0, 0],
        "right": right[0, 0],
        "sizes": {"b": B, "t": T, "d_model": d_model, "n_head": n_head},
    },
)
print("head 0, reshape only:\n", wrong[0, 0].astype(int))
print("head 0, split_heads:\n", right[0, 0].astype(int))
