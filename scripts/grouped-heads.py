# %% [markdown]
# ## Which key/value head each query head reads
#
# Label each of 2 key/value heads with its own number and copy them to
# 8 query heads: `repeat_kv_heads` gives each head $G$ times in a row,
# so query head $h$ reads head $h \mathbin{//} G$; the `repeat` mistake
# tiles the whole set, so head $h$ reads $h \bmod H_{kv}$. Change
# `n_head` and `n_kv_head` ($H_{kv}$ must divide $H$) and rerun.

# %%
import itertools
import json
import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import glue
from mha_ref import pitfalls, torch_ref

n_head, n_kv_head = 8, 2
group = n_head // n_kv_head  # G: query heads per key/value head
labels = torch.arange(n_kv_head).view(1, n_kv_head, 1, 1)  # (B, H_kv, 1, 1)
right = torch_ref.repeat_kv_heads(labels, group).flatten()  # (H,)
tiled = pitfalls.wrong_tile_kv_heads(labels, group).flatten()  # (H,)
print("repeat_kv_heads :", right.tolist())
print("repeat (tiled)  :", tiled.tolist())
mapping = glue.value(
    "mapping",
    {
        "n_head": n_head,
        "n_kv_head": n_kv_head,
        "group": group,
        "right": right,
        "tiled": tiled,
        "same": [h for h in range(n_head) if right[h] == tiled[h]],
    },
)

# %% [markdown]
# ## Grouped attention against SDPA
#
# `torch_ref.attention` accepts $k$ and $v$ with fewer heads and repeats
# them itself; SDPA with `enable_gqa=True` reads the shared heads in
# place. On random float64 inputs with a causal mask the two agree.
# With the heads tiled instead, the query heads that happen to read the
# right head still agree, and the others do not, so a test of head 0
# alone would pass.

# %%
gen = torch.Generator().manual_seed(41)


def randn(*shape):
    return torch.randn(shape, generator=gen, dtype=torch.float64)


T, d_head = 6, 4
q = randn(1, n_head, T, d_head)  # (B, H, T, dh)
k = randn(1, n_kv_head, T, d_head)  # (B, H_kv, T, dh)
v = randn(1, n_kv_head, T, d_head)
mask = torch_ref.causal_mask(T)  # (T, T), True = blocked
sdpa = F.scaled_dot_product_attention(
    q,
    k,
    v,
    attn_mask=~mask,
    enable_gqa=True,  # SDPA: True = allowed
)
ours, _ = torch_ref.attention(q, k, v, mask)
tiled_kv = [pitfalls.wrong_tile_kv_heads(t, group) for t in (k, v)]
wrong, _ = torch_ref.attention(q, *tiled_kv, mask)
per_head = (wrong - sdpa).abs().amax(dim=(0, 2, 3))  # (H,)
for h, diff in enumerate(per_head.tolist()):
    print(
        f"tiled, query head {h}: reads head {h % n_kv_head} "
        f"(should be {h // group}), difference {diff:.2e}"
    )
glue.value(
    "tiled_error",
    {
        "right": (ours - sdpa).abs().max(),
        "tiled": (wrong - sdpa).abs().max(),
        "tiled_per_head": per_head,
        # the heads that read the right head by chance: rounding only
        "same_max": per_head[mapping["same"]].max(),
        "output_scale": sdpa.abs().max(),
    },
)

# %% [markdown]
# ## What shrinks: parameters and cache
#
# Only $W_K$, $W_V$ and the cache shrink with $H_{kv}$; $W_Q$ and $W_O$
# stay $d_\text{model} \times d_\text{model}$. The cell checks the
# parameter formula against `torch_ref.MultiHeadAttention`'s own count
# for a layer of width 64 with 8 query heads.


