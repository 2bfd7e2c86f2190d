# %% [markdown]
# ## A small latent-attention layer
#
# A `MultiHeadLatentAttention` of width 64 with 4 heads, a latent of 16
# numbers per token, query heads of 8 content + 4 position features and
# value heads of 8, a query bottleneck of 24, every weight drawn at
# random in float64 (the RMS norms' gains too). The cell lists its
# weights under Hugging Face's names, with their (out, in) shapes.

# %%
import numpy as np
import torch
import torch.nn.functional as F

import glue
from mha_ref import (
    cost,
    kv_cache,
    latent_numpy,
    latent_torch,
    tolerances,
    torch_ref,
)

demo = {
    "d_model": 64,
    "n_head": 4,
    "kv_lora_rank": 16,
    "qk_nope_head_dim": 8,
    "qk_rope_head_dim": 4,
    "v_head_dim": 8,
    "q_lora_rank": 24,
}
module = latent_torch.MultiHeadLatentAttention(**demo, dtype=torch.float64)
gen = torch.Generator().manual_seed(32)
with torch.no_grad():
    for param in module.parameters():
        draw = torch.randn(param.shape, generator=gen, dtype=torch.float64)
        if param.dim() == 1:  # RMS gains near 1
            param.copy_(1.0 + 0.3 * draw)
        else:  # keeps activations near 1
            param.copy_(draw * param.shape[-1] ** -0.5)
T = 8
x = torch.randn(1, T, demo["d_model"], generator=gen, dtype=torch.float64)
causal = torch_ref.causal_mask(T)
glue.value("demo", demo)
shapes = {n: list(p.shape) for n, p in module.named_parameters()}
for name, shape in shapes.items():
    print(f"{name:28s} {tuple(shape)}")
glue.value("demo_weights", shapes)

# %% [markdown]
# ## One latent behind every head's keys and values
#
# Each head has its own $W_{UK}$ and $W_{UV}$, but all of them read the
# same latent. Over 64 tokens, the content keys of all 4 heads side by
# side (64 x 32) have the rank of the latent, 16; all keys and values
# together (64 x 80) have rank 16 + 4, the latent and the shared key.

# %%
n_long = 64
x_long = torch.randn(
    1, n_long, demo["d_model"], generator=gen, dtype=torch.float64
)
c_long, k_rope_long = module.latents(x_long, torch.arange(n_long))
k_long, v_long = module.expand_kv(c_long, k_rope_long)  # (1, H, T, .)


def side_by_side(heads):
    """(1, H, T, d) -> (T, H * d): every head's vectors of a token."""
    return heads[0].transpose(0, 1).reshape(n_long, -1)


content_keys = side_by_side(k_long[..., : demo["qk_nope_head_dim"]])
keys_values = torch.cat([side_by_side(k_long), side_by_side(v_long)], -1)
rank = glue.value(
    "rank",
    {
        "tokens": n_long,
        "content_columns": content_keys.shape[1],
        "content_keys": torch.linalg.matrix_rank(content_keys),
        "kv_columns": keys_values.shape[1],
        "keys_values": torch.linalg.matrix_rank(keys_values),
    },
)

# %% [markdown]
# ## Absorption: the two forms agree
#
# The naive form expands every head's key and value from the latent;
# the absorbed form multiplies $W_{UK}$ into the query and applies
# $W_{UV}$ after the weighted sum of latents. Same output and weights
# up to float64 rounding, with the causal mask, at positions 0 to 7.

# %%
y_naive, w_naive = module(x, causal)
y_absorbed, w_absorbed = module(x, causal, absorbed=True)
mirror = latent_numpy.MultiHeadLatentAttention(**demo)
mirror.load_state_dict({n: w.numpy() for n, w in module.state_dict().items()})
y_numpy, _ = mirror(x.numpy(), causal.numpy(), absorbed=True)
absorption = glue.value(
    "absorption",
    {
        "output_difference": (y_absorbed - y_naive).abs().max(),
        "weights_difference": (w_absorbed - w_naive).abs().max(),
        "output_scale": y_naive.abs().max(),
        "numpy_difference": np.abs(y_numpy - y_naive.detach().numpy()).max(),
    },
)

# %% [markdown]
# ## The absorbed form is multi-query attention
#
# Every head's absorbed query, $[q_C W_{UK};\ q_R]$, is $d_c + d_R$
# wide; there is one key head $[c;\ k_R]$ and one value head $c$ for
# all of them. PyTorch's `scaled_dot_product_attention` with
# `enable_gqa=True` (one key/value head for 4 query heads), then
# $W_{UV}$ and $W_O$, gives the naive output with `scale=module.scale`,
# and another one with SDPA's default scale $1/\sqrt{d_c + d_R}$.

