"""The layer's backward pass: every gradient against autograd, and memory.

Gradients: numpy_ref.MultiHeadAttention.backward against torch autograd
through torch_ref.MultiHeadAttention (its own code, nn.Linear weights)
in float64, max |ours - autograd| per parameter, for a few layers.
Memory: peak bytes NumPy allocates (tracemalloc) in the plain and the
tiled attention backward as T grows; byte counts (to the KiB), not
times.
"""

from pipeline.output import fmt, markdown_table
from topics.online_softmax import (
    LENGTHS,
    SWEEP_BLOCK,
    SWEEP_D,
    SWEEP_LEAD,
    peak_bytes_numpy,
    sweep_summary,
)

DEPENDS = [
    "mha_ref/numpy_ref.py",
    "mha_ref/torch_ref.py",
    "mha_ref/tiled.py",
    "mha_ref/checks.py",
    "mha_ref/tolerances.py",
    "topics/online_softmax.py",
]

B, D_MODEL, N_HEAD = 2, 16, 4
# name: (Tq, Tk or None for self-attention, n_kv_head, rope, mask)
CONFIGS = {
    "self-causal": (6, None, N_HEAD, False, "causal"),
    "cross": (5, 9, N_HEAD, False, "padding"),
    "gqa-rope": (6, None, 2, True, "causal"),
}
PARAMS = ["x", "context", "Wq", "Wk", "Wv", "Wo", "bq", "bk", "bv", "bo"]
MIB_TICKS = [1, 2, 5, 10, 20, 50, 100, 200]  # the figure's y axis


def _mask(kind, tq, tk, rng):
    import numpy as np

    from mha_ref import numpy_ref

    if kind == "causal":
        return numpy_ref.causal_mask(tq)  # (Tq, Tq)
    # key padding: the last keys of the second sequence are padding
    lengths = np.array([tk, tk - 3])
    return numpy_ref.key_padding_mask(lengths, tk)  # (B, 1, 1, Tk)


def autograd_layer(layer, x, dy, mask, context):
    """Every gradient by autograd through torch_ref.MultiHeadAttention.

    The same weights, moved into nn.Linear's (out, in) layout; the
    gradients come back in numpy_ref's x @ W layout.
    """
    import torch

    from mha_ref import torch_ref

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


def gradients(seed=0):
    import numpy as np

    from mha_ref import numpy_ref

    rng = np.random.default_rng(seed)
    result = {}
    for name, (tq, tk, n_kv_head, rope, kind) in CONFIGS.items():
        layer = numpy_ref.MultiHeadAttention(
            D_MODEL,
            N_HEAD,
            n_kv_head=n_kv_head,
            bias=True,
            rope=rope,
            seed=seed,
        )
        x = rng.standard_normal((B, tq, D_MODEL))
        context = None
        if tk is not None:
            context = rng.standard_normal((B, tk, D_MODEL))
        mask = _mask(kind, tq, tk or tq, rng)
        dy = rng.standard_normal((B, tq, D_MODEL))
        ours = layer.backward(x, dy, mask, context)
        expected = autograd_layer(layer, x, dy, mask, context)
        if sorted(ours) != sorted(expected):
            raise ValueError(f"{name}: {sorted(ours)} != {sorted(expected)}")
        result[name] = {
            "tq": tq,
            "tk": tk or tq,
            "cross": tk is not None,
            "n_head": N_HEAD,
            "n_kv_head": n_kv_head,
            "rope": rope,
            "mask": kind,
            "diffs": {
                p: float(np.abs(ours[p] - expected[p]).max()) for p in ours
            },
        }
    return result


def rowsum_identity(seed=0):
    """max |rowsum(dA * A) - rowsum(dO * O)| on a random causal case."""
    import numpy as np

    from mha_ref import numpy_ref

    rng = np.random.default_rng(seed)
    q, k, v, dout = (
        rng.standard_normal((*SWEEP_LEAD, 64, SWEEP_D)) for _ in range(4)
    )
    out, weights = numpy_ref.attention(q, k, v, numpy_ref.causal_mask(64))
    d_weights = dout @ np.swapaxes(v, -2, -1)  # dA = dO V^T
    via_a = np.sum(d_weights * weights, axis=-1)  # (..., T)
    via_o = np.sum(dout * out, axis=-1)  # (..., T)
    return float(np.abs(via_a - via_o).max())


