# %% [markdown]
# ## One row, block by block
#
# Random queries, keys and values for 2 heads of 10 positions (the next
# cells use them too). First the online softmax alone: the first query
# against all ten keys (no mask), by hand. Fold
# blocks of 3 keys into the running maximum $m$, sum $\ell$ and
# unnormalised output $O$ with `online_softmax_update_numpy`, and print
# $m$ and $\ell$ after each block. Whenever a block brings a larger
# score, $m$ rises to $m'$ and the earlier sums are scaled down by
# $e^{m - m'}$ before the block's own terms are added, so $\ell$ can
# fall when the rise is large. At the end $O / \ell$ is the plain
# softmax-weighted sum. Try another block size, or another query row.

# %%
import json

import numpy as np
import torch

import glue
from mha_ref import numpy_ref, tiled, tolerances, torch_ref
from mha_ref.memory import peak_bytes_numpy

fmt = glue.fmt
rng = np.random.default_rng(0)
T, d = 10, 4
q, k, v = (rng.standard_normal((2, T, d)) for _ in range(3))  # (H, T, d)

s_row = q[0, :1] @ k[0].T / np.sqrt(d)  # (1, T): the first query's scores
state = (np.full((1, 1), -np.inf), np.zeros((1, 1)), np.zeros((1, d)))
block = 3
for j in range(0, T, block):
    state = tiled.online_softmax_update_numpy(
        state, s_row[:, j : j + block], v[0, j : j + block]
    )
    m, ell, _ = state
    print(
        f"keys {j}..{min(j + block, T) - 1}: m = {m.item():.3f}, "
        f"l = {ell.item():.3f}"
    )
_, ell, acc = state
expected = numpy_ref.softmax(s_row) @ v[0]  # (1, d)
print(f"max |O / l - softmax(s) v|: {np.abs(acc / ell - expected).max():.1e}")

# %% [markdown]
# ## Your turn: tiled against plain
#
# The same heads, causal, computed by `numpy_ref.attention` with the
# whole score matrix and by `tiled_attention_numpy` in tiles, for a few
# block sizes: ones that divide 10, ragged ones, single rows, one block
# larger than $T$. `causal_tiles` counts the tiles: the loop skips a
# tile when its first key comes after its last query (the whole tile
# lies in the future). Add your own `(block_q, block_k)`.


# %%
def causal_tiles(t, block_q, block_k):
    """(tiles, tiles skipped) of the causal loop over a t x t matrix."""
    query_starts, key_starts = range(0, t, block_q), range(0, t, block_k)
    skipped = sum(
        j > min(i + block_q, t) - 1  # first key after the last query
        for i in query_starts
        for j in key_starts
    )
    return len(query_starts) * len(key_starts), skipped


plain, _ = numpy_ref.attention(q, k, v, numpy_ref.causal_mask(T))
for block_q, block_k in [(5, 5), (4, 3), (1, 1), (16, 16)]:
    out = tiled.tiled_attention_numpy(
        q, k, v, causal=True, block_q=block_q, block_k=block_k
    )
    tiles, skipped = causal_tiles(T, block_q, block_k)
    diff = np.abs(out - plain).max()
    print(
        f"blocks {block_q:>2} x {block_k:>2}: max difference {diff:.1e}, "
        f"tiles computed {tiles - skipped:>3}, skipped {skipped:>3}"
    )
glue.value("default_block", tiled.BLOCK)

# %% [markdown]
# `tiled_attention_torch` keeps its statistics in float32 even for
# float16 inputs. In float32 it matches `torch_ref.attention` to the
# float32 tolerance.

# %%
qt, kt, vt = (torch.from_numpy(a).float() for a in (q, k, v))
reference, _ = torch_ref.attention(qt, kt, vt, torch_ref.causal_mask(T))
out = tiled.tiled_attention_torch(
    qt, kt, vt, causal=True, block_q=4, block_k=3
)
print(
    f"float32: max difference {(out - reference).abs().max():.1e}, "
    f"tolerance {tolerances.atol(torch.float32):.0e}"
)

