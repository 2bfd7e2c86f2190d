# %% [markdown]
# ## The chain, on one row
#
# Four modifiers change the scores between $QK^\top$ and the softmax, in
# Gemma 2's order: the scale, the soft-cap, an additive bias (ALiBi),
# the mask, and then a softmax with one extra "sink" logit per head.
# `attention` takes each as a keyword; each can be switched off
# (`None`). The page's numbers start from one random float64 batch.
# Numbers the page shows inside its math are also glued as TeX
# (`1.93\times10^{-22}`, in braces so that the line never breaks in
# the middle of one): `tex` makes them.

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


def tex(x, digits=2):
    """x in TeX's scientific form, {1.93\\times10^{-22}}; 0 stays 0."""
    if x == 0:
        return "0"
    mantissa, exponent = f"{x:.{digits}e}".split("e")
    return f"{{{mantissa}\\times10^{{{int(exponent)}}}}}"


B, H, T, D = 1, 4, 12, 16
q, k, v = (
    randn(B, H, T, D, scale=2.0),
    randn(B, H, T, D, scale=2.0),
    randn(B, H, T, D),
)
causal = torch_ref.causal_mask(T)  # (T, T), True = blocked
out, weights = torch_ref.attention(q, k, v, causal)
default_again, _ = torch_ref.attention(q, k, v, causal, scale=D**-0.5)

# the same comparison at Gemma's and others' head sizes: 1/sqrt(d) and
# d ** -0.5 round differently unless sqrt(d) is a power of two
explicit = {}
for d in (96, 128):
    qd, kd, vd = (randn(B, H, T, d) for _ in range(3))
    plain, _ = torch_ref.attention(qd, kd, vd, causal)
    spelled, _ = torch_ref.attention(qd, kd, vd, causal, scale=d**-0.5)
    explicit[str(d)] = float((plain - spelled).abs().max())
print(explicit)
glue.value(
    "chain",
    {
        "shape": [B, H, T, D],
        "d_head": D,
        "default_vs_explicit_scale": float((out - default_again).abs().max()),
        "explicit_at": explicit,
        "explicit_equal": len(set(explicit.values())) == 1,
        "tex": {
            "page": tex(float((out - default_again).abs().max())),
            **{d: tex(x) for d, x in explicit.items()},
        },
    },
)

# %% [markdown]
# ## Scale
#
# The default is $1/\sqrt{d_k}$. Gemma 2 uses
# `query_pre_attn_scalar`$^{-1/2}$ instead, which its 27B model sets to
# 144 with a head size of 128; T5 uses no scale at all. Rows of scores
# at that head size, 128, with queries and keys drawn as the batch's:
# how sharp their weights get under the three scales (the median over
# the rows of each row's largest weight).

