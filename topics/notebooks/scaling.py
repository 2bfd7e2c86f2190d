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
# ## Your turn: two scores, several head sizes
#
# The scores $[8, -8]$ are one standard deviation either side of zero
# for a head of size 64. The cell divides them by $\sqrt{d_k}$ for a few
# head sizes and prints the softmax weights. Change `scores`, or add a
# head size, and rerun: the larger $d_k$, the flatter the weights.

# %%
import numpy as np

from mha_ref import numpy_ref

np.set_printoptions(precision=4, suppress=False)
scores = np.array([8.0, -8.0])
for d_k in [1, 4, 16, 64, 512]:
    scaled = scores / np.sqrt(d_k)
    weights = numpy_ref.softmax(scaled)
    print(f"d_k = {d_k:>3}: scores {scaled}, weights {weights}")

# %% [markdown]
# ## Why the square root: measure it
#
# With independent unit-variance entries, $\mathbf q^\top \mathbf k$ has
# standard deviation $\sqrt{d_k}$. The cell draws 2,000 pairs per head
# size and prints the measured spread before and after the division,
# and the median largest weight over 16 keys: it creeps towards 1
# (one-hot) unscaled and stays put scaled.

# %%
rng = np.random.default_rng(0)
n_rows, n_keys = 2000, 16
for d in [4, 16, 64, 256]:
    q = rng.standard_normal((n_rows, 1, d))  # one query per row
    k = rng.standard_normal((n_rows, n_keys, d))  # 16 keys per row
    s = (q * k).sum(axis=-1)  # (rows, keys): q . k
    top = numpy_ref.softmax(s).max(axis=-1)
    top_scaled = numpy_ref.softmax(s / np.sqrt(d)).max(axis=-1)
    print(
        f"d = {d:>3}: std {s.std():5.2f} -> {(s / np.sqrt(d)).std():.2f}"
        f"   top weight {np.median(top):.3f} -> "
        f"{np.median(top_scaled):.3f}   (unscaled -> scaled)"
    )

# %% [markdown]
# ## Subtracting changes nothing, and saves the day
#
# A naive softmax exponentiates directly, and $e^{1000}$ is infinite in
# float64, so $\infty / \infty$ gives NaN. The reference subtracts the
# row maximum first, which leaves the weights as they were. Try
# `[1000.0, 999.0]` or `[-1000.0, 0.0]`.

# %%
big = np.array([1000.0, 1000.0])
with np.errstate(over="ignore", invalid="ignore"):
    naive = np.exp(big) / np.exp(big).sum()
print("naive    :", naive)
print("reference:", numpy_ref.softmax(big))
print("shifted  :", numpy_ref.softmax(big - big.max()))
