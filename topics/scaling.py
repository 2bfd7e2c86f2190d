"""Why divide by sqrt(d_k): the [8, -8] example and a head-size sweep."""

from pipeline.output import fmt, fmt_list, markdown_table

DEPENDS = ["mha_ref/numpy_ref.py", "mha_ref/checks.py"]
HEAD_SIZES = [4, 8, 16, 32, 64, 128, 256, 512, 1024]
N_ROWS, N_KEYS = 500, 16


def sweep(seed=0):
    """Median over rows of the largest softmax weight, per head size."""
    import numpy as np

    from mha_ref import numpy_ref

    rng = np.random.default_rng(seed)
    unscaled, scaled = [], []
    for d in HEAD_SIZES:
        q = rng.standard_normal((N_ROWS, 1, d))  # unit-variance entries
        k = rng.standard_normal((N_ROWS, N_KEYS, d))
        scores = (q * k).sum(axis=-1)  # (rows, keys), variance d
        unscaled.append(np.median(numpy_ref.softmax(scores).max(axis=-1)))
        weights = numpy_ref.softmax(scores / np.sqrt(d))
        scaled.append(np.median(weights.max(axis=-1)))
    return {
        "head_sizes": HEAD_SIZES,
        "n_rows": N_ROWS,
        "n_keys": N_KEYS,
        "uniform_weight": 1 / N_KEYS,
        "max_weight_unscaled": [float(w) for w in unscaled],
        "max_weight_scaled": [float(w) for w in scaled],
    }


def compute():
    import numpy as np

    from mha_ref import numpy_ref

    d_head, d_model = 64, 512
    scores = np.array([8.0, -8.0])
    shift = np.array([1000.0, 1000.0])
    return {
        "d_head": d_head,
        "d_model": d_model,
        "sqrt_d_head": float(np.sqrt(d_head)),
        "sqrt_d_model": float(np.sqrt(d_model)),
        "scores": scores,
        "unscaled_weights": numpy_ref.softmax(scores),
        "scaled_scores": scores / np.sqrt(d_head),
        "scaled_weights": numpy_ref.softmax(scores / np.sqrt(d_head)),
        "d_model_scaled_scores": scores / np.sqrt(d_model),
        "d_model_scaled_weights": numpy_ref.softmax(scores / np.sqrt(d_model)),
        "shift_input": shift,
        "shift_output": numpy_ref.softmax(shift),
        "sweep": sweep(),
    }


def render(data, out):
    d_head, d_model = data["d_head"], data["d_model"]
    rows = [
        ["none", fmt_list(data["scores"]), fmt_list(data["unscaled_weights"])],
        [
            f"√d_head = √{d_head} = {fmt(data['sqrt_d_head'])}",
            fmt_list(data["scaled_scores"]),
            fmt_list(data["scaled_weights"]),
        ],
        [
            f"√d_model = √{d_model} ≈ {fmt(data['sqrt_d_model'])}",
            fmt_list(data["d_model_scaled_scores"]),
            fmt_list(data["d_model_scaled_weights"]),
        ],
    ]
    out.table(
        "scaling",
        markdown_table(
            ["scores divided by", "scores", "softmax weights"], rows, "lll"
        ),
    )

    sweep = data["sweep"]

    def draw(fig, theme):
        ax = fig.subplots()
        sizes = sweep["head_sizes"]
        ax.plot(
            sizes,
            sweep["max_weight_unscaled"],
            "o-",
            color=theme.series[1],
            label="q·k (no scaling)",
        )
        ax.plot(
            sizes,
            sweep["max_weight_scaled"],
            "s-",
            color=theme.series[0],
            label="q·k / √d",
        )
        ax.axhline(
            sweep["uniform_weight"],
            color=theme.muted,
            ls=":",
            label=f"uniform (1/{sweep['n_keys']})",
        )
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("head size d (log scale)")
        ax.set_ylabel("largest softmax weight\n(median over rows)")
        ax.set_title(
            f"Sharpness vs head size ({sweep['n_keys']} keys, "
            "unit-variance q and k)"
        )
        ax.grid(True, alpha=0.4)
        ax.legend(loc="center right")

    first, last = sweep["head_sizes"][0], sweep["head_sizes"][-1]
    unscaled, scaled = sweep["max_weight_unscaled"], sweep["max_weight_scaled"]
    out.figure(
        "scaling-sweep",
        draw,
        alt=(
            f"Line chart of the largest softmax weight against head size d "
            f"from {first} to {last}, median over {sweep['n_rows']} random "
            f"rows of {sweep['n_keys']} keys. Without scaling it rises from "
            f"{fmt(unscaled[0], 2)} to {fmt(unscaled[-1], 2)}; divided by "
            f"the square root of d it stays between {fmt(min(scaled), 2)} "
            f"and {fmt(max(scaled), 2)}."
        ),
    )
