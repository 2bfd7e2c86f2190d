"""Fewer key/value heads: which head each query reads, what it saves.

repeat_kv_heads against the tiled mistake; parameters and KV-cache
bytes per token of real model shapes (inputs below, with sources); the
decode-step times that `make bench` measured (read from the committed
bench/report.json: a build never times anything).
"""

import json
from pathlib import Path

from pipeline.output import fmt, markdown_table

DEPENDS = [
    "mha_ref/torch_ref.py",
    "mha_ref/pitfalls.py",
    "mha_ref/checks.py",
    "bench/report.json",
]
REPORT = Path(__file__).resolve().parents[1] / "bench/report.json"

# Published shapes: d_model, query heads, key/value heads, layers. The
# head size is d_model / n_head in all of them. No biases on q, k, v, o.
MODELS = [
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
BYTES_PER_VALUE = 2  # the cache in bfloat16 or float16
CONTEXT = 4096  # tokens, for the whole-cache column


def attention_params(d_model, n_head, n_kv_head):
    """Wq and Wo are d_model x d_model; Wk and Wv d_model x H_kv dh."""
    d_kv = n_kv_head * (d_model // n_head)
    return 2 * d_model * d_model + 2 * d_model * d_kv


def kv_bytes_per_token(m):
    """K and V, every layer, every key/value head, BYTES_PER_VALUE each."""
    d_head = m["d_model"] // m["n_head"]
    return 2 * m["n_layer"] * m["n_kv_head"] * d_head * BYTES_PER_VALUE


def head_mapping(n_head=8, n_kv_head=2):
    """Which key/value head each query head reads, right and tiled."""
    import torch

    from mha_ref import pitfalls, torch_ref

    group = n_head // n_kv_head
    heads = torch.arange(n_kv_head).view(1, n_kv_head, 1, 1)  # labels
    right = torch_ref.repeat_kv_heads(heads, group).flatten()
    tiled = pitfalls.wrong_tile_kv_heads(heads, group).flatten()
    return {
        "n_head": n_head,
        "n_kv_head": n_kv_head,
        "group": group,
        "right": right,
        "tiled": tiled,
        "same": [h for h in range(n_head) if right[h] == tiled[h]],
    }


def tiled_error(n_head=8, n_kv_head=2, t=6, d_head=4):
    """max |attention - SDPA enable_gqa|, right and with tiled heads."""
    import torch
    import torch.nn.functional as F

    from mha_ref import pitfalls, torch_ref

    gen = torch.Generator().manual_seed(41)

    def randn(*shape):
        return torch.randn(shape, generator=gen, dtype=torch.float64)

    q = randn(1, n_head, t, d_head)  # (B, H, T, dh)
    k, v = randn(1, n_kv_head, t, d_head), randn(1, n_kv_head, t, d_head)
    group = n_head // n_kv_head
    mask = torch_ref.causal_mask(t)
    sdpa = F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=~mask,
        enable_gqa=True,  # SDPA: True = allowed
    )
    right, _ = torch_ref.attention(q, k, v, mask)
    tiled, _ = torch_ref.attention(
        q,
        pitfalls.wrong_tile_kv_heads(k, group),
        pitfalls.wrong_tile_kv_heads(v, group),
        mask,
    )
    per_head = (tiled - sdpa).abs().amax(dim=(0, 2, 3))  # (H,)
    return {
        "right": (right - sdpa).abs().max(),
        "tiled": (tiled - sdpa).abs().max(),
        "tiled_per_head": per_head,
        "output_scale": sdpa.abs().max(),
    }


def check_param_formula():
    """attention_params against torch_ref modules' own parameters."""
    from mha_ref import torch_ref

    counted = {}
    for n_kv in (1, 2, 8):
        module = torch_ref.MultiHeadAttention(64, 8, n_kv_head=n_kv)
        counted[n_kv] = sum(p.numel() for p in module.parameters())
        if counted[n_kv] != attention_params(64, 8, n_kv):
            raise ValueError(f"formula disagrees with the module: {n_kv}")
    return counted


def model_table():
    rows = []
    for m in MODELS:
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
                "kv_bytes_context": per_token * CONTEXT,
            }
        )
    return rows


