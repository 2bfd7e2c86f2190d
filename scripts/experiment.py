# %% [markdown]
# ## One layer, four implementations
#
# One set of weights, four implementations: the from-scratch
# `torch_ref.MultiHeadAttention`, the same projections around PyTorch's
# `F.scaled_dot_product_attention` (SDPA), `nn.MultiheadAttention` with
# the weights copied in, and the NumPy reference with the weights copied
# in. `make_case` builds one seeded case: a dtype, biases on or off, and
# one of five masks (True = blocked); `run_case` runs the four and
# measures how far each output is from the from-scratch one.
#
# `nn.Linear` stores its weight as $(\text{out}, \text{in})$ and
# computes $x W^\top$; the NumPy reference computes $x W$, so its copy
# is the transpose. `nn.MultiheadAttention` keeps $W_Q$, $W_K$, $W_V$
# stacked in one `in_proj_weight`. SDPA's boolean mask means *allowed*,
# the opposite of ours: `torch_ref.sdpa_forward` inverts it in one place.
#
# To test your own class, put it in place of `torch_ref.MultiHeadAttention`
# in `Layer` below and rerun the notebook. The copying helpers read
# `d_model`, `n_head`, the four `nn.Linear` layers `wq`, `wk`, `wv`, `wo`,
# and call its `project` and `merge_heads`; give your class the same
# names, or adapt the helpers.

# %%
import contextlib
import copy
import itertools

import numpy as np
import torch
import torch.nn.functional as F

import glue
from mha_ref import numpy_ref, tiled, tolerances, torch_ref

Layer = torch_ref.MultiHeadAttention  # the layer under test
B, T, T_CONTEXT, D_MODEL, N_HEAD = 2, 6, 7, 16, 4
MASKS = ["none", "causal", "per-head", "key-padding", "cross"]
PAIRS = ["sdpa", "library", "numpy"]  # each against the from-scratch
PAIR_LABELS = {
    "forward": "from scratch",
    "tiled": "tiled pass",
    "sdpa": "SDPA",
    "library": "nn.MultiheadAttention",
    "numpy": "NumPy",
}
glue.value(
    "shapes",
    {
        "B": B,
        "T": T,
        "T_context": T_CONTEXT,
        "d_model": D_MODEL,
        "n_head": N_HEAD,
    },
)


def make_mask(kind, device="cpu"):
    """A boolean mask (True = blocked) for the case, or None."""
    if kind == "causal":
        return torch_ref.causal_mask(T, device=device)  # (T, T)
    if kind == "per-head":
        generator = torch.Generator().manual_seed(1)
        mask = torch.rand(1, N_HEAD, T, T, generator=generator) < 0.5
        mask &= ~torch.eye(T, dtype=torch.bool)  # keep the diagonal
        return mask.to(device)  # (1, H, T, T): a pattern per head
    if kind == "key-padding":
        mask = torch.zeros(B, 1, 1, T, dtype=torch.bool)
        mask[1, ..., T - 2 :] = True  # the second sequence is 2 shorter
        return mask.to(device)  # (B, 1, 1, Tk)
    return None  # "none" and "cross"


def make_case(dtype, bias, kind, device="cpu"):
    """A seeded layer, its input x, a context (cross only) and a mask."""
    torch.manual_seed(0)
    dtype = getattr(torch, dtype)
    module = Layer(D_MODEL, N_HEAD, bias=bias, device=device, dtype=dtype)
    # float16 and bfloat16 inputs are drawn in float32, then rounded
    drawn = dtype if dtype in (torch.float32, torch.float64) else None
    x = torch.randn(B, T, D_MODEL, dtype=drawn).to(device, dtype)
    context = None
    if kind == "cross":
        context = torch.randn(B, T_CONTEXT, D_MODEL, dtype=drawn)
        context = context.to(device, dtype)  # (B, T_context, d_model)
    return module, x, context, make_mask(kind, device)


