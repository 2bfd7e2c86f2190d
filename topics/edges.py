"""What each implementation does at the edges: masks and low precision.

A fully masked query row through ours, SDPA, nn.MultiheadAttention
(train and the eval fast path) and two hand-rolled softmaxes, with the
gradients through that row; mask fill values in float16 and bfloat16;
the tiled pass with its statistics in float32 and in the input dtype;
a key-padding mask combined with the causal mask.
"""

import contextlib
import math

from pipeline.output import fmt, fmt_list, markdown_table

DEPENDS = [
    "mha_ref/torch_ref.py",
    "mha_ref/numpy_ref.py",
    "mha_ref/tiled.py",
    "mha_ref/pitfalls.py",
    "mha_ref/checks.py",
]
T, D_MODEL, N_HEAD = 3, 8, 2  # an even head count: MHA's fast path
BLOCKED_ROW = 1  # the query row whose keys are all masked
D_HEAD = 4  # the attention-level cases
FILL_SCORES = [2.0, -30.0, 1.0]  # one row of scores; key 1 blocked
LENGTHS = [4, 2]  # the padded batch of the combined-mask example


def full_row_mask():
    """(T, T), True = blocked: every key of row BLOCKED_ROW."""
    import torch

    mask = torch.zeros(T, T, dtype=torch.bool)
    mask[BLOCKED_ROW] = True
    return mask


def grad_summary(grads, masked_row_dq=None):
    """How many gradient entries are NaN, of how many."""
    nan = sum(int(g.isnan().sum()) for g in grads)
    total = sum(g.numel() for g in grads)
    out = {
        "grad": True,
        "nan": nan,
        "entries": total,
        "nan_each": [int(g.isnan().sum()) for g in grads],
        "entries_each": [g.numel() for g in grads],
    }
    if masked_row_dq is not None:
        out["masked_row_dq_max"] = float(masked_row_dq.abs().max())
    return out


def classify(row, values):
    """NaN, zeros, the plain mean of all values, or something else."""
    import torch

    if row.isnan().any():
        return "nan"
    if (row == 0).all():
        return "zeros"
    if torch.allclose(row, values.mean(dim=-2), atol=1e-6):
        return "mean"
    return "other"


def _raises(run):
    try:
        run()
    except ValueError:
        return True
    return False


def attention_level():
    """q, k, v (1, 1, T, D_HEAD) through SDPA and two plain softmaxes."""
    import torch
    import torch.nn.functional as F

    from mha_ref import numpy_ref, tiled, torch_ref

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 1, T, D_HEAD, generator=gen) for _ in "qkv")
    mask = full_row_mask()  # (T, T)
    results = {}
    try:
        torch_ref.attention(q, k, v, mask)
        results["ours"] = {"raises": False}
    except ValueError as error:
        results["ours"] = {"raises": True, "message": str(error)}
    # the NumPy reference and both tiled passes refuse it too
    refusals = {
        "numpy_ref.attention": lambda: numpy_ref.attention(
            q.numpy(), k.numpy(), v.numpy(), mask.numpy()
        ),
        "tiled_attention_numpy": lambda: tiled.tiled_attention_numpy(
            q.numpy(), k.numpy(), v.numpy(), mask.numpy()
        ),
        "tiled_attention_torch": lambda: tiled.tiled_attention_torch(
            q, k, v, mask
        ),
    }
    results["ours"]["also_raise"] = [
        name for name, run in refusals.items() if _raises(run)
    ]

    def plain(fill):
        def run(q, k, v):
            s = q @ k.transpose(-2, -1) / math.sqrt(D_HEAD)  # (1,1,T,T)
            return s.masked_fill(mask, fill).softmax(dim=-1) @ v

        return run

    runs = {
        # SDPA's boolean mask means True = allowed
        "sdpa": lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, attn_mask=~mask
        ),
        "fill_1e9": plain(-1e9),
        "fill_inf": plain(-math.inf),
    }
    # the loss ignores the masked row, as a padded query's loss is
    upstream = torch.ones(1, 1, T, D_HEAD)
    upstream[..., BLOCKED_ROW, :] = 0
    for name, run in runs.items():
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = run(*leaves)  # (1, 1, T, D_HEAD)
        out.backward(upstream)
        row = out[0, 0, BLOCKED_ROW].detach()
        others = torch.cat(
            [out[0, 0, :BLOCKED_ROW], out[0, 0, BLOCKED_ROW + 1 :]]
        ).detach()
        results[name] = {
            "raises": False,
            "row": classify(row, v[0, 0]),
            "row_values": row,
            "others_nan": bool(others.isnan().any()),
            **grad_summary(
                [t.grad for t in leaves], leaves[0].grad[0, 0, BLOCKED_ROW]
            ),
        }
    return results