# %%
def attention_params(d_model, n_head, n_kv_head):
    """Wq and Wo are d_model x d_model; Wk and Wv d_model x H_kv dh."""
    d_kv = n_kv_head * (d_model // n_head)
    return 2 * d_model * d_model + 2 * d_model * d_kv


param_check = {}
for n_kv in (1, 2, 8):
    module = torch_ref.MultiHeadAttention(64, 8, n_kv_head=n_kv)
    param_check[n_kv] = sum(p.numel() for p in module.parameters())
    if param_check[n_kv] != attention_params(64, 8, n_kv):
        raise ValueError(f"formula disagrees with the module: {n_kv}")
    print(
        f"H_kv = {n_kv}: wk.weight {tuple(module.wk.weight.shape)}, "
        f"parameters {param_check[n_kv]:,}"
    )
glue.value("param_check", param_check)

# %% [markdown]
# ## Published models
#
# The shapes of published models (d_model, query heads, key/value heads,
# layers; the head size is d_model / n_head in all of them, no biases
# on q, k, v, o), their attention parameters summed over the layers,
# and the KV cache per token in 16-bit floats: K and V, every layer,
# every key/value head. Each figure is also given as if every query
# head had its own key/value head (MHA).

# %%
models = [
    {
        "name": "Llama 2 7B",
        "d_model": 4096,
        "n_head": 32,
        "n_kv_head": 32,
        "n_layer": 32,
        "source": "Touvron et al. 2023, Llama 2, arXiv:2307.09288; "
        "the shape of meta-llama/Llama-2-7b-hf",
    },
    {
        "name": "Llama 2 70B",
        "d_model": 8192,
        "n_head": 64,
        "n_kv_head": 8,
        "n_layer": 80,
        "source": "Touvron et al. 2023, Llama 2, arXiv:2307.09288 "
        "(grouped-query attention for 34B and 70B); the shape "
        "of meta-llama/Llama-2-70b-hf",
    },
    {
        "name": "Llama 3 8B",
        "d_model": 4096,
        "n_head": 32,
        "n_kv_head": 8,
        "n_layer": 32,
        "source": "Llama Team 2024, The Llama 3 Herd of Models, "
        "arXiv:2407.21783, Table 3",
    },
    {
        "name": "Mistral 7B",
        "d_model": 4096,
        "n_head": 32,
        "n_kv_head": 8,
        "n_layer": 32,
        "source": "Jiang et al. 2023, Mistral 7B, arXiv:2310.06825, Table 1",
    },
    {
        "name": "Falcon-7B",
        "d_model": 4544,
        "n_head": 71,
        "n_kv_head": 1,
        "n_layer": 32,
        "source": "Almazrouei et al. 2023, The Falcon Series of Open "
        "Language Models, arXiv:2311.16867; tiiuae/falcon-7b",
    },
]
bytes_per_value = glue.value("bytes_per_value", 2)  # bfloat16 or float16
context = glue.value("context", 4096)  # tokens, for the whole cache


def kv_bytes_per_token(m):
    """K and V, every layer, every key/value head, bytes_per_value each."""
    d_head = m["d_model"] // m["n_head"]
    return 2 * m["n_layer"] * m["n_kv_head"] * d_head * bytes_per_value


rows = []
for m in models:
    mha = {**m, "n_kv_head": m["n_head"]}
    per_token = kv_bytes_per_token(m)
    rows.append(
        {
            **m,
            "d_head": m["d_model"] // m["n_head"],
            "group": m["n_head"] // m["n_kv_head"],
            "attention_params": m["n_layer"]
            * attention_params(m["d_model"], m["n_head"], m["n_kv_head"]),
            "attention_params_mha": m["n_layer"]
            * attention_params(m["d_model"], m["n_head"], m["n_head"]),
            "kv_bytes_per_token": per_token,
            "kv_bytes_per_token_mha": kv_bytes_per_token(mha),
            "kv_bytes_context": per_token * context,
        }
    )
models = glue.value("models", rows)


def kib(n):
    return f"{n / 1024:,.0f}"


glue.table(
    "grouped-models",
    [
        "model",
        "d_model",
        "heads q / kv",
        "layers",
        "attention params, M (MHA)",
        "KV KiB / token (MHA)",
        f"GiB @ {context:,} tokens",
    ],
    [
        [
            f"{m['name']} [^gqa-{i}]",  # footnote: the page lists sources
            str(m["d_model"]),
            f"{m['n_head']} / {m['n_kv_head']}",
            str(m["n_layer"]),
            f"{m['attention_params'] / 1e6:,.0f} "
            f"({m['attention_params_mha'] / 1e6:,.0f})",
            f"{kib(m['kv_bytes_per_token'])} "
            f"({kib(m['kv_bytes_per_token_mha'])})",
            f"{m['kv_bytes_context'] / 2**30:.2f}",
        ]
        for i, m in enumerate(models, start=1)
    ],
    "lrrrrrr",
)


def draw_bytes(fig, theme):
    ax = fig.subplots()
    names = [m["name"] for m in models]
    y = range(len(models))
    ax.barh(
        [i + 0.2 for i in y],
        [m["kv_bytes_per_token_mha"] / 1024 for m in models],
        height=0.4,
        color=theme.masked,
        label="one K/V head per query head (MHA)",
    )
    ax.barh(
        [i - 0.2 for i in y],
        [m["kv_bytes_per_token"] / 1024 for m in models],
        height=0.4,
        color=theme.series[0],
        label="as published",
    )
    ax.set_yticks(list(y), names)
    ax.invert_yaxis()
    for i, m in enumerate(models):
        ax.text(
            m["kv_bytes_per_token"] / 1024,
            i - 0.2,
            f" {kib(m['kv_bytes_per_token'])}",
            va="center",
            fontsize=9,
        )
    ax.set_xlabel("KV cache per token (KiB, 16-bit)")
    ax.legend(loc="lower right", fontsize=9)
    ax.grid(axis="x", alpha=0.4)
    ax.set_axisbelow(True)


glue.figure(
    "gqa-kv-bytes",
    draw_bytes,
    figsize=(5.0, 3.4),
    alt=(
        "Horizontal bars of KV-cache kibibytes per token for "
        + "; ".join(
            f"{m['name']}: {kib(m['kv_bytes_per_token'])} as "
            f"published, {kib(m['kv_bytes_per_token_mha'])} with "
            "one key/value head per query head"
            for m in models
        )
        + "."
    ),
)

# %% [markdown]
# ## Time of one decode step: from the committed benchmark
#
# These timings are not measured here: `python -m bench --only decode`
# (part of `make bench`) timed one decode step of
# `torch_ref.MultiHeadAttention` with a long cache, the reference
# `cached_step` against SDPA with `enable_gqa=True` and a cache
# allocated once, for several numbers of key/value heads, and wrote the
# medians into `bench/decode.json` (its part of `bench/report.json`),
# which the repository commits. The cell reads that file (the notebook
# carries a copy), so the numbers
# change only when the benchmark is rerun, never from one build to the
# next. Besides the medians it takes the spread of the runs (fastest and
# slowest of each), and fits the SDPA medians with a straight line,
# fixed milliseconds per step plus milliseconds per MiB the step reads
# (the cache's K and V and the four projection weights, float32).

# %%
measured = json.loads(Path("bench/decode.json").read_text())
row_keys = (
    "n_kv_head",
    "reference_s",
    "sdpa_s",
    "sdpa_short_s",
    "cache_bytes",
    "params",
)
setup_keys = (
    "batch",
    "d_model",
    "n_head",
    "d_head",
    "cache_length",
    "dtype",
    "threads",
    "runs",
    "environment",
)
MiB = 2**20


def spread(runs):
    """Fastest and slowest run, ms, and their ratio."""
    return {
        "min_ms": min(runs) * 1e3,
        "max_ms": max(runs) * 1e3,
        "ratio": max(runs) / min(runs),
    }


decode = glue.value(
    "decode",
    {
        **{k: measured[k] for k in setup_keys},
        "rows": [
            {
                **{k: r[k] for k in row_keys},
                # K + V of the cache and the weights of wq, wk, wv, wo
                "read_mib": (r["cache_bytes"] + 4 * r["params"]) / MiB,
                "reference_spread": spread(r["reference_runs"]),
                "sdpa_spread": spread(r["sdpa_runs"]),
            }
            for r in measured["rows"]
        ],
    },
)
by_heads = {r["n_kv_head"]: r for r in decode["rows"]}
full, one = by_heads[max(by_heads)], by_heads[min(by_heads)]
glue.value(
    "decode_summary",
    {
        "sdpa_speedup": full["sdpa_s"] / one["sdpa_s"],
        "reference_speedup": full["reference_s"] / one["reference_s"],
        "sdpa_ms_full": full["sdpa_s"] * 1e3,
        "sdpa_ms_one": one["sdpa_s"] * 1e3,
        "reference_ms_full": full["reference_s"] * 1e3,
        "reference_ms_one": one["reference_s"] * 1e3,
    },
)
# least squares: sdpa_ms = fixed_ms + ms_per_mib * read_mib
read = np.array([r["read_mib"] for r in decode["rows"]])
sdpa_ms = np.array([r["sdpa_s"] * 1e3 for r in decode["rows"]])
ms_per_mib, fixed_ms = np.polyfit(read, sdpa_ms, 1)
fitted = fixed_ms + ms_per_mib * read
print(f"SDPA step = {fixed_ms:.2f} ms + {ms_per_mib:.4f} ms per MiB read")
ratios = [
    r[key]["ratio"]
    for r in decode["rows"]
    for key in ("reference_spread", "sdpa_spread")
]
reference_ms = [r["reference_s"] * 1e3 for r in decode["rows"]]


def sign_test(wins, rounds):
    """Two-sided p-value of `wins` in `rounds` under a fair coin."""
    tail = max(wins, rounds - wins)
    p = sum(math.comb(rounds, k) for k in range(tail, rounds + 1))
    return min(1.0, 2 * p / 2**rounds)


def falls(row, following):
    """The reference median falling from `row` to the next head count:
    in how many rounds the step with more heads was the faster, and
    whether a sign test calls that more than chance (5%)."""
    runs = zip(row["reference_runs"], following["reference_runs"], strict=True)
    wins = sum(b < a for a, b in runs)
    rounds = len(row["reference_runs"])
    p = sign_test(wins, rounds)
    return {
        "n_kv_head": row["n_kv_head"],
        "ms": row["reference_s"] * 1e3,
        "next_n_kv_head": following["n_kv_head"],
        "next_ms": following["reference_s"] * 1e3,
        "faster_rounds": wins,
        "rounds": rounds,
        "p": p,
        "significant": p < 0.05,
    }


# the reference copies K and V to all H heads only for 1 < H_kv < H
copying = [
    r["reference_s"] * 1e3
    for r in decode["rows"]
    if 1 < r["n_kv_head"] < decode["n_head"]
]
glue.value(
    "decode_fit",
    {
        "fixed_ms": fixed_ms,
        "ms_per_mib": ms_per_mib,
        # one key/value head: the step with one cached position, what the
        # cache adds to it, and what the cache's bytes cost at the fit
        "short_ms_one": one["sdpa_short_s"] * 1e3,
        "cache_ms_one": (one["sdpa_s"] - one["sdpa_short_s"]) * 1e3,
        "cache_bytes_ms_one": ms_per_mib * one["cache_bytes"] / MiB,
        "reference_copying_ms": [min(copying), max(copying)],
        "largest_residual_ms": float(np.abs(sdpa_ms - fitted).max()),
        # the share of each step the fixed part makes, fewest to most heads
        "fixed_share": [fixed_ms / t for t in sdpa_ms],
        "spread_min": min(ratios),
        "spread_max": max(ratios),
        # where the reference median falls as heads are added, and whether
        # the rounds (the head counts are interleaved in each) agree
        "reference_dips": [
            falls(r, nxt)
            for r, nxt in itertools.pairwise(measured["rows"])
            if r["reference_s"] > nxt["reference_s"]
        ],
    },
)


def ms_range(spread):
    return f"{spread['min_ms']:.1f}-{spread['max_ms']:.1f}"


glue.table(
    "grouped-decode",
    [
        "KV heads",
        "cache K + V per layer (MiB)",
        "read per step (MiB, float32)",
        "reference step (ms): median [fastest-slowest]",
        "SDPA step (ms): median [fastest-slowest]",
    ],
    [
        [
            str(r["n_kv_head"]),
            f"{r['cache_bytes'] / MiB:.0f}",
            f"{r['read_mib']:.1f}",
            f"{r['reference_s'] * 1e3:.1f} "
            f"[{ms_range(r['reference_spread'])}]",
            f"{r['sdpa_s'] * 1e3:.1f} [{ms_range(r['sdpa_spread'])}]",
        ]
        for r in decode["rows"]
    ],
    "rrrrr",
)


def draw_time(fig, theme):
    ax = fig.subplots()
    heads = [r["n_kv_head"] for r in decode["rows"]]
    for key, label, colour, marker in (
        ("reference", "reference cached_step", theme.series[1], "s"),
        (
            "sdpa",
            "SDPA, enable_gqa, cache allocated once",
            theme.series[0],
            "o",
        ),
    ):
        ax.plot(
            heads,
            [r[f"{key}_s"] * 1e3 for r in decode["rows"]],
            marker=marker,
            color=colour,
            label=f"{label} (median)",
        )
        ax.fill_between(  # fastest to slowest run
            heads,
            [r[f"{key}_spread"]["min_ms"] for r in decode["rows"]],
            [r[f"{key}_spread"]["max_ms"] for r in decode["rows"]],
            color=colour,
            alpha=0.2,
            linewidth=0,
        )
    ax.set_xscale("log", base=2)
    ax.set_xticks(heads, [str(h) for h in heads])
    ax.set_xlabel(f"key/value heads (of {decode['n_head']} query heads)")
    ax.set_ylabel("one decode step (ms)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.4)
    ax.legend(loc="upper left", fontsize=9)  # the curves rise to the right


fmt = glue.fmt
glue.figure(
    "gqa-decode-time",
    draw_time,
    figsize=(5.0, 3.2),
    alt=(
        "Median time of one decode step against the number of key/value "
        f"heads, cache of {decode['cache_length']} positions, with a band "
        "from the fastest to the slowest run: "
        + "; ".join(
            f"{r['n_kv_head']} heads: reference "
            f"{fmt(r['reference_s'] * 1e3, 3)} ms, SDPA "
            f"{fmt(r['sdpa_s'] * 1e3, 3)} ms"
            for r in decode["rows"]
        )
        + "."
    ),
)