def host(t):
    """A tensor as a NumPy array (None stays None)."""
    return None if t is None else t.detach().cpu().numpy()


def run_case(dtype, bias, kind, device="cpu"):
    """Max abs difference of each pair, plus the from-scratch weights."""
    module, x, context, mask = make_case(dtype, bias, kind, device)
    with torch.no_grad():
        y, weights = module(x, mask, context)  # (B, T, d_model)
        library = torch_ref.library_version(module)
        outputs = {
            "sdpa": torch_ref.sdpa_forward(module, x, mask, context),
            "library": torch_ref.library_forward(library, x, mask, context),
        }
    twin = numpy_ref.MultiHeadAttention.from_torch(
        module
    )  # numpy_ref.MultiHeadAttention
    y_numpy, _ = twin(host(x), host(mask), host(context))
    diffs = {p: float((out - y).abs().max()) for p, out in outputs.items()}
    diffs["numpy"] = float(np.abs(y_numpy - host(y)).max())
    # nn.MultiheadAttention calls SDPA itself: how far apart are they?
    diffs["library_minus_sdpa"] = float(
        (outputs["library"] - outputs["sdpa"]).abs().max()
    )
    return diffs, weights, mask


# The SDPA call as the page shows it: the path's layer, whose key/value
# heads are as many as its query heads; torch_ref.sdpa_forward also
# passes enable_gqa for grouped heads (a Going-further page).
# --8<-- [start:sdpa-call-short]
def sdpa_attention(q, k, v, mask=None):
    """Steps 1 to 4 through SDPA; q, k, v already split into heads."""
    # SDPA's boolean mask means True = allowed: the one place we flip it
    allowed = None if mask is None else ~mask  # (B, H, Tq, Tk)
    # 0.0, the default, written out: dropout_p does not follow .eval()
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=allowed, dropout_p=0.0
    )  # (B, H, Tq, dh)
    # --8<-- [end:sdpa-call-short]


# the short call agrees with the library's path, in every case below
for dtype, bias, kind in itertools.product(
    ["float32", "float64"], [False, True], MASKS
):
    module, x, context, mask = make_case(dtype, bias, kind)
    with torch.no_grad():
        q, k, v = module.project(x, context, None)  # (B, H, T, dh)
        short = module.wo(module.merge_heads(sdpa_attention(q, k, v, mask)))
        full = torch_ref.sdpa_forward(module, x, mask, context)
    if not torch.equal(short, full):
        raise RuntimeError(
            f"the short SDPA call differs ({dtype}, bias={bias}, {kind})"
        )

diffs, _, _ = run_case("float32", False, "causal")  # one case of the table
atol = tolerances.atol("float32")
for pair in PAIRS:
    verdict = "ok" if diffs[pair] <= atol else "TOO LARGE"
    print(
        f"from scratch vs {PAIR_LABELS[pair]:<21}: {diffs[pair]:.2e}  "
        f"{verdict}"
    )

# %% [markdown]
# ## Every dtype, bias and mask
#
# The same comparison for float32 and float64, biases off and on, and
# the five masks: none, causal, a random pattern per head, key padding
# (the last two keys of the second sequence blocked) and cross-attention
# to a context of `T_CONTEXT` positions. A CPU difference above the dtype's
# tolerance (`mha_ref/tolerances.py`) is a bug, and stops the notebook;
# on a CUDA device, where PyTorch may use TF32 or other kernels, the
# rows are added and published as measured.
#
# The cell also checks two properties of the weights
# $A = \operatorname{softmax}(S + M)$: each row is a distribution over
# the keys, $\sum_j A_{ij} = 1$, and the causal mask gives every future
# key ($j > i$) exactly zero weight, because $e^{-\infty} = 0$.

# %%
DTYPES = ["float32", "float64"]
cuda = glue.value("cuda_rows_included", torch.cuda.is_available())
devices = ["cpu", "cuda"] if cuda else ["cpu"]


