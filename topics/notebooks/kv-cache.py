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
# ## Your turn: two new queries, five keys
#
# Positions 0 to 2 are cached, 3 and 4 are new. With all scores zero,
# each output is the mean of the values its query may read, so the mask
# can be read off the numbers. The mask built from positions gives
# $[25, 30]$; `is_causal=True` treats the queries as positions 0 and 1
# and gives $[10, 15]$. Change `values` (five or more) and rerun.

# %%
import torch

from mha_ref import kv_cache, pitfalls, torch_ref

values = (10.0, 20.0, 30.0, 40.0, 50.0)
aligned, upper_left = kv_cache.cached_attention_example(values)
n = len(values)
print("from positions :", aligned.tolist())
print("is_causal=True :", upper_left.tolist())
aligned_mask = torch_ref.causal_mask_for_positions(range(n - 2, n), range(n))
upper_left_mask = torch_ref.causal_mask_for_positions(range(2), range(n))
print("mask from positions (1 = blocked):")
print(aligned_mask.int().numpy())
print("the mask is_causal=True uses:")
print(upper_left_mask.int().numpy())

# %% [markdown]
# ## The cached loop equals the full pass
#
# A small layer with 4 query heads, 2 key/value heads and RoPE runs
# once over all 10 positions with the causal mask, then through
# `cached_forward` in several splits: a prefill and single steps, one
# token at a time, one chunk. Every split must give the same outputs.
# Try your own `chunks` (positive, summing to 10).

# %%
torch.manual_seed(0)
T = 10
module = torch_ref.MultiHeadAttention(
    16, 4, n_kv_head=2, rope=True, dtype=torch.float64
)
x = torch.randn(2, T, 16, dtype=torch.float64)  # (B, T, d_model)
with torch.no_grad():
    full = module(x, mask=torch_ref.causal_mask(T))[0]  # (B, T, d_model)
    for chunks in ([6, 1, 1, 1, 1], [1] * T, [T], [3, 4, 3]):
        cached = kv_cache.cached_forward(module, x, chunks)
        diff = (cached - full).abs().max().item()
        print(f"chunks {chunks!s:<32}: max difference {diff:.1e}")

# %% [markdown]
# ## The RoPE bug: positions counted from the chunk
#
# `pitfalls.wrong_cached_step` rotates each chunk as if it started at
# position 0. After a prefill of 6 the prefill rows still match; every
# single step after it does not. In one chunk the bug cannot be seen.

# %%


def wrong_forward(chunks):
    cache, outputs = kv_cache.KVCache(), []
    for n in chunks:
        chunk = x[:, cache.length : cache.length + n]  # (B, n, d_model)
        outputs.append(pitfalls.wrong_cached_step(module, cache, chunk))
    return torch.cat(outputs, dim=1)  # (B, T, d_model)


with torch.no_grad():
    error = (wrong_forward([6, 1, 1, 1, 1]) - full).abs().amax(dim=(0, 2))
    one_chunk = (wrong_forward([T]) - full).abs().max().item()
for position, e in enumerate(error.tolist()):
    print(f"position {position}: error {e:.1e}")
print(f"the same bug in one chunk: {one_chunk:.1e}")
