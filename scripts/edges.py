# %% [markdown]
# ## Your turn: a query with nothing to read
#
# Block every key of query row 1 of a 3-position input and run each
# version: ours raises and names the row (and so do the NumPy reference
# and both tiled passes), unless told `empty_rows="zero"`, which returns
# zeros as SDPA does; a $-\infty$ fill with a plain softmax returns NaN,
# and a $-10^9$ fill returns the plain mean of all the values. Each
# backpropagates a loss that ignores that row, as the loss of a padding
# query is ignored; `grad_summary` counts the NaN entries of the
# gradients. Block a different row, or only some of its keys, and
# rerun: with one allowed key left, all of them agree.

# %%
import contextlib
import math

import torch
import torch.nn.functional as F

import glue
from mha_ref import numpy_ref, pitfalls, tiled, torch_ref

fmt, fmt_list = glue.fmt, glue.fmt_list
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
    """Attention with the blocked scores filled with ``fill``."""

    def run(q, k, v):
        s = q @ k.transpose(-2, -1) / math.sqrt(d_head)  # (1, 1, T, T)
        return s.masked_fill(mask, fill).softmax(dim=-1) @ v

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
ours_zero, _ = torch_ref.attention(q, k, v, mask, empty_rows="zero")
masked["ours_zero"]["vs_sdpa"] = float((ours_zero - sdpa_out).abs().max())

# %% [markdown]
# ## The same row through `nn.MultiheadAttention`
#
# Our layer with an output bias, and the library's module with the same
# weights (`torch_ref.library_version`), in training and in eval mode,
# each with `need_weights=False` and with its default `need_weights=True`.
# In eval mode with `need_weights=False` the module takes its fused
# fast path: `counting_fast_path` counts the calls to it. When the
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
library = torch_ref.library_version(module)
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
    y, _ = library(leaf, leaf, leaf, attn_mask=mask, need_weights=need_weights)
    y.backward(upstream)
    grads = [leaf.grad] + [p.grad for p in library.parameters()]
    masked[name] = module_result(y, bias, grads)
library.eval()
with torch.no_grad(), counting_fast_path() as calls:
    y, _ = library(x, x, x, attn_mask=mask, need_weights=False)
masked["mha_eval"] = module_result(y, bias, None)
masked["mha_eval"]["fast_path_calls"] = len(calls)
with torch.no_grad(), counting_fast_path() as calls:
    y, _ = library(x, x, x, attn_mask=mask)  # need_weights=True
masked["mha_eval_weights"] = module_result(y, bias, None)
masked["mha_eval_weights"]["fast_path_calls"] = len(calls)
for name, r in masked.items():
    print(f"{name:<18}: {'raises' if r['raises'] else r['row']}")
glue.value("masked", masked)

row_text = {
    "nan": "NaN",
    "zeros": "zeros",
    "mean": "the mean of all values (uniform weights)",
    "bias": "zeros (y = the output bias alone)",
    "other": "finite",
}


def grads_text(r):
    if not r.get("grad"):
        return "none: runs without autograd"
    if r["nan"]:
        return f"{r['nan']} of {r['entries']} NaN"
    text = f"all {r['entries']} finite"
    if "masked_row_dq_max" in r:
        text += f"; that row's dq: {fmt(r['masked_row_dq_max'], 2)}"
    return text


labels = {
    "ours": "`torch_ref.attention` (and the whole module)",
    "ours_zero": '`torch_ref.attention(..., empty_rows="zero")`',
    "sdpa": "`F.scaled_dot_product_attention`",
    "mha_train": "`nn.MultiheadAttention`, train, need_weights=False",
    "mha_train_weights": (
        "`nn.MultiheadAttention`, train, need_weights=True (default)"
    ),
    "mha_eval": "`nn.MultiheadAttention`, eval, need_weights=False "
    "(fast path)",
    "mha_eval_weights": (
        "`nn.MultiheadAttention`, eval, need_weights=True (default)"
    ),
    "fill_1e9": "`masked_fill(mask, -1e9)`, then softmax",
    "fill_inf": "`masked_fill(mask, -inf)`, then softmax",
}
rows = []
for key, label in labels.items():
    r = masked[key]
    if r["raises"]:
        rows.append([label, "raises ValueError", "-", "-"])
    else:
        others = "yes" if r["others_nan"] else "no"
        rows.append([label, row_text[r["row"]], others, grads_text(r)])