def fail_on_cpu(rows):
    """A CPU row above its tolerance is a bug: raise."""
    failed = [r for r in rows if not r["passed"] and r.get("device") != "cuda"]
    if failed:
        raise ValueError(f"parity fails on CPU: {failed}")


rows, row_error, future = [], dict.fromkeys(DTYPES, 0.0), 0.0
library_minus_sdpa = dict.fromkeys(DTYPES, 0.0)  # CPU, every case
for device, dtype, bias, kind in itertools.product(
    devices, DTYPES, (False, True), MASKS
):
    diffs, weights, mask = run_case(dtype, bias, kind, device)
    if device == "cpu":
        library_minus_sdpa[dtype] = max(
            library_minus_sdpa[dtype], diffs["library_minus_sdpa"]
        )
    sums = weights.sum(dim=-1) - 1  # (B, H, T): each row's sum, minus 1
    row_error[dtype] = max(row_error[dtype], float(sums.abs().max()))
    if kind == "causal":
        future = max(future, float(weights.masked_select(mask).max()))
    rows.extend(
        {
            "pair": pair,
            "dtype": dtype,
            "device": device,
            "bias": bias,
            "mask": kind,
            "max_abs_diff": diffs[pair],
            "tolerance": tolerances.atol(dtype),
            "passed": diffs[pair] <= tolerances.atol(dtype),
        }
        for pair in PAIRS
    )
fail_on_cpu(rows)
glue.value("rows", rows)
glue.value("all_passed", all(r["passed"] for r in rows))
cpu32 = [r for r in rows if r["device"] == "cpu" and r["dtype"] == "float32"]
summary = glue.value(
    "summary",
    {
        pair: max(r["max_abs_diff"] for r in cpu32 if r["pair"] == pair)
        for pair in PAIRS
    },
)
glue.value("rows_sum_to_one", row_error["float32"])
glue.value("rows_sum_to_one_float64", row_error["float64"])
# the float32 row-sum error in float32 epsilons (the gap between 1 and
# the next float32): one or two roundings of the softmax's division
glue.value(
    "rows_sum_in_eps", row_error["float32"] / float(np.finfo("float32").eps)
)
glue.value("future_weight", future)

# %% [markdown]
# ## float16 and bfloat16 against float64
#
# Each path runs in the small dtype, with biases: the from-scratch
# layer, the tiled pass (`mha_ref/tiled.py`, in tiles of `LOW_BLOCK`
# queries by `LOW_BLOCK` keys), SDPA and `nn.MultiheadAttention`. Each
# is compared with the from-scratch layer in float64 on the same rounded
# weights and inputs, so a difference is what the small dtype costs that
# path.

# %%
LOW_DTYPES = ["float16", "bfloat16"]
LOW_PATHS = ["forward", "tiled", "sdpa", "library"]
LOW_BLOCK = 4  # tiled pass: two tiles per row and per column at T = 6


def tiled_forward(module, x, mask, context):
    """The module's weights through tiled_attention_torch."""
    q, k, v = module.project(x, context)  # (B, H, T, dh)
    out = tiled.tiled_attention_torch(
        q, k, v, mask, block_q=LOW_BLOCK, block_k=LOW_BLOCK
    )  # (B, H, Tq, dh)
    return module.wo(module.merge_heads(out))  # (B, Tq, d_model)


def run_low_case(dtype, kind):
    """Max abs difference of each path in dtype from float64."""
    module, x, context, mask = make_case(dtype, True, kind)
    wide = copy.deepcopy(module).double()  # the same rounded weights
    with torch.no_grad():
        context64 = None if context is None else context.double()
        expected, _ = wide(x.double(), mask, context64)
        library = torch_ref.library_version(module)
        outputs = {
            "forward": module(x, mask, context)[0],
            "tiled": tiled_forward(module, x, mask, context),
            "sdpa": torch_ref.sdpa_forward(module, x, mask, context),
            "library": torch_ref.library_forward(library, x, mask, context),
        }
    diffs = {
        path: float((out.double() - expected).abs().max())
        for path, out in outputs.items()
    }
    return diffs, float(expected.abs().max())


