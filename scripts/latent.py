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

import glue
from mha_ref import kv_cache, latent_numpy, latent_torch, tolerances, torch_ref

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
print(absorption)

# %% [markdown]
# ## Why RoPE on the content keys would forbid it
#
# Suppose RoPE turned the per-head keys $k_C = W_{UK} c$ themselves. The
# exact score turns every key at its own position; folding $W_{UK}$
# into the query once per query can only use the query's position.
# Both tries at folding differ from the exact score; only the key at
# position 0, where the rotation is the identity, comes out right.

# %%
positions = torch.arange(T)
exact, as_cached, turned = latent_torch.rope_on_the_content_keys(
    module, x, positions
)
per_key = (as_cached - exact).abs().amax(dim=(0, 1, 2))  # (Tk,)
rope_try = glue.value(
    "rope_try",
    {
        "as_cached": (as_cached - exact).abs().max(),
        "turned": (turned - exact).abs().max(),
        "score_scale": exact.abs().max(),
        "key_zero": per_key[0],
        "other_keys_least": per_key[1:].min(),
        "per_key": per_key,
    },
)
print(rope_try)

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
# Bytes per token in 16-bit values (bfloat16), every layer, each
# measured from a cache after a short decode: DeepSeek-V3's latent
# cache (`latent_cache_bytes_per_token`, a module with its
# `kv_lora_rank` and `qk_rope_head_dim`), the same heads caching their
# own keys and values (`expanded_kv_bytes_per_token`), Llama 3 70B's
# eight key/value heads of 128 (a `kv_cache.KVCache` after a decode
# step of `torch_ref.MultiHeadAttention` with 8 heads of 128: its 64
# query heads cache nothing more), and plain multi-head attention of
# DeepSeek-V3's width (128 heads of 56: keys and values of that shape
# in a `KVCache`).

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


published = [
    {
        "name": "DeepSeek-V3 (MLA)",
        "attention": f"{V3['kv_lora_rank']} + {V3['qk_rope_head_dim']}",
        "layers": v3_layers,
        "per_layer": latent_torch.latent_cache_bytes_per_token(V3),
    },
    {
        "name": "V3 heads, own K and V",
        "attention": f"{V3['n_head']} x "
        f"({V3['qk_nope_head_dim'] + V3['qk_rope_head_dim']} + "
        f"{V3['v_head_dim']})",
        "layers": v3_layers,
        "per_layer": latent_torch.expanded_kv_bytes_per_token(V3),
    },
    {
        "name": f"MHA, width {V3['d_model']}",
        "attention": f"{V3['n_head']} x ({V3['d_model'] // V3['n_head']}"
        f" + {V3['d_model'] // V3['n_head']})",
        "layers": v3_layers,
        "per_layer": mha_bytes_per_token(
            V3["n_head"], V3["d_model"] // V3["n_head"]
        ),
    },
    {
        "name": "Llama 3 70B (GQA)",
        "attention": f"{llama['n_kv_head']} x ({llama['d_head']} + "
        f"{llama['d_head']})",
        "layers": llama["n_layer"],
        "per_layer": gqa_bytes_per_token(llama["n_kv_head"], llama["d_head"]),
    },
]
for row in published:
    row["values_per_layer"] = row["per_layer"] // 2  # bfloat16: 2 bytes
    row["per_token"] = row["per_layer"] * row["layers"]
mla = published[0]["per_token"]
for row in published:
    row["times_mla"] = row["per_token"] / mla
published = glue.value("published", published)
context = glue.value("context", 32768)  # tokens, one sequence
glue.table(
    "latent-cache",
    [
        "model",
        "values per token and layer",
        "layers",
        "KiB per token",
        f"GiB, {context:,} tokens",
        "x MLA",
    ],
    [
        [
            r["name"],
            f"{r['attention']} = {r['values_per_layer']:,}",
            str(r["layers"]),
            f"{r['per_token'] / 1024:,.1f}",
            f"{r['per_token'] * context / 2**30:,.2f}",
            f"{r['times_mla']:.1f}",
        ]
        for r in published
    ],
    "llrrrr",
)


