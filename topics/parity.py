"""From-scratch MHA against SDPA, nn.MultiheadAttention and NumPy.

Small shapes, every combination of dtype, bias and mask; CUDA rows are
added when torch sees a CUDA device. float16 and bfloat16 rows run each
path in the small dtype against the from-scratch layer in float64, on
the same rounded weights. Gradients: autograd through the three
PyTorch paths and the hand-written NumPy backward. A CPU row above its
tolerance fails the build (that is a bug); a CUDA row is published as
measured.
"""

import contextlib
import copy
import itertools

from pipeline.output import fmt, markdown_table
from topics import runtime

DEPENDS = [
    "mha_ref/torch_ref.py",
    "mha_ref/numpy_ref.py",
    "mha_ref/checks.py",
    "mha_ref/tolerances.py",
    "mha_ref/tiled.py",
    "topics/runtime.py",
]
B, T, T_CONTEXT, D_MODEL, N_HEAD = 2, 6, 7, 16, 4
PAIRS = ["sdpa", "library", "numpy"]
MASKS = ["none", "causal", "per-head", "key-padding", "cross"]
DTYPES = ["float32", "float64"]
LOW_DTYPES = ["float16", "bfloat16"]  # each path against float64
LOW_PATHS = ["forward", "tiled", "sdpa", "library"]
LOW_BLOCK = 4  # tiled pass: two tiles per row and per column at T = 6
PAIR_LABELS = {
    "forward": "from scratch",
    "tiled": "tiled pass",
    "sdpa": "SDPA",
    "library": "nn.MultiheadAttention",
    "numpy": "NumPy",
}
GRAD_PAIRS = ["sdpa", "library", "numpy"]
GRAD_LABELS = {
    "sdpa": "SDPA (autograd)",
    "library": "nn.MultiheadAttention (autograd)",
    "numpy": "NumPy (hand-written backward)",
}
GRAD_GROUPS = ["inputs", "Wq", "Wk", "Wv", "Wo", "biases"]


def make_mask(kind, device):
    """A boolean mask (True = blocked) for the case, or None."""
    import torch

    from mha_ref import torch_ref

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


def run_case(device, dtype, bias, kind):
    """Max abs difference of each pair, plus the from-scratch weights."""
    import numpy as np
    import torch

    from mha_ref import torch_ref

    torch.manual_seed(0)
    tdtype = getattr(torch, dtype)
    module = torch_ref.MultiHeadAttention(
        D_MODEL, N_HEAD, bias=bias, device=device, dtype=tdtype
    )
    x = torch.randn(B, T, D_MODEL, dtype=tdtype).to(device)
    context = None
    if kind == "cross":
        context = torch.randn(B, T_CONTEXT, D_MODEL, dtype=tdtype)
        context = context.to(device)
    mask = make_mask(kind, device)
    with torch.no_grad():
        y, weights = module(x, mask=mask, context=context)
        library = torch_ref.library_version(module)
        outputs = {
            "sdpa": torch_ref.sdpa_forward(module, x, mask, context),
            "library": torch_ref.library_forward(library, x, mask, context),
        }

    def host(t):
        return None if t is None else t.cpu().numpy()

    twin = torch_ref.to_numpy(module)
    y_np, _ = twin(host(x), host(mask), host(context))
    diffs = {
        pair: float((out - y).abs().max()) for pair, out in outputs.items()
    }
    diffs["numpy"] = float(np.abs(y_np - host(y)).max())
    # nn.MultiheadAttention calls SDPA itself: how far apart are they?
    diffs["library_minus_sdpa"] = float(
        (outputs["library"] - outputs["sdpa"]).abs().max()
    )
    return diffs, weights, mask


@contextlib.contextmanager
def counting_sdpa():
    """Count the calls to F.scaled_dot_product_attention inside."""
    import torch.nn.functional as F

    calls, original = [], F.scaled_dot_product_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    F.scaled_dot_product_attention = counted
    try:
        yield calls
    finally:
        F.scaled_dot_product_attention = original


def library_dispatch():
    """How many SDPA calls one nn.MultiheadAttention forward makes."""
    import torch

    from mha_ref import torch_ref

    torch.manual_seed(0)
    module = torch_ref.MultiHeadAttention(D_MODEL, N_HEAD)
    x = torch.randn(B, T, D_MODEL)
    library = torch_ref.library_version(module)
    with torch.no_grad(), counting_sdpa() as calls:
        torch_ref.library_forward(library, x, make_mask("causal", "cpu"))
    return len(calls)


def tiled_forward(module, x, mask, context):
    """The module's weights through tiled_attention_torch."""
    from mha_ref import tiled

    q, k, v = module.project(x, context)  # (B, H, T, dh)
    out = tiled.tiled_attention_torch(
        q, k, v, mask, block_q=LOW_BLOCK, block_k=LOW_BLOCK
    )  # (B, H, Tq, dh)
    return module.wo(module.merge_heads(out))  # (B, Tq, d_model)