@contextlib.contextmanager
def counting_fast_path():
    """Count nn.MultiheadAttention's fused (fast path) calls inside."""
    import torch

    calls, original = [], torch._native_multi_head_attention

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    torch._native_multi_head_attention = counted
    try:
        yield calls
    finally:
        torch._native_multi_head_attention = original


def module_level():
    """nn.MultiheadAttention in train mode (both need_weights) and eval."""
    import torch

    from mha_ref import torch_ref

    torch.manual_seed(0)
    module = torch_ref.MultiHeadAttention(D_MODEL, N_HEAD, bias=True)
    with torch.no_grad():  # a visible output bias: y = bias when A = 0
        module.wo.bias.copy_(torch.randn(D_MODEL))
    library = torch_ref.library_version(module)
    x = torch.randn(1, T, D_MODEL)
    mask = full_row_mask()  # (T, T), True = blocked, as the library's
    bias = module.wo.bias.detach()
    results = {}
    try:
        module(x, mask)
        results["ours_module"] = {"raises": False}
    except ValueError as error:
        results["ours_module"] = {"raises": True, "message": str(error)}
    upstream = torch.ones(1, T, D_MODEL)
    upstream[:, BLOCKED_ROW] = 0  # the loss ignores the masked row
    for name, need_weights in (
        ("mha_train", False),
        ("mha_train_weights", True),
    ):
        library.train()
        library.zero_grad(set_to_none=True)
        leaf = x.clone().requires_grad_()
        y, _ = library(
            leaf, leaf, leaf, attn_mask=mask, need_weights=need_weights
        )
        y.backward(upstream)
        grads = [leaf.grad] + [p.grad for p in library.parameters()]
        results[name] = _module_result(y, bias, grads)
    library.eval()
    with torch.no_grad(), counting_fast_path() as calls:
        y, _ = library(x, x, x, attn_mask=mask, need_weights=False)
    results["mha_eval"] = _module_result(y, bias, None)
    results["mha_eval"]["fast_path_calls"] = len(calls)
    return results


def _module_result(y, bias, grads):
    row = y[0, BLOCKED_ROW].detach()
    if row.isnan().any():
        kind = "nan"
    elif (row == bias).all():
        kind = "bias"  # the attention row was zeros
    else:
        kind = "other"
    others = [y[0, i] for i in range(T) if i != BLOCKED_ROW]
    out = {
        "raises": False,
        "row": kind,
        "row_values": row,
        "others_nan": bool(any(r.isnan().any() for r in others)),
    }
    out.update(grad_summary(grads) if grads else {"grad": False})
    return out


def fills():
    """Mask fill values in float16 and bfloat16, one row of scores."""
    import torch

    partial = torch.tensor([False, True, False])  # key 1 blocked
    full = torch.ones(3, dtype=torch.bool)  # every key blocked
    data = {}
    for dtype in (torch.float16, torch.bfloat16):
        s = torch.tensor(FILL_SCORES, dtype=dtype)
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
                rows[name] = {  # as float64: NumPy has no bfloat16
                    "partial_scores": method(partial).double(),
                    "partial_weights": method(partial).softmax(-1).double(),
                    "full_scores": method(full).double(),
                    "full_weights": method(full).softmax(-1).double(),
                }
            except RuntimeError as error:
                rows[name] = {"error": str(error)}
        name = str(dtype).removeprefix("torch.")
        data[name] = {
            "min": float(low),
            "min_plus_score": float(low + s[1]),  # finfo.min + (-30)
            "min_plus_min": float(low + low),
            "rows": rows,
        }
    return data