# %%
positions = torch.arange(T)
q_nope, q_rope = module.queries(x, positions)  # (1, H, T, .)
c_kv, k_rope = module.latents(x, positions)  # (1, T, .)
w_uk, w_uv = module.up_projections()  # (H, d_nope | d_v, d_c)
q_mqa = torch.cat([q_nope @ w_uk, q_rope], dim=-1)  # (1, H, T, d_c + d_R)
k_mqa = torch.cat([c_kv, k_rope], dim=-1)[:, None]  # (1, 1, T, d_c + d_R)
v_mqa = c_kv[:, None]  # (1, 1, T, d_c): one value head


def mqa(scale=None):
    """y of the absorbed form, its attention run by SDPA as MQA."""
    out = F.scaled_dot_product_attention(
        q_mqa,
        k_mqa,
        v_mqa,
        attn_mask=~causal,  # SDPA's boolean mask: True = allowed
        scale=scale,
        enable_gqa=True,
    )  # (1, H, T, d_c)
    return module.output(out @ w_uv.transpose(-2, -1))  # (1, T, d_model)


with torch.no_grad():
    mqa_check = glue.value(
        "mqa",
        {
            "width": q_mqa.shape[-1],
            "module_scale": (mqa(module.scale) - y_naive).abs().max(),
            "default_scale": (mqa() - y_naive).abs().max(),
        },
    )
print(mqa_check)

# %% [markdown]
# ## Why RoPE on the content keys would forbid it
#
# Suppose RoPE turned the per-head keys $k_C = W_{UK} c$ themselves. The
# exact score turns every key at its own position; folding $W_{UK}$
# into the query once per query can only use the query's position.
# Both tries at folding differ from the exact score; only the key at
# position 0, where the rotation is the identity, comes out right.

#
# Only the pairs a causal decoder scores count: key position $s \le t$.

# %%
exact, as_cached, turned = latent_torch.rope_on_the_content_keys(
    module, x, positions
)


def on_causal_pairs(scores):
    """|scores| with the pairs s > t set to 0: (B, H, T, T)."""
    return scores.abs().masked_fill(causal, 0.0)


missed = on_causal_pairs(as_cached - exact)  # (B, H, T, T)
per_key = missed.amax(dim=(0, 1, 2))  # (Tk,): worst over t >= s
later = ~causal[:, 1:].expand_as(missed[..., 1:])  # pairs, s >= 1


def later_keys(scores):
    """|scores| of the causal pairs with key position s >= 1."""
    return scores[..., 1:].abs()[later]


rope_try = glue.value(
    "rope_try",
    {
        "as_cached": per_key.max(),
        "turned": on_causal_pairs(turned - exact).max(),
        "score_scale": on_causal_pairs(exact).max(),
        "key_zero": per_key[0],
        "other_keys_least": per_key[1:].min(),
        "later_keys_median": later_keys(as_cached - exact).median(),
        # the typical miss against the typical score, same pairs
        "later_exact_median": later_keys(exact).median(),
        "later_relative": later_keys(as_cached - exact).median()
        / later_keys(exact).median(),
        "per_key": per_key,
    },
)

# %% [markdown]
# ## Decoding with the latent cache
#
# Prefill 3 tokens, then one at a time, and in chunks of 2: the cached
# outputs equal the full causal pass in both forms. The cache holds one
# latent and one rotated key per token; the bytes are read from its
# tensors, and from a `kv_cache.KVCache` holding the same layer's
# expanded per-head keys and values, as multi-head attention caches.

# %%
full, _ = module(x, causal)
decode = {}
for name, chunks in (
    ("prefill_3_then_1", [3, 1, 1, 1, 1, 1]),
    ("pairs", [2] * 4),
):
    for absorbed in (False, True):
        cached = latent_torch.cached_latent_forward(
            module, x, chunks, absorbed
        )
        form = "absorbed" if absorbed else "naive"
        decode[f"{name}_{form}"] = (cached - full).abs().max()
cache = latent_torch.LatentCache()
for t in range(T):
    latent_torch.cached_latent_step(module, cache, x[:, t : t + 1])
expanded = kv_cache.KVCache()
expanded.append(*module.expand_kv(cache.latent, cache.rope_key))
decode["largest"] = max(decode.values())
decode["latent_shape"] = list(cache.latent.shape)
decode["rope_key_shape"] = list(cache.rope_key.shape)
decode["latent_bytes"] = latent_torch.cache_bytes_per_token(cache)
decode["expanded_bytes"] = latent_torch.cache_bytes_per_token(expanded)
glue.value("decode", decode)
print(decode)

