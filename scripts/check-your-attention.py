# %% [markdown]
# ## The checker on the six pitfalls
#
# `mha_ref.diagnose.layer` runs a layer function on a few small cases
# and compares it with the reference. Each of the six mistakes of the
# pitfalls page is planted in an otherwise right layer
# (`diagnose_examples.pitfall_layer`), and the checker's report on each
# is shown. To check your own layer, replace `pitfall_layer(mistake)`
# by your function: `fn(x, w_q, w_k, w_v, w_o, n_head, causal)` with
# the weights used as `x @ w`.

# %%
from importlib.metadata import version

import numpy as np
import torch
import torch.nn.functional as F

import glue
from mha_ref import diagnose, diagnose_examples

# the tolerance of every comparison, and one common mistake: SDPA handed
# a mask whose True means blocked
glue.value("rtol", diagnose.RTOL)
glue.value("atol", diagnose.ATOL)
glue.value("transformers_version", version("transformers"))  # read there
glue.value(
    "sdpa_report",
    str(
        diagnose.attention(
            diagnose_examples.sdpa_mask_as_is, framework="torch"
        )
    ),
)

pitfall_rows, smallest = [], set()
for mistake in diagnose_examples.PITFALLS:
    report = diagnose.layer(diagnose_examples.pitfall_layer(mistake))
    print(f"{mistake}: {report}")
    for finding in report.findings:
        pitfall_rows.append(  # two columns: readable at 390 px
            [mistake, f"`{finding.name}`: {finding.message}"]
        )
        smallest.add(str(finding.case))
glue.table(
    "diagnose-pitfalls",
    ["pitfall", "finding: what the checker says"],
    pitfall_rows,
)
glue.value("pitfalls_smallest_case", sorted(smallest))

# %% [markdown]
# ## Correct layers written another way, and a module
#
# An einsum layer, a layer in plain loops, a layer that calls PyTorch's
# SDPA, each in float64 and with its inputs cast to a lower precision
# first, and a module laid out like Hugging Face's attention classes,
# checked through the adapter `diagnose_examples.module_layer` in
# PyTorch (gradients compared too).


# %%
# --8<-- [start:sdpa-layer]
def sdpa_layer(x, w_q, w_k, w_v, w_o, n_head, causal):
    """The layer with PyTorch's SDPA for steps 1 to 4."""
    b, t, d_model = x.shape

    def split(m):  # (B, T, d_model) -> (B, H, T, dh)
        return m.reshape(b, t, n_head, -1).transpose(1, 2)

    q, k, v = (split(x @ w) for w in (w_q, w_k, w_v))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return o.transpose(1, 2).reshape(b, t, d_model) @ w_o  # (B, T, d_model)
    # --8<-- [end:sdpa-layer]


def in_dtype(fn, dtype):
    """fn with every array or tensor argument cast to dtype first."""

    def cast(a):
        if isinstance(a, np.ndarray):
            return a.astype(dtype)
        return a.to(dtype) if isinstance(a, torch.Tensor) else a

    return lambda *args: fn(*(cast(a) for a in args))


einsum, module = diagnose_examples.einsum_layer, diagnose_examples.module_layer
correct = [  # (name, function, framework, dtype)
    ("einsum_layer", einsum, "numpy", "float64"),
    ("loop_layer", diagnose_examples.loop_layer, "numpy", "float64"),
    ("einsum_layer", in_dtype(einsum, np.float32), "numpy", "float32"),
    ("sdpa_layer", in_dtype(sdpa_layer, torch.float32), "torch", "float32"),
    ("sdpa_layer", in_dtype(sdpa_layer, torch.bfloat16), "torch", "bfloat16"),
    (
        "module_layer(HFStyleAttention)",
        module(diagnose_examples.HFStyleAttention),
        "torch",
        "float64",
    ),
]
correct_rows = []
for name, fn, framework, dtype in correct:
    report = diagnose.layer(fn, framework=framework)
    print(f"{name} in {dtype}: {report}")
    if report.ok:
        verdict = f"ok ({report.cases} cases)"
    else:  # the full report is glued below the table
        verdict = ", ".join(f"`{f.name}`" for f in report.findings)
        glue.value(f"{dtype}_report", str(report))
    correct_rows.append([f"`{name}`", f"{framework} {dtype}", verdict])
header = ["function", "run in", "report"]
glue.table("diagnose-correct", header, correct_rows[:5])  # the layers
glue.table("diagnose-module", header, correct_rows[5:])  # the module

# %% [markdown]
# ## The cases and the mistakes it knows
#
# Every case the checker runs, smallest first, and each mistake it can
# name with the sentence it prints.

# %%
attention_rows = [
    [str(c.shapes["q"]), str(c.shapes["k"]), c.mask]
    for c, *_ in diagnose.attention_cases()
]
layer_rows = [
    [str(c.shapes["x"]), str(c.shapes["n_head"]), c.mask]
    for c, *_ in diagnose.layer_cases()
]
glue.table(
    "diagnose-attention-cases", ["q", "k and v", "mask"], attention_rows
)
glue.table("diagnose-layer-cases", ["x", "heads", "mask"], layer_rows)
glue.value("attention_cases", len(attention_rows))
glue.value("layer_cases", len(layer_rows))

for checker, known in (
    ("attention", diagnose.ATTENTION_MISTAKES),
    ("layer", diagnose.LAYER_MISTAKES),
):
    known_rows = [
        [f"`{name}`", diagnose.explain(name, mistakes)]
        for name, options in known.items()
        for mistakes in options
    ]
    header = ["finding", "message"]
    glue.table(f"diagnose-known-{checker}", header, known_rows)
