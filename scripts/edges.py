# %% [markdown]
# ## Your turn: a query with nothing to read
#
# Block every key of query row 1 of a 3-position input and run each
# version: ours raises and names the row (and so do the NumPy reference
# and both tiled passes), unless told `empty_rows="zero"`, which returns
# zeros as SDPA does; a $-\infty$ fill with a plain softmax returns NaN,
# whether `masked_fill` writes it or an additive mask adds it, and a
# $-10^9$ fill returns the plain mean of all the values. Each
# backpropagates a loss that ignores that row, as the loss of a padding
# query is ignored; `grad_summary` counts the NaN entries of dQ, dK and
# dV. Block a different row, or only some of its keys, and rerun: with
# one allowed key left, all of them agree.

# %%
import contextlib
import math
import statistics as stats

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import glue
from mha_ref import numpy_ref, pitfalls, tiled, torch_ref

fmt = glue.fmt
glue.value("torch", torch.__version__)
T, d_head = 3, 4
blocked_row = 1
glue.value("t", T)
glue.value("blocked_row", blocked_row)
mask = torch.zeros(T, T, dtype=torch.bool)  # (T, T), True = blocked
mask[blocked_row] = True  # every key of that row


def grad_summary(grads, masked_row_dq=None):
    """How many gradient entries are NaN, of how many."""
    summary = {
        "grad": True,
        "nan": sum(int(g.isnan().sum()) for g in grads),
        "entries": sum(g.numel() for g in grads),
        "nan_each": [int(g.isnan().sum()) for g in grads],
        "entries_each": [g.numel() for g in grads],
    }
    if masked_row_dq is not None:
        summary["masked_row_dq_max"] = float(masked_row_dq.abs().max())
    return summary


def classify(row, values):
    """NaN, zeros, the plain mean of all values, or something else."""
    if row.isnan().any():
        return "nan"
    if (row == 0).all():
        return "zeros"
    if torch.allclose(row, values.mean(dim=-2), atol=1e-6):
        return "mean"
    return "other"


def raises(run):
    try:
        run()
    except ValueError:
        return True
    return False


gen = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(1, 1, T, d_head, generator=gen) for _ in "qkv")
masked = {}
try:
    torch_ref.attention(q, k, v, mask)
    masked["ours"] = {"raises": False}
except ValueError as error:
    print("ours      : ValueError:", error)
    masked["ours"] = {"raises": True, "message": str(error)}
qn, kn, vn, mask_n = (t.numpy() for t in (q, k, v, mask))
refusals = {
    "numpy_ref.attention": lambda: numpy_ref.attention(qn, kn, vn, mask_n),
    "tiled_attention_numpy": lambda: tiled.tiled_attention_numpy(
        qn, kn, vn, mask_n
    ),
    "tiled_attention_torch": lambda: tiled.tiled_attention_torch(
        q, k, v, mask
    ),
}
masked["ours"]["also_raise"] = [
    name for name, run in refusals.items() if raises(run)
]


def plain(fill):
    """Attention with the blocked scores overwritten with ``fill``."""

    def run(q, k, v):
        s = q @ k.transpose(-2, -1) / math.sqrt(d_head)  # (1, 1, T, T)
        return s.masked_fill(mask, fill).softmax(dim=-1) @ v

    return run


def additive(fill):
    """Attention with ``fill`` added to the blocked scores."""

    def run(q, k, v):
        s = q @ k.transpose(-2, -1) / math.sqrt(d_head)  # (1, 1, T, T)
        return (s + torch.where(mask, fill, 0.0)).softmax(dim=-1) @ v

    return run


runs = {
    # SDPA's boolean mask means True = allowed
    "sdpa": lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, attn_mask=~mask
    ),
    "ours_zero": lambda q, k, v: torch_ref.attention(
        q, k, v, mask, empty_rows="zero"
    )[0],
    "fill_1e9": plain(-1e9),
    "fill_inf": plain(-math.inf),
    "add_inf": additive(-math.inf),
}
upstream = torch.ones(1, 1, T, d_head)  # dL/dO
upstream[..., blocked_row, :] = 0  # the loss ignores the masked row
for name, run in runs.items():
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = run(*leaves)  # (1, 1, T, d_head)
    out.backward(upstream)
    row = out[0, 0, blocked_row].detach()
    others = torch.cat(
        [out[0, 0, :blocked_row], out[0, 0, blocked_row + 1 :]]
    ).detach()
    print(f"{name:<10}: row {blocked_row} = {row.numpy().round(3)}")
    masked[name] = {
        "raises": False,
        "row": classify(row, v[0, 0]),
        "row_values": row,
        "others_nan": bool(others.isnan().any()),
        **grad_summary(
            [t.grad for t in leaves], leaves[0].grad[0, 0, blocked_row]
        ),
    }
