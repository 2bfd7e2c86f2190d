"""Tiled attention: agreement with plain attention, memory and time.

Accuracy: the largest |tiled - plain| in float64 over a few shapes and
block sizes (NumPy and PyTorch). Sweep: peak bytes NumPy allocates
(tracemalloc, the same on every run), plain versus tiled, as T grows,
and how many tiles the causal loop computes. Time: read from the
committed benchmark report (bench/report.json, written by `make bench`
with the environment that produced it), never measured by the build,
so two builds of the same sources are byte-identical.
"""

import gc
import json
import tracemalloc
from pathlib import Path

from pipeline.output import fmt, markdown_table

DEPENDS = [
    "mha_ref/tiled.py",
    "mha_ref/numpy_ref.py",
    "mha_ref/torch_ref.py",
    "mha_ref/checks.py",
    "mha_ref/tolerances.py",
    "bench/report.json",
]
REPORT = Path(__file__).resolve().parents[1] / "bench/report.json"

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


def peak_bytes_numpy(fn, *args, **kwargs):
    """Peak bytes allocated while fn runs (tracemalloc sees NumPy).

    After one untraced warm-up call and a garbage collection, and with
    the collector off during the call, so that first-call caches and
    garbage do not move the peak. A few bytes of Python objects still
    vary from run to run: sweep() rounds to whole KiB.
    """
    fn(*args, **kwargs)
    gc.collect()
    gc.disable()  # a collection mid-call would move the peak
    tracemalloc.start()
    try:
        fn(*args, **kwargs)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        gc.enable()


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


def _kib(n_bytes):
    """Bytes rounded to a whole number of KiB."""
    return round(n_bytes / 1024) * 1024


def sweep(seed=0):
    import numpy as np

    from mha_ref import numpy_ref, tiled

    rng = np.random.default_rng(seed)
    blocks = {"block_q": SWEEP_BLOCK, "block_k": SWEEP_BLOCK}
    result = {key: [] for key in ("plain_peak_bytes", "tiled_peak_bytes")}
    for t in LENGTHS:
        q, k, v = (
            rng.standard_normal((*SWEEP_LEAD, t, SWEEP_D)) for _ in range(3)
        )
        mask = numpy_ref.causal_mask(t)
        # whole KiB: the same on every run (peak_bytes_numpy)
        result["plain_peak_bytes"].append(
            _kib(peak_bytes_numpy(numpy_ref.attention, q, k, v, mask))
        )
        result["tiled_peak_bytes"].append(
            _kib(
                peak_bytes_numpy(
                    tiled.tiled_attention_numpy, q, k, v, causal=True, **blocks
                )
            )
        )
    itemsize = np.dtype(np.float64).itemsize
    heads = int(np.prod(SWEEP_LEAD))
    return {
        **sweep_summary(
            result["plain_peak_bytes"], result["tiled_peak_bytes"]
        ),
        "causal": True,
        # one (T, T) score matrix per head, and one (block, block) tile
        "scores_bytes": [heads * t * t * itemsize for t in LENGTHS],
        "scores_mib": [heads * t * t * itemsize / 2**20 for t in LENGTHS],
        "tile_bytes": heads * SWEEP_BLOCK**2 * itemsize,
    }


def sweep_summary(plain, tiles):
    """The sweep's shape and its plain and tiled peaks (bytes), compared.

    Shared by this topic (the forward) and layer_backward (the backward).
    """
    return {
        "lengths": LENGTHS,
        "batch": SWEEP_LEAD[0],
        "n_head": SWEEP_LEAD[1],
        "d_head": SWEEP_D,
        "block": SWEEP_BLOCK,
        "dtype": "float64",
        "plain_peak_bytes": plain,
        "tiled_peak_bytes": tiles,
        "memory_ratio": [p / t for p, t in zip(plain, tiles, strict=True)],
        # peak at the largest T over peak at half of it: ~4 vs ~2
        "plain_growth": plain[-1] / plain[-2],
        "tiled_growth": tiles[-1] / tiles[-2],
    }


def causal_tiles(t, block):
    """(tiles, tiles skipped) of the causal loop over a T x T matrix.

    The loop of mha_ref/tiled.py skips a tile when its first key comes
    after its last query: the whole tile lies in the future.
    """
    starts = range(0, t, block)
    skipped = sum(j > min(i + block, t) - 1 for i in starts for j in starts)
    return len(starts) ** 2, skipped


