# %% [markdown]
# ## Two scores at head size 64
#
# The scores $[8, -8]$ are one standard deviation either side of zero
# for a head of size $d_k = 64$: a dot product of 64 unit-variance terms
# has standard deviation $\sqrt{64} = 8$. The cell divides them by
# $\sqrt{d_k}$, and by $\sqrt{d_\text{model}}$ (a common mistake), and
# names each result with `glue`: the page shows these values. Change
# `scores` and rerun.

# %%
import doctest

import numpy as np
import torch

import glue
from mha_ref import numpy_ref

d_head, d_model = 64, 512
scores = np.array([8.0, -8.0])
glue.value("d_head", d_head)
glue.value("d_model", d_model)
glue.value("scores", scores)
sqrt_d_head = glue.value("sqrt_d_head", np.sqrt(d_head))
sqrt_d_model = glue.value("sqrt_d_model", np.sqrt(d_model))
unscaled = glue.value("unscaled_weights", numpy_ref.softmax(scores))
scaled_scores = glue.value("scaled_scores", scores / sqrt_d_head)
scaled = glue.value("scaled_weights", numpy_ref.softmax(scaled_scores))
# with two scores, d p_1 / d s_1 = p_1 (1 - p_1) = p_1 p_2: the slope of
# the weights, how far moving a score moves them
glue.value("unscaled_slope", unscaled[0] * unscaled[1])
glue.value("scaled_slope", scaled[0] * scaled[1])
by_model = glue.value("d_model_scaled_scores", scores / sqrt_d_model)
by_model_weights = glue.value(
    "d_model_scaled_weights", numpy_ref.softmax(by_model)
)
fmt, fmt_list = glue.fmt, glue.fmt_list
glue.table(
    "scaling",
    ["scores divided by", "scores", "softmax weights"],
    [
        ["none", fmt_list(scores), fmt_list(unscaled)],
        [
            f"√d_k = √{d_head} = {fmt(sqrt_d_head)}",
            fmt_list(scaled_scores),
            fmt_list(scaled),
        ],
    ],
    "lll",
)

# %% [markdown]
# ## The variance, measured
#
# T random queries and T keys with unit-variance entries at d_k = 64:
# the T x T dot products have variance about d_k; divided by
# sqrt(d_k), about 1.

# %%
t_check = 256
rng = np.random.default_rng(1)
q = rng.standard_normal((t_check, d_head))  # (T, d_k)
k = rng.standard_normal((t_check, d_head))  # (T, d_k)
glue.value(
    "variance_check",
    {
        "t": t_check,
        "unscaled": (q @ k.T).var(),  # (T, T): about d_k
        "scaled": (q @ k.T / np.sqrt(d_head)).var(),  # about 1
    },
)

# %% [markdown]
# ## The slider, at three head sizes
#
# The control on the page keeps each key's score a fixed number z of
# standard deviations from 0 (z = scores / sqrt(d_head)), so its raw
# score is z * sqrt(d_k). The cell computes what the control shows at
# d_k = 1, d_head and d_model: unscaled weights sharpen, scaled ones stay.

# %%
z = scores / sqrt_d_head
control = {}
for d in [1, d_head, d_model]:
    raw = z * np.sqrt(d)  # q . k, standard deviation sqrt(d)
    control[str(d)] = {
        "raw": raw,
        "unscaled": numpy_ref.softmax(raw),
        "scaled": numpy_ref.softmax(raw / np.sqrt(d)),
    }
glue.value("control", {"z": z, "sizes": control})

# %% [markdown]
# ## Subtracting changes nothing, and saves the day
#
# A naive softmax exponentiates directly, and $e^{1000}$ is infinite in
# float64, so $\infty / \infty$ gives NaN. The reference subtracts the
# row maximum first, which leaves the weights as they were. Try
# `[1000.0, 999.0]` or `[-1000.0, 0.0]`.

# %%
big = glue.value("shift_input", np.array([1000.0, 1000.0]))
with np.errstate(over="ignore", invalid="ignore"):
    naive = np.exp(big) / np.exp(big).sum()
