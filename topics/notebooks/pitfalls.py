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
# ## Your turn: break the layer, watch the parity number
#
# A PyTorch layer gives the reference output; its NumPy twin
# (`torch_ref.to_numpy`) is then run step by step by `forward` below,
# which can swap one step for one of the mistakes in
# `mha_ref/pitfalls.py`. With no mistake the two agree to rounding error
# (float64); each mistake runs without an error and gives the right
# shape, and only the difference shows it. You can also break one of
# the right sections above (the PyTorch `split-heads`, say), run it,
# and rerun this cell: the reference itself moves, and the first row
# stops being "ok".

# %%
import numpy as np
import torch

from mha_ref import numpy_ref, pitfalls, tolerances, torch_ref

torch.manual_seed(0)
B, T, d_model, n_head = 2, 6, 16, 4
module = torch_ref.MultiHeadAttention(d_model, n_head, dtype=torch.float64)
x_t = torch.randn(B, T, d_model, dtype=torch.float64)  # (B, T, d_model)
mask_t = torch_ref.causal_mask(T)  # (T, T), True = blocked
with torch.no_grad():
    y_ref = module(x_t, mask=mask_t)[0].numpy()  # (B, T, d_model)
x, mask = x_t.numpy(), mask_t.numpy()
twin = torch_ref.to_numpy(module)  # numpy_ref.MultiHeadAttention


def forward(layer, x, mask, mistake=None):
    """The layer's forward, one step at a time, with at most one mistake."""

    def split(a):
        if mistake == "1 split":
            return pitfalls.wrong_split_heads(a, layer.n_head)
        return layer.split_heads(a)  # (B, H, T, dh)

    q, k, v = (split(x @ w) for w in (layer.Wq, layer.Wk, layer.Wv))
    if mistake == "2 scale":
        scores = pitfalls.wrong_scale_scores(q, k, layer.d_model)
    else:  # S = Q K^T / sqrt(d_head)
        scores = q @ k.swapaxes(-2, -1) / np.sqrt(layer.d_head)
    masked = np.where(mask, -np.inf, scores)  # (B, H, T, T)
    if mistake == "3 mask after":
        weights = pitfalls.wrong_mask_after_softmax(scores, mask)
    elif mistake == "4 axis":
        weights = pitfalls.wrong_softmax_axis(masked)
    else:
        weights = numpy_ref.softmax(masked)
    out = weights @ v  # (B, H, T, dh)
    if mistake == "5 merge":
        merged = pitfalls.wrong_merge_heads(out)
    else:
        merged = layer.merge_heads(out)  # (B, T, d_model)
    return merged @ layer.Wo  # (B, T, d_model)


tolerance = tolerances.atol(np.float64)
mistakes = [None, "1 split", "2 scale", "3 mask after", "4 axis", "5 merge"]
for mistake in mistakes:
    diff = np.abs(forward(twin, x, mask, mistake) - y_ref).max()
    verdict = "ok" if diff <= tolerance else "TOO LARGE"
    print(f"{mistake or 'none':<13}: max difference {diff:.1e}  {verdict}")

# %% [markdown]
# ## Mistake 6: the copy, not the code
#
# Both layers above are right; the sixth mistake is in moving weights
# between them. `nn.Linear` stores $(\text{out}, \text{in})$, the NumPy
# layer uses $x W$ with $(\text{in}, \text{out})$: copy without the
# transpose and a correct layer disagrees with a correct layer.

# %%
wrong_twin = torch_ref.to_numpy(module)
wrong_twin.Wq, wrong_twin.Wk, wrong_twin.Wv, wrong_twin.Wo = (
    pitfalls.wrong_copy_from_linear(lin.weight.detach().numpy())
    for lin in (module.wq, module.wk, module.wv, module.wo)
)
for name, layer in [("to_numpy", twin), ("no transpose", wrong_twin)]:
    diff = np.abs(layer(x, mask)[0] - y_ref).max()
    print(f"{name:<13}: max difference {diff:.1e}, tolerance {tolerance:.0e}")

# %% [markdown]
# ## Mistake 3 up close
#
# Two equal scores, the second key blocked. Masking before the softmax
# gives all the weight to the first key; zeroing after it leaves half of
# the weight missing. Change `scores` to `[-1000.0, 0.0]` to see the
# renormalised version fail as well.

# %%
scores = np.array([0.0, 0.0])
blocked = np.array([False, True])
before = numpy_ref.softmax(np.where(blocked, -np.inf, scores))
after = pitfalls.wrong_mask_after_softmax(scores, blocked)
with np.errstate(invalid="ignore"):  # 0 / 0 when the sum underflows
    rescaled = pitfalls.wrong_mask_after_softmax(
        scores, blocked, renormalise=True
    )
print("masked before the softmax:", before)
print("zeroed after             :", after)
print("zeroed, then rescaled    :", rescaled)