low_rows, low_peak = [], 0.0
for dtype, kind in itertools.product(LOW_DTYPES, MASKS):
    diffs, peak = run_low_case(dtype, kind)
    low_peak = max(low_peak, peak)
    low_rows.extend(
        {
            "pair": path,
            "dtype": dtype,
            "device": "cpu",
            "bias": True,
            "mask": kind,
            "max_abs_diff": diffs[path],
            "tolerance": tolerances.atol(dtype),
            "passed": diffs[path] <= tolerances.atol(dtype),
        }
        for path in LOW_PATHS
    )
fail_on_cpu(low_rows)
glue.value("low_rows", low_rows)
glue.value("low_output_peak", low_peak)
glue.value("low_all_passed", all(r["passed"] for r in low_rows))

# %% [markdown]
# ## The table, and the tolerances in machine epsilons
#
# One row per path, dtype and bias setting, one column per mask; each
# cell is the largest absolute difference over the whole output. Each
# tolerance is also given in units of the dtype's machine epsilon (the
# gap between 1 and the next number).

# %%
fmt = glue.fmt
tolerance = {r["dtype"]: r["tolerance"] for r in rows + low_rows}
cases = {}  # (pair, device, dtype, bias) -> {mask: row}
for r in rows + low_rows:
    case = (r["pair"], r["device"], r["dtype"], r["bias"])
    cases.setdefault(case, {})[r["mask"]] = r


def line(label, device, dtype, bias, by_mask):
    return [
        label,
        *([device] if cuda else []),
        dtype,
        "yes" if bias else "no",
        *(fmt(by_mask[m]["max_abs_diff"], 2) for m in MASKS),
        # the tolerance and whether every case is within it, one column
        fmt(tolerance[dtype])
        + (" ✓" if all(r["passed"] for r in by_mask.values()) else " ✗"),
    ]


table = [
    line(
        PAIR_LABELS[pair],
        device,
        dtype,
        bias,
        cases[pair, device, dtype, bias],
    )
    for pair, device, dtype, bias in itertools.product(
        PAIRS, devices, DTYPES, (False, True)
    )
]
# the low-precision rows all run on the CPU with biases: path, dtype
low_table = [
    [row[0], dtype, *row[3 + bool(cuda) :]]
    for dtype, path in itertools.product(LOW_DTYPES, LOW_PATHS)
    for row in [
        line(
            PAIR_LABELS[path],
            "cpu",
            dtype,
            True,
            cases[path, "cpu", dtype, True],
        )
    ]
]
columns = [*MASKS, "tol., pass"]
header = ["path", *(["device"] if cuda else []), "dtype", "bias", *columns]
glue.table(
    "parity",
    header,
    table,
    "l" + "l" * (3 if cuda else 2) + "r" * len(MASKS) + "r",
)
# narrow enough for a phone: one row per path, device and dtype (in
# one column, which wraps), its worst case over the masks and biases
summary_table = [
    [
        " ".join([PAIR_LABELS[pair], *([device] if cuda else []), dtype]),
        fmt(max(r["max_abs_diff"] for r in by_case), 2),
        fmt(tolerance[dtype])
        + (" ✓" if all(r["passed"] for r in by_case) else " ✗"),
    ]
    for pair, device, dtype in itertools.product(PAIRS, devices, DTYPES)
    for by_case in [
        [
            r
            for bias in (False, True)
            for r in cases[pair, device, dtype, bias].values()
        ]
    ]
]
glue.table(
    "parity-summary",
    [
        "path, device, dtype" if cuda else "path, dtype",
        "worst",
        "tol., pass",
    ],
    summary_table,
    "lrr",
)
glue.table(
    "parity-low",
    ["path", "dtype", *columns],
    low_table,
    "ll" + "r" * len(MASKS) + "r",
)


