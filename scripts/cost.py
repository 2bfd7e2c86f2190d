# %% [markdown]
# ## The count, part by part, against PyTorch's own
#
# One layer of GPT-2 small's shape ($d_\text{model} = 768$, 12 heads),
# one sequence of 256 tokens, float32. `FlopCounterMode` runs the
# module's forward and counts every matmul with its own formulas
# (`torch/utils/flop_counter.py`); its table per module gives the four
# projections, and its two batched matmuls (`bmm`) are told apart by
# their outputs: the scores are $(B H, T, T)$, the weighted sum
# $(B H, T, d_\text{head})$. `cost.attention_flops` gives the same
# parts from the shapes alone. Change the shapes and rerun.

# %%
import json
import weakref
from collections import defaultdict
from fractions import Fraction
from pathlib import Path

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, flop_registry

import glue
from mha_ref import cost, kv_cache, latent_torch, tiled, torch_ref

fmt = glue.fmt
PARTS = ("q", "k", "v", "scores", "weighted_sum", "out")
mm, bmm = torch.ops.aten.mm, torch.ops.aten.bmm


def count(run):
    """FlopCounterMode over run(): the counter and each bmm's
    (output shape, FLOPs), from the counter's own bmm formula."""
    calls = []

    def bmm_call(a, b, out_val=None, **kwargs):
        flops = flop_registry[bmm](a, b, out_val=out_val, **kwargs)
        calls.append((tuple(out_val.shape), flops))
        return flops

    bmm_call._get_raw = True  # given the tensors, not their shapes
    with FlopCounterMode(
        display=False, custom_mapping={bmm: bmm_call}
    ) as counter:
        run()
    return counter, calls


torch.manual_seed(0)
B, T, d_model, n_head = 1, 256, 768, 12
d_head = d_model // n_head
module = torch_ref.MultiHeadAttention(d_model, n_head)
x = torch.randn(B, T, d_model, requires_grad=True)
with torch.no_grad():
    counter, calls = count(lambda: module(x))
by_module = counter.get_flop_counts()
counted = {
    part: by_module[f"MultiHeadAttention.w{name}"][mm]
    for part, name in (("q", "q"), ("k", "k"), ("v", "v"), ("out", "o"))
}
counted["scores"] = sum(f for shape, f in calls if shape[-1] == T)
counted["weighted_sum"] = sum(f for shape, f in calls if shape[-1] == d_head)
counted["total"] = counter.get_total_flops()
formula = cost.attention_flops(B, T, T, d_model, n_head)
# SDPA's CPU kernel is not in the counter's registry: only the
# projections count
with torch.no_grad():
    sdpa_counter, _ = count(lambda: torch_ref.sdpa_forward(module, x))
projections = sum(formula[p] for p in ("q", "k", "v", "out"))
sdpa_counted = {
    "total": sdpa_counter.get_total_flops(),
    "attention": sdpa_counter.get_total_flops() - projections,
}


def train_step():
    y, _ = module(x)
    y.sum().backward()


counter, _ = count(train_step)
both = cost.attention_flops(B, T, T, d_model, n_head, backward=True)
trained = {
    "projections": counter.get_flop_counts()["Global"][mm],
    "attention": counter.get_flop_counts()["Global"][bmm],
    "total": counter.get_total_flops(),
}
trained_formula = {
    "projections": sum(both[p] for p in ("q", "k", "v", "out")),
    "attention": both["scores"] + both["weighted_sum"],
    "total": both["total"],
}
example = glue.value(
    "example",
    {
        "batch": B,
        "t": T,
        "d_model": d_model,
        "n_head": n_head,
        "d_head": d_head,
        "cost": formula,
        "counter": counted,
        "equal": formula == counted,
        "cost_train": trained_formula,
        "counter_train": trained,
        "equal_train": trained_formula == trained,
        "gflop": formula["total"] / 1e9,
        "gflop_train": both["total"] / 1e9,
        "sdpa": sdpa_counted,
    },
)
EQUATIONS = {
    "q": "$2 B T d_\\text{model} \\cdot H d_\\text{head}$",
    "k": "$2 B T_k d_\\text{model} \\cdot H_{kv} d_\\text{head}$",
    "v": "$2 B T_k d_\\text{model} \\cdot H_{kv} d_\\text{head}$",
    "scores": "$2 B H T T_k d_\\text{head}$",
    "weighted_sum": "$2 B H T T_k d_\\text{head}$",
    "out": "$2 B T \\cdot H d_\\text{head} \\cdot d_\\text{model}$",
    "total": "",
}
glue.table(
    "cost-parts",
    ["part", "FLOPs", "cost.py", "FlopCounterMode", "equal"],
    [
        [
            f"`{part}`",
            EQUATIONS[part],
            f"{formula[part]:,}",
            f"{counted[part]:,}",
            "yes" if formula[part] == counted[part] else "**no**",
        ]
        for part in (*PARTS, "total")
    ],
    "llrrl",
)

# %% [markdown]
# More layers through the counter: grouped key/value heads,
# cross-attention, one decoding step against a cache and a prefill
# chunk after cached tokens (`kv_cache.cached_step`), forward alone and
# with the backward. Each row compares the totals.


# %%
def case(name, d_model, n_head, n_kv, tq, tk, kind, backward):
    torch.manual_seed(1)
    layer = torch_ref.MultiHeadAttention(d_model, n_head, n_kv_head=n_kv)
    x = torch.randn(1, tq, d_model, requires_grad=backward)
    cache = kv_cache.KVCache()
    context = None
    if kind == "cross":
        context = torch.randn(1, tk, d_model, requires_grad=backward)
    if kind == "cached":  # tk - tq positions cached before the step
        with torch.no_grad():
            kv_cache.cached_step(
                layer, cache, torch.randn(1, tk - tq, d_model)
            )

    def run():
        if kind == "cached":
            y = kv_cache.cached_step(layer, cache, x)
        else:
            y, _ = layer(x, context=context)
        if backward:
            y.sum().backward()

    with torch.set_grad_enabled(backward):
        counter, _ = count(run)
    expected = cost.attention_flops(
        1,
        tq,
        tk,
        d_model,
        n_head,
        n_kv,
        backward=backward,
        cached=kind == "cached",
    )["total"]
    return {
        "case": name,
        "cost": expected,
        "counter": counter.get_total_flops(),
        "backward": backward,
    }


cases = [
    case("GQA, 12 heads, 4 KV heads", 384, 12, 4, 128, 128, "self", False),
    case("GQA, with backward", 384, 12, 4, 128, 128, "self", True),
    case("MQA, cross-attention 64 x 200", 384, 12, 1, 64, 200, "cross", True),
    case("decoding step, cache of 511", 512, 8, 2, 1, 512, "cached", False),
    case("prefill chunk of 64 after 192", 512, 8, 2, 64, 256, "cached", True),
]
glue.value("cases", cases)
glue.value("all_equal", all(c["cost"] == c["counter"] for c in cases))
glue.table(
    "cost-cases",
    ["layer", "backward", "cost.py", "FlopCounterMode"],
    [
        [
            c["case"],
            "yes" if c["backward"] else "no",
            f"{c['cost']:,}",
            f"{c['counter']:,}",
        ]
        for c in cases
    ],
    "llrr",
)

