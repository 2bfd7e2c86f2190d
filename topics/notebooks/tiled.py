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
# ## Your turn: tiled against plain
#
# Causal attention on 2 heads of 10 positions, computed by
# `numpy_ref.attention` with the whole score matrix and by
# `tiled_attention_numpy` in tiles, for a few block sizes: ones that
# divide 10, ragged ones, single rows, one block larger than $T$. The
# cell also counts the tiles: a tile wholly in the causal future is
# skipped. Add your own `(block_q, block_k)`.

# %%
import numpy as np
import torch

from mha_ref import numpy_ref, tiled, tolerances, torch_ref

rng = np.random.default_rng(0)
T, d = 10, 4
q, k, v = (rng.standard_normal((2, T, d)) for _ in range(3))  # (H, T, d)
plain, _ = numpy_ref.attention(q, k, v, numpy_ref.causal_mask(T))


def tile_count(t, block_q, block_k):
    """(tiles visited, tiles skipped) of a causal pass over t positions."""
    visited = skipped = 0
    for i in range(0, t, block_q):
        last_query = min(i + block_q, t) - 1
        for j in range(0, t, block_k):
            if j > last_query:  # every key after every query
                skipped += 1
            else:
                visited += 1
    return visited, skipped


for block_q, block_k in [(5, 5), (4, 3), (1, 1), (16, 16)]:
    out = tiled.tiled_attention_numpy(
        q, k, v, causal=True, block_q=block_q, block_k=block_k
    )
    visited, skipped = tile_count(T, block_q, block_k)
    diff = np.abs(out - plain).max()
    print(
        f"blocks {block_q:>2} x {block_k:>2}: max difference {diff:.1e}, "
        f"tiles visited {visited:>3}, skipped {skipped:>3}"
    )

# %% [markdown]
# ## One row, block by block
#
# The first query against all ten keys (no mask), by hand: fold blocks
# of 3 keys into the running maximum $m$, sum $\ell$ and unnormalised
# output $O$ with `online_softmax_update_numpy`, and print them after
# each block. When a block brings a larger score (here the last one),
# the earlier sums are scaled down by $e^{m - m'}$.
# At the end $O / \ell$ is the plain softmax-weighted sum. Try another
# block size, or another query row.

# %%
s_row = q[0, :1] @ k[0].T / np.sqrt(d)  # (1, T): the first query's scores
state = (np.full((1, 1), -np.inf), np.zeros((1, 1)), np.zeros((1, d)))
block = 3
for j in range(0, T, block):
    state = tiled.online_softmax_update_numpy(
        state, s_row[:, j : j + block], v[0, j : j + block]
    )
    m, ell, _ = state
    print(
        f"keys {j}..{min(j + block, T) - 1}: m = {m.item():.3f}, "
        f"l = {ell.item():.3f}"
    )
_, ell, acc = state
expected = numpy_ref.softmax(s_row) @ v[0]  # (1, d)
print(f"max |O / l - softmax(s) v|: {np.abs(acc / ell - expected).max():.1e}")

# %% [markdown]
# ## The PyTorch mirror
#
# `tiled_attention_torch` keeps its statistics in float32 even for
# float16 inputs. In float32 it matches `torch_ref.attention` to the
# float32 tolerance.

# %%

qt, kt, vt = (torch.from_numpy(a).float() for a in (q, k, v))
reference, _ = torch_ref.attention(qt, kt, vt, torch_ref.causal_mask(T))
out = tiled.tiled_attention_torch(
    qt, kt, vt, causal=True, block_q=4, block_k=3
)
print(
    f"float32: max difference {(out - reference).abs().max():.1e}, "
    f"tolerance {tolerances.atol(torch.float32):.0e}"
)
