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
# ## The experiment: your version against the library
#
# One set of weights, four implementations: the from-scratch
# `torch_ref.MultiHeadAttention`, the same projections around PyTorch's
# `F.scaled_dot_product_attention`, `nn.MultiheadAttention` with the
# weights copied in, and the NumPy reference with the weights copied in.
# We measure how far apart their outputs are. Agreement to rounding error
# means the projections, the head split, the scale $1/\sqrt{d_k}$, the
# mask and the merge are all right; a single mistake moves the outputs by
# far more than rounding. [The experiment page](../../../experiment/)
# explains each step and shows the full comparison over dtypes and masks.
#
# To test your own class, put it in place of `torch_ref.MultiHeadAttention`
# below. The copying helpers read `d_model`, `n_head`, the four `nn.Linear`
# layers `wq`, `wk`, `wv`, `wo`, and call its `project` and `merge_heads`;
# give your class the same names, or adapt the helpers.

# %%
import torch

from mha_ref import tolerances, torch_ref

torch.manual_seed(0)
B, T, d_model, n_head = 2, 6, 16, 4
mha = torch_ref.MultiHeadAttention(d_model, n_head)  # no bias
x = torch.randn(B, T, d_model)  # (B, T, d_model)
mask = torch_ref.causal_mask(T)  # (T, T), True = blocked
with torch.no_grad():
    y, weights = mha(x, mask=mask)  # (B, T, d_model), (B, H, T, T)
print("output", tuple(y.shape), "weights", tuple(weights.shape))

# %% [markdown]
# ## The same weights, three other implementations
#
# `nn.Linear` stores its weight as $(\text{out}, \text{in})$ and computes
# $x W^\top$; the NumPy reference computes $x W$, so its copy is the
# transpose. `nn.MultiheadAttention` keeps $W_Q$, $W_K$, $W_V$ stacked in
# one `in_proj_weight` of shape $(3 d_\text{model}, d_\text{model})$.
# SDPA's boolean mask means *allowed*, the opposite of ours:
# `torch_ref.sdpa_forward` inverts it in one place.

# %%
library = torch_ref.library_version(mha)
twin = torch_ref.to_numpy(mha)  # numpy_ref.MultiHeadAttention
with torch.no_grad():
    y_sdpa = torch_ref.sdpa_forward(mha, x, mask)
    y_library = torch_ref.library_forward(library, x, mask)
y_numpy, weights_numpy = twin(x.numpy(), mask.numpy())

tolerance = tolerances.atol(y.dtype)
others = {
    "SDPA": y_sdpa,
    "nn.MultiheadAttention": y_library,
    "NumPy": torch.from_numpy(y_numpy),
}
for name, other in others.items():
    diff = (other - y).abs().max().item()
    verdict = "ok" if diff <= tolerance else "TOO LARGE"
    print(f"from scratch vs {name:<21}: {diff:.2e}  {verdict}")

# %% [markdown]
# ## Two properties of the weights
#
# Each row of $A = \operatorname{softmax}(S + M)$ is a distribution over
# the keys, $\sum_j A_{ij} = 1$, and the causal mask gives every future
# key ($j > i$) exactly zero weight, because $e^{-\infty} = 0$. The NumPy
# version's weights must match too.

# %%
row_error = (weights.sum(dim=-1) - 1).abs().max().item()
future = weights.masked_select(mask).max().item()
print(f"largest |row sum - 1|          : {row_error:.2e}")
print(f"largest weight on a future key : {future:.2e}")
print(
    "NumPy weights agree:",
    abs(weights_numpy - weights.numpy()).max() <= tolerance,
)

# %% [markdown]
# ## Break it on purpose
#
# Dividing by $\sqrt{d_\text{model}}$ instead of $\sqrt{d_k}$
# ([pitfall 2](../../../pitfalls/#scaling)) runs without error and gives
# the right shape, but the numbers move far past the tolerance. This is
# what a real bug looks like next to rounding error. Try the other
# [pitfalls](../../../pitfalls/) the same way.

# %%
with torch.no_grad():
    q, k, v = mha.project(x)  # (B, H, T, d_head)
    scale = d_model**0.5  # the mistake: should be mha.d_head**0.5
    scores = q @ k.transpose(-2, -1) / scale  # (B, H, T, T)
    scores = scores.masked_fill(mask, float("-inf"))
    wrong = scores.softmax(dim=-1) @ v  # (B, H, T, d_head)
    y_wrong = mha.wo(mha.merge_heads(wrong))  # (B, T, d_model)
diff = (y_wrong - y).abs().max().item()
print(f"wrong scale: {diff:.2e}, tolerance {tolerance:.0e}")
