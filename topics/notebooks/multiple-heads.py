# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---


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
import numpy as np

from mha_ref import numpy_ref, torch_ref

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
# ## More heads, same parameters
#
# The PyTorch module counts its parameters for a few head counts at
# $d_\text{model} = 64$: always $4 \times 64^2$. Try a head count that
# does not divide 64 to see the error the constructor raises.

# %%
for n in [1, 2, 4, 8, 16]:
    module = torch_ref.MultiHeadAttention(64, n)
    count = sum(p.numel() for p in module.parameters())
    print(
        f"n_head = {n:>2}: d_head = {module.d_head:>2}, "
        f"parameters {count:,} = {count / 64**2:.0f} x 64^2"
    )
