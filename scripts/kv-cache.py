# %% [markdown]
# ## Two new queries, five keys
#
# Positions 0 to 2 are cached, 3 and 4 are new. With every query and key
# zero, all scores are equal and each output is the mean of the values
# its query may read, so the mask can be read off the numbers. The mask
# built from positions lets position 3 read keys 0 to 3 and position 4
# all five; `is_causal=True` treats the two queries as positions 0 and 1.
# The cell checks both outputs against plain means over the allowed
# values. Change `values` (five or more) and rerun.

# %%
import torch
from matplotlib.colors import to_rgba
from matplotlib.patches import Rectangle

import glue
from mha_ref import kv_cache, pitfalls, torch_ref
from mha_ref.tolerances import atol

values = glue.value("values", [10.0, 20.0, 30.0, 40.0, 50.0])
n_key = len(values)
query_positions = glue.value("query_positions", [n_key - 2, n_key - 1])
key_positions = glue.value("key_positions", list(range(n_key)))
aligned, upper_left = kv_cache.cached_attention_example(values)
glue.value("aligned", aligned)
glue.value("upper_left", upper_left)
aligned_mask = torch_ref.causal_mask_for_positions(
    query_positions, key_positions
)  # (2, 5), True = blocked
# is_causal=True behaves as if the queries sat at positions 0 and 1
upper_left_mask = torch_ref.causal_mask_for_positions(
    range(len(query_positions)), key_positions
)
glue.value("aligned_mask", aligned_mask)
glue.value("upper_left_mask", upper_left_mask)
print("mask from positions (1 = blocked):")
print(aligned_mask.int().numpy())
print("the mask is_causal=True uses:")
print(upper_left_mask.int().numpy())
v = torch.tensor(values, dtype=torch.float64)
for mask, result in ((aligned_mask, aligned), (upper_left_mask, upper_left)):
    means = torch.stack([v[~row].mean() for row in mask])
    if not torch.allclose(means, result):
        raise ValueError(f"{result.tolist()} != means {means.tolist()}")

# %% [markdown]
# The figure of the page: what each query sees, and its output, under
# the two masks.

# %%
fmt = glue.fmt


def draw_masks(fig, theme):
    panels = [
        (aligned_mask, aligned, "position-aligned mask (from positions)"),
        (upper_left_mask, upper_left, "upper-left mask (is_causal=True)"),
    ]
    on_allowed = theme.text_on(to_rgba(theme.series[0]))
    axes = fig.subplots(2, 1)
    for ax, (mask, outputs, title) in zip(axes, panels, strict=True):
        for i, row in enumerate(mask.tolist()):
            for j, blocked in enumerate(row):
                ax.add_patch(
                    Rectangle(
                        (j, i),
                        1,
                        1,
                        facecolor=theme.masked if blocked else theme.series[0],
                        hatch="///" if blocked else None,
                        edgecolor=theme.text,
                        linewidth=0.8,
                    )
                )
                ax.text(
                    j + 0.5,
                    i + 0.5,
                    "blocked" if blocked else fmt(values[j]),
                    ha="center",
                    va="center",
                    fontsize=8 if blocked else 10,
                    color=theme.text if blocked else on_allowed,
                )
            ax.text(
                len(row) + 0.15,
                i + 0.5,
                f"→ mean {fmt(outputs[i])}",
                va="center",
            )
        ax.set_xlim(0, len(values) + 1.3)
        ax.set_ylim(len(mask), 0)
        ax.set_xticks(
            [j + 0.5 for j in key_positions],
            [f"key {j}" for j in key_positions],
        )
        ax.set_yticks(
            [i + 0.5 for i in range(len(mask))],
            [f"query pos {p}" for p in query_positions],
        )
        ax.tick_params(length=0)
        for side in ax.spines.values():
            side.set_visible(False)
        ax.set_title(title, fontsize=10, loc="left")
    fig.suptitle(
        f"{len(query_positions)} new queries (positions "
        f"{', '.join(map(str, query_positions))}) against "
        f"{len(key_positions)} cached + new keys, all scores 0"
    )