print("naive    :", naive)
shifted = glue.value("shift_output", numpy_ref.softmax(big))
# float16's and bfloat16's steps between neighbouring numbers near the
# shifted scores, and what storing gaps of 0.3 and 0.8 above it leaves
glue.value("fp16_step", float(np.spacing(np.float16(big[0]))))
bf16 = torch.finfo(torch.bfloat16)
glue.value("bf16_step", bf16.eps * 2.0 ** np.floor(np.log2(big[0])))
gaps = glue.value("low_gaps", np.array([0.3, 0.8]))
stored = torch.tensor(big[0] + gaps)  # float64
glue.value(
    "low_gaps_stored",
    {
        "float16": (stored.half().double() - big[0]).numpy(),
        "bfloat16": (stored.bfloat16().double() - big[0]).numpy(),
    },
)

# the examples in the softmax's docstring, which pytest runs as doctests
examples = doctest.DocTestParser().get_examples(numpy_ref.softmax.__doc__)
glue.value(
    "softmax_doctests", [example.source.strip() for example in examples]
)

# %% [markdown]
# ## Why the square root: measure it
#
# With independent unit-variance entries, $\mathbf q^\top \mathbf k$ has
# standard deviation $\sqrt{d_k}$. For each head size the cell draws 500
# queries, each against 16 keys, and takes the median over queries of
# the largest softmax weight: unscaled it creeps towards 1 (one-hot) as
# heads widen; divided by $\sqrt{d_k}$ it stays put.

# %%
head_sizes = [4, 8, 16, 32, 64, 128, 256, 512, 1024]
n_rows, n_keys = 500, 16
rng = np.random.default_rng(0)
top_unscaled, top_scaled = [], []
for d in head_sizes:
    q = rng.standard_normal((n_rows, 1, d))  # one query per row
    k = rng.standard_normal((n_rows, n_keys, d))  # 16 keys per row
    s = (q * k).sum(axis=-1)  # (rows, keys): q . k, variance d
    top_unscaled.append(np.median(numpy_ref.softmax(s).max(axis=-1)))
    weights = numpy_ref.softmax(s / np.sqrt(d))
    top_scaled.append(np.median(weights.max(axis=-1)))
    print(f"d = {d:>4}: std of q.k {s.std():6.2f}")
sweep = glue.value(
    "sweep",
    {
        "head_sizes": head_sizes,
        "n_rows": n_rows,
        "n_keys": n_keys,
        "uniform_weight": 1 / n_keys,
        "max_weight_unscaled": top_unscaled,
        "max_weight_scaled": top_scaled,
    },
)

# %% [markdown]
# ## At the default initialisation
#
# Real projections do not give unit-variance q and k. With
# `torch_ref.MultiHeadAttention` at `nn.Linear`'s default init
# (uniform, bound 1/sqrt(d_model)) and x ~ N(0, 1), each entry of q has
# variance about 1/3, so q . k has standard deviation about sqrt(d_k)/3.
# The cell measures the unscaled and scaled top weight for 16 positions
# at d_model = 512, with 8 heads and with 1.

# %%
import torch  # noqa: E402

from mha_ref import torch_ref  # noqa: E402

torch.manual_seed(0)
x = torch.randn(32, n_keys, d_model, dtype=torch.float64)  # (B, T, d)
default_init = {}
for n_head in [8, 1]:
    module = torch_ref.MultiHeadAttention(d_model, n_head)
    module = module.to(torch.float64)
    with torch.no_grad():
        q, k, _ = module.project(x)  # (B, H, T, dh)
    s = (q @ k.transpose(-2, -1)).numpy()  # (B, H, T, T): q . k
    dk = d_model // n_head
    default_init[str(n_head)] = {
        "n_head": n_head,
        "d_head": dk,
        "q_var": float(q.var()),
        "std": float(s.std()),
        "unscaled": float(np.median(numpy_ref.softmax(s).max(axis=-1))),
        "scaled": float(
            np.median(numpy_ref.softmax(s / np.sqrt(dk)).max(axis=-1))
        ),
    }
    print(n_head, default_init[str(n_head)])
glue.value("default_init", default_init)