def peak_kib(fn, *args, **kwargs):
    """peak_bytes_numpy rounded down to a whole KiB (1024 bytes).

    The arrays' bytes are the same on every run; one small Python object
    (56 bytes) is alive at the peak on some runs and not on others. The
    plain backward's peaks end 490 to 546 bytes past a KiB, so rounding
    to the nearest KiB flipped between builds; rounding down does not.
    """
    return 1024 * (peak_bytes_numpy(fn, *args, **kwargs) // 1024)


def memory(seed=0):
    """Peak bytes of the plain and tiled backward, causal, as T grows."""
    import numpy as np
    import torch

    from mha_ref import numpy_ref, tiled

    rng = np.random.default_rng(seed)
    blocks = {"block_q": SWEEP_BLOCK, "block_k": SWEEP_BLOCK}
    plain, tiles = [], []
    for t in LENGTHS:
        q, k, v, dout = (
            rng.standard_normal((*SWEEP_LEAD, t, SWEEP_D)) for _ in range(4)
        )
        mask = numpy_ref.causal_mask(t)
        plain.append(
            peak_kib(numpy_ref.attention_backward, q, k, v, dout, mask)
        )
        tiles.append(
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
        if t == LENGTHS[0]:  # the tiled gradients equal the plain ones
            ref = numpy_ref.attention_backward(q, k, v, dout, mask)
            got = tiled.tiled_attention_backward_numpy(
                q, k, v, dout, causal=True, **blocks
            )
            got_t = tiled.tiled_attention_backward_torch(
                *(torch.from_numpy(a) for a in (q, k, v, dout)),
                causal=True,
                **blocks,
            )
            tiled_diff = max(
                max(
                    float(np.abs(g - r).max())
                    for g, r in zip(got, ref, strict=True)
                ),
                max(
                    float(np.abs(g.numpy() - r).max())
                    for g, r in zip(got_t, ref, strict=True)
                ),
            )
    itemsize = np.dtype(np.float64).itemsize
    heads = int(np.prod(SWEEP_LEAD))
    return {
        **sweep_summary(plain, tiles),
        # one (T, T) matrix of all heads, as A, dA or dS each are
        "matrix_mib": [heads * t * t * itemsize / 2**20 for t in LENGTHS],
        # the plain peak at the largest T, in (T, T) matrices of all heads
        "plain_in_matrices": plain[-1] / (heads * LENGTHS[-1] ** 2 * itemsize),
        "tiled_max_diff": tiled_diff,
        "tiled_diff_length": LENGTHS[0],
    }


def compute():
    from mha_ref.tolerances import atol

    grads = gradients()
    return {
        "configs": grads,
        "max_abs_diff": max(max(c["diffs"].values()) for c in grads.values()),
        "tolerance": atol("float64"),
        "d_model": D_MODEL,
        "batch": B,
        "rowsum_identity_diff": rowsum_identity(),
        "memory": memory(),
    }


def _mib(n_bytes):
    return n_bytes / 2**20


def _diff(x):
    return "0" if x == 0 else f"{x:.1e}"


def render(data, out):
    configs = data["configs"]
    rows = [
        [f"`{p}`"]
        + [
            _diff(c["diffs"][p]) if p in c["diffs"] else "–"
            for c in configs.values()
        ]
        for p in PARAMS
    ]
    out.table(
        "layer-backward-grads",
        markdown_table(
            ["gradient", "self", "cross", "GQA"],
            rows,
            "lrrr",
        ),
    )
    m = data["memory"]
    mem_rows = [
        [str(t), fmt(s, 3), fmt(_mib(p), 3), fmt(_mib(b), 3), fmt(p / b, 3)]
        for t, s, p, b in zip(
            m["lengths"],
            m["matrix_mib"],
            m["plain_peak_bytes"],
            m["tiled_peak_bytes"],
            strict=True,
        )
    ]
    out.table(
        "layer-backward-memory",
        markdown_table(
            [
                "T",
                "one T x T (MiB)",
                "plain (MiB)",
                "tiled (MiB)",
                "plain / tiled",
            ],
            mem_rows,
            "rrrrr",
        ),
    )

    def draw(fig, theme):
        ax = fig.subplots()
        lengths = m["lengths"]
        ax.plot(
            lengths,
            [_mib(x) for x in m["plain_peak_bytes"]],
            "o-",
            color=theme.series[1],
            label="plain backward (T x T)",
        )
        ax.plot(
            lengths,
            [_mib(x) for x in m["tiled_peak_bytes"]],
            "s-",
            color=theme.series[0],
            label=f"tiled backward ({m['block']} x {m['block']})",
        )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(lengths, [str(t) for t in lengths])
        ax.set_yticks(MIB_TICKS, [str(t) for t in MIB_TICKS])
        ax.minorticks_off()
        ax.set_xlabel("sequence length T (log scale)")
        ax.set_ylabel("peak memory (MiB, log scale)")
        ax.set_title("Peak memory of the backward pass")
        ax.grid(True, alpha=0.4)
        ax.set_ylim(0.8, 250)  # room for the legend above the lines
        ax.legend(loc="upper left")

    first, last = m["lengths"][0], m["lengths"][-1]
    out.figure(
        "layer-backward-memory",
        draw,
        figsize=(5.6, 3.4),
        alt=(
            f"Log-log line chart of peak memory against sequence length T "
            f"from {first} to {last}, causal attention backward in NumPy "
            f"with {m['n_head']} heads of size {m['d_head']} in float64. "
            f"The plain backward grows {fmt(m['plain_growth'], 2)} times "
            f"when T doubles and reaches "
            f"{fmt(_mib(m['plain_peak_bytes'][-1]), 3)} MiB; the tiled "
            f"backward grows {fmt(m['tiled_growth'], 2)} times and reaches "
            f"{fmt(_mib(m['tiled_peak_bytes'][-1]), 3)} MiB."
        ),
    )