# %% [markdown]
# ## The cache per token of published models
#
# Per token and layer MLA caches $d_c + d_R$ numbers, whatever the
# number of heads. Bytes per token in 16-bit values (bfloat16), every
# layer, each measured from a cache after a short decode: DeepSeek-V3's
# latent cache (`latent_cache_bytes_per_token`, a module with its
# `kv_lora_rank` and `qk_rope_head_dim`); multi-head attention as the
# DeepSeek-V2 paper counts it, $2 n_h d_h$ (a `KVCache` of 128 heads of
# 128); the naive form's expanded keys and values kept as they are,
# the shared rotary key copied into every head
# (`expanded_kv_bytes_per_token`); multi-head attention of
# DeepSeek-V3's width (128 heads of 56); and Llama 3 70B's eight
# key/value heads of 128 (a `kv_cache.KVCache` after a decode step of
# `torch_ref.MultiHeadAttention` with 8 heads of 128: its 64 query
# heads cache nothing more).

# %%
V3, v3_layers = latent_torch.DEEPSEEK_V3, latent_torch.DEEPSEEK_V3_LAYERS
glue.value("v3", {**V3, "n_layer": v3_layers})
# Llama 3 70B: d_model 8192, 64 query heads of 128, 8 key/value heads
llama = glue.value(
    "llama", {"n_head": 64, "n_kv_head": 8, "d_head": 128, "n_layer": 80}
)
bf16 = torch.bfloat16


def gqa_bytes_per_token(n_kv_head, d_head):
    """A KVCache after two decode steps of torch_ref's module."""
    probe = torch_ref.MultiHeadAttention(
        n_kv_head * d_head, n_kv_head, dtype=bf16
    )
    cache = kv_cache.KVCache()
    step = torch.ones(1, 1, n_kv_head * d_head, dtype=bf16)
    for _ in range(2):
        kv_cache.cached_step(probe, cache, step)
    return latent_torch.cache_bytes_per_token(cache)


def mha_bytes_per_token(n_head, d_head):
    """A KVCache holding two tokens' K and V, (1, H, 2, d_head) each."""
    cache = kv_cache.KVCache()
    k = torch.zeros(1, n_head, 2, d_head, dtype=bf16)
    cache.append(k, torch.zeros_like(k))
    return latent_torch.cache_bytes_per_token(cache)


d_h = V3["v_head_dim"]  # the paper's per-head width d_h (= d_nope here)
d_narrow = V3["d_model"] // V3["n_head"]  # 56: heads of MHA, same width
rows = {
    "mla": (
        "DeepSeek-V3, MLA",
        f"{V3['kv_lora_rank']} + {V3['qk_rope_head_dim']}",
        v3_layers,
        latent_torch.latent_cache_bytes_per_token(V3),
    ),
    "mha": (
        f"MHA, heads of {d_h}",
        f"{V3['n_head']} x ({d_h} + {d_h})",
        v3_layers,
        mha_bytes_per_token(V3["n_head"], d_h),
    ),
    "expanded": (
        "naive K, V kept",
        f"{V3['n_head']} x ({V3['qk_nope_head_dim'] + V3['qk_rope_head_dim']}"
        f" + {V3['v_head_dim']})",
        v3_layers,
        latent_torch.expanded_kv_bytes_per_token(V3),
    ),
    "mha_narrow": (
        f"MHA, heads of {d_narrow}",
        f"{V3['n_head']} x ({d_narrow} + {d_narrow})",
        v3_layers,
        mha_bytes_per_token(V3["n_head"], d_narrow),
    ),
    "llama": (
        "Llama 3 70B, GQA",
        f"{llama['n_kv_head']} x ({llama['d_head']} + {llama['d_head']})",
        llama["n_layer"],
        gqa_bytes_per_token(llama["n_kv_head"], llama["d_head"]),
    ),
}
cache_rows = {}
for key, (name, attention, layers, per_layer) in rows.items():
    cache_rows[key] = {
        "name": name,
        "attention": attention,
        "layers": layers,
        "per_layer": per_layer,
        "values_per_layer": per_layer // 2,  # bfloat16: 2 bytes
        "per_token": per_layer * layers,
    }
mla = cache_rows["mla"]["per_token"]
for row in cache_rows.values():
    row["times_mla"] = row["per_token"] / mla