def run_low_case(dtype, kind):
    """Max abs difference of each path in dtype from float64."""
    import torch

    from mha_ref import torch_ref

    torch.manual_seed(0)
    tdtype = getattr(torch, dtype)
    module = torch_ref.MultiHeadAttention(
        D_MODEL, N_HEAD, bias=True, dtype=tdtype
    )
    x = torch.randn(B, T, D_MODEL).to(tdtype)
    context = None
    if kind == "cross":
        context = torch.randn(B, T_CONTEXT, D_MODEL).to(tdtype)
    mask = make_mask(kind, "cpu")
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
    return {
        path: float((out.double() - expected).abs().max())
        for path, out in outputs.items()
    }, float(expected.abs().max())


def _autograd(params, forward, inputs, upstream):
    """{name: gradient} of sum(forward() * upstream)."""
    import torch

    tensors = [p for _, p in params] + list(inputs.values())
    grads = torch.autograd.grad(forward(), tensors, upstream)
    names = [n for n, _ in params] + list(inputs)
    return dict(zip(names, grads, strict=True))


def run_gradient_case(dtype, kind):
    """Each pair's largest gradient difference per group of parameters."""
    import numpy as np
    import torch

    from mha_ref import torch_ref

    torch.manual_seed(0)
    tdtype = getattr(torch, dtype)
    module = torch_ref.MultiHeadAttention(
        D_MODEL, N_HEAD, bias=True, dtype=tdtype
    )
    inputs = {"x": torch.randn(B, T, D_MODEL, dtype=tdtype)}
    if kind == "cross":
        inputs["context"] = torch.randn(B, T_CONTEXT, D_MODEL, dtype=tdtype)
    for tensor in inputs.values():
        tensor.requires_grad_()
    x, context = inputs["x"], inputs.get("context")
    mask = make_mask(kind, "cpu")
    upstream = torch.randn(B, T, D_MODEL, dtype=tdtype)  # dL/dy
    params = list(module.named_parameters())
    ours = _autograd(
        params, lambda: module(x, mask, context)[0], inputs, upstream
    )
    library = torch_ref.library_version(module)
    packed = _autograd(
        list(library.named_parameters()),
        lambda: torch_ref.library_forward(library, x, mask, context),
        inputs,
        upstream,
    )
    # in_proj_weight (and _bias) stacks [Wq; Wk; Wv] along dim 0
    grads = {
        "sdpa": _autograd(
            params,
            lambda: torch_ref.sdpa_forward(module, x, mask, context),
            inputs,
            upstream,
        ),
        "library": {n: packed[n] for n in inputs},
    }
    for kind_ in ("weight", "bias"):
        parts = packed[f"in_proj_{kind_}"].chunk(3)
        for name, part in zip(("wq", "wk", "wv"), parts, strict=True):
            grads["library"][f"{name}.{kind_}"] = part
        grads["library"][f"wo.{kind_}"] = packed[f"out_proj.{kind_}"]
    # the NumPy twin computes x @ W: its weight gradients are transposed
    twin = torch_ref.to_numpy(module)

    def host(t):
        return None if t is None else t.detach().numpy()

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
            group = _grad_group(name)
            diff = float((grads[pair][name] - grad).abs().max())
            groups[group] = max(groups[group], diff)
        diffs[pair] = groups
    largest = max(float(g.abs().max()) for g in ours.values())
    return diffs, largest


def _grad_group(name):
    """x/context -> inputs, wq.weight -> Wq, any bias -> biases."""
    if name in ("x", "context"):
        return "inputs"
    layer, kind = name.split(".")
    return "biases" if kind == "bias" else "W" + layer[1:]


def tolerance_in_eps(dtype):
    """The tolerance of dtype and what it is in the dtype's eps."""
    import numpy as np
    import torch

    from mha_ref import tolerances

    tolerance = tolerances.atol(dtype)
    if dtype == "bfloat16":  # NumPy has no bfloat16
        eps = torch.finfo(torch.bfloat16).eps
    else:
        eps = float(np.finfo(dtype).eps)
    return {"tolerance": tolerance, "eps": eps, "in_eps": tolerance / eps}


