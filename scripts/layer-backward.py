# %% [markdown]
# ## Your turn: attention_backward against autograd
#
# One causal attention of 2 heads, 5 positions, float64. PyTorch's
# autograd differentiates $L = \sum O \odot dO$ through
# `torch_ref.attention`; `numpy_ref.attention_backward` computes the
# same gradients by hand. Edit the whole NumPy `attention-backward`
# section above (delete its `mod.scores_backward` line, say), run it,
# then rerun this cell: only the gradients that step feeds jump. (Edit the
# whole function rather than one of its step cells: when the notebook
# runs top to bottom, the whole-function cell comes later and would put
# the step back.)

# %%

import numpy as np
import torch

import glue
from mha_ref import numpy_ref, tiled, tolerances, torch_ref
from mha_ref.memory import peak_bytes_numpy

fmt = glue.fmt
rng = np.random.default_rng(0)
H, T, d = 2, 5, 4
q, k, v, dout = (rng.standard_normal((H, T, d)) for _ in range(4))
mask = numpy_ref.causal_mask(T)  # (T, T)
leaves = [torch.tensor(a, requires_grad=True) for a in (q, k, v)]
out, _ = torch_ref.attention(*leaves, torch.from_numpy(mask))
out.backward(torch.from_numpy(dout))  # dL/dO = dout
ours = numpy_ref.attention_backward(q, k, v, dout, mask)
for name, mine, leaf in zip(["dq", "dk", "dv"], ours, leaves, strict=True):
    diff = np.abs(mine - leaf.grad.numpy()).max()
    print(f"{name}: max |ours - autograd| {diff:.1e}")

# %% [markdown]
# ## Every gradient against autograd
#
# `MultiHeadAttention.backward` returns the gradient of every weight,
# bias and input. `autograd_layer` copies the same weights into
# `torch_ref.MultiHeadAttention` (its `nn.Linear` weights are the
# transposes) and gets the gradients from autograd. Three layers with
# biases, in float64: self-attention with a causal mask,
# cross-attention with key padding, and grouped key/value heads with
# RoPE. Add a layer to `configs`.


# %%
def autograd_layer(layer, x, dy, mask, context):
    """Every gradient by autograd, in numpy_ref's x @ W layout."""
    module = torch_ref.MultiHeadAttention(
        layer.d_model,
        layer.n_head,
        n_kv_head=layer.n_kv_head,
        bias=layer.bq is not None,
        rope=layer.rope,
        dtype=torch.float64,
    )
    with torch.no_grad():
        for name in "qkvo":
            linear = getattr(module, f"w{name}")
            linear.weight.copy_(torch.from_numpy(getattr(layer, f"W{name}").T))
            if linear.bias is not None:
                linear.bias.copy_(torch.from_numpy(getattr(layer, f"b{name}")))
    inputs = {"x": torch.from_numpy(x).requires_grad_()}
    if context is not None:
        inputs["context"] = torch.from_numpy(context).requires_grad_()
    mask_t = None if mask is None else torch.from_numpy(mask)
    y, _ = module(inputs["x"], mask_t, inputs.get("context"))
    y.backward(torch.from_numpy(dy))
    grads = {name: t.grad.numpy() for name, t in inputs.items()}
    for name in "qkvo":
        linear = getattr(module, f"w{name}")
        grads[f"W{name}"] = linear.weight.grad.numpy().T  # x @ W layout
        if linear.bias is not None:
            grads[f"b{name}"] = linear.bias.grad.numpy()
    return grads


