# %% [markdown]
# ## RoPE: which features turn together
#
# One random query and one random key of head size 8, the query at
# position 5 and the key at position 2. Rotate-half
# (`torch_ref.apply_rope`: GPT-NeoX, Hugging Face) turns features
# $(i, i + d/2)$ together; the interleaved form
# (`conventions.apply_rope_interleaved`: Meta's Llama code, RoFormer)
# turns $(2i, 2i + 1)$, at the same angles. The same two vectors get two
# different scores. Reordering the features of both (evens first, then
# odds) makes the two conventions agree. Change the seed or the
# positions and rerun.

# %%
import contextlib
import itertools
import math
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

import glue
from mha_ref import conventions, numpy_ref, torch_ref
from mha_ref.positions import rope_frequencies

fmt, fmt_list = glue.fmt, glue.fmt_list
glue.value("torch", torch.__version__)
gen = torch.Generator().manual_seed(0)


def randn(*shape):
    return torch.randn(shape, generator=gen, dtype=torch.float64)


d_head, m, n = 8, 5, 2  # query at position m, key at position n
q, k = randn(1, d_head), randn(1, d_head)  # (T = 1, d_head) each
half = float(torch_ref.apply_rope(q, [m]) @ torch_ref.apply_rope(k, [n]).T)
pairs = float(
    conventions.apply_rope_interleaved(q, [m])
    @ conventions.apply_rope_interleaved(k, [n]).T
)
# the same reorder as the weight rows: evens first, then odds
q_half, k_half = (
    conventions.interleaved_to_rotate_half(vec[0], n_head=1)[None]
    for vec in (q, k)
)  # (1, d_head) each
reordered = float(
    torch_ref.apply_rope(q_half, [m]) @ torch_ref.apply_rope(k_half, [n]).T
)
print(f"rotate-half {half:.4f}, interleaved {pairs:.4f}")
print(f"rotate-half of the reordered features: {reordered:.4f}")
rope_pair = glue.value(
    "rope_pair",
    {
        "d_head": d_head,
        "m": m,
        "n": n,
        "rotate_half": half,
        "interleaved": pairs,
        "reordered": reordered,
        "reordered_difference": abs(reordered - pairs),
    },
)

# %% [markdown]
# ## A checkpoint loaded across conventions
#
# A small layer written as Meta's code writes it: random $W_Q$, $W_K$,
# $W_V$, $W_O$ (nn.Linear's (out, in) layout), interleaved RoPE, a causal
# mask. Its weights are loaded three ways into `torch_ref`'s rotate-half
# module: as they are (no error, no NaN), and with the rows of $W_Q$ and
# $W_K$ reordered within each head by
# `conventions.interleaved_to_rotate_half`, the permutation of Hugging
# Face's conversion script. Each way is compared with the interleaved
# original: scores, attention weights and outputs.

# %%
d_model, n_head, t = 32, 4, 8
torch.manual_seed(0)  # the module's own initialisation
module = torch_ref.MultiHeadAttention(d_model, n_head, rope=True).double()
meta = {name: getattr(module, name).weight.clone() for name in ("wq", "wk")}
x = randn(1, t, d_model)  # (B, T, d_model)
mask = torch_ref.causal_mask(t)  # (T, T), True = blocked
positions = torch.arange(t)


def interleaved_layer(x):
    """The layer as Meta's code runs it: interleaved RoPE, same weights."""
    q = module.split_heads(x @ meta["wq"].T)  # (B, H, T, dh)
    k = module.split_heads(x @ meta["wk"].T)
    v = module.split_heads(module.wv(x))
    q = conventions.apply_rope_interleaved(q, positions)
    k = conventions.apply_rope_interleaved(k, positions)
    scores = q @ k.transpose(-2, -1) / math.sqrt(module.d_head)
    out, weights = torch_ref.attention(q, k, v, mask)
    return scores, weights, module.wo(module.merge_heads(out))


def rotate_half_layer(x, wq, wk):
    """torch_ref's module, rotate-half RoPE, W_Q and W_K loaded as given."""
    with torch.no_grad():
        module.wq.weight.copy_(wq)
        module.wk.weight.copy_(wk)
        q, k, _ = module.project(x)  # rotated at 0 .. T - 1
        y, weights = module(x, mask)
    scores = q @ k.transpose(-2, -1) / math.sqrt(module.d_head)
    return scores, weights, y


with torch.no_grad():
    reference = interleaved_layer(x)
loads = {
    "as_is": rotate_half_layer(x, meta["wq"], meta["wk"]),
    "reordered": rotate_half_layer(
        x,
        conventions.interleaved_to_rotate_half(meta["wq"], n_head),
        conventions.interleaved_to_rotate_half(meta["wk"], n_head),
    ),
}
rope_layer = {"d_model": d_model, "n_head": n_head, "t": t}
for name, result in loads.items():
    diffs = [
        float((a - b).abs().max())
        for a, b in zip(result, reference, strict=True)
    ]
    rope_layer[name] = {
        "scores": diffs[0],
        "weights": diffs[1],
        "output": diffs[2],
        "finite": bool(all(torch.isfinite(r).all() for r in result)),
    }
    print(f"{name:<9}: scores, weights, output differ by {diffs}")
rope_layer["output_scale"] = float(reference[2].abs().max())
rope_layer = glue.value("rope_layer", rope_layer)
glue.table(
    "conventions-rope",
    ["largest difference", "W_Q, W_K as stored", "reordered"],
    [
        [
            label,
            fmt(rope_layer["as_is"][part], 2),
            fmt(rope_layer["reordered"][part], 1),
        ]
        for part, label in (
            ("scores", "scores"),
            ("weights", "weights"),
            ("output", "outputs"),
        )
    ],
    "lrr",
)

# %% [markdown]
# ## Biases and QK-norm weights move with the rows
#
# Qwen2 adds a bias to the queries and keys; Qwen3 normalises each
# head's query and key (RMSNorm, a weight per feature) before RoPE.
# Both index features, so both must follow the reorder:
# `conventions.checkpoint_to_rotate_half` reorders every tensor of
# `q_proj`, `k_proj`, `q_norm` and `k_norm`. The attention weights of
# an interleaved layer, against the rotate-half layer given the
# converted checkpoint, or one whose biases or norm weights were left
# as stored.

# %%
c_heads, c_kv, c_dh, c_t = 4, 2, 8, 8
c_dm = c_heads * c_dh
c_pos = torch.arange(c_t)
c_x = randn(1, c_t, c_dm)  # (B, T, d_model)
c_mask = torch_ref.causal_mask(c_t)  # (T, T), True = blocked