# %%
d_27b = 128
d_model_27b, n_head_27b = 4608, 32  # Gemma 2 27B: hidden_size, heads
scalar_27b = d_model_27b // n_head_27b  # query_pre_attn_scalar, 144
scales = {
    "sqrt": conventions.default_scale(d_27b, "sqrt"),
    "gemma": conventions.default_scale(d_27b, "gemma", scalar_27b),
    "t5": conventions.default_scale(d_27b, "t5"),
}
n_rows, entry_std = 4000, 2.0  # as the batch's queries and keys
q_rows = randn(n_rows, 1, d_27b, scale=entry_std)  # one query per row
k_rows = randn(n_rows, T, d_27b, scale=entry_std)  # its T keys, (N, T, d)
rows = (q_rows @ k_rows.transpose(-2, -1))[:, 0]  # raw scores q . k, (N, T)
largest = {
    name: torch.softmax(rows * s, dim=-1).amax(dim=-1)  # (N,)
    for name, s in scales.items()
}
sharpness = {name: float(x.median()) for name, x in largest.items()}
print(scales, sharpness)
glue.value(
    "scale",
    {
        **scales,
        "d_head": d_27b,
        "d_model": d_model_27b,
        "n_head": n_head_27b,
        "scalar": scalar_27b,
        "gemma_over_sqrt": scales["gemma"] / scales["sqrt"],
        "rows": n_rows,
        "keys_per_row": T,
        "entry_std": entry_std,
        "max_weight": sharpness,
        # the unscaled rows that are all but one-hot
        "t5_share_above_099": float((largest["t5"] > 0.99).double().mean()),
        # enough digits that a weight close to 1 does not read as 1
        "max_weight_text": {n: fmt(x, 3) for n, x in sharpness.items()},
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
    left, right = fig.subplots(2, 1, height_ratios=[3, 2])  # stacked
    left.plot(grid, grid, color=theme.muted, linestyle="--", label="raw s")
    left.plot(
        grid,
        cap * np.tanh(grid / cap),
        color=theme.series[0],
        label=f"{cap:g} tanh(s / {cap:g})",
    )
    for y in (cap, -cap):
        left.axhline(y, color=theme.muted, linewidth=0.8)
        left.text(
            -148,
            y + (4 if y > 0 else -12),
            f"{y:+g}: the cap",
            color=theme.text,
            fontsize=8,
        )
    left.set_ylim(-110, 110)
    left.set_xlabel("score s before the cap")
    left.set_ylabel("score after the cap")
    left.legend(fontsize=8, loc="lower right")
    left.grid(alpha=0.3)
    right.plot(grid, 1 - np.tanh(grid / cap) ** 2, color=theme.series[1])
    right.set_ylim(0, 1.05)
    right.set_xlabel("score s before the cap")
    right.set_ylabel(f"slope 1 - tanh²(s/{cap:g})")
    right.grid(alpha=0.3)


glue.figure(
    "scores-softcap",
    draw_softcap,
    alt=(
        "Top: the soft-capped score 50 tanh(s / 50) against the raw score "
        "s, close to s near 0 and flattening towards the lines at plus and "
        "minus 50, the cap. Below: its slope 1 - tanh^2(s / 50), 1 at s = 0 "
        "and falling towards 0 on both sides."
    ),
    figsize=(3.7, 5.0),  # one column: whole on a phone
)

# %% [markdown]
# Gradients: `attention_backward` with a soft-cap (and every other
# modifier) against autograd through `attention`, in float64. Then
# `torch.autograd.gradcheck` on `attention_backward` itself: wrapped as
# the backward of a `torch.autograd.Function`, its hand-written
# gradients meet finite differences of the forward, with every modifier
# on and a row that only the sink serves. A backward that forgets the
# cap's factor must fail the same check.

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


class HandWritten(torch.autograd.Function):
    """attention forward; torch_ref.attention_backward as its backward."""

    @staticmethod
    def forward(ctx, q, k, v, sinks, mask, bias, scale, softcap, drift):
        ctx.save_for_backward(q, k, v, sinks, mask, bias)
        ctx.scale, ctx.softcap, ctx.drift = scale, softcap, drift
        out, _ = torch_ref.attention(
            q, k, v, mask, scale=scale, softcap=softcap, bias=bias, sinks=sinks
        )
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, sinks, mask, bias = ctx.saved_tensors
        softcap = None if ctx.drift else ctx.softcap  # drift: no factor
        grads = torch_ref.attention_backward(
            q,
            k,
            v,
            dout,
            mask,
            scale=ctx.scale,
            softcap=softcap,
            bias=bias,
            sinks=sinks,
        )  # dq, dk, dv, dsinks
        return (*grads, None, None, None, None, None)


tq, tk, d_small = 3, 4, 3
small = [
    randn(1, 2, tq, d_small),
    randn(1, 2, tk, d_small),
    randn(1, 2, tk, d_small),
    torch.tensor([0.5, -1.0], dtype=torch.float64),
]
small = [t.requires_grad_() for t in small]
small_mask = torch_ref.causal_mask(tq, tk, align="bottom_right")
small_mask[0] = True  # query 0 sees no key: the sink alone serves it
small_bias = randn(2, tq, tk, scale=0.5)


def hand_written(*tensors, drift=False):
    return HandWritten.apply(*tensors, small_mask, small_bias, 0.7, 1.5, drift)


passed = torch.autograd.gradcheck(hand_written, small)
drifted = torch.autograd.gradcheck(
    lambda *t: hand_written(*t, drift=True), small, raise_exception=False
)
print(f"vs autograd: torch {grad_error:.1e}, numpy {numpy_error:.1e}")
print(f"gradcheck: hand-written {passed}, without the cap's factor {drifted}")
glue.value(
    "gradients",
    {
        "torch": grad_error,
        "numpy": numpy_error,
        "gradcheck": bool(passed),
        "gradcheck_drifted": bool(drifted),
        "gradcheck_q_shape": list(small[0].shape),
        "gradcheck_k_shape": list(small[1].shape),
        "tex": {"torch": tex(grad_error), "numpy": tex(numpy_error)},
    },
)

# %% [markdown]
# ## The order trap: mask, then soft-cap
#
# $\tanh(-\infty) = -1$, so a port that fills masked scores with
# $-\infty$ and caps afterwards gives each masked key the finite score
# $-$cap. The softmax measures it against the row's largest allowed
# score after the cap, $\tilde m = \text{cap}\tanh(m/\text{cap})$,
# which never reaches $-$cap: a masked key keeps the weight
# $e^{-\text{cap} - \tilde m}/Z$. A causal row of 16 keys with 12
# masked: the weight the masked keys receive as $m$ falls.

# %%
n_keys, n_masked = 16, 12
row_mask = torch.arange(n_keys) >= n_keys - n_masked  # the last 12 masked
levels = [0.0, -20.0, -40.0, -cap, -1.5 * cap, -2 * cap, -4 * cap]
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
            "max_capped": cap * math.tanh(m / cap),
            "leaked": float(wrong[row_mask].sum()),
            "per_key": float(wrong[row_mask].max()),
            "right": float(right[row_mask].sum()),
        }
    )