def timings(report_path=REPORT):
    """Plain, tiled and SDPA times from the committed benchmark report."""
    report = json.loads(Path(report_path).read_text())
    impl = report["impl"]
    env = impl.get("environment") or report["environment"]
    seconds = {}
    for row in impl["rows"]:
        seconds.setdefault(row["impl"], {})[row["t"]] = row["seconds"]
    lengths = sorted(seconds["tiled_numpy"])
    tiles = [causal_tiles(t, impl["block"]) for t in lengths]
    plain = [seconds["numpy_ref"][t] for t in lengths]
    tiled_s = [seconds["tiled_numpy"][t] for t in lengths]
    return {
        "lengths": lengths,
        **{k: impl[k] for k in ("batch", "n_head", "d_head", "dtype")},
        "block": impl["block"],
        "threads": impl["threads"],
        "plain_seconds": plain,
        "tiled_seconds": tiled_s,
        "sdpa_seconds": [seconds["sdpa"][t] for t in lengths],
        "time_ratio": [b / a for a, b in zip(plain, tiled_s, strict=True)],
        "tiles": [n for n, _ in tiles],
        "tiles_skipped": [k for _, k in tiles],
        # the share of the T x T scores the tiled loop computes
        "computed_fraction": [(n - k) / n for n, k in tiles],
        "environment": {
            k: env.get(k)
            for k in ("cpu", "cores_available", "numpy", "torch", "commit")
        },
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
        "time": timings(),
    }


def _mib(n_bytes):
    return n_bytes / 2**20


def _ms(seconds):
    """Milliseconds, 3 significant digits, whole above 100: 5.39, 2,686."""
    ms = 1e3 * seconds
    return f"{ms:,.0f}" if ms >= 100 else fmt(ms, 3)


def render(data, out):
    s, tm = data["sweep"], data["time"]
    rows = [
        [str(t), fmt(_mib(p), 3), fmt(_mib(b), 3), fmt(p / b, 3)]
        for t, p, b in zip(
            s["lengths"],
            s["plain_peak_bytes"],
            s["tiled_peak_bytes"],
            strict=True,
        )
    ]
    out.table(
        "online_softmax",
        markdown_table(
            ["T", "plain peak (MiB)", "tiled peak (MiB)", "plain / tiled"],
            rows,
            "rrrr",
        ),
    )
    time_rows = [
        [
            str(t),
            _ms(p),
            _ms(b),
            fmt(b / p, 2),
            f"{n - k} of {n}",
            _ms(sd),
        ]
        for t, p, b, n, k, sd in zip(
            tm["lengths"],
            tm["plain_seconds"],
            tm["tiled_seconds"],
            tm["tiles"],
            tm["tiles_skipped"],
            tm["sdpa_seconds"],
            strict=True,
        )
    ]
    out.table(
        "tiled-time",
        markdown_table(
            [
                "T",
                "plain (ms)",
                "tiled (ms)",
                "tiled / plain",
                "tiles computed",
                "SDPA (ms)",
            ],
            time_rows,
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
                "NumPy max abs diff",
                "PyTorch max abs diff",
            ],
            acc_rows,
            "rrlrrr",
        ),
    )

    def draw(fig, theme):
        mem, secs = fig.subplots(1, 2)
        for ax, lengths, plain, tiles, scale, label in (
            (
                mem,
                s["lengths"],
                s["plain_peak_bytes"],
                s["tiled_peak_bytes"],
                _mib,
                "peak memory (MiB)",
            ),
            (
                secs,
                tm["lengths"],
                tm["plain_seconds"],
                tm["tiled_seconds"],
                float,
                "time (s)",
            ),
        ):
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
        mem.set_title(f"Peak memory (H = {s['n_head']}, {s['dtype']})")
        secs.set_title(f"Time (H = {tm['n_head']}, {tm['dtype']}, bench)")
        mem.legend(loc="upper left")

    first, last = s["lengths"][0], s["lengths"][-1]
    plain_mib = fmt(_mib(s["plain_peak_bytes"][-1]), 3)
    out.figure(
        "tiled-memory",
        draw,
        figsize=(8.0, 3.4),
        alt=(
            "Two log-log line charts against sequence length T. Peak "
            f"memory (T from {first} to {last}), causal NumPy attention "
            f"with {s['n_head']} heads of size {s['d_head']} in float64: "
            f"the plain pass grows {fmt(s['plain_growth'], 2)} times when "
            f"T doubles and reaches {plain_mib} MiB; the tiled pass grows "
            f"{fmt(s['tiled_growth'], 2)} times and reaches "
            f"{fmt(_mib(s['tiled_peak_bytes'][-1]), 3)} MiB. Time, from the "
            f"benchmark report ({tm['n_head']} heads, {tm['dtype']}, T from "
            f"{tm['lengths'][0]} to {tm['lengths'][-1]}): the tiled pass "
            f"takes {fmt(tm['time_ratio'][-1], 2)} times as long as the "
            f"plain one at T = {tm['lengths'][-1]}."
        ),
    )