cache_rows = glue.value("published", cache_rows)
context = glue.value("context", 32768)  # tokens, one sequence
# the same heads with their own content keys and values and one rotary
# key shared by all: what MLA's heads would cache without the latent
own = V3["n_head"] * (V3["qk_nope_head_dim"] + V3["v_head_dim"])
own += V3["qk_rope_head_dim"]
glue.value(
    "cache_counts",
    {
        "d_h": d_h,
        "own_values": own,
        "own_times_mla": own / cache_rows["mla"]["values_per_layer"],
        # DeepSeek-V2, Table 1: (d_c + d_R) l = GQA with n_g groups,
        # 2 n_g d_h l, so n_g = (d_c + d_R) / (2 d_h)
        "gqa_groups": (V3["kv_lora_rank"] + V3["qk_rope_head_dim"])
        / (2 * d_h),
    },
)
glue.table(
    "latent-cache",
    ["model (layers)", "values per layer", "KiB per token", "x MLA"],
    [
        [
            f"{r['name']} ({r['layers']})",
            f"{r['attention']} = {r['values_per_layer']:,}",
            f"{r['per_token'] / 1024:,.1f}",
            f"{r['times_mla']:.1f}",
        ]
        for r in cache_rows.values()
    ],
    "llrr",
)


# The comparison points: a mid grey that keeps 3:1 contrast (WCAG's
# bar for graphics) on each scheme's page background (Material's white
# and its slate, hsl(232, 15%, 14%)); theme.masked, a fill, does not.
PAGE_BACKGROUND = {"light": "#ffffff", "dark": "#1e2129"}
COMPARISON_GREY = {"light": "#767676", "dark": "#959aa6"}


def contrast(colour, background):
    """WCAG contrast ratio of two '#rrggbb' colours, 1 to 21."""

    def luminance(hex_colour):
        rgb = [int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        lin = [
            c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
            for c in rgb
        ]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((luminance(colour), luminance(background)))[::-1]
    return (hi + 0.05) / (lo + 0.05)


grey_contrast = {
    scheme: contrast(grey, PAGE_BACKGROUND[scheme])
    for scheme, grey in COMPARISON_GREY.items()
}
if min(grey_contrast.values()) < 3:
    raise ValueError(f"comparison grey below 3:1: {grey_contrast}")
glue.value("grey_contrast", grey_contrast)


def draw_cache(fig, theme):
    # points, not bars, on the log axis: a bar's length there would
    # depend on where the axis starts; the ratios are the distances
    ax = fig.subplots()
    shown = list(cache_rows.values())
    kib = [r["per_token"] / 1024 for r in shown]
    shipped = {"mla": theme.series[0], "llama": theme.series[1]}
    grey = COMPARISON_GREY[theme.name]
    colours = [shipped.get(key, grey) for key in cache_rows]
    rows = range(len(shown))
    ax.scatter(kib, rows, color=colours, s=60, zorder=3)
    ax.set_yticks(rows, [r["name"] for r in shown])
    ax.set_ylim(len(shown) - 0.5, -0.5)  # the table's order, top down
    ax.set_xscale("log")
    for i, value in enumerate(kib):
        ax.annotate(
            f"{value:,.1f}",
            (value, i),
            xytext=(7, 0),
            textcoords="offset points",
            va="center",
            fontsize=8,
        )
    ax.set_xlabel("KiB per token, all layers (log)", fontsize=9)
    ax.tick_params(labelsize=8)
    ax.set_xlim(min(kib) / 2, max(kib) * 8)
    ax.grid(axis="both", which="major", alpha=0.4)
    ax.set_axisbelow(True)


glue.figure(
    "latent-cache-bytes",
    draw_cache,
    figsize=(3.7, 2.4),  # 355 px: whole in a phone's column
    alt="Points on a logarithmic axis, cache kibibytes per token over "
    "all layers in bfloat16: "
    + "; ".join(
        f"{r['name']} ({r['attention']}): {r['per_token'] / 1024:,.1f}"
        for r in cache_rows.values()
    )
    + ". DeepSeek-V3 and Llama 3 70B are coloured; the other three, "
    "constructed for comparison, are grey.",
)

# %% [markdown]
# ## DeepSeek-V2 against DeepSeek 67B
#
# The DeepSeek-V2 paper's 93.3% smaller KV cache than DeepSeek 67B
# counts V2's cache quantized to about 6 bits a value (its §3.2.3).
# With V2's 60 layers of 512 + 64 and 67B's 95 layers of 8 key/value
# heads of 128 (DeepSeek LLM, Table 2), both measured in 16 bits:

# %%
V2 = {**V3, "d_model": 5120}  # the attention shapes of V3 but d_model
# DeepSeek LLM 67B (DeepSeek LLM, Table 2): 95 layers, 8 K/V heads of 128
v2_layers, d67_layers, d67_kv_heads, d67_head = 60, 95, 8, 128
v2_token = latent_torch.latent_cache_bytes_per_token(V2) * v2_layers
d67_token = gqa_bytes_per_token(d67_kv_heads, d67_head) * d67_layers
glue.value(
    "v2_vs_67b",
    {
        "v2_layers": v2_layers,
        "d67_layers": d67_layers,
        "d67_kv_heads": d67_kv_heads,
        "d67_head": d67_head,
        "v2_values": v2_token // 2,
        "d67_values": d67_token // 2,
        "smaller_16_bit": 1 - v2_token / d67_token,
        "smaller_6_bit": 1 - v2_token * 6 / 16 / d67_token,
    },
)

# %% [markdown]
# ## FLOPs of one decoding step
#
# `decode_step_flops` counts the matrix products of one step from the
# module's shapes (a unit test holds it to PyTorch's `FlopCounterMode`
# on real steps); here it is evaluated for DeepSeek-V3's shapes with
# 4,096 positions. "Cached K and V" is the naive form with the
# expanded keys and values kept instead of recomputed: only the new
# token is expanded. The crossover is the smallest number of positions
# at which the absorbed step needs fewer FLOPs than the naive one.

# %%
v3_key = glue.value("v3_n_key", 4096)
parts = {
    form: latent_torch.decode_step_flops(V3, v3_key, form == "absorbed")
    for form in ("naive", "absorbed")
}
one_token = latent_torch.decode_step_flops(V3, 1)["up_projections"]
parts["cached_kv"] = {**parts["naive"], "up_projections": one_token}
totals = {form: sum(p.values()) for form, p in parts.items()}
per_key = {  # FLOPs each cached position adds to a step
    form: sum(
        latent_torch.decode_step_flops(V3, 2, form == "absorbed").values()
    )
    - sum(latent_torch.decode_step_flops(V3, 1, form == "absorbed").values())
    for form in ("naive", "absorbed")
}
per_key["cached_kv"] = parts["cached_kv"]["scores"] // v3_key + (
    parts["cached_kv"]["weighted_sum"] // v3_key
)
bytes_per_key = {
    "absorbed": cache_rows["mla"]["per_layer"],
    "cached_kv": cache_rows["expanded"]["per_layer"],
}
flops = glue.value(
    "flops",
    {
        "parts": parts,
        "totals": totals,
        "per_key": per_key,
        "naive_over_absorbed": totals["naive"] / totals["absorbed"],
        "absorbed_over_cached": per_key["absorbed"] / per_key["cached_kv"],
        "flops_per_byte": {
            f: per_key[f] / bytes_per_key[f] for f in bytes_per_key
        },
        "crossover": next(
            n
            for n in range(1, 100)
            if sum(latent_torch.decode_step_flops(V3, n, True).values())
            < sum(latent_torch.decode_step_flops(V3, n).values())
        ),
    },
)
# the up-projections are different products in each form: their own rows
expand, absorb = "up_projections", "absorb"
for form in parts:
    parts[form] = dict(parts[form])
    parts[form][absorb] = parts[form].pop(expand) if form == "absorbed" else 0
    parts[form].setdefault(expand, 0)
