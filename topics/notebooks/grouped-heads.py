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
# ## Your turn: which key/value head each query head reads
#
# Label each key/value head with its own number and copy them to the
# 8 query heads: `repeat_kv_heads` gives each head $G$ times in a row,
# the `repeat` mistake tiles the whole set. Change `H` and `H_kv`
# ($H_{kv}$ must divide $H$).

# %%
import numpy as np
import torch
import torch.nn.functional as F

from mha_ref import numpy_ref, pitfalls, torch_ref

H, H_kv = 8, 2
G = H // H_kv  # query heads per key/value head
labels = np.arange(H_kv).reshape(1, H_kv, 1, 1)  # (B, H_kv, T, d)
right = numpy_ref.repeat_kv_heads(labels, G)  # (B, H, T, d)
wrong = pitfalls.wrong_tile_kv_heads(torch.from_numpy(labels), G)
print("repeat_kv_heads :", right.ravel().tolist())
print("repeat (tiled)  :", wrong.flatten().tolist())

# %% [markdown]
# ## Grouped attention against SDPA
#
# `torch_ref.attention` accepts $k$ and $v$ with fewer heads and repeats
# them itself. SDPA with `enable_gqa=True` reads the shared heads in
# place. The two agree; with the heads tiled instead, the query heads
# that happen to read the right head still agree to rounding error,
# and the others do not, so a test of head 0 alone would pass.

# %%
torch.manual_seed(0)
T, d = 6, 4
q = torch.randn(1, H, T, d, dtype=torch.float64)  # (B, H, T, d)
k = torch.randn(1, H_kv, T, d, dtype=torch.float64)  # (B, H_kv, T, d)
v = torch.randn(1, H_kv, T, d, dtype=torch.float64)
mask = torch_ref.causal_mask(T)  # (T, T), True = blocked
sdpa = F.scaled_dot_product_attention(
    q,
    k,
    v,
    attn_mask=~mask,
    enable_gqa=True,  # SDPA: True = allowed
)
ours, _ = torch_ref.attention(q, k, v, mask)
tiled_kv = [pitfalls.wrong_tile_kv_heads(t, G) for t in (k, v)]
wrong_out, _ = torch_ref.attention(q, *tiled_kv, mask)
print(f"ours vs SDPA: {(ours - sdpa).abs().max():.1e}")
per_head = (wrong_out - sdpa).abs().amax(dim=(0, 2, 3))  # (H,)
for h, diff in enumerate(per_head.tolist()):
    print(
        f"tiled, query head {h}: reads head {h % H_kv} "
        f"(should be {h // G}), difference {diff:.2e}"
    )

# %% [markdown]
# ## What shrinks
#
# Only $W_K$, $W_V$ and the cache shrink with $H_{kv}$; the queries and
# $W_O$ stay. A layer of width 512 with 8 query heads, and the bytes
# its cache holds per token in float16 (K and V, one layer):

# %%
for n_kv in [8, 4, 2, 1]:
    module = torch_ref.MultiHeadAttention(
        512, 8, n_kv_head=n_kv, device="meta"
    )
    params = sum(p.numel() for p in module.parameters())
    cache = 2 * n_kv * module.d_head * 2  # K and V, 2 bytes each
    print(
        f"H_kv = {n_kv}: wk.weight {tuple(module.wk.weight.shape)}, "
        f"parameters {params:,}, cache {cache:,} bytes per token"
    )