# %% [markdown]
# ## Where the T² term overtakes the d² term
#
# The projections grow as $T d_\text{model}^2$, the scores and the
# weighted sum as $T^2 d_\text{model}$. The smallest $T$ at which the
# second reaches the first, found by bisection on `attention_flops`
# (dense) and on `useful_flops` (only the causal triangle), for a few
# real shapes; then the same for a whole block, whose MLP adds its own
# products with weights: two of $d_\text{model} \times d_\text{ff}$ in
# GPT-2 ($d_\text{ff} = 4 d_\text{model}$), three in Llama's SwiGLU.
# Last, nanoGPT's rule for a training step (`estimate_mfu`:
# $6N + 12 L H Q T$ FLOPs per token) against `cost.py`'s count.


# %%
def crossover(parts_at, d_model, other=lambda t: 0):
    """Smallest T with scores + weighted sum >= the four projections
    (plus other(t), the FLOPs of other products with weights)."""

    def attention_wins(t):
        p = parts_at(t)
        projections = p["q"] + p["k"] + p["v"] + p["out"] + other(t)
        return p["scores"] + p["weighted_sum"] >= projections

    lo, hi = 1, 64 * d_model
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if attention_wins(mid) else (mid + 1, hi)
    return lo


SHAPES = {  # d_model, n_head, n_kv_head, d_ff, MLP matrices
    "GPT-2 small": (768, 12, 12, 4 * 768, 2),  # GPT2MLP: 4 d_model
    "Llama 2 7B": (4096, 32, 32, 11008, 3),  # LlamaConfig, SwiGLU
    "Llama 3 8B": (4096, 32, 8, 14336, 3),  # Llama 3 paper, Table 3
}
crossings = {}
for name, (d, h, h_kv, d_ff, mats) in SHAPES.items():

    def dense_at(t, d=d, h=h, h_kv=h_kv):
        return cost.attention_flops(1, t, t, d, h, h_kv)

    def mlp(t, d=d, d_ff=d_ff, mats=mats):  # mats products of T x d x d_ff
        return mats * 2 * t * d * d_ff

    dense_t = crossover(dense_at, d)
    causal_t = crossover(
        lambda t, d=d, h=h, h_kv=h_kv: cost.useful_flops(1, t, t, d, h, h_kv),
        d,
    )
    block_t = crossover(dense_at, d, mlp)
    crossings[name] = {
        "d_model": d,
        "n_head": h,
        "n_kv_head": h_kv,
        "d_ff": d_ff,
        "dense_t": dense_t,
        "dense_over_d": dense_t / d,
        "causal_t": causal_t,
        "causal_over_d": causal_t / d,
        "block_t": block_t,
        "block_over_d": block_t / d,
    }
crossing = glue.value("crossover", crossings)
gpt2 = crossing["GPT-2 small"]


def nanogpt_per_token(t, d_model):
    """nanoGPT's estimate_mfu for one layer: 6 N + 12 H Q T, with its
    N = 4 d_model^2 weights and H Q = d_model."""
    return 6 * (4 * d_model**2) + 12 * t * d_model


nano_t, nano_d, nano_h = 1024, 768, 12
glue.value(
    "nanogpt",
    {
        "t": nano_t,
        "six_n": 6 * 4 * nano_d**2,
        "twelve_t_d": 12 * nano_t * nano_d,
        "equal": all(
            cost.attention_flops(1, t, t, d, h, backward=True)["total"]
            == t * nanogpt_per_token(t, d)
            for t in (1, 100, 1024, 4096)
            for d, h, _, _, _ in SHAPES.values()
        ),
    },
)
lengths = [2**k for k in range(6, 15)]  # T = 64 .. 16384
dense = [cost.attention_flops(1, t, t, 768, 12) for t in lengths]
useful = [cost.useful_flops(1, t, t, 768, 12) for t in lengths]