# every key masked: the capped row is uniform, -cap everywhere
all_masked = torch.ones(n_keys, dtype=torch.bool)
uniform = conventions.mask_then_softcap(
    torch.zeros(n_keys, dtype=torch.float64), all_masked, cap
)
empty_leak = {"max_weight": float(uniform.max()), "sum": float(uniform.sum())}
f32 = torch.finfo(torch.float32)
at_zero = leak[0]
# the leak at m = -c, -1.5 c and -2 c: large only well below -c
leak_at = {str(r["max_score"] / -cap): r["leaked"] for r in leak[3:6]}
print(leak, empty_leak)


def cell(x):
    """Two significant figures, as the prose writes them: 0.34, 0.029,
    and below 0.01 in the form $2.7\\times10^{-5}$."""
    if x == 0 or abs(x) >= 0.01:
        return fmt(x, 2)
    return f"${tex(x, 1)}$"


glue.value(
    "order",
    {
        "n_keys": n_keys,
        "n_masked": n_masked,
        "leak": leak,
        "every_key_masked": empty_leak,
        "leak_at": leak_at,
        "leak_at_text": {n: cell(x) for n, x in leak_at.items()},
        "per_key_at_zero": math.exp(-cap),
        "float32_eps": f32.eps,
        "float32_tiny": f32.tiny,
        "tex": {
            "exp_minus_cap": tex(math.exp(-cap)),
            "per_key": tex(at_zero["per_key"]),
            "float32_eps": tex(f32.eps),
            "float32_tiny": tex(f32.tiny),
        },
    },
)


glue.table(
    "scores-order",
    ["$m$", r"$\tilde m$", "mask→cap", "cap→mask"],
    [
        *(
            [
                f"{r['max_score']:g}",
                f"{r['max_capped']:.1f}",
                cell(r["leaked"]),
                cell(r["right"]),
            ]
            for r in leak
        ),
        [
            "all masked",
            "—",
            f"{cell(empty_leak['sum'])}",
            "refused",
        ],
    ],
    "rrrr",
)

# %% [markdown]
# The same trap on the batch: a causal mask and cap 50, first on the
# page's batch as it is, then on the same queries and keys times 4
# (scores 16 times larger, reaching far past the cap). And the other
# bug found in the same kind of port: scaling the queries by
# $1/\sqrt{d}$ and then the scores again.


# %%
def order_bugs(q, k):
    raw = q @ k.transpose(-2, -1) / math.sqrt(D)  # (B, H, T, T)
    wrong = conventions.mask_then_softcap(raw, causal, cap)
    _, right_w = torch_ref.attention(q, k, v, causal, softcap=cap)
    _, twice_w = torch_ref.attention(q / math.sqrt(D), k, v, causal)
    _, once_w = torch_ref.attention(q, k, v, causal)
    leaked = float(wrong.masked_fill(~causal, 0).sum(-1).max())
    return {
        "score_range": [float(raw.min()), float(raw.max())],
        "leaked_max": leaked,
        "weights_diff": float((wrong - right_w).abs().max()),
        "twice_weights_diff": float((twice_w - once_w).abs().max()),
        "tex": {"leaked_max": tex(leaked)},
    }


times = 4
batch = {"page": order_bugs(q, k), "times": times}
batch["larger"] = order_bugs(q * times, k * times)
print(batch)
glue.value("order_batch", batch)

# %% [markdown]
# ## ALiBi
#
# Slopes per head for 8 heads, and the factor $e^{-m_h (i - j)}$ by
# which the bias shrinks a key's weight at distances 1 to 1024, for
# every other head: steep heads look at the last few keys, shallow ones
# far back. Then the sign forms of
# BLOOM, MPT and flash-attn, and attention-gym's slope rule for 12
# heads: first with the bias alone ($q \cdot k = 0$ for every key), then
# with random queries and keys.