def in_eps(dtype):
    """The tolerance of dtype and what it is in the dtype's eps."""
    if dtype == "bfloat16":  # NumPy has no bfloat16
        eps = torch.finfo(torch.bfloat16).eps
    else:
        eps = float(np.finfo(dtype).eps)
    tol = tolerances.atol(dtype)
    return {"tolerance": tol, "eps": eps, "in_eps": tol / eps}


glue.value("eps", {dtype: in_eps(dtype) for dtype in LOW_DTYPES + DTYPES})

# %% [markdown]
# ## SDPA inside nn.MultiheadAttention
#
# In recent PyTorch versions `nn.MultiheadAttention` computes its
# attention by calling `F.scaled_dot_product_attention` itself. The cell
# counts those calls in one forward; the largest CPU difference between
# the two paths, per dtype, was kept by the sweep above.

# %%
module, x, _, mask = make_case("float32", False, "causal")
library = torch_ref.library_version(module)


@contextlib.contextmanager
def counting_sdpa():
    """Count the calls to F.scaled_dot_product_attention inside."""
    calls, original = [], F.scaled_dot_product_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    F.scaled_dot_product_attention = counted
    try:
        yield calls
    finally:
        F.scaled_dot_product_attention = original


with torch.no_grad(), counting_sdpa() as calls:
    torch_ref.library_forward(library, x, mask)
glue.value("library_sdpa_calls", len(calls))
glue.value("library_minus_sdpa", library_minus_sdpa)

# %% [markdown]
# ## The largest difference per pair
#
# One bar per implementation pair and dtype: the worst case over the
# five masks and both bias settings, on a log scale; one panel per
# dtype, each with its own tolerance as a dashed line.

# %%
verdict = (
    "every bar is below its tolerance line"
    if all(r["passed"] for r in rows)
    else "some bars exceed their tolerance line"
)

SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def power_of_ten(value, _position):
    """A log axis label as plain text, 10⁻¹⁶ (mathtext is slow to lay out)."""
    return "10" + str(round(np.log10(value))).translate(SUPERSCRIPT)


def draw(fig, theme):
    # one panel per dtype, each with its own tolerance: a dashed line,
    # and the fail side right of it shaded; horizontal bars, one per
    # pair, top to bottom, so the labels sit on the left and the figure
    # fits a phone's column. Each bar's value is written inside its end,
    # on the pass side of the line.
    axes = fig.subplots(len(DTYPES), 1)
    width = 0.8 / len(devices)
    for ax, dtype in zip(axes, DTYPES, strict=True):
        tol = tolerance[dtype]
        colour = theme.series[DTYPES.index(dtype)]
        # the same span of powers of ten in both panels: 7 below the
        # tolerance, 2 above it
        left, right = tol / 1e7, tol * 1e2
        ax.axvspan(tol, right, color=theme.muted, alpha=0.18, lw=0)
        ax.text(
            tol * 10,
            (len(PAIRS) - 1) / 2,
            "fail",
            ha="center",
            va="center",
            fontsize=9,
        )
        ax.axvline(tol, ls="--", lw=1.4, color=theme.text)
        for d, device in enumerate(devices):
            heights = [
                max(
                    r["max_abs_diff"]
                    for bias in (False, True)
                    for r in cases[pair, device, dtype, bias].values()
                )
                for pair in PAIRS
            ]
            ys = np.arange(len(PAIRS)) + (d - (len(devices) - 1) / 2) * width
            bars = ax.barh(
                ys,
                [max(h, left) for h in heights],
                width * 0.9,
                color=colour,
                hatch="//" if device == "cuda" else None,
                label=device,
            )
            on_bar = theme.text_on(bars[0].get_facecolor())
            for y_pos, h in zip(ys, heights, strict=True):
                text = "0" if h == 0 else fmt(h, 2)
                if h > left * 1e3:  # room inside the bar: at its end
                    at, ha, ink = h / 1.4, "right", on_bar
                else:  # too short: just right of it, still far left
                    at, ha, ink = max(h, left) * 1.4, "left", theme.text
                ax.text(
                    at,
                    y_pos,
                    text,
                    ha=ha,
                    va="center",
                    fontsize=9,
                    color=ink,
                )
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(power_of_ten)
        ax.set_xlim(left, right)
        ax.set_yticks(
            range(len(PAIRS)),
            [
                PAIR_LABELS[p].replace("Multihead", "Multihead-\n")
                for p in PAIRS
            ],
            fontsize=9,
        )
        ax.set_ylim(len(PAIRS) - 0.5, -0.5)  # the first pair on top
        ax.set_title(
            f"{dtype}: tolerance {fmt(tol)} (dashed)",
            fontsize=10,
        )
        if cuda:
            ax.legend(fontsize=8, loc="lower right")
    axes[-1].set_xlabel(
        "max abs difference from the from-scratch\n"
        "layer (torch_ref; all masks, bias on/off)",
        fontsize=9,
    )