print(f"{'mean of v':<10}: {v[0, 0].mean(dim=0).numpy().round(3)}")
sdpa_out = F.scaled_dot_product_attention(q, k, v, attn_mask=~mask)
with sdpa_kernel([SDPBackend.MATH]):  # SDPA's math backend
    sdpa_math = F.scaled_dot_product_attention(q, k, v, attn_mask=~mask)
masked["sdpa"]["math_row"] = classify(sdpa_math[0, 0, blocked_row], v[0, 0])
# the math backend's softmax: a row of -inf scores gives zeros
safe = torch._safe_softmax(torch.full((T,), -math.inf), 0)
masked["sdpa"]["safe_softmax_zeros"] = bool((safe == 0).all())
ours_zero, _ = torch_ref.attention(q, k, v, mask, empty_rows="zero")
masked["ours_zero"]["vs_sdpa"] = float((ours_zero - sdpa_out).abs().max())

row_text = {
    "nan": "NaN",
    "zeros": "zeros",
    "mean": "mean of all values",
    "bias": "zeros",  # y = the output bias alone: the attention row was 0
    "other": "finite",
}
labels = {
    "ours": "ours",
    "ours_zero": '`empty_rows="zero"`',
    "sdpa": "SDPA",
    "fill_1e9": "fill `-1e9`",  # s.masked_fill(mask, -1e9)
    "fill_inf": "fill `-inf`",
    "add_inf": "add `-inf`",  # s + where(mask, -inf, 0)
}
rows = []
for key, label in labels.items():
    r = masked[key]
    if r["raises"]:
        rows.append([label, "raises ValueError", "-"])
    else:
        nan_each = ", ".join(str(n) for n in r["nan_each"])
        rows.append([label, row_text[r["row"]], nan_each])
entries = masked["sdpa"]["entries_each"][0]  # dQ, dK, dV: T * d_head each
glue.table(
    "edges-masked-row",
    ["code", "the row's output", f"NaN in dQ, dK, dV (of {entries} each)"],
    rows,
    "llc",
)

# %% [markdown]
# ## The same row through `nn.MultiheadAttention`
#
# Our layer with an output bias, and the library's module with the same
# weights (`torch_ref.library_version`), in training and in eval mode
# (under `torch.no_grad()`), each with `need_weights=False` and with its
# default `need_weights=True`. `counting_fast_path` counts the calls to
# the module's fused kernel (its fast path): in eval mode this layer
# meets every condition of it, whatever `need_weights`. When the
# attention row is zeros, the output is the bias alone.


# %%
@contextlib.contextmanager
def counting_fast_path():
    """Count nn.MultiheadAttention's fused (fast path) calls inside."""
    calls, original = [], torch._native_multi_head_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    torch._native_multi_head_attention = counted
    try:
        yield calls
    finally:
        torch._native_multi_head_attention = original


def module_result(y, bias, grads):
    """What the masked row of y holds, and the gradients' NaN count."""
    row = y[0, blocked_row].detach()
    if row.isnan().any():
        kind = "nan"
    elif (row == bias).all():
        kind = "bias"  # the attention row was zeros
    else:
        kind = "other"
    others = [y[0, i] for i in range(T) if i != blocked_row]
    result = {
        "raises": False,
        "row": kind,
        "row_values": row,
        "others_nan": bool(any(r.isnan().any() for r in others)),
    }
    result.update(grad_summary(grads) if grads else {"grad": False})
    return result


d_model, n_head = 8, 2  # an even head count: the fast path
torch.manual_seed(0)
module = torch_ref.MultiHeadAttention(d_model, n_head, bias=True)
with torch.no_grad():  # a visible output bias: y = bias when A = 0
    module.wo.bias.copy_(torch.randn(d_model))