batch, d_model, n_head = 2, 16, 4
# name: (Tq, Tk or None for self-attention, n_kv_head, rope, mask)
configs = {
    "self-causal": (6, None, n_head, False, "causal"),
    "cross": (5, 9, n_head, False, "padding"),
    "gqa-rope": (6, None, 2, True, "causal"),
}
rng = np.random.default_rng(0)
results = {}
for name, (tq, tk, n_kv_head, rope, kind) in configs.items():
    layer = numpy_ref.MultiHeadAttention(
        d_model, n_head, n_kv_head=n_kv_head, bias=True, rope=rope, seed=0
    )
    x = rng.standard_normal((batch, tq, d_model))
    context = None
    if tk is not None:
        context = rng.standard_normal((batch, tk, d_model))
    if kind == "causal":
        mask = numpy_ref.causal_mask(tq)  # (Tq, Tq)
    else:  # key padding: the last 3 keys of the second sequence
        seq_lengths = np.array([tk, tk - 3])
        mask = numpy_ref.key_padding_mask(seq_lengths, tk)  # (B, 1, 1, Tk)
    dy = rng.standard_normal((batch, tq, d_model))
    ours = layer.backward(x, dy, mask, context)
    expected = autograd_layer(layer, x, dy, mask, context)
    if sorted(ours) != sorted(expected):
        raise ValueError(f"{name}: {sorted(ours)} != {sorted(expected)}")
    results[name] = {
        "tq": tq,
        "tk": tk or tq,
        "rows": batch * tq,  # the rows of dY that db_O sums
        "cross": tk is not None,
        "n_head": n_head,
        "n_kv_head": n_kv_head,
        "rope": rope,
        "mask": kind,
        "diffs": {p: float(np.abs(ours[p] - expected[p]).max()) for p in ours},
    }
glue.value("configs", results)
glue.value(
    "max_abs_diff",
    max(max(r["diffs"].values()) for r in results.values()),
)
glue.value(  # the two layers of the page's table, without the box's
    "table_max_abs_diff",
    max(
        max(r["diffs"].values())
        for name, r in results.items()
        if name != "gqa-rope"
    ),
)
glue.value("tolerance", tolerances.atol("float64"))
# db_O is the column sum of dY in both: the page says it matches exactly
bo_max_diff = glue.value(
    "bo_max_diff", max(r["diffs"]["bo"] for r in results.values())
)
if bo_max_diff != 0:
    raise ValueError(f"db_O differs from autograd by {bo_max_diff}")
glue.value("d_model", d_model)
glue.value("batch", batch)


# %% [markdown]
# ## The roadmap
#
# The layer's forward pass from top to bottom, one box per array with
# its shape, and on each arrow the step of the page that carries the
# gradient back up it. The shapes are those of the self-attention layer
# above.


# %%
roadmap = results["self-causal"]
sizes = glue.value(
    "roadmap",
    {
        "B": batch,
        "T": roadmap["tq"],
        "d_model": d_model,
        "H": roadmap["n_head"],
        "d_k": d_model // roadmap["n_head"],
    },
)
boxes = [  # (array, its shape in symbols), forward order
    ("X", ("B", "T", "d_model")),
    ("Q, K, V", ("B", "T", "d_model")),
    ("Q, K, V", ("B", "H", "T", "d_k")),
    ("S", ("B", "H", "T", "T")),
    ("A", ("B", "H", "T", "T")),
    ("O", ("B", "H", "T", "d_k")),
    ("C", ("B", "T", "d_model")),  # the heads merged: not the mask M
    ("Y", ("B", "T", "d_model")),
]
arrows = [  # (the page's step, the forward operation), between two boxes
    ("step 7", "× W_Q, W_K, W_V\n(+ b_Q, b_K, b_V)"),
    ("step 6", "split into heads"),
    ("step 4", "Q Kᵀ / √d_k\n(Q, K only)"),
    ("step 3", "softmax"),
    ("step 2: dA", "A V"),
    ("step 6", "merge heads"),
    ("step 5", "× W_O, + b_O"),
]
# the drawn labels: mathtext subscripts, as the text typesets them (the
# alt text keeps the plain labels above)
DRAWN = {
    "× W_Q, W_K, W_V\n(+ b_Q, b_K, b_V)": (
        "× $W_Q$, $W_K$, $W_V$\n(+ $b_Q$, $b_K$, $b_V$)"
    ),
    "Q Kᵀ / √d_k\n(Q, K only)": ("$Q K$ᵀ / √$d_k$\n($Q$, $K$ only)"),
    "× W_O, + b_O": "× $W_O$, + $b_O$",
}
DRAWN_SYMBOLS = {"d_model": r"$d_{\mathrm{model}}$", "d_k": "$d_k$"}
V_FROM, V_INTO = 2, 4  # V leaves the heads box, joins the "A V" arrow
V_STEP = "step 1: dV = Aᵀ dO"


