"""Decoding with a real KV cache: equal outputs, one query, RoPE.

The KV-cache page's second half: kv_cache.cached_forward against the
full causal forward for several chunkings (float32 and float64), the
one-query case through is_causal=True, RoPE's relative property, and
the cache-relative RoPE bug of pitfalls.wrong_cached_step.
"""

from pipeline.output import fmt, markdown_table

DEPENDS = [
    "mha_ref/tolerances.py",
    "mha_ref/kv_cache.py",
    "mha_ref/torch_ref.py",
    "mha_ref/pitfalls.py",
    "mha_ref/checks.py",
]

# the module every cached run uses: grouped heads and RoPE
MODULE = {"d_model": 32, "n_head": 4, "n_kv_head": 2, "rope": True}
BATCH, T = 2, 12
CHUNKINGS = {  # name: chunk lengths, summing to T
    "prefill 8, then 4 single steps": [8, 1, 1, 1, 1],
    "12 single steps": [1] * 12,
    "one chunk of 12": [12],
    "chunks of 3, 5 and 4": [3, 5, 4],
}
SHIFTS = [1, 7, 100, 1000]  # added to both positions: m + s, n + s


def _module(dtype):
    import torch

    from mha_ref import torch_ref

    module = torch_ref.MultiHeadAttention(**MODULE, dtype=dtype)
    gen = torch.Generator().manual_seed(31)
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.3)
    return module


def _x(dtype):
    import torch

    gen = torch.Generator().manual_seed(32)
    x = torch.randn(
        BATCH, T, MODULE["d_model"], generator=gen, dtype=torch.float64
    )
    return x.to(dtype)  # the same numbers in both dtypes


def _wrong_forward(module, x, chunks):
    import torch

    from mha_ref import kv_cache, pitfalls

    cache, outputs = kv_cache.KVCache(), []
    for n in chunks:
        chunk = x[:, cache.length : cache.length + n]  # (B, n, d_model)
        outputs.append(pitfalls.wrong_cached_step(module, cache, chunk))
    return torch.cat(outputs, dim=1)  # (B, T, d_model)


def cache_equality():
    """max |cached - full| per chunking and dtype; the RoPE bug too."""
    import torch

    from mha_ref import kv_cache, torch_ref
    from mha_ref.tolerances import atol

    rows, shapes = [], {}
    modules = {d: _module(d) for d in (torch.float32, torch.float64)}
    with torch.no_grad():
        for name, chunks in CHUNKINGS.items():
            row = {"name": name, "chunks": chunks}
            for dtype, module in modules.items():
                x = _x(dtype)
                full = module(x, mask=torch_ref.causal_mask(T))[0]
                cached = kv_cache.cached_forward(module, x, chunks)
                key = str(dtype).removeprefix("torch.")
                row[key] = (cached - full).abs().max()
            rows.append(row)
        module = modules[torch.float64]
        x = _x(torch.float64)
        full = module(x, mask=torch_ref.causal_mask(T))[0]
        cache = kv_cache.KVCache()
        for n in CHUNKINGS["prefill 8, then 4 single steps"]:
            kv_cache.cached_step(module, cache, x[:, cache.length :][:, :n])
        shapes = {"keys": list(cache.keys.shape), "length": cache.length}
        prefill = CHUNKINGS["prefill 8, then 4 single steps"][0]
        wrong = _wrong_forward(
            module, x, CHUNKINGS["prefill 8, then 4 single steps"]
        )
        error = (wrong - full).abs().amax(dim=(0, 2))  # per position
        one_chunk = _wrong_forward(module, x, [T])
    return {
        "rows": rows,
        "atol": {"float32": atol("float32"), "float64": atol("float64")},
        "cache_shape": shapes,
        "worst_float32": max(r["float32"] for r in rows),
        "worst_float64": max(r["float64"] for r in rows),
        "wrong_rope": {
            "prefill": prefill,
            "error_per_position": error,
            "prefill_error": error[:prefill].max(),
            "step_error": error[prefill:].max(),
            "output_scale": full.abs().max(),
            "one_chunk_error": (one_chunk - full).abs().max(),
        },
    }