# %% [markdown]
# ## It computes the same attention
#
# Both tiled versions against `numpy_ref.attention` and
# `torch_ref.attention` in float64, on shapes and blocks chosen to hit
# the edge cases: blocks that divide $T$, a ragged last block, blocks of
# a single row, a block larger than $T$, and fewer queries than keys
# (the queries are the last $T_q$ of the $T_k$ positions, so the causal
# mask is built from positions).

# %%
# (Tq, Tk, causal, block_q, block_k): dividing, ragged, 1, larger than T
cases = [
    (256, 256, False, 64, 64),
    (256, 256, True, 48, 48),
    (100, 300, True, 32, 64),
    (20, 20, True, 1, 1),
    (64, 64, True, 128, 128),
]
lead, d_head = (1, 4), 32  # (B, H) and d_head
rng = np.random.default_rng(0)
accuracy = []
for tq, tk, causal, block_q, block_k in cases:
    q, k, v = (rng.standard_normal((*lead, t, d_head)) for t in (tq, tk, tk))
    mask = None
    if causal:  # queries are the last tq of the tk positions
        mask = numpy_ref.causal_mask_for_positions(
            np.arange(tk - tq, tk), np.arange(tk)
        )
    blocks = {"block_q": block_q, "block_k": block_k}
    plain, _ = numpy_ref.attention(q, k, v, mask)
    out = tiled.tiled_attention_numpy(q, k, v, causal=causal, **blocks)
    qt, kt, vt = (torch.from_numpy(a) for a in (q, k, v))
    mask_t = None if mask is None else torch.from_numpy(mask)
    plain_t, _ = torch_ref.attention(qt, kt, vt, mask_t)
    out_t = tiled.tiled_attention_torch(qt, kt, vt, causal=causal, **blocks)
    accuracy.append(
        {
            "tq": tq,
            "tk": tk,
            "causal": causal,
            **blocks,
            "numpy": float(np.abs(out - plain).max()),
            "torch": float((out_t - plain_t).abs().max()),
        }
    )
glue.value("accuracy", accuracy)
glue.value("max_abs_diff", max(max(r["numpy"], r["torch"]) for r in accuracy))
glue.value("tolerance", tolerances.atol("float64"))
glue.value(
    "block_sizes",
    sorted(
        {r["block_q"] for r in accuracy} | {r["block_k"] for r in accuracy}
    ),
)
glue.table(
    "tiled-accuracy",
    [
        "Tq",
        "Tk",
        "causal",
        "block_q x block_k",
        "NumPy max abs diff",
        "PyTorch max abs diff",
    ],
    [
        [
            str(r["tq"]),
            str(r["tk"]),
            "yes" if r["causal"] else "no",
            f"{r['block_q']} x {r['block_k']}",
            f"{r['numpy']:.1e}",
            f"{r['torch']:.1e}",
        ]
        for r in accuracy
    ],
    "rrlrrr",
)

# %% [markdown]
# ## Peak memory, plain and tiled
#
# `tracemalloc` sees every byte NumPy allocates. `peak_bytes_numpy`
# (`mha_ref/memory.py`, carried with this notebook)
# records the peak of two calls, each after collecting the garbage and
# with the collector off, so a collection mid-call cannot move it. The
# first call may fill caches, and the kernel's own threads allocate now
# and then (tracemalloc counts their bytes too): the smaller of the two
# peaks is the call's own.
# `gc.freeze()` keeps the objects alive before the call (torch's, the
# kernel's) out of those collections, which then take milliseconds
# instead of a third of a second. A few small Python objects are alive
# at the peak on some runs and not on others (up to about a KiB, which
# can cross a KiB boundary): the peaks are rounded to the nearest
# 16 KiB. Causal
# attention, 1 sequence of 2 heads of size 64 in float64, blocks of
# 64 x 64, as $T$ doubles.


# %%
def kib(n_bytes):
    """Bytes rounded to the nearest 16 KiB (16384 bytes)."""
    return round(n_bytes / 16384) * 16384


