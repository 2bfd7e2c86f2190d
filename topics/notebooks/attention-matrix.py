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
# ## Your turn: the four tokens
#
# The same four positions as on the page, head size 2, run through
# `numpy_ref.attention` with the causal mask. The cell prints the scores
# before the mask, the weights $A$ and the output $O = AV$. Edit `q`,
# `k` or `v` and rerun: row 0 never changes its weights (one allowed
# key), and every row of $A$ still sums to 1.

# %%
import matplotlib.pyplot as plt
import numpy as np
import torch

from mha_ref import numpy_ref, torch_ref

np.set_printoptions(precision=3, suppress=True)
q = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, -1.0]])  # (T, d)
k = np.array([[1.0, 1.0], [0.0, 2.0], [-1.0, 1.0], [1.0, 0.0]])  # (T, d)
v = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 2.0]])  # (T, dv)
mask = numpy_ref.causal_mask(len(q))  # (T, T), True = blocked
out, weights = numpy_ref.attention(q, k, v, mask)
print("scores S = Q K^T / sqrt(d):\n", q @ k.T / np.sqrt(q.shape[-1]))
print("weights A:\n", weights)
print("output O = A V:\n", out)
print("row sums:", weights.sum(axis=-1))

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
    torch_ref.causal_mask(len(q)),
)
diff_out = np.abs(out_t.numpy() - out).max()
diff_weights = np.abs(weights_t.numpy() - weights).max()
print(
    f"max |NumPy - PyTorch|: output {diff_out:.1e}, weights {diff_weights:.1e}"
)
