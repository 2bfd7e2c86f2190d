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
from pathlib import Path

import numpy as np
import torch
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
# ## Where the $T^2$ term overtakes the $d^2$ term
#
# The projections grow as $T d_\text{model}^2$, the scores and the
# weighted sum as $T^2 d_\text{model}$. The smallest $T$ at which the
# second reaches the first, found by bisection on `attention_flops`
# (dense) and on `useful_flops` (only the causal triangle), for a few
# real shapes.


# %%
def crossover(parts_at, d_model):
    """Smallest T with scores + weighted sum >= the four projections."""

    def attention_wins(t):
        p = parts_at(t)
        projections = p["q"] + p["k"] + p["v"] + p["out"]
        return p["scores"] + p["weighted_sum"] >= projections

    lo, hi = 1, 64 * d_model
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if attention_wins(mid) else (mid + 1, hi)
    return lo


SHAPES = {  # d_model, n_head, n_kv_head
    "GPT-2 small": (768, 12, 12),
    "Llama 2 7B": (4096, 32, 32),
    "Llama 3 8B": (4096, 32, 8),
}
crossings = {}
for name, (d, h, h_kv) in SHAPES.items():
    dense_t = crossover(
        lambda t, d=d, h=h, h_kv=h_kv: cost.attention_flops(
            1, t, t, d, h, h_kv
        ),
        d,
    )
    causal_t = crossover(
        lambda t, d=d, h=h, h_kv=h_kv: cost.useful_flops(1, t, t, d, h, h_kv),
        d,
    )
    crossings[name] = {
        "d_model": d,
        "n_head": h,
        "n_kv_head": h_kv,
        "dense_t": dense_t,
        "dense_over_d": dense_t / d,
        "causal_t": causal_t,
        "causal_over_d": causal_t / d,
    }
crossing = glue.value("crossover", crossings)
gpt2 = crossing["GPT-2 small"]
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
    for t, style, side in (
        (gpt2["dense_t"], ":", "right"),
        (gpt2["causal_t"], "-.", "left"),
    ):
        ax.axvline(t, color=theme.muted, linestyle=style)
        ax.annotate(
            f"T = {t:,}",
            (t, proj[0]),
            xytext=(-4 if side == "right" else 4, 0),
            textcoords="offset points",
            ha=side,
        )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length T (log scale)")
    ax.set_ylabel("forward FLOPs (log scale)")
    ax.set_title("One layer, d_model = 768, 12 heads, B = 1")
    ax.grid(True, alpha=0.4)
    ax.legend(loc="upper left")


