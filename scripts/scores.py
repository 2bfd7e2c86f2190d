# %% [markdown]
# ## The chain, on one row
#
# Four modifiers change the scores between $QK^\top$ and the softmax, in
# Gemma 2's order: the scale, the soft-cap, an additive bias (ALiBi),
# the mask, and then a softmax with one extra "sink" logit per head.
# `attention` takes each as a keyword; each can be switched off
# (`None`). The page's numbers start from one random float64 batch.

# %%
import math

import numpy as np
import torch

import glue
from mha_ref import conventions, numpy_ref, tiled, torch_ref

fmt = glue.fmt
glue.value("torch", torch.__version__)
gen = torch.Generator().manual_seed(2024)


def randn(*shape, scale=1.0):
    return scale * torch.randn(shape, generator=gen, dtype=torch.float64)


B, H, T, D = 1, 4, 12, 16
q, k, v = (
    randn(B, H, T, D, scale=2.0),
    randn(B, H, T, D, scale=2.0),
    randn(B, H, T, D),
)
causal = torch_ref.causal_mask(T)  # (T, T), True = blocked
out, weights = torch_ref.attention(q, k, v, causal)
default_again, _ = torch_ref.attention(q, k, v, causal, scale=D**-0.5)
glue.value(
    "chain",
    {
        "shape": [B, H, T, D],
        "default_vs_explicit_scale": float((out - default_again).abs().max()),
    },
)

# %% [markdown]
# ## Scale
#
# The default is $1/\sqrt{d_k}$. Gemma 2 uses
# `query_pre_attn_scalar`$^{-1/2}$ instead, which its 27B model sets to
# 144 with a head size of 128; T5 uses no scale at all. The same
# scores, three scales: how sharp the weights of one row get.

# %%
scales = {
    "sqrt": conventions.default_scale(128, "sqrt"),
    "gemma": conventions.default_scale(128, "gemma", 144),
    "t5": conventions.default_scale(128, "t5"),
}
row = q[0, 0, -1] @ k[0, 0].T  # one row of raw scores q . k, (T,)
sharpness = {
    name: float(torch.softmax(row * s, dim=-1).max())
    for name, s in scales.items()
}
print(scales, sharpness)
glue.value(
    "scale",
    {
        **scales,
        "gemma_over_sqrt": scales["gemma"] / scales["sqrt"],
        "max_weight": sharpness,
    },
)

# %% [markdown]
# ## Soft-capping
#
# $\text{cap}\cdot\tanh(s/\text{cap})$ with Gemma 2's attention cap of
# 50: nearly the identity for small scores, bounded by $\pm$cap, and its
# slope $1 - \tanh^2(s/\text{cap})$ is what the backward multiplies by.

# %%
cap = 50.0
points = [10.0, 50.0, 100.0]
capped = {str(int(s)): cap * math.tanh(s / cap) for s in points}
slope = {str(int(s)): 1 - math.tanh(s / cap) ** 2 for s in points}
print(capped, slope)
glue.value("softcap", {"cap": cap, "capped": capped, "slope": slope})

grid = np.linspace(-150, 150, 301)


def draw_softcap(fig, theme):
    ax = fig.subplots()
    ax.plot(grid, grid, color=theme.muted, linestyle="--", label="raw score s")
    ax.plot(
        grid,
        cap * np.tanh(grid / cap),
        color=theme.series[0],
        label=f"{cap:g} tanh(s / {cap:g})",
    )
    ax.plot(
        grid,
        cap * (1 - np.tanh(grid / cap) ** 2),
        color=theme.series[1],
        label=f"its slope x {cap:g}",
    )
    for y in (cap, -cap):
        ax.axhline(y, color=theme.muted, linewidth=0.8)
    ax.set_ylim(-110, 110)
    ax.set_xlabel("score before the cap")
    ax.set_ylabel("score after the cap")
    ax.legend(fontsize=9, loc="upper left")
    ax.grid(alpha=0.3)


glue.figure(
    "scores-softcap",
    draw_softcap,
    alt=(
        "The soft-capped score 50 tanh(s / 50) against the raw score s: "
        "close to s near 0, flattening towards plus and minus 50; its "
        "slope, scaled by 50, is largest at 0 and falls towards 0."
    ),
)