# %%
slopes8 = numpy_ref.alibi_slopes(8)
positions = np.arange(16)
bias8 = numpy_ref.alibi_bias(slopes8, [15], positions)  # (8, 1, 16)
far = 1024
fade = {
    "distance": far,
    "steepest": math.exp(-slopes8[0] * far),
    "shallowest": math.exp(-slopes8[-1] * far),
}
fade["tex"] = {n: tex(fade[n]) for n in ("steepest", "shallowest")}
print(fade)


distances = np.unique(np.geomspace(1, far, 200).round())  # 1 .. 1024
shown_heads = [0, 2, 4, 6]  # every other head of 8: one colour each


def draw_alibi(fig, theme):
    ax = fig.subplots()
    for colour, h in zip(theme.series, shown_heads, strict=True):
        ax.plot(
            distances,
            np.exp(-slopes8[h] * distances),  # e^{-m_h (i - j)}
            color=colour,
            label=f"head {h}: m = 1/{round(1 / slopes8[h])}",
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("distance i - j (log scale)")
    ax.set_ylabel(r"weight factor $e^{-m\,(i - j)}$")
    ax.set_ylim(0, 1.02)
    ax.legend(
        fontsize=8, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.3)
    )
    ax.grid(alpha=0.3)


glue.figure(
    "scores-alibi",
    draw_alibi,
    alt=(
        "The factor e^(-m (i - j)) by which ALiBi shrinks a key's weight, "
        "against the distance i - j from 1 to 1024 on a log axis, for "
        "heads 0, 2, 4 and 6 of 8: head 0 (slope 1/2) falls to nearly 0 "
        "within about 8 keys, head 6 (slope 1/128) keeps most of the "
        "weight for a hundred keys and fades only near 1024."
    ),
    figsize=(3.7, 3.6),  # one column: whole on a phone
)

t, t_long = 10, 100
ours12 = numpy_ref.alibi_slopes(12)
gym12 = conventions.alibi_slopes_attention_gym(12)
# random content for 12 heads: q . k / sqrt(d) of unit queries and keys
q12, k12 = randn(12, t, D).numpy(), randn(12, t, D).numpy()
content = q12 @ np.swapaxes(k12, -2, -1) / math.sqrt(D)  # (12, t, t)


def row_weights(bias, causal=True, scores=0.0):
    """Softmax of scores + bias over the keys, with or without causal."""
    n = bias.shape[-1]
    scores = scores + np.broadcast_to(bias, (len(bias), n, n))
    if causal:
        scores = np.where(numpy_ref.causal_mask(n), -np.inf, scores)
    return numpy_ref.softmax(scores, axis=-1)


def largest(a, b):
    return float(np.abs(a - b).max())


def ours_bias(slopes, n):
    return numpy_ref.alibi_bias(slopes, range(n), range(n))


alibi_ours = ours_bias(ours12, t)
forms = {
    "bloom": conventions.alibi_bias_key_only(ours12, t),
    "mpt": conventions.alibi_bias_last_key(ours12, t),
    "symmetric": conventions.alibi_bias_symmetric(ours12, range(t), range(t)),
}
causal_vs_ours = {
    name: largest(row_weights(b), row_weights(alibi_ours))
    for name, b in forms.items()
}
alibi = {
    "t": t,
    "t_long": t_long,
    "fade": fade,
    "slopes8": slopes8,
    "slopes12": ours12,
    "gym12": gym12,
    "slope_rule_diff": float(np.abs(ours12 - gym12).max()),
    "slope_rule_rel": float(np.abs(ours12 / gym12 - 1).max()),
    "slope_rule_head": int(np.argmax(np.abs(ours12 - gym12))),
    # the bias alone (q . k = 0)
    "causal_vs_ours": causal_vs_ours,
    "bidirectional_symmetric": largest(
        row_weights(forms["symmetric"], False),
        row_weights(alibi_ours, False),
    ),
    "rule_weights_diff": largest(
        row_weights(ours_bias(gym12, t)), row_weights(alibi_ours)
    ),
    "rule_weights_diff_long": largest(
        row_weights(ours_bias(gym12, t_long)),
        row_weights(ours_bias(ours12, t_long)),
    ),
    # with random queries and keys
    "content": {
        "bidirectional_symmetric": largest(
            row_weights(forms["symmetric"], False, content),
            row_weights(alibi_ours, False, content),
        ),
        "rule_weights_diff": largest(
            row_weights(ours_bias(gym12, t), scores=content),
            row_weights(alibi_ours, scores=content),
        ),
    },
    "tex": {name: tex(x) for name, x in causal_vs_ours.items()},
}
alibi = glue.value("alibi", alibi)
glue.table(
    "scores-alibi-slopes",
    [
        "head h (from 0)",
        "ours, BLOOM, MPT",
        "attention-gym",
    ],
    [[str(h), fmt(ours12[h], 3), fmt(gym12[h], 3)] for h in range(12)],
    "rrr",
)