def draw_crossover(fig, theme):
    ax = fig.subplots()
    proj = [sum(p[k] for k in ("q", "k", "v", "out")) for p in dense]
    ax.plot(lengths, proj, "o-", color=theme.series[0], label="projections")
    ax.plot(
        lengths,
        [p["scores"] + p["weighted_sum"] for p in dense],
        "s-",
        color=theme.series[1],
        label="scores + weighted sum (dense)",
    )
    ax.plot(
        lengths,
        [p["scores"] + p["weighted_sum"] for p in useful],
        "^--",
        color=theme.series[2],
        label="the same, causal pairs only",
    )
    for t, style, side, kind in (
        (gpt2["dense_t"], ":", "right", "dense"),
        (gpt2["causal_t"], "-.", "left", "causal"),
    ):
        ax.axvline(t, color=theme.muted, linestyle=style)
        ax.annotate(
            f"T = {t:,}\n({kind})",
            (t, 0.04),
            xycoords=("data", "axes fraction"),  # low, clear of the lines
            xytext=(-4 if side == "right" else 4, 0),
            textcoords="offset points",
            ha=side,
            va="bottom",
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("T (log scale)")
    ax.set_ylabel("forward FLOPs (log scale)")
    ax.set_title("One layer: d_model 768, 12 heads")
    ax.minorticks_off()  # cheaper to draw; a tick per power
    ax.grid(True, alpha=0.4)
    fig.legend(loc="outside lower center", fontsize=8)


glue.figure(
    "cost-crossover",
    draw_crossover,
    figsize=(3.7, 4.0),
    alt=(
        "Log-log chart of one layer's forward FLOPs against T for "
        "d_model 768 and 12 heads: the projections grow as a line of "
        "slope 1, the scores and weighted sum as a line of slope 2 that "
        f"crosses it at T = {gpt2['dense_t']:,} (dense, dotted line), or "
        f"at T = {gpt2['causal_t']:,} when only the causal pairs are "
        "counted (dash-dotted line)."
    ),
)

# %% [markdown]
# ## The backward's factor
#
# Forward plus backward over forward, from the counts above (the
# reference's backward is autograd's: two matmuls per matmul), and for
# the tiled pass of `mha_ref/tiled.py`, causal, which keeps only one
# log-sum-exp per row and recomputes every tile of scores in its
# backward: 5 matmuls per tile where the forward has 2. Both tiled
# counts come from `FlopCounterMode` as well.

# %%
tb, th, tt, tdh = 1, 2, 128, 32  # B, H, T, d_head of the tiled check
q, k, v, dout = torch.randn(4, tb, th, tt, tdh, dtype=torch.float64)
tiled_fwd, _ = count(lambda: tiled.tiled_attention_torch(q, k, v, causal=True))
tiled_both, _ = count(
    lambda: tiled.tiled_attention_backward_torch(q, k, v, dout, causal=True)
)
tiled_cost = cost.tiled_flops(tb, tt, tt, th * tdh, th)
tiled_cost_both = cost.tiled_flops(tb, tt, tt, th * tdh, th, backward=True)


def attention_part(parts):
    return parts["scores"] + parts["weighted_sum"]


backward = glue.value(
    "backward",
    {
        "factor": both["total"] / formula["total"] - 1,
        "factor_counter": trained["total"] / counted["total"] - 1,
        "tiled_factor": attention_part(tiled_cost_both)
        / attention_part(tiled_cost)
        - 1,
        "tiled_factor_counter": tiled_both.get_total_flops()
        / tiled_fwd.get_total_flops()
        - 1,
        "tiled_equal": (
            tiled_fwd.get_total_flops() == attention_part(tiled_cost)
            and tiled_both.get_total_flops() == attention_part(tiled_cost_both)
        ),
        "t": tt,
        "n_head": th,
        "d_head": tdh,
        "block": tiled.BLOCK,
    },
)

# %% [markdown]
# ## Dense, useful and tiled FLOPs of causal attention
#
# The scores and the weighted sum of one causal layer, at the shapes
# and block size of the tiled page's timing table (8 heads of 64, one
# sequence, blocks of `tiled.BLOCK`): computed whole, as the reference
# does; only the allowed pairs, the useful work; and what the tiled
# loop pays, which skips the tiles above the diagonal but computes the
# diagonal tiles whole.

# %%
heads, head_size, block = 8, 64, tiled.BLOCK
causal_rows = []
for t in [256, 512, 1024, 2048, 4096]:
    shape = (1, t, t, heads * head_size, heads)
    d_parts = cost.attention_flops(*shape)
    u_parts = cost.useful_flops(*shape)
    t_parts = cost.tiled_flops(*shape, block_q=block, block_k=block)
    tiles, skipped, _ = cost.causal_tiles(t, t, block, block)
    causal_rows.append(
        {
            "t": t,
            "dense": attention_part(d_parts),
            "useful": attention_part(u_parts),
            "tiled": attention_part(t_parts),
            "tiles": tiles,
            "tiles_computed": tiles - skipped,
            "useful_share": attention_part(u_parts) / attention_part(d_parts),
            "tiled_over_useful": attention_part(t_parts)
            / attention_part(u_parts),
        }
    )
causal = glue.value(
    "causal",
    {
        "n_head": heads,
        "d_head": head_size,
        "block": block,
        "rows": causal_rows,
    },
)
glue.table(
    "cost-causal",
    [
        "T",
        "dense (GFLOP)",
        "useful (GFLOP)",
        "tiled (GFLOP)",
        "tiles computed",
        "tiled / useful",
    ],
    [
        [
            f"{r['t']:,}",
            fmt(r["dense"] / 1e9, 4),
            fmt(r["useful"] / 1e9, 4),
            fmt(r["tiled"] / 1e9, 4),
            f"{r['tiles_computed']:,} of {r['tiles']:,}",
            f"{r['tiled_over_useful']:.3f}",
        ]
        for r in causal_rows
    ],
    "rrrrrr",
)

# %% [markdown]
# ## What the backward keeps
#
# `saved_activation_bytes` against the tensors autograd actually keeps
# for the backward, measured with
# `torch.autograd.graph.saved_tensors_hooks`: each storage counted once,
# and only while a node still holds it (the module's weights apart).
# The reference keeps the weights $A$; SDPA's CPU kernel keeps a
# log-sum-exp per row instead. In float32, then in bfloat16, where the
# reference computes in float32 and keeps float32 tensors.


# %%
def kept_bytes(run, weights):
    """Bytes the autograd graph of run() holds for its backward."""
    held = []

    class Packed:  # a node that is freed frees its Packed too
        def __init__(self, tensor):
            self.tensor = tensor

    def pack(tensor):
        packed = Packed(tensor)
        held.append((weakref.ref(packed), tensor.untyped_storage()))
        return packed

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda p: p.tensor):
        out = run()
    skip = {w.untyped_storage().data_ptr() for w in weights}
    alive = {
        s.data_ptr(): s.nbytes()
        for packed, s in held
        if packed() is not None and s.data_ptr() not in skip
    }
    del out
    return sum(alive.values())


def kept_by_layer(dtype):
    """(the reference's, SDPA's) kept bytes for the measured layer."""
    torch.manual_seed(2)
    small = torch_ref.MultiHeadAttention(md, mh, dtype=dtype)
    xs = torch.randn(mb, mt, md, dtype=dtype, requires_grad=True)
    return (
        kept_bytes(lambda: small(xs)[0], small.parameters()),
        kept_bytes(
            lambda: torch_ref.sdpa_forward(small, xs), small.parameters()
        ),
    )


mb, mt, md, mh = 2, 128, 256, 4  # the measured layer: B, T, d, H
ref32, sdpa32 = kept_by_layer(torch.float32)
ref16, sdpa16 = kept_by_layer(torch.bfloat16)
measured = {"weights": ref32, "no_weights": sdpa32}
formula_bytes = {
    "weights": cost.saved_activation_bytes(mb, mt, md, mh, 4),
    "no_weights": cost.saved_activation_bytes(
        mb, mt, md, mh, 4, weights=False
    ),
}
# bf16: X and the heads stay bf16, the reference's Q, K, V and A are fp32
halves = 2 * mb * mt * md * (4 - 2)  # X and the heads, 2 bytes saved each
bf16 = {
    "reference": ref16,
    "sdpa": sdpa16,
    "formula": cost.saved_activation_bytes(mb, mt, md, mh, 2),
    "formula_no_weights": cost.saved_activation_bytes(
        mb, mt, md, mh, 2, weights=False
    ),
    "float32_less_halves": formula_bytes["weights"] - halves,
}
bf16["sdpa_equal"] = bf16["sdpa"] == bf16["formula_no_weights"]
bf16["reference_is_float32"] = bf16["reference"] == bf16["float32_less_halves"]
memory_rows = []
for t in (1024, 4096, 16384):
    with_w = cost.saved_activation_bytes(1, t, 768, 12, 4)
    without_w = cost.saved_activation_bytes(1, t, 768, 12, 4, weights=False)
    weights_bytes = 12 * t * t * 4  # A: B H T T float32 values
    memory_rows.append(
        {
            "t": t,
            "with_mib": with_w / 2**20,
            "without_mib": without_w / 2**20,
            "ratio": with_w / without_w,
            "weights_share": weights_bytes / with_w,
        }
    )
memory = glue.value(
    "memory",
    {
        "measured": measured,
        "formula": formula_bytes,
        "equal": measured == formula_bytes,
        "bf16": bf16,
        "batch": mb,
        "t": mt,
        "d_model": md,
        "n_head": mh,
        "rows": memory_rows,
    },
)