library = torch_ref.library_version(module)  # batch_first=True, biases
x = torch.randn(1, T, d_model)
bias = module.wo.bias.detach()
try:
    module(x, mask)
    masked["ours_module"] = {"raises": False}
except ValueError as error:
    masked["ours_module"] = {"raises": True, "message": str(error)}
upstream = torch.ones(1, T, d_model)
upstream[:, blocked_row] = 0  # the loss ignores the masked row
for name, need_weights in (("mha_train", False), ("mha_train_weights", True)):
    library.train()
    library.zero_grad(set_to_none=True)
    leaf = x.clone().requires_grad_()
    with counting_fast_path() as calls:
        y, _ = library(
            leaf, leaf, leaf, attn_mask=mask, need_weights=need_weights
        )
    y.backward(upstream)
    grads = [leaf.grad] + [p.grad for p in library.parameters()]
    masked[name] = module_result(y, bias, grads)
    masked[name]["fast_path_calls"] = len(calls)
library.eval()
for name, need_weights in (("mha_eval", False), ("mha_eval_weights", True)):
    with torch.no_grad(), counting_fast_path() as calls:
        y, _ = library(x, x, x, attn_mask=mask, need_weights=need_weights)
    masked[name] = module_result(y, bias, None)
    masked[name]["fast_path_calls"] = len(calls)
for name, r in masked.items():
    print(f"{name:<18}: {'raises' if r['raises'] else r['row']}")
glue.value("masked", masked)
glue.value(
    "masked_other_rows_nan",
    any(r.get("others_nan", False) for r in masked.values()),
)


def mha_cell(r):
    """The row's output, the path taken, the gradients' NaN count."""
    text = row_text[r["row"]]
    if r["fast_path_calls"]:
        text += ", fast path"
    if r["grad"]:
        text += (
            f"; {r['nan']} of {r['entries']} grads NaN"
            if r["nan"]
            else "; grads finite"
        )
    return text


glue.table(
    "edges-mha",
    ["need_weights", "False", "True (default)"],
    [
        [
            "train",
            mha_cell(masked["mha_train"]),
            mha_cell(masked["mha_train_weights"]),
        ],
        [
            "eval, no_grad",
            mha_cell(masked["mha_eval"]),
            mha_cell(masked["mha_eval_weights"]),
        ],
    ],
    "lll",
)

# %% [markdown]
# ## Fill values in float16 and bfloat16
#
# One row of scores, with six ways of blocking, softmaxed in each dtype:
# key 0 blocked (the largest score, so a fill that fails shows), or all
# three keys blocked. The results are kept as float64: NumPy has no
# bfloat16. Then two additive `finfo.min` masks, padding and causal,
# over a left-padded sequence. Try another fill.

# %%
fill_scores = glue.value("fill_scores", [2.0, -30.0, 1.0])
one = torch.tensor([True, False, False])  # key 0, the largest score
full = torch.ones(3, dtype=torch.bool)  # every key blocked
fills = {}
for dtype in (torch.float16, torch.bfloat16):
    s = torch.tensor(fill_scores, dtype=dtype)
    low = torch.tensor(torch.finfo(dtype).min, dtype=dtype)
    zero = torch.zeros((), dtype=dtype)
    methods = {
        "inf_fill": lambda m, s=s: s.masked_fill(m, -math.inf),
        "min_fill": lambda m, s=s, low=low: s.masked_fill(m, low),
        "min_added": lambda m, s=s, low=low, zero=zero: (
            s + torch.where(m, low, zero)
        ),
        "min_added_twice": lambda m, s=s, low=low, zero=zero: (
            s + torch.where(m, low, zero) + torch.where(m, low, zero)
        ),
        "fill_1e9": lambda m, s=s: s.masked_fill(m, -1e9),
        "fill_1e6": lambda m, s=s: s.masked_fill(m, -1e6),
    }
    rows = {}
    for name, method in methods.items():
        try:
            rows[name] = {
                "one_weight": float(method(one).softmax(-1)[0]),
                "full_scores": method(full).double(),
                "full_weights": method(full).softmax(-1).double(),
            }
        except RuntimeError as error:
            rows[name] = {"error": str(error)}
    third = torch.tensor(1 / 3, dtype=dtype)  # the dtype's nearest to 1/3
    fills[str(dtype).removeprefix("torch.")] = {
        "min": float(low),
        "min_plus_score": float(low + s[1]),  # finfo.min + (-30)
        "min_plus_min": float(low + low),
        "unmasked_weight": float(s.softmax(-1)[0]),  # key 0, no mask
        "third": float(third),
        "three_thirds": 3 * float(third),
        "rows": rows,
    }