# %% [markdown]
# Gradients: `attention_backward` with a soft-cap (and every other
# modifier) against autograd through `attention`, in float64, and
# `torch.autograd.gradcheck` on the torch mirror.

# %%
bias_h = randn(H, T, T, scale=0.5)
sinks = torch.tensor([-1.0, 0.0, 1.0, 2.0], dtype=torch.float64)
mods = {"scale": 0.3, "softcap": 5.0, "bias": bias_h, "sinks": sinks}
dout = randn(B, H, T, D)
leaves = [t.clone().requires_grad_() for t in (q, k, v, sinks)]
o, _ = torch_ref.attention(*leaves[:3], causal, **{**mods, "sinks": leaves[3]})
o.backward(dout)
ours = torch_ref.attention_backward(q, k, v, dout, causal, **mods)
numpy_grads = numpy_ref.attention_backward(
    q.numpy(),
    k.numpy(),
    v.numpy(),
    dout.numpy(),
    causal.numpy(),
    scale=0.3,
    softcap=5.0,
    bias=bias_h.numpy(),
    sinks=sinks.numpy(),
)
grad_error = max(
    float((g - leaf.grad).abs().max())
    for g, leaf in zip(ours, leaves, strict=True)
)
numpy_error = max(
    float(np.abs(g - leaf.grad.numpy()).max())
    for g, leaf in zip(numpy_grads, leaves, strict=True)
)
small = [t[:, :2, :3, :4].clone().requires_grad_() for t in (q, k, v)]
small.append(sinks[:2].clone().requires_grad_())


def f(q, k, v, s):
    return torch_ref.attention(q, k, v, softcap=5.0, sinks=s)[0]


passed = torch.autograd.gradcheck(f, small, fast_mode=True)
print(f"vs autograd: torch {grad_error:.1e}, numpy {numpy_error:.1e}")
glue.value(
    "gradients",
    {"torch": grad_error, "numpy": numpy_error, "gradcheck": bool(passed)},
)

# %% [markdown]
# ## The order trap: mask, then soft-cap
#
# $\tanh(-\infty) = -1$, so a port that fills masked scores with
# $-\infty$ and caps afterwards gives each masked key the finite score
# $-$cap, and a weight of $e^{-\text{cap} - m}/Z$ for a row whose
# largest allowed score is $m$. A causal row of 16 keys with 12 masked:
# the weight the masked keys receive as $m$ falls towards $-$cap.

# %%
n_keys, n_masked = 16, 12
row_mask = torch.arange(n_keys) >= n_keys - n_masked  # the last 12 masked
levels = [0.0, -20.0, -40.0, -45.0, -48.0]
leak = []
for m in levels:
    scores = torch.full((n_keys,), m, dtype=torch.float64)
    scores[1 : n_keys - n_masked] = m - 1.0  # the other allowed keys
    wrong = conventions.mask_then_softcap(scores, row_mask, cap)
    right = torch.softmax(
        (cap * torch.tanh(scores / cap)).masked_fill(row_mask, -math.inf), -1
    )
    leak.append(
        {
            "max_score": m,
            "leaked": float(wrong[row_mask].sum()),
            "right": float(right[row_mask].sum()),
        }
    )
# every key masked: the capped row is uniform, -cap everywhere
all_masked = torch.ones(n_keys, dtype=torch.bool)
uniform = conventions.mask_then_softcap(
    torch.zeros(n_keys, dtype=torch.float64), all_masked, cap
)
empty_leak = {"max_weight": float(uniform.max()), "sum": float(uniform.sum())}
print(leak, empty_leak)
glue.value(
    "order",
    {
        "n_keys": n_keys,
        "n_masked": n_masked,
        "leak": leak,
        "every_key_masked": empty_leak,
        "per_key_at_zero": math.exp(-cap),
    },
)
glue.table(
    "scores-order",
    [
        "largest allowed score",
        "weight on masked keys, mask then cap",
        "cap then mask (Gemma 2)",
    ],
    [
        *(
            [fmt(r["max_score"]), fmt(r["leaked"], 3), fmt(r["right"])]
            for r in leak
        ),
        [
            "none: every key masked",
            f"{fmt(empty_leak['sum'], 3)} (uniform, "
            f"{fmt(empty_leak['max_weight'], 3)} each)",
            'refused, or 0 with empty_rows="zero"',
        ],
    ],
    "rrr",
)