cpu64 = [r for r in rows if r["device"] == "cpu" and r["dtype"] == "float64"]
summary64 = {
    pair: max(r["max_abs_diff"] for r in cpu64 if r["pair"] == pair)
    for pair in PAIRS
}
glue.figure(
    "parity-errors",
    draw,
    figsize=(3.7, 5.4),
    alt=(
        "Two horizontal bar charts on a log scale, float32 above and "
        "float64 below, of the largest absolute output difference "
        "between the from-scratch PyTorch attention and three other "
        "implementations, each panel with its own dtype's tolerance as "
        "a dashed line and the fail side right of it shaded: "
        f"{fmt(tolerance['float32'])} for float32 and "
        f"{fmt(tolerance['float64'])} for float64. In float32 the "
        f"differences are {fmt(summary['sdpa'], 2)} (SDPA), "
        f"{fmt(summary['library'], 2)} (nn.MultiheadAttention) and "
        f"{fmt(summary['numpy'], 2)} (NumPy); in float64 "
        f"{fmt(summary64['sdpa'], 2)}, {fmt(summary64['library'], 2)} "
        f"and {fmt(summary64['numpy'], 2)}; {verdict}."
    ),
)

# %% [markdown]
# ## Gradients
#
# Matching outputs do not prove matching gradients. For every mask, with
# biases, the cell backpropagates one random upstream gradient
# $\partial L / \partial y$ (as the loss $L = \sum y \odot \partial L /
# \partial y$) through the from-scratch layer, SDPA and
# `nn.MultiheadAttention` with autograd, and through the NumPy layer's
# hand-written backward. The library's packed `in_proj_weight` and
# `in_proj_bias` are split back into $W_Q$, $W_K$, $W_V$; the NumPy
# layer's $x W$ weight gradients are transposed back. A weight's gradient
# sums one term per position of every sequence ($B T$ of them), so its
# tolerance is $B T$ times the output tolerance.

# %%
GRAD_PAIRS = ["sdpa", "library", "numpy"]
GRAD_LABELS = {
    "sdpa": "SDPA (autograd)",
    "library": "nn.MultiheadAttention (autograd)",
    "numpy": "NumPy (by hand)",
}
GRAD_GROUPS = ["inputs", "Wq", "Wk", "Wv", "Wo", "biases"]


def gradients(params, forward, inputs, upstream):
    """{name: gradient} of L = sum(forward() * upstream), so dL/dy is
    the upstream gradient."""
    tensors = [p for _, p in params] + list(inputs.values())
    loss = (forward() * upstream).sum()
    grads = torch.autograd.grad(loss, tensors)
    names = [n for n, _ in params] + list(inputs)
    return dict(zip(names, grads, strict=True))


