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
import glue
from mha_ref import diagnose, diagnose_examples

# the tolerance of every comparison, and one common mistake: SDPA handed
# a mask whose True means blocked
glue.value("rtol", diagnose.RTOL)
glue.value("atol", diagnose.ATOL)
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
        pitfall_rows.append([mistake, f"`{finding.name}`", finding.message])
        smallest.add(str(finding.case))
glue.table(
    "diagnose-pitfalls",
    ["pitfall", "finding", "what the checker says"],
    pitfall_rows,
)
glue.value("pitfalls_smallest_case", sorted(smallest))

# %% [markdown]
# ## Two correct layers written another way, and a module
#
# An einsum layer, a layer in plain loops, and a module laid out like
# Hugging Face's attention classes, checked through the adapter
# `diagnose_examples.module_layer` in PyTorch (gradients compared too).

# %%
correct = {
    "einsum_layer": (diagnose_examples.einsum_layer, "numpy"),
    "loop_layer": (diagnose_examples.loop_layer, "numpy"),
    "module_layer(HFStyleAttention)": (
        diagnose_examples.module_layer(diagnose_examples.HFStyleAttention),
        "torch",
    ),
}
correct_rows = []
for name, (fn, framework) in correct.items():
    report = diagnose.layer(fn, framework=framework)
    print(f"{name}: {report}")
    verdict = f"ok ({report.cases} cases)" if report.ok else str(report)
    correct_rows.append([f"`{name}`", framework, verdict])
header = ["function", "framework", "report"]
glue.table("diagnose-correct", header, correct_rows[:2])  # the two layers
glue.table("diagnose-module", header, correct_rows[2:])  # the module

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

known_rows = []
for checker, known in (
    ("attention", diagnose.ATTENTION_MISTAKES),
    ("layer", diagnose.LAYER_MISTAKES),
):
    for name, options in known.items():
        for mistakes in options:
            message = diagnose.explain(name, mistakes)
            known_rows.append([checker, f"`{name}`", message])
glue.table("diagnose-known", ["checker", "finding", "message"], known_rows)