labels = {
    "queries": "queries",
    "latents": "latent, shared key",
    expand: "expand to K, V",
    absorb: "absorb",
    "scores": "scores",
    "weighted_sum": "weighted sum",
    "output": "output",
}


def mflop(n):
    return f"{n / 1e6:,.1f}" if n else "–"


glue.table(
    "latent-flops",
    ["MFLOP", "naive", "absorbed", "kept K, V"],
    [
        [label] + [mflop(parts[f][part]) for f in parts]
        for part, label in labels.items()
    ]
    + [["total"] + [mflop(totals[f]) for f in parts]],
    "lrrr",
)
print(totals)
# absorption at run time, not merged into the weights: the products
# W_UQ^T W_UK and W_O W_UV would be matrices of every head's d_c
h, d_c, d_nope = V3["n_head"], V3["kv_lora_rank"], V3["qk_nope_head_dim"]
glue.value(
    "merged",
    {
        "query_merged": V3["q_lora_rank"] * h * d_c,
        "query_separate": V3["q_lora_rank"] * h * d_nope + h * d_nope * d_c,
        "output_merged": V3["d_model"] * h * d_c,
        "output_separate": V3["d_model"] * h * V3["v_head_dim"]
        + h * V3["v_head_dim"] * d_c,
    },
)

# %% [markdown]
# ## Which side of the ridge, on which GPU
#
# The absorbed attention does `per_key["absorbed"]` FLOPs for each
# cached latent it reads (576 values, 2 bytes each in bfloat16) per
# query token; a step that scores two query tokens against the cache
# (a drafted token verified with the next one) does twice that on the
# same bytes. The ridge points come from `cost.GPU_SPECS`, the
# datasheets' dense bfloat16 peak over the HBM bandwidth.