glue.table(
    "edges-masked-row",
    [
        "implementation",
        "output of the fully masked row",
        "NaN in other rows",
        "gradients (loss ignores that row)",
    ],
    rows,
    "llcl",
)

# %% [markdown]
# ## Fill values in float16 and bfloat16
#
# One row of scores, key 1 blocked (`partial`) or every key blocked
# (`full`), with five ways of blocking, softmaxed in each dtype. The
# results are kept as float64: NumPy has no bfloat16. Try another fill.

# %%
fill_scores = glue.value("fill_scores", [2.0, -30.0, 1.0])
partial = torch.tensor([False, True, False])  # key 1 blocked
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
    }
    rows = {}
    for name, method in methods.items():
        try:
            rows[name] = {
                "partial_scores": method(partial).double(),
                "partial_weights": method(partial).softmax(-1).double(),
                "full_scores": method(full).double(),
                "full_weights": method(full).softmax(-1).double(),
            }
        except RuntimeError as error:
            rows[name] = {"error": str(error)}
    fills[str(dtype).removeprefix("torch.")] = {
        "min": float(low),
        "min_plus_score": float(low + s[1]),  # finfo.min + (-30)
        "min_plus_min": float(low + low),
        "rows": rows,
    }
glue.value("fills", fills)

fill_labels = {
    "inf_fill": "`masked_fill(mask, -inf)`",
    "min_fill": "`masked_fill(mask, finfo.min)`",
    "min_added": "`scores + where(mask, finfo.min, 0)`",
    "min_added_twice": "two such masks added",
    "fill_1e9": "`masked_fill(mask, -1e9)`",
}
rows = []
for key, label in fill_labels.items():
    cells = [label]
    for dtype in ("float16", "bfloat16"):
        r = fills[dtype]["rows"][key]
        if "error" in r:
            cells += ["RuntimeError", "RuntimeError"]
        else:
            cells += [
                fmt(r["partial_weights"][1]),
                fmt_list(r["full_weights"]).replace("nan", "NaN"),
            ]
    rows.append(cells)
glue.table(
    "edges-fills",
    [
        "fill",
        "float16: blocked weight",
        "float16: all blocked",
        "bfloat16: blocked weight",
        "bfloat16: all blocked",
    ],
    rows,
    "lrlrl",
)

# %% [markdown]
# ## Statistics in float16
#
# The tiled pass keeps its running sums in float32. Kept in float16
# instead (`pitfalls.wrong_tiled_statistics_dtype`), a mean of 512
# values of 200 needs a running total of 102,400, more than float16
# holds. In bfloat16, one key per block, $256 + 1$ rounds back to 256.
# Then random inputs of 4 heads of 256 positions against float64. The
# wrong pass also computes $QK^\top$, $P$ and $PV$ in the input dtype;
# `statistics_only` computes them in float32 and rounds only the state
# to the input dtype after each block, which splits the error between
# the two. Try `value = 100.0`, or `n_keys = 256`.


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
vb = torch.cat([torch.zeros(256), torch.ones(256)])
vb = vb.to(torch.bfloat16).view(1, 1, 512, 1)  # (B, H, Tk, dv)
step = torch.tensor(256.0, dtype=torch.bfloat16)
statistics["bf16_block_1"] = {
    "exact": 0.5,
    "float32": float(tiled.tiled_attention_torch(qb, kb, vb, block_k=1)),
    "input_dtype": float(
        pitfalls.wrong_tiled_statistics_dtype(qb, kb, vb, block_k=1)
    ),
    "statistics_only": float(statistics_only(qb, kb, vb, block_k=1)),
    "sum_256_plus_1": float(step + 1),
}
gen = torch.Generator().manual_seed(0)
for name, dtype in (
    ("fp16_random", torch.float16),
    ("bf16_random", torch.bfloat16),
):
    q, k, v = (
        torch.randn(1, 4, 256, 64, generator=gen).to(dtype) for _ in "qkv"
    )
    exact, _ = torch_ref.attention(q.double(), k.double(), v.double())
    right = tiled.tiled_attention_torch(q, k, v)
    wrong = pitfalls.wrong_tiled_statistics_dtype(q, k, v)
    state = statistics_only(q, k, v)
    right_error = float((right.double() - exact).abs().max())
    wrong_error = float((wrong.double() - exact).abs().max())
    state_error = float((state.double() - exact).abs().max())
    statistics[name] = {
        "float32": right_error,
        "input_dtype": wrong_error,
        "ratio": wrong_error / right_error,
        "statistics_only": state_error,
        "statistics_only_ratio": state_error / right_error,
        # the share of the extra error due to QK^T, P, PV in low precision
        "products_share": (wrong_error - state_error)
        / (wrong_error - right_error),
        "shape": list(q.shape),
        "block": tiled.BLOCK,
    }