glue.figure(
    "cost-crossover",
    draw_crossover,
    figsize=(7.0, 3.6),
    alt=(
        "Log-log chart of one layer's forward FLOPs against T for "
        "d_model 768 and 12 heads: the projections grow as a line of "
        "slope 1, the scores and weighted sum as a line of slope 2 that "
        f"crosses it at T = {gpt2['dense_t']:,}, or at T = "
        f"{gpt2['causal_t']:,} when only the causal pairs are counted."
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
tb, th, tt, tdh = 1, 2, 256, 64  # B, H, T, d_head of the tiled check
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
            fmt(r["tiled_over_useful"], 3),
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
# log-sum-exp per row instead.


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


mb, mt, md, mh = 2, 128, 256, 4  # the measured layer: B, T, d, H
torch.manual_seed(2)
small = torch_ref.MultiHeadAttention(md, mh)
xs = torch.randn(mb, mt, md, requires_grad=True)
measured = {
    "weights": kept_bytes(lambda: small(xs)[0], small.parameters()),
    "no_weights": kept_bytes(
        lambda: torch_ref.sdpa_forward(small, xs), small.parameters()
    ),
}
formula_bytes = {
    "weights": cost.saved_activation_bytes(mb, mt, md, mh, 4),
    "no_weights": cost.saved_activation_bytes(
        mb, mt, md, mh, 4, weights=False
    ),
}
memory_rows = []
for t in (1024, 4096, 16384):
    with_w = cost.saved_activation_bytes(1, t, 768, 12, 2)
    without_w = cost.saved_activation_bytes(1, t, 768, 12, 2, weights=False)
    memory_rows.append(
        {
            "t": t,
            "with_mib": with_w / 2**20,
            "without_mib": without_w / 2**20,
            "ratio": with_w / without_w,
            "weights_share": 1 - without_w / with_w,
        }
    )
memory = glue.value(
    "memory",
    {
        "measured": measured,
        "formula": formula_bytes,
        "equal": measured == formula_bytes,
        "batch": mb,
        "t": mt,
        "d_model": md,
        "n_head": mh,
        "rows": memory_rows,
    },
)
glue.table(
    "cost-memory",
    ["T", "with the weights (MiB)", "without (MiB)", "with / without"],
    [
        [
            f"{r['t']:,}",
            fmt(r["with_mib"], 4),
            fmt(r["without_mib"], 4),
            fmt(r["ratio"], 3),
        ]
        for r in memory_rows
    ],
    "rrrr",
)

# %% [markdown]
# ## The KV cache of real models
#
# Per token, every layer, bfloat16 (2 bytes a value), from
# `kv_cache_bytes`; DeepSeek-V3's multi-head latent attention caches a
# latent and one shared rotary key instead, and its row comes from the
# latent-attention module (`latent_torch.latent_cache_bytes_per_token`,
# measured on a real `LatentCache`). First the formula against a cache
# that `kv_cache.cached_step` filled.

# %%
torch.manual_seed(3)
layer = torch_ref.MultiHeadAttention(64, 8, n_kv_head=2)
cache = kv_cache.KVCache()
with torch.no_grad():
    for n in (12, 1, 1, 1):  # a prefill, then three steps
        kv_cache.cached_step(layer, cache, torch.randn(3, n, 64))
cache_check = glue.value(
    "cache_check",
    {
        "measured": cache.keys.nbytes + cache.values.nbytes,
        "formula": 3 * cost.kv_cache_bytes(1, 2, 8, cache.length, 4),
        "batch": 3,
        "tokens": cache.length,
    },
)

MODELS = [  # name, n_layer, n_head, n_kv_head, d_head, source
    ("GPT-2 (small)", 12, 12, 12, 64, "GPT2Config"),
    ("Llama 2 7B", 32, 32, 32, 128, "LlamaConfig"),
    ("Llama 2 70B", 80, 64, 8, 128, "Llama 2 paper, config.json"),
    ("Llama 3 8B", 32, 32, 8, 128, "Llama 3 paper, Table 3"),
    ("Llama 3 70B", 80, 64, 8, 128, "Llama 3 paper, Table 3"),
    ("Mistral 7B", 32, 32, 8, 128, "MistralConfig"),
]
context = 32768  # tokens of one sequence
kv_rows = []
for name, n_layer, h, h_kv, dh, source in MODELS:
    per_token = cost.kv_cache_bytes(n_layer, h_kv, dh, 1, 2)
    kv_rows.append(
        {
            "model": name,
            "n_layer": n_layer,
            "n_head": h,
            "cached": f"{h_kv} x {dh}",
            "per_token": per_token,
            "source": source,
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
kv_rows.append(
    {
        "model": "DeepSeek-V3 (MLA)",
        "n_layer": latent_torch.DEEPSEEK_V3_LAYERS,
        "n_head": shapes["n_head"],
        "cached": (
            f"{shapes['kv_lora_rank']} + {shapes['qk_rope_head_dim']} (latent)"
        ),
        "per_token": latent_torch.DEEPSEEK_V3_LAYERS * mla_layer,
        "source": "DeepseekV3Config",
    }
)
for row in kv_rows:
    row["kib_per_token"] = row["per_token"] / 2**10
    row["gib_context"] = row["per_token"] * context / 2**30
kv = glue.value(
    "kv", {"rows": {r["model"]: r for r in kv_rows}, "context": context}
)
glue.table(
    "cost-kv-cache",
    [
        "model",
        "layers",
        "K, V heads x size",
        "KiB per token",
        f"GiB at {context:,} tokens",
        "shapes from",
    ],
    [
        [
            r["model"],
            str(r["n_layer"]),
            r["cached"],
            fmt(r["kib_per_token"], 4),
            fmt(r["gib_context"], 3),
            r["source"],
        ]
        for r in kv_rows
    ],
    "lrlrrl",
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
cpu, spec, layer_shape = bench["cpu"], bench["gpu_spec"], bench["layer"]
threads = str(cpu["layer_threads"])
peak = cpu["peak_gflops"][threads] * 1e9  # FLOP/s on the layer's threads
bandwidth = cpu["bandwidth_gbs"][threads] * 1e9  # bytes/s, as many threads
ridge = peak / bandwidth  # FLOP/byte where the two roofs meet
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
big = {"d_model": 4096, "n_head": 32}  # Llama 2 7B's layer, bf16
gpu_points = []
for kind, t in (("prefill", 4096), ("decode", 4096), ("decode, B = 64", 4096)):
    batch = 64 if "64" in kind else 1
    tq, cached = (t, False) if kind == "prefill" else (1, True)
    intensity = cost.arithmetic_intensity(
        batch, tq, t, **big, bytes_per_value=2, cached=cached
    )
    gpu_points.append(
        {
            "kind": kind,
            "t": t,
            "batch": batch,
            "intensity": intensity,
            "bound_tflops": min(gpu_peak, gpu_bandwidth * intensity) / 1e12,
            "side": "compute" if intensity > gpu_ridge else "bandwidth",
        }
    )
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
roofline = glue.value(
    "roofline",
    {
        "cpu_name": bench["environment"]["cpu"],
        "threads": cpu["layer_threads"],
        "peak_gflops": cpu["peak_gflops"],
        "bandwidth_gbs": cpu["bandwidth_gbs"],
        "ridge": ridge,
        "points": points,
        "prefill": [p for p in points if p["kind"] == "prefill"],
        "decode": [p for p in points if p["kind"] == "decode"],
        "decode_sdpa": [p for p in points if p["kind"] == "decode_sdpa"],
        "layer": layer_shape,
        "runs": bench["runs"],
        "all_threads": max(cpu["peak_gflops"], key=int),
        "peak_all_gflops": cpu["peak_gflops"][
            max(cpu["peak_gflops"], key=int)
        ],
        # what stays in the CPU's largest cache between rounds
        "llc_mib": cpu["last_level_cache_bytes"] / 2**20,
        "copy_mib": cpu["copy_bytes"] / 2**20,
        "weights_mib": 4 * 4 * layer_shape["d_model"] ** 2 / 2**20,
        "longest_cache_mib": cost.kv_cache_bytes(
            1,
            layer_shape["n_head"],
            layer_shape["d_head"],
            max(p["t"] for p in points),
            4,
        )
        / 2**20,
        "commit": bench["environment"]["commit"],
        # the machine's 1-minute load when the run began, and its cores
        "load": bench["environment"]["load_average_at_start"][0],
        "cores": bench["environment"]["cores_available"],
        "torch": bench["environment"]["torch"],
        "gpu": {
            **spec,
            "ridge": gpu_ridge,
            "points": {p["kind"]: p for p in gpu_points},
        },
        "measured_gpu": gpu_measured,
    },
)
KIND_LABEL = {
    "prefill": "prefill",
    "decode": "step, reference",
    "decode_sdpa": "step, SDPA",
}


def ms(value):
    """Milliseconds, 3 significant digits, whole above 100: 5.39, 2,686."""
    millis = 1e3 * value
    return f"{millis:,.0f}" if millis >= 100 else fmt(millis, 3)


glue.table(
    "cost-roofline",
    [
        "call",
        "T",
        "time (ms)",
        "FLOP / byte",
        "GFLOP/s",
        "share of roof",
        "bound by",
    ],
    [
        [
            KIND_LABEL[p["kind"]],
            f"{p['t']:,}",
            ms(p["ms"] / 1e3),
            fmt(p["intensity"], 3),
            fmt(p["gflops"], 3),
            fmt(p["share_of_roof"], 2),
            p["side"],
        ]
        for p in points
    ],
    "lrrrrrl",
)


def draw_roofline(fig, theme):
    here, gpu = fig.subplots(1, 2)
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
    markers = {"prefill": "o", "decode": "s", "decode_sdpa": "^"}
    for series, (kind, label) in enumerate(KIND_LABEL.items()):
        mine = [p for p in points if p["kind"] == kind]
        here.plot(
            [p["intensity"] for p in mine],
            [p["gflops"] for p in mine],
            markers[kind],
            color=theme.series[series],
            label=label,
        )
    here.axvline(ridge, color=theme.muted, linestyle=":")
    here.set_title("This CPU, float32 (measured)")
    here.set_ylabel("GFLOP/s (log scale)")
    here.legend(loc="lower right", fontsize=7)
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
            "os^"[series],
            color=theme.series[series],
            label=f"{p['kind']}, T = {p['t']:,}",
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
            color=theme.series[3],
            label="the layer, measured",
        )
    gpu.axvline(gpu_ridge, color=theme.muted, linestyle=":")
    gpu.set_title(f"{spec['name']}, bf16 (specification)")
    gpu.set_ylabel("TFLOP/s (log scale)")
    gpu.legend(loc="upper left", fontsize=8)
    for ax in (here, gpu):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("FLOP per byte (log scale)")
        ax.grid(True, alpha=0.4)


prefill_last = roofline["prefill"][-1]
decode_last = roofline["decode_sdpa"][-1]
glue.figure(
    "cost-roofline",
    draw_roofline,
    figsize=(8.4, 3.8),
    alt=(
        "Two log-log roofline charts, attainable FLOP/s against FLOP per "
        "byte. Left, this CPU measured in float32: a slanted bandwidth "
        f"roof meets the flat compute roof at {ridge:.1f} FLOP/byte; the "
        f"prefill points lie right of it (up to "
        f"{prefill_last['intensity']:.0f} FLOP/byte, "
        f"{prefill_last['gflops']:.1f} GFLOP/s), the decoding steps far "
        f"left of it at {decode_last['intensity']:.2f} FLOP/byte. Right, "
        f"{spec['name']} from its specifications: the ridge at "
        f"{gpu_ridge:.0f} FLOP/byte, a prefill of Llama 2 7B's layer on "
        "the flat roof and single decoding steps on the slanted one."
    ),
)