def grouped(x, digits=4):
    """fmt, with thousands separated: 6,264 and 120.8."""
    return f"{x:,.0f}" if abs(x) >= 1000 else fmt(x, digits)


glue.table(
    "cost-memory",
    ["T", "with the weights (MiB)", "without (MiB)", "with / without"],
    [
        [
            f"{r['t']:,}",
            grouped(r["with_mib"]),
            grouped(r["without_mib"]),
            grouped(r["ratio"], 3),
        ]
        for r in memory_rows
    ],
    "rrrr",
)

# %% [markdown]
# ## The KV cache of real models
#
# Per token, every layer, bfloat16 (2 bytes a value), from
# `kv_cache_bytes`; a sliding window keeps only the last window - 1
# tokens (`window=`). DeepSeek-V3's multi-head latent attention caches
# a latent and one shared rotary key instead, and its row comes from
# the latent-attention module
# (`latent_torch.latent_cache_bytes_per_token`, measured on a real
# `LatentCache`). First the formula against caches that
# `kv_cache.cached_step` and `kv_cache.rolling_step` filled.

# %%
torch.manual_seed(3)
layer = torch_ref.MultiHeadAttention(64, 8, n_kv_head=2)
cache = kv_cache.KVCache()
rolling = kv_cache.RollingKVCache(window=6)
with torch.no_grad():
    for n in (12, 1, 1, 1):  # a prefill, then three steps
        chunk = torch.randn(3, n, 64)
        kv_cache.cached_step(layer, cache, chunk)
        kv_cache.rolling_step(layer, rolling, chunk)
cache_check = glue.value(
    "cache_check",
    {
        "measured": cache.keys.nbytes + cache.values.nbytes,
        "formula": 3 * cost.kv_cache_bytes(1, 2, 8, cache.length, 4),
        "rolling_measured": rolling.keys.nbytes + rolling.values.nbytes,
        "rolling_formula": 3
        * cost.kv_cache_bytes(1, 2, 8, rolling.length, 4, window=6),
        "window": rolling.window,
        "batch": 3,
        "tokens": cache.length,
    },
)

MODELS = [  # name, n_layer, n_head, n_kv_head, d_head, context, window
    ("GPT-2 (small)", 12, 12, 12, 64, 1024, None),  # GPT2Config
    ("Llama 2 7B", 32, 32, 32, 128, 4096, None),  # LlamaConfig; card
    ("Llama 2 70B", 80, 64, 8, 128, 4096, None),  # config.json; card
    ("Llama 3 8B", 32, 32, 8, 128, 8192, None),  # paper Table 3; card
    ("Llama 3 70B", 80, 64, 8, 128, 8192, None),
    ("Mistral 7B", 32, 32, 8, 128, 8192, 4096),  # MistralConfig; paper
]
kv_rows = []
for name, n_layer, h, h_kv, dh, context, window in MODELS:
    kv_rows.append(
        {
            "model": name,
            "n_layer": n_layer,
            "n_head": h,
            "cached": f"{h_kv} heads × {dh}",
            "context": context,
            "window": window,
            "per_token": cost.kv_cache_bytes(n_layer, h_kv, dh, 1, 2),
            "at_context": cost.kv_cache_bytes(
                n_layer, h_kv, dh, context, 2, window=window
            ),
            "bytes_at": lambda t, a=(n_layer, h_kv, dh), w=window: (
                cost.kv_cache_bytes(*a, t, 2, window=w)
            ),
        }
    )
mla_layer = latent_torch.latent_cache_bytes_per_token(latent_torch.DEEPSEEK_V3)
shapes = latent_torch.DEEPSEEK_V3
glue.value(
    "mla",
    {
        "kv_lora_rank": shapes["kv_lora_rank"],
        "qk_rope_head_dim": shapes["qk_rope_head_dim"],
        "bytes_per_layer": mla_layer,
    },
)
mla_token = latent_torch.DEEPSEEK_V3_LAYERS * mla_layer
kv_rows.append(
    {
        "model": "DeepSeek-V3 (MLA)",
        "n_layer": latent_torch.DEEPSEEK_V3_LAYERS,
        "n_head": shapes["n_head"],
        "cached": (
            f"{shapes['kv_lora_rank']} + {shapes['qk_rope_head_dim']} (latent)"
        ),
        "context": 131072,  # 128K: DeepSeek-V3 report, section 4.3
        "window": None,
        "per_token": mla_token,
        "at_context": mla_token * 131072,
        "bytes_at": lambda t: mla_token * t,
    }
)
# one model of each kind: all heads, grouped, a window, a latent
CURVES = ("Llama 2 7B", "Llama 3 8B", "Mistral 7B", "DeepSeek-V3 (MLA)")
curves = {  # bytes of one sequence's cache, up to the model's context
    r["model"]: [
        (t, r["bytes_at"](t))
        for t in [2**k for k in range(8, 18)]
        if t <= r["context"]
    ]
    for r in kv_rows
    if r["model"] in CURVES
}
for row in kv_rows:
    del row["bytes_at"]  # a function: the data holds its values
    row["kib_per_token"] = row["per_token"] / 2**10
    row["gib_context"] = row["at_context"] / 2**30
kv = glue.value("kv", {"rows": {r["model"]: r for r in kv_rows}})
glue.table(
    "cost-kv-cache",
    [
        "model",
        "layers",
        "cached per layer and token",
        "KiB per token",
        "context (tokens)",
        "GiB at the context",
    ],
    [
        [
            r["model"] + (f", window {r['window']:,}" if r["window"] else ""),
            str(r["n_layer"]),
            r["cached"],
            grouped(r["kib_per_token"]),
            f"{r['context']:,}",
            grouped(r["gib_context"], 3),
        ]
        for r in kv_rows
    ],
    "lrlrrr",
)


# Mistral 7B's cache is Llama 3 8B's up to its window (the same layers,
# heads and head size): dashed, with hollow markers, on top of Llama 3
# 8B's line, drawn thick underneath so that both show
KV_STYLE = {
    "Llama 3 8B": {"linewidth": 4.5, "markersize": 6},
    "Mistral 7B": {"linestyle": "--", "markerfacecolor": "none"},
}