lengths = [128, 256, 512, 1024]
batch, n_head, d_head, block = 1, 2, 64, 64
itemsize = np.dtype(np.float64).itemsize
rng = np.random.default_rng(0)
plain_peak, tiled_peak = [], []
for t in lengths:
    q, k, v = (rng.standard_normal((batch, n_head, t, d_head)) for _ in "qkv")
    mask = numpy_ref.causal_mask(t)  # (T, T)
    plain_peak.append(
        kib(peak_bytes_numpy(numpy_ref.attention, q, k, v, mask))
    )
    tiled_peak.append(
        kib(
            peak_bytes_numpy(
                tiled.tiled_attention_numpy,
                q,
                k,
                v,
                causal=True,
                block_q=block,
                block_k=block,
            )
        )
    )
heads = batch * n_head
sweep = glue.value(
    "sweep",
    {
        "lengths": lengths,
        "batch": batch,
        "n_head": n_head,
        "d_head": d_head,
        "block": block,
        "dtype": "float64",
        "causal": True,
        "plain_peak_bytes": plain_peak,
        "tiled_peak_bytes": tiled_peak,
        "memory_ratio": [
            p / b for p, b in zip(plain_peak, tiled_peak, strict=True)
        ],
        # peak at the largest T over peak at half of it: ~4 vs ~2
        "plain_growth": plain_peak[-1] / plain_peak[-2],
        "tiled_growth": tiled_peak[-1] / tiled_peak[-2],
        # one (T, T) score matrix per head, and one (block, block) tile
        "scores_bytes": [heads * t * t * itemsize for t in lengths],
        "scores_mib": [heads * t * t * itemsize / 2**20 for t in lengths],
        "tile_bytes": heads * block**2 * itemsize,
    },
)


def mib(n_bytes):
    return n_bytes / 2**20


glue.table(
    "online_softmax",
    ["T", "plain peak (MiB)", "tiled peak (MiB)", "plain / tiled"],
    [
        [str(t), fmt(mib(p), 3), fmt(mib(b), 3), fmt(p / b, 3)]
        for t, p, b in zip(lengths, plain_peak, tiled_peak, strict=True)
    ],
    "rrrr",
)

# %% [markdown]
# ## Time, from the benchmark report
#
# Time depends on the machine, so this notebook does not measure it:
# the seconds below come from the committed benchmark report,
# `bench/impl.json` (its part of `bench/report.json`), written by
# `make bench` with the machine and the versions that measured them
# (this notebook carries a copy). Your
# machine gives other seconds: measure them with `%timeit`.

# %%
with open("bench/impl.json") as handle:
    impl = json.load(handle)
environment = impl["environment"]
seconds = {}
for row in impl["rows"]:
    seconds.setdefault(row["impl"], {})[row["t"]] = row["seconds"]
bench_lengths = sorted(seconds["tiled_numpy"])
counts = [causal_tiles(t, impl["block"], impl["block"]) for t in bench_lengths]
plain_s = [seconds["numpy_ref"][t] for t in bench_lengths]
tiled_s = [seconds["tiled_numpy"][t] for t in bench_lengths]
sdpa_s = [seconds["sdpa"][t] for t in bench_lengths]
timing = glue.value(
    "time",
    {
        "lengths": bench_lengths,
        **{
            key: impl[key]
            for key in ("batch", "n_head", "d_head", "dtype", "block")
        },
        "threads": impl["threads"],
        "plain_seconds": plain_s,
        "tiled_seconds": tiled_s,
        "sdpa_seconds": sdpa_s,
        "time_ratio": [b / a for a, b in zip(plain_s, tiled_s, strict=True)],
        "tiles": [n for n, _ in counts],
        "tiles_skipped": [s for _, s in counts],
        # the share of the T x T scores the tiled loop computes
        "computed_fraction": [(n - s) / n for n, s in counts],
        "environment": {
            key: environment.get(key)
            for key in ("cpu", "cores_available", "numpy", "torch", "commit")
        },
    },
)


def ms(value):
    """Milliseconds, 3 significant digits, whole above 100: 5.39, 2,686."""
    millis = 1e3 * value
    return f"{millis:,.0f}" if millis >= 100 else fmt(millis, 3)