def rope_relative():
    """Scores after RoPE depend on m - n only: shifts change nothing."""
    import torch

    from mha_ref import torch_ref

    gen = torch.Generator().manual_seed(33)
    d_head, n_pos = 8, 16
    q = torch.randn(1, d_head, generator=gen, dtype=torch.float64)
    k = torch.randn(1, d_head, generator=gen, dtype=torch.float64)

    def score(m, n):
        qm = torch_ref.apply_rope(q, [m])  # (1, d_head)
        kn = torch_ref.apply_rope(k, [n])
        return float((qm * kn).sum())

    pos = torch.arange(n_pos)

    def grid(shift):
        # q at every position m, k at every n: (n_pos, n_pos) scores
        qm = torch_ref.apply_rope(q.expand(n_pos, d_head), pos + shift)
        kn = torch_ref.apply_rope(k.expand(n_pos, d_head), pos + shift)
        return qm @ kn.T  # (m, n)

    base = grid(0)
    return {
        "d_head": d_head,
        "n_pos": n_pos,
        "example": {
            "m": 5,
            "n": 2,
            "shift": 100,
            "score": score(5, 2),
            "score_shifted": score(5 + 100, 2 + 100),
            "score_other_gap": score(5, 2 + 1),
            "score_no_rope": float((q * k).sum()),
        },
        "shifts": SHIFTS,
        "max_shift_change": [(grid(s) - base).abs().max() for s in SHIFTS],
    }


def compute():
    from mha_ref import kv_cache

    no_mask, is_causal = kv_cache.single_query_is_causal()
    values = [10.0, 20.0, 30.0, 40.0, 50.0]
    return {
        "module": MODULE,
        "batch": BATCH,
        "t": T,
        "cache": cache_equality(),
        "one_query": {
            "values": values,
            "position": len(values) - 1,
            "no_mask": no_mask,
            "is_causal": is_causal,
        },
        "rope": rope_relative(),
    }


def render(data, out):
    cache = data["cache"]
    out.table(
        "decoding-equality",
        markdown_table(
            [
                "chunk lengths",
                "split",
                "largest difference, float32",
                "float64",
            ],
            [
                [
                    "[" + ", ".join(map(str, r["chunks"])) + "]",
                    r["name"],
                    fmt(r["float32"], 2),
                    fmt(r["float64"], 2),
                ]
                for r in cache["rows"]
            ],
            "llrr",
        ),
    )
    rope = data["rope"]
    out.table(
        "rope-shifts",
        markdown_table(
            [
                "shift s",
                "largest change of a score, m and n in 0 to "
                f"{rope['n_pos'] - 1}",
            ],
            [
                [str(s), fmt(e, 2)]
                for s, e in zip(
                    rope["shifts"], rope["max_shift_change"], strict=True
                )
            ],
            "rr",
        ),
    )

    wrong = cache["wrong_rope"]

    def draw(fig, theme):
        errors = wrong["error_per_position"]
        prefill = wrong["prefill"]
        ax = fig.subplots()
        colours = [
            theme.series[0] if i < prefill else theme.series[1]
            for i in range(len(errors))
        ]
        ax.bar(range(len(errors)), errors, color=colours)
        ax.set_xlabel("output position")
        ax.set_ylabel("max |wrong − full|")
        ax.set_xticks(range(len(errors)))
        ax.axvline(prefill - 0.5, color=theme.muted, linestyle="--")
        top = max(errors)
        ax.text(
            prefill / 2 - 0.5,
            top * 0.5,
            f"prefill: rows 0–{prefill - 1}\n"
            f"error {fmt(max(errors[:prefill]), 2)}",
            ha="center",
            va="center",
        )
        ax.text(
            prefill + (len(errors) - prefill) / 2 - 0.5,
            top * 1.02,
            "single steps",
            ha="center",
            va="bottom",
        )
        ax.set_ylim(0, top * 1.15)
        ax.set_title("RoPE restarted at 0 in every chunk", loc="left")

    out.figure(
        "kv-rope-bug",
        draw,
        figsize=(5.0, 3.0),
        alt=(
            f"Bar chart of the error of each output position when RoPE "
            f"restarts at position 0 in every chunk: the prefill rows 0 "
            f"to {wrong['prefill'] - 1} have error "
            f"{fmt(wrong['prefill_error'], 2)}, the single steps after it "
            f"errors up to {fmt(wrong['step_error'], 2)}."
        ),
    )