# %%
QUERIES = (1, 2)  # query tokens per step that read the same cache
gpu_ridges = {
    name: spec["bf16_sparse_tflops"] / 2 / spec["hbm_tbps"]  # FLOP/byte
    for name, spec in cost.GPU_SPECS.items()
}
per_byte = flops["flops_per_byte"]
roof_rows = {
    name: {
        "ridge": ridge,
        "absorbed": {
            q: "compute" if q * per_byte["absorbed"] > ridge else "memory"
            for q in QUERIES
        },
    }
    for name, ridge in gpu_ridges.items()
}
glue.value(
    "roof",
    {
        "gpus": roof_rows,
        "ridge": gpu_ridges,
        # per byte, with one and with two query tokens per step
        "absorbed": [q * per_byte["absorbed"] for q in QUERIES],
        "cached_kv": [q * per_byte["cached_kv"] for q in QUERIES],
        "sources": {n: s["source"] for n, s in cost.GPU_SPECS.items()},
        "urls": {n: s["url"] for n, s in cost.GPU_SPECS.items()},
    },
)
glue.table(
    "latent-ridges",
    [
        "GPU",
        "ridge (FLOP / byte)",
        f"absorbed, 1 query ({per_byte['absorbed']:.1f})",
        f"absorbed, 2 queries ({2 * per_byte['absorbed']:.1f})",
    ],
    [
        [name, f"{row['ridge']:.0f}"]
        + [f"bound by {row['absorbed'][q]}" for q in QUERIES]
        for name, row in roof_rows.items()
    ],
    "lrll",
)

# %% [markdown]
# ## Expanded for prefill, absorbed for decoding
#
# A chunk of $q$ query tokens against $n$ positions. Expanded, the
# latents are turned into every head's keys and values once, for all
# $q$ queries; absorbed, each query pays for its own $W^{UK}_i$ and
# $W^{UV}_i$ products and every query-position pair costs more. Both
# from `decode_step_flops` (one query's parts), the projections that
# both forms share left out. Without the causal mask every query scores
# all n positions; with it, a chunk at the end of the n positions
# scores only the pairs s <= t, but the expanded form still expands all
# n latents, so the mask helps the two forms unequally.


# %%
def chunk_flops(q, n, absorbed, causal=False):
    """Attention FLOPs of q queries over n positions, one layer; with
    ``causal``, the q queries are the last q of the n positions."""
    parts = latent_torch.decode_step_flops(V3, n, absorbed)
    # query j of the chunk scores n - q + j + 1 positions under the mask
    scored = q * (n - q) + q * (q + 1) // 2 if causal else q * n
    per_pair = (parts["scores"] + parts["weighted_sum"]) // n
    up = parts["up_projections"]  # once per chunk, or per query
    return scored * per_pair + (q * up if absorbed else up)


def forms_at(n, causal):
    """The fewest queries for which expanding pays, and the ratio
    absorbed over expanded for a prefill of all n positions."""
    cheaper_from = next(
        q
        for q in range(1, n + 1)
        if chunk_flops(q, n, False, causal) <= chunk_flops(q, n, True, causal)
    )
    prefill = chunk_flops(n, n, True, causal) / chunk_flops(
        n, n, False, causal
    )
    return {"cheaper_from": cheaper_from, "prefill": prefill}


PREFILL_N = 4096
glue.value(
    "forms",
    {
        "n": PREFILL_N,
        "unmasked": forms_at(PREFILL_N, causal=False),
        "causal": forms_at(PREFILL_N, causal=True),
    },
)

# %% [markdown]
# ## The data flow
#
# What a token's hidden state becomes, with DeepSeek-V3's widths: the
# three down-projections, then each head's up-projections. Only the
# latent $c^{KV}$ and the shared rotary key $k^R$ are cached.

# %%
FLOW_BOXES = {  # name: (x, y, label, its width); top to bottom
    "h": (5.0, 12.0, "$h_t$", f"{V3['d_model']:,}"),
    "cq": (1.45, 8.2, "$c^{Q}_t$", f"{V3['q_lora_rank']:,}"),
    "ckv": (5.0, 8.2, "$c^{KV}_t$", f"{V3['kv_lora_rank']}"),
    "kr": (8.3, 8.2, "$k^{R}_t$", f"{V3['qk_rope_head_dim']}"),
    "q": (1.45, 4.2, "$q^{C}_{t,i}$, $q^{R}_{t,i}$", "query"),
    # k^C on the right, where the shared rotary key joins it
    "kv": (6.0, 4.2, "$v_{t,i}$, $k^{C}_{t,i}$", "value, key"),
}
FLOW_ARROWS = [  # from, to, label, its side, how far down the arrow
    ("h", "cq", "$W^{DQ}$", "left", 0.5),
    ("h", "ckv", "$W^{DKV}$", "right", 0.62),
    ("h", "kr", "$W^{KR}$, RoPE", "right", 0.4),
    ("cq", "q", "$W^{UQ}_i$\n$W^{QR}_i$, RoPE", "right", 0.5),
    ("ckv", "kv", "$W^{UK}_i$\n$W^{UV}_i$", "left", 0.58),
]
CACHED = ("ckv", "kr")
cached_width = V3["kv_lora_rank"] + V3["qk_rope_head_dim"]  # per token
BOX_H = 1.5  # data units; widths per row
BOX_W = {"h": 3.0, "cq": 3.0, "ckv": 2.8, "kr": 2.8, "q": 3.1, "kv": 3.1}
SMALL = 11  # points: a width, an arrow's matrices


