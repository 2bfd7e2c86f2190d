# %% [markdown]
# ## Two weights, one loss
#
# Two equal scores give two equal weights, and the loss is the first
# weight: the upstream gradient is $[1, 0]$. The cell names the score
# gradient of `softmax_backward` next to the shortcut that keeps only
# the diagonal of the Jacobian, and the full Jacobian. Change `g` or the
# scores `s` and rerun; the gradient of the scores always sums to zero.

# %%
import numpy as np
import torch

import glue
from mha_ref import numpy_ref

np.set_printoptions(precision=4, suppress=True)
s = np.array([0.0, 0.0])  # scores
p = glue.value("probabilities", numpy_ref.softmax(s))
g = glue.value("upstream", np.array([1.0, 0.0]))  # dL/dp for L = p[0]
grad = glue.value("score_grad", numpy_ref.softmax_backward(p, g))
# treating softmax as elementwise keeps only the Jacobian's diagonal
glue.value("naive_grad", p * (1 - p) * g)
jacobian = glue.value("jacobian", np.diag(p) - np.outer(p, p))  # dp_i/ds_j
print("full Jacobian J^T g:", jacobian.T @ g, " gradient sum", grad.sum())

# %% [markdown]
# ## Shift invariance
#
# An upstream gradient of all ones is the gradient of $\sum_j p_j = 1$,
# which nothing can change: the score gradient vanishes.

# %%
ones_grad = glue.value("ones_grad", numpy_ref.softmax_backward(p, np.ones(2)))

# %% [markdown]
# ## Cross-entropy
#
# $L = -\log p_y$ has the upstream gradient $-\mathbf e_y / p_y$; the
# score gradient is then the weights minus the one-hot answer.

# %%
ce_s = np.array([2.0, 1.0, 0.0])  # scores of three answers
ce_y = 0  # the right answer
ce_p = numpy_ref.softmax(ce_s)
e_y = np.eye(len(ce_s))[ce_y]  # one-hot
glue.value(
    "cross_entropy",
    {
        "scores": ce_s,
        "y": ce_y,
        "weights": ce_p,
        "score_grad": numpy_ref.softmax_backward(ce_p, -e_y / ce_p[ce_y]),
        "p_minus_e": ce_p - e_y,
    },
)

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
s_row = rng.standard_normal(6)
g_row = rng.standard_normal(6)
h = 1e-5


def loss(scores):
    return g_row @ numpy_ref.softmax(scores)


numeric = np.array(
    [
        (loss(s_row + h * e) - loss(s_row - h * e)) / (2 * h)
        for e in np.eye(len(s_row))
    ]
)
formula = numpy_ref.softmax_backward(numpy_ref.softmax(s_row), g_row)
print("finite difference:", numeric)
print("softmax_backward :", formula)
print(f"max difference   : {np.abs(numeric - formula).max():.1e}")

# %% [markdown]
# ## Against autograd
#
# PyTorch's autograd through `torch.softmax` on 64 random rows of 10
# scores, with random upstream gradients, in float64: the largest
# absolute difference from `softmax_backward` is rounding error.

# %%
generator = torch.Generator().manual_seed(0)
scores = torch.randn(64, 10, generator=generator, dtype=torch.float64)
upstream = torch.randn(64, 10, generator=generator, dtype=torch.float64)
scores.requires_grad_(True)
probabilities = scores.softmax(dim=-1)  # (rows, keys)
(autograd,) = torch.autograd.grad(probabilities, scores, upstream)
ours = numpy_ref.softmax_backward(
    probabilities.detach().numpy(), upstream.numpy()
)
glue.value("autograd_max_diff", np.abs(ours - autograd.numpy()).max())
shape = glue.value("autograd_shape", list(scores.shape))

# %% [markdown]
# ## Your turn: a saturated row
#
# The scores $[8, -8]$ of [the scaling page](../../../scaling/):
# unscaled the row is nearly one-hot and the gradient almost vanishes;
# divided by $\sqrt{64}$ it is back to a useful size.

# %%
for name, row in [("unscaled", [8.0, -8.0]), ("/ sqrt(64)", [1.0, -1.0])]:
    p_row = numpy_ref.softmax(np.array(row))
    grad_row = numpy_ref.softmax_backward(p_row, np.array([1.0, 0.0]))
    print(
        f"{name:>10}: weights [{p_row[0]:.2e}, {p_row[1]:.2e}], "
        f"score gradient [{grad_row[0]:.2e}, {grad_row[1]:.2e}]"
    )

# %% [markdown]
# ## Exercises
#
# The page's exercises, computed. 1: the weights $[0.75, 0.25]$ (the
# scores $[\ln 3, 0]$) with the loss on the first weight. 2: a blocked
# key, any upstream gradient. 3: the score gradient of the rows
# $[t, -t]$ as $t$ grows. Change them and rerun.
#
# The cell below prints every answer, one `glue:` line each: work
# them out first, then run it.

# %%
ex_p = numpy_ref.softmax(np.array([np.log(3.0), 0.0]))  # exercise 1
ex_g = np.array([1.0, 0.0])  # L = p[0]
glue.value(
    "ex_by_hand",
    {
        "weights": ex_p,
        "upstream": ex_g,
        "inner": ex_p @ ex_g,  # <p, g>
        "score_grad": numpy_ref.softmax_backward(ex_p, ex_g),
        "p0_p1": ex_p[0] * ex_p[1],  # two keys: the gradient's size
        "direction": [1, -1],  # ... and its direction
    },
)

# exercise 2: the third key blocked, an arbitrary upstream gradient
blocked_p = numpy_ref.softmax(np.array([0.0, 0.0, -np.inf]))
blocked_g = np.array([1.0, 2.0, 5.0])
glue.value(
    "ex_blocked",
    {
        "weights": blocked_p,
        "upstream": blocked_g,
        "score_grad": numpy_ref.softmax_backward(blocked_p, blocked_g),
    },
)

# exercise 3: saturation, L = first weight of softmax([t, -t])
ts = [0.0, 1.0, 2.0, 4.0, 8.0]
first = [
    numpy_ref.softmax_backward(
        numpy_ref.softmax(np.array([t, -t])), np.array([1.0, 0.0])
    )[0]
    for t in ts
]
glue.value("ex_saturation", {"t": ts, "first_grad": first})
print("t:", ts, "\ndL/ds_0:", np.array(first))
