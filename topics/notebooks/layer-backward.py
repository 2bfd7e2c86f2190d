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
# ## Your turn: attention_backward against autograd
#
# One causal attention of 2 heads, 5 positions, float64. PyTorch's
# autograd differentiates $L = \sum O \odot dO$ through
# `torch_ref.attention`; `numpy_ref.attention_backward` computes the
# same gradients by hand. Edit the whole NumPy `attention-backward`
# section above (drop the `/ math.sqrt(d)` of `dq`, say), run it, then
# rerun this cell: only the gradients that step feeds jump. (Edit the
# whole function rather than one of its step cells: when the notebook
# runs top to bottom, the whole-function cell comes later and would put
# the step back.)

# %%
import numpy as np
import torch

from mha_ref import numpy_ref, tiled, torch_ref

rng = np.random.default_rng(0)
H, T, d = 2, 5, 4
q, k, v, dout = (rng.standard_normal((H, T, d)) for _ in range(4))
mask = numpy_ref.causal_mask(T)  # (T, T)
leaves = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
out, _ = torch_ref.attention(*leaves, torch.from_numpy(mask))
out.backward(torch.from_numpy(dout))  # dL/dO = dout
ours = numpy_ref.attention_backward(q, k, v, dout, mask)
for name, mine, leaf in zip(["dq", "dk", "dv"], ours, leaves, strict=True):
    diff = np.abs(mine - leaf.grad.numpy()).max()
    print(f"{name}: max |ours - autograd| {diff:.1e}")

# %% [markdown]
# ## The whole layer
#
# `MultiHeadAttention.backward` returns the gradient of every weight,
# bias and of the input. The PyTorch layer with the same numbers (its
# `nn.Linear` weights are the transposes) gets them from autograd.

# %%
torch.manual_seed(0)
module = torch_ref.MultiHeadAttention(8, 2, bias=True, dtype=torch.float64)
layer = torch_ref.to_numpy(module)  # the same weights, x @ W layout
x = torch.randn(2, T, 8, dtype=torch.float64, requires_grad=True)
dy = torch.randn(2, T, 8, dtype=torch.float64)
y, _ = module(x, mask=torch.from_numpy(mask))
y.backward(dy)
grads = layer.backward(x.detach().numpy(), dy.numpy(), mask)
autograd = {"x": x.grad}
for name in "qkvo":
    linear = getattr(module, f"w{name}")
    autograd[f"W{name}"] = linear.weight.grad.T  # (in, out) as numpy_ref
    autograd[f"b{name}"] = linear.bias.grad
for name, grad in grads.items():
    diff = np.abs(grad - autograd[name].numpy()).max()
    print(f"{name:>2}: max |ours - autograd| {diff:.1e}")

# %% [markdown]
# ## The tiled backward
#
# `tiled_attention_backward_numpy` saves only the output and one
# log-sum-exp per row, and recomputes each tile's weights. With blocks
# of 2 queries by 3 keys it matches the plain backward; the row
# statistic $D = \operatorname{rowsum}(dO \odot O)$ equals
# $\operatorname{rowsum}(dA \odot A)$, which a tile could not see.

# %%
tiled_grads = tiled.tiled_attention_backward_numpy(
    q, k, v, dout, causal=True, block_q=2, block_k=3
)
for name, plain, tiled_grad in zip(
    ["dq", "dk", "dv"], ours, tiled_grads, strict=True
):
    diff = np.abs(tiled_grad - plain).max()
    print(f"{name}: max |tiled - plain| {diff:.1e}")
o, a = numpy_ref.attention(q, k, v, mask)  # (H, T, d), (H, T, T)
d_a = dout @ v.swapaxes(-2, -1)  # dA = dO V^T, (H, T, T)
delta = np.abs((dout * o).sum(-1) - (d_a * a).sum(-1)).max()
print(f"max |rowsum(dO * O) - rowsum(dA * A)|: {delta:.1e}")