def flow_box(ax, theme, key, x, y, cached=False, edge=None):
    from matplotlib.patches import FancyBboxPatch

    w = BOX_W[key]
    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2, y - BOX_H / 2),
            w,
            BOX_H,
            boxstyle="round,pad=0.05",
            facecolor=theme.series[0] if cached else "none",
            alpha=0.3 if cached else 1.0,
            edgecolor=edge or (theme.series[0] if cached else theme.text),
            linewidth=2.0 if cached else 1.2,
        )
    )


def draw_flow(fig, theme):
    from matplotlib.patches import FancyBboxPatch

    ax = fig.subplots()
    ax.set_xlim(-0.25, 10.2)
    ax.set_ylim(0.6, 13.0)
    ax.set_axis_off()
    for key, (x, y, label, note) in FLOW_BOXES.items():
        if key in ("q", "kv"):  # stacked copies behind: one per head
            for shift in (0.3, 0.15):
                flow_box(
                    ax, theme, key, x + shift, y + shift, edge=theme.muted
                )
        flow_box(ax, theme, key, x, y, cached=key in CACHED)
        ax.text(x, y + 0.3, label, ha="center", va="center", fontsize=13)
        ax.text(x, y - 0.4, note, ha="center", va="center", fontsize=SMALL)
    arrow = {"arrowstyle": "->", "color": theme.text, "lw": 1.3}
    for start, end, label, side, down in FLOW_ARROWS:
        (x0, y0, *_), (x1, y1, *_) = FLOW_BOXES[start], FLOW_BOXES[end]
        tail = (x0 + 0.3 * (x1 - x0) / 3.4, y0 - BOX_H / 2 - 0.1)
        head = (x1, y1 + BOX_H / 2 + 0.15)
        ax.annotate("", xy=head, xytext=tail, arrowprops=arrow)
        mid = [a + down * (b - a) for a, b in zip(tail, head, strict=True)]
        ax.text(
            mid[0] + (-0.25 if side == "left" else 0.25),
            mid[1],
            label,
            ha="right" if side == "left" else "left",
            va="center",
            fontsize=SMALL,
        )
    # the shared rotary key joins every head's content key k^C (a solid
    # arrow: dashes mean only "cached", the frame below)
    (x0, y0, *_), (x1, y1, *_) = FLOW_BOXES["kr"], FLOW_BOXES["kv"]
    ax.annotate(
        "",
        xy=(x1 + BOX_W["kv"] / 2 + 0.12, y1 + 0.3),  # beside k^C's label
        xytext=(x0, y0 - BOX_H / 2 - 0.45),
        arrowprops={
            **arrow,
            "connectionstyle": "angle,angleA=90,angleB=0,rad=0",
        },
    )
    ax.text(
        x0 - 0.2,
        6.1,
        "joins every\nhead's $k^{C}$",
        fontsize=SMALL,
        ha="right",
        va="center",
    )
    ax.text(
        3.8,
        2.7,
        "one per head $i$",
        ha="center",
        va="center",
        fontsize=SMALL,
    )
    # the cache: a dashed frame around what a decoder keeps
    left, right = 5.0 - BOX_W["ckv"] / 2, 8.4 + BOX_W["kr"] / 2
    ax.add_patch(
        FancyBboxPatch(
            (left - 0.2, 8.2 - BOX_H / 2 - 0.25),
            right - left + 0.4,
            BOX_H + 0.5,
            boxstyle="round,pad=0.05",
            facecolor="none",
            edgecolor=theme.series[1],
            linestyle="--",
            linewidth=1.8,
        )
    )
    ax.text(
        5.0,
        1.2,
        f"dashed frame: cached, {cached_width} per token",
        ha="center",
        va="center",
        fontsize=SMALL,
        color=theme.series[1],
        fontweight="bold",
    )