def statistics():
    """The tiled pass, statistics in float32 and in the input dtype."""
    import torch

    from mha_ref import pitfalls, tiled, torch_ref

    cases = {}
    q = torch.zeros(1, 1, 1, 8, dtype=torch.float16)  # (B, H, Tq, d)
    k = torch.zeros(1, 1, 512, 8, dtype=torch.float16)  # (B, H, Tk, d)
    v = torch.full((1, 1, 512, 1), 200.0, dtype=torch.float16)
    cases["fp16_sum"] = {
        "exact": 200.0,
        "float32": float(tiled.tiled_attention_torch(q, k, v)),
        "input_dtype": float(pitfalls.wrong_tiled_statistics_dtype(q, k, v)),
        "keys": 512,
        "value": 200.0,
        "running_total": 512 * 200.0,
        "dtype_max": torch.finfo(torch.float16).max,
    }
    qb, kb = q.bfloat16(), k.bfloat16()
    vb = torch.cat([torch.zeros(256), torch.ones(256)])
    vb = vb.to(torch.bfloat16).view(1, 1, 512, 1)  # (B, H, Tk, dv)
    step = torch.tensor(256.0, dtype=torch.bfloat16)
    cases["bf16_block_1"] = {
        "exact": 0.5,
        "float32": float(tiled.tiled_attention_torch(qb, kb, vb, block_k=1)),
        "input_dtype": float(
            pitfalls.wrong_tiled_statistics_dtype(qb, kb, vb, block_k=1)
        ),
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

        def error(out, exact=exact):
            return float((out.double() - exact).abs().max())

        right = error(tiled.tiled_attention_torch(q, k, v))
        wrong = error(pitfalls.wrong_tiled_statistics_dtype(q, k, v))
        cases[name] = {
            "float32": right,
            "input_dtype": wrong,
            "ratio": wrong / right,
            "shape": list(q.shape),
            "block": tiled.BLOCK,
        }
    return cases


def combined_masks():
    """A key-padding mask OR the causal mask, on scores of zero."""
    import torch

    from mha_ref import torch_ref

    t = max(LENGTHS)
    padding = torch_ref.key_padding_mask(LENGTHS)  # (B, 1, 1, Tk)
    causal = torch_ref.causal_mask(t)  # (T, T)
    mask = padding | causal  # (B, 1, T, T): either one blocks
    zeros = torch.zeros(len(LENGTHS), 1, t, 1, dtype=torch.float64)
    values = torch.arange(1.0, t + 1, dtype=torch.float64).view(1, 1, t, 1)
    out, weights = torch_ref.attention(zeros, zeros, values, mask)
    # left padding: the first query of sequence 2 sees only padding
    left = torch.tensor([[False] * t, [True] * (t - 2) + [False] * 2])
    left_mask = torch_ref.key_padding_mask(left) | causal  # (B, 1, T, T)
    try:
        torch_ref.attention(zeros, zeros, values, left_mask)
        left_message = None
    except ValueError as error:
        left_message = str(error)
    # a bare (B, Tk) mask, B == Tq, is read as (Tq, Tk): wrong, silent
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(len(LENGTHS), 1, len(LENGTHS), 3, generator=gen)
    k = torch.randn(len(LENGTHS), 1, t, 3, generator=gen)
    bare = padding[:, 0, 0, :]  # (B, Tk)
    right_out, _ = torch_ref.attention(q, k, k, padding)
    bare_out, _ = torch_ref.attention(q, k, k, bare)
    return {
        "lengths": LENGTHS,
        "padding_shape": list(padding.shape),
        "causal_shape": list(causal.shape),
        "shape": list(mask.shape),
        "mask": mask[:, 0],
        "weights": weights[:, 0],
        "v": values.flatten(),
        "out": out[:, 0, :, 0],
        "left_message": left_message,
        "bare_difference": float((bare_out - right_out).abs().max()),
    }


def compute():
    import torch

    masked = {**attention_level(), **module_level()}
    return {
        "t": T,
        "blocked_row": BLOCKED_ROW,
        "masked": masked,
        "fills": fills(),
        "fill_scores": FILL_SCORES,
        "statistics": statistics(),
        "combined": combined_masks(),
        "torch": torch.__version__,
    }


ROW_TEXT = {
    "nan": "NaN",
    "zeros": "zeros",
    "mean": "the mean of all values (uniform weights)",
    "bias": "zeros (y = the output bias alone)",
    "other": "finite",
}


def _grads(r):
    if not r.get("grad"):
        return "none: runs without autograd"
    if r["nan"]:
        return f"{r['nan']} of {r['entries']} NaN"
    text = f"all {r['entries']} finite"
    if "masked_row_dq_max" in r:
        text += f"; that row's dq: {fmt(r['masked_row_dq_max'], 2)}"
    return text


def render(data, out):
    masked = data["masked"]
    labels = [
        ("ours", "`torch_ref.attention` (and the whole module)"),
        ("sdpa", "`F.scaled_dot_product_attention`"),
        ("mha_train", "`nn.MultiheadAttention`, train, need_weights=False"),
        (
            "mha_train_weights",
            "`nn.MultiheadAttention`, train, need_weights=True",
        ),
        ("mha_eval", "`nn.MultiheadAttention`, eval (fast path)"),
        ("fill_1e9", "`masked_fill(mask, -1e9)`, then softmax"),
        ("fill_inf", "`masked_fill(mask, -inf)`, then softmax"),
    ]
    rows = []
    for key, label in labels:
        r = masked[key]
        if r["raises"]:
            rows.append([label, "raises ValueError", "-", "-"])
            continue
        rows.append(
            [
                label,
                ROW_TEXT[r["row"]],
                "yes" if r["others_nan"] else "no",
                _grads(r),
            ]
        )
    out.table(
        "edges-masked-row",
        markdown_table(
            [
                "implementation",
                "output of the fully masked row",
                "NaN in other rows",
                "gradients (loss ignores that row)",
            ],
            rows,
            "llcl",
        ),
    )

    fill_labels = [
        ("inf_fill", "`masked_fill(mask, -inf)`"),
        ("min_fill", "`masked_fill(mask, finfo.min)`"),
        ("min_added", "`scores + where(mask, finfo.min, 0)`"),
        ("min_added_twice", "two such masks added"),
        ("fill_1e9", "`masked_fill(mask, -1e9)`"),
    ]
    rows = []
    for key, label in fill_labels:
        cells = [label]
        for dtype in ("float16", "bfloat16"):
            r = data["fills"][dtype]["rows"][key]
            if "error" in r:
                cells += ["RuntimeError", "RuntimeError"]
                continue
            cells += [
                fmt(r["partial_weights"][1]),
                fmt_list(r["full_weights"]).replace("nan", "NaN"),
            ]
        rows.append(cells)
    out.table(
        "edges-fills",
        markdown_table(
            [
                "fill",
                "float16: blocked weight",
                "float16: all blocked",
                "bfloat16: blocked weight",
                "bfloat16: all blocked",
            ],
            rows,
            "lrlrl",
        ),
    )

    st = data["statistics"]
    rows = [
        [
            f"float16, q = k = 0, v = {fmt(st['fp16_sum']['value'])}, "
            f"{st['fp16_sum']['keys']} keys",
            fmt(st["fp16_sum"]["exact"]),
            fmt(st["fp16_sum"]["float32"]),
            fmt(st["fp16_sum"]["input_dtype"]),
        ],
        [
            "bfloat16, block_k = 1, v = 256 zeros then 256 ones",
            fmt(st["bf16_block_1"]["exact"]),
            fmt(st["bf16_block_1"]["float32"]),
            fmt(st["bf16_block_1"]["input_dtype"]),
        ],
    ]
    for key, dtype in (
        ("fp16_random", "float16"),
        ("bf16_random", "bfloat16"),
    ):
        r = st[key]
        rows.append(
            [
                f"{dtype}, random, largest error vs float64",
                "-",
                fmt(r["float32"], 2),
                fmt(r["input_dtype"], 2),
            ]
        )
    out.table(
        "edges-statistics",
        markdown_table(
            [
                "case",
                "exact",
                "statistics in float32",
                "statistics in the input dtype",
            ],
            rows,
            "lrrr",
        ),
    )

    c = data["combined"]
    t = len(c["v"])
    rows = []
    for i in range(t):
        rows.append(
            [
                str(i),
                *(fmt(w, 3) for w in c["weights"][1][i]),
                fmt(c["out"][1][i]),
            ]
        )
    out.table(
        "edges-combined",
        markdown_table(
            ["query position", *(f"key {j}" for j in range(t)), "output"],
            rows,
            "r" * (t + 2),
        ),
    )
