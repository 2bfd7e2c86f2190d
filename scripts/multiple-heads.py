# %% [markdown]
# ## More heads, same parameters
#
# The PyTorch module counts its parameters (no biases) for several head
# counts at $d_\text{model} = 512$: always $4 \times 512^2$, three input
# projections and the output projection. `device="meta"` gives shapes
# and counts without allocating the weights. Try a head count that does
# not divide 512 to see the error the constructor raises.

# %%
import numpy as np

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
        "W_Q slice per head",
        "Q, K, V params",
        "all params",
        "all / d_model²",
    ],
    [
        [
            r["n_head"],
            r["d_head"],
            r["per_head_shape"].replace("x", "×"),
            f"{r['qkv_params']:,}",
            f"{r['total_params']:,}",
            glue.fmt(r["total_over_d_model_sq"]),
        ]
        for r in rows
    ],
    "rrrrrr",
)
totals = {row["total_params"] for row in rows}
if len(totals) != 1:
    raise ValueError(f"total parameters depend on n_head: {totals}")
total_params = glue.value("total_params", totals.pop())

# %% [markdown]
# ## Your turn: split, then merge back
#
# Fill $x$ with numbers that say where they sit: entry $(t, c)$ holds
# $100\,t + c$. After `split_heads`, head $h$ should hold columns
# $h\,d_\text{head}$ to $(h+1)\,d_\text{head} - 1$ of every position,
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
for h in range(n_head):
    print(f"head {h}:\n{heads[0, h].astype(int)}")
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
x = rng.standard_normal((2, 5, d_model))  # (B, T, d_model)
mask = numpy_ref.causal_mask(5)  # (T, T)
y, _ = layer(x, mask)  # (B, T, d_model)
dh = layer.d_head
outs = []
for h in range(n_head):
    cols = slice(h * dh, (h + 1) * dh)  # this head's columns
    q = x @ layer.Wq[:, cols]  # (B, T, dh)
    k = x @ layer.Wk[:, cols]
    v = x @ layer.Wv[:, cols]
    out, _ = numpy_ref.attention(q, k, v, mask)  # (B, T, dh)
    outs.append(out)
y_heads = np.concatenate(outs, axis=-1) @ layer.Wo  # (B, T, d_model)
print(f"max |one GEMM - head by head|: {np.abs(y - y_heads).max():.1e}")

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
glue.value("ex_wrong_split", {"wrong": wrong[0, 0], "right": right[0, 0]})
print("head 0, reshape only:\n", wrong[0, 0].astype(int))
print("head 0, split_heads:\n", right[0, 0].astype(int))