# %% [markdown]
# The same trap on the batch: random queries and keys whose scores
# reach a few tens, a causal mask, cap 50. And the other bug found in
# the same kind of port: scaling the queries by $1/\sqrt{d}$ and then
# the scores again.

# %%
big_q, big_k = q * 4, k * 4
raw = big_q @ big_k.transpose(-2, -1) / math.sqrt(D)  # (B, H, T, T)
wrong = conventions.mask_then_softcap(raw, causal, cap)
_, right_w = torch_ref.attention(big_q, big_k, v, causal, softcap=cap)
_, twice_w = torch_ref.attention(big_q / math.sqrt(D), big_k, v, causal)
_, once_w = torch_ref.attention(big_q, big_k, v, causal)
batch = {
    "score_range": [float(raw.min()), float(raw.max())],
    "leaked_max": float(wrong.masked_fill(~causal, 0).sum(-1).max()),
    "weights_diff": float((wrong - right_w).abs().max()),
    "twice_weights_diff": float((twice_w - once_w).abs().max()),
    "twice_max_weight": float(twice_w.max()),
    "once_max_weight": float(once_w.max()),
}
print(batch)
glue.value("order_batch", batch)

# %% [markdown]
# ## ALiBi
#
# Slopes per head and the bias $-m_h (i - j)$ for the last query of 16
# positions, 8 heads: steep heads look at the last few keys, shallow
# ones far back. Then the sign forms of BLOOM, MPT and flash-attn, and
# attention-gym's other slope rule for 12 heads.

# %%
slopes8 = numpy_ref.alibi_slopes(8)
positions = np.arange(16)
bias8 = numpy_ref.alibi_bias(slopes8, [15], positions)  # (8, 1, 16)


def draw_alibi(fig, theme):
    ax = fig.subplots()
    colours = [*theme.series, *theme.series]
    styles = ["-"] * 4 + ["--"] * 4
    for h in range(8):
        ax.plot(
            positions,
            bias8[h, 0],
            color=colours[h],
            linestyle=styles[h],
            marker="o",
            markersize=3,
            label=f"head {h + 1}: m = 1/{round(1 / slopes8[h])}",
        )
    ax.set_xlabel("key position j (the query is at i = 15)")
    ax.set_ylabel("bias -m (i - j)")
    ax.legend(fontsize=8, ncol=2, loc="lower right")
    ax.grid(alpha=0.3)


glue.figure(
    "scores-alibi",
    draw_alibi,
    alt=(
        "ALiBi's bias for the query at position 15 over keys 0 to 15, "
        "one line per head of 8: every line is 0 at key 15 and falls "
        "linearly towards key 0, steeply for head 1 (slope 1/2) and "
        "barely for head 8 (slope 1/256)."
    ),
)

t = 10
ours12 = numpy_ref.alibi_slopes(12)
gym12 = conventions.alibi_slopes_attention_gym(12)
causal_np = numpy_ref.causal_mask(t)


def row_weights(bias, mask=causal_np):
    scores = np.broadcast_to(bias, (len(bias), t, t))
    if mask is not None:
        scores = np.where(mask, -np.inf, scores)
    return numpy_ref.softmax(scores, axis=-1)