def bench_decode():
    """The decode part of the committed benchmark report."""
    report = json.loads(REPORT.read_text())
    if "decode" not in report:
        raise ValueError(
            f"{REPORT} has no decode part: run "
            f"`python -m bench --only decode` and commit the report"
        )
    d = report["decode"]
    rows = [
        {
            k: r[k]
            for k in (
                "n_kv_head",
                "reference_s",
                "sdpa_s",
                "cache_bytes",
                "params",
            )
        }
        for r in d["rows"]
    ]
    keep = (
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
    return {**{k: d[k] for k in keep}, "rows": rows}


def compute():
    decode = bench_decode()
    by_heads = {r["n_kv_head"]: r for r in decode["rows"]}
    full, one = by_heads[max(by_heads)], by_heads[min(by_heads)]
    return {
        "mapping": head_mapping(),
        "tiled_error": tiled_error(),
        "param_check": check_param_formula(),
        "models": model_table(),
        "bytes_per_value": BYTES_PER_VALUE,
        "context": CONTEXT,
        "decode": decode,
        "decode_summary": {
            "sdpa_speedup": full["sdpa_s"] / one["sdpa_s"],
            "reference_speedup": full["reference_s"] / one["reference_s"],
            "sdpa_ms_full": full["sdpa_s"] * 1e3,
            "sdpa_ms_one": one["sdpa_s"] * 1e3,
            "reference_ms_full": full["reference_s"] * 1e3,
            "reference_ms_one": one["reference_s"] * 1e3,
        },
    }


def _kib(n):
    return f"{n / 1024:,.0f}"


def render(data, out):
    rows = []
    for i, m in enumerate(data["models"], start=1):
        rows.append(
            [
                f"{m['name']} [^gqa-{i}]",
                str(m["d_model"]),
                f"{m['n_head']} / {m['n_kv_head']}",
                str(m["n_layer"]),
                f"{m['attention_params'] / 1e6:,.0f}M "
                f"({m['attention_params_mha'] / 1e6:,.0f}M)",
                f"{_kib(m['kv_bytes_per_token'])} "
                f"({_kib(m['kv_bytes_per_token_mha'])})",
                f"{m['kv_bytes_context'] / 2**30:.2f}",
            ]
        )
    table = markdown_table(
        [
            "model",
            "d_model",
            "heads q / kv",
            "layers",
            "attention params (as MHA)",
            "KV cache KiB per token (as MHA)",
            f"GiB for {data['context']:,} tokens",
        ],
        rows,
        "lrrrrrr",
    )
    notes = "\n".join(
        f"[^gqa-{i}]: {m['source']}."
        for i, m in enumerate(data["models"], start=1)
    )
    out.table("grouped-models", table + "\n" + notes + "\n")

    decode = data["decode"]
    out.table(
        "grouped-decode",
        markdown_table(
            [
                "KV heads",
                "cache K + V per layer (MiB)",
                "reference step (ms)",
                "SDPA step (ms)",
            ],
            [
                [
                    str(r["n_kv_head"]),
                    f"{r['cache_bytes'] / 2**20:.0f}",
                    f"{r['reference_s'] * 1e3:.1f}",
                    f"{r['sdpa_s'] * 1e3:.1f}",
                ]
                for r in decode["rows"]
            ],
            "rrrr",
        ),
    )

    def draw_bytes(fig, theme):
        ax = fig.subplots()
        models = data["models"]
        names = [m["name"] for m in models]
        y = range(len(models))
        ax.barh(
            [i + 0.2 for i in y],
            [m["kv_bytes_per_token_mha"] / 1024 for m in models],
            height=0.4,
            color=theme.masked,
            label="if every head had K, V",
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
            kib = m["kv_bytes_per_token"] / 1024
            ax.text(
                kib,
                i - 0.2,
                f" {_kib(m['kv_bytes_per_token'])}",
                va="center",
                fontsize=9,
            )
        ax.set_xlabel("KV cache per token (KiB, 16-bit)")
        ax.legend(loc="lower right", fontsize=9)
        ax.grid(axis="x", alpha=0.4)
        ax.set_axisbelow(True)

    out.figure(
        "gqa-kv-bytes",
        draw_bytes,
        figsize=(5.0, 3.4),
        alt=(
            "Horizontal bars of KV-cache kibibytes per token for "
            + "; ".join(
                f"{m['name']}: {_kib(m['kv_bytes_per_token'])} as "
                f"published, {_kib(m['kv_bytes_per_token_mha'])} with "
                "one key/value head per query head"
                for m in data["models"]
            )
            + "."
        ),
    )

    def draw_time(fig, theme):
        ax = fig.subplots()
        heads = [r["n_kv_head"] for r in decode["rows"]]
        for key, label, colour, marker in (
            (
                "reference_s",
                "reference cached_step",
                theme.series[1],
                "s",
            ),
            (
                "sdpa_s",
                "SDPA, enable_gqa, cache allocated once",
                theme.series[0],
                "o",
            ),
        ):
            ax.plot(
                heads,
                [r[key] * 1e3 for r in decode["rows"]],
                marker=marker,
                color=colour,
                label=label,
            )
        ax.set_xscale("log", base=2)
        ax.set_xticks(heads, [str(h) for h in heads])
        ax.set_xlabel(f"key/value heads (of {decode['n_head']} query heads)")
        ax.set_ylabel("one decode step (ms)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.4)
        ax.legend(fontsize=9)

    out.figure(
        "gqa-decode-time",
        draw_time,
        figsize=(5.0, 3.2),
        alt=(
            "Median time of one decode step against the number of "
            f"key/value heads, cache of {decode['cache_length']} "
            "positions: "
            + "; ".join(
                f"{r['n_kv_head']} heads: reference "
                f"{fmt(r['reference_s'] * 1e3, 3)} ms, SDPA "
                f"{fmt(r['sdpa_s'] * 1e3, 3)} ms"
                for r in decode["rows"]
            )
            + "."
        ),
    )