q3, q4 = query_positions
glue.figure(
    "kv-masks",
    draw_masks,
    figsize=(7.0, 3.4),
    alt=(
        f"Two masks of {len(query_positions)} query rows by "
        f"{len(key_positions)} key columns, each allowed cell labelled "
        "with the value it averages over. The position-aligned mask lets "
        f"query {q3} see keys 0 to {q3} (mean {fmt(aligned[0])}) and "
        f"query {q4} all keys (mean {fmt(aligned[1])}). The upper-left "
        "mask of is_causal=True lets them see only the first one and two "
        f"keys (means {fmt(upper_left[0])} and {fmt(upper_left[1])})."
    ),
)

# %% [markdown]
# ## One new query needs no mask
#
# In token-by-token decoding the only new query is the last position,
# and every key lies in its past. With the same zero scores, the mask
# built from positions and no mask at all give the same mean; SDPA's
# `is_causal=True` treats the query as position 0 and returns the first
# value.

# %%
masked, unmasked, _ = kv_cache.single_new_query(values)
glue.value("single_query", {"masked": masked, "unmasked": unmasked})
no_mask, is_causal = kv_cache.single_query_is_causal(values)
glue.value(
    "one_query",
    {"position": n_key - 1, "no_mask": no_mask, "is_causal": is_causal},
)

# %% [markdown]
# ## The cached loop equals the full pass
#
# A small layer with 4 query heads, 2 key/value heads and RoPE, random
# weights, runs once over all 12 positions with the causal mask, then
# through `cached_forward` in several splits: a prefill and single
# steps, one token at a time, one chunk, uneven chunks. Every split must
# give the same outputs, in float32 and float64 (the same numbers in
# both). Add your own split to `chunkings` (positive lengths summing to
# 12) and rerun.

# %%
module_args = glue.value(
    "module", {"d_model": 32, "n_head": 4, "n_kv_head": 2, "rope": True}
)
batch, T = glue.value("batch", 2), glue.value("t", 12)
chunkings = {  # name: chunk lengths, summing to T
    "prefill 8, then 4 single steps": [8, 1, 1, 1, 1],
    "12 single steps": [1] * 12,
    "one chunk of 12": [12],
    "chunks of 3, 5 and 4": [3, 5, 4],
}
prefill_steps = chunkings["prefill 8, then 4 single steps"]


def make_module(dtype):
    """The layer, its weights drawn from a fixed seed, scaled by 0.3."""
    module = torch_ref.MultiHeadAttention(**module_args, dtype=dtype)
    gen = torch.Generator().manual_seed(31)
    with torch.no_grad():
        for param in module.parameters():
            param.copy_(torch.randn(param.shape, generator=gen) * 0.3)
    return module


def make_x(dtype):
    """The input (batch, T, d_model): the same numbers in both dtypes."""
    gen = torch.Generator().manual_seed(32)
    x = torch.randn(
        batch, T, module_args["d_model"], generator=gen, dtype=torch.float64
    )
    return x.to(dtype)


rows = []
modules = {d: make_module(d) for d in (torch.float32, torch.float64)}
with torch.no_grad():
    for name, chunks in chunkings.items():
        row = {"name": name, "chunks": chunks}
        for dtype, module in modules.items():
            x = make_x(dtype)
            full = module(x, mask=torch_ref.causal_mask(T))[0]
            cached = kv_cache.cached_forward(module, x, chunks)
            key = str(dtype).removeprefix("torch.")
            row[key] = (cached - full).abs().max()
        rows.append(row)
        print(
            f"{name:<31}: max difference float32 {row['float32']:.1e}, "
            f"float64 {row['float64']:.1e}"
        )
    # the float64 run again, to see what the cache holds at the end
    module, x = modules[torch.float64], make_x(torch.float64)
    full = module(x, mask=torch_ref.causal_mask(T))[0]  # (B, T, d_model)
    cache = kv_cache.KVCache()
    for n_new in prefill_steps:
        kv_cache.cached_step(module, cache, x[:, cache.length :][:, :n_new])
glue.value(
    "cache",
    {
        "rows": rows,
        "atol": {"float32": atol("float32"), "float64": atol("float64")},
        "cache_shape": {
            "keys": list(cache.keys.shape),
            "length": cache.length,
        },
        "worst_float32": max(r["float32"] for r in rows),
        "worst_float64": max(r["float64"] for r in rows),
    },
)
glue.table(
    "decoding-equality",
    ["chunk lengths", "split", "largest difference, float32", "float64"],
    [
        [
            "[" + ", ".join(map(str, r["chunks"])) + "]",
            r["name"],
            fmt(r["float32"], 2),
            fmt(r["float64"], 2),
        ]
        for r in rows
    ],
    "llrr",
)