alibi_ours = numpy_ref.alibi_bias(ours12, range(t), range(t))
forms = {
    "bloom": conventions.alibi_bias_key_only(ours12, t),
    "mpt": conventions.alibi_bias_last_key(ours12, t),
    "symmetric": conventions.alibi_bias_symmetric(ours12, range(t), range(t)),
}
alibi = {
    "t": t,
    "slopes8": slopes8,
    "slopes12": ours12,
    "gym12": gym12,
    "slope_rule_diff": float(np.abs(ours12 - gym12).max()),
    "slope_rule_rel": float(np.abs(ours12 / gym12 - 1).max()),
    "slope_rule_head": int(np.argmax(np.abs(ours12 - gym12))) + 1,
    "causal_vs_ours": {
        name: float(np.abs(row_weights(b) - row_weights(alibi_ours)).max())
        for name, b in forms.items()
    },
    "bidirectional_symmetric": float(
        np.abs(
            row_weights(forms["symmetric"], None)
            - row_weights(alibi_ours, None)
        ).max()
    ),
    "rule_weights_diff": float(
        np.abs(
            row_weights(numpy_ref.alibi_bias(gym12, range(t), range(t)))
            - row_weights(alibi_ours)
        ).max()
    ),
}
print(alibi)
alibi = glue.value("alibi", alibi)
glue.table(
    "scores-alibi-slopes",
    ["head h", "ours, BLOOM, MPT", "attention-gym"],
    [[str(h + 1), fmt(ours12[h], 3), fmt(gym12[h], 3)] for h in range(12)],
    "rrr",
)


# %% [markdown]
# ## Attention sinks
#
# One causal row of 12 keys from the batch above, and the share of its
# weight a sink logit takes, for sink values from -4 to 8 (gpt-oss
# learns one per head). Then a row with every key masked: with a sink it
# is not empty.

# %%
row_scores = (q[0, 0, -1] @ k[0, 0].T / math.sqrt(D))[None, None, None]
sink_values = np.linspace(-4, 8, 25)
shares = [
    float(
        1
        - torch_ref.softmax_with_sinks(
            row_scores, torch.tensor([s], dtype=torch.float64)
        ).sum()
    )
    for s in sink_values
]
row_max = float(row_scores.max())


def draw_sinks(fig, theme):
    ax = fig.subplots()
    ax.plot(sink_values, shares, color=theme.series[0], marker="o", ms=3)
    ax.axvline(row_max, color=theme.muted, linestyle="--")
    ax.text(
        row_max,
        0.05,
        " the row's largest score",
        color=theme.text,
        fontsize=9,
    )
    ax.set_xlabel("sink logit s_h")
    ax.set_ylabel("weight on the sink")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)


glue.figure(
    "scores-sinks",
    draw_sinks,
    alt=(
        "The weight a sink takes from one row of 12 scores, against the "
        "sink logit from -4 to 8: near 0 for a sink well below the "
        "row's scores, rising steeply around the row's largest score "
        "and close to 1 above it."
    ),
)

empty_mask = causal.clone()
empty_mask[3] = True  # query 3 sees no key
sink_out, sink_w = torch_ref.attention(q, k, v, empty_mask, sinks=sinks)
try:
    torch_ref.attention(q, k, v, empty_mask)
    refused = None
except ValueError as error:
    refused = str(error)
tiled_out = tiled.tiled_attention_torch(
    q, k, v, empty_mask, block_q=4, block_k=4, **mods
)
dense_out, _ = torch_ref.attention(q, k, v, empty_mask, **mods)
sink_rows = {
    "share_at": {
        str(s): shares[i]
        for i, s in enumerate(sink_values)
        if s in (-4.0, 0.0, 2.0, 4.0, 8.0)
    },
    "row_max": row_max,
    "empty_row_output_max": float(sink_out[0, :, 3].abs().max()),
    "empty_row_sink_share": float((1 - sink_w[0, :, 3].sum(-1)).min()),
    "without_sink": refused,
    "tiled_vs_dense": float((tiled_out - dense_out).abs().max()),
    "tiled_blocks": 4,
    "sinks": sinks,
}
print(sink_rows)
glue.value("sinks", sink_rows)

# %% [markdown]
# A learned sink is one more key that every query sees at the score
# $s_h$ and whose value is zero: `conventions.learned_sink_as_key`
# builds that key, and plain attention with it gives the same output.

# %%
k_plus, v_plus, sink_bias = conventions.learned_sink_as_key(k, v, sinks)
as_key, _ = torch_ref.attention(
    q,
    k_plus,
    v_plus,
    torch.cat([causal, torch.zeros(T, 1, dtype=torch.bool)], dim=-1),
    bias=sink_bias,
)
with_sink, _ = torch_ref.attention(q, k, v, causal, sinks=sinks)
glue.value("sink_as_key", float((as_key - with_sink).abs().max()))
