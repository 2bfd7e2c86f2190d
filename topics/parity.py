"""From-scratch MHA against SDPA, nn.MultiheadAttention and NumPy.

Small shapes, every combination of dtype, bias and mask; CUDA rows are
added when torch sees a CUDA device. A CPU row above its tolerance fails
the build (that is a bug); a CUDA row is published as measured.
"""

import itertools

from pipeline.output import fmt, markdown_table
from topics import runtime

DEPENDS = [
    "mha_ref/torch_ref.py",
    "mha_ref/numpy_ref.py",
    "mha_ref/checks.py",
    "mha_ref/tolerances.py",
    "topics/runtime.py",
]
B, T, T_CONTEXT, D_MODEL, N_HEAD = 2, 6, 7, 16, 4
PAIRS = ["sdpa", "library", "numpy"]
MASKS = ["none", "causal", "per-head", "key-padding", "cross"]
DTYPES = ["float32", "float64"]
PAIR_LABELS = {
    "sdpa": "SDPA",
    "library": "nn.MultiheadAttention",
    "numpy": "NumPy",
}


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
    return diffs, weights, mask


def compute():
    from mha_ref import tolerances

    environment = runtime.compute()
    devices = ["cpu"] + (["cuda"] if environment["cuda_available"] else [])
    rows, row_error, future = [], dict.fromkeys(DTYPES, 0.0), 0.0
    for device, dtype, bias, kind in itertools.product(
        devices, DTYPES, (False, True), MASKS
    ):
        diffs, weights, mask = run_case(device, dtype, bias, kind)
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
    failed = [r for r in rows if not r["passed"] and r["device"] == "cpu"]
    if failed:
        raise ValueError(f"parity fails on CPU: {failed}")
    cpu32 = [
        r for r in rows if r["device"] == "cpu" and r["dtype"] == "float32"
    ]
    return {
        "rows": rows,
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
    header = [
        "from-scratch vs",
        *(["device"] if cuda else []),
        "dtype",
        "bias",
        *MASKS,
        "tolerance",
        "pass",
    ]
    table = []
    for case in itertools.product(PAIRS, devices, DTYPES, (False, True)):
        pair, device, dtype, bias = case
        by_mask = cases[case]
        table.append(
            [
                PAIR_LABELS[pair],
                *([device] if cuda else []),
                dtype,
                "yes" if bias else "no",
                *(fmt(by_mask[m]["max_abs_diff"], 3) for m in MASKS),
                fmt(tolerance[dtype]),
                "✓" if all(r["passed"] for r in by_mask.values()) else "✗",
            ]
        )
    align = "l" + "l" * (3 if cuda else 2) + "r" * len(MASKS) + "rc"
    markdown = markdown_table(header, table, align)
    out.table("parity", markdown + "\n" + environment_note(data) + "\n")

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