def qwen_like_weights(state, rope):
    """Attention weights of a Qwen-shaped layer: bias, then per-head
    RMSNorm (if the state has one), then RoPE, causal, GQA."""

    def heads(part, n):
        y = c_x @ state[f"{part}_proj.weight"].T + state[f"{part}_proj.bias"]
        y = y.view(1, c_t, n, c_dh)  # (B, T, n, d_head)
        if f"{part}_norm.weight" in state:
            rms = y.pow(2).mean(-1, keepdim=True).add(1e-6).rsqrt()
            y = state[f"{part}_norm.weight"] * y * rms
        return rope(y.transpose(1, 2))  # (B, n, T, d_head)

    q, k = heads("q", c_heads), heads("k", c_kv)
    k = k.repeat_interleave(c_heads // c_kv, 1)  # (B, H, T, d_head)
    return torch_ref.attention(q, k, k, c_mask)[1]  # (B, H, T, T)


checkpoint = {}
for model, parts in (("qwen2", ()), ("qwen3", ("q_norm", "k_norm"))):
    state = {
        "q_proj.weight": randn(c_heads * c_dh, c_dm),
        "q_proj.bias": randn(c_heads * c_dh),
        "k_proj.weight": randn(c_kv * c_dh, c_dm),
        "k_proj.bias": randn(c_kv * c_dh),
    }
    state.update({f"{p}.weight": 1 + randn(c_dh) for p in parts})
    original = qwen_like_weights(
        state, lambda y: conventions.apply_rope_interleaved(y, c_pos)
    )
    converted = conventions.checkpoint_to_rotate_half(state, c_dh)
    kept = ("bias",) if model == "qwen2" else ("norm.weight",)
    stale = {  # W_Q, W_K reordered; the biases or norm weights not
        n: (v if n.endswith(kept) else converted[n]) for n, v in state.items()
    }

    def half_weights(st):
        return qwen_like_weights(st, lambda y: torch_ref.apply_rope(y, c_pos))

    checkpoint[model] = {
        "converted": float((half_weights(converted) - original).abs().max()),
        "stale": float((half_weights(stale) - original).abs().max()),
    }
    print(model, checkpoint[model])
checkpoint = glue.value("checkpoint", checkpoint)

# %% [markdown]
# ## Which features pair up
#
# Each row is one head's features; a number names the pair a feature
# belongs to, and a grey cell is passed through unturned.

# %%
fig_d, fig_r = 12, 8


def pair_of(convention):
    """Pair index of each feature of a head of fig_d; -1 = not turned."""
    pairs = np.full(fig_d, -1)
    if convention == "interleaved":
        pairs[:] = np.arange(fig_d) // 2
    elif convention == "rotate_half":
        pairs[:] = np.arange(fig_d) % (fig_d // 2)
    elif convention == "partial_interleaved":
        pairs[:fig_r] = np.arange(fig_r) // 2
    else:  # partial rotate-half
        pairs[:fig_r] = np.arange(fig_r) % (fig_r // 2)
    return pairs


PAIR_ROWS = (
    ("interleaved", "interleaved (2i, 2i+1)"),
    ("rotate_half", "rotate-half (i, i+d/2)"),
    ("partial_interleaved", f"partial, interleaved, r = {fig_r}"),
    ("partial_rotate_half", f"partial, rotate-half, r = {fig_r}"),
)
pairing = glue.value(
    "pairing",
    {
        "d": fig_d,
        "r": fig_r,
        "rows": {c: pair_of(c).tolist() for c, _ in PAIR_ROWS},
    },
)


def draw_pairs(fig, theme):
    """One head per row, its label above it: 3.7 in fits a phone."""
    import matplotlib

    ax = fig.subplots()
    cmap = matplotlib.colormaps["tab20"]
    step = 1.45  # a row: its label, then its cells
    for row, (convention, label) in enumerate(PAIR_ROWS):
        y = (len(PAIR_ROWS) - 1 - row) * step
        ax.text(0, y + 1.12, label, ha="left", va="center", fontsize=8)
        for j, p in enumerate(pairing["rows"][convention]):
            colour = theme.masked if p < 0 else cmap(2 * p % 20)
            ax.add_patch(
                matplotlib.patches.Rectangle(
                    (j + 0.04, y), 0.92, 0.8, color=colour, lw=0
                )
            )
            text = "-" if p < 0 else str(p)
            ink = theme.text if p < 0 else theme.text_on(colour)
            ax.text(
                j + 0.5,
                y + 0.4,
                text,
                ha="center",
                va="center",
                color=ink,
                fontsize=8,
            )
    ax.set_xlim(0, fig_d)
    ax.set_ylim(-0.15, len(PAIR_ROWS) * step - 0.1)
    ax.set_xticks(np.arange(fig_d) + 0.5, [str(j) for j in range(fig_d)])
    ax.tick_params(axis="x", labelsize=8)
    ax.set_xlabel("feature of one head", fontsize=8)
    ax.set_yticks([])
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)


glue.figure(
    "rope-pairs",
    draw_pairs,
    alt=(
        f"Four rows of {fig_d} features each, coloured by the pair they "
        f"turn in: interleaved pairs neighbours (0 with 1), rotate-half "
        f"pairs feature i with i + {fig_d // 2}; with a rotated slice of "
        f"{fig_r}, the last {fig_d - fig_r} features are not turned and "
        f"rotate-half pairs i with i + {fig_r // 2}"
    ),
    figsize=(3.7, 3.0),
)

# %% [markdown]
# ## Partial rotary: reorder only the rotated slice
#
# A layer that turns adjacent pairs in the first half of each head only,
# as GLM does (`apply_rope_interleaved` with `rotary_dim`), loaded into
# rotate-half RoPE on the same slice (`apply_rope` with `rotary_dim`):
# its attention weights (scale 1/sqrt(d), causal mask) with the rows of
# $W_Q$ and $W_K$ reordered in the rotated slice only, and with the
# whole head reordered (the full-rotary bridge). First, the two
# reorders of one head of 8 features with a rotated slice of 4.

# %%
rows8 = torch.arange(8)  # (d_head,): each feature's index, one head
glue.value(
    "rope_partial_order",
    {
        "d_head": 8,
        "rotary_dim": 4,
        "slice": conventions.interleaved_to_rotate_half(rows8, 1, 4),
        "whole": conventions.interleaved_to_rotate_half(rows8, 1),
    },
)
p_head, p_dh, p_model, p_t = 2, 16, 12, 7
p_r = p_dh // 2  # partial_rotary_factor 0.5
p_gen = torch.Generator().manual_seed(48)  # its own: later cells keep gen
p_x = torch.randn(1, p_t, p_model, generator=p_gen, dtype=torch.float64)
p_w = {
    name: torch.randn(
        p_head * p_dh, p_model, generator=p_gen, dtype=torch.float64
    )
    for name in ("wq", "wk")
}
p_pos = torch.arange(p_t)


p_mask = torch_ref.causal_mask(p_t)  # (T, T), True = blocked


def partial_scores(wq, wk, rope):
    """The attention weights, scale 1 / sqrt(d_head), causal."""
    q = (p_x @ wq.T).view(1, p_t, p_head, p_dh).transpose(1, 2)
    k = (p_x @ wk.T).view(1, p_t, p_head, p_dh).transpose(1, 2)
    s = rope(q) @ rope(k).transpose(-2, -1) / math.sqrt(p_dh)  # (1,H,T,T)
    return torch.softmax(s.masked_fill(p_mask, -math.inf), dim=-1)


glm_like = partial_scores(
    p_w["wq"],
    p_w["wk"],
    lambda x: conventions.apply_rope_interleaved(x, p_pos, rotary_dim=p_r),
)


def half_rope(x):
    return torch_ref.apply_rope(x, p_pos, rotary_dim=p_r)


bridged = {
    "slice": [
        conventions.interleaved_to_rotate_half(p_w[n], p_head, p_r)
        for n in ("wq", "wk")
    ],
    "whole": [
        conventions.interleaved_to_rotate_half(p_w[n], p_head)
        for n in ("wq", "wk")
    ],
}
rope_partial = glue.value(
    "rope_partial",
    {
        "d_head": p_dh,
        "rotary_dim": p_r,
        **{
            name: float((partial_scores(*w, half_rope) - glm_like).abs().max())
            for name, w in bridged.items()
        },
    },
)


# %% [markdown]
# ## Dynamic NTK: vLLM's one length against transformers' growing one
#
# vLLM's `DynamicNTKScalingRotaryEmbedding._compute_cos_sin_cache`
# (vllm/model_executor/layers/rotary_embedding.py, vllm-project/vllm at
# commit 0042be2, not installed here) builds one table for length
# factor * L, with the base transformers' rule would give at that
# length; transformers recomputes as the sequence grows and keeps the
# unscaled frequencies up to L. Head 128, factor 2, L 4096, at 1000
# tokens.


# %%
def vllm_dynamic_inv_freq(rotary_dim, base, factor, max_position):
    """vLLM's dynamic NTK frequencies, restated from its source."""
    max_len = max_position * factor  # the one length vLLM builds for
    bracket = factor * max_len / max_position - (factor - 1)
    new_base = base * bracket ** (rotary_dim / (rotary_dim - 2))
    return new_base ** (-np.arange(0, rotary_dim, 2) / rotary_dim)


DYN_HEAD, DYN_FACTOR, DYN_L, DYN_T = 128, 2.0, 4096, 1000
hf_dynamic, _ = rope_frequencies(
    DYN_HEAD,
    1e4,
    {
        "rope_type": "dynamic",
        "factor": DYN_FACTOR,
        "original_max_position_embeddings": DYN_L,
    },
    seq_len=DYN_T,
)
vllm_dynamic = vllm_dynamic_inv_freq(DYN_HEAD, 1e4, DYN_FACTOR, DYN_L)
unscaled = 1e4 ** (-np.arange(0, DYN_HEAD, 2) / DYN_HEAD)  # (d / 2,)


def hf_dynamic_at(t):
    """transformers' dynamic frequencies at t tokens (ours, tested)."""
    scaling = {
        "rope_type": "dynamic",
        "factor": DYN_FACTOR,
        "original_max_position_embeddings": DYN_L,
    }
    return rope_frequencies(DYN_HEAD, 1e4, scaling, seq_len=t)[0]


DYN_AGREE, DYN_LONG = int(DYN_FACTOR * DYN_L), 32768
glue.value(
    "dynamic_libraries",
    {
        "d_head": DYN_HEAD,
        "factor": DYN_FACTOR,
        "L": DYN_L,
        "t": DYN_T,
        "vllm_length": DYN_FACTOR * DYN_L,
        # transformers at 1000 tokens: the unscaled frequencies
        "hf_unscaled": bool(
            np.allclose(hf_dynamic, 1e4 ** (-np.arange(0, 128, 2) / 128))
        ),
        # how many times slower vLLM's slowest pair turns
        "slowest_slower": hf_dynamic[-1] / vllm_dynamic[-1],
        "vllm_slower": unscaled[-1] / vllm_dynamic[-1],
        # the one length where both give the same frequencies
        "agree_t": DYN_AGREE,
        "agree": bool(np.allclose(hf_dynamic_at(DYN_AGREE), vllm_dynamic)),
        # transformers' slowest pair at a long length
        "long_t": DYN_LONG,
        "hf_slower_long": unscaled[-1] / hf_dynamic_at(DYN_LONG)[-1],
    },
)


# %% [markdown]
# ## The causal corner when queries and keys differ in number
#
# `conventions.causal_query_positions` gives the positions the $T_q$
# queries hold among $T_k$ keys for each corner; the causal rule on
# those positions is the mask. First the two grids flash-attn's README
# draws, (Tq, Tk) = (2, 5) and (5, 2), for both corners (1 = read,
# 0 = blocked). Then two new queries against five keys through SDPA
# both ways: `is_causal=True` starts the diagonal at the top left,
# `causal_lower_right` ends it at the bottom right, and our attention
# matches each. On the CPU this runs SDPA's math path; on CUDA
# `causal_lower_right` goes to fused kernels (not run here).


# %%
def grid(blocked):
    """Rows of 1 (read) and 0 (blocked), as flash-attn's README draws."""
    return [" ".join("0" if b else "1" for b in row) for row in blocked]


corners = {}
for tq, tk in ((2, 5), (5, 2)):
    shape = f"{tq}x{tk}"
    corners[shape] = {}
    for align in ("top_left", "bottom_right"):
        q_pos = conventions.causal_query_positions(tq, tk, align)  # (Tq,)
        blocked = torch_ref.causal_mask_for_positions(q_pos, torch.arange(tk))
        same = torch.equal(blocked, torch_ref.causal_mask(tq, tk, align=align))
        corners[shape][align] = {
            "query_positions": q_pos,
            "grid": grid(blocked.tolist()),
            "same_as_causal_mask": bool(same),
        }
    print(shape, corners[shape])
    glue.table(
        f"conventions-corner-{shape}",
        ["query", "top-left", "bottom-right"],
        [
            [
                str(i),
                f"`{corners[shape]['top_left']['grid'][i]}`",
                f"`{corners[shape]['bottom_right']['grid'][i]}`",
            ]
            for i in range(tq)
        ],
        "lll",
    )
corners = glue.value("corners", corners)

# %%
tq, tk = 2, 5
q, k, v = randn(1, 1, tq, 4), randn(1, 1, tk, 4), randn(1, 1, tk, 4)
top_left = torch_ref.causal_mask(tq, tk, align="top_left")  # (Tq, Tk)
bottom_right = torch_ref.causal_mask(tq, tk, align="bottom_right")
sdpa = {
    "top_left": F.scaled_dot_product_attention(q, k, v, is_causal=True),
    "bottom_right": F.scaled_dot_product_attention(
        q, k, v, attn_mask=causal_lower_right(tq, tk)
    ),
}
ours = {
    "top_left": torch_ref.attention(q, k, v, top_left)[0],
    "bottom_right": torch_ref.attention(q, k, v, bottom_right)[0],
}
masks = {"top_left": top_left, "bottom_right": bottom_right}
causal = {"tq": tq, "tk": tk}
for name, blocked in masks.items():
    causal[name] = {
        "keys_seen": [
            [j for j in range(tk) if not blocked[i, j]] for i in range(tq)
        ],
        "vs_sdpa": float((ours[name] - sdpa[name]).abs().max()),
    }
    print(f"{name:<12}: query rows see keys {causal[name]['keys_seen']}")
causal["difference"] = float(
    (sdpa["top_left"] - sdpa["bottom_right"]).abs().max()
)
causal["lower_right_is_ours"] = bool(
    # SDPA's boolean masks mean True = allowed: ours inverted
    torch.equal(causal_lower_right(tq, tk)._materialize(), ~bottom_right)
)

# more queries than keys: rows before every key
tq_long, tk_short = 4, 2
q = randn(1, 1, tq_long, 4)
k, v = randn(1, 1, tk_short, 4), randn(1, 1, tk_short, 4)
blocked = torch_ref.causal_mask(tq_long, tk_short, align="bottom_right")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    late = F.scaled_dot_product_attention(
        q, k, v, attn_mask=causal_lower_right(tq_long, tk_short)
    )
zeroed, _ = torch_ref.attention(q, k, v, blocked, empty_rows="zero")
empty = blocked.all(dim=-1)  # (Tq,): rows with no allowed key


def only(backend):
    """SDPA with one backend allowed: its output, or None if it refuses."""
    try:
        with sdpa_kernel(backend), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the warning caught above
            mask = causal_lower_right(tq_long, tk_short)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    except RuntimeError:  # "No available kernel"
        return None


# which backend gave `late`: the CPU's fused flash kernel, or the math
# path (whose safe softmax zeroes a row of -inf): each run alone
backends = {"flash": SDPBackend.FLASH_ATTENTION, "math": SDPBackend.MATH}
alone = {name: only(b) for name, b in backends.items()}
causal["more_queries"] = {
    "tq": tq_long,
    "tk": tk_short,
    "empty_rows": [i for i in range(tq_long) if empty[i]],
    "sdpa_empty_rows_zero": bool((late[..., empty, :] == 0).all()),
    "sdpa_warning": [str(w.message) for w in caught],
    # the backends that give exactly SDPA's default output here
    "sdpa_same_as": [
        name
        for name, out in alone.items()
        if out is not None and torch.equal(out, late)
    ],
    "zero_vs_sdpa": float((zeroed - late).abs().max()),
}
print("more queries than keys:", causal["more_queries"])
causal = glue.value("causal", causal)
glue.table(
    "conventions-causal",
    ["corner", "query 0 reads", "query 1 reads"],
    [
        [
            label,
            fmt_list(causal[name]["keys_seen"][0]),
            fmt_list(causal[name]["keys_seen"][1]),
        ]
        for name, label in (
            ("top_left", "top-left"),
            ("bottom_right", "bottom-right"),
        )
    ],
    "lrr",
)

# %% [markdown]
# ## Rows with no allowed key: a left-padded batch
#
# A batch of two prompts of lengths 4 and 2, padded on the left (the
# usual layout for batched generation: every prompt ends at the last
# column), with a causal mask. `conventions.rows_without_keys` lists the
# query rows that may read no key: the first two of the short prompt.
# Ours refuses and names them; with `empty_rows="zero"` it gives them
# zeros, as SDPA does; a hand-written softmax with $-\infty$ gives NaN,
# and a second layer spreads it. The real rows are compared with the
# short prompt run alone, unpadded (no position encoding here).

# %%
lengths, t = [4, 2], 4
padding = torch.tensor(
    [[i < t - n for i in range(t)] for n in lengths]
)  # (B, T), True = padding, on the left
mask = torch_ref.key_padding_mask(padding) | torch_ref.causal_mask(t)
without_keys = conventions.rows_without_keys(mask)  # [(b, 0, i), ...]
empty = mask[:, 0].all(dim=-1)  # (B, T): query rows with no key
q, k, v = randn(2, 1, t, 4), randn(2, 1, t, 4), randn(2, 1, t, 4)
rows = {"lengths": lengths, "empty_rows": {}}
for b in range(len(lengths)):
    rows["empty_rows"][str(b)] = [i for c, _, i in without_keys if c == b]
try:
    torch_ref.attention(q, k, v, mask)
    rows["message"], rows["raised"], rows["names_first_row"] = None, None, 0
except ValueError as error:
    print("default: ValueError:", error)
    rows["message"], rows["raised"] = str(error), type(error).__name__
    rows["names_first_row"] = bool(str(without_keys[0]) in str(error))
zero, _ = torch_ref.attention(q, k, v, mask, empty_rows="zero")
# SDPA's boolean mask means True = allowed
sdpa = F.scaled_dot_product_attention(q, k, v, attn_mask=~mask)
s = q @ k.transpose(-2, -1) / math.sqrt(4)  # (B, 1, T, T)
by_hand = s.masked_fill(mask, -math.inf).softmax(dim=-1) @ v
real = slice(t - lengths[1], t)  # the short prompt's own positions
alone, _ = torch_ref.attention(
    q[1:, :, real], k[1:, :, real], v[1:, :, real], torch_ref.causal_mask(2)
)  # the short prompt, unpadded
rows["zero_vs_sdpa"] = float((zero - sdpa).abs().max())
rows["zero_rows_are_zero"] = bool((zero[empty[:, None]] == 0).all())
rows["sdpa_rows_are_zero"] = bool((sdpa[empty[:, None]] == 0).all())
rows["real_vs_alone"] = float((zero[1:, :, real] - alone).abs().max())
rows["by_hand_nan_rows"] = int(by_hand.isnan().any(dim=-1).sum())
rows["by_hand_real_finite"] = bool(by_hand[~empty[:, None]].isfinite().all())
# a second layer: the NaN rows are now keys and values, masked, but the
# weighted sum multiplies their NaN by a weight of 0, and 0 x NaN = NaN
s2 = by_hand @ by_hand.transpose(-2, -1) / math.sqrt(4)
second = s2.masked_fill(mask, -math.inf).softmax(dim=-1) @ by_hand
rows["second_layer_nan_rows"] = int(second.isnan().any(dim=-1).sum())
rows["second_layer_nan_rows_b"] = [
    int(second[b].isnan().any(dim=-1).sum()) for b in range(len(lengths))
]
rows["rows_per_sequence"] = t
print({k: v for k, v in rows.items() if k != "message"})

# %% [markdown]
# The same batch through `nn.MultiheadAttention` with its defaults
# (`need_weights=True`), in training and in evaluation: the module
# computes the softmax itself and returns NaN in the padding rows.

# %%
d_model, n_head = 8, 2
torch.manual_seed(0)
layer = torch_ref.MultiHeadAttention(d_model, n_head).double()
library = torch_ref.library_version(layer)
x = randn(2, t, d_model)
per_head = mask.expand(2, n_head, t, t).reshape(2 * n_head, t, t)
for mode in ("train", "eval"):
    getattr(library, mode)()
    with torch.no_grad():
        y, _ = library(x, x, x, attn_mask=per_head)  # need_weights=True
    rows[f"mha_{mode}_nan_rows"] = int(y.isnan().any(dim=-1).sum())
    rows[f"mha_{mode}_real_finite"] = bool(y[~empty].isfinite().all())
    print(f"nn.MultiheadAttention, {mode}: {y.isnan().sum()} NaN")
rows = glue.value("empty", rows)
n_empty = len(without_keys)


def outcome(nan_rows):
    return f"NaN ({nan_rows} of {n_empty})" if nan_rows else "finite"


def finite(flag):
    return "finite" if flag else "NaN"


glue.table(
    "conventions-empty-rows",
    ["who", "empty rows", "real rows"],
    [
        [
            "ours",
            f"`{rows['raised']}`" if rows["raised"] else "no error",
            "-",
        ],
        [
            'ours, `"zero"`',
            "zeros" if rows["zero_rows_are_zero"] else "not zeros",
            "= unpadded"
            if rows["real_vs_alone"] == 0
            else f"unpadded, to {fmt(rows['real_vs_alone'], 2)}",
        ],
        [
            "SDPA",
            "zeros" if rows["sdpa_rows_are_zero"] else "not zeros",
            f"= ours to {fmt(rows['zero_vs_sdpa'], 2)}",
        ],
        [
            "`-inf` softmax",
            outcome(rows["by_hand_nan_rows"]),
            f"{finite(rows['by_hand_real_finite'])}; then "
            f"{rows['second_layer_nan_rows_b'][1]} of {t} NaN",
        ],
        [
            "MHA, train",
            outcome(rows["mha_train_nan_rows"]),
            finite(rows["mha_train_real_finite"]),
        ],
        [
            "MHA, eval",
            outcome(rows["mha_eval_nan_rows"]),
            finite(rows["mha_eval_real_finite"]),
        ],
    ],
    "lll",
)

# %% [markdown]
# ## `nn.MultiheadAttention` in evaluation: when the fast path runs
#
# In eval mode under `torch.no_grad()`, `nn.MultiheadAttention` calls its
# fused kernel (`torch._native_multi_head_attention`) only when every
# condition of its fast path holds (`torch/nn/modules/activation.py`),
# among them `batch_first=True`, the projection biases (`bias=True`), a
# boolean (not floating-point) mask, an even head count and one tensor
# for query, key and value. Otherwise it computes the attention itself:
# with `need_weights=False` through SDPA. Each way below runs one fully
# masked row; `counting_fast_path` counts the calls to the fused kernel.


# %%
@contextlib.contextmanager
def counting_fast_path():
    """Count nn.MultiheadAttention's fused (fast path) calls inside."""
    calls, original = [], torch._native_multi_head_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    torch._native_multi_head_attention = counted
    try:
        yield calls
    finally:
        torch._native_multi_head_attention = original


def masked_row(batch_first, bias, need_weights, float_mask, n_head=2):
    """One eval call with query 1 blocked from every key: its answer."""
    d_model = 4 * n_head
    blocked = torch.zeros(4, 4, dtype=torch.bool)
    blocked[1] = True  # query 1 may read no key
    attn_mask = (
        torch.zeros(4, 4, dtype=torch.float64).masked_fill(blocked, -math.inf)
        if float_mask
        else blocked
    )
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(
        d_model, n_head, bias=bias, batch_first=batch_first
    )
    mha = mha.double().eval()
    x = randn(1, 4, d_model) if batch_first else randn(4, 1, d_model)
    with torch.no_grad(), counting_fast_path() as calls:
        y, _ = mha(x, x, x, attn_mask=attn_mask, need_weights=need_weights)
    row = y[0, 1] if batch_first else y[1, 0]
    out_bias = mha.out_proj.bias if bias else torch.zeros_like(row)
    return {
        "batch_first": batch_first,
        "bias": bias,
        "need_weights": need_weights,
        "mask": "float" if float_mask else "bool",
        "n_head": n_head,
        "fast_path": bool(calls),
        "row": "NaN"
        if bool(row.isnan().any())
        else ("zeros" if bool((row == out_bias).all()) else "other"),
    }


fast_path = [
    masked_row(*combination)
    for combination in itertools.product(
        (True, False), (True, False), (False, True), (False, True)
    )
]
print(*fast_path, sep="\n")
fast_path = glue.value("mha_fast_path", fast_path)
# the fast path's layer, then one condition broken at a time
one_change = {
    "none": masked_row(True, True, False, False),
    "batch_first": masked_row(False, True, False, False),
    "bias": masked_row(True, False, False, False),
    "float_mask": masked_row(True, True, False, True),
    "odd_heads": masked_row(True, True, False, False, n_head=3),
    "need_weights": masked_row(True, True, True, False),
}
one_change = glue.value("mha_one_change", one_change)
glue.value(
    "mha_fast_summary",
    {
        "fast_rows": sum(r["fast_path"] for r in fast_path),
        "fast_is_nan": all(
            r["row"] == "NaN" for r in fast_path if r["fast_path"]
        ),
        "slow_no_weights_zero": all(
            r["row"] == "zeros"
            for r in fast_path
            if not r["fast_path"] and not r["need_weights"]
        ),
        "weights_nan": all(
            r["row"] == "NaN" for r in fast_path if r["need_weights"]
        ),
    },
)


def answer(r):
    return r["row"]  # "zeros": the attention is 0, y the output bias


glue.table(
    "conventions-mha-eval",
    ["the layer", "fast path", "masked row"],
    [
        [
            label,
            "yes" if one_change[key]["fast_path"] else "no",
            answer(one_change[key]),
        ]
        for key, label in (
            ("none", "every condition holds"),
            ("batch_first", "sequence first"),
            ("bias", "no biases"),
            ("float_mask", "a float mask"),
            ("odd_heads", "3 heads"),
            ("need_weights", "weights returned"),
        )
    ],
    "lll",
)


def layer_of(r):
    """The combination in words, for the table of all of them."""
    return ", ".join(
        (
            "batch first" if r["batch_first"] else "sequence first",
            "biases" if r["bias"] else "no biases",
            "weights" if r["need_weights"] else "no weights",
            f"{r['mask']} mask",
        )
    )


glue.table(
    "conventions-mha-eval-all",
    ["masked row", "fast path", "the layer"],
    [
        [answer(r), "yes" if r["fast_path"] else "no", layer_of(r)]
        for r in fast_path
    ],
    "lll",
)

# %% [markdown]
# ## Mask polarity
#
# Ours and `nn.MultiheadAttention`: True = blocked. SDPA's boolean
# `attn_mask`: True = attend. FlexAttention's `mask_mod`: True = keep.
# The same causal mask through each, converted where needed, and once
# given to SDPA without the flip.

# %%
T_pol, d_pol = 6, 8
q, k, v = (randn(1, 2, T_pol, d_pol) for _ in range(3))
ours_mask = torch_ref.causal_mask(T_pol)
ours_out, _ = torch_ref.attention(q, k, v, ours_mask)
sdpa_out = F.scaled_dot_product_attention(
    q, k, v, attn_mask=conventions.to_sdpa_mask(ours_mask)
)
unflipped = F.scaled_dot_product_attention(q, k, v, attn_mask=ours_mask)
# SDPA's zeros come from a row of -inf scores, whatever the mask type
empty_mask = ours_mask.clone()
empty_mask[2] = True  # query 2 reads no key
additive = torch.zeros(T_pol, T_pol, dtype=torch.float64).masked_fill(
    empty_mask, -math.inf
)
by_bool = F.scaled_dot_product_attention(q, k, v, attn_mask=~empty_mask)
by_float = F.scaled_dot_product_attention(q, k, v, attn_mask=additive)
polarity = glue.value(
    "polarity",
    {
        "sdpa_bool_empty_zero": bool((by_bool[..., 2, :] == 0).all()),
        "sdpa_float_empty_zero": bool((by_float[..., 2, :] == 0).all()),
        "sdpa": float((sdpa_out - ours_out).abs().max()),
        "unflipped": float((unflipped - ours_out).abs().max()),
        "unflipped_finite": bool(torch.isfinite(unflipped).all()),
        # the last query has no key after it: SDPA's empty row, zeros
        "unflipped_last_row_zero": bool((unflipped[..., -1, :] == 0).all()),
    },
)

# %% [markdown]
# ## The sliding window: W keys, or W keys back
#
# Hugging Face's `sliding_window` $W$ (a query sees itself and $W - 1$
# keys before it, `kv > q - W`) in the terms of flash-attn
# (`window_size=(left, right)`), JAX (`local_window_size=(left, right)`)
# and attention-gym (`q - kv <= W` with causal). Each library's rule as
# its source states it, at the converted value, gives
# `torch_ref.sliding_window_mask`; Hugging Face's $W$ passed unconverted
# lets each query that has one read one key more, and so does Mistral's
# reference prefill mask, `triu(tril(ones), diagonal=-sliding_window)`.

# %%
W, T_win = 3, 6
pos = torch.arange(T_win)
ours_window = torch_ref.sliding_window_mask(pos, pos, W)  # True = blocked
qi, kj = pos[:, None], pos[None, :]


def allowed_by(library, value):
    """Each library's documented rule, Tq = Tk: True = the key is read."""
    if library in ("hugging_face", "jax_cudnn"):  # W keys, itself included
        return (kj > qi - value) & (kj <= qi)
    if library in ("flash_attn", "jax"):
        left, right = value
        return (kj >= qi - left) & (kj <= qi + right)
    if library == "mistral_reference":  # its prefill mask
        return torch.ones(T_win, T_win).tril().triu(-value).bool()
    return (qi - kj <= value) & (qi >= kj)  # attention-gym, with causal


WINDOW_NAMES = {
    "hugging_face": "transformers",
    "flash_attn": "flash-attn",
    "attention_gym": "attention-gym",
    "jax": "JAX's `local_window_size`",
    "jax_cudnn": "JAX's cuDNN path",
}
windows = {}
for library in conventions.WINDOWS:
    value = conventions.window_from_hugging_face(W, library)
    same = bool(torch.equal(~allowed_by(library, value), ours_window))
    unconverted = (W, 0) if library in ("flash_attn", "jax") else W
    extra = int((allowed_by(library, unconverted) & ours_window).sum())
    windows[library] = {
        "value": list(value) if isinstance(value, tuple) else value,
        "same_mask": same,
        "back": conventions.window_to_hugging_face(value, library),
        "unconverted_extra_keys": extra if library != "hugging_face" else 0,
    }
mistral = allowed_by("mistral_reference", W)  # sliding_window = W as given
wide = allowed_by("flash_attn", (W, 0))  # Hugging Face's W, unconverted


def window_row(i):
    """Query i's keys: 1 read, 0 blocked, + read only by the wider count."""
    return " ".join(
        "+"
        if wide[i, j] and ours_window[i, j]
        else ("1" if wide[i, j] else "0")
        for j in range(T_win)
    )


windows = glue.value(
    "windows",
    {
        "W": W,
        "T": T_win,
        "keys_seen": int((~ours_window[-1]).sum()),
        "by": windows,
        "all_same": all(w["same_mask"] for w in windows.values()),
        "agree": [
            WINDOW_NAMES[name] for name, w in windows.items() if w["same_mask"]
        ],
        "mistral_prefill_keys": int(mistral[-1].sum()),
        "mistral_is_unconverted": bool(torch.equal(mistral, wide)),
        "wide_keys": int(wide[-1].sum()),
    },
)
glue.table(
    "conventions-window-grids",
    ["query", f"{W} keys", f"{W + 1} keys"],
    [
        [
            str(i),
            "`"
            + " ".join("0" if b else "1" for b in ours_window[i].tolist())
            + "`",
            f"`{window_row(i)}`",
        ]
        for i in range(T_win)
    ],
    "lll",
)

# %% [markdown]
# ## ALiBi's slopes and signs
#
# The slopes for 12 heads by `numpy_ref.alibi_slopes` (the paper's
# code, BLOOM, MPT) and by attention-gym's $2^{-8(h+1)/H}$, and the
# causal weights each gives on a row of 10 keys with the bias alone
# ($q \cdot k = 0$). Then the three signs: BLOOM's $m\,j$ and MPT's
# $m(j - T + 1)$ against ours, $-m(i - j)$, under a causal mask; and
# flash-attn's symmetric $-m|i - j|$, which agrees with ours under a
# causal mask and differs without one.

# %%
n_alibi, t_alibi = 12, 10
ours12 = numpy_ref.alibi_slopes(n_alibi)  # (H,)
gym12 = conventions.alibi_slopes_attention_gym(n_alibi)  # (H,)
head = int(np.argmax(np.abs(ours12 - gym12)))  # the largest difference
positions10 = np.arange(t_alibi)


def alibi_weights(bias, causal=True):
    """Softmax over the keys of the bias alone, (H, T, T)."""
    scores = np.broadcast_to(bias, (n_alibi, t_alibi, t_alibi))
    if causal:
        scores = np.where(numpy_ref.causal_mask(t_alibi), -np.inf, scores)
    return numpy_ref.softmax(scores, axis=-1)


def largest(a, b):
    return float(np.abs(a - b).max())


ours_bias = numpy_ref.alibi_bias(ours12, positions10, positions10)
gym_bias = numpy_ref.alibi_bias(gym12, positions10, positions10)
symmetric = conventions.alibi_bias_symmetric(ours12, positions10, positions10)
unmasked = {
    "ours": alibi_weights(ours_bias, causal=False),
    "symmetric": alibi_weights(symmetric, causal=False),
}
later = np.triu(np.ones((t_alibi, t_alibi), dtype=bool), 1)  # j > i
alibi = glue.value(
    "alibi",
    {
        "n_head": n_alibi,
        "t": t_alibi,
        "slope_rule_diff": float(np.abs(ours12 - gym12).max()),
        "slope_rule_head": head,  # counted from 0, as on every page
        "slope_ours": float(ours12[head]),
        "slope_gym": float(gym12[head]),
        "slope_ratio": float(ours12[head] / gym12[head]),
        "rule_weights_diff": largest(
            alibi_weights(gym_bias), alibi_weights(ours_bias)
        ),
        "bloom_vs_ours": largest(
            alibi_weights(conventions.alibi_bias_key_only(ours12, t_alibi)),
            alibi_weights(ours_bias),
        ),
        "mpt_vs_ours": largest(
            alibi_weights(conventions.alibi_bias_last_key(ours12, t_alibi)),
            alibi_weights(ours_bias),
        ),
        "symmetric_causal_vs_ours": largest(
            alibi_weights(symmetric), alibi_weights(ours_bias)
        ),
        # query 0 of head 0 without a mask: its weight on the keys after it
        "unmasked_later_weight": {
            name: float(w[0, 0][later[0]].sum())
            for name, w in unmasked.items()
        },
        # ... on the farthest key, and on itself
        "unmasked_farthest_weight": {
            name: float(w[0, 0, -1]) for name, w in unmasked.items()
        },
        "unmasked_own_weight": {
            name: float(w[0, 0, 0]) for name, w in unmasked.items()
        },
    },
)

# %% [markdown]
# ## The two meanings of "sink"
#
# StreamingLLM's sink tokens: the first positions stay visible to every
# later query of a sliding window (`sliding_window_mask(..., sink_tokens
# =4)`); how many keys the last of 16 queries reads. gpt-oss's sink: a
# learned logit $\eta_h$ per head (`attention(..., sinks=...)`), which
# `conventions.learned_sink_as_key` writes as one more key scored
# $\eta_h$ with a zero value; the causal mask gets one column of False
# for it, and plain attention gives the output of `sinks=`.

# %%
pos16 = torch.arange(16)
streaming = torch_ref.sliding_window_mask(pos16, pos16, 4, sink_tokens=4)
q, k, v = (randn(1, 3, 6, 4) for _ in range(3))  # (B, H, T, d)
eta = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)  # (H,)
causal6 = torch_ref.causal_mask(6)  # (T, T)
k_plus, v_plus, sink_bias = conventions.learned_sink_as_key(k, v, eta)
sink_seen = torch.cat(
    [causal6, torch.zeros(6, 1, dtype=torch.bool)], dim=-1
)  # (T, T + 1): the sink's column is never blocked
as_key, _ = torch_ref.attention(q, k_plus, v_plus, sink_seen, bias=sink_bias)
with_sinks, _ = torch_ref.attention(q, k, v, causal6, sinks=eta)
sink_meaning = glue.value(
    "sink_meaning",
    {
        "window": 4,
        "sink_tokens": 4,
        "t": 16,
        "keys_seen_last": int((~streaming[-1]).sum()),
        "keys_seen_without": int(
            (~torch_ref.sliding_window_mask(pos16, pos16, 4)[-1]).sum()
        ),
        "sink_as_key": float((as_key - with_sinks).abs().max()),
    },
)

# %% [markdown]
# ## Soft-cap before the mask
#
# A causal row of 16 keys, the last 12 masked, with cap 50: ordinary
# scores (0, then -1), and then every key masked. Masking first turns
# $-\infty$ into $-50$: the masked keys keep a weight.

# %%
cap, n_keys, n_masked = 50.0, 16, 12
row_mask = torch.arange(n_keys) >= n_keys - n_masked  # the last 12 masked
row = torch.zeros(n_keys, dtype=torch.float64)
row[1 : n_keys - n_masked] = -1.0  # the other allowed keys
wrong = conventions.mask_then_softcap(row, row_mask, cap)
everything = torch.ones(n_keys, dtype=torch.bool)
emptied = conventions.mask_then_softcap(torch.zeros(n_keys), everything, cap)
try:
    torch_ref.attention(
        torch.zeros(1, 1, 4),
        torch.zeros(1, n_keys, 4),
        torch.zeros(1, n_keys, 4),
        everything[None, None],
        softcap=cap,
    )
    capped_first = "no error"
except ValueError as error:
    capped_first = type(error).__name__
order = glue.value(
    "order",
    {
        "cap": cap,
        "n_keys": n_keys,
        "n_masked": n_masked,
        "leaked": float(wrong[row_mask].sum()),  # on all 12 masked keys
        "emptied_per_key": float(emptied.max()),
        "emptied_is_uniform": bool((emptied == emptied[0]).all()),
        "capped_first": capped_first,
    },
)

# %% [markdown]
# ## Tensor layouts
#
# flash-attn's `(B, T, H, d)` read as our `(B, H, T, d)` runs without an
# error when it happens to have the right number of dimensions; so does
# a batch-first `(B, T, E)` fed to `nn.MultiheadAttention`'s default,
# which reads `(T, B, E)`.

# %%
q_bthd, k_bthd, v_bthd = (randn(2, 5, 4, 8) for _ in range(3))  # (B,T,H,d)
right, _ = torch_ref.attention(
    *(conventions.from_bthd(t) for t in (q_bthd, k_bthd, v_bthd))
)
misread, _ = torch_ref.attention(q_bthd, k_bthd, v_bthd)  # T, H swapped
torch.manual_seed(0)
seq_first = nn.MultiheadAttention(8, 2).double().eval()  # batch_first=False
x_bte = randn(3, 5, 8)  # (B, T, E): batch first
with torch.no_grad():
    y_right, _ = seq_first(*(x_bte.transpose(0, 1),) * 3)  # (T, B, E)
    y_wrong, _ = seq_first(x_bte, x_bte, x_bte)  # read as (T=3, B=5, E)
layouts = glue.value(
    "layouts",
    {
        "bthd_misread": float(
            (misread - conventions.from_bthd(right)).abs().max()
        ),
        "sequence_first_misread": float(
            (y_wrong - y_right.transpose(0, 1)).abs().max()
        ),
    },
)

# %% [markdown]
# ## The grouped-query head map
#
# 8 query heads, 2 key/value heads: consecutive groups (SDPA's
# `enable_gqa`, Hugging Face's `repeat_kv`, ours) against strided ones;
# `repeat_interleave` gives the first, `repeat` (and `np.tile`) the
# second.

# %%
consecutive = conventions.kv_head_of(8, 2, "consecutive")
strided = conventions.kv_head_of(8, 2, "strided")
q8, k2, v2 = randn(1, 8, 5, 4), randn(1, 2, 5, 4), randn(1, 2, 5, 4)
sdpa_gqa = F.scaled_dot_product_attention(q8, k2, v2, enable_gqa=True)
by_map = {
    name: torch_ref.attention(q8, k2[:, heads], v2[:, heads])[0]
    for name, heads in (("consecutive", consecutive), ("strided", strided))
}
head_map = glue.value(
    "head_map",
    {
        "consecutive": consecutive,
        "strided": strided,
        "consecutive_vs_sdpa": float(
            (by_map["consecutive"] - sdpa_gqa).abs().max()
        ),
        "strided_vs_sdpa": float((by_map["strided"] - sdpa_gqa).abs().max()),
        "repeat_interleave_is_consecutive": bool(
            torch.equal(k2.repeat_interleave(4, dim=1), k2[:, consecutive])
        ),
        "repeat_is_strided": bool(
            torch.equal(k2.repeat(1, 4, 1, 1), k2[:, strided])
        ),
    },
)

# %% [markdown]
# ## Scale defaults
#
# The factor on $q \cdot k$ under each convention, at the head size of
# Gemma 2 27B: $d_\text{model} = 4608$, 32 heads of 128 (Gemma Team,
# 2024, Table 1), with `query_pre_attn_scalar` $= 4608 / 32 = 144$.

# %%
gemma_d_model, gemma_n_head, gemma_d_head = 4608, 32, 128
gemma_scalar = gemma_d_model // gemma_n_head  # query_pre_attn_scalar
scale = {
    "d_model": gemma_d_model,
    "n_head": gemma_n_head,
    "d_head": gemma_d_head,
    "query_pre_attn_scalar": gemma_scalar,
    "sqrt": conventions.default_scale(gemma_d_head, "sqrt"),
    "gemma": conventions.default_scale(gemma_d_head, "gemma", gemma_scalar),
    "t5": conventions.default_scale(gemma_d_head, "t5"),
}
scale["gemma_over_sqrt"] = scale["gemma"] / scale["sqrt"]
scale = glue.value("scale", scale)

# %% [markdown]
# ## Fill values
#
# A fully masked row as an additive mask with each fill value: the
# scores $s_1 = (0.5, 1, -0.3)$ in float32 and float64, and
# $s_2 = (0, 40, 100)$ in float32. A finite fill shifts the row by one
# constant; the softmax ignores a constant, so what remains is rounding.

# %%
rows_of_scores = {
    "s1_float32": ([0.5, 1.0, -0.3], torch.float32),
    "s1_float64": ([0.5, 1.0, -0.3], torch.float64),
    "s2_float32": ([0.0, 40.0, 100.0], torch.float32),
}
fills = {}
for name, (values, dtype) in rows_of_scores.items():
    scores = torch.tensor([values], dtype=dtype)  # (1, 3)
    own = scores.softmax(dim=-1)[0]  # the blocked scores' own softmax
    blocked = torch.ones(1, 3, dtype=torch.bool)
    fills[name] = {}
    for label, fill in (("-inf", "-inf"), ("min", "min"), ("-1e9", -1e9)):
        shift = conventions.additive_mask(blocked, dtype, fill)
        added = scores + shift
        weights = added.softmax(dim=-1)[0]
        nan = bool(weights.isnan().any())
        kept = (added - shift)[0]  # the scores the rounding left
        fills[name][label] = {
            "weights": "NaN" if nan else weights,
            "uniform": not nan and bool((weights == weights[0]).all()),
            "vs_own": None if nan else float((weights - own).abs().max()),
            "kept": None if nan else kept,
            "kept_is_s": not nan
            and float((kept - scores[0]).abs().max()) < 1e-6,
        }
    fills[name]["own"] = own
fills = glue.value("fills", fills)


def fill_cell(result):
    if result["weights"] == "NaN":
        return "NaN"
    if result["uniform"]:
        return "uniform"
    if result["kept_is_s"]:  # the page gives the difference
        return "softmax of $s$"
    return f"softmax of {fmt_list(result['kept'], 4)}"  # rounded scores


glue.table(
    "conventions-fills",
    ["row", "`finfo.min`", "`-1e9`"],  # -inf: NaN in every row
    [
        [label, *(fill_cell(fills[name][f]) for f in ("min", "-1e9"))]
        for name, label in (
            ("s1_float32", "$s_1$, float32"),
            ("s1_float64", "$s_1$, float64"),
            ("s2_float32", "$s_2$, float32"),
        )
    ],
    "lll",
)