PITCH = 2.5  # one box and the arrow under it: room for two-line labels
HEIGHT = 0.2 + (len(boxes) - 1) * PITCH + 1.15


def shape_text(symbols, drawn=False):
    numbers = ", ".join(str(sizes[s]) for s in symbols)
    if drawn:
        symbols = [DRAWN_SYMBOLS.get(s, s) for s in symbols]
    return f"({', '.join(symbols)}) = ({numbers})"


def draw_roadmap(fig, theme):
    import matplotlib

    pitch = PITCH  # one box and the arrow under it
    ax = glue.diagram_axes(fig, 10.4, HEIGHT)
    lane = 0.85  # V's side branch, left of the boxes
    for i, (name, symbols) in enumerate(boxes):
        y = 0.2 + i * pitch
        ax.add_patch(
            matplotlib.patches.FancyBboxPatch(
                (1.2, y),
                9.0,
                1.05,
                boxstyle="round,pad=0,rounding_size=0.2",
                fill=False,
                edgecolor=theme.text,
                linewidth=1.0,
            )
        )
        ax.text(1.5, y + 0.52, name, va="center", weight="bold")
        shape = shape_text(symbols, drawn=True)
        ax.text(9.9, y + 0.52, shape, va="center", ha="right")
        if i < len(arrows):
            step, operation = arrows[i]
            top, bottom = y + 1.1, y + pitch - 0.05
            glue.draw_arrow(ax, (3.0, top), (3.0, bottom), theme)
            middle = (top + bottom) / 2
            operation = DRAWN.get(operation, operation)
            ax.text(3.4, middle, operation, va="center", linespacing=1.5)
            steps = step if i != V_INTO else f"{step}\n{V_STEP}"
            ax.text(
                9.9,
                middle,
                steps,
                va="center",
                ha="right",
                color=theme.series[1],
                weight="bold",
                linespacing=1.5,
            )
    # V: from the heads box, past S and A, into the "A V" arrow
    source = 0.2 + V_FROM * pitch + 0.52
    join = 0.2 + V_INTO * pitch + 1.1 + (pitch - 1.15) / 2
    ax.plot(
        [1.2, lane, lane],
        [source, source, join],
        color=theme.text,
        linewidth=1.0,
    )
    glue.draw_arrow(ax, (lane, join), (2.95, join), theme)
    ax.text(1.9, join + 0.08, "V", va="top", ha="center", weight="bold")
    # the backward pass: the whole column, bottom to top
    glue.draw_arrow(ax, (0.3, HEIGHT - 1.2), (0.3, 0.4), theme)
    ax.text(
        0.05,
        HEIGHT / 2 - 0.35,
        "backward",
        rotation=90,
        va="center",
        ha="right",
        color=theme.series[1],
    )


def _one_line(text):
    return text.replace("\n", " ")


glue.figure(
    "layer-backward-roadmap",
    draw_roadmap,
    # fits a 390 px phone column (about 355 px); equal aspect
    figsize=(3.7, 3.7 * (HEIGHT + 0.4) / 10.8),
    alt=(
        "The layer's forward pass as a column of boxes, top to bottom, "
        "each with its shape in symbols and in the numbers of the build's "
        "self-attention layer: "
        + "; ".join(
            f"{name} {shape_text(symbols)}"
            + (
                f", then {_one_line(arrows[i][1])} ({arrows[i][0]})"
                if i < len(arrows)
                else ""
            )
            for i, (name, symbols) in enumerate(boxes)
        )
        + ". C is the heads' outputs merged back into one array, not a "
        "mask. V does not pass through S or A: a side branch on the left "
        "carries it from the split heads into the A V arrow, labelled "
        f"{V_STEP}. An arrow along the left points up: the backward pass "
        "runs from Y back to X, and each forward arrow is labelled with "
        "the step of the page that carries the gradient back across it."
    ),
)