# with key 0 blocked, every fill that fits gives it weight 0
fits_zero = all(
    r["one_weight"] == 0
    for d in fills.values()
    for r in d["rows"].values()
    if "error" not in r
)
glue.value("fills", fills)
glue.value("fills_one_blocked_zero", fits_zero)


def describe(weights):
    """A row of weights in a few characters: NaN, 1/n each, or a list."""
    if weights.isnan().all():
        return "NaN"
    if (weights == weights[0]).all():
        return f"1/{len(weights)} each"
    return ", ".join(fmt(w, 3) for w in weights)


fill_labels = {
    "inf_fill": "fill `-inf`",  # s.masked_fill(mask, -inf)
    "min_fill": "fill `finfo.min`",
    "min_added": "add `finfo.min`",  # s + where(mask, finfo.min, 0)
    "min_added_twice": "add `finfo.min` twice (the same mask)",
    "fill_1e9": "fill `-1e9`",
    "fill_1e6": "fill `-1e6`",
}
rows = []
for key, label in fill_labels.items():
    cells = [label]
    for dtype in ("float16", "bfloat16"):
        r = fills[dtype]["rows"][key]
        cells.append("raises" if "error" in r else describe(r["full_weights"]))
    rows.append(cells)
glue.table("edges-fills", ["fill", "float16", "bfloat16"], rows, "lll")

# padding and causal as two additive finfo.min masks, keys 0, 1 padding
t4 = 4
pad_left = torch.tensor([True, True, False, False])  # (Tk,), left padding
causal4 = torch_ref.causal_mask(t4)  # (T, T)
two_masks = {
    "empty_rows": [
        i for i in range(t4) if bool((pad_left | causal4)[i].all())
    ],
    # a row both masks block entirely: finfo.min + finfo.min on every key
    "double_blocked_rows": [
        i for i in range(t4) if bool((pad_left & causal4)[i].all())
    ],
}
for dtype in (torch.float16, torch.bfloat16):
    low = torch.tensor(torch.finfo(dtype).min, dtype=dtype)
    zero = torch.zeros((), dtype=dtype)
    scores = torch.zeros(t4, t4, dtype=dtype)  # (T, T)
    scores = scores + torch.where(pad_left, low, zero)  # padding mask
    scores = scores + torch.where(causal4, low, zero)  # causal mask
    w = scores.softmax(dim=-1).double()  # (T, T)
    two_masks[str(dtype).removeprefix("torch.")] = {
        "row0": w[0],
        "row1": w[1],
        "any_nan": bool(w.isnan().any()),
    }
print("two additive masks, float16, rows 0 and 1:")
print(two_masks["float16"]["row0"], two_masks["float16"]["row1"])
glue.value("two_masks", two_masks)

# %% [markdown]
# ## Statistics in float16
#
# The tiled pass keeps its running sums in float32. Kept in float16
# instead (`pitfalls.wrong_tiled_statistics_dtype`), a mean of 512
# values of 200 needs a running total of 102,400, more than float16
# holds. In bfloat16, one key per block, $256 + 1$ rounds back to 256,
# in any order of the values. Then random inputs of 4 heads of 256
# positions against float64, over a few seeds. The wrong pass also
# computes $QK^\top$, $P$ and $PV$ in the input dtype; `statistics_only`
# computes them in float32 and rounds only the state to the input dtype
# after each block, and `p_rounded` keeps the state in float32 but
# rounds $P$ before $PV$, as FlashAttention does. Try `value = 100.0`,
# or `n_keys = 256`.