def grad_group(name):
    """x/context -> inputs, wq.weight -> Wq, any bias -> biases."""
    if name in ("x", "context"):
        return "inputs"
    layer, kind = name.split(".")
    return "biases" if kind == "bias" else "W" + layer[1:]


def run_gradient_case(dtype, kind):
    """Each pair's largest gradient difference per group of parameters."""
    module, x, context, mask = make_case(dtype, True, kind)
    inputs = {"x": x} | ({} if context is None else {"context": context})
    for tensor in inputs.values():
        tensor.requires_grad_()
    upstream = torch.randn(B, T, D_MODEL, dtype=x.dtype)  # dL/dy
    params = list(module.named_parameters())
    ours = gradients(
        params, lambda: module(x, mask, context)[0], inputs, upstream
    )
    library = torch_ref.library_version(module)
    packed = gradients(
        list(library.named_parameters()),
        lambda: torch_ref.library_forward(library, x, mask, context),
        inputs,
        upstream,
    )
    grads = {
        "sdpa": gradients(
            params,
            lambda: torch_ref.sdpa_forward(module, x, mask, context),
            inputs,
            upstream,
        ),
        "library": {n: packed[n] for n in inputs},
    }
    # in_proj_weight (and _bias) stacks [Wq; Wk; Wv] along dim 0
    for kind_ in ("weight", "bias"):
        parts = packed[f"in_proj_{kind_}"].chunk(3)
        for name, part in zip(("wq", "wk", "wv"), parts, strict=True):
            grads["library"][f"{name}.{kind_}"] = part
        grads["library"][f"wo.{kind_}"] = packed[f"out_proj.{kind_}"]
    # the NumPy twin computes x @ W: its weight gradients are transposed
    twin = numpy_ref.MultiHeadAttention.from_torch(module)
    by_hand = twin.backward(host(x), host(upstream), host(mask), host(context))
    grads["numpy"] = {
        n: torch.from_numpy(np.asarray(by_hand[n])) for n in inputs
    }
    for name in ("q", "k", "v", "o"):
        grads["numpy"][f"w{name}.weight"] = torch.from_numpy(
            by_hand[f"W{name}"].T.copy()
        )
        grads["numpy"][f"w{name}.bias"] = torch.from_numpy(by_hand[f"b{name}"])
    diffs = {}
    for pair in GRAD_PAIRS:
        groups = dict.fromkeys(GRAD_GROUPS, 0.0)
        for name, grad in ours.items():
            group = grad_group(name)
            diff = float((grads[pair][name] - grad).abs().max())
            groups[group] = max(groups[group], diff)
        diffs[pair] = groups
    largest = max(float(g.abs().max()) for g in ours.values())
    return diffs, largest


gradient_rows, gradient_peak = [], 0.0
for dtype in DTYPES:
    worst = {p: dict.fromkeys(GRAD_GROUPS, 0.0) for p in GRAD_PAIRS}
    for kind in MASKS:
        diffs, largest = run_gradient_case(dtype, kind)
        gradient_peak = max(gradient_peak, largest)
        for pair, group in itertools.product(GRAD_PAIRS, GRAD_GROUPS):
            worst[pair][group] = max(worst[pair][group], diffs[pair][group])
    # a weight's gradient sums one row per position: B * T for Wq, Wo,
    # B * T_context for Wk, Wv in the cross case; the larger count bounds
    grad_tolerance = B * max(T, T_CONTEXT) * tolerances.atol(dtype)
    gradient_rows.extend(
        {
            "pair": pair,
            "dtype": dtype,
            "by_group": worst[pair],
            "tolerance": grad_tolerance,
            "passed": max(worst[pair].values()) <= grad_tolerance,
        }
        for pair in GRAD_PAIRS
    )
