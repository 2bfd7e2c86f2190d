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
# ## Your turn: a query with nothing to read
#
# Block every key of query row 1 and run four versions: ours raises and
# names the row, SDPA returns zeros, a $-\infty$ fill with a plain
# softmax returns NaN, and a $-10^9$ fill returns the plain mean of all
# the values. Block a different row, or only some of its keys, and
# rerun: with one allowed key left, all four agree.

# %%
import math

import torch
import torch.nn.functional as F

from mha_ref import pitfalls, tiled, torch_ref

torch.manual_seed(0)
T, d = 3, 4
q, k, v = (torch.randn(1, 1, T, d) for _ in range(3))  # (B, H, T, d)
mask = torch.zeros(T, T, dtype=torch.bool)  # True = blocked
mask[1] = True  # every key of query row 1


def plain(fill):
    s = q @ k.transpose(-2, -1) / math.sqrt(d)  # (B, H, T, T)
    return s.masked_fill(mask, fill).softmax(dim=-1) @ v


try:
    torch_ref.attention(q, k, v, mask)
except ValueError as error:
    print("ours      : ValueError:", error)
results = {
    "SDPA": F.scaled_dot_product_attention(q, k, v, attn_mask=~mask),
    "-inf fill": plain(-math.inf),
    "-1e9 fill": plain(-1e9),
}
for name, out in results.items():
    print(f"{name:<10}: row 1 = {out[0, 0, 1].numpy().round(3)}")
print(f"{'mean of v':<10}: {v[0, 0].mean(dim=0).numpy().round(3)}")

# %% [markdown]
# ## Padding and causal together
#
# Two sequences of lengths 4 and 2, padded to 4. The padding mask
# $(B, 1, 1, T_k)$ and the causal mask $(T, T)$ combine with `|` into
# one mask per sequence. With zero scores and values $1, 2, 3, 4$, each
# query averages what it may see. Then left padding: the first query
# of the short sequence sees only padding, and ours says so.

# %%
lengths = [4, 2]
t = max(lengths)
padding = torch_ref.key_padding_mask(lengths)  # (B, 1, 1, Tk)
combined = padding | torch_ref.causal_mask(t)  # (B, 1, T, T)
zeros = torch.zeros(len(lengths), 1, t, 1, dtype=torch.float64)
values = torch.arange(1.0, t + 1, dtype=torch.float64).view(1, 1, t, 1)
out, _ = torch_ref.attention(zeros, zeros, values, combined)
print("mask shape", tuple(combined.shape))
for b, row in enumerate(out[:, 0, :, 0].tolist()):
    print(f"sequence {b} (length {lengths[b]}): outputs {row}")
left = torch.tensor([[False] * t, [True] * (t - 2) + [False] * 2])
try:
    left_mask = torch_ref.key_padding_mask(left) | torch_ref.causal_mask(t)
    torch_ref.attention(zeros, zeros, values, left_mask)
except ValueError as error:
    print("left padding: ValueError:", error)

# %% [markdown]
# ## Statistics in float16
#
# The tiled pass keeps its running sums in float32. Kept in float16
# instead (`pitfalls.wrong_tiled_statistics_dtype`), a mean of 512
# values of 200 needs a running total of 102,400, more than float16
# holds. Try `200.0` $\to$ `100.0`, or 256 keys.

# %%
q16 = torch.zeros(1, 1, 1, 8, dtype=torch.float16)  # (B, H, Tq, d)
k16 = torch.zeros(1, 1, 512, 8, dtype=torch.float16)  # (B, H, Tk, d)
v16 = torch.full((1, 1, 512, 1), 200.0, dtype=torch.float16)
right = tiled.tiled_attention_torch(q16, k16, v16)
wrong = pitfalls.wrong_tiled_statistics_dtype(q16, k16, v16)
print("statistics in float32:", right.item())
print("statistics in float16:", wrong.item())
print("float16 max          :", torch.finfo(torch.float16).max)