# %%
def diff_text(x):
    return "0" if x == 0 else f"{x:.1e}"


params = ["x", "context", "Wq", "Wk", "Wv", "Wo", "bq", "bk", "bv", "bo"]


def grads_table(name, configs):
    """One row per gradient, one column per layer of ``configs``."""
    glue.table(
        name,
        ["gradient", *configs.values()],
        [
            [f"`{p}`"]
            + [
                diff_text(results[c]["diffs"][p])
                if p in results[c]["diffs"]
                else "–"
                for c in configs
            ]
            for p in params
        ],
        "l" + "r" * len(configs),
    )


# the path's two layers on the page; the Going-further one in its box
grads_table("layer-backward-grads", {"self-causal": "self", "cross": "cross"})
grads_table("layer-backward-grads-gqa", {"gqa-rope": "GQA"})

# %% [markdown]
# ## What the forward pass saves: $D$
#
# The tiled backward never holds $A$ or $dA$ whole, so it cannot sum
# $dA \odot A$ over a row; it uses
# $D = \operatorname{rowsum}(dO \odot O)$ instead, the same numbers
# (equation (9) of the page). On causal attention of 2 heads, 64
# positions of size 64:

# %%
lead, t, d_head = (1, 2), 64, 64  # (B, H), T and d_head
rng = np.random.default_rng(0)
q, k, v, dout = (rng.standard_normal((*lead, t, d_head)) for _ in range(4))
out, weights = numpy_ref.attention(q, k, v, numpy_ref.causal_mask(t))
d_weights = dout @ np.swapaxes(v, -2, -1)  # dA = dO V^T, (..., T, T)
via_a = np.sum(d_weights * weights, axis=-1)  # (..., T)
via_o = np.sum(dout * out, axis=-1)  # (..., T)
glue.value("rowsum_identity_diff", float(np.abs(via_a - via_o).max()))

# %% [markdown]
# ## The tiled backward against the plain one
#
# Causal, 1 sequence of 2 heads of size 64 at $T = 128$, blocks of
# 64 x 64: the first inputs of the memory comparison below. Try blocks
# of 2 queries by 3 keys.

# %%
lengths = [128, 256, 512, 1024]
block = 64
blocks = {"block_q": block, "block_k": block}
rng = np.random.default_rng(0)
q, k, v, dout = (
    rng.standard_normal((*lead, lengths[0], d_head)) for _ in range(4)
)
plain = numpy_ref.attention_backward(
    q, k, v, dout, numpy_ref.causal_mask(lengths[0])
)
tiled_np = tiled.tiled_attention_backward_numpy(
    q, k, v, dout, causal=True, **blocks
)
tiled_t = tiled.tiled_attention_backward_torch(
    *(torch.from_numpy(a) for a in (q, k, v, dout)), causal=True, **blocks
)
diffs = {}
for name, p, a, b in zip(
    ["dq", "dk", "dv"], plain, tiled_np, tiled_t, strict=True
):
    diffs[name] = max(np.abs(a - p).max(), np.abs(b.numpy() - p).max())
    print(f"{name}: max |tiled - plain| {diffs[name]:.1e}")
tiled_max_diff = float(max(diffs.values()))

# %% [markdown]
# ## What it saves
#
# `tracemalloc` sees every byte NumPy allocates. `peak_bytes_numpy`
# (`mha_ref/memory.py`, carried with this notebook)
# records the peak of two calls, each after collecting the garbage and
# with the collector off. The first call may fill caches, and the
# kernel's own threads allocate now and then (tracemalloc counts their
# bytes too): the smaller of the two peaks is the call's own.
# `gc.freeze()` keeps the objects alive before the call out of those
# collections, which then take milliseconds instead of a third of a
# second. A few small Python objects are alive at the peak on some
# runs and not on others (up to about a KiB, which can cross a KiB
# boundary): the peaks are rounded to the nearest 16 KiB.
# Causal backward, 1 sequence of 2 heads of size 64 in float64, blocks
# of 64 x 64, as $T$ doubles; both calls include the forward pass.


