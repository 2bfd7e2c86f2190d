"""Tiled attention: agreement with plain attention, memory and time.

Accuracy: the largest |tiled - plain| in float64 over a few shapes and
block sizes (NumPy and PyTorch). Sweep: peak bytes NumPy allocates
(tracemalloc) and median seconds, plain versus tiled, as T grows.
Timings vary from run to run and machine to machine; the build caches
them with everything else, and the page prints the environment.
"""

import statistics
import time
import tracemalloc

from pipeline.output import fmt, markdown_table

DEPENDS = [
    "mha_ref/tiled.py",
    "mha_ref/numpy_ref.py",
    "mha_ref/torch_ref.py",
    "mha_ref/checks.py",
    "mha_ref/tolerances.py",
]

# (Tq, Tk, causal, block_q, block_k): dividing, ragged, 1, larger than T
ACCURACY = [
    (256, 256, False, 64, 64),
    (256, 256, True, 48, 48),
    (100, 300, True, 32, 64),
    (20, 20, True, 1, 1),
    (64, 64, True, 128, 128),
]
ACC_LEAD, ACC_D = (1, 4), 32  # (B, H) and d_head for the accuracy runs
LENGTHS = [128, 256, 512, 1024]
SWEEP_LEAD, SWEEP_D, SWEEP_BLOCK = (1, 2), 64, 64
REPEATS = 5  # timing runs per point at most; the median is kept
BUDGET_S = 0.25  # ...and fewer once a point has taken this long


def peak_bytes_numpy(fn, *args, **kwargs):
    """Peak bytes allocated while fn runs (tracemalloc sees NumPy)."""
    tracemalloc.start()
    try:
        fn(*args, **kwargs)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def peak_bytes_torch_cpu(fn, *args, **kwargs):
    """Peak of torch's CPU allocations while fn runs, from the profiler.

    The profiler charges each op its net bytes (frees outside ops come
    as "[memory]" events); summed in start order they trace the live
    total. An op's transient peak inside itself is not seen.
    """
    from torch.profiler import ProfilerActivity, profile

    with profile(
        activities=[ProfilerActivity.CPU], profile_memory=True
    ) as prof:
        fn(*args, **kwargs)
    live = peak = 0
    for event in sorted(prof.events(), key=lambda e: e.time_range.start):
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak


def median_seconds(fn, *args, repeats=REPEATS, budget_s=BUDGET_S, **kwargs):
    """Median wall time of up to ``repeats`` calls after a warm-up one.

    Stops early (at 3 calls or more) once the calls took ``budget_s``.
    """
    fn(*args, **kwargs)
    times = []
    while len(times) < repeats and (len(times) < 3 or sum(times) < budget_s):
        start = time.perf_counter()
        fn(*args, **kwargs)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def accuracy(seed=0):
    import numpy as np
    import torch

    from mha_ref import numpy_ref, tiled, torch_ref

    rng = np.random.default_rng(seed)
    rows = []
    for tq, tk, causal, block_q, block_k in ACCURACY:
        q = rng.standard_normal((*ACC_LEAD, tq, ACC_D))
        k = rng.standard_normal((*ACC_LEAD, tk, ACC_D))
        v = rng.standard_normal((*ACC_LEAD, tk, ACC_D))
        mask = None
        if causal:  # queries are the last tq of the tk positions
            mask = numpy_ref.causal_mask_for_positions(
                np.arange(tk - tq, tk), np.arange(tk)
            )
        blocks = {"block_q": block_q, "block_k": block_k}
        plain, _ = numpy_ref.attention(q, k, v, mask)
        out = tiled.tiled_attention_numpy(q, k, v, causal=causal, **blocks)
        tq_, tk_, tv_ = (torch.from_numpy(a) for a in (q, k, v))
        plain_t, _ = torch_ref.attention(
            tq_, tk_, tv_, None if mask is None else torch.from_numpy(mask)
        )
        out_t = tiled.tiled_attention_torch(
            tq_, tk_, tv_, causal=causal, **blocks
        )
        rows.append(
            {
                "tq": tq,
                "tk": tk,
                "causal": causal,
                **blocks,
                "numpy": float(np.abs(out - plain).max()),
                "torch": float((out_t - plain_t).abs().max()),
            }
        )
    return rows