# %%
def statistics_only(q, k, v, block_k=64):
    """Scores, P and PV in float32; the running max, sum and output
    rounded to the input dtype after each block, as the wrong pass
    keeps them. q (..., Tq, d), k (..., Tk, d), v (..., Tk, dv)."""
    *lead, tq, d = q.shape
    low, wide = q.dtype, torch.float32
    state = (
        torch.full((*lead, tq, 1), -math.inf, dtype=low),  # running max
        torch.zeros((*lead, tq, 1), dtype=low),  # running sum
        torch.zeros((*lead, tq, v.shape[-1]), dtype=low),  # output
    )
    for j in range(0, k.shape[-2], block_k):
        k_j = k[..., j : j + block_k, :].to(wide)  # (..., bk, d)
        v_j = v[..., j : j + block_k, :].to(wide)  # (..., bk, dv)
        s = q.to(wide) @ k_j.transpose(-2, -1) / math.sqrt(d)
        wide_state = tuple(x.to(wide) for x in state)
        new = tiled.online_softmax_update_torch(wide_state, s, v_j)
        state = tuple(x.to(low) for x in new)  # stored in the input dtype
    _, row_sum, acc = state
    return (acc.to(wide) / row_sum.to(wide)).to(low)  # (..., Tq, dv)


def p_rounded(q, k, v, block_k=64):
    """FlashAttention's rule: scores and the running max, sum and output
    in float32, but P rounded to the input dtype before P V (which
    accumulates in float32). No mask. Shapes as statistics_only."""
    *lead, tq, d = q.shape
    low, wide = q.dtype, torch.float32
    row_max = torch.full((*lead, tq, 1), -math.inf)  # float32
    row_sum = torch.zeros((*lead, tq, 1))
    acc = torch.zeros((*lead, tq, v.shape[-1]))  # (..., Tq, dv)
    for j in range(0, k.shape[-2], block_k):
        k_j = k[..., j : j + block_k, :].to(wide)  # (..., bk, d)
        v_j = v[..., j : j + block_k, :].to(wide)  # (..., bk, dv)
        s = q.to(wide) @ k_j.transpose(-2, -1) / math.sqrt(d)
        new_max = torch.maximum(row_max, s.amax(dim=-1, keepdim=True))
        alpha = torch.exp(row_max - new_max)  # (..., Tq, 1)
        p = torch.exp(s - new_max)  # (..., Tq, bk), float32
        row_sum = alpha * row_sum + p.sum(dim=-1, keepdim=True)
        acc = alpha * acc + p.to(low).to(wide) @ v_j  # P rounded
        row_max = new_max
    return (acc / row_sum).to(low)  # (..., Tq, dv)


statistics = {}
n_keys, value = 512, 200.0
q = torch.zeros(1, 1, 1, 8, dtype=torch.float16)  # (B, H, Tq, d)
k = torch.zeros(1, 1, n_keys, 8, dtype=torch.float16)  # (B, H, Tk, d)
v = torch.full((1, 1, n_keys, 1), value, dtype=torch.float16)
statistics["fp16_sum"] = {
    "exact": value,  # the mean of equal values
    "float32": float(tiled.tiled_attention_torch(q, k, v)),
    "input_dtype": float(pitfalls.wrong_tiled_statistics_dtype(q, k, v)),
    "statistics_only": float(statistics_only(q, k, v)),
    "keys": n_keys,
    "value": value,
    "running_total": n_keys * value,
    "dtype_max": torch.finfo(torch.float16).max,
}
qb, kb = q.bfloat16(), k.bfloat16()
half = n_keys // 2
orders = {  # 256 zeros and 256 ones, three ways
    "zeros_first": torch.cat([torch.zeros(half), torch.ones(half)]),
    "ones_first": torch.cat([torch.ones(half), torch.zeros(half)]),
    "alternating": torch.arange(n_keys) % 2,
}
orders = {
    name: vals.to(torch.bfloat16).view(1, 1, n_keys, 1)  # (B, H, Tk, dv)
    for name, vals in orders.items()
}
vb = orders["zeros_first"]
count = torch.zeros((), dtype=torch.bfloat16)
for _ in range(n_keys):  # the running sum of 512 weights of 1
    count = count + 1
