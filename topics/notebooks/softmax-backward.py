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
# ## Your turn: the two-weight example
#
# Two equal weights, and a loss that is the first weight: the upstream
# gradient is $[1, 0]$. The cell prints the score gradient of
# `softmax_backward` next to the shortcut that keeps only the diagonal
# of the Jacobian. Change `g` or the scores `s` and rerun; the gradient
# of the scores always sums to zero.

# %%
import numpy as np
import torch

from mha_ref import numpy_ref

np.set_printoptions(precision=4, suppress=True)
s = np.array([0.0, 0.0])  # scores
g = np.array([1.0, 0.0])  # dL/dp for L = p[0]
p = numpy_ref.softmax(s)
grad = numpy_ref.softmax_backward(p, g)
print("weights p         :", p)
print("softmax_backward  :", grad, " sum", grad.sum())
print("diagonal shortcut :", p * (1 - p) * g)
jacobian = np.diag(p) - np.outer(p, p)  # dp_i / ds_j
print("full Jacobian J^T g:", jacobian.T @ g)

# %% [markdown]
# ## Against a finite difference
#
# No calculus needed to check it: nudge each score by $\pm h$, measure
# how $L = \langle \mathbf g, \operatorname{softmax}(\mathbf s)\rangle$
# moves, and divide by $2h$. On a random row of 6 scores the central
# difference and the formula agree to about eleven digits; what is left
# is the error of the difference itself. Try other values of `h`.

# %%
rng = np.random.default_rng(0)
s = rng.standard_normal(6)
g = rng.standard_normal(6)
h = 1e-5


def loss(scores):
    return g @ numpy_ref.softmax(scores)


numeric = np.array(
    [(loss(s + h * e) - loss(s - h * e)) / (2 * h) for e in np.eye(len(s))]
)
formula = numpy_ref.softmax_backward(numpy_ref.softmax(s), g)
print("finite difference:", numeric)
print("softmax_backward :", formula)
print(f"max difference   : {np.abs(numeric - formula).max():.1e}")

# %% [markdown]
# ## Against autograd, and a saturated row
#
# PyTorch's autograd through `torch.softmax` gives the same numbers on a
# batch of rows. Then the scores $[8, -8]$ of
# [the scaling page](../../../scaling/): unscaled the row is nearly
# one-hot and the gradient almost vanishes; divided by $\sqrt{64}$ it
# is back to a useful size.

# %%
scores = torch.randn(
    8, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
)
upstream = torch.randn(
    8, 10, dtype=torch.float64, generator=torch.Generator().manual_seed(1)
)
scores.requires_grad_(True)
probs = scores.softmax(dim=-1)  # (rows, keys)
(autograd,) = torch.autograd.grad(probs, scores, upstream)
ours = numpy_ref.softmax_backward(probs.detach().numpy(), upstream.numpy())
print(f"max |ours - autograd|: {np.abs(ours - autograd.numpy()).max():.1e}")

for name, row in [("unscaled", [8.0, -8.0]), ("/ sqrt(64)", [1.0, -1.0])]:
    p = numpy_ref.softmax(np.array(row))
    grad = numpy_ref.softmax_backward(p, np.array([1.0, 0.0]))
    print(
        f"{name:>10}: weights [{p[0]:.2e}, {p[1]:.2e}], "
        f"score gradient [{grad[0]:.2e}, {grad[1]:.2e}]"
    )