# %%
def peak_kib(fn, *args, **kwargs):
    """peak_bytes_numpy rounded to the nearest 16 KiB (16384 bytes)."""
    return 16384 * round(peak_bytes_numpy(fn, *args, **kwargs) / 16384)


rng = np.random.default_rng(0)  # T = 128: the inputs above
plain_peak, tiled_peak = [], []
for t in lengths:
    q, k, v, dout = (rng.standard_normal((*lead, t, d_head)) for _ in range(4))
    mask = numpy_ref.causal_mask(t)  # (T, T)
    plain_peak.append(
        peak_kib(numpy_ref.attention_backward, q, k, v, dout, mask)
    )
    tiled_peak.append(
        peak_kib(
            tiled.tiled_attention_backward_numpy,
            q,
            k,
            v,
            dout,
            causal=True,
            **blocks,
        )
    )
itemsize = np.dtype(np.float64).itemsize
heads = int(np.prod(lead))
memory = glue.value(
    "memory",
    {
        "lengths": lengths,
        "batch": lead[0],
        "n_head": lead[1],
        "heads": heads,  # (T, T) matrices per array: batch times heads
        "d_head": d_head,
        "block": block,
        "dtype": "float64",
        "plain_peak_bytes": plain_peak,
        "tiled_peak_bytes": tiled_peak,
        "memory_ratio": [
            p / b for p, b in zip(plain_peak, tiled_peak, strict=True)
        ],
        # peak at the largest T over peak at half of it: ~4 vs ~2
        "plain_growth": plain_peak[-1] / plain_peak[-2],
        "tiled_growth": tiled_peak[-1] / tiled_peak[-2],
        # one (T, T) matrix of all heads, as A, dA or dS each are
        "matrix_mib": [heads * t * t * itemsize / 2**20 for t in lengths],
        # the plain peak at the largest T, in (T, T) matrices of all heads
        "plain_in_matrices": plain_peak[-1]
        / (heads * lengths[-1] ** 2 * itemsize),
        "tiled_max_diff": tiled_max_diff,
        "tiled_diff_length": lengths[0],
    },
)


def mib(n_bytes):
    return n_bytes / 2**20


def sig3(x):
    """Three significant figures, trailing zeros kept: 1.2 -> 1.20."""
    return f"{x:#.3g}".rstrip(".")


glue.table(
    "layer-backward-memory",
    ["T", "T²", "plain", "tiled"],  # plain / tiled: in the text
    [
        [str(t), sig3(s), sig3(mib(p)), sig3(mib(b))]
        for t, s, p, b in zip(
            lengths,
            memory["matrix_mib"],
            plain_peak,
            tiled_peak,
            strict=True,
        )
    ],
    "rrrr",
)

# %% [markdown]
# Both peaks against $T$ on log-log axes: a straight line of slope 2 is
# $T^2$ growth.

# %%
mib_ticks = [1, 2, 5, 10, 20, 50, 100, 200]  # the y axis


def draw(fig, theme):
    ax = fig.subplots()
    ax.plot(
        lengths,
        [mib(x) for x in plain_peak],
        "o-",
        color=theme.series[1],
        label="plain (T x T)",
    )
    ax.plot(
        lengths,
        [mib(x) for x in tiled_peak],
        "s-",
        color=theme.series[0],
        label=f"tiled ({block} x {block})",
    )
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(lengths, [str(t) for t in lengths])
    ax.set_yticks(mib_ticks, [str(t) for t in mib_ticks])
    ax.minorticks_off()
    ax.set_xlabel("sequence length T (log scale)")
    ax.set_ylabel("peak memory (MiB, log scale)")
    ax.set_title("Peak memory of the backward", fontsize=10)
    ax.grid(True, alpha=0.4)
    ax.set_ylim(0.8, 250)  # room for the legend above the lines
    ax.legend(loc="upper left")