fail_on_cpu(gradient_rows)
glue.value(
    "gradients",
    {
        "rows": gradient_rows,
        "largest_gradient": gradient_peak,
        "rows_summed": B * T,
        "rows_summed_cross": B * T_CONTEXT,
        "rows_tolerance": B * max(T, T_CONTEXT),
        "all_passed": all(r["passed"] for r in gradient_rows),
        "worst": {
            dtype: max(
                max(r["by_group"].values())
                for r in gradient_rows
                if r["dtype"] == dtype
            )
            for dtype in DTYPES
        },
    },
)
labels = {"inputs": "x, context", "biases": "biases"}
glue.table(
    "parity-gradients",
    ["path", "dtype"]
    + [labels.get(g, f"`{g}`") for g in GRAD_GROUPS]
    + ["tol., pass"],
    [
        [
            GRAD_LABELS[r["pair"]],
            r["dtype"],
            *(fmt(r["by_group"][g], 2) for g in GRAD_GROUPS),
            fmt(r["tolerance"], 2) + (" ✓" if r["passed"] else " ✗"),
        ]
        for r in gradient_rows
    ],
    "ll" + "r" * len(GRAD_GROUPS) + "r",
)

# %% [markdown]
# ## Your turn: break it on purpose
#
# Dividing by $\sqrt{d_\text{model}}$ instead of $\sqrt{d_k}$
# ([pitfall 2](../../../pitfalls/#scaling)) runs without error and gives
# the right shape, but the numbers move far past the tolerance. This is
# what a real bug looks like next to rounding error. Try the other
# [pitfalls](../../../pitfalls/) the same way.

# %%
module, x, _, mask = make_case("float32", False, "causal")
with torch.no_grad():
    y, _ = module(x, mask)  # (B, T, d_model)
    q, k, v = module.project(x)  # (B, H, T, d_head)
    scale = D_MODEL**0.5  # the mistake: should be module.d_head**0.5
    scores = q @ k.transpose(-2, -1) / scale  # (B, H, T, T)
    scores = scores.masked_fill(mask, float("-inf"))
    wrong = scores.softmax(dim=-1) @ v  # (B, H, T, d_head)
    y_wrong = module.wo(module.merge_heads(wrong))  # (B, T, d_model)
diff = (y_wrong - y).abs().max().item()
print(f"wrong scale: {diff:.2e}, tolerance {atol:.0e}")


# %% [markdown]
# The same mistake planted in a layer: pitfall 5, a `merge_heads` that
# reshapes the heads to $(B, T, d_\text{model})$ without the transpose.
# This cell runs one case with it. To plant it in the whole notebook, go
# to the code cell under *One layer, four implementations* (it starts
# with `import contextlib`) and replace its line
# `Layer = torch_ref.MultiHeadAttention` with the class below followed
# by the line `Layer = WrongMerge`. Then run that cell and every cell
# after it: the cell under *Every dtype, bias and mask* stops with
# `parity fails on CPU`.


# %%
# --8<-- [start:planted-merge]
class WrongMerge(torch_ref.MultiHeadAttention):
    """Pitfall 5 planted: the heads merged without the transpose."""

    def merge_heads(self, x):  # x (B, H, T, dh)
        b, h, t, dh = x.shape
        # no transpose(1, 2): positions and heads interleave,
        # so the merged rows are scrambled
        return x.reshape(b, t, h * dh)  # (B, T, d_model)
        # --8<-- [end:planted-merge]


# as if the cell under "One layer, four implementations" said so
under_test, Layer = Layer, WrongMerge
planted, _, _ = run_case("float32", False, "causal")
Layer = under_test
glue.value("planted_merge", {p: planted[p] for p in PAIRS})
for pair in PAIRS:
    verdict = "ok" if planted[pair] <= atol else "TOO LARGE"
    print(
        f"wrong merge vs {PAIR_LABELS[pair]:<21}: {planted[pair]:.2e}  "
        f"{verdict}"
    )