for name, r in statistics.items():
    print(
        f"{name:<13}: float32 {r['float32']:.4g}, input dtype "
        f"{r['input_dtype']:.4g}"
    )
glue.value("statistics", statistics)

rows = [
    [
        f"float16, q = k = 0, v = {fmt(value)}, {n_keys} keys",
        fmt(statistics["fp16_sum"]["exact"]),
        fmt(statistics["fp16_sum"]["float32"]),
        fmt(statistics["fp16_sum"]["input_dtype"]),
        fmt(statistics["fp16_sum"]["statistics_only"]),
    ],
    [
        "bfloat16, block_k = 1, v = 256 zeros then 256 ones",
        fmt(statistics["bf16_block_1"]["exact"]),
        fmt(statistics["bf16_block_1"]["float32"]),
        fmt(statistics["bf16_block_1"]["input_dtype"]),
        fmt(statistics["bf16_block_1"]["statistics_only"]),
    ],
]
for key, dtype in (("fp16_random", "float16"), ("bf16_random", "bfloat16")):
    r = statistics[key]
    rows.append(
        [
            f"{dtype}, random, largest error vs float64",
            "-",
            fmt(r["float32"], 2),
            fmt(r["input_dtype"], 2),
            fmt(r["statistics_only"], 2),
        ]
    )
glue.table(
    "edges-statistics",
    [
        "case",
        "exact",
        "right: all in float32",
        "wrong: all in the input dtype",
        "only the statistics in the input dtype",
    ],
    rows,
    "lrrrr",
)

# %% [markdown]
# ## Padding and causal together
#
# Two sequences of lengths 4 and 2, padded to 4. The padding mask
# $(B, 1, 1, T_k)$ and the causal mask $(T, T)$ combine with `|` into
# one mask per sequence. With zero scores and values $1, 2, 3, 4$, each
# query averages what it may see. Then left padding: the first two
# queries of the short sequence see only padding, and ours says so;
# with `empty_rows="zero"` they get zeros, as with SDPA. Last, a
# bare $(B, T_k)$ padding mask with $B = T_q$: read as $(T_q, T_k)$, it
# is wrong without an error.

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
left_zero, _ = torch_ref.attention(
    zeros, zeros, values, left_mask, empty_rows="zero"
)
# SDPA's boolean mask means True = allowed
left_sdpa = F.scaled_dot_product_attention(
    zeros, zeros, values, attn_mask=~left_mask
)
print("left padding, empty_rows='zero':", left_zero[1, 0, :, 0].tolist())
# a bare (B, Tk) mask, B == Tq, is read as (Tq, Tk): wrong, silent
gen = torch.Generator().manual_seed(0)
q = torch.randn(len(lengths), 1, len(lengths), 3, generator=gen)
k = torch.randn(len(lengths), 1, t, 3, generator=gen)
bare = padding[:, 0, 0, :]  # (B, Tk)
right_out, _ = torch_ref.attention(q, k, k, padding)
bare_out, _ = torch_ref.attention(q, k, k, bare)
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
        "bare_difference": float((bare_out - right_out).abs().max()),
    },
)
glue.table(
    "edges-combined",
    ["query position", *(f"key {j}" for j in range(t)), "output"],
    [
        [str(i), *(fmt(w, 3) for w in weights[1, 0, i]), fmt(out[1, 0, i, 0])]
        for i in range(t)
    ],
    "r" * (t + 2),
)