def compute():
    from mha_ref import tolerances

    environment = runtime.compute()
    devices = ["cpu"] + (["cuda"] if environment["cuda_available"] else [])
    rows, row_error, future = [], dict.fromkeys(DTYPES, 0.0), 0.0
    library_minus_sdpa = dict.fromkeys(DTYPES, 0.0)  # CPU, every case
    for device, dtype, bias, kind in itertools.product(
        devices, DTYPES, (False, True), MASKS
    ):
        diffs, weights, mask = run_case(device, dtype, bias, kind)
        if device == "cpu":
            library_minus_sdpa[dtype] = max(
                library_minus_sdpa[dtype], diffs["library_minus_sdpa"]
            )
        sums = weights.sum(dim=-1) - 1
        row_error[dtype] = max(row_error[dtype], float(sums.abs().max()))
        if kind == "causal":
            future = max(future, float(weights.masked_select(mask).max()))
        tolerance = tolerances.atol(dtype)
        rows.extend(
            {
                "pair": pair,
                "dtype": dtype,
                "device": device,
                "bias": bias,
                "mask": kind,
                "max_abs_diff": diffs[pair],
                "tolerance": tolerance,
                "passed": diffs[pair] <= tolerance,
            }
            for pair in PAIRS
        )
    low_rows, low_peak = [], 0.0
    for dtype, kind in itertools.product(LOW_DTYPES, MASKS):
        diffs, peak = run_low_case(dtype, kind)
        low_peak = max(low_peak, peak)
        tolerance = tolerances.atol(dtype)
        low_rows.extend(
            {
                "pair": path,
                "dtype": dtype,
                "device": "cpu",
                "bias": True,
                "mask": kind,
                "max_abs_diff": diffs[path],
                "tolerance": tolerance,
                "passed": diffs[path] <= tolerance,
            }
            for path in LOW_PATHS
        )
    gradient_rows, gradient_peak = [], 0.0
    for dtype in DTYPES:
        worst = {p: dict.fromkeys(GRAD_GROUPS, 0.0) for p in GRAD_PAIRS}
        for kind in MASKS:
            diffs, largest = run_gradient_case(dtype, kind)
            gradient_peak = max(gradient_peak, largest)
            for pair, group in itertools.product(GRAD_PAIRS, GRAD_GROUPS):
                worst[pair][group] = max(
                    worst[pair][group], diffs[pair][group]
                )
        # a weight's gradient sums B * T rows: that many roundings more
        tolerance = B * T * tolerances.atol(dtype)
        gradient_rows.extend(
            {
                "pair": pair,
                "dtype": dtype,
                "by_group": worst[pair],
                "tolerance": tolerance,
                "passed": max(worst[pair].values()) <= tolerance,
            }
            for pair in GRAD_PAIRS
        )
    checked = rows + low_rows + gradient_rows
    failed = [
        r for r in checked if not r["passed"] and r.get("device") != "cuda"
    ]
    if failed:
        raise ValueError(f"parity fails on CPU: {failed}")
    cpu32 = [
        r for r in rows if r["device"] == "cpu" and r["dtype"] == "float32"
    ]
    return {
        "rows": rows,
        "low_rows": low_rows,
        "low_output_peak": low_peak,
        "low_all_passed": all(r["passed"] for r in low_rows),
        "library_sdpa_calls": library_dispatch(),
        "library_minus_sdpa": library_minus_sdpa,
        "eps": {d: tolerance_in_eps(d) for d in LOW_DTYPES + DTYPES},
        "gradients": {
            "rows": gradient_rows,
            "largest_gradient": gradient_peak,
            "rows_summed": B * T,
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
        "summary": {
            pair: max(r["max_abs_diff"] for r in cpu32 if r["pair"] == pair)
            for pair in PAIRS
        },
        "rows_sum_to_one": row_error["float32"],
        "rows_sum_to_one_float64": row_error["float64"],
        "future_weight": future,
        "all_passed": all(r["passed"] for r in rows),
        "cuda_rows_included": "cuda" in devices,
        "environment": environment,
        "shapes": {
            "B": B,
            "T": T,
            "T_context": T_CONTEXT,
            "d_model": D_MODEL,
            "n_head": N_HEAD,
        },
    }


def environment_note(data):
    env = data["environment"]
    note = (
        f"Computed with numpy {env['numpy']}, torch {env['torch']}, "
        f"Python {env['python']} on {env['platform']}, device "
        f"{env['device']}."
    )
    if not data["cuda_rows_included"]:
        note += " Computed on CPU only: no CUDA device in this build."
    return note


def render(data, out):
    cuda = data["cuda_rows_included"]
    devices = ["cpu", "cuda"] if cuda else ["cpu"]
    tolerance = {r["dtype"]: r["tolerance"] for r in data["rows"]}
    cases = {}  # (pair, device, dtype, bias) -> {mask: row}
    for r in data["rows"]:
        case = (r["pair"], r["device"], r["dtype"], r["bias"])
        cases.setdefault(case, {})[r["mask"]] = r
    low = {}  # (path, dtype) -> {mask: row}
    for r in data["low_rows"]:
        low.setdefault((r["pair"], r["dtype"]), {})[r["mask"]] = r
        tolerance[r["dtype"]] = r["tolerance"]
    header = [
        "path",
        "against",
        *(["device"] if cuda else []),
        "dtype",
        "bias",
        *MASKS,
        "tolerance",
        "pass",
    ]

    def line(label, against, device, dtype, bias, by_mask):
        return [
            label,
            against,
            *([device] if cuda else []),
            dtype,
            "yes" if bias else "no",
            *(fmt(by_mask[m]["max_abs_diff"], 3) for m in MASKS),
            fmt(tolerance[dtype]),
            "✓" if all(r["passed"] for r in by_mask.values()) else "✗",
        ]

    table = [
        line(
            PAIR_LABELS[pair],
            "from scratch",
            device,
            dtype,
            bias,
            cases[pair, device, dtype, bias],
        )
        for pair, device, dtype, bias in itertools.product(
            PAIRS, devices, DTYPES, (False, True)
        )
    ]
    table += [
        line(
            PAIR_LABELS[path], "float64", "cpu", dtype, True, low[path, dtype]
        )
        for dtype, path in itertools.product(LOW_DTYPES, LOW_PATHS)
    ]
    align = "ll" + "l" * (3 if cuda else 2) + "r" * len(MASKS) + "rc"
    markdown = markdown_table(header, table, align)
    out.table("parity", markdown + "\n" + environment_note(data) + "\n")
    render_gradients(data["gradients"], out)

    def draw(fig, theme):
        import numpy as np

        ax = fig.subplots()
        series = list(itertools.product(devices, DTYPES))
        width = 0.8 / len(series)
        floor = 1e-18
        for s, (device, dtype) in enumerate(series):
            heights = [
                max(
                    r["max_abs_diff"]
                    for bias in (False, True)
                    for r in cases[pair, device, dtype, bias].values()
                )
                for pair in PAIRS
            ]
            xs = np.arange(len(PAIRS)) + (s - (len(series) - 1) / 2) * width
            colour = theme.series[DTYPES.index(dtype)]
            ax.bar(
                xs,
                [max(h, floor) for h in heights],
                width * 0.9,
                color=colour,
                hatch="//" if device == "cuda" else None,
                label=f"{dtype}" + (f" ({device})" if cuda else ""),
            )
            for x_pos, h in zip(xs, heights, strict=True):
                ax.text(
                    x_pos,
                    max(h, floor) * 2.5,
                    "0" if h == 0 else fmt(h, 2),
                    ha="center",
                    fontsize=7.5,
                )
        for dtype in DTYPES:
            tol = tolerance[dtype]
            colour = theme.series[DTYPES.index(dtype)]
            ax.axhline(tol, ls="--", lw=1.2, color=colour)
            ax.text(
                len(PAIRS) - 0.45,
                tol * 1.6,
                f"{dtype} tolerance {fmt(tol)}",
                ha="right",
                fontsize=8,
                color=colour,
            )
        ax.set_yscale("log")
        ax.set_ylim(floor / 2, 1e-2)
        ax.set_xticks(range(len(PAIRS)), [PAIR_LABELS[p] for p in PAIRS])
        ax.set_xlabel("from-scratch torch_ref against")
        ax.set_ylabel("max abs difference\n(all masks, bias on/off)")
        ax.set_title("Largest output difference per implementation pair")
        ax.legend(loc="upper left", ncols=len(series))

    summary = data["summary"]
    verdict = (
        "every bar is below its tolerance line"
        if data["all_passed"]
        else "some bars exceed their tolerance line"
    )
    out.figure(
        "parity-errors",
        draw,
        figsize=(7.0, 3.4),
        alt=(
            "Bar chart on a log scale of the largest absolute output "
            "difference between the from-scratch PyTorch attention and "
            "three other implementations, per dtype, with dashed tolerance "
            f"lines at {fmt(tolerance['float32'])} (float32) and "
            f"{fmt(tolerance['float64'])} (float64). In float32 the "
            f"differences are {fmt(summary['sdpa'], 2)} (SDPA), "
            f"{fmt(summary['library'], 2)} (nn.MultiheadAttention) and "
            f"{fmt(summary['numpy'], 2)} (NumPy); {verdict}."
        ),
    )


def render_gradients(gradients, out):
    labels = {"inputs": "x, context", "biases": "biases"}
    header = [
        "from-scratch autograd vs",
        "dtype",
        *(labels.get(g, f"`{g}`") for g in GRAD_GROUPS),
        "tolerance",
        "pass",
    ]
    table = [
        [
            GRAD_LABELS[r["pair"]],
            r["dtype"],
            *(fmt(r["by_group"][g], 2) for g in GRAD_GROUPS),
            fmt(r["tolerance"], 2),
            "✓" if r["passed"] else "✗",
        ]
        for r in gradients["rows"]
    ]
    align = "ll" + "r" * len(GRAD_GROUPS) + "rc"
    out.table("parity-gradients", markdown_table(header, table, align))