def draw_cache(fig, theme):
    ax = fig.subplots()
    names = [r["name"] for r in published]
    kib = [r["per_token"] / 1024 for r in published]
    colours = [theme.series[0], theme.masked, theme.masked, theme.series[1]]
    ax.barh(range(len(names)), kib, color=colours, height=0.6)
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    for i, value in enumerate(kib):
        ax.text(value, i, f" {value:,.0f}", va="center", fontsize=9)
    ax.set_xlabel("cache per token, all layers (KiB, bfloat16)")
    ax.set_xlim(0, max(kib) * 1.18)
    ax.grid(axis="x", alpha=0.4)
    ax.set_axisbelow(True)


glue.figure(
    "latent-cache-bytes",
    draw_cache,
    figsize=(5.6, 2.6),
    alt="Horizontal bars of cache kibibytes per token, all layers, "
    "bfloat16: "
    + "; ".join(
        f"{r['name']} ({r['attention']}): {r['per_token'] / 1024:,.0f}"
        for r in published
    )
    + ".",
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
    "absorbed": published[0]["per_layer"],
    "cached_kv": published[1]["per_layer"],
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
labels = {
    "queries": "queries: $W^{DQ}$, $W^{UQ}$, $W^{QR}$",
    "latents": "latent and shared key: $W^{DKV}$, $W^{KR}$",
    "up_projections": "up-projections: $W^{UK}$, $W^{UV}$",
    "scores": "scores",
    "weighted_sum": "weighted sum",
    "output": "output: $W^O$",
}
glue.table(
    "latent-flops",
    ["part", "naive (MFLOP)", "absorbed (MFLOP)", "cached K and V (MFLOP)"],
    [
        [label]
        + [
            f"{parts[f][part] / 1e6:,.1f}"
            for f in ("naive", "absorbed", "cached_kv")
        ]
        for part, label in labels.items()
    ]
    + [
        ["total"]
        + [
            f"{totals[f] / 1e6:,.1f}"
            for f in ("naive", "absorbed", "cached_kv")
        ]
    ],
    "lrrr",
)
print(totals)

# %% [markdown]
# ## The scale, and YaRN's
#
# The softmax scale is $1/\sqrt{d_{nope} + d_{rope}}$, the number of
# products in $q \cdot k$, in both forms: the absorbed form computes
# the same scores through 576 numbers per key, not other ones. DeepSeek-V3
# extends its context with YaRN (factor 40, `mscale_all_dim` 1.0 in
# its published `rope_scaling`), and Hugging Face's `yarn_apply_mscale`
# multiplies the scale by `yarn_get_mscale(40, 1.0)` squared.

# %%
d_qk = V3["qk_nope_head_dim"] + V3["qk_rope_head_dim"]
# DeepSeek-V3's published rope_scaling (config.json): YaRN
yarn = glue.value("yarn", {"factor": 40.0, "mscale_all_dim": 1.0})
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
    "q_a_layernorm.weight": "RMS norm gain of $c^Q$",
    "q_b_proj.weight": "$W^{UQ}_i$ and $W^{QR}_i$, head by head",
    "kv_a_proj_with_mqa.weight": "$W^{DKV}$, then $W^{KR}$",
    "kv_a_layernorm.weight": "RMS norm gain of $c^{KV}$",
    "kv_b_proj.weight": "$W^{UK}_i$ and $W^{UV}_i$, head by head",
    "o_proj.weight": "$W^O$",
}
glue.table(
    "latent-v3-weights",
    ["Hugging Face name", "paper", "shape (out, in)", "parameters"],
    [
        [
            f"`{name}`",
            symbols[name],
            " x ".join(str(n) for n in p.shape),
            f"{p.numel():,}",
        ]
        for name, p in v3_layer.named_parameters()
    ],
    "llrr",
)
glue.value(
    "tolerances",
    {
        "float64": tolerances.atol(torch.float64),
        "float32": tolerances.atol(torch.float32),
    },
)