def draw_kv(fig, theme):
    ax = fig.subplots()
    for series, (name, points) in enumerate(curves.items()):
        ax.plot(
            [t for t, _ in points],
            [b / 2**30 for _, b in points],
            **{"marker": "os^D"[series], "linestyle": "-", "markersize": 3.5}
            | KV_STYLE.get(name, {}),
            color=theme.series[series],
            label=name,
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("tokens, up to the context (log scale)")
    ax.set_ylabel("KV cache, GiB (log scale)")
    ax.set_title("One sequence, all layers, bf16")
    ax.minorticks_off()  # cheaper to draw; a tick per power
    ax.grid(True, alpha=0.4)
    ax.legend(loc="lower right", fontsize=8)  # below DeepSeek-V3's line


mistral = kv["rows"]["Mistral 7B"]
glue.figure(
    "cost-kv-cache",
    draw_kv,
    figsize=(3.7, 3.4),
    alt=(
        "Log-log chart of the KV cache of one sequence against its length, "
        "each line up to the model's context: Llama 2 7B's and Llama 3 "
        "8B's grow in proportion to the tokens; Mistral 7B's (dashed) "
        "lies on Llama 3 8B's until its window of "
        f"{mistral['window']:,} and then stays flat; "
        "DeepSeek-V3's latent cache grows in proportion too, but from far "
        "fewer bytes per token, up to 131,072 tokens."
    ),
)

# %% [markdown]
# ## Prefill and decoding on this machine's roofline
#
# The roofs and the timings are not measured here: `python -m bench
# --only roofline` measured this CPU's peak float32 matmul rate (one
# thread and all) and the bandwidth of a large copy, timed a causal
# prefill and single decoding steps of `torch_ref.MultiHeadAttention`,
# and wrote the medians into `bench/roofline.json`, which the
# repository commits (this notebook carries a copy). The FLOPs and
# bytes of each point are computed here, by `cost.py`. A GPU's
# roofline from its published specifications stands beside it.

# %%
bench = json.loads(Path("bench/roofline.json").read_text())
cpu, layer_shape = bench["cpu"], bench["layer"]
# the GPU's roof: its published specifications (cost.GPU_SPECS)
H200 = cost.GPU_SPECS["H200 SXM"]
spec = {
    "name": "NVIDIA H200 SXM",
    "bf16_dense_tflops": H200["bf16_sparse_tflops"] / 2,  # 2:4 sparsity
    "bf16_sparse_tflops": H200["bf16_sparse_tflops"],
    "hbm_tbps": H200["hbm_tbps"],
    "source": H200["source"],
    "url": H200["url"],
}
env = bench["environment"]
threads = str(cpu["layer_threads"])
peak = cpu["peak_gflops"][threads] * 1e9  # FLOP/s on the layer's threads
bandwidth = cpu["bandwidth_gbs"][threads] * 1e9  # bytes/s, as many threads
ridge = peak / bandwidth  # FLOP/byte where the two roofs meet
all_threads = max(cpu["peak_gflops"], key=int)
points = []
for p in cpu["points"]:
    tq, cached = (p["t"], False) if p["kind"] == "prefill" else (1, True)
    args = (layer_shape["batch"], tq, p["t"])
    shape = {k: layer_shape[k] for k in ("d_model", "n_head")}
    flops = cost.attention_flops(*args, **shape, cached=cached)["total"]
    intensity = cost.arithmetic_intensity(
        *args, **shape, bytes_per_value=4, cached=cached
    )
    rate = flops / p["seconds"]
    points.append(
        {
            "kind": p["kind"],
            "t": p["t"],
            "flops": flops,
            "ms": p["seconds"] * 1e3,
            "intensity": intensity,
            "gflops": rate / 1e9,
            "roof_gflops": min(peak, bandwidth * intensity) / 1e9,
            "share_of_roof": rate / min(peak, bandwidth * intensity),
            "side": "compute" if intensity > ridge else "bandwidth",
        }
    )
gpu_peak = spec["bf16_dense_tflops"] * 1e12
gpu_bandwidth = spec["hbm_tbps"] * 1e12
gpu_ridge = gpu_peak / gpu_bandwidth
GPU_POINTS = {  # label: batch, T, decode?, (d_model, n_head, n_kv_head)
    "prefill": (1, 4096, False, (4096, 32, 32)),  # Llama 2 7B's layer
    "decode": (1, 4096, True, (4096, 32, 32)),
    "decode, B = 64": (64, 4096, True, (4096, 32, 32)),
    "decode, B = 64, Llama 3 8B": (64, 4096, True, (4096, 32, 8)),
}
gpu_points = []
for kind, (batch, t, decode, (d, h, h_kv)) in GPU_POINTS.items():
    intensity = cost.arithmetic_intensity(
        batch, 1 if decode else t, t, d, h, h_kv, 2, cached=decode
    )
    label = (f"step, cache of {t:,}" if decode else f"prefill of {t:,}") + (
        f", {batch} sequences" if batch > 1 else ""
    )
    model = "Llama 3 8B" if h_kv != h else "Llama 2 7B"
    gpu_points.append(
        {
            "kind": kind,
            "label": f"{model}: {label}",
            "t": t,
            "batch": batch,
            "intensity": intensity,
            "bound_tflops": min(gpu_peak, gpu_bandwidth * intensity) / 1e12,
            "side": "compute" if intensity > gpu_ridge else "bandwidth",
        }
    )
# grouped heads: each cached value serves G query heads in a step
llama3 = {"d_model": 4096, "n_head": 32, "n_kv_head": 8}
grouped_steps = [
    {
        "t": t,
        "intensity": cost.arithmetic_intensity(1, 1, t, **llama3, cached=True),
    }
    for t in (1, 4096, 32768)
]
# a GPU the benchmark found (a lent machine) is measured, not specified
cuda = bench.get("cuda")
gpu_measured = {
    "present": cuda is not None,
    "device": cuda["device"] if cuda else "",
    "peak_tflops": cuda["peak_gflops"] / 1e3 if cuda else 0.0,
    "bandwidth_tbps": cuda["bandwidth_gbs"] / 1e3 if cuda else 0.0,
    "points": [
        {
            "kind": p["kind"],
            "t": p["t"],
            "intensity": p["flops"] / p["bytes"],
            "tflops": p["flops"] / p["seconds"] / 1e12,
        }
        for p in (cuda["points"] if cuda else [])
    ],
}
decode_sdpa = [p for p in points if p["kind"] == "decode_sdpa"]
decode_ref = [p for p in points if p["kind"] == "decode"]
prefill = [p for p in points if p["kind"] == "prefill"]
contended = any(
    cpu[key][all_threads] < cpu[key]["1"]
    for key in ("peak_gflops", "bandwidth_gbs")
)
roofline = glue.value(
    "roofline",
    {
        "cpu_name": env["cpu"],
        "threads": cpu["layer_threads"],
        "peak_gflops": cpu["peak_gflops"],
        "bandwidth_gbs": cpu["bandwidth_gbs"],
        "ridge": ridge,
        "points": points,
        "prefill": prefill,
        "decode": decode_ref,
        "decode_sdpa": decode_sdpa,
        "prefill_all_right": all(p["intensity"] > ridge for p in prefill),
        "decode_all_left": all(
            p["intensity"] < ridge for p in decode_ref + decode_sdpa
        ),
        "sdpa_share": [
            min(p["share_of_roof"] for p in decode_sdpa),
            max(p["share_of_roof"] for p in decode_sdpa),
        ],
        "reference_share": [
            min(p["share_of_roof"] for p in decode_ref),
            max(p["share_of_roof"] for p in decode_ref),
        ],
        "layer": layer_shape,
        "runs": bench["runs"],
        "all_threads": all_threads,
        "peak_all_gflops": cpu["peak_gflops"][all_threads],
        "bandwidth_all_gbs": cpu["bandwidth_gbs"][all_threads],
        # the two-thread roofs below the one-thread ones: other work
        # held the cores, and the roofs are lower bounds
        "contended": contended,
        "copy_mib": cpu["copy_bytes"] / 2**20,
        # read before each layer call (bench/roofline.py, since it has)
        "flush_mib": cpu.get("flush_bytes", 0) / 2**20,
        # what the flush is sized from: twice this, or a floor above it
        "last_level_cache_mib": (cpu.get("last_level_cache_bytes") or 0)
        / 2**20,
        "longest_cache_mib": cost.kv_cache_bytes(
            1,
            layer_shape["n_head"],
            layer_shape["d_head"],
            max(p["t"] for p in points),
            4,
        )
        / 2**20,
        "commit": env["commit"],
        "tree_dirty": env.get("tree_dirty", False),
        # the machine's 1-minute load when the run began, and its cores
        "load": env["load_average_at_start"][0],
        "cores": env["cores_available"],
        "torch": env["torch"],
        "gpu": {
            **spec,
            "ridge": gpu_ridge,
            "points": {p["kind"]: p for p in gpu_points},
        },
        "grouped_steps": grouped_steps,
        "grouped_g": llama3["n_head"] // llama3["n_kv_head"],
        "measured_gpu": gpu_measured,
    },
)
KIND_LABEL = {
    "prefill": "prefill",
    "decode": "step (ref.)",
    "decode_sdpa": "step (SDPA)",
}


def ms(value):
    """Milliseconds, 3 significant digits, whole above 100: 5.39, 2,686."""
    millis = 1e3 * value
    return f"{millis:,.0f}" if millis >= 100 else fmt(millis, 3)


glue.table(
    "cost-roofline",
    ["call", "T", "ms", "GFLOP/s", "FLOP / byte", "share of roof"],
    [
        [
            KIND_LABEL[p["kind"]],
            f"{p['t']:,}",
            ms(p["ms"] / 1e3),
            fmt(p["gflops"], 3),
            fmt(p["intensity"], 3),
            fmt(p["share_of_roof"], 2),
        ]
        for p in points
    ],
    "lrrrrr",
)

# %% [markdown]
# What the reference itself moves. `bytes_moved` counts the fewest
# bytes a layer needs: a fused kernel's. The reference runs one aten
# op after another, and each reads its inputs and writes its output;
# counting those bytes at the dispatcher (views move nothing) gives an
# upper bound on its traffic. The count is a polynomial in $T$ (every
# tensor's size is), quadratic for a prefill and linear for a step, so
# three or two short runs fix it, a fourth checks it, and it gives the
# benchmark's lengths without running them.


# %%
MATMULS = {torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.bmm}


def tensors(x):
    """Every tensor in an op's (nested) arguments or results."""
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for y in x:
            yield from tensors(y)
    elif isinstance(x, dict):
        for y in x.values():
            yield from tensors(y)


class Traffic(TorchDispatchMode):
    """Bytes every aten op reads and writes, by kind; views none."""

    def __init__(self):
        super().__init__()
        self.bytes = defaultdict(int)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not func.is_view:
            kind = (
                "matmuls"
                if func.overloadpacket in MATMULS
                else "cat"
                if func.overloadpacket is torch.ops.aten.cat
                else "elementwise"
            )
            self.bytes[kind] += sum(
                t.nbytes for t in tensors((args, kwargs, out))
            )
        return out


torch.manual_seed(4)
timed = torch_ref.MultiHeadAttention(
    layer_shape["d_model"], layer_shape["n_head"]
)
d_head = layer_shape["d_head"]


def prefill_traffic(t):
    x = torch.randn(1, t, layer_shape["d_model"])
    mask = torch_ref.causal_mask(t)  # made outside the timed call
    with torch.no_grad(), Traffic() as traffic:
        timed(x, mask)
    return dict(traffic.bytes)


def step_traffic(t):  # as bench/roofline.py times it: T - 1 cached
    shape = (1, layer_shape["n_head"], t - 1, d_head)
    step_cache = kv_cache.KVCache()
    step_cache.keys, step_cache.values = torch.randn(2, *shape)
    x = torch.randn(1, 1, layer_shape["d_model"])
    with torch.no_grad(), Traffic() as traffic:
        kv_cache.cached_step(timed, step_cache, x)
    return dict(traffic.bytes)


def polynomial(samples):
    """The polynomial through (t, value) samples, exactly (Lagrange)."""

    def at(t):
        total = Fraction(0)
        for i, (ti, vi) in enumerate(samples):
            term = Fraction(vi)
            for j, (tj, _) in enumerate(samples):
                if j != i:
                    term *= Fraction(t - tj, ti - tj)
            total += term
        return total

    return at


def fitted(measure, fit_at, check_at):
    """{kind: polynomial in T}, checked exactly at one more length."""
    runs = {t: measure(t) for t in (*fit_at, check_at)}
    kinds = {kind for bytes_by in runs.values() for kind in bytes_by}
    fits = {
        kind: polynomial([(t, runs[t].get(kind, 0)) for t in fit_at])
        for kind in sorted(kinds)  # a set: sorted, so the output is fixed
    }
    for kind, fit in fits.items():
        if fit(check_at) != runs[check_at].get(kind, 0):
            raise ValueError(f"{kind} bytes are not a polynomial in T")
    return fits


prefill_fit = fitted(prefill_traffic, (32, 64, 128), 256)  # quadratic
step_fit = fitted(step_traffic, (64, 128), 256)  # linear in T
moved = {
    (p["kind"], p["t"]): sum(
        int(f(p["t"]))
        for f in (prefill_fit if p["kind"] == "prefill" else step_fit).values()
    )
    for p in points
    if p["kind"] != "decode_sdpa"
}
cached_values = 2 * layer_shape["n_head"] * d_head  # K and V, per position
per_value = {  # bytes per cached key or value entry: the slope in T
    kind: float(fit(2) - fit(1)) / cached_values
    for kind, fit in step_fit.items()
}
longest = max(p["t"] for p in decode_ref)
longest_prefill = max(p["t"] for p in prefill)
prefill_ops = [
    {
        "t": p["t"],
        "mib": moved["prefill", p["t"]] / 2**20,
        "fewest_mib": p["flops"] / p["intensity"] / 2**20,
        "intensity": p["flops"] / moved["prefill", p["t"]],
        "side": "left"
        if p["flops"] / moved["prefill", p["t"]] < ridge
        else "right",
        # its matmuls at the peak, then all those bytes at the bandwidth
        # (no overlap): the most the two roofs can account for
        "roofs_ms": (p["flops"] / peak + moved["prefill", p["t"]] / bandwidth)
        * 1e3,
        "ms": p["ms"],
    }
    for p in prefill
]
step_ms = next(p["ms"] for p in decode_ref if p["t"] == longest)
glue.value(
    "traffic",
    {
        "per_value": per_value,
        "per_value_total": sum(per_value.values()),
        "per_value_fewest": 4,  # K and V read once, float32
        "checks_exceed_copy": per_value["elementwise"] > per_value["cat"],
        "step_t": longest,
        "step_mib": moved["decode", longest] / 2**20,
        "step_ms": step_ms,  # measured, and those bytes at the bandwidth:
        "step_bandwidth_ms": moved["decode", longest] / bandwidth * 1e3,
        "step_fewest_mib": cost.bytes_moved(
            1,
            1,
            longest,
            layer_shape["d_model"],
            layer_shape["n_head"],
            bytes_per_value=4,
            cached=True,
        )
        / 2**20,
        "prefill": prefill_ops,
        "prefill_last": prefill_ops[-1],
    },
)


MARKERS = {"prefill": "o", "decode": "s", "decode_sdpa": "^"}


def draw_roofline(fig, theme):
    here = fig.subplots()
    grid = np.logspace(-1.5, 3.5, 200)  # FLOP/byte
    for c, style in zip(cpu["peak_gflops"], ("-", "--"), strict=False):
        top = cpu["peak_gflops"][c] * 1e9
        slope = cpu["bandwidth_gbs"][c] * 1e9  # that many threads' copy
        here.plot(
            grid,
            np.minimum(top, slope * grid) / 1e9,
            style,
            color=theme.text,
            linewidth=1.2,
            label=f"roof, {c} thread{'s' if c != '1' else ''}",
        )
    for series, (kind, label) in enumerate(KIND_LABEL.items()):
        mine = [p for p in points if p["kind"] == kind]
        here.plot(
            [p["intensity"] for p in mine],
            [p["gflops"] for p in mine],
            MARKERS[kind],
            color=theme.series[series],
            label=label if kind != "prefill" else "prefill (its T)",
        )
    for p in prefill:  # each prefill's T; the steps: the next figure
        here.annotate(
            f"{p['t']:,}",
            (p["intensity"], p["gflops"]),
            xytext=(0, -14),
            textcoords="offset points",
            ha="center",
        )
    here.axvline(ridge, color=theme.muted, linestyle=":")
    here.set_title("This CPU, float32 (measured)")
    here.set_ylabel("GFLOP/s (log scale)")
    here.set_xlabel("FLOP per byte (log scale)")
    here.set_xscale("log")
    here.set_yscale("log")
    here.minorticks_off()  # cheaper to draw; a tick per power
    here.grid(True, alpha=0.4)
    fig.legend(loc="outside lower center", ncols=2, fontsize=8)


glue.figure(
    "cost-roofline",
    draw_roofline,
    figsize=(3.7, 4.2),
    alt=(
        "A log-log roofline of this CPU measured in float32: attainable "
        "GFLOP/s against FLOP per byte, a slanted bandwidth roof meeting "
        f"the flat compute roof at {ridge:.1f} FLOP/byte; the prefill "
        "points, labelled with their T, lie at "
        f"{prefill[0]['intensity']:.0f} to {prefill[-1]['intensity']:.0f} "
        "FLOP/byte, the decoding steps all at "
        f"{decode_sdpa[-1]['intensity']:.2f}, the SDPA steps above the "
        "reference's."
    ),
)


def draw_share(fig, theme):
    share = fig.subplots()
    for series, (kind, label) in enumerate(KIND_LABEL.items()):
        mine = [p for p in points if p["kind"] == kind]
        share.plot(
            [p["t"] for p in mine],
            [p["share_of_roof"] for p in mine],
            MARKERS[kind] + "-",
            color=theme.series[series],
            label=label,
        )
    share.set_xscale("log", base=2)
    share.set_ylim(0, 1)
    share.set_title("Share of its roof reached")
    share.set_ylabel("measured / roof")
    share.set_xlabel("T, or the cache length (log scale)")
    share.minorticks_off()
    share.grid(True, alpha=0.4)
    fig.legend(loc="outside lower center", ncols=3, fontsize=8)


glue.figure(
    "cost-roofline-share",
    draw_share,
    figsize=(3.3, 3.2),  # inside a box: narrower than the page's column
    alt=(
        "The share of its roof each call reaches, against T or the cache "
        "length: the SDPA step between "
        f"{roofline['sdpa_share'][0]:.2f} and "
        f"{roofline['sdpa_share'][1]:.2f}, the reference step between "
        f"{roofline['reference_share'][0]:.2f} and "
        f"{roofline['reference_share'][1]:.2f}, the prefills between "
        f"{min(p['share_of_roof'] for p in prefill):.2f} and "
        f"{max(p['share_of_roof'] for p in prefill):.2f}."
    ),
)


def draw_gpu(fig, theme):
    gpu = fig.subplots()
    ggrid = np.logspace(-0.5, 4, 200)
    gpu.plot(
        ggrid,
        np.minimum(gpu_peak, gpu_bandwidth * ggrid) / 1e12,
        "-",
        color=theme.text,
        linewidth=1.2,
        label="roof (specification)",
    )
    for series, p in enumerate(gpu_points):
        gpu.plot(
            p["intensity"],
            p["bound_tflops"],
            "os^D"[series],
            color=theme.series[series],
            label=p["label"],
        )
    if gpu_measured["present"]:  # the lent GPU's own roof and points
        top = gpu_measured["peak_tflops"] * 1e12
        slope = gpu_measured["bandwidth_tbps"] * 1e12
        gpu.plot(
            ggrid,
            np.minimum(top, slope * ggrid) / 1e12,
            "--",
            color=theme.muted,
            label=f"{gpu_measured['device']} (measured)",
        )
        gpu.plot(
            [p["intensity"] for p in gpu_measured["points"]],
            [p["tflops"] for p in gpu_measured["points"]],
            "x",
            color=theme.text,
            label="the layer, measured",
        )
    gpu.axvline(gpu_ridge, color=theme.muted, linestyle=":")
    gpu.set_title(f"{spec['name']}, bf16 (spec.)")
    gpu.set_ylabel("TFLOP/s (log scale)")
    gpu.set_xlabel("FLOP per byte (log scale)")
    gpu.set_xscale("log")
    gpu.set_yscale("log")
    gpu.minorticks_off()  # cheaper to draw; a tick per power
    gpu.grid(True, alpha=0.4)
    fig.legend(loc="outside lower center", fontsize=8)  # clear of the roof


glue.figure(
    "cost-roofline-gpu",
    draw_gpu,
    figsize=(3.7, 5.0),
    alt=(
        f"A log-log roofline of the {spec['name']} from its specifications: "
        f"the ridge at {gpu_ridge:.0f} FLOP/byte, a prefill of Llama 2 7B's "
        "layer on the flat roof, and its decoding steps, one sequence or "
        "64, and Llama 3 8B's batch of 64, on the slanted one."
    ),
)


# %% [markdown]
# ## A decoding step on a GPU: its floor, and the batch that ends it
#
# From the published specifications in `cost.GPU_SPECS` (not measured):
# each GPU's dense bfloat16 peak, its HBM bandwidth and their ratio,
# the ridge point. Then Llama 3 8B's attention layer (Table 3 of its
# paper: $d_\text{model}$ = 4096, 32 query heads, 8 key/value heads of
# 128) in bfloat16: the bytes a decoding step must read, the time those
# bytes take at the bandwidth (`decode_floor`), and the smallest batch
# whose step reaches the ridge (`memory_bound_batch`), by cache length,
# and the shortest cache from which no batch does (`memory_bound_from`).

# %%
ridges = {}
for name, gpu_spec in cost.GPU_SPECS.items():
    dense = gpu_spec["bf16_sparse_tflops"] / 2 * 1e12  # FLOP/s, dense
    bandwidth_bps = gpu_spec["hbm_tbps"] * 1e12  # bytes/s
    ridges[name] = {
        **gpu_spec,
        "bf16_dense_tflops": dense / 1e12,
        "bandwidth": bandwidth_bps,
        "ridge": dense / bandwidth_bps,  # FLOP per byte
    }
glue.value("gpus", ridges)
glue.table(
    "cost-gpus",
    ["GPU", "bf16 dense TFLOP/s", "HBM TB/s", "ridge (FLOP / byte)"],
    [
        [
            name,
            fmt(g["bf16_dense_tflops"], 4),
            fmt(g["hbm_tbps"], 3),
            fmt(g["ridge"], 3),
        ]
        for name, g in ridges.items()
    ],
    "lrrr",
)
LLAMA3 = (4096, 32, 8)  # d_model, n_head, n_kv_head: its paper, Table 3
LLAMA2 = (4096, 32, 32)  # LlamaConfig's defaults: Llama 2 7B
FLOOR_T = 4096
floors = {
    f"{gpu}, B = {b}": cost.decode_floor(
        b, FLOOR_T, *LLAMA3, bandwidth=ridges[gpu]["bandwidth"]
    )
    for gpu in ("H100 SXM", "H200 SXM")
    for b in (1, 64)
}
one = floors["H100 SXM, B = 1"]
batched = floors["H100 SXM, B = 64"]
glue.value(
    "decode_floor",
    {
        "t": FLOOR_T,
        "weights_mib": one["weights"] / 2**20,
        "cache_mib": one["cache"] / 2**20,
        "weights_over_cache": one["weights"] / one["cache"],
        "h100_us": one["seconds"] * 1e6,
        "h200_us": floors["H200 SXM, B = 1"]["seconds"] * 1e6,
        "batch": 64,
        "batch_cache_mib": batched["cache"] / 2**20,
        "batch_cache_share": batched["cache"]
        / (batched["cache"] + batched["weights"]),
        "batch_h100_us": batched["seconds"] * 1e6,
        "batch_per_sequence_us": batched["seconds"] * 1e6 / 64,
    },
)
BATCH_T = (1, 16, 32, 64, 128, 4096)
MODELS_BY_SHAPE = (("Llama 2 7B", LLAMA2), ("Llama 3 8B", LLAMA3))
BOARDS = ("H100 SXM", "H200 SXM")
thresholds = {
    model: {
        gpu: [
            cost.memory_bound_batch(t, *shape, ridge=ridges[gpu]["ridge"])
            for t in BATCH_T
        ]
        for gpu in BOARDS
    }
    for model, shape in MODELS_BY_SHAPE
}
# a sequence's own reads: the intensity an unbounded batch tends to
own = {
    model: [
        cost.arithmetic_intensity(2**40, 1, t, *shape, cached=True)
        for t in BATCH_T
    ]
    for model, shape in MODELS_BY_SHAPE
}
# the shortest cache from which no batch reaches the ridge
onsets = {
    model: {
        gpu: cost.memory_bound_from(*shape, ridge=ridges[gpu]["ridge"])
        for gpu in BOARDS
    }
    for model, shape in MODELS_BY_SHAPE
}


def weights_share(batch, t, shape):
    """The weights' share of a decoding step's bytes (bytes_moved)."""
    floor = cost.decode_floor(batch, t, *shape, bandwidth=1.0)
    moved = cost.bytes_moved(batch, 1, t, *shape, cached=True)
    return floor["weights"] / moved


def cache_passes_weights(shape):
    """The cache length at which one sequence's cache reaches the
    weights (decode_floor's two terms)."""
    per_token = cost.decode_floor(1, 1, *shape, bandwidth=1.0)
    return -(-per_token["weights"] // per_token["cache"])  # ceil


l3 = thresholds["Llama 3 8B"]
# the rows of the table just below and above the H100's onset
below = max(t for t in BATCH_T if t < onsets["Llama 3 8B"]["H100 SXM"])
below_batch = l3["H100 SXM"][BATCH_T.index(below)]
# a batch of 64 at FLOOR_T: what the weight products and the attention
# over the cache each do per byte they read
parts = cost.attention_flops(64, 1, FLOOR_T, *LLAMA3, cached=True)
projection_flops = sum(parts[p] for p in ("q", "k", "v", "out"))
moved64 = cost.bytes_moved(64, 1, FLOOR_T, *LLAMA3, cached=True)
projection_bytes = moved64 - batched["cache"]  # weights, inputs, outputs
glue.value(
    "batch_threshold",
    {
        "t": list(BATCH_T),
        "batches": thresholds,
        "own_intensity": own,
        "empty": {gpu: l3[gpu][0] for gpu in l3},
        "onset": onsets,
        # G: the query heads each key/value head serves
        "g": {model: shape[1] // shape[2] for model, shape in MODELS_BY_SHAPE},
        "below_t": below,
        "below_batch": below_batch,
        "below_weights_share": weights_share(below_batch, below, LLAMA3),
        "long_own": own["Llama 3 8B"][-1],
        "cache_passes_weights": {
            model: cache_passes_weights(shape)
            for model, shape in MODELS_BY_SHAPE
        },
        "projection_intensity": projection_flops / projection_bytes,
        "attention_intensity": (parts["scores"] + parts["weighted_sum"])
        / batched["cache"],
        # decode_floor leaves out the inputs and outputs; bytes_moved
        # counts them
        "io_mib": (moved64 - batched["weights"] - batched["cache"]) / 2**20,
        "floor_mib": (batched["weights"] + batched["cache"]) / 2**20,
    },
)


def batch_cell(b):
    return "never" if b is None else f"{b:,}"


for model in thresholds:  # one table per model: four columns fit a phone
    glue.table(
        f"cost-decode-batch-{model.lower().replace(' ', '-')}",
        [
            "cache (tokens)",
            "H100",
            "H200",
            "FLOP / byte as the batch grows (limit)",
        ],
        [
            [f"{t:,}"]
            + [batch_cell(thresholds[model][g][i]) for g in BOARDS]
            + [grouped(own[model][i], 3)]
            for i, t in enumerate(BATCH_T)
        ],
        "rrrr",
    )