glue.figure(
    "layer-backward-memory",
    draw,
    figsize=(3.3, 3.4),  # inside a box: narrower than the page's column
    alt=(
        f"Log-log line chart of peak memory against sequence length T "
        f"from {lengths[0]} to {lengths[-1]}, causal attention backward "
        f"in NumPy with {lead[1]} heads of size {d_head} in float64. "
        "Each doubling of T multiplies the plain backward's peak by a "
        "factor that approaches 4 "
        f"({fmt(memory['plain_growth'], 3)} at the last doubling; it "
        f"reaches {fmt(mib(plain_peak[-1]), 3)} MiB) and the tiled "
        "backward's by a factor that approaches 2 "
        f"({fmt(memory['tiled_growth'], 3)}; it reaches "
        f"{fmt(mib(tiled_peak[-1]), 3)} MiB)."
    ),
)

# %% [markdown]
# ## Exercises
#
# The page's exercises, computed. 1: the shape of every gradient of a
# batched cross-attention. 2: one query, two keys, head size 1, by
# hand. 3: what doubling $dO$, or doubling $V$, does to $dQ$, $dK$ and
# $dV$. Change the inputs and rerun.
#
# The cell below prints every answer, one `glue:` line each: work
# them out first, then run it.

# %%
rng = np.random.default_rng(0)
b, h, tq, tk, dk = 2, 4, 5, 7, 8  # exercise 1
q, k, v = (rng.standard_normal((b, h, t, dk)) for t in (tq, tk, tk))
dout = rng.standard_normal((b, h, tq, dk))  # dL/dO, O's shape
dq, dk_, dv = numpy_ref.attention_backward(q, k, v, dout)
d_weights = dout @ np.swapaxes(v, -2, -1)  # dA = dO V^T
glue.value(
    "ex_shapes",
    {
        "b": b,
        "h": h,
        "tq": tq,
        "tk": tk,
        "d_k": dk,
        "d_out": str(dout.shape),
        "d_weights": str(d_weights.shape),
        "dq": str(dq.shape),
        "dk": str(dk_.shape),
        "dv": str(dv.shape),
    },
)

# exercise 2: d_k = 1, scores [ln 3, 0], values [0, 4], dO = 1
q = np.array([[np.log(3.0)]])  # (Tq, d) = (1, 1)
k = np.array([[1.0], [0.0]])  # (Tk, d) = (2, 1)
v = np.array([[0.0], [4.0]])  # (Tk, dv) = (2, 1)
dout = np.array([[1.0]])  # (Tq, dv)
out, weights = numpy_ref.attention(q, k, v)
d_weights = dout @ v.T  # dA = dO V^T, (Tq, Tk)
row_sum = np.sum(dout * out, axis=-1)  # D = rowsum(dO * O), (Tq,)
dq, dk_, dv = numpy_ref.attention_backward(q, k, v, dout)
glue.value(
    "ex_by_hand",
    {
        "weights": weights[0],
        "output": out[0, 0],
        "dv": dv[:, 0],
        "d_weights": d_weights[0],
        "row_sum": row_sum[0],
        "d_scores": (weights * (d_weights - row_sum[:, None]))[0],
        "dq": dq[0, 0],
        "dk": dk_[:, 0],
    },
)

# exercise 3: the backward is linear in dO; V enters dA only
rng = np.random.default_rng(1)
q, k, v, dout = (rng.standard_normal((2, 5, 4)) for _ in range(4))
mask = numpy_ref.causal_mask(5)  # (T, T)
base = numpy_ref.attention_backward(q, k, v, dout, mask)
double_dout = numpy_ref.attention_backward(q, k, v, 2 * dout, mask)
double_v = numpy_ref.attention_backward(q, k, 2 * v, dout, mask)


def ratios(new):
    """How many times larger each of dQ, dK, dV became."""
    return [
        float(np.abs(n).sum() / np.abs(o).sum())
        for n, o in zip(new, base, strict=True)
    ]


glue.value(
    "ex_doubling",
    {"dout": ratios(double_dout), "values": ratios(double_v)},
)
print("2 dO: dQ, dK, dV grow by", ratios(double_dout))
print("2 V : dQ, dK, dV grow by", ratios(double_v))