glue.figure(
    "latent-flow",
    draw_flow,
    figsize=(3.7, 4.6),
    alt=(
        "The data flow of multi-head latent attention with DeepSeek-V3's "
        f"widths. The hidden state h_t ({V3['d_model']:,} numbers) goes "
        "through three down-projections: W^DQ to the query latent c^Q "
        f"({V3['q_lora_rank']:,}), W^DKV to the key-value latent c^KV "
        f"({V3['kv_lora_rank']}) and W^KR with RoPE to the shared rotary "
        f"key k^R ({V3['qk_rope_head_dim']}). Per head, W^UQ and W^QR "
        "(then RoPE) turn c^Q into the query's content and rotary parts, "
        "and W^UK and W^UV turn c^KV into the head's value and content "
        "key k^C; k^R joins every head's k^C to make its key. A dashed "
        "frame marks c^KV and k^R as "
        f"the only cached parts, {cached_width} numbers per token."
    ),
)

# %% [markdown]
# ## The scale, and YaRN's
#
# The softmax scale is $1/\sqrt{d_{nope} + d_{rope}}$, the number of
# products in $q \cdot k$, in both forms: the absorbed form computes
# the same scores through 576 numbers per key, not other ones.
# DeepSeek-V3 extends its context with YaRN (factor 40, `mscale_all_dim`
# 1.0 in its published `rope_scaling`): Hugging Face's
# `yarn_apply_mscale` multiplies the scale by `yarn_get_mscale(40, 1.0)`
# squared, and YaRN changes the rotary frequencies too. Pair $j$ of
# $d_R / 2$ turns $L / \lambda_j$ times over the trained context
# $L$ = 4,096 ($\lambda_j = 2\pi \cdot 10000^{2j/d_R}$, its wavelength):
# more than `beta_fast` = 32 turns, its frequency is kept; fewer than
# `beta_slow` = 1, it is divided by the factor; in between, blended.

# %%
d_qk = V3["qk_nope_head_dim"] + V3["qk_rope_head_dim"]
# DeepSeek-V3's published rope_scaling (config.json): YaRN
yarn = glue.value(
    "yarn",
    {
        "factor": 40.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32,
        "beta_slow": 1,
    },
)
mscale = latent_torch.yarn_mscale(yarn["factor"], yarn["mscale_all_dim"])
glue.value(
    "scale",
    {
        "d_qk": d_qk,
        "d_absorbed": V3["kv_lora_rank"] + V3["qk_rope_head_dim"],
        "scale": d_qk**-0.5,
        "wrong_v": V3["v_head_dim"] ** -0.5,
        "wrong_absorbed": (V3["kv_lora_rank"] + V3["qk_rope_head_dim"])
        ** -0.5,
        "mscale": mscale,
        "factor": mscale**2,
        "yarn_scale": d_qk**-0.5 * mscale**2,
    },
)
pair = np.arange(V3["qk_rope_head_dim"] // 2)  # j = 0 .. d_R / 2 - 1
wavelength = 2 * np.pi * 10000.0 ** (2 * pair / V3["qk_rope_head_dim"])
turns = yarn["original_max_position_embeddings"] / wavelength
kept, divided = turns > yarn["beta_fast"], turns < yarn["beta_slow"]
yarn_pairs = glue.value(
    "yarn_pairs",
    {
        "pairs": len(pair),
        "kept": kept.sum(),
        "divided": divided.sum(),
        "blended": (~kept & ~divided).sum(),
    },
)
with torch.device("meta"):  # shapes only: no memory for 187M weights
    v3_layer = latent_torch.MultiHeadLatentAttention(**V3)
glue.value(
    "v3_params",
    {
        "per_layer": sum(p.numel() for p in v3_layer.parameters()),
        "shapes": {n: list(p.shape) for n, p in v3_layer.named_parameters()},
    },
)
symbols = {
    "q_a_proj.weight": "$W^{DQ}$",
    "q_a_layernorm.weight": "gain of $c^Q$",
    "q_b_proj.weight": "$W^{UQ}_i$, $W^{QR}_i$",
    "kv_a_proj_with_mqa.weight": "$W^{DKV}$, $W^{KR}$",
    "kv_a_layernorm.weight": "gain of $c^{KV}$",
    "kv_b_proj.weight": "$W^{UK}_i$, $W^{UV}_i$",
    "o_proj.weight": "$W^O$",
}
glue.table(
    "latent-v3-weights",
    ["weight", "paper", "shape"],
    [
        [
            f"`{name.removesuffix('.weight')}`",
            symbols[name],
            " x ".join(str(n) for n in p.shape),
        ]
        for name, p in v3_layer.named_parameters()
    ],
    "llr",
)
glue.value(
    "tolerances",
    {
        "float64": tolerances.atol(torch.float64),
        "float32": tolerances.atol(torch.float32),
    },
)