statistics["bf16_block_1"] = {
    "exact": 0.5,
    "float32": float(tiled.tiled_attention_torch(qb, kb, vb, block_k=1)),
    "input_dtype": float(
        pitfalls.wrong_tiled_statistics_dtype(qb, kb, vb, block_k=1)
    ),
    "statistics_only": float(statistics_only(qb, kb, vb, block_k=1)),
    "sum_256_plus_1": float(torch.tensor(256.0, dtype=torch.bfloat16) + 1),
    "keys": n_keys,
    "running_sum": float(count),
    "weights_total": n_keys / float(count),  # each key weighs 1 / sum
    "orders": {
        name: float(
            pitfalls.wrong_tiled_statistics_dtype(qb, kb, vals, block_k=1)
        )
        for name, vals in orders.items()
    },
}
passes = {
    "p_rounded": p_rounded,
    "statistics_only": statistics_only,
    "input_dtype": pitfalls.wrong_tiled_statistics_dtype,
}
seeds = range(8)


def rms(x):
    return float(x.double().pow(2).mean().sqrt())


for name, dtype in (
    ("fp16_random", torch.float16),
    ("bf16_random", torch.bfloat16),
):
    ratios = {p: [] for p in passes}
    shares, right_errors = [], []
    for seed in seeds:
        gen = torch.Generator().manual_seed(seed)
        q, k, v = (
            torch.randn(1, 4, 256, 64, generator=gen).to(dtype) for _ in "qkv"
        )
        exact, _ = torch_ref.attention(q.double(), k.double(), v.double())
        right = rms(tiled.tiled_attention_torch(q, k, v) - exact)
        errors = {p: rms(run(q, k, v) - exact) for p, run in passes.items()}
        right_errors.append(right)
        for p in passes:
            ratios[p].append(errors[p] / right)
        # the share of the extra error due to QK^T, P, PV in low precision
        extra = errors["input_dtype"] - right
        shares.append(
            (errors["input_dtype"] - errors["statistics_only"]) / extra
        )
    statistics[name] = {
        "right_rms": stats.median(right_errors),
        "ratio": {
            p: {"median": stats.median(r), "min": min(r), "max": max(r)}
            for p, r in ratios.items()
        },
        "products_share": {
            "median": stats.median(shares),
            "min": min(shares),
            "max": max(shares),
        },
        "seeds": len(seeds),
        "shape": list(q.shape),
        "block": tiled.BLOCK,
    }
for name in ("fp16_sum", "bf16_block_1"):
    r = statistics[name]
    print(
        f"{name:<13}: float32 {r['float32']:.4g}, input dtype "
        f"{r['input_dtype']:.4g}"
    )
for name in ("fp16_random", "bf16_random"):
    r = statistics[name]["ratio"]
    print(name, {p: round(x["median"], 2) for p, x in r.items()})
glue.value("statistics", statistics)

glue.table(
    "edges-statistics",
    ["pass", "float16, 512 × 200", "bfloat16, block_k = 1"],
    [
        [label]
        + [fmt(statistics[c][key]) for c in ("fp16_sum", "bf16_block_1")]
        for key, label in (
            ("exact", "exact"),
            ("float32", "right: all in float32"),
            ("input_dtype", "wrong: all in the input dtype"),
            ("statistics_only", "only the state in the input dtype"),
        )
    ],
    "lrr",
)


def spread(r):
    """median, then (min-max) on its own line; three significant figures."""
    lo, hi = fmt(r["min"], 3), fmt(r["max"], 3)
    # a word joiner after the dash: the range never breaks
    return f"{fmt(r['median'], 3)}<br>({lo}–\u2060{hi})"


glue.table(
    "edges-statistics-random",
    ["pass", "float16", "bfloat16"],
    [
        [label]
        + [
            spread(statistics[c]["ratio"][key])
            for c in ("fp16_random", "bf16_random")
        ]
        for key, label in (
            ("p_rounded", "$P$ rounded, state in float32 (FlashAttention)"),
            ("statistics_only", "only the state in the input dtype"),
            ("input_dtype", "wrong: all in the input dtype"),
        )
    ],
    "lrr",
)