def draw(fig, theme):
    ax = fig.subplots()
    ax.plot(
        head_sizes,
        top_unscaled,
        "o-",
        color=theme.series[1],
        label="q·k (no scaling)",
    )
    ax.plot(
        head_sizes,
        top_scaled,
        "s-",
        color=theme.series[0],
        label="q·k / √$d_k$",
    )
    ax.axhline(
        1 / n_keys, color=theme.muted, ls=":", label=f"uniform (1/{n_keys})"
    )
    ax.set_xscale("log", base=2)
    ax.set_xticks(head_sizes, [str(s) for s in head_sizes])
    ax.set_ylim(0, 1.02)
    ax.set_xlabel(r"head size $d_k$ (log scale)", fontsize=9)
    ax.set_ylabel("largest weight\n(median over rows)", fontsize=9)
    ax.set_title(f"Sharpness vs head size, {n_keys} keys", fontsize=10)
    ax.tick_params(labelsize=8)
    ax.grid(True, alpha=0.4)
    # inside the axes, in the empty band between the curves: a legend
    # outside would be cut in a phone's column
    ax.legend(loc="center right", fontsize=8)


glue.figure(
    "scaling-sweep",
    draw,
    figsize=(3.7, 3.0),  # 355 px: whole in a phone's column
    alt=(
        f"Line chart of the largest softmax weight against head size "
        f"d_k from {head_sizes[0]} to {head_sizes[-1]}, median over "
        f"{n_rows} random rows of {n_keys} keys. Without scaling (orange, "
        f"circles) it rises from {fmt(top_unscaled[0], 2)} to "
        f"{fmt(top_unscaled[-1], 2)}; divided by the square root of d_k "
        f"(blue, squares) it stays between {fmt(min(top_scaled), 2)} and "
        f"{fmt(max(top_scaled), 2)}; a dotted line marks the uniform "
        f"weight 1/{n_keys}."
    ),
)

# %% [markdown]
# ## Exercises
#
# The page's exercises, computed. 1: a head of size 16 and the scores
# [4, 0], with and without the factor, and the same query and keys at
# size 64. 2: the page's scores divided by
# $d_k$ instead of $\sqrt{d_k}$. 3: the sweep above with 4 keys per row
# instead of 16. Change the numbers and rerun.
#
# The cell below prints every answer, one `glue:` line each: work
# them out first, then run it.

# %%
ex_d, ex_scores = 16, np.array([4.0, 0.0])  # exercise 1
# the same query and keys at d_k = 64: scores sqrt(64 / 16) times larger
ex_wide_d = 64
ex_wide_scores = ex_scores * np.sqrt(ex_wide_d / ex_d)
glue.value(
    "ex_small_head",
    {
        "d_k": ex_d,
        "scores": ex_scores,
        "sqrt_d_k": np.sqrt(ex_d),
        "scaled_scores": ex_scores / np.sqrt(ex_d),
        "scaled": numpy_ref.softmax(ex_scores / np.sqrt(ex_d)),
        "unscaled": numpy_ref.softmax(ex_scores),
        "wide_d_k": ex_wide_d,
        "wide_scores": ex_wide_scores,
        "wide_scaled": numpy_ref.softmax(ex_wide_scores / np.sqrt(ex_wide_d)),
        "wide_unscaled": numpy_ref.softmax(ex_wide_scores),
    },
)

# exercise 2: the bug of dividing by d_k (not its square root)
by_d_scores = scores / d_head
glue.value(
    "ex_by_d",
    {
        "scores": by_d_scores,
        "weights": numpy_ref.softmax(by_d_scores),
        "factor": np.sqrt(d_head),  # how much too small the scores are
    },
)

# exercise 3: the sweep with 4 keys per row
few_keys = 4
rng = np.random.default_rng(0)
few_unscaled, few_scaled = [], []
for d in head_sizes:
    q = rng.standard_normal((n_rows, 1, d))  # one query per row
    k = rng.standard_normal((n_rows, few_keys, d))  # 4 keys per row
    s = (q * k).sum(axis=-1)  # (rows, keys): q . k, variance d
    few_unscaled.append(np.median(numpy_ref.softmax(s).max(axis=-1)))
    top = numpy_ref.softmax(s / np.sqrt(d)).max(axis=-1)
    few_scaled.append(np.median(top))
glue.value(
    "ex_few_keys",
    {
        "n_keys": few_keys,
        "uniform_weight": 1 / few_keys,
        "max_weight_unscaled": few_unscaled,
        "max_weight_scaled": few_scaled,
        "unscaled_gap": 1 - few_unscaled[-1],  # how close to one-hot
    },
)