def sweep(seed=0):
    import numpy as np

    from mha_ref import numpy_ref, tiled

    rng = np.random.default_rng(seed)
    blocks = {"block_q": SWEEP_BLOCK, "block_k": SWEEP_BLOCK}
    result = {
        key: []
        for key in (
            "plain_peak_bytes",
            "tiled_peak_bytes",
            "plain_seconds",
            "tiled_seconds",
        )
    }
    for t in LENGTHS:
        q, k, v = (
            rng.standard_normal((*SWEEP_LEAD, t, SWEEP_D)) for _ in range(3)
        )
        mask = numpy_ref.causal_mask(t)
        result["plain_peak_bytes"].append(
            peak_bytes_numpy(numpy_ref.attention, q, k, v, mask)
        )
        result["tiled_peak_bytes"].append(
            peak_bytes_numpy(
                tiled.tiled_attention_numpy, q, k, v, causal=True, **blocks
            )
        )
        result["plain_seconds"].append(
            median_seconds(numpy_ref.attention, q, k, v, mask)
        )
        result["tiled_seconds"].append(
            median_seconds(
                tiled.tiled_attention_numpy, q, k, v, causal=True, **blocks
            )
        )
    plain, tiles = result["plain_peak_bytes"], result["tiled_peak_bytes"]
    itemsize = np.dtype(np.float64).itemsize
    heads = int(np.prod(SWEEP_LEAD))
    return {
        "lengths": LENGTHS,
        "batch": SWEEP_LEAD[0],
        "n_head": SWEEP_LEAD[1],
        "d_head": SWEEP_D,
        "block": SWEEP_BLOCK,
        "dtype": "float64",
        "causal": True,
        "repeats": REPEATS,
        **result,
        # one (T, T) score matrix per head, and one (block, block) tile
        "scores_bytes": [heads * t * t * itemsize for t in LENGTHS],
        "scores_mib": [heads * t * t * itemsize / 2**20 for t in LENGTHS],
        "tile_bytes": heads * SWEEP_BLOCK**2 * itemsize,
        "memory_ratio": [p / t for p, t in zip(plain, tiles, strict=True)],
        # peak at the largest T over peak at half of it: ~4 vs ~2
        "plain_growth": plain[-1] / plain[-2],
        "tiled_growth": tiles[-1] / tiles[-2],
        "time_ratio": [
            t / p
            for p, t in zip(
                result["plain_seconds"], result["tiled_seconds"], strict=True
            )
        ],
    }


def compute():
    from mha_ref import tiled
    from mha_ref.tolerances import atol

    rows = accuracy()
    return {
        "default_block": tiled.BLOCK,
        "accuracy": rows,
        "max_abs_diff": max(max(r["numpy"], r["torch"]) for r in rows),
        "tolerance": atol("float64"),
        "block_sizes": sorted(
            {r["block_q"] for r in rows} | {r["block_k"] for r in rows}
        ),
        "sweep": sweep(),
    }


def _mib(n_bytes):
    return n_bytes / 2**20


def render(data, out):
    s = data["sweep"]
    rows = [
        [
            str(t),
            fmt(_mib(p), 3),
            fmt(_mib(b), 3),
            fmt(p / b, 3),
            fmt(1e3 * ps, 3),
            fmt(1e3 * ts, 3),
        ]
        for t, p, b, ps, ts in zip(
            s["lengths"],
            s["plain_peak_bytes"],
            s["tiled_peak_bytes"],
            s["plain_seconds"],
            s["tiled_seconds"],
            strict=True,
        )
    ]
    out.table(
        "online_softmax",
        markdown_table(
            [
                "T",
                "plain peak (MiB)",
                "tiled peak (MiB)",
                "plain / tiled",
                "plain time (ms)",
                "tiled time (ms)",
            ],
            rows,
            "rrrrrr",
        ),
    )
    acc_rows = [
        [
            str(r["tq"]),
            str(r["tk"]),
            "yes" if r["causal"] else "no",
            f"{r['block_q']} x {r['block_k']}",
            f"{r['numpy']:.1e}",
            f"{r['torch']:.1e}",
        ]
        for r in data["accuracy"]
    ]
    out.table(
        "tiled-accuracy",
        markdown_table(
            [
                "Tq",
                "Tk",
                "causal",
                "block_q x block_k",
                "NumPy max |diff|",
                "PyTorch max |diff|",
            ],
            acc_rows,
            "rrlrrr",
        ),
    )

    def draw(fig, theme):
        mem, secs = fig.subplots(1, 2)
        lengths = s["lengths"]
        for ax, plain, tiles, label in (
            (
                mem,
                s["plain_peak_bytes"],
                s["tiled_peak_bytes"],
                "peak memory (MiB)",
            ),
            (secs, s["plain_seconds"], s["tiled_seconds"], "time (s)"),
        ):
            scale = _mib if ax is mem else float
            ax.plot(
                lengths,
                [scale(x) for x in plain],
                "o-",
                color=theme.series[1],
                label="plain (T x T scores)",
            )
            ax.plot(
                lengths,
                [scale(x) for x in tiles],
                "s-",
                color=theme.series[0],
                label=f"tiled ({s['block']} x {s['block']} tiles)",
            )
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xticks(lengths, [str(t) for t in lengths])
            ax.set_xlabel("sequence length T (log scale)")
            ax.set_ylabel(label + ", log scale")
            ax.grid(True, alpha=0.4)
        mem.set_title("Peak memory")
        secs.set_title("Time (NumPy, this CPU)")
        mem.legend(loc="upper left")

    first, last = s["lengths"][0], s["lengths"][-1]
    out.figure(
        "tiled-memory",
        draw,
        figsize=(8.0, 3.4),
        alt=(
            f"Two log-log line charts against sequence length T from {first} "
            f"to {last}, causal NumPy attention with {s['n_head']} heads of "
            f"size {s['d_head']} in float64. Peak memory: the plain pass "
            f"grows {fmt(s['plain_growth'], 2)} times when T doubles and "
            f"reaches {fmt(_mib(s['plain_peak_bytes'][-1]), 3)} MiB; the "
            f"tiled pass "
            f"grows {fmt(s['tiled_growth'], 2)} times and reaches "
            f"{fmt(_mib(s['tiled_peak_bytes'][-1]), 3)} MiB. Time: the tiled "
            f"pass takes {fmt(s['time_ratio'][-1], 2)} times as long as the "
            f"plain one at T = {last}."
        ),
    )