# %% [markdown]
# ## What SDPA computes on the CPU in float16 and bfloat16
#
# One query, two keys with scores $0$ and $s$ (weights $1$ and $e^s$),
# values $0$ and $1$: the output is $e^s / (1 + e^s)$. Computed in
# float32 and rounded once, or with $P = e^s$ rounded to the input
# dtype first, the two rules differ for some $s$; for those, which one
# does each SDPA backend (and `torch_ref.attention`) give? Try a wider
# range of $s$, or `SDPBackend.FLASH_ATTENTION`.

# %%
sdpa_cpu = {}
for dtype in (torch.float16, torch.bfloat16):
    s = torch.linspace(-3, 0, 2001).to(dtype).unique()  # (n,) scores
    n = s.numel()
    q = torch.ones(n, 1, 1, 1, dtype=dtype)  # (n, H, Tq, d): d = 1
    k = torch.stack([torch.zeros_like(s), s], dim=-1).view(n, 1, 2, 1)
    v = torch.tensor([0.0, 1.0], dtype=dtype).expand(n, 1, 2).unsqueeze(-1)
    default = F.scaled_dot_product_attention(q, k, v, scale=1.0).flatten()
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        flash = F.scaled_dot_product_attention(q, k, v, scale=1.0).flatten()
    with sdpa_kernel([SDPBackend.MATH]):
        math_ = F.scaled_dot_product_attention(q, k, v, scale=1.0).flatten()
    ours = torch_ref.attention(q, k, v, scale=1.0)[0].flatten()
    p = s.float().exp()  # (n,), float32
    wide = (p / (1 + p)).to(dtype)  # all in float32, rounded once
    rounded = (p.to(dtype).float() / (1 + p)).to(dtype)  # P rounded first
    differ = wide != rounded  # the s where the two rules disagree
    sdpa_cpu[str(dtype).removeprefix("torch.")] = {
        "values": n,
        "differ": int(differ.sum()),
        "default_is_rounded": int((default[differ] == rounded[differ]).sum()),
        "default_is_wide": int((default[differ] == wide[differ]).sum()),
        "math_is_rounded": int((math_[differ] == rounded[differ]).sum()),
        "math_is_wide": int((math_[differ] == wide[differ]).sum()),
        "ours_is_rounded": int((ours[differ] == rounded[differ]).sum()),
        "ours_is_wide": int((ours[differ] == wide[differ]).sum()),
        "flash_is_default": bool((flash == default).all()),
    }
    print(dtype, sdpa_cpu[str(dtype).removeprefix("torch.")])
glue.value("sdpa_cpu", sdpa_cpu)


def rule_cell(r, rounded, wide):
    """Which rule an implementation followed where the two differ."""
    n = r["differ"]
    if r[rounded] == n:
        return f"$P$ rounded: {n} of {n}"
    if r[wide] == n:
        return f"float32: {n} of {n}"
    return f"$P$ rounded {r[rounded]}, float32 {r[wide]}, of {n}"


glue.table(
    "edges-sdpa-cpu",
    ["code", "float16", "bfloat16"],
    [
        [label] + [rule_cell(sdpa_cpu[dt], *keys) for dt in sdpa_cpu]
        for label, keys in (
            ("SDPA, default", ("default_is_rounded", "default_is_wide")),
            ("SDPA, math backend", ("math_is_rounded", "math_is_wide")),
            ("ours", ("ours_is_rounded", "ours_is_wide")),
        )
    ],
    "lll",
)

# %% [markdown]
# ## Padding and causal together
#
# Two sequences of lengths 4 and 2, padded to 4. The padding mask
# $(B, 1, 1, T_k)$ and the causal mask $(T, T)$ combine with `|` into
# one mask per sequence. With zero scores and values $1, 2, 3, 4$, each
# query averages what it may see. Then left padding: the first two
# queries of the short sequence see only padding, and ours says so;
# with `empty_rows="zero"` they get zeros, as with SDPA. Last, a bare
# $(B, T_k)$ padding mask: with $B = T_q$ it is read as $(T_q, T_k)$,
# wrong without an error; at decoding ($T_q = 1$) ours refuses it, and
# a hand-written `masked_fill` broadcasts it into $B$ query rows.