# %% [markdown]
# ## Attention sinks
#
# One causal row of 12 keys from the batch above, and the share of its
# weight a sink logit takes, for sink values from -4 to 8 (gpt-oss
# learns one per head). The share is $1/(1 + e^{L_i - \eta_h})$, with
# $L_i$ the log-sum-exp of the row's scores: one half at
# $\eta_h = L_i$. Then a row with every key masked: with a sink it is
# not empty.

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
row_lse = float(torch.logsumexp(row_scores, dim=-1))  # L
at_lse = float(
    1
    - torch_ref.softmax_with_sinks(
        row_scores, torch.tensor([row_lse], dtype=torch.float64)
    ).sum()
)
sigmoid_gap = max(
    abs(share - 1 / (1 + math.exp(row_lse - s)))
    for share, s in zip(shares, sink_values, strict=True)
)


def draw_sinks(fig, theme):
    ax = fig.subplots()
    ax.plot(sink_values, shares, color=theme.series[0], marker="o", ms=3)
    ax.axvline(row_lse, color=theme.muted, linestyle="--")
    ax.axhline(0.5, color=theme.muted, linewidth=0.8)
    ax.text(
        row_lse - 0.3,
        0.7,
        "$\\eta_h = L_i$: the sink\ntakes 1/2",
        color=theme.text,
        fontsize=9,
        ha="right",
    )
    ax.set_xlabel(r"sink logit $\eta_h$")
    ax.set_ylabel("weight on the sink")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)


glue.figure(
    "scores-sinks",
    draw_sinks,
    alt=(
        "The weight a sink takes from one row of 12 scores, against the "
        "sink logit eta from -4 to 8: an S-shaped curve, near 0 for a "
        "sink well below the row's log-sum-exp L_i, one half at L_i (a "
        "dashed line) and close to 1 above it."
    ),
    figsize=(3.7, 3.0),  # one column: whole on a phone
)

empty_mask = causal.clone()
empty_mask[3] = True  # query 3 sees no key
sink_out, sink_w = torch_ref.attention(q, k, v, empty_mask, sinks=sinks)
try:
    torch_ref.attention(q, k, v, empty_mask)
    refused = None
except ValueError as error:
    refused = str(error)
# the page quotes the reason only, not the whole message
reason = "each query needs at least one allowed key"
if refused is None or reason not in refused:
    raise RuntimeError(f"the refusal no longer says {reason!r}: {refused}")
tiled_out = tiled.tiled_attention_torch(
    q, k, v, empty_mask, block_q=4, block_k=4, **mods
)
dense_out, _ = torch_ref.attention(q, k, v, empty_mask, **mods)
tiled_vs_dense = float((tiled_out - dense_out).abs().max())
sink_rows = {
    "share_at": {
        str(s): shares[i]
        for i, s in enumerate(sink_values)
        if s in (-4.0, 0.0, 2.0, 4.0, 8.0)
    },
    "row_max": row_max,
    "row_lse": row_lse,
    "share_at_lse": at_lse,
    "sigmoid_gap": sigmoid_gap,
    "empty_row_output_max": float(sink_out[0, :, 3].abs().max()),
    "empty_row_sink_share": float((1 - sink_w[0, :, 3].sum(-1)).min()),
    "without_sink": reason,
    "tiled_vs_dense": tiled_vs_dense,
    "tiled_blocks": 4,
    "sinks": sinks,
    "tex": {"tiled_vs_dense": tex(tiled_vs_dense)},
}
print(sink_rows)
glue.value("sinks", sink_rows)

# %% [markdown]
# A learned sink is one more key that every query sees at the score
# $\eta_h$ and whose value is zero: `conventions.learned_sink_as_key`
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
sink_as_key = float((as_key - with_sink).abs().max())
glue.value("sink_as_key", sink_as_key)
glue.value("sink_as_key_tex", tex(sink_as_key))