glue.table(
    "tiled-time",
    [
        "T",
        "plain (ms)",
        "tiled (ms)",
        "tiled / plain",
        "tiles computed",
        "SDPA (ms)",
    ],
    [
        [str(t), ms(p), ms(b), fmt(b / p, 2), f"{n - s} of {n}", ms(sd)]
        for t, p, b, (n, s), sd in zip(
            bench_lengths, plain_s, tiled_s, counts, sdpa_s, strict=True
        )
    ],
    "rrrrrr",
)

# %% [markdown]
# ## Both in one figure
#
# Peak memory (measured above) and time in milliseconds (from the
# report, with SDPA's) against $T$, on log-log axes: a straight line of
# slope 2 is $T^2$ growth.


# %%
def ticks_125(values):
    """The 1-2-5 ticks spanning values: [0.5, 1, 2, 5, 10, 20, 50]."""
    low, high = min(values), max(values)
    ticks = []
    first, last = int(np.floor(np.log10(low))), int(np.log10(high)) + 1
    for exp in range(first, last + 1):
        ticks += [f * 10.0**exp for f in (1, 2, 5)]
    below = [t for t in ticks if t <= low]
    start = below[-1] if below else ticks[0]
    above = [t for t in ticks if t >= high]
    stop = above[0] if above else ticks[-1]
    return [t for t in ticks if start <= t <= stop]


def millis(n_seconds):
    return 1e3 * n_seconds


def draw(fig, theme):
    mem, secs = fig.subplots(1, 2)
    for ax, ts, plain, tiles, scale, label in (
        (mem, lengths, plain_peak, tiled_peak, mib, "peak memory (MiB)"),
        (secs, bench_lengths, plain_s, tiled_s, millis, "time (ms)"),
    ):
        ax.plot(
            ts,
            [scale(x) for x in plain],
            "o-",
            color=theme.series[1],
            label="plain (T x T scores)",
        )
        ax.plot(
            ts,
            [scale(x) for x in tiles],
            "s-",
            color=theme.series[0],
            label=f"tiled ({block} x {block} tiles)",
        )
        shown = [scale(x) for x in (*plain, *tiles)]
        if ax is secs:
            ax.plot(
                ts,
                [scale(x) for x in sdpa_s],
                "^--",
                color=theme.series[2],
                label="PyTorch SDPA",
            )
            shown += [scale(x) for x in sdpa_s]
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(ts, [str(t) for t in ts])
        y_ticks = ticks_125(shown)
        ax.set_yticks(y_ticks, [f"{t:g}" for t in y_ticks])
        ax.minorticks_off()
        ax.set_xlabel("sequence length T (log scale)")
        ax.set_ylabel(label + ", log scale")
        ax.grid(True, alpha=0.4)
        ax.legend(loc="upper left", fontsize=9)
    mem.set_title(f"Peak memory (H = {n_head}, float64)")
    secs.set_title(f"Time (H = {impl['n_head']}, {impl['dtype']}, bench)")


glue.figure(
    "tiled-memory",
    draw,
    figsize=(8.0, 3.4),
    alt=(
        "Two log-log line charts against sequence length T. Peak "
        f"memory (T from {lengths[0]} to {lengths[-1]}), causal NumPy "
        f"attention with {n_head} heads of size {d_head} in float64: "
        f"the plain pass grows {fmt(sweep['plain_growth'], 2)} times when "
        f"T doubles and reaches {fmt(mib(plain_peak[-1]), 3)} MiB; the "
        f"tiled pass grows {fmt(sweep['tiled_growth'], 2)} times and "
        f"reaches {fmt(mib(tiled_peak[-1]), 3)} MiB. Time, from the "
        f"benchmark report ({impl['n_head']} heads, {impl['dtype']}, T "
        f"from {bench_lengths[0]} to {bench_lengths[-1]}): the tiled pass "
        f"takes {fmt(timing['time_ratio'][-1], 2)} times as long as the "
        f"plain one at T = {bench_lengths[-1]}, and PyTorch's SDPA "
        f"{fmt(sdpa_s[-1] / plain_s[-1], 2)} times."
    ),
)