# %% [markdown]
# ## RoPE: only the distance counts
#
# A random query and key of head size 8 are rotated at every pair of
# positions $m, n$ from 0 to 15, and the $16 \times 16$ scores are
# compared with those at $m + s, n + s$ for a few shifts $s$: after
# RoPE a score depends on $n - m$ only. One example score, shifted, one
# position further apart, and without RoPE at all.

# %%
gen = torch.Generator().manual_seed(33)
d_head, n_pos = 8, 16
q = torch.randn(1, d_head, generator=gen, dtype=torch.float64)
k = torch.randn(1, d_head, generator=gen, dtype=torch.float64)


def score(m, n):
    """The score of q at position m and k at position n, after RoPE."""
    qm = torch_ref.apply_rope(q, [m])  # (1, d_head)
    kn = torch_ref.apply_rope(k, [n])
    return float((qm * kn).sum())


def grid(shift):
    """q at every position m, k at every n: (n_pos, n_pos) scores."""
    pos = torch.arange(n_pos) + shift
    qm = torch_ref.apply_rope(q.expand(n_pos, d_head), pos)
    kn = torch_ref.apply_rope(k.expand(n_pos, d_head), pos)
    return qm @ kn.T  # (m, n)


shifts = [1, 7, 100, 1000]  # added to both positions: m + s, n + s
m, n, shift = 5, 2, 100
rope = glue.value(
    "rope",
    {
        "d_head": d_head,
        "n_pos": n_pos,
        "example": {
            "m": m,
            "n": n,
            "shift": shift,
            "score": score(m, n),
            "score_shifted": score(m + shift, n + shift),
            "score_other_gap": score(m, n + 1),
            "score_no_rope": float((q * k).sum()),
        },
        "shifts": shifts,
        "max_shift_change": [(grid(s) - grid(0)).abs().max() for s in shifts],
    },
)
glue.table(
    "rope-shifts",
    [
        "shift s",
        f"largest change of a score, m and n in 0 to {n_pos - 1}",
    ],
    [
        [str(s), fmt(e, 2)]
        for s, e in zip(shifts, rope["max_shift_change"], strict=True)
    ],
    "rr",
)

# %% [markdown]
# ## The RoPE bug: positions counted from the chunk
#
# `pitfalls.wrong_cached_step` rotates each chunk as if it started at
# position 0. After a prefill of 8 the prefill rows still match the full
# pass (float64, the layer above); every single step after it does not.
# In one chunk the bug cannot be seen.

# %%


def wrong_forward(chunks):
    """cached_forward with pitfalls.wrong_cached_step in each chunk."""
    cache, outputs = kv_cache.KVCache(), []
    for n_new in chunks:
        chunk = x[:, cache.length : cache.length + n_new]  # (B, n, d_model)
        outputs.append(pitfalls.wrong_cached_step(module, cache, chunk))
    return torch.cat(outputs, dim=1)  # (B, T, d_model)


prefill = prefill_steps[0]
with torch.no_grad():
    wrong = wrong_forward(prefill_steps)
    error = (wrong - full).abs().amax(dim=(0, 2))  # per position
    one_chunk = wrong_forward([T])
for position, e in enumerate(error.tolist()):
    print(f"position {position:>2}: error {e:.1e}")
wrong_rope = glue.value(
    "wrong_rope",
    {
        "prefill": prefill,
        "error_per_position": error,
        "prefill_error": error[:prefill].max(),
        "step_error": error[prefill:].max(),
        "output_scale": full.abs().max(),
        "one_chunk_error": (one_chunk - full).abs().max(),
    },
)


def draw_bug(fig, theme):
    errors = error.tolist()
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


glue.figure(
    "kv-rope-bug",
    draw_bug,
    figsize=(5.0, 3.0),
    alt=(
        "Bar chart of the error of each output position when RoPE "
        "restarts at position 0 in every chunk: the prefill rows 0 "
        f"to {prefill - 1} have error "
        f"{fmt(wrong_rope['prefill_error'], 2)}, the single steps after it "
        f"errors up to {fmt(wrong_rope['step_error'], 2)}."
    ),
)