# %%
lengths = [4, 2]
t = max(lengths)
padding = torch_ref.key_padding_mask(lengths)  # (B, 1, 1, Tk)
causal = torch_ref.causal_mask(t)  # (T, T)
combined = padding | causal  # (B, 1, T, T): either one blocks
zeros = torch.zeros(len(lengths), 1, t, 1, dtype=torch.float64)
values = torch.arange(1.0, t + 1, dtype=torch.float64).view(1, 1, t, 1)
out, weights = torch_ref.attention(zeros, zeros, values, combined)
print("mask shape", tuple(combined.shape))
for b, row in enumerate(out[:, 0, :, 0].tolist()):
    print(f"sequence {b} (length {lengths[b]}): outputs {row}")
# left padding: the first queries of sequence 2 see only padding
left = torch.tensor([[False] * t, [True] * (t - 2) + [False] * 2])
left_mask = torch_ref.key_padding_mask(left) | causal  # (B, 1, T, T)
left_empty = left_mask[1, 0].all(dim=-1)  # (T,): no allowed key
try:
    torch_ref.attention(zeros, zeros, values, left_mask)
    left_message = None
except ValueError as error:
    print("left padding: ValueError:", error)
    left_message = str(error)
left_zero, left_weights = torch_ref.attention(
    zeros, zeros, values, left_mask, empty_rows="zero"
)
# SDPA's boolean mask means True = allowed
left_sdpa = F.scaled_dot_product_attention(
    zeros, zeros, values, attn_mask=~left_mask
)
print("left padding, empty_rows='zero':", left_zero[1, 0, :, 0].tolist())
# a bare (B, Tk) mask, B == Tq, is read as (Tq, Tk): wrong, silent
b, tq, d = len(lengths), len(lengths), 3
gen = torch.Generator().manual_seed(0)
q = torch.randn(b, 1, tq, d, generator=gen)  # (B, H, Tq, d)
k = torch.randn(b, 1, t, d, generator=gen)  # (B, H, Tk, d); v = k
bare = padding[:, 0, 0, :]  # (B, Tk)
right_out, _ = torch_ref.attention(q, k, k, padding)
bare_out, _ = torch_ref.attention(q, k, k, bare)
# decoding: one new query per sequence, the same bare mask
q1 = q[:, :, :1]  # (B, H, 1, d)
try:
    torch_ref.attention(q1, k, k, bare)
    decode_message = None
except ValueError as error:
    decode_message = str(error)
s1 = q1 @ k.transpose(-2, -1) / math.sqrt(d)  # (B, H, 1, Tk)
hand = s1.masked_fill(bare, -math.inf)  # broadcasts: (B, H, B, Tk)
hand_out = hand.softmax(dim=-1) @ k  # (B, H, B, d): B rows, not 1
print("decoding, hand-written masked_fill:", tuple(hand_out.shape))
glue.value(
    "combined",
    {
        "lengths": lengths,
        "padding_shape": list(padding.shape),
        "causal_shape": list(causal.shape),
        "shape": list(combined.shape),
        "mask": combined[:, 0],
        "weights": weights[:, 0],
        "v": values.flatten(),
        "out": out[:, 0, :, 0],
        "left_message": left_message,
        "left_empty_rows": [i for i in range(t) if left_empty[i]],
        "left_zero_out": left_zero[1, 0, :, 0],
        "left_zero_vs_sdpa": float((left_zero - left_sdpa).abs().max()),
        "bare_setup": {"b": b, "tq": tq, "tk": t, "d": d},
        "bare_difference": float((bare_out - right_out).abs().max()),
        "bare_values_size": float(k.abs().max()),  # v = k
        "decode_broadcast_shape": list(hand.shape),
        "decode_scores_shape": list(s1.shape),
        "decode_mask_shape": list(bare.shape),
        "decode_hand_shape": list(hand_out.shape),
        "decode_message": decode_message,
    },
)


def weights_row(w, empty):
    text = ", ".join(fmt(x, 3) for x in w)
    return f"{text} (empty)" if empty else text


for name, w, o, empty in (
    ("edges-combined", weights, out, [False] * t),
    ("edges-combined-left", left_weights, left_zero, left_empty.tolist()),
):
    glue.table(
        name,
        ["query", "weights on keys 0 to 3", "output"],
        [
            [str(i), weights_row(w[1, 0, i], empty[i]), fmt(o[1, 0, i, 0])]
            for i in range(t)
        ],
        "rlr",
    )
